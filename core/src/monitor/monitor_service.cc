#include "monitor/monitor_service.h"

#include "monitor/grpc_status.h"

namespace pdpm::monitor {

grpc::Status MonitorService::RegisterServer(grpc::ServerContext* ctx,
                                            const v1::RegisterServerRequest* req,
                                            v1::RegisterServerResponse* resp) {
  return ToGrpcStatus(views_->RegisterServer(*req, resp), ctx);
}

grpc::Status MonitorService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                       v1::HeartbeatResponse* resp) {
  return ToGrpcStatus(views_->Heartbeat(*req, resp), ctx);
}

grpc::Status MonitorService::AllocateSegment(grpc::ServerContext* ctx,
                                             const v1::AllocateSegmentRequest* req,
                                             v1::AllocateSegmentResponse* resp) {
  return ToGrpcStatus(views_->AllocateSegment(*req, resp), ctx);
}

grpc::Status MonitorService::FreeSegment(grpc::ServerContext* ctx,
                                         const v1::FreeSegmentRequest* req,
                                         v1::FreeSegmentResponse* resp) {
  return ToGrpcStatus(views_->FreeSegment(*req, resp), ctx);
}

grpc::Status MonitorService::GetMapping(grpc::ServerContext* ctx, const v1::GetMappingRequest* req,
                                        v1::GetMappingResponse* resp) {
  return ToGrpcStatus(views_->GetMapping(*req, resp), ctx);
}

grpc::Status MonitorService::GetSegmentKeys(grpc::ServerContext* ctx,
                                            const v1::GetSegmentKeysRequest* req,
                                            v1::GetSegmentKeysResponse* resp) {
  return ToGrpcStatus(views_->GetSegmentKeys(*req, resp), ctx);
}

grpc::Status MonitorService::GetClusterStatus(grpc::ServerContext* ctx,
                                              const v1::GetClusterStatusRequest* /*req*/,
                                              v1::ClusterStatus* resp) {
  return ToGrpcStatus(views_->GetClusterStatus(resp), ctx);
}

grpc::Status MonitorService::ReportReplica(grpc::ServerContext* ctx,
                                           const v1::ReportReplicaRequest* req,
                                           v1::ReportReplicaResponse* resp) {
  return ToGrpcStatus(views_->ReportReplica(*req, resp), ctx);
}

grpc::Status MonitorService::DrainServer(grpc::ServerContext* ctx,
                                         const v1::DrainServerRequest* req,
                                         v1::DrainServerResponse* resp) {
  return ToGrpcStatus(views_->DrainServer(*req, resp), ctx);
}

}  // namespace pdpm::monitor
