#include "common/status.h"

#include <cstring>

namespace pdpm {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kIOError: return "io_error";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kStaleEpoch: return "stale_epoch";
    case StatusCode::kNotSupported: return "not_supported";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kTooLarge: return "too_large";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string_view message) : code_(code) {
  if (code_ != StatusCode::kOk) message_ = std::make_shared<const std::string>(message);
}

Status Status::FromErrno(std::string_view m, int err) {
  std::string msg(m);
  msg += ": ";
  char buffer[128];
  msg += strerror_r(err, buffer, sizeof(buffer));  // GNU: the message, wherever it lives
  return Status(StatusCode::kIOError, msg);
}

std::string_view Status::message() const {
  return message_ ? std::string_view(*message_) : std::string_view();
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message();
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message();
  return Status(code_, msg);
}

}  // namespace pdpm
