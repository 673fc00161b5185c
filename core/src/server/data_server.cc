#include "server/data_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <utility>

#include "dsm/address.h"
#include "monitor/placement.h"

namespace pdpm::server {
namespace {

using Clock = std::chrono::steady_clock;

// 128 random bits in hex: a new server's join token (RegisterServerRequest).
std::string NewJoinToken() {
  std::random_device random;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    char word[9];
    std::snprintf(word, sizeof(word), "%08x", static_cast<unsigned>(random()));
    token += word;
  }
  return token;
}

dsm::ObjectStoreOptions TableOptions() {
  dsm::ObjectStoreOptions o;
  o.root_slot = kObjectRootSlot;
  return o;
}

}  // namespace

DataServer::DataServer(const ServerOptions& options, const Logger& log)
    : options_(options), log_(log), credential_(ClusterCredential(options.cluster_secret)) {}

DataServer::~DataServer() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  sync_stop_ = true;
  sync_cv_.notify_all();
  {
    std::lock_guard<std::mutex> lock(create_mu_);
    create_stop_ = true;
  }
  create_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (refresher_.joinable()) refresher_.join();
  if (sync_.joinable()) sync_.join();
  if (creator_.joinable()) creator_.join();
  rpc_.reset();
}

Status DataServer::Start(const ServerOptions& options, const Logger& log,
                         const std::atomic<bool>* stop, std::unique_ptr<DataServer>* out) {
  if (options.cores == 0 || options.cores > 256) {
    return Status::InvalidArgument("--cores must be 1..256");
  }
  if (options.resync_bytes_per_sec == 0) {
    return Status::InvalidArgument("--resync-rate must be positive");
  }
  std::unique_ptr<DataServer> s(new DataServer(options, log));
  monitor::MonitorClientOptions mo;
  mo.cluster_secret = options.cluster_secret;
  s->monitor_ = std::make_unique<monitor::MonitorClient>(options.monitor, mo);
  PDPM_RETURN_IF_ERROR(s->OpenPm(stop));

  net::TransportOptions to;
  to.backend = options.transport;
  // One more core than announced: the replication core, where peers send
  // backups' traffic (kReplicaApply, kReplicaAttach). Its serving thread is
  // reserved for it and its handlers never wait for another server, so two
  // primaries shipping to each other cannot take each other's threads.
  to.cores = options.cores + 1;
  to.op_timeout_ms = options.op_timeout_ms;
  to.max_transfer = kMaxRpcPayload;
  DataServer* self = s.get();
  // verbs: the NIC serves one-sided ops without asking (docs/replication.md).
  if (options.transport == net::BackendKind::kTcp) {
    to.remote_access_allowed = [self] { return self->HoldsLease(); };
    s->lease_gated_ = net::kAccessGated;
  }
  PDPM_RETURN_IF_ERROR(net::Transport::Create(to, &s->transport_));
  s->peers_.Init(s->transport_.get(), options.op_timeout_ms);
  PDPM_RETURN_IF_ERROR(s->RecoverSegments());

  net::RpcOptions ro = DataPlaneRpcOptions(options.cores + 1, options.op_timeout_ms);
  ro.reserved_threads = 1;  // the replication core's
  PDPM_RETURN_IF_ERROR(net::RpcServer::Create(s->transport_.get(), ro, &s->rpc_));
  s->rpc_->Register(kPAllocate, [self](std::span<const uint8_t> r, std::string* out) {
    return self->HandlePAllocate(r, out);
  });
  s->rpc_->Register(kPFree, [self](std::span<const uint8_t> r, std::string* out) {
    return self->HandlePFree(r, out);
  });
  for (uint16_t m : {kPutObj, kWriteObj, kReadObj, kObjSize, kDelObj, kTruncateObj}) {
    s->rpc_->Register(m, [self, m](std::span<const uint8_t> r, std::string* out) {
      return self->HandleObject(m, r, out);
    });
  }
  s->rpc_->Register(kListObj, [self](std::span<const uint8_t> r, std::string* out) {
    return self->HandleListObj(r, out);
  });
  for (uint16_t m = kKvGet; m <= kKvLast; ++m) {
    s->rpc_->Register(m, [self, m](std::span<const uint8_t> r, std::string* out) {
      return self->HandleKv(m, r, out);
    });
  }
  s->tx_ = std::make_unique<TxParticipant>(s->MakeTxHooks(), s->transport_.get(),
                                           log.WithComponent("tx"));
  s->tx_->RegisterRpcs(s->rpc_.get());
  s->rpc_->Register(kReplicaApply, [self](std::span<const uint8_t> r, std::string* out) {
    return self->HandleReplicaApply(r, out);
  });
  s->rpc_->Register(kReplicaApplyMany, [self](std::span<const uint8_t> r, std::string* out) {
    return self->HandleReplicaApplyMany(r, out);
  });
  s->rpc_->Register(kReplicaAttach, [self](std::span<const uint8_t> r, std::string* out) {
    return self->HandleReplicaAttach(r, out);
  });
  s->rpc_->Register(kHeapWrite, [self](std::span<const uint8_t> r, std::string* out) {
    return self->HandleHeapWrite(r, out);
  });
  s->rpc_->Register(kHeapPersist, [self](std::span<const uint8_t> r, std::string* out) {
    return self->HandleHeapPersist(r, out);
  });
  PDPM_RETURN_IF_ERROR(s->rpc_->Listen(options.listen).WithContext("listen " + options.listen));
  s->address_ = options.advertise.empty() ? s->transport_->listen_address() : options.advertise;
  PDPM_RETURN_IF_ERROR(s->Register(stop));

  // Each recovered segment is a primary (announced again: its key is new,
  // and one whose announcement a crash interrupted gets its number now), a
  // backup, or a copy the cluster moved away meanwhile (freed).
  PDPM_RETURN_IF_ERROR(s->ClassifyRecovered(stop));
  PDPM_RETURN_IF_ERROR(s->RefreshMapping());
  PDPM_RETURN_IF_ERROR(s->tx_->Recover().WithContext("recover transactions"));
  // Logged before the heartbeat thread may change what it reads.
  log.Info("serving", {{"address", s->address_},
                       {"server_id", s->server_id_},
                       {"epoch", s->epoch_},
                       {"transport", std::string(net::BackendKindName(options.transport))},
                       {"cores", options.cores},
                       {"segments", s->by_global_.size()},
                       {"tables_owned", s->owned_tables_.size()}});
  s->serving_ = true;
  s->heartbeat_ = std::thread([self] { self->HeartbeatLoop(); });
  s->refresher_ = std::thread([self] { self->RefreshLoop(); });
  s->sync_ = std::thread([self] { self->SyncLoop(); });
  s->creator_ = std::thread([self] { self->CreatorLoop(); });
  *out = std::move(s);
  return Status::OK();
}

