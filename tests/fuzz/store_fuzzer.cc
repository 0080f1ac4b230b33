// libFuzzer entry point of FuzzStore (tests/fuzz/fuzz_targets.h).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dsfs::fuzz::FuzzStore(data, size);
}
