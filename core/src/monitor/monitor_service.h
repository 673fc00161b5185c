// MonitorService: the gRPC face of a ViewManager (pdpm.v1.Monitor). Every
// method forwards to the manager and converts its Status (grpc_status.h).
#pragma once

#include <functional>
#include <memory>

#include "monitor/view_manager.h"
#include "pdpm/v1/monitor.grpc.pb.h"

namespace pdpm::monitor {

class MonitorService final : public v1::Monitor::Service {
 public:
  // Where each call is served from: the manager, or an error returned as
  // the call's status (a standby monitor: kUnavailable naming the leader).
  using ViewSource = std::function<Status(std::shared_ptr<ViewManager>*)>;

  // Serves from `views`, which is not owned and outlives the service.
  explicit MonitorService(ViewManager* views);
  explicit MonitorService(ViewSource source) : source_(std::move(source)) {}

  grpc::Status RegisterServer(grpc::ServerContext* ctx, const v1::RegisterServerRequest* req,
                              v1::RegisterServerResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status AllocateSegment(grpc::ServerContext* ctx, const v1::AllocateSegmentRequest* req,
                               v1::AllocateSegmentResponse* resp) override;
  grpc::Status FreeSegment(grpc::ServerContext* ctx, const v1::FreeSegmentRequest* req,
                           v1::FreeSegmentResponse* resp) override;
  grpc::Status GetMapping(grpc::ServerContext* ctx, const v1::GetMappingRequest* req,
                          v1::GetMappingResponse* resp) override;
  grpc::Status GetSegmentKeys(grpc::ServerContext* ctx, const v1::GetSegmentKeysRequest* req,
                              v1::GetSegmentKeysResponse* resp) override;
  grpc::Status GetClusterStatus(grpc::ServerContext* ctx, const v1::GetClusterStatusRequest* req,
                                v1::ClusterStatus* resp) override;
  grpc::Status ReportReplica(grpc::ServerContext* ctx, const v1::ReportReplicaRequest* req,
                             v1::ReportReplicaResponse* resp) override;
  grpc::Status DrainServer(grpc::ServerContext* ctx, const v1::DrainServerRequest* req,
                           v1::DrainServerResponse* resp) override;
  grpc::Status ReportUnreachable(grpc::ServerContext* ctx, const v1::ReportUnreachableRequest* req,
                                 v1::ReportUnreachableResponse* resp) override;
  grpc::Status ReserveLocalSegment(grpc::ServerContext* ctx,
                                   const v1::ReserveLocalSegmentRequest* req,
                                   v1::ReserveLocalSegmentResponse* resp) override;
  grpc::Status SplitSegment(grpc::ServerContext* ctx, const v1::SplitSegmentRequest* req,
                            v1::SplitSegmentResponse* resp) override;
  grpc::Status CommitSplit(grpc::ServerContext* ctx, const v1::CommitSplitRequest* req,
                           v1::CommitSplitResponse* resp) override;
  grpc::Status CancelSplit(grpc::ServerContext* ctx, const v1::CancelSplitRequest* req,
                           v1::CancelSplitResponse* resp) override;

 private:
  template <typename Fn>
  grpc::Status Serve(grpc::ServerContext* ctx, Fn fn);

  const ViewSource source_;
};

}  // namespace pdpm::monitor
