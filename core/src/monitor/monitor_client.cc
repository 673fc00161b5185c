#include "monitor/monitor_client.h"

#include <algorithm>
#include <thread>

#include "monitor/grpc_channel.h"
#include "monitor/grpc_status.h"

namespace pdpm::monitor {
namespace {

template <typename Req>
void FillSecret(Req* req, const std::string& secret) {
  if (req->cluster_secret().empty()) req->set_cluster_secret(secret);
}

std::vector<std::string> SplitAddresses(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  if (out.empty()) out.push_back(list);  // "" fails its calls with the channel's error
  return out;
}

// The leader a refusal names ("...; leader is HOST:PORT"), or "".
std::string NamedLeader(const Status& s) {
  std::string_view msg = s.message();
  size_t at = msg.find(kLeaderIsMessage);
  if (s.code() != StatusCode::kUnavailable || msg.find(kNotLeaderMessage) == std::string::npos ||
      at == std::string_view::npos) {
    return "";
  }
  std::string_view rest = msg.substr(at + std::char_traits<char>::length(kLeaderIsMessage));
  return std::string(rest.substr(0, rest.find_first_of(" ;,)")));
}

}  // namespace

MonitorClient::MonitorClient(std::string address, MonitorClientOptions options)
    : address_(std::move(address)),
      options_(std::move(options)),
      configured_(SplitAddresses(address_).size()) {
  for (const std::string& a : SplitAddresses(address_)) EndpointFor(a);
}

size_t MonitorClient::EndpointFor(const std::string& address) {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i]->address == address) return i;
  }
  endpoints_.push_back(std::make_unique<Endpoint>(
      Endpoint{address, v1::Monitor::NewStub(NewControlChannel(address))}));
  return endpoints_.size() - 1;
}

template <typename Req, typename Resp>
Status MonitorClient::Call(StubMethod<Req, Resp> method, const Req& req, Resp* resp,
                           std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  // Several monitors: a hung one may take at most half the budget.
  const auto per_attempt = configured_ > 1 ? timeout / 2 : timeout;
  size_t index;
  {
    std::lock_guard<std::mutex> lock(mu_);
    index = leader_;
  }
  for (int attempt = 1;; ++attempt) {
    Endpoint* ep;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ep = endpoints_[index].get();
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::min<Clock::duration>(per_attempt, deadline - Clock::now()));
    Status s = FromGrpcStatus((ep->stub.get()->*method)(&ctx, req, resp), ctx);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      leader_ = index;
      return s;
    }
    std::string named = NamedLeader(s);
    bool retry = !named.empty() || (configured_ > 1 && (s.code() == StatusCode::kUnavailable ||
                                                        s.code() == StatusCode::kTimeout));
    auto now = Clock::now();
    if (!retry || now >= deadline) {
      return configured_ > 1 ? s.WithContext("monitor at " + ep->address) : s;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t next = named.empty() ? (index + 1) % endpoints_.size() : EndpointFor(named);
      // Straight to a newly named leader; otherwise pause, longer each
      // round, while an election runs.
      bool pause = next == index || named.empty() || attempt > 2 * static_cast<int>(configured_);
      index = next;
      if (!pause) continue;
    }
    auto wait = std::chrono::milliseconds(std::min(25 * attempt, 250));
    std::this_thread::sleep_for(std::min<Clock::duration>(wait, deadline - now));
  }
}

Status MonitorClient::WaitReady(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    v1::GetClusterStatusRequest req;
    v1::ClusterStatus resp;
    last = Call(&v1::Monitor::Stub::GetClusterStatus, req, &resp,
                std::clamp(left, std::chrono::milliseconds(1),
                           std::min(options_.call_timeout, std::chrono::milliseconds(1000))));
    if (last.ok()) return last;
    if (std::chrono::steady_clock::now() >= deadline) {
      return last.WithContext("monitor at " + address_ + " not ready");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status MonitorClient::RegisterServer(v1::RegisterServerRequest req,
                                     v1::RegisterServerResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::RegisterServer, req, resp);
}

Status MonitorClient::Heartbeat(v1::HeartbeatRequest req, v1::HeartbeatResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::Heartbeat, req, resp);
}

Status MonitorClient::AllocateSegment(v1::AllocateSegmentRequest req,
                                      v1::AllocateSegmentResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::AllocateSegment, req, resp);
}

Status MonitorClient::FreeSegment(v1::FreeSegmentRequest req, v1::FreeSegmentResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::FreeSegment, req, resp);
}

Status MonitorClient::SplitSegment(v1::SplitSegmentRequest req, v1::SplitSegmentResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::SplitSegment, req, resp);
}

Status MonitorClient::CommitSplit(v1::CommitSplitRequest req, v1::CommitSplitResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::CommitSplit, req, resp);
}

Status MonitorClient::CancelSplit(v1::CancelSplitRequest req, v1::CancelSplitResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::CancelSplit, req, resp);
}

Status MonitorClient::GetMapping(uint64_t known_epoch, v1::GetMappingResponse* resp) {
  v1::GetMappingRequest req;
  req.set_known_epoch(known_epoch);
  return Call(&v1::Monitor::Stub::GetMapping, req, resp);
}

Status MonitorClient::GetSegmentKeys(const std::vector<uint64_t>& segments,
                                     v1::GetSegmentKeysResponse* resp) {
  v1::GetSegmentKeysRequest req;
  req.set_cluster_secret(options_.cluster_secret);
  for (uint64_t s : segments) req.add_segments(s);
  return Call(&v1::Monitor::Stub::GetSegmentKeys, req, resp);
}

Status MonitorClient::GetClusterStatus(v1::ClusterStatus* status) {
  v1::GetClusterStatusRequest req;
  return Call(&v1::Monitor::Stub::GetClusterStatus, req, status);
}

Status MonitorClient::ReportReplica(v1::ReportReplicaRequest req, v1::ReportReplicaResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::ReportReplica, req, resp);
}

Status MonitorClient::ReportUnreachable(v1::ReportUnreachableRequest req,
                                        v1::ReportUnreachableResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::ReportUnreachable, req, resp);
}

Status MonitorClient::ReserveLocalSegment(v1::ReserveLocalSegmentRequest req,
                                          v1::ReserveLocalSegmentResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::ReserveLocalSegment, req, resp);
}

Status MonitorClient::DrainServer(v1::DrainServerRequest req, v1::DrainServerResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::DrainServer, req, resp);
}

}  // namespace pdpm::monitor
