#include "tests/support/fakes/faulty_store.h"

#include <random>
#include <string>
#include <thread>
#include <utility>

namespace dsfs {
namespace {

struct CopyPin : PinnedValue::Pin {
  std::string bytes;
  PinnedValue inner;
};

class FaultyReader final : public KvReader {
 public:
  FaultyReader(std::unique_ptr<KvReader> base, FaultPolicy policy,
               std::chrono::milliseconds timeout)
      : base_(std::move(base)), policy_(std::move(policy)), timeout_(timeout) {}

  Status Get(std::string_view key, PinnedValue* value) override {
    Fault fault = policy_(key);
    if (fault == Fault::kError) return Status::IOError("injected read error");
    if (fault == Fault::kTimeout) return TimeOut();
    DSFS_RETURN_IF_ERROR(base_->Get(key, value));
    return Inject(fault, value);
  }
  Status Seek(std::string_view key, std::string* found_key, PinnedValue* value) override {
    DSFS_RETURN_IF_ERROR(base_->Seek(key, found_key, value));
    // The fault is decided by the key actually found (e.g. a payload group).
    Fault fault = policy_(*found_key);
    if (fault == Fault::kError) return Status::IOError("injected read error");
    if (fault == Fault::kTimeout) return TimeOut();
    return Inject(fault, value);
  }
  std::string_view Name() const override { return base_->Name(); }
  void ReleaseCachedMemory() override { base_->ReleaseCachedMemory(); }
  void WillNeed(std::string_view range) override { base_->WillNeed(range); }

 private:
  Status TimeOut() {
    std::this_thread::sleep_for(timeout_);
    return Status::IOError("injected read timed out");
  }

  Status Inject(Fault fault, PinnedValue* value) {
    if (fault == Fault::kNone) return Status::OK();
    auto pin = std::make_unique<CopyPin>();
    pin->bytes.assign(value->data());
    if (fault == Fault::kFlipBit && !pin->bytes.empty()) {
      pin->bytes[pin->bytes.size() / 2] ^= 0x10;
    } else if (fault == Fault::kTruncate) {
      pin->bytes.resize(pin->bytes.size() / 2);
    }
    pin->inner = std::move(*value);
    std::string_view view = pin->bytes;
    value->Set(view, std::move(pin));
    return Status::OK();
  }

  std::unique_ptr<KvReader> base_;
  FaultPolicy policy_;
  std::chrono::milliseconds timeout_;
};

thread_local uint64_t t_injected = 0;

}  // namespace

std::unique_ptr<KvReader> NewFaultyReader(std::unique_ptr<KvReader> base, FaultPolicy policy,
                                          std::chrono::milliseconds timeout) {
  return std::make_unique<FaultyReader>(std::move(base), std::move(policy), timeout);
}

FaultPolicy RandomFaults(double rate, uint64_t seed, std::string_view prefixes,
                         std::vector<Fault> faults) {
  // One counter shared by all threads, hashed: deterministic per call order, no lock.
  auto counter = std::make_shared<std::atomic<uint64_t>>(seed);
  const uint64_t threshold = static_cast<uint64_t>(rate * 1e6);
  return [counter, threshold, prefixes = std::string(prefixes),
          faults = std::move(faults)](std::string_view key) {
    if (key.empty() || prefixes.find(key[0]) == std::string::npos || faults.empty()) {
      return Fault::kNone;
    }
    std::mt19937_64 rng(counter->fetch_add(1, std::memory_order_relaxed));
    uint64_t r = rng();
    if (r % 1000000 >= threshold) return Fault::kNone;
    ++t_injected;
    return faults[(r / 1000000) % faults.size()];
  };
}

uint64_t InjectedFaults() { return t_injected; }

}  // namespace dsfs