Status DataServer::OpenPm(const std::atomic<bool>* stop) {
  pm::PmOptions po;
  po.create_size = options_.pm_size;
  std::unique_ptr<pm::PmDevice> device;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(options_.pm_path, po, &device));
  log_.Info("pm opened", {{"path", options_.pm_path},
                          {"kind", std::string(pm::PmKindName(device->kind()))},
                          {"capacity", device->capacity()},
                          {"simulating_power_loss", device->simulating_power_loss()}});
  pm::OpenOptions oo;
  oo.segment_size = options_.segment_size;
  // Open never formats; a blank device is formatted only when asked.
  Status s = pm::PmSpace::Open(std::move(device), oo, &space_);
  if (s.code() != StatusCode::kNotFound) return s;
  if (!options_.format) {
    return Status::FailedPrecondition("PM " + options_.pm_path +
                                      " is not formatted; start with --format to format it");
  }
  pm::FormatOptions fo;
  fo.segment_size = options_.segment_size;
  if (fo.segment_size == 0) {
    // The cluster's segment size.
    v1::GetMappingResponse m;
    while (true) {
      s = monitor_->GetMapping(0, &m);
      if (s.ok() || (stop != nullptr && stop->load())) break;
      log_.Warn("waiting for the monitor", {{"monitor", options_.monitor}, {"status", s}});
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    PDPM_RETURN_IF_ERROR(s.WithContext("ask the monitor for the segment size"));
    fo.segment_size = m.segment_size();
  }
  PDPM_RETURN_IF_ERROR(dsm::ValidateSegmentSize(fo.segment_size));
  std::unique_ptr<pm::PmDevice> again;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(options_.pm_path, po, &again));
  PDPM_RETURN_IF_ERROR(pm::PmSpace::Format(std::move(again), fo, &space_));
  log_.Info("pm formatted",
            {{"segment_size", fo.segment_size}, {"segments", space_->segment_count()}});
  return Status::OK();
}

