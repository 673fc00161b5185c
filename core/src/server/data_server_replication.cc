// DataServer: replication, promotion, fencing and backup fills
// (docs/replication.md).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dsm/chunk.h"
#include "server/data_server.h"

namespace pdpm::server {
namespace {

using Clock = std::chrono::steady_clock;

// Largest kReplicaApply message a primary sends.
constexpr size_t kShipMessageBytes = 8u << 20;
// A backup fill copies at most this much per step (one hold of the
// segment's replication lock): a client's write waits for at most one step
// (after a failover the promoted primary fills its new backup while
// clients write through it).
constexpr uint64_t kCopyStep = 256u << 10;

bool IsReplica(const v1::SegmentReplica& r, uint32_t server, uint32_t local) {
  return r.server_id() == server && r.local_index() == local;
}

// Tells the monitor about backup `b` of segment `g`; `caller` is the
// primary's or the backup's server; key 0 keeps the recorded key.
Status ReportBackup(monitor::MonitorClient* monitor, uint32_t caller, uint32_t g, ReplicaId b,
                    uint32_t key, v1::ReplicaState state) {
  v1::ReportReplicaRequest rr;
  rr.set_server_id(caller);
  rr.set_segment(g);
  rr.set_replica_server_id(b.first);
  rr.set_local_index(b.second);
  rr.set_access_key(key);
  rr.set_state(state);
  v1::ReportReplicaResponse resp;
  return monitor->ReportReplica(rr, &resp);
}

}  // namespace

Status DataServer::OpenPrimary(Segment* seg) {
  std::span<char> mem = space_->segment(seg->local);
  seg->base = mem.data();
  Segment* raw = seg;
  auto device_persist = space_->device().persist_fn();
  seg->persist = [raw, device_persist](const void* p, size_t n) {
    device_persist(p, n);
    if (RedoBatch* b = raw->capture.load(std::memory_order_acquire); b != nullptr) {
      b->Add(static_cast<uint64_t>(static_cast<const char*>(p) - raw->base), p, n);
    }
  };
  dsm::PmRange range{mem.data(), mem.size(), seg->persist};
  dsm::PAllocatorOptions ao;
  ao.num_cores = static_cast<int>(options_.cores);
  PDPM_RETURN_IF_ERROR(dsm::PAllocator::Open(range, ao, &seg->alloc));
  if (seg->role.kind == SegmentKind::kTable) {
    dsm::ObjectStoreOptions to;
    to.root_slot = kObjectRootSlot;
    dsm::ObjectStoreRecovery rec;
    PDPM_RETURN_IF_ERROR(dsm::ObjectStoreTable::Open(seg->alloc.get(), to, &seg->table, &rec));
    log_.Info("table recovered", {{"local", seg->local},
                                  {"table", seg->role.table},
                                  {"objects", rec.objects},
                                  {"reclaimed_blocks", rec.reclaimed_blocks},
                                  {"repaired_links", rec.repaired_links}});
    PDPM_RETURN_IF_ERROR(OpenVnode(seg));
  }
  return Status::OK();
}

Status DataServer::RegisterAnew(Segment* seg) {
  std::unique_ptr<net::MemoryRegion> fresh;
  PDPM_RETURN_IF_ERROR(transport_->RegisterMemory(seg->base, space_->segment_size(),
                                                  PrimaryAccess(seg->role.kind) | lease_gated_,
                                                  space_->device().persist_fn(), &fresh));
  std::swap(seg->region, fresh);
  fresh.reset();  // waits for one-sided ops still using the old key
  return Status::OK();
}

void DataServer::ClearLocalSegment(uint32_t local) {
  std::span<char> mem = space_->segment(local);
  std::memset(mem.data(), 0, dsm::kPageSize);
  space_->device().persist_fn()(mem.data(), dsm::kPageSize);
}

Status DataServer::OpenBackup(uint32_t local, uint32_t global, bool fresh,
                              std::unique_ptr<Segment>* out) {
  auto seg = std::make_unique<Segment>();
  std::span<char> mem = space_->segment(local);
  seg->local = local;
  seg->base = mem.data();
  seg->backup = true;
  seg->role.global = global;
  if (fresh) {
    // The fill copies chunk 0 (with the region header) last: until then a
    // restart finds no region here and treats the segment as free.
    ClearLocalSegment(local);
  }
  // Written one-sided by clients, never read: from the view change that
  // promotes it until its promotion has applied the transactions only its
  // BACKUP records hold, the copy lacks committed values, and a read there
  // would validate (its version words were never locked for them). Promote
  // registers it readable under a new key, announced once it is complete.
  PDPM_RETURN_IF_ERROR(transport_->RegisterMemory(mem.data(), mem.size(),
                                                  net::kRemoteWrite | lease_gated_,
                                                  space_->device().persist_fn(), &seg->region));
  *out = std::move(seg);
  return Status::OK();
}

Status DataServer::ClassifyRecovered(const std::atomic<bool>* stop) {
  v1::GetMappingResponse m;
  Status s;
  while (true) {
    s = monitor_->GetMapping(0, &m);
    if (s.ok() || (stop != nullptr && stop->load())) break;
    log_.Warn("waiting for the monitor", {{"monitor", options_.monitor}, {"status", s}});
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  PDPM_RETURN_IF_ERROR(s.WithContext("load the mapping"));
  for (uint32_t local = 0; local < segments_.size(); local++) {
    if (segments_[local] == nullptr) continue;
    const SegmentRole role = segments_[local]->role;
    if (role.kind == SegmentKind::kTxLog) {  // server-local: opened, never announced
      std::unique_ptr<Segment> opened;
      PDPM_RETURN_IF_ERROR(OpenSegment(local, role, &opened).WithContext("transaction log"));
      segments_[local] = std::move(opened);
      tx_log_ = segments_[local].get();
      continue;
    }
    const v1::SegmentMapping* sm = nullptr;
    for (const auto& x : m.segments()) {
      if (role.global != 0 && x.segment() == role.global) sm = &x;
    }
    bool primary =
        role.global == 0 || (sm != nullptr && IsReplica(sm->primary(), server_id_, local));
    bool backup = false;
    if (sm != nullptr) {
      for (const auto& b : sm->backups()) backup |= IsReplica(b, server_id_, local);
    }
    const std::string what = "segment " + std::to_string(local);
    Status st;
    if (primary) {
      std::unique_ptr<Segment> opened;
      PDPM_RETURN_IF_ERROR(OpenSegment(local, role, &opened).WithContext("recover " + what));
      segments_[local] = std::move(opened);
      st = Announce(segments_[local].get());
      if (st.code() == StatusCode::kFailedPrecondition && role.global == 0) {
        // A table segment the monitor never confirmed, for a table that has
        // moved meanwhile: it holds nothing acknowledged. Free it.
        log_.Warn("dropping an unconfirmed segment", {{"local", local}, {"status", st}});
        PDPM_RETURN_IF_ERROR(segments_[local]->alloc->SetRoot(kRoleSlot, 0));
        segments_[local].reset();
        continue;
      }
      if (st.ok() && sm != nullptr) {
        // Our crash may have cut a shipment short, or left the backups ahead
        // of what recovery kept here: each backup is filled again.
        for (const auto& b : sm->backups()) {
          PDPM_RETURN_IF_ERROR(ReportBackup(monitor_.get(), server_id_, role.global,
                                            {b.server_id(), b.local_index()}, 0,
                                            v1::REPLICA_STATE_SYNCING)
                                   .WithContext("resync " + what));
        }
      }
    } else if (backup) {
      std::unique_ptr<Segment> opened;
      PDPM_RETURN_IF_ERROR(OpenBackup(local, role.global, false, &opened));
      opened->role = role;
      st = ReportBackup(monitor_.get(), server_id_, role.global, {server_id_, local},
                        opened->region->key(), v1::REPLICA_STATE_UNSPECIFIED);
      if (st.ok()) {
        std::unique_lock lock(mu_);
        backups_[role.global] = opened.get();
        segments_[local] = std::move(opened);
        log_.Info("backup reopened", {{"local", local}, {"global", role.global}});
        continue;
      }
    } else {
      st = Status::StaleEpoch("not mapped here any more");
    }
    if (st.code() == StatusCode::kStaleEpoch) {
      // The cluster moved this segment away while we were gone: fenced. Its
      // local segment is freed (the header cleared, so it reads as free).
      log_.Warn("freeing a fenced copy",
                {{"local", local}, {"global", role.global}, {"status", st}});
      segments_[local].reset();
      ClearLocalSegment(local);
      continue;
    }
    PDPM_RETURN_IF_ERROR(st.WithContext("announce " + what));
  }
  return Status::OK();
}

Status DataServer::CheckMutable(const Segment& seg) const {
  if (seg.fenced) {
    return Status::StaleEpoch("segment " + std::to_string(seg.role.global) +
                              " moved to another server");
  }
  if (seg.released && seg.role.kind == SegmentKind::kTable) {
    return Status::Aborted("table segment " + std::to_string(seg.role.global) +
                           " is being released: ask again");
  }
  return Status::OK();
}

Status DataServer::Mutate(Segment* seg, const std::function<Status()>& op, const TxTag& tag) {
  std::lock_guard lock(seg->repl_mu);
  PDPM_RETURN_IF_ERROR(CheckMutable(*seg));
  bool replicated;
  {
    std::shared_lock l(mu_);
    auto it = placement_.find(seg->role.global);
    replicated = it != placement_.end() && it->second.backups_size() > 0;
  }
  if (!replicated) return op();
  RedoBatch batch;
  seg->capture.store(&batch, std::memory_order_release);
  Status s = op();
  seg->capture.store(nullptr, std::memory_order_release);
  PDPM_RETURN_IF_ERROR(ShipLocked(seg, batch, tag));
  return s;
}

Status DataServer::ShipLocked(Segment* seg, const RedoBatch& batch, TxTag tag) {
  if (batch.empty() && !tag) return Status::OK();
  const uint32_t g = seg->role.global;
  // Bounded: long enough for the monitor to declare a dead backup DOWN and
  // drop it.
  auto deadline = Clock::now() + std::chrono::milliseconds(2 * down_timeout_ms_ + 1000);
  std::set<ReplicaId> done;
  std::set<uint32_t> reported;  // servers reported unreachable
  Status last;
  while (true) {
    if (seg->fenced) return Status::StaleEpoch("segment " + std::to_string(g) + " moved away");
    std::vector<std::pair<ReplicaId, PeerAddress>> targets;
    uint64_t epoch;
    {
      std::shared_lock l(mu_);
      auto it = placement_.find(g);
      if (it == placement_.end() || !IsReplica(it->second.primary(), server_id_, seg->local)) {
        return Status::StaleEpoch("segment " + std::to_string(g) + " is no longer served here");
      }
      for (const auto& b : it->second.backups()) {
        ReplicaId id{b.server_id(), b.local_index()};
        if (b.state() == v1::REPLICA_STATE_IN_SYNC || seg->attached.count(id)) {
          auto a = server_addresses_.find(b.server_id());
          targets.emplace_back(id, a == server_addresses_.end() ? PeerAddress{} : a->second);
        }
      }
      epoch = epoch_;
    }
    // Each message to every backup not yet done, the backups at once; a
    // backup's first failure ends its messages.
    std::vector<std::pair<ReplicaId, PeerAddress>> pending;
    for (const auto& t : targets) {
      if (done.count(t.first) == 0) pending.push_back(t);
    }
    std::vector<Status> outcome(pending.size());
    for (const std::string& msg : batch.Encode({epoch, credential_}, g, kShipMessageBytes, tag)) {
      std::vector<PeerCall> calls;
      std::vector<size_t> of;  // calls[k] is pending[of[k]]'s
      for (size_t k = 0; k < pending.size(); ++k) {
        if (!outcome[k].ok()) continue;
        calls.emplace_back(pending[k].second, kReplicaApply, msg);
        of.push_back(k);
      }
      if (calls.empty()) break;
      peers_.CallAll(calls);
      for (size_t k = 0; k < calls.size(); ++k) outcome[of[k]] = std::move(calls[k].status);
    }
    bool all = true;
    for (size_t k = 0; k < pending.size(); ++k) {
      const ReplicaId id = pending[k].first;
      const Status& s = outcome[k];
      if (s.ok()) {
        done.insert(id);
      } else {
        all = false;
        last = s.WithContext("backup on server " + std::to_string(id.first));
        if (s.code() == StatusCode::kUnavailable && reported.insert(id.first).second) {
          ReportUnreachable(id.first);
        }
      }
    }
    if (all) return Status::OK();
    if (Clock::now() > deadline) {
      return Status::Unavailable(
          "segment " + std::to_string(g) +
          ": a backup did not take the update, not acknowledged: " + last.ToString());
    }
    // Wait for the backup to return or for the monitor to replace it.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    Status r = RefreshMapping();
    if (!r.ok()) last = r;
  }
}

void DataServer::ReportUnreachable(uint32_t server) {
  // The monitor's confirming probe is a TCP connect (monitor/probe.h): on
  // verbs it would refuse a live server, so there the heartbeats decide.
  if (options_.transport != net::BackendKind::kTcp) return;
  v1::ReportUnreachableRequest req;
  req.set_server_id(server);
  v1::ReportUnreachableResponse resp;
  Status s = monitor_->ReportUnreachable(req, &resp);
  if (!s.ok())
    log_.Warn("cannot report an unreachable backup", {{"server", server}, {"status", s}});
}

void DataServer::ScheduleSyncs(const v1::SegmentMapping& sm) {
  std::lock_guard<std::mutex> lock(sync_mu_);
  bool any = false;
  for (const auto& b : sm.backups()) {
    if (b.state() == v1::REPLICA_STATE_SYNCING) {
      any |= sync_wanted_
                 .insert({static_cast<uint32_t>(sm.segment()), {b.server_id(), b.local_index()}})
                 .second;
    }
  }
  if (any) sync_cv_.notify_all();
}

void DataServer::Reconcile(const v1::GetMappingResponse& m) {
  std::vector<std::pair<Segment*, v1::SegmentMapping>> promote;
  std::vector<v1::SegmentMapping> primaries;
  std::vector<Segment*> dropped;
  {
    std::unique_lock lock(mu_);
    std::map<uint32_t, const v1::SegmentMapping*> by_g;
    for (const auto& sm : m.segments()) by_g[static_cast<uint32_t>(sm.segment())] = &sm;
    auto fence = [&](Segment* seg, const char* why) {
      seg->fenced = true;
      seg->region.reset();  // no one-sided op reaches it any more
      log_.Warn(why, {{"global", seg->role.global}, {"local", seg->local}, {"epoch", m.epoch()}});
    };
    for (auto it = by_global_.begin(); it != by_global_.end();) {
      auto f = by_g.find(it->first);
      if (f == by_g.end() || IsReplica(f->second->primary(), server_id_, it->second->local)) {
        if (f != by_g.end()) primaries.push_back(*f->second);
        ++it;
        continue;
      }
      fence(it->second, "fenced: the segment has a new primary");
      if (it->second->role.kind == SegmentKind::kTable) by_table_.erase(it->second->role.table);
      it = by_global_.erase(it);
    }
    for (auto it = backups_.begin(); it != backups_.end();) {
      auto f = by_g.find(it->first);
      Segment* seg = it->second;
      bool still = false;
      if (f != by_g.end()) {
        for (const auto& b : f->second->backups()) still |= IsReplica(b, server_id_, seg->local);
      }
      if (f != by_g.end() && IsReplica(f->second->primary(), server_id_, seg->local)) {
        promote.emplace_back(seg, *f->second);
      } else if (!still) {
        fence(seg, "backup dropped by the cluster");
        dropped.push_back(seg);
        it = backups_.erase(it);
        continue;
      }
      ++it;
    }
  }
  // A dropped copy's local segment is free again (a new backup or primary
  // may take it) once no copy step or shipment still writes it. The view
  // that dropped it may already place another backup there, whose attach
  // then took the local segment itself.
  for (Segment* seg : dropped) {
    std::lock_guard repl(seg->repl_mu);
    std::unique_lock lock(mu_);
    if (segments_[seg->local].get() != seg) continue;
    ClearLocalSegment(seg->local);
    retired_.push_back(std::move(segments_[seg->local]));
  }
  if (!promote.empty() && refuse_promotions_ms_ < 0) {
    const char* ms =
        std::getenv("PDPM_TEST_REFUSE_PROMOTIONS_MS");  // NOLINT(concurrency-mt-unsafe)
    refuse_promotions_ms_ = ms == nullptr ? 0 : std::atoll(ms);
    refuse_promotions_until_ =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(refuse_promotions_ms_);
  }
  for (auto& [seg, sm] : promote) {
    Status s = std::chrono::steady_clock::now() < refuse_promotions_until_
                   ? Status::Unavailable("refused by the test hook PDPM_TEST_REFUSE_PROMOTIONS_MS")
                   : Promote(seg, sm);
    if (!s.ok()) {
      promotion_failed_ = true;  // the next heartbeat tries again
      log_.Error("promotion failed", {{"global", sm.segment()}, {"status", s}});
    } else {
      primaries.push_back(sm);  // its new backups fill now, not after the next change
    }
  }
  for (const auto& sm : primaries) ScheduleSyncs(sm);
}

Status DataServer::Promote(Segment* seg, const v1::SegmentMapping& sm) {
  const uint32_t g = static_cast<uint32_t>(sm.segment());
  std::lock_guard lock(seg->repl_mu);
  if (!seg->backup) return Status::OK();
  SegmentRole role;
  PDPM_RETURN_IF_ERROR(ReadSegmentRole(space_->segment(seg->local), &role));
  if (role.kind == SegmentKind::kFree || role.global != g) {
    return Status::Corruption("backup of segment " + std::to_string(g) + " on local " +
                              std::to_string(seg->local) + " is not a complete copy");
  }
  seg->role = role;
  PDPM_RETURN_IF_ERROR(OpenPrimary(seg).WithContext("promote segment " + std::to_string(g)));
  // Committed transactions whose values only the BACKUP records hold reach
  // the copy (frees through the allocator just opened) before it serves.
  PDPM_RETURN_IF_ERROR(tx_->PromoteSegment(g).WithContext("promote segment " + std::to_string(g)));
  seg->backup = false;
  {
    std::unique_lock l(mu_);
    backups_.erase(g);
    by_global_[g] = seg;
    if (role.kind == SegmentKind::kTable) by_table_[role.table] = seg;
    seg->placement_epoch = sm.placement_epoch();
  }
  // Readable from now on, under a key the view gets only now: clients that
  // read with the backup's key are refused and follow the view.
  PDPM_RETURN_IF_ERROR(RegisterAnew(seg));
  PDPM_RETURN_IF_ERROR(Announce(seg).WithContext("announce promoted segment " + std::to_string(g)));
  log_.Info("promoted to primary",
            {{"global", g}, {"local", seg->local}, {"epoch", sm.placement_epoch()}});
  // Recovery may have repaired the copy (leaks, links): the backups left
  // are filled again rather than trusted to match it. Those placed syncing
  // are filled anyway (no call to the monitor before the segment serves).
  for (const auto& b : sm.backups()) {
    if (b.state() == v1::REPLICA_STATE_SYNCING) continue;
    PDPM_RETURN_IF_ERROR(ReportBackup(monitor_.get(), server_id_, g,
                                      {b.server_id(), b.local_index()}, 0,
                                      v1::REPLICA_STATE_SYNCING));
  }
  return Status::OK();
}

void DataServer::SyncLoop() {
  std::unique_lock<std::mutex> lock(sync_mu_);
  while (!sync_stop_) {
    sync_cv_.wait_for(lock, std::chrono::milliseconds(200),
                      [&] { return sync_stop_ || !sync_wanted_.empty(); });
    if (sync_stop_ || sync_wanted_.empty()) continue;
    auto job = *sync_wanted_.begin();
    sync_wanted_.erase(sync_wanted_.begin());
    lock.unlock();
    Status s = FillBackupOnce(job.first, job.second);
    if (s.ok()) {
      // The mapping now says in sync: a queued repeat is stale.
      Status r = RefreshMapping();
      lock.lock();
      if (r.ok()) sync_wanted_.erase(job);
      continue;
    }
    log_.Warn("backup fill failed; retried",
              {{"global", job.first}, {"backup_server", job.second.first}, {"status", s}});
    lock.lock();
    sync_cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return sync_stop_.load(); });
    sync_wanted_.insert(job);
  }
}

