#include "monitor/monitor_service.h"

#include "monitor/grpc_status.h"

namespace pdpm::monitor {

MonitorService::MonitorService(ViewManager* views)
    : source_([views](std::shared_ptr<ViewManager>* out) {
        *out = std::shared_ptr<ViewManager>(std::shared_ptr<ViewManager>(), views);
        return Status::OK();
      }) {}

template <typename Fn>
grpc::Status MonitorService::Serve(grpc::ServerContext* ctx, Fn fn) {
  std::shared_ptr<ViewManager> views;
  Status s = source_(&views);
  return ToGrpcStatus(s.ok() ? fn(*views) : s, ctx);
}

grpc::Status MonitorService::RegisterServer(grpc::ServerContext* ctx,
                                            const v1::RegisterServerRequest* req,
                                            v1::RegisterServerResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.RegisterServer(*req, resp); });
}

grpc::Status MonitorService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                       v1::HeartbeatResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.Heartbeat(*req, resp); });
}

grpc::Status MonitorService::AllocateSegment(grpc::ServerContext* ctx,
                                             const v1::AllocateSegmentRequest* req,
                                             v1::AllocateSegmentResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.AllocateSegment(*req, resp); });
}

grpc::Status MonitorService::FreeSegment(grpc::ServerContext* ctx,
                                         const v1::FreeSegmentRequest* req,
                                         v1::FreeSegmentResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.FreeSegment(*req, resp); });
}

grpc::Status MonitorService::GetMapping(grpc::ServerContext* ctx, const v1::GetMappingRequest* req,
                                        v1::GetMappingResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.GetMapping(*req, resp); });
}

grpc::Status MonitorService::GetSegmentKeys(grpc::ServerContext* ctx,
                                            const v1::GetSegmentKeysRequest* req,
                                            v1::GetSegmentKeysResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.GetSegmentKeys(*req, resp); });
}

grpc::Status MonitorService::GetClusterStatus(grpc::ServerContext* ctx,
                                              const v1::GetClusterStatusRequest* /*req*/,
                                              v1::ClusterStatus* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.GetClusterStatus(resp); });
}

grpc::Status MonitorService::ReportUnreachable(grpc::ServerContext* ctx,
                                               const v1::ReportUnreachableRequest* req,
                                               v1::ReportUnreachableResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.ReportUnreachable(*req, resp); });
}

grpc::Status MonitorService::ReserveLocalSegment(grpc::ServerContext* ctx,
                                                 const v1::ReserveLocalSegmentRequest* req,
                                                 v1::ReserveLocalSegmentResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.ReserveLocalSegment(*req, resp); });
}

grpc::Status MonitorService::SplitSegment(grpc::ServerContext* ctx,
                                          const v1::SplitSegmentRequest* req,
                                          v1::SplitSegmentResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.SplitSegment(*req, resp); });
}

grpc::Status MonitorService::CommitSplit(grpc::ServerContext* ctx,
                                         const v1::CommitSplitRequest* req,
                                         v1::CommitSplitResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.CommitSplit(*req, resp); });
}

grpc::Status MonitorService::CancelSplit(grpc::ServerContext* ctx,
                                         const v1::CancelSplitRequest* req,
                                         v1::CancelSplitResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.CancelSplit(*req, resp); });
}

grpc::Status MonitorService::ReportReplica(grpc::ServerContext* ctx,
                                           const v1::ReportReplicaRequest* req,
                                           v1::ReportReplicaResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.ReportReplica(*req, resp); });
}

grpc::Status MonitorService::DrainServer(grpc::ServerContext* ctx,
                                         const v1::DrainServerRequest* req,
                                         v1::DrainServerResponse* resp) {
  return Serve(ctx, [&](ViewManager& v) { return v.DrainServer(*req, resp); });
}

}  // namespace pdpm::monitor
