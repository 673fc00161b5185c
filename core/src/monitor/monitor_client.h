// MonitorClient: the C++ caller's side of pdpm.v1.Monitor, for servers, the
// client library and the CLI. Each call returns a Status with the exact code
// the monitor returned (kPermissionDenied for a wrong secret, kNotFound for
// an unknown server, ...), kUnavailable when the monitor cannot be reached
// and kTimeout when it did not answer within the call timeout.
//
// The cluster secret from the options is filled into every request that
// carries a secret field the caller left empty. Thread-safe: one client may be shared by
// many threads (gRPC channels multiplex calls).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "pdpm/v1/monitor.grpc.pb.h"

namespace pdpm::monitor {

struct MonitorClientOptions {
  std::string cluster_secret;                    // "" for callers without one
  std::chrono::milliseconds call_timeout{5000};  // per call
};

class MonitorClient {
 public:
  // `address` is host:port. Connecting is lazy: the first call (or
  // WaitReady) establishes the channel.
  MonitorClient(std::string address, MonitorClientOptions options);

  // Waits until the monitor answers a status call; kUnavailable/kTimeout
  // when it does not within `timeout`.
  Status WaitReady(std::chrono::milliseconds timeout);

  Status RegisterServer(v1::RegisterServerRequest req, v1::RegisterServerResponse* resp);
  Status Heartbeat(v1::HeartbeatRequest req, v1::HeartbeatResponse* resp);
  Status AllocateSegment(v1::AllocateSegmentRequest req, v1::AllocateSegmentResponse* resp);
  Status FreeSegment(v1::FreeSegmentRequest req, v1::FreeSegmentResponse* resp);
  // `resp->unchanged()` is true (and only the epoch set) when known_epoch
  // is still current.
  Status GetMapping(uint64_t known_epoch, v1::GetMappingResponse* resp);
  // Keys of `segments` (all when empty); needs the cluster secret.
  Status GetSegmentKeys(const std::vector<uint64_t>& segments, v1::GetSegmentKeysResponse* resp);
  Status GetClusterStatus(v1::ClusterStatus* status);
  Status ReportReplica(v1::ReportReplicaRequest req, v1::ReportReplicaResponse* resp);
  Status DrainServer(v1::DrainServerRequest req, v1::DrainServerResponse* resp);

  const std::string& address() const { return address_; }

 private:
  template <typename Req, typename Resp>
  using StubMethod = grpc::Status (v1::Monitor::Stub::*)(grpc::ClientContext*, const Req&, Resp*);
  // One unary call with the configured deadline.
  template <typename Req, typename Resp>
  Status Call(StubMethod<Req, Resp> method, const Req& req, Resp* resp);

  const std::string address_;
  const MonitorClientOptions options_;
  std::unique_ptr<v1::Monitor::Stub> stub_;
};

}  // namespace pdpm::monitor