Status DataServer::SyncBackup(uint32_t g, ReplicaId backup) {
  // Whether the backup still needs a fill, from the monitor's mapping of
  // now: the placement held here may predate the in-sync report of a fill
  // another thread just finished (the creator's first fill and the sync
  // loop both fill a new segment's backups), and a fill of an in-sync
  // backup wipes its region header until the copy ends — a primary lost
  // meanwhile would leave a backup that cannot be promoted.
  PDPM_RETURN_IF_ERROR(RefreshMapping());
  Segment* seg;
  PeerAddress address;
  uint64_t epoch;
  {
    std::shared_lock l(mu_);
    auto it = by_global_.find(g);
    auto p = placement_.find(g);
    if (it == by_global_.end() || p == placement_.end()) return Status::OK();  // not ours
    bool syncing = false;
    for (const auto& b : p->second.backups()) {
      syncing |=
          IsReplica(b, backup.first, backup.second) && b.state() == v1::REPLICA_STATE_SYNCING;
    }
    if (!syncing) return Status::OK();
    seg = it->second;
    auto a = server_addresses_.find(backup.first);
    if (a == server_addresses_.end()) return Status::NotFound("no address for the backup");
    address = a->second;
    epoch = epoch_;
  }
  auto started = Clock::now();
  // 1. The backup server prepares the copy and tells its key.
  std::string req, reply;
  Encoder e(&req);
  e.Header({epoch, credential_});
  e.U64(g);
  e.U64(backup.second);
  PDPM_RETURN_IF_ERROR(peers_.Call(address, kReplicaAttach, req, &reply));
  Decoder d({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
  uint64_t key = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&key));
  // 2. From now on every update is shipped to it too. One-sided writes made
  // by clients that do not know of this backup are fenced by a new key:
  // after it, writes come through this server (kHeapWrite) until the
  // backup is in sync. Not in a new segment's first fill: it has taken no
  // write, and its key was announced with its backups (registering anew
  // pins the whole segment again: seconds on an emulated RDMA device).
  bool fence = false;
  {
    std::lock_guard lock(seg->repl_mu);
    if (seg->fenced) return Status::StaleEpoch("segment moved away");
    seg->attached.insert(backup);
    fence = !seg->first_fill.load();
    if (fence) PDPM_RETURN_IF_ERROR(RegisterAnew(seg));
  }
  if (fence) PDPM_RETURN_IF_ERROR(Announce(seg).WithContext("announce the new key"));
  // 3. The copy: every chunk in use whole, a free chunk's header, chunk 0
  // (region header) last; each step under the replication lock so it is
  // ordered with the shipping.
  const uint32_t chunks = static_cast<uint32_t>(space_->segment_size() / dsm::kChunkSize);
  const double rate = static_cast<double>(std::max<uint64_t>(options_.resync_bytes_per_sec, 1));
  uint64_t copied = 0;
  auto copy = [&](uint64_t off, uint64_t len) -> Status {
    {
      std::lock_guard lock(seg->repl_mu);
      if (seg->fenced) return Status::StaleEpoch("segment moved away");
      RedoBatch b;
      b.Add(off, seg->base + off, len);
      uint64_t ep;
      {
        std::shared_lock l(mu_);
        ep = epoch_;
      }
      for (const std::string& msg : b.Encode({ep, credential_}, g, kShipMessageBytes)) {
        std::string r;
        PDPM_RETURN_IF_ERROR(peers_.Call(address, kReplicaApply, msg, &r));
      }
    }
    copied += len;
    auto due = started + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(static_cast<double>(copied) / rate));
    if (due > Clock::now()) std::this_thread::sleep_until(due);
    return Status::OK();
  };
  auto copy_run = [&](uint64_t off, uint64_t len, bool backwards) -> Status {
    uint64_t steps = (len + kCopyStep - 1) / kCopyStep;
    for (uint64_t i = 0; i < steps; i++) {
      uint64_t k = backwards ? steps - 1 - i : i;
      uint64_t o = off + k * kCopyStep;
      PDPM_RETURN_IF_ERROR(copy(o, std::min(kCopyStep, off + len - o)));
    }
    return Status::OK();
  };
  for (uint32_t c = 1; c < chunks;) {
    dsm::ChunkState st;
    Status hs = dsm::ReadChunkHeader(seg->base, chunks, c, &st);
    uint32_t run = hs.ok() && st.kind == dsm::ChunkKind::kLarge ? std::max(st.run_chunks, 1u) : 1;
    run = std::min(run, chunks - c);
    uint64_t off = uint64_t{c} * dsm::kChunkSize;
    if (hs.ok() && st.kind == dsm::ChunkKind::kFree) {
      PDPM_RETURN_IF_ERROR(copy(off, dsm::kChunkHeaderSize));
    } else {
      PDPM_RETURN_IF_ERROR(copy_run(off, uint64_t{run} * dsm::kChunkSize, false));
    }
    c += run;
  }
  PDPM_RETURN_IF_ERROR(
      copy_run(0, std::min<uint64_t>(dsm::kChunkSize, space_->segment_size()), true));
  // 4. In sync, once the transactions locked here without a BACKUP record
  // at it are done (docs/tx.md "Backups joining").
  PDPM_RETURN_IF_ERROR(JoinBackup(g, backup.first, address));
  Status reported = ReportBackup(monitor_.get(), server_id_, g, backup, static_cast<uint32_t>(key),
                                 v1::REPLICA_STATE_IN_SYNC);
  if (!reported.ok()) {
    tx_->BackupNotJoined(g, backup.first);
    return reported;
  }
  log_.Info(
      "backup in sync",
      {{"global", g},
       {"backup_server", backup.first},
       {"local", backup.second},
       {"bytes", copied},
       {"ms",
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count()}});
  return Status::OK();
}

