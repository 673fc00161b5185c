#include "pdfs/service/volume_service.h"

#include <utility>

#include "monitor/grpc_status.h"
#include "net/transport.h"

namespace pdpm::pdfs {
namespace {

void ToProto(const VolumeInfo& v, v1::Volume* out) {
  out->set_name(v.name);
  out->set_byte_limit(v.quota.byte_limit);
  out->set_inode_limit(v.quota.inode_limit);
  out->set_bytes_used(v.quota.bytes_used);
  out->set_inodes_used(v.quota.inodes_used);
}

}  // namespace

VolumeService::VolumeService(VolumeServiceOptions options, Logger log)
    : options_(options), log_(std::move(log)) {}

Status VolumeService::Manager(const v1::ClusterRef& ref, std::shared_ptr<VolumeManager>* out) {
  if (ref.monitors().empty()) return Status::InvalidArgument("cluster.monitors is required");
  if (ref.cluster_secret().empty()) {
    return Status::InvalidArgument("cluster.cluster_secret is required");
  }
  client::ClientOptions options;
  options.monitor = ref.monitors();
  options.cluster_secret = ref.cluster_secret();
  options.failover_wait_ms = options_.failover_wait_ms;
  PDPM_RETURN_IF_ERROR(
      net::ParseBackendKind(ref.transport().empty() ? "tcp" : ref.transport(), &options.transport)
          .WithContext("cluster.transport"));
  // The secret is part of the key: a wrong one never reaches a client
  // another request opened with the right one.
  std::string key = ref.monitors();
  key += '\0';
  key += ref.cluster_secret();
  key += '\0';
  key += ref.transport();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = clusters_.begin(); it != clusters_.end(); ++it) {
      if (it->key == key) {
        clusters_.splice(clusters_.begin(), clusters_, it);
        *out = it->manager;
        return Status::OK();
      }
    }
  }
  // Connecting takes a while; other clusters' requests go on meanwhile.
  std::unique_ptr<VolumeManager> manager;
  PDPM_RETURN_IF_ERROR(VolumeManager::Open(options, &manager));
  std::lock_guard<std::mutex> lock(mu_);
  for (const Cluster& c : clusters_) {
    if (c.key == key) {  // another request connected first: use its client
      *out = c.manager;
      return Status::OK();
    }
  }
  log_.Info("connected to a cluster", {{"monitors", ref.monitors()}});
  clusters_.push_front({std::move(key), std::shared_ptr<VolumeManager>(std::move(manager))});
  // A request still using an evicted manager keeps it alive until done.
  while (clusters_.size() > options_.max_clusters) clusters_.pop_back();
  *out = clusters_.front().manager;
  return Status::OK();
}

grpc::Status VolumeService::Reply(grpc::ServerContext* context, const char* method,
                                  const Status& s) {
  if (!s.ok()) log_.Info("request failed", {{"method", method}, {"error", s}});
  return monitor::ToGrpcStatus(s, context);
}

grpc::Status VolumeService::CreateVolume(grpc::ServerContext* context,
                                         const v1::CreateVolumeRequest* req,
                                         v1::CreateVolumeResponse* resp) {
  std::shared_ptr<VolumeManager> m;
  Status s = Manager(req->cluster(), &m);
  VolumeInfo v;
  if (s.ok()) {
    s = m->Create(req->name(), req->byte_limit(), req->inode_limit(), {req->uid(), req->gid()},
                  req->source_volume(), &v);
  }
  if (s.ok()) ToProto(v, resp->mutable_volume());
  return Reply(context, "CreateVolume", s);
}

grpc::Status VolumeService::DeleteVolume(grpc::ServerContext* context,
                                         const v1::DeleteVolumeRequest* req,
                                         v1::DeleteVolumeResponse* /*resp*/) {
  std::shared_ptr<VolumeManager> m;
  Status s = Manager(req->cluster(), &m);
  if (s.ok()) s = m->Delete(req->name());
  return Reply(context, "DeleteVolume", s);
}

grpc::Status VolumeService::ResizeVolume(grpc::ServerContext* context,
                                         const v1::ResizeVolumeRequest* req,
                                         v1::ResizeVolumeResponse* resp) {
  std::shared_ptr<VolumeManager> m;
  Status s = Manager(req->cluster(), &m);
  VolumeInfo v;
  if (s.ok()) s = m->Resize(req->name(), req->byte_limit(), req->inode_limit(), &v);
  if (s.ok()) ToProto(v, resp->mutable_volume());
  return Reply(context, "ResizeVolume", s);
}

grpc::Status VolumeService::GetVolume(grpc::ServerContext* context, const v1::GetVolumeRequest* req,
                                      v1::GetVolumeResponse* resp) {
  std::shared_ptr<VolumeManager> m;
  Status s = Manager(req->cluster(), &m);
  VolumeInfo v;
  if (s.ok()) s = m->Stat(req->name(), &v);
  if (s.ok()) ToProto(v, resp->mutable_volume());
  return Reply(context, "GetVolume", s);
}

grpc::Status VolumeService::ListVolumes(grpc::ServerContext* context,
                                        const v1::ListVolumesRequest* req,
                                        v1::ListVolumesResponse* resp) {
  std::shared_ptr<VolumeManager> m;
  Status s = Manager(req->cluster(), &m);
  std::vector<VolumeInfo> volumes;
  std::string next;
  if (s.ok()) s = m->List(req->page_token(), req->max_entries(), &volumes, &next);
  if (s.ok()) {
    for (const VolumeInfo& v : volumes) ToProto(v, resp->add_volumes());
    resp->set_next_page_token(next);
  }
  return Reply(context, "ListVolumes", s);
}

grpc::Status VolumeService::GetCapacity(grpc::ServerContext* context,
                                        const v1::GetCapacityRequest* req,
                                        v1::GetCapacityResponse* resp) {
  std::shared_ptr<VolumeManager> m;
  Status s = Manager(req->cluster(), &m);
  VolumeCapacity c;
  if (s.ok()) s = m->Capacity(&c);
  if (s.ok()) {
    resp->set_available_bytes(c.available_bytes);
    resp->set_total_bytes(c.total_bytes);
    resp->set_replica_count(c.replica_count);
  }
  return Reply(context, "GetCapacity", s);
}

}  // namespace pdpm::pdfs
