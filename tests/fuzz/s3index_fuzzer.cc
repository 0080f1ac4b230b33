// libFuzzer entry point of FuzzS3Index (tests/fuzz/fuzz_targets.h).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dsfs::fuzz::FuzzS3Index(data, size);
}