Status DataServer::HandleReplicaAttach(std::span<const uint8_t> req, std::string* reply) {
  Decoder d(req);
  RequestHeader h;
  uint64_t g = 0, local = 0;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(d.U64(&g));
  PDPM_RETURN_IF_ERROR(d.U64(&local));
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  if (local >= segments_.size())
    return Status::OutOfRange("no local segment " + std::to_string(local));
  auto listed = [&] {
    std::shared_lock l(mu_);
    auto it = placement_.find(static_cast<uint32_t>(g));
    if (it == placement_.end()) return false;
    for (const auto& b : it->second.backups()) {
      if (IsReplica(b, server_id_, static_cast<uint32_t>(local))) return true;
    }
    return false;
  };
  if (!listed()) {
    PDPM_RETURN_IF_ERROR(RefreshMapping());
    if (!listed()) {
      return Status::StaleEpoch("server " + std::to_string(server_id_) + " local " +
                                std::to_string(local) + " is not a backup of segment " +
                                std::to_string(g));
    }
  }
  tx_->BackupRefilled(static_cast<uint32_t>(g));
  std::lock_guard<std::mutex> grow(grow_mu_);
  Segment* existing;
  {
    std::shared_lock l(mu_);
    existing = segments_[local].get();
  }
  if (existing != nullptr && existing->backup && !existing->fenced && existing->role.global == g) {
    std::lock_guard lock(existing->repl_mu);
    ClearLocalSegment(static_cast<uint32_t>(local));
    Encoder(reply).U64(existing->region->key());
    return Status::OK();
  }
  if (existing != nullptr && !existing->fenced && existing->role.kind == SegmentKind::kTxLog) {
    // Server-local data the monitor's view did not show (a view of an older
    // format): the monitor records it and places the backup elsewhere;
    // the primary's next try finds the backup gone.
    Status reported =
        ReportBackup(monitor_.get(), server_id_, static_cast<uint32_t>(g),
                     {server_id_, static_cast<uint32_t>(local)}, 0, v1::REPLICA_STATE_REFUSED);
    return Status::FailedPrecondition(
        "local segment " + std::to_string(local) + " holds this server's transaction log" +
        (reported.ok() ? "; the backup is placed anew"
                       : "; reporting that failed: " + reported.ToString()));
  }
  if (existing != nullptr && !existing->fenced) {
    return Status::FailedPrecondition("local segment " + std::to_string(local) +
                                      " holds global segment " +
                                      std::to_string(existing->role.global));
  }
  std::unique_ptr<Segment> seg;
  PDPM_RETURN_IF_ERROR(
      OpenBackup(static_cast<uint32_t>(local), static_cast<uint32_t>(g), true, &seg));
  Encoder(reply).U64(seg->region->key());
  std::unique_lock l(mu_);
  if (segments_[local] != nullptr) retired_.push_back(std::move(segments_[local]));
  backups_[static_cast<uint32_t>(g)] = seg.get();
  segments_[local] = std::move(seg);
  log_.Info("backup attached", {{"global", g}, {"local", local}});
  return Status::OK();
}

