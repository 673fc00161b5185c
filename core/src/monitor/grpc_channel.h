// The gRPC channels of the control plane (monitor clients, the monitor's
// etcd client).
#pragma once

#include <grpcpp/channel.h>

#include <memory>
#include <string>

namespace pdpm::monitor {

// An insecure channel to `address` that reconnects quickly: a peer back
// from a crash (a monitor, an etcd member) is wanted again within a
// failover, not after gRPC's default backoff of many seconds.
std::shared_ptr<grpc::Channel> NewControlChannel(const std::string& address);

}  // namespace pdpm::monitor
