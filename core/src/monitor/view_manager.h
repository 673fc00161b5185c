// ViewManager: the monitor's logic — the cluster view and every change to
// it, independent of gRPC. Each RPC of pdpm.v1.Monitor has one method here
// taking the request and filling the response; errors are Status codes the
// service maps to gRPC codes.
//
// Consistency: one mutex serialises all calls but Heartbeat. A change is
// applied to a copy of the view, stored through the ViewStore
// (CompareAndPut on the revision this manager holds) and only then made
// visible and acknowledged; a failed store leaves the old view in force.
// Every change clients must notice (membership, addresses, segments, keys,
// table owners) increments the epoch.
//
// Liveness (heartbeat times, reported use, SUSPECT/DOWN) is kept in memory
// only: after a restart every member gets a full timeout of grace. It has
// its own mutex, so a heartbeat is answered while a view change is being
// stored (an etcd round trip: seconds while etcd starts or elects a
// leader), and a server's lease never lapses for the monitor's store.
// Fencing stays intact: from the moment a reconfiguration counts a server
// DOWN until its view is stored and published, that server's heartbeats
// are refused, so it cannot renew a lease on the segments being handed to
// its backups; the first heartbeat answered after carries the new epoch,
// which a server whose lease lapsed must apply before it serves again.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/log.h"
#include "common/status.h"
#include "monitor/view_store.h"
#include "pdpm/v1/monitor.pb.h"

namespace pdpm::monitor {

// The format of the ClusterView this monitor writes (its format_version):
// 0 before servers' server-local segments were recorded, 1 since, 2 since
// tables span segments (SegmentMapping ranges, ClusterView.splits; a view
// of 0 or 1 reads as every table segment holding its whole table).
inline constexpr uint32_t kViewFormatVersion = 2;

struct MonitorOptions {
  // Cluster parameters, fixed when the view is created. When a stored view
  // exists, a parameter marked `_set` (given explicitly) must match it.
  uint64_t segment_size = 2ULL << 30;
  uint32_t replicas = 1;
  uint32_t tables = 64;
  bool segment_size_set = false;
  bool replicas_set = false;
  bool tables_set = false;

  std::string cluster_secret;  // required, non-empty
  // Defaults measured on a loaded two-core host (docs/monitor.md "Timing").
  std::chrono::milliseconds heartbeat_interval{50};
  std::chrono::milliseconds suspect_timeout{250};  // no heartbeat → SUSPECT
  std::chrono::milliseconds down_timeout{500};     // no heartbeat → DOWN

  // InvalidArgument naming the bad option.
  Status Validate() const;
  // How long a server may serve after sending a heartbeat the monitor
  // answered: nine tenths of the down timeout. The server counts from its
  // send, the monitor from the receipt (later), so the server stops before
  // the monitor can declare it DOWN even if its clock ran 10% slower.
  std::chrono::milliseconds lease() const { return down_timeout - down_timeout / 10; }
};

class ViewManager {
 public:
  // Loads the view from `store` (not owned; outlives the manager), creating
  // a fresh one when the store is empty. Fails on a corrupt store or a
  // parameter that contradicts the stored view.
  static Status Open(ViewStore* store, const MonitorOptions& options, const Logger& log,
                     std::unique_ptr<ViewManager>* manager);

  Status RegisterServer(const v1::RegisterServerRequest& req, v1::RegisterServerResponse* resp);
  Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp);
  Status AllocateSegment(const v1::AllocateSegmentRequest& req, v1::AllocateSegmentResponse* resp);
  Status FreeSegment(const v1::FreeSegmentRequest& req, v1::FreeSegmentResponse* resp);
  Status GetMapping(const v1::GetMappingRequest& req, v1::GetMappingResponse* resp);
  Status GetSegmentKeys(const v1::GetSegmentKeysRequest& req, v1::GetSegmentKeysResponse* resp);
  Status GetClusterStatus(v1::ClusterStatus* status);
  Status ReportReplica(const v1::ReportReplicaRequest& req, v1::ReportReplicaResponse* resp);
  Status DrainServer(const v1::DrainServerRequest& req, v1::DrainServerResponse* resp);
  // Someone lost its connection to a server: probes the server's address
  // (monitor/probe.h, outside the lock) and, when it refuses connections,
  // declares the server DOWN now and reconfigures.
  Status ReportUnreachable(const v1::ReportUnreachableRequest& req,
                           v1::ReportUnreachableResponse* resp);
  // A server takes a local segment for server-local data: recorded in its
  // ServerInfo, so no copy is placed there. kAlreadyExists when the mapping
  // holds a copy of a segment there.
  Status ReserveLocalSegment(const v1::ReserveLocalSegmentRequest& req,
                             v1::ReserveLocalSegmentResponse* resp);
  // Splits of table segments (docs/dsm.md "Tables across segments"), each
  // asked by the segment's primary. SplitSegment reserves one: the target
  // is the live server with the most free local segments; a retry returns
  // the pending split. kFailedPrecondition while a member lacks
  // SERVER_FEATURE_SPLIT, kResourceExhausted when no server has a free
  // segment (the cluster is full) or the range is of kMaxRangeDepth.
  Status SplitSegment(const v1::SplitSegmentRequest& req, v1::SplitSegmentResponse* resp);
  // The commit point: the parent keeps the lower half of its range, the new
  // segment becomes routable with the upper half, both take the new epoch
  // as placement epoch. A retry of a committed split answers OK.
  Status CommitSplit(const v1::CommitSplitRequest& req, v1::CommitSplitResponse* resp);
  // Gives a pending split up (OK when there is none any more).
  Status CancelSplit(const v1::CancelSplitRequest& req, v1::CancelSplitResponse* resp);

