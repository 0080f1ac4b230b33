// The entry point of the dsfs_layer_check_* executables (tests/CMakeLists.txt): each links one
// layer's library whole, with only the layers it declares below it. A call from that layer
// into a layer above it is then an undefined reference, and the build fails. Never run.
int main() { return 0; }
