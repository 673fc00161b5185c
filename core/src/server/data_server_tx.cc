// The transaction participant's view of a DataServer (tx_participant.h):
// the hooks it is built with and the server-local log segment. Kept apart
// from data_server.cc so that the two evolve independently.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "server/data_server.h"

namespace pdpm::server {

Status DataServer::CreateTxLogSegment(Segment** out) {
  // The mapping never holds this server-local segment, so it is reserved
  // with the monitor before it is formatted: from then on no backup is
  // placed on it. A refusal means the mapping placed a copy there that
  // this server has not learnt yet: learn it and take another.
  uint32_t local = 0;
  for (size_t tries = 1;; ++tries) {
    PDPM_RETURN_IF_ERROR(FreeLocalSegment(&local).WithContext("transaction log"));
    v1::ReserveLocalSegmentRequest req;
    req.set_server_id(server_id_);
    req.set_local_index(local);
    v1::ReserveLocalSegmentResponse resp;
    Status s = monitor_->ReserveLocalSegment(req, &resp);
    if (s.ok()) break;
    // Each refusal names a local segment the refreshed mapping then holds,
    // so more tries than segments mean the mapping keeps changing under us.
    if (s.code() != StatusCode::kAlreadyExists || tries >= segments_.size()) {
      return s.WithContext("reserve local segment " + std::to_string(local) +
                           " for the transaction log");
    }
    PDPM_RETURN_IF_ERROR(RefreshMapping().WithContext("transaction log"));
  }
  std::span<char> mem = space_->segment(local);
  dsm::PmRange range{mem.data(), mem.size(), space_->device().persist_fn()};
  PDPM_RETURN_IF_ERROR(dsm::PAllocator::Format(range));
  {
    std::unique_ptr<dsm::PAllocator> alloc;
    PDPM_RETURN_IF_ERROR(dsm::PAllocator::Open(range, dsm::PAllocatorOptions{}, &alloc));
    PDPM_RETURN_IF_ERROR(alloc->SetRoot(kRoleSlot, SegmentRole{SegmentKind::kTxLog}.Encode()));
  }
  std::unique_ptr<Segment> seg;
  PDPM_RETURN_IF_ERROR(OpenSegment(local, SegmentRole{SegmentKind::kTxLog}, &seg));
  log_.Info("transaction log segment created", {{"local", local}});
  std::unique_lock lock(mu_);
  *out = seg.get();
  segments_[local] = std::move(seg);
  return Status::OK();
}

Status DataServer::TxSegment(uint32_t global, TxCopy copy, uint64_t epoch, Segment** out) {
  std::shared_lock lock(mu_);
  if (copy == TxCopy::kBackup) {
    auto it = backups_.find(global);
    if (it == backups_.end() || it->second->fenced) {
      return Status::NotFound("no backup copy of segment " + std::to_string(global) + " here");
    }
    *out = it->second;
    return Status::OK();
  }
  auto it = by_global_.find(global);
  if (it == by_global_.end() || it->second->role.kind != SegmentKind::kHeap) {
    return Status::NotFound("heap segment " + std::to_string(global) + " is not on this server");
  }
  if (epoch != 0 && epoch < it->second->placement_epoch) {
    return Status::StaleEpoch("segment " + std::to_string(global) + " placed in epoch " +
                              std::to_string(it->second->placement_epoch));
  }
  *out = it->second;
  return Status::OK();
}

Status DataServer::JoinBackup(uint32_t global, uint32_t server, const PeerAddress& address) {
  // Test hook (tx_cluster_test.cc): the fill waits for a file to exist
  // before its backup joins, so a transaction can lock while the backup is
  // still syncing and go on once it is in sync.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): PDPM never modifies its environment
  if (const char* gate = std::getenv("PDPM_TEST_FILL_GATE")) {
    while (!std::filesystem::exists(gate)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::string decisions;
  PDPM_RETURN_IF_ERROR(tx_->BackupJoining(global, server, &decisions));
  if (decisions.empty()) return Status::OK();
  uint64_t epoch;
  {
    std::shared_lock lock(mu_);
    epoch = epoch_;
  }
  std::string req, reply;
  Encoder e(&req);
  e.Header({epoch, credential_});
  e.Bytes(decisions);
  Status s = peers_.Call(address, kTxKeepDecisions, req, &reply);
  if (!s.ok()) {
    tx_->BackupNotJoined(global, server);
    return s.WithContext("give the joining backup the decisions kept here");
  }
  return Status::OK();
}

TxHooks DataServer::MakeTxHooks() {
  TxHooks h;
  h.check = [this](const RequestHeader& header) { return CheckHeader(header); };
  h.segment = [this](uint32_t global, TxCopy copy, uint64_t epoch, dsm::PmRange* mem,
                     dsm::PAllocator** alloc) {
    Segment* seg = nullptr;
    PDPM_RETURN_IF_ERROR(TxSegment(global, copy, epoch, &seg));
    std::span<char> m = space_->segment(seg->local);
    *mem = dsm::PmRange{m.data(), m.size(), space_->device().persist_fn()};
    *alloc = seg->alloc.get();
    return Status::OK();
  };
  h.mutate = [this](uint32_t global, TxCopy copy, TxTag tag, const TxMutation& op) {
    Segment* seg = nullptr;
    PDPM_RETURN_IF_ERROR(TxSegment(global, copy, 0, &seg));
    std::span<char> m = space_->segment(seg->local);
    if (copy == TxCopy::kBackup) {
      // Being promoted (Promote holds its replication lock and opened its
      // allocator): written directly, the backups left are filled again.
      return op(dsm::PmRange{m.data(), m.size(), space_->device().persist_fn()}, seg->alloc.get());
    }
    // A commit at the primary: its bytes reach every backup, with the
    // transaction named, before the versions unlock.
    return Mutate(
        seg,
        [&] {
          return op(dsm::PmRange{m.data(), m.size(), seg->persist}, seg->alloc.get());
        },
        tag);
  };
  h.mutate_object = [this](const dsm::ObjectId& id, uint32_t global, TxCopy copy, bool create,
                           TxTag tag, const std::function<Status(dsm::ObjectStoreTable*)>& op) {
    Segment* seg = nullptr;
    if (copy == TxCopy::kBackup) {
      // Being promoted: its table opened, written directly (as `mutate`).
      PDPM_RETURN_IF_ERROR(TxSegment(global, copy, 0, &seg));
      if (seg->table == nullptr) {
        return Status::FailedPrecondition("segment " + std::to_string(global) +
                                          " holds no object table");
      }
      return op(seg->table.get());
    }
    uint64_t epoch;
    {
      std::shared_lock lock(mu_);
      epoch = epoch_;
    }
    PDPM_RETURN_IF_ERROR(TableFor(id, epoch, create, &seg));
    if (global != 0 && seg->role.global != global) {
      return Status::NotFound("the object's table moved away from segment " +
                              std::to_string(global));
    }
    return Mutate(
        seg, [&] { return op(seg->table.get()); }, tag);
  };
  h.kv = [this](uint32_t segment, uint32_t table, TxCopy copy, uint64_t epoch, TxTag tag,
                bool create, const std::vector<std::string_view>& keys,
                const std::function<Status(pdkvs::CcehIndex*, pdkvs::VnodeHashes*)>& op) {
    Status s = TxKv(segment, table, copy, epoch, tag, create, keys, op);
    // Test hook (pdkvs cluster test): the primary dies once the first part
    // of a table segment's commit (its vnode's) reached the backups.
    if (s.ok() && tag.kind == TxTagKind::kCommitPart && copy == TxCopy::kPrimary &&
        std::getenv("PDPM_TEST_TX_EXIT_AFTER_PART") != nullptr) {  // NOLINT(concurrency-mt-unsafe)
      _exit(86);
    }
    return s;
  };
  h.log_segment = [this](bool create, dsm::PmRange* mem, dsm::PAllocator** alloc) {
    std::lock_guard<std::mutex> grow(grow_mu_);
    if (tx_log_ == nullptr) {
      if (!create) return Status::NotFound("no transaction log yet");
      PDPM_RETURN_IF_ERROR(CreateTxLogSegment(&tx_log_));
    }
    std::span<char> m = space_->segment(tx_log_->local);
    *mem = dsm::PmRange{m.data(), m.size(), space_->device().persist_fn()};
    *alloc = tx_log_->alloc.get();
    return Status::OK();
  };
  h.object_table = [this](const dsm::ObjectId& id, uint64_t epoch, bool create,
                          dsm::ObjectStoreTable** out, uint32_t* global) {
    uint64_t e = epoch;
    if (e == 0) {  // applying a logged record: whatever the current epoch
      std::shared_lock lock(mu_);
      e = epoch_;
    }
    Segment* seg = nullptr;
    PDPM_RETURN_IF_ERROR(TableFor(id, e, create, &seg));
    *out = seg->table.get();
    *global = seg->role.global;
    return Status::OK();
  };
  h.allocate = [this](uint64_t size, TxTag tag, dsm::GlobalAddress* out) {
    return AllocateHeap(size, tag, out);
  };
  h.backups = [this](uint32_t global, std::vector<uint32_t>* in_sync,
                     std::vector<uint32_t>* syncing) {
    std::shared_lock lock(mu_);
    auto p = placement_.find(global);
    if (p == placement_.end()) return;
    for (const auto& b : p->second.backups()) {
      (b.state() == v1::REPLICA_STATE_IN_SYNC ? in_sync : syncing)->push_back(b.server_id());
    }
  };
  h.call_primary = [this](uint32_t segment, bool is_table, uint16_t method, const std::string& body,
                          std::string* reply) {
    v1::GetMappingResponse m;
    PDPM_RETURN_IF_ERROR(monitor_->GetMapping(0, &m));
    uint32_t primary = 0;
    if (is_table) {
      for (const auto& t : m.tables()) {
        if (t.table() == segment) primary = t.server_id();
      }
    }
    for (const auto& sm : m.segments()) {
      if (!is_table && sm.segment() == segment) primary = sm.primary().server_id();
    }
    std::string address;
    for (const auto& sv : m.servers()) {
      if (sv.id() == primary && sv.state() == v1::SERVER_STATE_UP) address = sv.address();
    }
    if (address.empty()) {
      return Status::Unavailable(std::string("no live primary for ") +
                                 (is_table ? "table " : "segment ") + std::to_string(segment));
    }
    std::string req;
    Encoder e(&req);
    e.Header({m.epoch(), credential_});
    e.Bytes(body);
    std::span<const uint8_t> bytes{reinterpret_cast<const uint8_t*>(req.data()), req.size()};
    if (primary == server_id_) {
      if (method == kTxResolve) return tx_->HandleResolve(bytes, reply);
      if (method == kTxPending) return tx_->HandlePending(bytes, reply);
      return Status::Internal("local call of a transaction method");
    }
    std::unique_ptr<net::RpcClient> rpc;
    PDPM_RETURN_IF_ERROR(net::RpcClient::Connect(
        transport_.get(), address, 0, DataPlaneRpcOptions(1, options_.op_timeout_ms), &rpc));
    return rpc->Call(method, bytes, reply);
  };
  return h;
}

}  // namespace pdpm::server
