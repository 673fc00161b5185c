// Status ↔ grpc::Status for PDPM's gRPC services. Each pdpm StatusCode maps
// to the nearest gRPC code (what Go and other clients see); the exact code
// also travels in the trailing metadata key "pdpm-code", so a C++ caller
// gets back precisely the Status the service returned.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "common/status.h"

namespace pdpm::monitor {

inline constexpr char kStatusCodeTrailer[] = "pdpm-code";

grpc::StatusCode ToGrpcCode(StatusCode code);

// Converts `s` for a service reply; records the exact code in `context`'s
// trailing metadata.
grpc::Status ToGrpcStatus(const Status& s, grpc::ServerContext* context);

// Converts a call's result. Without a "pdpm-code" trailer (the call never
// reached a PDPM service: connection refused, deadline) the gRPC code is
// mapped: UNAVAILABLE → kUnavailable, DEADLINE_EXCEEDED → kTimeout, ...
Status FromGrpcStatus(const grpc::Status& s, const grpc::ClientContext& context);

}  // namespace pdpm::monitor
