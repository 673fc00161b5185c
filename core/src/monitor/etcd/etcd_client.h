// EtcdClient: the few etcd v3 calls the monitor makes (KV Range and Txn,
// Lease grant/keep-alive/revoke), over gRPC to a list of etcd members.
//
// Every call has one deadline (the call timeout). Within it, an attempt
// that fails because the member is unreachable, has no Raft leader or does
// not answer in time is repeated on the next member; any other error
// returns at once. Consequence for callers: a Txn that timed out may still
// have been applied — the monitor's transactions are written so that a
// repeat fails its compare and the failure branch shows whether the first
// attempt landed (see etcd_view_store.h).
//
// Errors: kUnavailable (no member reachable / no quorum), kTimeout (the
// deadline passed), kNotFound (an unknown lease), kInvalidArgument (a bad
// endpoint list), others mapped from the gRPC code. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "etcd/api_subset.grpc.pb.h"

namespace pdpm::monitor {

class EtcdClient {
 public:
  // `endpoints`: "host:port,host:port,..." (an optional http:// in front of
  // each is accepted and dropped: etcd's own notation).
  static Status Create(const std::string& endpoints, std::chrono::milliseconds call_timeout,
                       std::unique_ptr<EtcdClient>* client);

  // A linearizable read of one key; `*found` false when it does not exist.
  Status Get(const std::string& key, etcdserverpb::KeyValue* kv, bool* found);
  Status Txn(const etcdserverpb::TxnRequest& req, etcdserverpb::TxnResponse* resp);

  // A new lease of `ttl_seconds`; `*granted_seconds` is what etcd granted
  // (it raises a TTL below its minimum).
  Status LeaseGrant(int64_t ttl_seconds, int64_t* id, int64_t* granted_seconds);
  // One keep-alive round trip: the lease's TTL restarts; `*ttl_seconds` is
  // its new TTL. kNotFound when the lease has expired or was revoked.
  Status LeaseKeepAlive(int64_t id, int64_t* ttl_seconds);
  // Ends the lease and deletes every key attached to it. OK when the lease
  // was already gone.
  Status LeaseRevoke(int64_t id);

  std::chrono::milliseconds call_timeout() const { return call_timeout_; }
  // "host:port,..." as given, for logs and errors.
  const std::string& endpoints() const { return endpoints_; }

 private:
  struct Member {
    std::string address;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };

  EtcdClient(std::string endpoints, std::chrono::milliseconds call_timeout)
      : endpoints_(std::move(endpoints)), call_timeout_(call_timeout) {}

  // Runs `attempt(member, context)` against one member after another until
  // it succeeds, fails for a reason another member would not change, or the
  // call deadline passes. `what` names the call in errors.
  template <typename Attempt>
  Status Call(const char* what, Attempt attempt);

  const std::string endpoints_;
  const std::chrono::milliseconds call_timeout_;
  std::vector<Member> members_;
  // The member that answered last: tried first.
  std::atomic<size_t> preferred_{0};
};

}  // namespace pdpm::monitor