Status DataServer::OpenSegment(uint32_t local, const SegmentRole& role,
                               std::unique_ptr<Segment>* out) {
  auto seg = std::make_unique<Segment>();
  seg->local = local;
  seg->role = role;
  std::span<char> mem = space_->segment(local);
  PDPM_RETURN_IF_ERROR(OpenPrimary(seg.get()));
  if (role.kind == SegmentKind::kTxLog) {  // server-local: not accessed remotely
    *out = std::move(seg);
    return Status::OK();
  }
  PDPM_RETURN_IF_ERROR(transport_->RegisterMemory(mem.data(), mem.size(),
                                                  PrimaryAccess(role.kind) | lease_gated_,
                                                  space_->device().persist_fn(), &seg->region));
  *out = std::move(seg);
  return Status::OK();
}

uint32_t DataServer::PrimaryAccess(SegmentKind kind) {
  // Clients read and write the heap one-sided; a table's objects change
  // only through the server's RPCs, so its segment is only read remotely.
  return kind == SegmentKind::kHeap ? net::kRemoteAll : net::kRemoteRead;
}

Status DataServer::RecoverSegments() {
  segments_.resize(space_->segment_count());
  for (uint32_t i = 0; i < space_->segment_count(); i++) {
    SegmentRole role;
    PDPM_RETURN_IF_ERROR(
        ReadSegmentRole(space_->segment(i), &role).WithContext("segment " + std::to_string(i)));
    if (role.kind == SegmentKind::kFree) continue;
    // Opened once the mapping says what it is (ClassifyRecovered).
    segments_[i] = std::make_unique<Segment>();
    segments_[i]->local = i;
    segments_[i]->role = role;
  }
  return Status::OK();
}

