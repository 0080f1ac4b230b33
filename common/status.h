// Status: the error type used everywhere inside dsfs (modelled on leveldb::Status).
// errno values are turned into a Status once, at the OS edge (FromErrno), and back into an errno
// once, at the FUSE edge (ToErrno).
#pragma once

#include <string>
#include <string_view>

namespace dsfs {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kNotFound,         // a path, key or store that does not exist
    kCorruption,       // stored bytes fail a checksum or a structural check
    kInvalidArgument,  // bad user input (options, paths)
    kIOError,          // the OS failed an operation
    kNotSupported,     // e.g. an unknown store format version
    kNoSpace,          // the disk is full
    kExists,           // refusing to overwrite
    kBusy,             // e.g. a mountpoint already in use
    kReadOnly,         // a write on the read-only tree
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status NotSupported(std::string_view msg) { return Status(Code::kNotSupported, msg); }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status Exists(std::string_view msg) { return Status(Code::kExists, msg); }
  static Status Busy(std::string_view msg) { return Status(Code::kBusy, msg); }
  static Status ReadOnly(std::string_view msg) { return Status(Code::kReadOnly, msg); }
  // Maps an errno value to the matching code; the message is "context: strerror(err)".
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  const std::string& message() const { return msg_; }
  // "OK" or the message alone: messages are written to read as one complete error line.
  std::string ToString() const { return ok() ? "OK" : msg_; }
  // The errno a FUSE reply should carry for this status.
  int ToErrno() const;
  // Returns a copy whose message is "prefix: message".
  Status WithContext(std::string_view prefix) const;

 private:
  Status(Code code, std::string_view msg) : code_(code), msg_(msg) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

#define DSFS_RETURN_IF_ERROR(expr)     \
  do {                                 \
    ::dsfs::Status _dsfs_s = (expr);   \
    if (!_dsfs_s.ok()) return _dsfs_s; \
  } while (0)

}  // namespace dsfs
