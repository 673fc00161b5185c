// Status: the result of an operation that can fail. Every module boundary in
// PDPM returns a Status (or fills an out-parameter and returns a Status);
// exceptions never cross one.
//
// A Status is cheap to copy when ok (no allocation). Codes are stable: they
// travel on the wire (as uint16) and through the C ABI, so never renumber.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace pdpm {

enum class StatusCode : uint16_t {
  kOk = 0,
  kInvalidArgument = 1,  // malformed request or bad parameter
  kNotFound = 2,         // no such object, address, key, file
  kAlreadyExists = 3,
  kPermissionDenied = 4,     // wrong or missing access key / secret
  kOutOfRange = 5,           // offset/length outside a registered range
  kResourceExhausted = 6,    // device or pool full, too many outstanding ops
  kCorruption = 7,           // checksum or format mismatch on PM or wire
  kIOError = 8,              // an OS call failed
  kTimeout = 9,              // a deadline passed
  kUnavailable = 10,         // peer dead, disconnected or not reachable
  kStaleEpoch = 11,          // request carried an old cluster epoch
  kNotSupported = 12,        // e.g. no RDMA device, DAX not available
  kFailedPrecondition = 13,  // state does not allow it (foreign device, ...)
  kAborted = 14,             // transaction conflict: retry
  kTooLarge = 15,            // frame, object or value over its limit
  kInternal = 16,            // a bug: an invariant did not hold
};

// Stable lower-case name of a code ("permission_denied"), for logs and CLIs.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string_view message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view m) { return {StatusCode::kInvalidArgument, m}; }
  static Status NotFound(std::string_view m) { return {StatusCode::kNotFound, m}; }
  static Status AlreadyExists(std::string_view m) { return {StatusCode::kAlreadyExists, m}; }
  static Status PermissionDenied(std::string_view m) { return {StatusCode::kPermissionDenied, m}; }
  static Status OutOfRange(std::string_view m) { return {StatusCode::kOutOfRange, m}; }
  static Status ResourceExhausted(std::string_view m) {
    return {StatusCode::kResourceExhausted, m};
  }
  static Status Corruption(std::string_view m) { return {StatusCode::kCorruption, m}; }
  static Status IOError(std::string_view m) { return {StatusCode::kIOError, m}; }
  // An IOError carrying strerror(err) after the message.
  static Status FromErrno(std::string_view m, int err);
  static Status Timeout(std::string_view m) { return {StatusCode::kTimeout, m}; }
  static Status Unavailable(std::string_view m) { return {StatusCode::kUnavailable, m}; }
  static Status StaleEpoch(std::string_view m) { return {StatusCode::kStaleEpoch, m}; }
  static Status NotSupported(std::string_view m) { return {StatusCode::kNotSupported, m}; }
  static Status FailedPrecondition(std::string_view m) {
    return {StatusCode::kFailedPrecondition, m};
  }
  static Status Aborted(std::string_view m) { return {StatusCode::kAborted, m}; }
  static Status TooLarge(std::string_view m) { return {StatusCode::kTooLarge, m}; }
  static Status Internal(std::string_view m) { return {StatusCode::kInternal, m}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  std::string_view message() const;
  // "permission_denied: segment key mismatch"
  std::string ToString() const;

  // Prefixes the message with context: "open /dev/dax0.0: <message>".
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::shared_ptr<const std::string> message_;  // null when ok
};

inline bool operator==(const Status& a, StatusCode c) {
  return a.code() == c;
}

}  // namespace pdpm

// Returns early from the enclosing function when `expr` is not ok.
#define PDPM_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::pdpm::Status pdpm_status_ = (expr);        \
    if (!pdpm_status_.ok()) return pdpm_status_; \
  } while (0)