Status DataServer::Register(const std::atomic<bool>* stop) {
  pm::Superblock sb = space_->superblock();
  v1::RegisterServerRequest req;
  if (!sb.cluster_uuid.is_nil()) req.set_cluster_uuid(sb.cluster_uuid.ToString());
  req.set_server_id(sb.server_id);
  req.set_segment_count(static_cast<uint32_t>(space_->segment_count()));
  req.set_segment_size(space_->segment_size());
  v1::ServerInfo* info = req.mutable_info();
  info->set_address(address_);
  info->set_transport(std::string(net::BackendKindName(options_.transport)));
  info->set_cores(options_.cores);
  info->set_capacity_bytes(space_->segment_count() * space_->segment_size());
  info->set_segment_count(static_cast<uint32_t>(space_->segment_count()));
  for (const auto& [k, v] : options_.labels) (*info->mutable_labels())[k] = v;
  {
    // What the monitor's view cannot know from the mapping (recovered from
    // PM): no copy is placed there.
    std::shared_lock lock(mu_);
    for (const auto& seg : segments_) {
      if (seg != nullptr && seg->role.kind == SegmentKind::kTxLog) {
        req.add_server_local_segments(seg->local);
      }
    }
  }
  if (sb.cluster_uuid.is_nil()) req.set_join_token(NewJoinToken());
  v1::RegisterServerResponse resp;
  Status s;
  auto sent = std::chrono::steady_clock::now();
  while (true) {
    sent = std::chrono::steady_clock::now();
    s = monitor_->RegisterServer(req, &resp);
    bool transient = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout;
    if (!transient || (stop != nullptr && stop->load())) break;
    log_.Warn("waiting for the monitor", {{"monitor", options_.monitor}, {"status", s}});
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  PDPM_RETURN_IF_ERROR(s.WithContext("register with the monitor " + options_.monitor));
  Uuid cluster;
  PDPM_RETURN_IF_ERROR(Uuid::Parse(resp.cluster_uuid(), &cluster));
  if (sb.cluster_uuid.is_nil() || sb.server_id != resp.server_id()) {
    // A new member: record the identity before serving, crash-atomically.
    PDPM_RETURN_IF_ERROR(space_->AssignIdentity(cluster, resp.server_id()));
    log_.Info("joined the cluster",
              {{"cluster_uuid", resp.cluster_uuid()}, {"server_id", resp.server_id()}});
  }
  server_id_ = resp.server_id();
  heartbeat_ms_ = resp.heartbeat_interval_ms() > 0 ? resp.heartbeat_interval_ms() : 1000;
  if (resp.down_timeout_ms() > 0) down_timeout_ms_ = resp.down_timeout_ms();
  {
    std::unique_lock lock(mu_);
    epoch_ = std::max(epoch_, resp.epoch());
  }
  // Nothing is served yet (Start classifies and refreshes before serving).
  lease_granted_ = resp.lease_ms() > 0;
  lease_until_ns_ = (sent + std::chrono::milliseconds(resp.lease_ms())).time_since_epoch().count();
  return Status::OK();
}

Status DataServer::Announce(Segment* seg) {
  v1::AllocateSegmentRequest req;
  req.set_server_id(server_id_);
  req.set_local_index(seg->local);
  req.set_table(seg->role.kind == SegmentKind::kTable ? seg->role.table : 0);
  req.set_access_key(seg->region->key());
  req.set_segment(seg->role.global);
  {
    std::shared_lock lock(mu_);
    req.set_epoch(epoch_);
  }
  v1::AllocateSegmentResponse resp;
  PDPM_RETURN_IF_ERROR(monitor_->AllocateSegment(req, &resp));
  uint32_t global = static_cast<uint32_t>(resp.mapping().segment());
  if (seg->role.global != 0 && seg->role.global != global) {
    return Status::Corruption("local segment " + std::to_string(seg->local) + " holds global " +
                              std::to_string(seg->role.global) + " but the monitor maps it as " +
                              std::to_string(global));
  }
  if (seg->role.global == 0) {
    seg->role.global = global;
    PDPM_RETURN_IF_ERROR(seg->alloc->SetRoot(kRoleSlot, seg->role.Encode()));
  }
  {
    std::unique_lock lock(mu_);
    seg->placement_epoch = resp.mapping().placement_epoch();
    // The new segment's placement (its backups) counts from now on. epoch_
    // stays: the next heartbeat sees the newer epoch and reloads the whole
    // mapping, which also repairs a refresh that raced with this announce.
    placement_[global] = resp.mapping();
    by_global_[global] = seg;
    if (seg->role.kind == SegmentKind::kTable) by_table_[seg->role.table] = seg;
  }
  ScheduleSyncs(resp.mapping());
  return Status::OK();
}

Status DataServer::FreeLocalSegment(uint32_t* local) {
  std::shared_lock lock(mu_);
  // A local segment the mapping gives this server as a backup is taken,
  // even before its copy arrives (the monitor refuses it as a primary).
  std::set<uint32_t> assigned;
  for (const auto& [global, sm] : placement_) {
    for (const auto& b : sm.backups()) {
      if (b.server_id() == server_id_) assigned.insert(b.local_index());
    }
  }
  *local = 0;
  while (*local < segments_.size() &&
         (segments_[*local] != nullptr || assigned.count(*local) != 0)) {
    ++*local;
  }
  if (*local == segments_.size()) {
    return Status::ResourceExhausted("no free segment left on server " +
                                     std::to_string(server_id_));
  }
  return Status::OK();
}

Status DataServer::CreateSegment(SegmentRole role, Segment** out) {
  uint32_t local = 0;
  PDPM_RETURN_IF_ERROR(FreeLocalSegment(&local));
  std::span<char> mem = space_->segment(local);
  dsm::PmRange range{mem.data(), mem.size(), space_->device().persist_fn()};
  // Order (docs/server.md): format, table, role (global 0), announce, global.
  PDPM_RETURN_IF_ERROR(dsm::PAllocator::Format(range));
  std::unique_ptr<dsm::PAllocator> alloc;
  dsm::PAllocatorOptions ao;
  ao.num_cores = static_cast<int>(options_.cores);
  PDPM_RETURN_IF_ERROR(dsm::PAllocator::Open(range, ao, &alloc));
  std::unique_ptr<dsm::ObjectStoreTable> table;
  if (role.kind == SegmentKind::kTable) {
    PDPM_RETURN_IF_ERROR(dsm::ObjectStoreTable::Create(alloc.get(), TableOptions(), &table));
  }
  role.global = 0;
  PDPM_RETURN_IF_ERROR(alloc->SetRoot(kRoleSlot, role.Encode()));
  alloc.reset();
  table.reset();
  std::unique_ptr<Segment> seg;
  PDPM_RETURN_IF_ERROR(OpenSegment(local, role, &seg));
  seg->first_fill = true;  // no write before its first backups are in sync
  Status s = Announce(seg.get());
  if (!s.ok()) {
    // Not confirmed: give the segment back (it holds nothing).
    Status undo = seg->alloc->SetRoot(kRoleSlot, 0);
    if (!undo.ok()) log_.Error("cannot free an unconfirmed segment", {{"status", undo}});
    return s.WithContext("announce a new segment");
  }
  log_.Info("segment created", {{"local", local},
                                {"global", seg->role.global},
                                {"kind", role.kind == SegmentKind::kHeap ? "heap" : "table"},
                                {"table", role.table}});
  std::unique_lock lock(mu_);
  *out = seg.get();
  segments_[local] = std::move(seg);
  return Status::OK();
}

Status DataServer::RefreshMapping() {
  std::lock_guard<std::mutex> refresh(refresh_mu_);
  v1::GetMappingResponse m;
  PDPM_RETURN_IF_ERROR(monitor_->GetMapping(0, &m));
  std::map<uint32_t, uint64_t> owned;
  for (const auto& t : m.tables()) {
    if (t.server_id() == server_id_) owned[t.table()] = t.assigned_epoch();
  }
  {
    std::unique_lock lock(mu_);
    placement_.clear();
    for (const auto& sm : m.segments()) {
      placement_[static_cast<uint32_t>(sm.segment())] = sm;
      auto it = by_global_.find(static_cast<uint32_t>(sm.segment()));
      if (it != by_global_.end()) it->second->placement_epoch = sm.placement_epoch();
    }
    for (const auto& sv : m.servers()) {
      // Its replication core is the one past those it announced.
      server_addresses_[sv.id()] = {sv.address(), std::max(1u, sv.cores())};
    }
    owned_tables_ = std::move(owned);
    table_count_ = m.table_count();
    replica_count_ = m.replica_count() == 0 ? 1 : m.replica_count();
    cluster_replicated_ = replica_count_ > 1;
    epoch_ = std::max(epoch_, m.epoch());
  }
  Reconcile(m);
  if (m.epoch() > applied_epoch_) applied_epoch_ = m.epoch();  // one refresh at a time
  return Status::OK();
}

bool DataServer::HoldsLease() const {
  if (!lease_granted_ || !cluster_replicated_) return true;
  return std::chrono::steady_clock::now().time_since_epoch().count() < lease_until_ns_.load();
}

void DataServer::RenewLease(std::chrono::steady_clock::time_point sent, uint64_t lease_ms,
                            uint64_t epoch) {
  lease_granted_ = lease_ms > 0;
  if (lease_ms == 0) return;
  const bool lapsed = !HoldsLease();
  // Silent past its lease, this server may have been declared DOWN and its
  // segments given to their backups: it serves again only once it has
  // applied (and so fenced them) a mapping as new as the monitor's. The
  // heartbeat loop has the refresh thread fetch it; a later heartbeat
  // renews.
  if (lapsed && applied_epoch_.load() < epoch) return;
  const int64_t until = (sent + std::chrono::milliseconds(lease_ms)).time_since_epoch().count();
  if (lapsed) {
    const int64_t behind_ns =
        std::chrono::steady_clock::now().time_since_epoch().count() - lease_until_ns_.load();
    log_.Warn("lease had expired; serving again",
              {{"expired_ms_ago", behind_ns / 1000000}, {"epoch", epoch}});
  }
  lease_until_ns_ = until;
}

void DataServer::HeartbeatLoop() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(heartbeat_ms_),
                            [&] { return stopping_; })) {
    lock.unlock();
    uint64_t used = 0;
    uint64_t known;
    bool release_due = false;
    {
      const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      const int64_t due = std::chrono::nanoseconds(kReleaseEmptyAfter).count();
      std::shared_lock l(mu_);
      for (const auto& seg : segments_) {
        if (seg != nullptr && seg->alloc != nullptr) used += seg->alloc->Stats().bytes_allocated;
      }
      // Primaries are in by_global_ once set up (their role no longer
      // changes): heap and table ones holding nothing are due for release
      // after a while.
      for (const auto& [global, seg] : by_global_) {
        if (seg->fenced) continue;
        if (seg->first_fill || !HoldsNothing(*seg)) {
          seg->empty_since_ns = 0;
        } else if (seg->empty_since_ns == 0) {
          seg->empty_since_ns = now;
        } else {
          release_due |= now - seg->empty_since_ns >= due;
        }
      }
      known = epoch_;
    }
    v1::HeartbeatRequest req;
    req.set_server_id(server_id_);
    req.set_epoch(known);
    req.set_used_bytes(used);
    v1::HeartbeatResponse resp;
    const auto sent = std::chrono::steady_clock::now();
    Status s = monitor_->Heartbeat(req, &resp);
    if (!s.ok()) {
      log_.Warn("heartbeat failed", {{"status", s}});
    } else {
      RenewLease(sent, resp.lease_ms(), resp.epoch());
    }
    lock.lock();
    if (s.ok() && (resp.epoch() != known || promotion_failed_.exchange(false))) {
      refresh_wanted_ = true;
      stop_cv_.notify_all();
    }
    if (release_due) {
      release_wanted_ = true;
      stop_cv_.notify_all();
    }
  }
}

