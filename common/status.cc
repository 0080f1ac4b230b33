#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace dsfs {

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT:
      return Status(Code::kNotFound, msg);
    case ENOSPC:
    case EDQUOT:
      return Status(Code::kNoSpace, msg);
    case EEXIST:
      return Status(Code::kExists, msg);
    case EBUSY:
      return Status(Code::kBusy, msg);
    case EROFS:
      return Status(Code::kReadOnly, msg);
    case EINVAL:
    case ENOTDIR:
    case EISDIR:
      return Status(Code::kInvalidArgument, msg);
    default:
      return Status(Code::kIOError, msg);
  }
}

int Status::ToErrno() const {
  switch (code_) {
    case Code::kOk:
      return 0;
    case Code::kNotFound:
      return ENOENT;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kNotSupported:
      return ENOTSUP;
    case Code::kNoSpace:
      return ENOSPC;
    case Code::kExists:
      return EEXIST;
    case Code::kBusy:
      return EBUSY;
    case Code::kReadOnly:
      return EROFS;
    case Code::kCorruption:
    case Code::kIOError:
      return EIO;
  }
  return EIO;
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok()) return *this;
  std::string msg(prefix);
  msg += ": ";
  msg += msg_;
  return Status(code_, msg);
}

}  // namespace dsfs
