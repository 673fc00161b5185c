// MonitorClient: the C++ caller's side of pdpm.v1.Monitor, for servers, the
// client library and the CLI. Each call returns a Status with the exact code
// the monitor returned (kPermissionDenied for a wrong secret, kNotFound for
// an unknown server, ...), kUnavailable when the monitor cannot be reached
// and kTimeout when it did not answer within the call timeout.
//
// The cluster secret from the options is filled into every request that
// carries a secret field the caller left empty. Thread-safe: one client may be shared by
// many threads (gRPC channels multiplex calls).
//
// High availability: the address may list every monitor ("a:7400,b:7400,
// c:7400"). A call goes to the monitor that last answered; when a monitor
// cannot be reached, or refuses with kUnavailable (a standby: "not the
// leader; leader is ADDRESS"), the call moves on — to the named leader
// (added to the list if it was not in it), else to the next monitor — with
// a short pause after each futile round, until the call timeout. With a
// single address only a named leader is followed; an unreachable monitor
// fails the call at once, as before. A call is repeated only after a
// refusal or a lost connection, and every monitor RPC is safe to repeat
// except that a repeated first registration may add a second, never
// heartbeating, member.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "pdpm/v1/monitor.grpc.pb.h"

namespace pdpm::monitor {

// How a monitor that is not the leader refuses a call (kUnavailable):
// "not the leader; leader is HOST:PORT", or "not the leader; no leader is
// elected yet".
inline constexpr char kNotLeaderMessage[] = "not the leader";
inline constexpr char kLeaderIsMessage[] = "; leader is ";

struct MonitorClientOptions {
  std::string cluster_secret;                    // "" for callers without one
  std::chrono::milliseconds call_timeout{5000};  // per call
};

class MonitorClient {
 public:
  // `address` is host:port or a comma-separated list of them. Connecting
  // is lazy: the first call (or WaitReady) establishes the channels.
  MonitorClient(std::string address, MonitorClientOptions options);

  // Waits until a monitor (the leader) answers a status call;
  // kUnavailable/kTimeout when none does within `timeout`.
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
  Status ReportUnreachable(v1::ReportUnreachableRequest req, v1::ReportUnreachableResponse* resp);
  Status ReserveLocalSegment(v1::ReserveLocalSegmentRequest req,
                             v1::ReserveLocalSegmentResponse* resp);
  Status DrainServer(v1::DrainServerRequest req, v1::DrainServerResponse* resp);
  // Splits of table segments (ViewManager::SplitSegment and the others).
  Status SplitSegment(v1::SplitSegmentRequest req, v1::SplitSegmentResponse* resp);
  Status CommitSplit(v1::CommitSplitRequest req, v1::CommitSplitResponse* resp);
  Status CancelSplit(v1::CancelSplitRequest req, v1::CancelSplitResponse* resp);

  // The address list as given.
  const std::string& address() const { return address_; }

 private:
  struct Endpoint {
    std::string address;
    std::unique_ptr<v1::Monitor::Stub> stub;
  };
  template <typename Req, typename Resp>
  using StubMethod = grpc::Status (v1::Monitor::Stub::*)(grpc::ClientContext*, const Req&, Resp*);
  // One unary call, following the leader, within `timeout`.
  template <typename Req, typename Resp>
  Status Call(StubMethod<Req, Resp> method, const Req& req, Resp* resp,
              std::chrono::milliseconds timeout);
  template <typename Req, typename Resp>
  Status Call(StubMethod<Req, Resp> method, const Req& req, Resp* resp) {
    return Call(method, req, resp, options_.call_timeout);
  }
  // The endpoint for `address`, added when unknown. Requires mu_.
  size_t EndpointFor(const std::string& address);

  const std::string address_;
  const MonitorClientOptions options_;
  const size_t configured_;  // endpoints given (more may be learnt)
  std::mutex mu_;
  // Never shrinks; entries are never moved (calls hold pointers).
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  size_t leader_ = 0;  // index of the endpoint that answered last
};

}  // namespace pdpm::monitor