void DataServer::RefreshLoop() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (true) {
    stop_cv_.wait(lock, [&] { return stopping_ || refresh_wanted_ || release_wanted_; });
    if (stopping_) return;
    const bool refresh = std::exchange(refresh_wanted_, false);
    const bool release = std::exchange(release_wanted_, false);
    lock.unlock();
    if (refresh) {
      Status s = RefreshMapping();
      if (!s.ok()) log_.Warn("mapping refresh failed", {{"status", s}});
    }
    if (release) ReleaseEmptySegments();
    lock.lock();
  }
}

Status DataServer::CheckHeader(const RequestHeader& h) {
  if (!serving_) return Status::Unavailable("server starting");
  if (!HoldsLease()) {
    return Status::Unavailable("server " + std::to_string(server_id_) +
                               ": lease expired, not serving until the monitor renews it");
  }
  if (h.credential != credential_) {
    return Status::PermissionDenied("request without the cluster secret");
  }
  uint64_t known;
  {
    std::shared_lock lock(mu_);
    known = epoch_;
  }
  if (h.epoch > known) {
    // The client saw a newer view: catch up before judging it.
    Status s = RefreshMapping();
    if (!s.ok()) return s.WithContext("refresh the mapping for epoch " + std::to_string(h.epoch));
    std::shared_lock lock(mu_);
    known = epoch_;
  }
  if (h.epoch == 0 || h.epoch > known) {
    return Status::StaleEpoch("request epoch " + std::to_string(h.epoch) +
                              " is not a cluster epoch (current " + std::to_string(known) + ")");
  }
  return Status::OK();
}

