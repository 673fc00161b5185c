#include "monitor/grpc_status.h"

#include <charconv>
#include <string>

namespace pdpm::monitor {

grpc::StatusCode ToGrpcCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return grpc::StatusCode::OK;
    case StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kAlreadyExists: return grpc::StatusCode::ALREADY_EXISTS;
    case StatusCode::kPermissionDenied: return grpc::StatusCode::PERMISSION_DENIED;
    case StatusCode::kOutOfRange: return grpc::StatusCode::OUT_OF_RANGE;
    case StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kCorruption: return grpc::StatusCode::DATA_LOSS;
    case StatusCode::kIOError: return grpc::StatusCode::INTERNAL;
    case StatusCode::kTimeout: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kStaleEpoch: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kNotSupported: return grpc::StatusCode::UNIMPLEMENTED;
    case StatusCode::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kAborted: return grpc::StatusCode::ABORTED;
    case StatusCode::kTooLarge: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kInternal: return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status ToGrpcStatus(const Status& s, grpc::ServerContext* context) {
  if (s.ok()) return grpc::Status::OK;
  context->AddTrailingMetadata(kStatusCodeTrailer, std::to_string(static_cast<unsigned>(s.code())));
  return grpc::Status(ToGrpcCode(s.code()), std::string(s.message()));
}

Status FromGrpcStatus(const grpc::Status& s, const grpc::ClientContext& context) {
  if (s.ok()) return Status::OK();
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kStatusCodeTrailer);
  if (it != trailers.end()) {
    unsigned code = 0;
    auto [ptr, ec] =
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), code);
    if (ec == std::errc() && code > 0 && code <= static_cast<unsigned>(StatusCode::kInternal)) {
      return Status(static_cast<StatusCode>(code), s.error_message());
    }
  }
  StatusCode code = StatusCode::kInternal;
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED: code = StatusCode::kUnavailable; break;
    case grpc::StatusCode::DEADLINE_EXCEEDED: code = StatusCode::kTimeout; break;
    case grpc::StatusCode::INVALID_ARGUMENT: code = StatusCode::kInvalidArgument; break;
    case grpc::StatusCode::NOT_FOUND: code = StatusCode::kNotFound; break;
    case grpc::StatusCode::ALREADY_EXISTS: code = StatusCode::kAlreadyExists; break;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED: code = StatusCode::kPermissionDenied; break;
    case grpc::StatusCode::OUT_OF_RANGE: code = StatusCode::kOutOfRange; break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: code = StatusCode::kResourceExhausted; break;
    case grpc::StatusCode::DATA_LOSS: code = StatusCode::kCorruption; break;
    case grpc::StatusCode::UNIMPLEMENTED: code = StatusCode::kNotSupported; break;
    case grpc::StatusCode::FAILED_PRECONDITION: code = StatusCode::kFailedPrecondition; break;
    case grpc::StatusCode::ABORTED: code = StatusCode::kAborted; break;
    default: break;
  }
  return Status(code, "monitor call failed: " + s.error_message());
}

}  // namespace pdpm::monitor