  // Re-evaluates every member's liveness and logs each UP/SUSPECT/DOWN
  // transition, then reconfigures (monitor/reconfigure.h): segments of DOWN
  // and DRAINING servers move to in-sync backups, missing backups are
  // placed, a drained server becomes DRAINED. Called every heartbeat
  // interval by the daemon.
  void CheckLiveness();

  uint64_t epoch();
  // The address status reports as the leader (this monitor's, once bound).
  void SetLeaderAddress(std::string address);

 private:
  using Clock = std::chrono::steady_clock;
  struct Liveness {
    Clock::time_point last_seen;
    Clock::time_point last_heartbeat;  // zero before the first
    uint64_t last_heartbeat_unix_ms = 0;
    uint64_t used_bytes = 0;
    v1::ServerState reported = v1::SERVER_STATE_UP;  // last state logged
    // When a probe found its address refusing connections: DOWN until it
    // is heard from again.
    Clock::time_point refused_at;
    // A reconfiguration counted it DOWN and is storing that view: no lease
    // until it is published.
    bool being_declared_down = false;
  };

  ViewManager(ViewStore* store, const MonitorOptions& options, const Logger& log);

  Status CheckSecret(const std::string& presented) const;
  // NotFound unless `server_id` is a member of the current view.
  Status FindMember(uint32_t server_id, const v1::ServerInfo** server) const;
  // Stores `next` (epoch already advanced by the caller) and makes it
  // current, then publishes its epoch and members to Heartbeat.
  Status Commit(v1::ClusterView next);
  // Publishes view_'s epoch and members to Heartbeat and ends every
  // being_declared_down. Requires mu_, takes liveness_mu_.
  void Publish();
  // Ends every being_declared_down. Requires liveness_mu_.
  void EndDeclarationsLocked();
  // Requires liveness_mu_.
  v1::ServerState LiveStateLocked(uint32_t server_id, Clock::time_point now) const;
  // Takes liveness_mu_.
  v1::ServerState LiveState(uint32_t server_id, Clock::time_point now) const;
  // The split RPCs' common checks: `server_id` is a member (heard from
  // now) and the primary of `segment`, a routable table segment, whose
  // index in view_.segments() is `*index`. Requires mu_.
  Status SplitParentLocked(uint32_t server_id, uint64_t segment, int* index);
  // Members of `view` whose liveness is UP: those that may take new tables
  // or backups.
  std::vector<uint32_t> LiveServers(const v1::ClusterView& view, Clock::time_point now) const;
  bool RebalanceTables(v1::ClusterView* view, Clock::time_point now) const;
  // Applies Reconfigure to the current view and commits it under a new
  // epoch when anything changed. Requires mu_.
  Status ReconfigureLocked(Clock::time_point now);
  // Server descriptions for clients: the stored member plus liveness, use
  // and load, in view order.
  void FillServers(Clock::time_point now,
                   google::protobuf::RepeatedPtrField<v1::ServerInfo>* out) const;
  // Records that the server was heard from now. Requires liveness_mu_.
  void TouchLocked(uint32_t server_id);
  void Touch(uint32_t server_id);

  ViewStore* const store_;
  const MonitorOptions options_;
  const Logger log_;

  // Lock order: mu_, then liveness_mu_.
  std::mutex mu_;
  v1::ClusterView view_;
  uint64_t revision_ = 0;
  std::string leader_address_;

  mutable std::mutex liveness_mu_;
  std::map<uint32_t, Liveness> liveness_;  // guarded by liveness_mu_
  // view_'s epoch and member ids as of the last Publish, for Heartbeat.
  uint64_t published_epoch_ = 0;          // guarded by liveness_mu_
  std::set<uint32_t> published_members_;  // guarded by liveness_mu_
};

}  // namespace pdpm::monitor