Status DataServer::HandlePAllocate(std::span<const uint8_t> req, std::string* reply) {
  Decoder d(req);
  RequestHeader h;
  uint64_t size = 0;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(d.U64(&size));
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  dsm::GlobalAddress a;
  PDPM_RETURN_IF_ERROR(AllocateHeap(size, {}, &a));
  Encoder(reply).Address(a);
  return Status::OK();
}

Status DataServer::AllocateHeap(uint64_t size, TxTag tag, dsm::GlobalAddress* out) {
  if (size == 0) return Status::InvalidArgument("pallocate of 0 bytes");
  if (size > space_->segment_size() - dsm::kChunkSize) {
    return Status::TooLarge("pallocate of " + std::to_string(size) +
                            " bytes: more than a segment holds");
  }
  // One attempt in `seg`: a tagged shipment names the block (and is not
  // tagged when nothing was allocated).
  auto allocate_in = [&](Segment* seg, uint64_t* offset) {
    TxTag t = tag;
    return Mutate(
        seg,
        [&] {
          if (seg->released) {
            t = TxTag{};
            return Status::ResourceExhausted("segment " + std::to_string(seg->role.global) +
                                             " is being released");
          }
          Status a = seg->alloc->Allocate(size, dsm::BlockOwner::kHeap,
                                          dsm::PAllocator::kCurrentCore, offset);
          t = a.ok() ? TxTag{tag.coordinator, tag.tx, tag.kind, *offset} : TxTag{};
          return a;
        },
        t);
  };
  auto try_all = [&](uint32_t* global, uint64_t* offset) {
    // Not under mu_: shipping may refresh the mapping (segments are never
    // destroyed while the server runs, only retired).
    std::vector<std::pair<uint32_t, Segment*>> heap;
    {
      std::shared_lock lock(mu_);
      for (const auto& [g, seg] : by_global_) {
        if (seg->role.kind == SegmentKind::kHeap && AcceptsWritesLocked(seg))
          heap.emplace_back(g, seg);
      }
    }
    for (const auto& [g, seg] : heap) {
      Status s = allocate_in(seg, offset);
      if (s.ok()) {
        *global = g;
        return s;
      }
      if (s.code() != StatusCode::kResourceExhausted) return s;
    }
    return Status::ResourceExhausted("heap segments full");
  };
  uint32_t global = 0;
  uint64_t offset = 0;
  // With no room here, the creator makes a heap segment (off the request
  // path: AwaitCreator). One made for this request may be filled by others,
  // or released, before it gets there: then it asks again, within the same
  // bound.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kNewSegmentWaitMs);
  auto made = [this] {
    std::lock_guard<std::mutex> lock(create_mu_);
    return heap_segments_made_;
  };
  uint64_t seen = made();
  Status s = try_all(&global, &offset);
  while (s.code() == StatusCode::kResourceExhausted) {
    PDPM_RETURN_IF_ERROR(
        AwaitCreator(kHeapJob, deadline, [&] { return heap_segments_made_ > seen; }));
    seen = made();
    s = try_all(&global, &offset);
  }
  PDPM_RETURN_IF_ERROR(s);
  uint32_t replicas;
  {
    std::shared_lock lock(mu_);
    replicas = replica_count_;
  }
  *out = dsm::GlobalAddress{dsm::Descriptor::Make(dsm::kPermRead | dsm::kPermWrite, replicas),
                            global, offset};
  return Status::OK();
}

