// VolumeService: pdpm.v1.Volumes (proto/pdpm/v1/pdfs.proto), the pDFS
// volume API over gRPC. Each request names its cluster (monitors and
// secret); the service keeps one VolumeManager (a cluster client) per
// cluster it was asked about, at most `max_clusters` of them (the least
// recently used goes first). A request whose secret the cluster refuses
// is PERMISSION_DENIED; nothing is cached for it.
//
// Every operation is VolumeManager's (pdfs/volumes/volume_manager.h): the
// service only checks and converts the messages. Errors carry the exact
// pdpm code in the "pdpm-code" trailer (monitor/grpc_status.h).
// Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "common/log.h"
#include "pdfs/volumes/volume_manager.h"
#include "pdpm/v1/pdfs.grpc.pb.h"

namespace pdpm::pdfs {

struct VolumeServiceOptions {
  size_t max_clusters = 16;
  // Per cluster client: how long an operation whose server failed waits
  // for the failover (client::ClientOptions::failover_wait_ms).
  uint32_t failover_wait_ms = 30000;
};

class VolumeService final : public v1::Volumes::Service {
 public:
  VolumeService(VolumeServiceOptions options, Logger log);

  grpc::Status CreateVolume(grpc::ServerContext* context, const v1::CreateVolumeRequest* req,
                            v1::CreateVolumeResponse* resp) override;
  grpc::Status DeleteVolume(grpc::ServerContext* context, const v1::DeleteVolumeRequest* req,
                            v1::DeleteVolumeResponse* resp) override;
  grpc::Status ResizeVolume(grpc::ServerContext* context, const v1::ResizeVolumeRequest* req,
                            v1::ResizeVolumeResponse* resp) override;
  grpc::Status GetVolume(grpc::ServerContext* context, const v1::GetVolumeRequest* req,
                         v1::GetVolumeResponse* resp) override;
  grpc::Status ListVolumes(grpc::ServerContext* context, const v1::ListVolumesRequest* req,
                           v1::ListVolumesResponse* resp) override;
  grpc::Status GetCapacity(grpc::ServerContext* context, const v1::GetCapacityRequest* req,
                           v1::GetCapacityResponse* resp) override;

 private:
  struct Cluster {
    std::string key;  // monitors, secret and transport
    std::shared_ptr<VolumeManager> manager;
  };
  // The manager of the cluster `ref` names, connecting on first use.
  Status Manager(const v1::ClusterRef& ref, std::shared_ptr<VolumeManager>* out);
  // Logs a failed call and converts its status.
  grpc::Status Reply(grpc::ServerContext* context, const char* method, const Status& s);

  const VolumeServiceOptions options_;
  Logger log_;
  std::mutex mu_;
  std::list<Cluster> clusters_;  // most recently used first
};

}  // namespace pdpm::pdfs
