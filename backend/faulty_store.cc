#include "backend/faulty_store.h"

#include <string>
#include <utility>

namespace dsfs {
namespace {

struct CopyPin : PinnedValue::Pin {
  std::string bytes;
  PinnedValue inner;
};

class FaultyReader final : public KvReader {
 public:
  FaultyReader(std::unique_ptr<KvReader> base, FaultPolicy policy)
      : base_(std::move(base)), policy_(std::move(policy)) {}

  Status Get(std::string_view key, PinnedValue* value) override {
    Fault fault = policy_(key);
    if (fault == Fault::kError) return Status::IOError("injected read error");
    DSFS_RETURN_IF_ERROR(base_->Get(key, value));
    return Inject(fault, value);
  }
  Status Seek(std::string_view key, std::string* found_key, PinnedValue* value) override {
    DSFS_RETURN_IF_ERROR(base_->Seek(key, found_key, value));
    // The fault is decided by the key actually found (e.g. a payload group).
    Fault fault = policy_(*found_key);
    if (fault == Fault::kError) return Status::IOError("injected read error");
    return Inject(fault, value);
  }
  std::string_view Name() const override { return base_->Name(); }

 private:
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
};

}  // namespace

std::unique_ptr<KvReader> NewFaultyReader(std::unique_ptr<KvReader> base, FaultPolicy policy) {
  return std::make_unique<FaultyReader>(std::move(base), std::move(policy));
}

}  // namespace dsfs