Status DataServer::HandlePFree(std::span<const uint8_t> req, std::string* /*reply*/) {
  Decoder d(req);
  RequestHeader h;
  dsm::GlobalAddress a;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(d.Address(&a));
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  if (a.kind() != dsm::SpaceKind::kHeap) {
    return Status::InvalidArgument("pfree of " + a.ToString() + ": not a heap address");
  }
  Segment* seg;
  {
    std::shared_lock lock(mu_);
    auto it = by_global_.find(a.segment);
    if (it == by_global_.end()) {
      return Status::NotFound("segment " + std::to_string(a.segment) + " is not on this server");
    }
    if (h.epoch < it->second->placement_epoch) {
      return Status::StaleEpoch("segment " + std::to_string(a.segment) + " placed in epoch " +
                                std::to_string(it->second->placement_epoch) + ", request has " +
                                std::to_string(h.epoch));
    }
    seg = it->second;
  }
  return Mutate(seg, [&] { return seg->alloc->Free(a.offset, dsm::BlockOwner::kHeap); })
      .WithContext("pfree " + a.ToString());
}

Status DataServer::TableFor(const dsm::ObjectId& id, uint64_t epoch, bool create, Segment** out) {
  *out = nullptr;
  uint32_t table;
  {
    std::shared_lock lock(mu_);
    if (table_count_ == 0) return Status::Unavailable("no table map yet");
    table = monitor::TableForObject(id.hi, id.lo, table_count_);
  }
  Status s = TableSegment(table, epoch, create, out);
  if (s.code() == StatusCode::kNotFound) return Status::NotFound("no such object");
  return s;
}

