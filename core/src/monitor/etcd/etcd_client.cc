#include "monitor/etcd/etcd_client.h"

#include <algorithm>
#include <thread>

#include "monitor/grpc_channel.h"

namespace pdpm::monitor {
namespace {

using Clock = std::chrono::steady_clock;

Status FromEtcd(const grpc::Status& s, const std::string& what) {
  std::string msg = what + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::OK: return Status::OK();
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED: return Status::Unavailable(msg);
    case grpc::StatusCode::DEADLINE_EXCEEDED: return Status::Timeout(msg);
    case grpc::StatusCode::NOT_FOUND: return Status::NotFound(msg);
    case grpc::StatusCode::INVALID_ARGUMENT: return Status::InvalidArgument(msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return Status::TooLarge(msg);
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED: return Status::PermissionDenied(msg);
    case grpc::StatusCode::FAILED_PRECONDITION: return Status::FailedPrecondition(msg);
    default: return Status::IOError(msg);
  }
}

// Failures another member may not share: this one is down, cut off from
// its quorum, or too slow.
bool TryAnotherMember(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

Status EtcdClient::Create(const std::string& endpoints, std::chrono::milliseconds call_timeout,
                          std::unique_ptr<EtcdClient>* client) {
  if (call_timeout.count() <= 0) {
    return Status::InvalidArgument("etcd call timeout must be positive");
  }
  std::unique_ptr<EtcdClient> c(new EtcdClient(endpoints, call_timeout));
  size_t start = 0;
  while (start <= endpoints.size()) {
    size_t end = endpoints.find(',', start);
    if (end == std::string::npos) end = endpoints.size();
    std::string address = endpoints.substr(start, end - start);
    start = end + 1;
    if (address.rfind("http://", 0) == 0) address.erase(0, 7);
    size_t colon = address.rfind(':');
    if (address.empty() || colon == std::string::npos || colon == 0 ||
        colon + 1 == address.size() || address.find('/') != std::string::npos) {
      std::string msg = "etcd endpoint \"" + address;
      msg.append("\" in \"").append(endpoints).append("\": want host:port");
      return Status::InvalidArgument(msg);
    }
    auto channel = NewControlChannel(address);
    c->members_.push_back(
        {address, etcdserverpb::KV::NewStub(channel), etcdserverpb::Lease::NewStub(channel)});
  }
  *client = std::move(c);
  return Status::OK();
}

template <typename Attempt>
Status EtcdClient::Call(const char* what, Attempt attempt) {
  const auto deadline = Clock::now() + call_timeout_;
  // One member gets the whole budget; with several, a hung one may take at
  // most half of it before the next is asked.
  const auto per_attempt = members_.size() == 1 ? call_timeout_ : call_timeout_ / 2;
  size_t index = preferred_.load(std::memory_order_relaxed) % members_.size();
  grpc::Status last;
  std::string last_member;
  for (size_t tried = 0;; ++tried) {
    auto now = Clock::now();
    if (now >= deadline) break;
    if (tried > 0 && tried % members_.size() == 0) {
      // Every member refused: give the cluster a moment (an election).
      std::this_thread::sleep_for(
          std::min<Clock::duration>(std::chrono::milliseconds(50), deadline - now));
      now = Clock::now();
      if (now >= deadline) break;
    }
    Member& m = members_[index];
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::min<Clock::duration>(per_attempt, deadline - now));
    last = attempt(m, &ctx);
    last_member = m.address;
    if (last.ok()) {
      preferred_.store(index, std::memory_order_relaxed);
      return Status::OK();
    }
    if (!TryAnotherMember(last)) break;
    index = (index + 1) % members_.size();
  }
  if (last_member.empty()) return Status::Timeout(std::string("etcd ") + what + ": no time left");
  return FromEtcd(last, std::string("etcd ") + what + " (last tried " + last_member + " of " +
                            endpoints_ + ")");
}

Status EtcdClient::Get(const std::string& key, etcdserverpb::KeyValue* kv, bool* found) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  etcdserverpb::RangeResponse resp;
  PDPM_RETURN_IF_ERROR(Call(
      "range", [&](Member& m, grpc::ClientContext* ctx) { return m.kv->Range(ctx, req, &resp); }));
  *found = resp.kvs_size() > 0;
  if (*found) *kv = resp.kvs(0);
  return Status::OK();
}

Status EtcdClient::Txn(const etcdserverpb::TxnRequest& req, etcdserverpb::TxnResponse* resp) {
  return Call("txn",
              [&](Member& m, grpc::ClientContext* ctx) { return m.kv->Txn(ctx, req, resp); });
}

Status EtcdClient::LeaseGrant(int64_t ttl_seconds, int64_t* id, int64_t* granted_seconds) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse resp;
  PDPM_RETURN_IF_ERROR(Call("lease grant", [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseGrant(ctx, req, &resp);
  }));
  if (!resp.error().empty() || resp.id() == 0 || resp.ttl() <= 0) {
    return Status::IOError("etcd lease grant refused: " + (resp.error().empty()
                                                               ? std::string("no lease in reply")
                                                               : resp.error()));
  }
  *id = resp.id();
  *granted_seconds = resp.ttl();
  return Status::OK();
}

Status EtcdClient::LeaseKeepAlive(int64_t id, int64_t* ttl_seconds) {
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(id);
  etcdserverpb::LeaseKeepAliveResponse resp;
  PDPM_RETURN_IF_ERROR(Call("lease keep-alive", [&](Member& m, grpc::ClientContext* ctx) {
    // The API is a stream; one request and its answer per round trip keeps
    // every round under its own deadline and free to use another member.
    auto stream = m.lease->LeaseKeepAlive(ctx);
    if (!stream->Write(req) || !stream->Read(&resp)) {
      ctx->TryCancel();
      grpc::Status s = stream->Finish();
      return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keep-alive stream closed") : s;
    }
    stream->WritesDone();
    return stream->Finish();
  }));
  if (resp.ttl() <= 0) {
    return Status::NotFound("etcd lease " + std::to_string(id) + " has expired or was revoked");
  }
  *ttl_seconds = resp.ttl();
  return Status::OK();
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(id);
  etcdserverpb::LeaseRevokeResponse resp;
  Status s = Call("lease revoke", [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseRevoke(ctx, req, &resp);
  });
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  return s;
}

}  // namespace pdpm::monitor
