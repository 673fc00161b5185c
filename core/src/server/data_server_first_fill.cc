// DataServer: a new segment's first fill (docs/replication.md). A segment
// created by this server takes no write until every backup the cluster
// placed for it is in sync, so nothing acknowledged in it ever lives on one
// server only.
#include <chrono>
#include <thread>

#include "server/data_server.h"

namespace pdpm::server {

bool DataServer::AcceptsWritesLocked(Segment* seg) const {
  if (!seg->first_fill.load()) return true;
  auto it = placement_.find(seg->role.global);
  if (it == placement_.end()) return false;
  for (const auto& b : it->second.backups()) {
    if (b.state() != v1::REPLICA_STATE_IN_SYNC) return false;
  }
  // Filled meanwhile (e.g. by the fill thread after a first attempt failed).
  seg->first_fill = false;
  return true;
}

DataServer::Segment* DataServer::PendingHeapSegment() {
  std::shared_lock l(mu_);
  for (const auto& [g, seg] : by_global_) {
    if (seg->role.kind == SegmentKind::kHeap && !AcceptsWritesLocked(seg)) return seg;
  }
  return nullptr;
}

Status DataServer::FillBackupOnce(uint32_t global, ReplicaId backup) {
  {
    std::lock_guard<std::mutex> lock(sync_mu_);
    // Another thread fills it: the caller sees the result in the mapping.
    if (!filling_.insert({global, backup}).second) return Status::OK();
  }
  Status s = SyncBackup(global, backup);
  std::lock_guard<std::mutex> lock(sync_mu_);
  filling_.erase({global, backup});
  return s;
}

Status DataServer::FillNewSegment(Segment* seg) {
  const uint32_t g = seg->role.global;
  // As long as shipping waits for a backup: the monitor drops a dead one
  // meanwhile (and may place another).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(2 * down_timeout_ms_ + 1000);
  Status last;
  while (true) {
    std::vector<ReplicaId> syncing;
    {
      std::shared_lock l(mu_);
      if (AcceptsWritesLocked(seg)) return Status::OK();
      auto it = placement_.find(g);
      if (it != placement_.end()) {
        for (const auto& b : it->second.backups()) {
          if (b.state() != v1::REPLICA_STATE_IN_SYNC)
            syncing.push_back({b.server_id(), b.local_index()});
        }
      }
    }
    bool failed = false;
    for (const ReplicaId& b : syncing) {
      Status s = FillBackupOnce(g, b);
      if (!s.ok()) {
        failed = true;
        last = s.WithContext("backup on server " + std::to_string(b.first));
      }
    }
    Status r = RefreshMapping();
    if (!r.ok()) last = r;
    {
      std::shared_lock l(mu_);
      if (AcceptsWritesLocked(seg)) return Status::OK();
    }
    if (seg->fenced) return Status::StaleEpoch("segment " + std::to_string(g) + " moved away");
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Unavailable("segment " + std::to_string(g) +
                                 ": its first backup is not in sync yet: " + last.ToString());
    }
    if (failed || !r.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status DataServer::WaitFirstFill(Segment* seg) {
  if (!seg->first_fill.load()) return Status::OK();
  std::lock_guard<std::mutex> creating(new_segment_mu_);  // held by its creator while it fills
  return FillNewSegment(seg);
}

}  // namespace pdpm::server