Status DataServer::HandleReplicaApply(std::span<const uint8_t> req, std::string* /*reply*/) {
  Decoder d(req);
  RequestHeader h;
  uint32_t g = 0;
  std::vector<ApplyRange> ranges;
  TxTag tag;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(DecodeApply(&d, &g, &ranges, &tag));
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  Segment* seg;
  {
    std::shared_lock l(mu_);
    auto it = backups_.find(g);
    if (it == backups_.end()) {
      return Status::StaleEpoch("server " + std::to_string(server_id_) +
                                " holds no backup of segment " + std::to_string(g));
    }
    seg = it->second;
    auto p = placement_.find(g);
    if (p != placement_.end() && h.epoch < p->second.placement_epoch()) {
      return Status::StaleEpoch("segment " + std::to_string(g) + " placed in epoch " +
                                std::to_string(p->second.placement_epoch()) + ", shipment has " +
                                std::to_string(h.epoch));
    }
  }
  const uint64_t size = space_->segment_size();
  for (const ApplyRange& r : ranges) {
    if (r.offset > size || r.bytes.size() > size - r.offset) {
      return Status::InvalidArgument("replica apply: range beyond the segment");
    }
  }
  std::lock_guard lock(seg->repl_mu);
  if (seg->fenced || !seg->backup) {
    return Status::StaleEpoch("segment " + std::to_string(g) + " is no longer a backup here");
  }
  auto persist = space_->device().persist_fn();
  auto apply = [&] {
    for (const ApplyRange& r : ranges) {
      std::memcpy(seg->base + r.offset, r.bytes.data(), r.bytes.size());
      persist(seg->base + r.offset, r.bytes.size());
    }
    return Status::OK();
  };
  // A transaction's commit (its BACKUP record of g is marked applied) or
  // allocation (its BACKUP-ALLOC records).
  if (tag) return tx_->ApplyShipped(g, tag, apply);
  return apply();
}

Status DataServer::HandleHeapWrite(std::span<const uint8_t> req, std::string* /*reply*/) {
  Decoder d(req);
  RequestHeader h;
  dsm::GlobalAddress a;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(d.Address(&a));
  std::string_view data = d.Rest();
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  if (a.kind() != dsm::SpaceKind::kHeap) {
    return Status::InvalidArgument(a.ToString() + " is not a heap address");
  }
  PDPM_RETURN_IF_ERROR(a.CheckRange(data.size(), space_->segment_size()));
  Segment* seg;
  {
    std::shared_lock l(mu_);
    auto it = by_global_.find(a.segment);
    if (it == by_global_.end()) {
      return Status::StaleEpoch("segment " + std::to_string(a.segment) + " is not served here");
    }
    if (h.epoch < it->second->placement_epoch) {
      return Status::StaleEpoch("segment " + std::to_string(a.segment) + " placed in epoch " +
                                std::to_string(it->second->placement_epoch));
    }
    seg = it->second;
  }
  return Mutate(seg, [&] {
    std::memcpy(seg->base + a.offset, data.data(), data.size());
    seg->persist(seg->base + a.offset, data.size());
    return Status::OK();
  });
}

}  // namespace pdpm::server
