// DataServer: a new segment's first fill (docs/replication.md). A segment
// created by this server takes no write until every backup the cluster
// placed for it is in sync, so nothing acknowledged in it ever lives on one
// server only.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
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
  // meanwhile (and may place another). A fill under way on another thread
  // (the fill thread's, queued by the announce) is waited for however long
  // its copy takes: it fails by itself when its backup does not answer.
  const auto bound = std::chrono::milliseconds(2 * down_timeout_ms_ + 1000);
  auto deadline = std::chrono::steady_clock::now() + bound;
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
    bool elsewhere = false;
    {
      std::lock_guard<std::mutex> lock(sync_mu_);
      for (const ReplicaId& b : syncing) elsewhere = elsewhere || filling_.count({g, b}) != 0;
    }
    // A fill's end refreshes the mapping this loop reads.
    Status r = elsewhere ? Status::OK() : RefreshMapping();
    if (!r.ok()) last = r;
    {
      std::shared_lock l(mu_);
      if (AcceptsWritesLocked(seg)) return Status::OK();
    }
    if (seg->fenced) return Status::StaleEpoch("segment " + std::to_string(g) + " moved away");
    if (sync_stop_) return Status::Unavailable("server " + std::to_string(server_id_) + " stops");
    if (elsewhere) {
      deadline = std::chrono::steady_clock::now() + bound;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Unavailable("segment " + std::to_string(g) +
                                 ": its first backup is not in sync yet: " + last.ToString());
    }
    if (failed || !r.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status DataServer::AwaitCreator(uint32_t job, std::chrono::steady_clock::time_point deadline,
                                const std::function<bool()>& ready) {
  std::unique_lock lock(create_mu_);
  bool waited = false;
  while (!ready()) {
    if (create_stop_) return Status::Unavailable("server " + std::to_string(server_id_) + " stops");
    auto [it, fresh] = creating_.try_emplace(job);
    if (!fresh && it->second.done) {
      // The attempt this request waited for failed: that is its answer. A
      // failure seen first is an earlier request's: this one tries again.
      if (waited) return it->second.status;
      it->second = Creation{};
    }
    if (!it->second.running) create_cv_.notify_all();
    waited = true;
    if (create_cv_.wait_until(lock, deadline) == std::cv_status::timeout && !ready()) {
      const std::string what =
          job == kHeapJob ? "a heap segment" : "table " + std::to_string(job) + "'s segment";
      return Status::Aborted(what + " is being created and its backups filled on server " +
                             std::to_string(server_id_) + "; nothing was done, ask again");
    }
  }
  return Status::OK();
}

Status DataServer::AwaitTableSegment(uint32_t table, Segment** out) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kNewSegmentWaitMs);
  return AwaitCreator(table, deadline, [&] {
    std::shared_lock l(mu_);
    auto it = by_table_.find(table);
    *out = it == by_table_.end() ? nullptr : it->second;
    return *out != nullptr && !(*out)->fenced && AcceptsWritesLocked(*out);
  });
}

Status DataServer::CreateHeapSegment() {
  std::lock_guard<std::mutex> creating(new_segment_mu_);
  // A segment whose first fill failed earlier is filled, not replaced.
  Segment* seg = PendingHeapSegment();
  if (seg == nullptr) {
    std::lock_guard<std::mutex> grow(grow_mu_);
    PDPM_RETURN_IF_ERROR(CreateSegment(SegmentRole{SegmentKind::kHeap, 0, 0}, &seg));
  }
  return FillNewSegment(seg);
}

Status DataServer::CreateTableSegment(uint32_t table) {
  std::lock_guard<std::mutex> creating(new_segment_mu_);
  Segment* seg = nullptr;
  {
    std::shared_lock lock(mu_);
    auto it = by_table_.find(table);
    if (it != by_table_.end()) seg = it->second;
  }
  if (seg == nullptr) {
    std::lock_guard<std::mutex> grow(grow_mu_);
    Status s = CreateSegment(SegmentRole{SegmentKind::kTable, table, 0}, &seg);
    for (int tries = 0; s.code() == StatusCode::kAlreadyExists && tries < 3; ++tries) {
      // The monitor gave the local segment to a backup meanwhile: with the
      // new mapping, another one.
      PDPM_RETURN_IF_ERROR(RefreshMapping());
      s = CreateSegment(SegmentRole{SegmentKind::kTable, table, 0}, &seg);
    }
    if (s.code() == StatusCode::kResourceExhausted || s.code() == StatusCode::kAlreadyExists) {
      // No room here for the table's segment (its data would fit the
      // cluster: this server holds too many copies, e.g. while the copies
      // of a failed server are re-made): the cluster is degraded, not full.
      return Status::Unavailable("table " + std::to_string(table) + " cannot be placed on server " +
                                 std::to_string(server_id_) + " now: " + std::string(s.message()));
    }
    if (s.code() == StatusCode::kFailedPrecondition) {
      // The table moved since this server's last refresh: the client
      // retries with the new owner.
      Status r = RefreshMapping();
      return Status::StaleEpoch(std::string(s.message()) +
                                (r.ok() ? "" : "; refresh failed: " + r.ToString()));
    }
    PDPM_RETURN_IF_ERROR(s);
  }
  return FillNewSegment(seg);
}

void DataServer::CreatorLoop() {
  std::unique_lock lock(create_mu_);
  while (true) {
    auto it = creating_.end();
    create_cv_.wait(lock, [&] {
      it = std::find_if(creating_.begin(), creating_.end(),
                        [](const auto& c) { return !c.second.running && !c.second.done; });
      return create_stop_ || it != creating_.end();
    });
    if (create_stop_) return;
    const uint32_t job = it->first;
    it->second.running = true;
    lock.unlock();
    const auto started = std::chrono::steady_clock::now();
    Status s = job == kHeapJob ? CreateHeapSegment() : CreateTableSegment(job);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count();
    const std::string what = job == kHeapJob ? "heap" : "table " + std::to_string(job);
    if (s.ok()) {
      log_.Info("new segment ready", {{"for", what}, {"ms", ms}});
    } else {
      log_.Warn("new segment not ready", {{"for", what}, {"ms", ms}, {"status", s}});
    }
    lock.lock();
    it = creating_.find(job);
    if (s.ok()) {
      if (job == kHeapJob) ++heap_segments_made_;
      creating_.erase(it);
    } else {
      it->second.running = false;
      it->second.done = true;
      it->second.status = s;
    }
    create_cv_.notify_all();
  }
}

}  // namespace pdpm::server