Status DataServer::TableSegment(uint32_t table, uint64_t epoch, bool create, Segment** out) {
  {
    std::shared_lock lock(mu_);
    auto owned = owned_tables_.find(table);
    if (owned == owned_tables_.end()) {
      return Status::StaleEpoch("table " + std::to_string(table) +
                                " is not served by this server in epoch " + std::to_string(epoch_));
    }
    if (epoch < owned->second) {
      return Status::StaleEpoch("table " + std::to_string(table) + " moved here in epoch " +
                                std::to_string(owned->second) + ", request has " +
                                std::to_string(epoch));
    }
    auto it = by_table_.find(table);
    if (it != by_table_.end()) *out = it->second;
    // The table has a segment this server is to serve but has not opened
    // yet (its backup copy is being promoted): not "empty", not created
    // again; the client asks again.
    for (const auto& [global, sm] : placement_) {
      if (*out == nullptr && sm.table() == table && sm.primary().server_id() == server_id_) {
        return Status::Unavailable("table " + std::to_string(table) + ": segment " +
                                   std::to_string(global) + " is not open here yet");
      }
    }
  }
  if (*out != nullptr && !(*out)->first_fill.load()) return Status::OK();
  if (*out == nullptr && !create) {
    return Status::NotFound("table " + std::to_string(table) + " holds nothing");
  }
  return AwaitTableSegment(table, out);
}

Status DataServer::HandleObject(uint16_t method, std::span<const uint8_t> req, std::string* reply) {
  Decoder d(req);
  RequestHeader h;
  dsm::ObjectId id;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(d.Id(&id));
  uint64_t offset = 0, length = 0;
  std::string_view data;
  switch (method) {
    case kWriteObj:
      PDPM_RETURN_IF_ERROR(d.U64(&offset));
      data = d.Rest();
      break;
    case kPutObj: data = d.Rest(); break;
    case kTruncateObj: PDPM_RETURN_IF_ERROR(d.U64(&offset)); break;
    case kReadObj:
      PDPM_RETURN_IF_ERROR(d.U64(&offset));
      PDPM_RETURN_IF_ERROR(d.U64(&length));
      break;
    default: break;
  }
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  Segment* seg = nullptr;
  PDPM_RETURN_IF_ERROR(TableFor(id, h.epoch, method == kPutObj, &seg));
  dsm::ObjectStoreTable* table = seg->table.get();
  switch (method) {
    case kPutObj: return Mutate(seg, [&] { return table->Put(id, data); });
    case kWriteObj: return Mutate(seg, [&] { return table->Write(id, offset, data); });
    case kDelObj: return Mutate(seg, [&] { return table->Delete(id); });
    case kTruncateObj: return Mutate(seg, [&] { return table->Truncate(id, offset); });
    case kObjSize: {
      uint64_t size = 0;
      PDPM_RETURN_IF_ERROR(table->Size(id, &size));
      Encoder(reply).U64(size);
      return Status::OK();
    }
    case kReadObj: {
      if (offset == 0 && length == kWholeObject) return table->Get(id, reply);
      if (length > dsm::kMaxObjectSize) {
        return Status::OutOfRange("read of " + std::to_string(length) + " bytes");
      }
      reply->resize(length);
      Status s = table->Read(id, offset, length, reply->data());
      if (!s.ok()) reply->clear();
      return s;
    }
    default: return Status::Internal("unknown object method");
  }
}

Status DataServer::HandleListObj(std::span<const uint8_t> req, std::string* reply) {
  Decoder d(req);
  RequestHeader h;
  uint64_t table = 0, tag = 0, max = 0;
  dsm::ObjectId start;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(d.U64(&table));
  PDPM_RETURN_IF_ERROR(d.U64(&tag));
  PDPM_RETURN_IF_ERROR(d.Id(&start));
  PDPM_RETURN_IF_ERROR(d.U64(&max));
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  if (table > UINT32_MAX || tag > UINT32_MAX || max > kMaxListObj) {
    return Status::InvalidArgument("list objects: table " + std::to_string(table) + ", tag " +
                                   std::to_string(tag) + ", max " + std::to_string(max) +
                                   " (at most " + std::to_string(kMaxListObj) + ")");
  }
  Segment* seg = nullptr;
  Status s = TableSegment(static_cast<uint32_t>(table), h.epoch, false, &seg);
  std::vector<dsm::ObjectId> ids;
  if (s.ok()) {
    seg->table->ListIds(static_cast<uint32_t>(tag), start, max, &ids);
  } else if (s.code() != StatusCode::kNotFound) {  // kNotFound: the table holds nothing
    return s;
  }
  Encoder e(reply);
  e.U64(ids.size());
  for (const dsm::ObjectId& id : ids) e.Id(id);
  return Status::OK();
}

}  // namespace pdpm::server
