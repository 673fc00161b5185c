#include "monitor/monitor_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <thread>

#include "monitor/grpc_status.h"

namespace pdpm::monitor {
namespace {

template <typename Req>
void FillSecret(Req* req, const std::string& secret) {
  if (req->cluster_secret().empty()) req->set_cluster_secret(secret);
}

}  // namespace

MonitorClient::MonitorClient(std::string address, MonitorClientOptions options)
    : address_(std::move(address)),
      options_(std::move(options)),
      stub_(
          v1::Monitor::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()))) {
}

template <typename Req, typename Resp>
Status MonitorClient::Call(StubMethod<Req, Resp> method, const Req& req, Resp* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.call_timeout);
  return FromGrpcStatus((stub_.get()->*method)(&ctx, req, resp), ctx);
}

Status MonitorClient::WaitReady(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::min(options_.call_timeout, std::chrono::milliseconds(1000)));
    ctx.set_wait_for_ready(true);
    v1::GetClusterStatusRequest req;
    v1::ClusterStatus resp;
    last = FromGrpcStatus(stub_->GetClusterStatus(&ctx, req, &resp), ctx);
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

Status MonitorClient::DrainServer(v1::DrainServerRequest req, v1::DrainServerResponse* resp) {
  FillSecret(&req, options_.cluster_secret);
  return Call(&v1::Monitor::Stub::DrainServer, req, resp);
}

}  // namespace pdpm::monitor
