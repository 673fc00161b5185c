#include "server/tx_participant.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "pdkvs/item.h"
#include "pdkvs/vnode_ops.h"
#include "server/segment_role.h"

namespace pdpm::server {
namespace {

using dsm::TxEntry;
using dsm::TxEntryKind;
using dsm::TxRecordKind;
using dsm::TxState;

// The most puts of one vnode a transaction's commit applies in one
// mutation (one shipment to the backups).
constexpr size_t kKvPutsPerMutation = 256;

// One pDKVS entry into its vnode `index` and the vnode's `hashes`. Each
// leaves an absolute state (applying it again after a crash changes
// nothing more); an absent key or field is nothing to remove.
Status ApplyKvEntry(const TxEntry& e, pdkvs::CcehIndex* index, pdkvs::VnodeHashes* hashes) {
  const std::string_view key = dsm::KvEntryKey(e);
  auto absent_is_done = [](Status s) {
    return s.code() == StatusCode::kNotFound ? Status::OK() : s;
  };
  if ((e.kind == TxEntryKind::kKvHashSet || e.kind == TxEntryKind::kKvHashDelete) &&
      hashes == nullptr) {
    return Status::Internal("a hash entry for a vnode without its hashes");
  }
  switch (e.kind) {
    case TxEntryKind::kKvDelete: return absent_is_done(index->Delete(key));
    case TxEntryKind::kKvHashSet: {
      const std::pair<std::string_view, std::string_view> field{dsm::KvEntryField(e),
                                                                dsm::KvEntryValue(e)};
      uint64_t added = 0;
      return hashes->Set(key, {&field, 1}, /*if_absent=*/false, &added);
    }
    case TxEntryKind::kKvHashDelete: {
      const std::string_view field = dsm::KvEntryField(e);
      uint64_t removed = 0;
      return absent_is_done(hashes->Delete(key, {&field, 1}, &removed));
    }
    case TxEntryKind::kKvSetExpiry: {
      // In place, whatever the time: the transaction decided it (now 0:
      // never in the past here).
      bool changed = false;
      return pdkvs::VnodeSetExpiry(index, key, dsm::KvEntryExpiry(e),
                                   pdkvs::ExpiryCondition::kAlways, /*now_ms=*/0, &changed);
    }
    default: {
      pdkvs::PutOptions put;
      put.meta.expire_at_ms = dsm::KvEntryExpiry(e);
      return index->Put(key, dsm::KvEntryValue(e), put);
    }
  }
}

// The largest log area a new log's segment size makes (TxParticipant::Open).
constexpr uint64_t kMaxDerivedAreaSize = 4u << 20;

Status Begin(Decoder* d, uint64_t* coordinator, RequestHeader* h) {
  PDPM_RETURN_IF_ERROR(d->Header(h));
  PDPM_RETURN_IF_ERROR(d->U64(coordinator));
  if (*coordinator == 0) return Status::InvalidArgument("coordinator id 0");
  return Status::OK();
}

// The holder a record names, as its segment | is-table << 32.
uint64_t HolderOf(const dsm::TxRecord& r) {
  return r.holder_segment | (uint64_t{(r.flags & dsm::kTxRecordHolderIsTable) != 0} << 32);
}

dsm::ObjectId ObjectIdOf(const TxEntry& e) {
  dsm::ObjectId id;
  std::memcpy(&id.hi, e.data.data(), 8);
  std::memcpy(&id.lo, e.data.data() + 8, 8);
  return id;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The segment a BACKUP record covers (one per record, docs/tx.md).
uint32_t SegmentOf(const std::vector<TxEntry>& entries) {
  return entries.empty() ? 0 : entries.front().segment;
}

// The participant entries (kind 10) naming `participants` (segment |
// is-table << 32): what TakeParticipants takes out of a record's entries.
std::vector<TxEntry> ParticipantEntries(const std::vector<uint64_t>& participants) {
  std::vector<TxEntry> named;
  for (uint64_t p : participants) {
    TxEntry e;
    e.kind = TxEntryKind::kParticipant;
    e.segment = static_cast<uint32_t>(p);
    e.offset = p >> 32;
    named.push_back(e);
  }
  return named;
}

// A segment's copy is gone from this server (fenced, or moved).
bool Moved(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kStaleEpoch;
}

// One entry of a heap segment's part of a commit.
Status ApplyHeapEntry(const TxEntry& e, const dsm::PmRange& mem, dsm::PAllocator* alloc,
                      const Logger& log, uint64_t tx) {
  switch (e.kind) {
    case TxEntryKind::kWrite:
      std::memcpy(mem.base + e.offset, e.data.data(), e.data.size());
      mem.persist(mem.base + e.offset, e.data.size());
      return Status::OK();
    case TxEntryKind::kFree: {
      if (alloc == nullptr) return Status::Internal("a transactional free without an allocator");
      Status s = alloc->Free(e.offset, dsm::BlockOwner::kHeap);
      // Already free: applied before a crash.
      if (!s.ok() && s.code() != StatusCode::kFailedPrecondition) {
        log.Warn("transactional free failed", {{"tx", tx}, {"status", s}});
      }
      return Status::OK();
    }
    case TxEntryKind::kAllocated: return Status::OK();  // the block stays
    default: return Status::Internal("not a heap entry");
  }
}

// One entry of an object-store table's part of a commit.
Status ApplyObjectEntry(const TxEntry& e, dsm::ObjectStoreTable* table) {
  dsm::ObjectId id = ObjectIdOf(e);
  Status s;
  switch (e.kind) {
    case TxEntryKind::kPutObject:
      return table->Put(id, std::string_view(e.data).substr(dsm::kTxObjectIdSize));
    case TxEntryKind::kDeleteObject:
      s = table->Delete(id);
      // Deleted already: applied before a crash (or never there).
      return s.code() == StatusCode::kNotFound ? Status::OK() : s;
    default: return Status::Internal("not an object entry");
  }
}

}  // namespace

// Holds mu_ and sweeps the records trimmed meanwhile when released.
class TxParticipant::Locked {
 public:
  explicit Locked(TxParticipant* p) : p_(p), lock_(p->mu_) {}
  ~Locked() { p_->Sweep(); }
  std::unique_lock<std::mutex>& lock() { return lock_; }

 private:
  TxParticipant* p_;
  std::unique_lock<std::mutex> lock_;
};

Status TxParticipant::WithoutLock(Locked& lock, Rec* rec, const std::function<Status()>& fn) {
  rec->working = true;
  busy_++;
  lock.lock().unlock();
  Status s = fn();
  lock.lock().lock();
  rec->working = false;
  busy_--;
  idle_cv_.notify_all();
  return s;
}

void TxParticipant::WaitIdle(Locked& lock, Rec* rec) {
  if (!rec->working) return;
  busy_++;  // the records the caller holds pointers to stay
  idle_cv_.wait(lock.lock(), [&] { return !rec->working; });
  busy_--;
}

TxParticipant::TxParticipant(TxHooks hooks, net::Transport* transport, const Logger& log,
                             TxParticipantOptions options)
    : hooks_(std::move(hooks)), transport_(transport), log_(log), options_(options) {}

TxParticipant::~TxParticipant() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (resolver_.joinable()) resolver_.join();
}

Status TxParticipant::OpenLog(bool create) {
  if (log_base_ != nullptr) return Status::OK();
  dsm::PmRange mem;
  dsm::PAllocator* alloc = nullptr;
  PDPM_RETURN_IF_ERROR(hooks_.log_segment(create, &mem, &alloc));
  uint64_t region = alloc->GetRoot(kTxLogRegionSlot);
  if (region == 0) {
    // A new log: its region, every area unassigned, then the root that
    // publishes it. The areas share half the segment (at least
    // options_.area_size, at most kMaxDerivedAreaSize each): a
    // coordinator's record — a multi-put's keys and values at this server —
    // must fit one area.
    const uint64_t area_size =
        std::max(options_.area_size,
                 std::min(kMaxDerivedAreaSize, mem.size / 2 / options_.area_count / 4096 * 4096));
    uint64_t bytes = uint64_t{options_.area_count} * area_size;
    PDPM_RETURN_IF_ERROR(alloc->Allocate(bytes, dsm::BlockOwner::kHeap, 0, &region)
                             .WithContext("transaction log region"));
    for (uint32_t i = 0; i < options_.area_count; i++) {
      char* a = mem.base + region + uint64_t{i} * area_size;
      std::memset(a, 0, dsm::kTxAreaHeaderSize);
      mem.persist(a, dsm::kTxAreaHeaderSize);
    }
    PDPM_RETURN_IF_ERROR(
        alloc->SetRoot(kTxLogGeometrySlot, (uint64_t{options_.area_count} << 32) | area_size));
    PDPM_RETURN_IF_ERROR(alloc->SetRoot(kTxLogRegionSlot, region));
  }
  uint64_t geometry = alloc->GetRoot(kTxLogGeometrySlot);
  uint32_t count = static_cast<uint32_t>(geometry >> 32);
  uint64_t area_size = geometry & 0xffffffffu;
  if (count == 0 || area_size == 0 || region + uint64_t{count} * area_size > mem.size) {
    return Status::Corruption("transaction log region outside its segment");
  }
  std::vector<Area> areas(count);
  Clock::time_point now = Clock::now();
  std::vector<std::vector<dsm::TxRecord>> found(count);
  for (uint32_t i = 0; i < count; i++) {
    areas[i].log = std::make_unique<dsm::TxLogArea>(mem.base + region + uint64_t{i} * area_size,
                                                    area_size, i, mem.persist);
    areas[i].last_active = now;
    PDPM_RETURN_IF_ERROR(areas[i].log->Open(&found[i]));
  }
  areas_ = std::move(areas);
  area_count_ = count;
  log_alloc_ = alloc;
  log_base_ = mem.base + region;
  persist_ = mem.persist;
  // Index every record still live; lock the words of undecided ones.
  uint64_t in_doubt = 0;
  for (uint32_t i = 0; i < count; i++) {
    Area* area = &areas_[i];
    if (area->log->coordinator() != 0) by_coordinator_[area->log->coordinator()] = area;
    for (auto& r : found[i]) {
      auto rec = std::make_unique<Rec>();
      PDPM_RETURN_IF_ERROR(DecodeTxEntries(r.body, true, &rec->entries)
                               .WithContext("transaction log area " + std::to_string(i)));
      TakeParticipants(&rec->entries, &rec->participants);
      r.body.clear();
      rec->r = std::move(r);
      rec->area = area;
      rec->coordinator = area->log->coordinator();
      // Resolved at once by the resolver: its coordinator's session ended.
      rec->since = now - std::chrono::milliseconds(options_.lock_timeout_ms);
      if (rec->r.kind == TxRecordKind::kLock &&
          (rec->r.state == TxState::kLocked || rec->r.state == TxState::kCommitted)) {
        rec->slots = SlotsOf(rec->entries);
        for (uint32_t s : rec->slots) versions_[s].fetch_or(kTxVersionLock);
      }
      if (rec->r.state == TxState::kLocked || rec->r.state == TxState::kCommitted) in_doubt++;
      area->by_offset[rec->r.offset] = rec.get();
      recs_[{rec->coordinator, rec->r.tx}].push_back(std::move(rec));
    }
  }
  log_.Info("transaction log opened",
            {{"areas", count}, {"coordinators", by_coordinator_.size()}, {"in_doubt", in_doubt}});
  return Status::OK();
}

Status TxParticipant::Recover() {
  {
    Locked lock(this);
    dsm::PmRange mem;
    dsm::PAllocator* alloc = nullptr;
    Status s = hooks_.log_segment(false, &mem, &alloc);
    if (s.ok()) {
      generation_ = alloc->GetRoot(kTxStartCountSlot) + 1;
      PDPM_RETURN_IF_ERROR(alloc->SetRoot(kTxStartCountSlot, generation_));
    } else if (s.code() != StatusCode::kNotFound) {
      return s;
    } else {
      // No log, so no start count: a random generation, so that words read
      // before this start (pDKVS keys, heap data) almost surely differ.
      std::random_device rd;
      generation_ = (uint64_t{rd()} % ((1u << 23) - 1)) + 1;
    }
    uint32_t n = options_.version_slots;
    if (n == 0 || (n & (n - 1)) != 0)
      return Status::InvalidArgument("version slots: a power of two");
    versions_.reset(new std::atomic<uint64_t>[n]);
    uint64_t initial = (generation_ << kTxGenerationShift) & ~kTxVersionLock;
    for (uint32_t i = 0; i < n; i++) versions_[i].store(initial);
    PDPM_RETURN_IF_ERROR(transport_->RegisterMemory(versions_.get(), uint64_t{n} * 8,
                                                    net::kRemoteRead, {}, &versions_region_));
    if (s.ok()) PDPM_RETURN_IF_ERROR(OpenLog(false));
    // Decided but not applied: apply now (idempotent: values are absolute).
    // A failure leaves the record to the resolver (a backup unreachable),
    // or drops it (its segment moved away: the new primary resolves it).
    std::vector<Rec*> decided;
    for (auto& [key, list] : recs_) {
      for (auto& rec : list) {
        if (rec->r.state == TxState::kCommitted) decided.push_back(rec.get());
      }
    }
    for (Rec* rec : decided) {
      Status c = CommitRec(lock, rec, false);
      if (!c.ok()) {
        log_.Warn("cannot apply a committed transaction at start",
                  {{"tx", rec->r.tx}, {"status", c}});
      }
    }
  }
  resolver_ = std::thread([this] { ResolverLoop(); });
  return Status::OK();
}

void TxParticipant::RegisterRpcs(net::RpcServer* rpc) {
  rpc->Register(kTxHello, [this](auto r, auto* o) { return HandleHello(r, o); });
  rpc->Register(kTxLock, [this](auto r, auto* o) { return HandleLock(r, o); });
  rpc->Register(kTxCommit, [this](auto r, auto* o) { return HandleCommit(r, o); });
  rpc->Register(kTxAbort, [this](auto r, auto* o) { return HandleAbort(r, o); });
  rpc->Register(kTxTruncate, [this](auto r, auto* o) { return HandleTruncate(r, o); });
  rpc->Register(kTxResolve, [this](auto r, auto* o) { return HandleResolve(r, o); });
  rpc->Register(kTxAlloc, [this](auto r, auto* o) { return HandleAlloc(r, o); });
  rpc->Register(kTxTable, [this](auto r, auto* o) { return HandleTable(r, o); });
  rpc->Register(kTxPending, [this](auto r, auto* o) { return HandlePending(r, o); });
  rpc->Register(kTxKeepDecisions, [this](auto r, auto* o) { return HandleKeepDecisions(r, o); });
}

Status TxParticipant::AreaFor(uint64_t coordinator, Area** out) {
  PDPM_RETURN_IF_ERROR(OpenLog(true));
  Clock::time_point now = Clock::now();
  auto it = by_coordinator_.find(coordinator);
  if (it != by_coordinator_.end()) {
    it->second->last_active = now;
    *out = it->second;
    return Status::OK();
  }
  // A never-used area, else the least recently active one whose records
  // are all done with: its coordinator is gone, or idle — if it comes
  // back, it gets a fresh area like a new one (its transactions here are
  // all resolved, and the records it names in later requests are found
  // by coordinator and transaction, not by area).
  Area* pick = nullptr;
  for (auto& a : areas_) {
    if (a.log->coordinator() == 0) {
      pick = &a;
      break;
    }
    if (a.log->empty() && (pick == nullptr || a.last_active < pick->last_active)) pick = &a;
  }
  if (pick == nullptr) {
    return Status::ResourceExhausted("no free transaction log area: all " +
                                     std::to_string(areas_.size()) +
                                     " hold records of transactions not yet resolved");
  }
  if (pick->log->coordinator() != 0) by_coordinator_.erase(pick->log->coordinator());
  PDPM_RETURN_IF_ERROR(pick->log->Assign(coordinator));
  pick->last_active = now;
  by_coordinator_[coordinator] = pick;
  *out = pick;
  return Status::OK();
}

void TxParticipant::Heard(uint64_t coordinator) {
  auto it = by_coordinator_.find(coordinator);
  if (it != by_coordinator_.end()) it->second->last_active = Clock::now();
}

void TxParticipant::TakeParticipants(std::vector<TxEntry>* entries, std::vector<uint64_t>* out) {
  out->clear();
  std::erase_if(*entries, [&](const TxEntry& e) {
    if (e.kind != TxEntryKind::kParticipant) return false;
    out->push_back(e.segment | (e.offset << 32));
    return true;
  });
}

std::vector<uint32_t> TxParticipant::SlotsOf(const std::vector<TxEntry>& entries) const {
  std::vector<uint32_t> slots;
  for (const auto& e : entries) {
    if (dsm::IsObjectEntry(e)) {
      uint64_t hi, lo;
      std::memcpy(&hi, e.data.data(), 8);
      std::memcpy(&lo, e.data.data() + 8, 8);
      slots.push_back(dsm::TxObjectSlot(hi, lo, options_.version_slots));
      continue;
    }
    if (dsm::IsKvEntry(e)) {
      slots.push_back(KvSlot(static_cast<uint32_t>(e.offset), dsm::KvEntryKey(e)));
      continue;
    }
    if (e.kind == TxEntryKind::kAllocated) continue;  // no one else knows the block
    uint64_t first = e.offset / dsm::kTxGranule;
    uint64_t last =
        e.kind == TxEntryKind::kWrite ? (e.offset + e.data.size() - 1) / dsm::kTxGranule : first;
    for (uint64_t g = first; g <= last && slots.size() <= options_.version_slots; g++) {
      slots.push_back(dsm::TxVersionSlot(e.segment, g, options_.version_slots));
    }
  }
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  return slots;
}

Status TxParticipant::HandleHello(std::span<const uint8_t> req, std::string* reply) {
  Decoder d(req);
  RequestHeader h;
  uint64_t coordinator = 0;
  PDPM_RETURN_IF_ERROR(Begin(&d, &coordinator, &h));
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(hooks_.check(h));
  Locked lock(this);
  Area* area = nullptr;
  PDPM_RETURN_IF_ERROR(AreaFor(coordinator, &area));
  Encoder(reply).U64(uint64_t{versions_region_->key()} | (uint64_t{options_.version_slots} << 32));
  return Status::OK();
}

Status TxParticipant::HandleLock(std::span<const uint8_t> req, std::string* /*reply*/) {
  Decoder d(req);
  RequestHeader h;
  uint64_t coordinator = 0, tx = 0, info = 0, counts = 0;
  PDPM_RETURN_IF_ERROR(Begin(&d, &coordinator, &h));
  PDPM_RETURN_IF_ERROR(d.U64(&tx));
  PDPM_RETURN_IF_ERROR(d.U64(&info));
  PDPM_RETURN_IF_ERROR(d.U64(&counts));
  uint32_t holder_segment = static_cast<uint32_t>(info);
  uint64_t role = (info >> 32) & 0xff;
  bool holder = ((info >> 40) & 1) != 0;
  bool holder_is_table = ((info >> 41) & 1) != 0;
  uint32_t n_expect = static_cast<uint32_t>(counts),
           n_truncate = static_cast<uint32_t>(counts >> 32);
  if (role != kTxRolePrimary && role != kTxRoleBackup) {
    return Status::InvalidArgument("lock: unknown role");
  }
  if (n_expect > (1u << 20) || n_truncate > (1u << 20)) {
    return Status::InvalidArgument("lock: too many entries");
  }
  std::map<uint32_t, uint64_t> expect;
  for (uint32_t i = 0; i < n_expect; i++) {
    uint64_t slot = 0, version = 0;
    PDPM_RETURN_IF_ERROR(d.U64(&slot));
    PDPM_RETURN_IF_ERROR(d.U64(&version));
    if (slot >= options_.version_slots) return Status::InvalidArgument("lock: bad version slot");
    expect[static_cast<uint32_t>(slot)] = version;
  }
  std::vector<uint64_t> truncate(n_truncate);
  for (auto& t : truncate) PDPM_RETURN_IF_ERROR(d.U64(&t));
  std::map<uint32_t, std::vector<uint32_t>> listed;  // segment -> backup servers
  if ((info & dsm::kTxLockListsBackups) != 0) {
    uint64_t n = 0;
    PDPM_RETURN_IF_ERROR(d.U64(&n));
    if (n > (1u << 20)) return Status::InvalidArgument("lock: too many backups");
    for (uint64_t i = 0; i < n; i++) {
      uint64_t v = 0;
      PDPM_RETURN_IF_ERROR(d.U64(&v));
      listed[static_cast<uint32_t>(v)].push_back(static_cast<uint32_t>(v >> 32));
    }
  }
  std::string_view body = d.Rest();
  std::vector<TxEntry> entries;
  PDPM_RETURN_IF_ERROR(DecodeTxEntries(body, false, &entries));
  std::vector<uint64_t> participants;
  TakeParticipants(&entries, &participants);
  // The holder keeps the list with its decision, and so do the holder
  // segment's backups (one of them may hold the decision after a failover).
  const bool lists = (info & dsm::kTxLockListsParticipants) != 0;
  if (!lists && !participants.empty()) {
    return Status::InvalidArgument("lock: participant entries in a request not flagged so");
  }
  if (lists && role == kTxRolePrimary && !holder) {
    return Status::InvalidArgument("lock: participants listed at a primary that is not the holder");
  }
  if (lists && role == kTxRoleBackup) {
    bool holder_part = !holder_is_table &&
                       std::any_of(entries.begin(), entries.end(),
                                   [&](const TxEntry& e) { return e.segment == holder_segment; });
    if (!holder_part) {
      return Status::InvalidArgument(
          "lock: participants listed at a backup not of the holder segment");
    }
  }
  PDPM_RETURN_IF_ERROR(hooks_.check(h));
  TxCopy copy = role == kTxRolePrimary ? TxCopy::kPrimary : TxCopy::kBackup;
  for (const auto& e : entries) {
    if (dsm::IsObjectEntry(e)) {
      if (copy == TxCopy::kBackup) {
        // Logged per table segment, like the heap's entries.
        if (e.segment == 0)
          return Status::InvalidArgument("lock: an object at a backup, no segment");
        dsm::PmRange mem;
        dsm::PAllocator* alloc = nullptr;
        PDPM_RETURN_IF_ERROR(hooks_.segment(e.segment, copy, h.epoch, &mem, &alloc));
        continue;
      }
      dsm::ObjectStoreTable* table = nullptr;
      uint32_t segment = 0;
      PDPM_RETURN_IF_ERROR(hooks_.object_table(
          ObjectIdOf(e), h.epoch, e.kind == TxEntryKind::kPutObject, &table, &segment));
      // The coordinator names the table's segment (its backups get BACKUP
      // records); 0 only for a table it knows without one.
      if (e.segment == 0) {
        return Status::FailedPrecondition("table of an object entry is in segment " +
                                          std::to_string(segment) + ": route again");
      }
      // Another segment: the coordinator's mapping is older than the
      // table's segment (an emptied one was released and a new one made).
      if (e.segment != segment) {
        return Status::FailedPrecondition("lock: an object entry names segment " +
                                          std::to_string(e.segment) + ", its table is in " +
                                          std::to_string(segment) + ": route again");
      }
      continue;
    }
    if (dsm::IsKvEntry(e)) {
      // A primary checks its tables under the locks (CheckKvEntries).
      if (copy == TxCopy::kBackup) {
        dsm::PmRange mem;
        dsm::PAllocator* alloc = nullptr;
        PDPM_RETURN_IF_ERROR(hooks_.segment(e.segment, copy, h.epoch, &mem, &alloc));
      }
      continue;
    }
    dsm::PmRange mem;
    dsm::PAllocator* alloc = nullptr;
    PDPM_RETURN_IF_ERROR(hooks_.segment(e.segment, copy, h.epoch, &mem, &alloc));
    uint64_t len = e.kind == TxEntryKind::kWrite ? e.data.size() : 1;
    if (e.offset > mem.size || len > mem.size - e.offset) {
      return Status::OutOfRange("lock: an entry outside segment " + std::to_string(e.segment));
    }
  }
  auto rec = std::make_unique<Rec>();
  rec->entries = std::move(entries);
  rec->coordinator = coordinator;
  rec->backups = std::move(listed);
  if (role == kTxRolePrimary) rec->participants = participants;
  if (role == kTxRolePrimary) {
    // Lock the words; a word locked by another transaction, or changed since
    // this one read it, is a conflict.
    std::vector<uint32_t> slots = SlotsOf(rec->entries);
    for (uint32_t s : slots) {
      uint64_t v = versions_[s].load();
      auto want = expect.find(s);
      bool ok = (v & kTxVersionLock) == 0 && (want == expect.end() || want->second == v) &&
                versions_[s].compare_exchange_strong(v, v | kTxVersionLock);
      if (!ok) {
        for (uint32_t t : rec->slots) versions_[t].fetch_and(~kTxVersionLock);
        return Status::Aborted("conflict: a written item is locked or changed");
      }
      rec->slots.push_back(s);
    }
    // Under the locks: a writer of these keys now waits for the outcome,
    // so what the check finds holds until the commit.
    if (Status c = CheckKvEntries(rec->entries, h.epoch); !c.ok()) {
      for (uint32_t t : rec->slots) versions_[t].fetch_and(~kTxVersionLock);
      return c;
    }
  }
  Locked lock(this);
  if (rec->entries.empty()) {
    for (uint32_t t : rec->slots) versions_[t].fetch_and(~kTxVersionLock);
    return Status::InvalidArgument("lock: no entries");
  }
  // Checked under mu_, as CloseSegment looks for records: a LOCK either
  // keeps a table segment from its release or is refused.
  for (uint32_t segment : SegmentsOf(rec->entries)) {
    if (closed_.count(segment) != 0) {
      for (uint32_t t : rec->slots) versions_[t].fetch_and(~kTxVersionLock);
      return Status::Aborted("segment " + std::to_string(segment) +
                             " is being released: run the transaction again");
    }
  }
  Status s =
      role == kTxRolePrimary ? CheckAllocations({coordinator, tx}, rec->entries) : Status::OK();
  if (s.ok() && role == kTxRolePrimary) s = CheckBackupsListed(*rec);
  Area* area = nullptr;
  if (s.ok()) s = AreaFor(coordinator, &area);
  if (!s.ok()) {
    for (uint32_t t : rec->slots) versions_[t].fetch_and(~kTxVersionLock);
    return s;
  }
  // Lazy truncation, piggybacked on this request.
  Truncate(coordinator, truncate);
  uint16_t flags =
      (holder ? dsm::kTxRecordHolder : 0) | (holder_is_table ? dsm::kTxRecordHolderIsTable : 0);
  if (role == kTxRolePrimary) {
    if (lists) flags |= dsm::kTxRecordListsParticipants;
    s = AppendTo(area, TxRecordKind::kLock, flags, tx, holder_segment, body, &rec->r);
    if (!s.ok()) {
      for (uint32_t t : rec->slots) versions_[t].fetch_and(~kTxVersionLock);
      return s;
    }
    AddRec(area, std::move(rec));
    return Status::OK();
  }
  // At a backup, one record per segment: each is marked applied by its own
  // segment's shipment.
  std::map<uint32_t, std::vector<TxEntry>> by_segment;
  for (auto& e : rec->entries) by_segment[e.segment].push_back(std::move(e));
  // Checked under mu_, as PromoteSegment marks and collects: a record
  // either reaches a promotion's resolution or is refused.
  for (const auto& [segment, part] : by_segment) {
    if (promoted_.count(segment) != 0) {
      return Status::FailedPrecondition("segment " + std::to_string(segment) +
                                        " was promoted here: no BACKUP record for it; route again");
    }
  }
  for (auto& [segment, part] : by_segment) {
    auto one = std::make_unique<Rec>();
    one->entries = std::move(part);
    one->coordinator = coordinator;
    std::string part_body;
    dsm::EncodeTxEntries(one->entries, &part_body);
    uint16_t part_flags = flags;
    if (lists && !holder_is_table && segment == holder_segment) {
      part_flags |= dsm::kTxRecordListsParticipants;
      one->participants = participants;
      dsm::EncodeTxEntries(ParticipantEntries(participants), &part_body);
    }
    PDPM_RETURN_IF_ERROR(
        AppendTo(area, TxRecordKind::kBackup, part_flags, tx, holder_segment, part_body, &one->r));
    AddRec(area, std::move(one));
  }
  return Status::OK();
}

std::set<uint32_t> TxParticipant::SegmentsOf(const std::vector<TxEntry>& entries) {
  std::set<uint32_t> out;
  for (const auto& e : entries) {
    if (e.segment != 0) out.insert(e.segment);
  }
  return out;
}

Status TxParticipant::CheckAllocations(Key key, const std::vector<TxEntry>& entries) {
  std::set<std::pair<uint32_t, uint64_t>> named, held;
  for (const auto& e : entries) {
    if (e.kind == TxEntryKind::kAllocated) named.insert({e.segment, e.offset});
  }
  for (Rec* r : RecordsOf(key)) {
    if (r->r.kind != TxRecordKind::kAlloc) continue;
    const TxEntry& block = r->entries.front();
    if (r->r.state == TxState::kLocked) {
      held.insert({block.segment, block.offset});
    } else if (named.count({block.segment, block.offset}) != 0) {
      // Freed after its coordinator's timeout.
      return Status::Aborted("a block the transaction allocated was reclaimed");
    }
  }
  if (named != held) {
    return Status::Aborted(
        "the blocks the transaction allocated here are not those its LOCK names");
  }
  return Status::OK();
}

Status TxParticipant::CheckBackupsListed(const Rec& rec) {
  for (uint32_t segment : SegmentsOf(rec.entries)) {
    std::vector<uint32_t> in_sync, syncing;
    hooks_.backups(segment, &in_sync, &syncing);
    std::vector<uint32_t> required = in_sync;
    if (auto j = joining_.find(segment); j != joining_.end()) {
      // A joining backup is required until the view says it is in sync
      // (then it is in `in_sync`) or dropped.
      std::erase_if(j->second, [&](uint32_t b) {
        return std::find(syncing.begin(), syncing.end(), b) == syncing.end();
      });
      required.insert(required.end(), j->second.begin(), j->second.end());
      if (j->second.empty()) joining_.erase(j);
    }
    auto l = rec.backups.find(segment);
    for (uint32_t b : required) {
      if (l == rec.backups.end() ||
          std::find(l->second.begin(), l->second.end(), b) == l->second.end()) {
        return Status::FailedPrecondition("segment " + std::to_string(segment) +
                                          " has a backup on server " + std::to_string(b) +
                                          " the transaction does not log at: route again");
      }
    }
  }
  return Status::OK();
}

Status TxParticipant::BackupJoining(uint32_t segment, uint32_t backup, std::string* decisions) {
  decisions->clear();
  std::set<Key> before;
  {
    Locked lock(this);
    joining_[segment].insert(backup);
    for (const auto& [key, list] : recs_) {
      for (const auto& r : list) {
        bool locks = r->r.kind == TxRecordKind::kLock || r->r.kind == TxRecordKind::kAlloc;
        if (locks && SegmentsOf(r->entries).count(segment) != 0) before.insert(key);
      }
    }
  }
  // Past the lock timeout a record is resolved; a holder may take longer.
  auto deadline = Clock::now() + 3 * std::chrono::milliseconds(options_.lock_timeout_ms);
  while (true) {
    {
      Locked lock(this);
      std::erase_if(before, [&](const Key& key) {
        for (Rec* r : RecordsOf(key)) {
          bool live = r->r.state == TxState::kLocked || r->r.state == TxState::kCommitted;
          bool locks = r->r.kind == TxRecordKind::kLock || r->r.kind == TxRecordKind::kAlloc;
          if (locks && live) return false;
        }
        return true;
      });
      if (before.empty()) {
        EncodeKeptDecisions(segment, decisions);
        return Status::OK();
      }
      if (Clock::now() > deadline) {
        if (auto j = joining_.find(segment); j != joining_.end()) j->second.erase(backup);
        return Status::Unavailable("segment " + std::to_string(segment) + ": " +
                                   std::to_string(before.size()) +
                                   " transactions locked before its backup joined are not done");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void TxParticipant::EncodeKeptDecisions(uint32_t segment, std::string* out) {
  std::vector<std::pair<Key, std::string>> kept;
  for (const auto& [key, list] : recs_) {
    for (const auto& r : list) {
      const bool decided = r->r.state == TxState::kCommitted || r->r.state == TxState::kApplied;
      const bool of_segment =
          r->r.holder_segment == segment && (r->r.flags & dsm::kTxRecordHolderIsTable) == 0;
      const bool kept_here =
          (r->r.kind == TxRecordKind::kLock && (r->r.flags & dsm::kTxRecordHolder) != 0) ||
          (r->r.kind == TxRecordKind::kBackup && SegmentOf(r->entries) == segment);
      if (!decided || !of_segment || !kept_here) continue;
      std::vector<TxEntry> part;
      for (const TxEntry& e : r->entries) {
        if (e.segment == segment) part.push_back(e);
      }
      // A transaction that only allocated decides at its block's segment
      // with no entry of it here; its blocks' state comes with the fill.
      if (part.empty()) continue;
      const std::vector<TxEntry> named = ParticipantEntries(r->participants);
      part.insert(part.end(), named.begin(), named.end());
      std::string body;
      dsm::EncodeTxEntries(part, &body);
      kept.emplace_back(key, std::move(body));
    }
  }
  if (kept.empty()) return;
  Encoder e(out);
  e.U64(segment);
  e.U64(kept.size());
  for (const auto& [key, body] : kept) {
    e.U64(key.first);
    e.U64(key.second);
    e.Str(body);
  }
}

Status TxParticipant::HandleKeepDecisions(std::span<const uint8_t> req, std::string* /*reply*/) {
  Decoder d(req);
  RequestHeader h;
  uint64_t segment = 0, n = 0;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(d.U64(&segment));
  PDPM_RETURN_IF_ERROR(d.U64(&n));
  if (segment == 0 || segment > UINT32_MAX) {
    return Status::InvalidArgument("keep decisions: bad segment");
  }
  if (n > (1u << 20)) return Status::InvalidArgument("keep decisions: too many");
  struct Decision {
    Key key;
    std::string_view body;
    std::vector<TxEntry> entries;
    std::vector<uint64_t> participants;
  };
  std::vector<Decision> decisions(n);
  const auto global = static_cast<uint32_t>(segment);
  for (Decision& dec : decisions) {
    PDPM_RETURN_IF_ERROR(d.U64(&dec.key.first));
    PDPM_RETURN_IF_ERROR(d.U64(&dec.key.second));
    PDPM_RETURN_IF_ERROR(d.Str(&dec.body));
    if (dec.key.first == 0) return Status::InvalidArgument("keep decisions: coordinator id 0");
    PDPM_RETURN_IF_ERROR(DecodeTxEntries(dec.body, false, &dec.entries));
    TakeParticipants(&dec.entries, &dec.participants);
    if (dec.entries.empty() || SegmentsOf(dec.entries) != std::set<uint32_t>{global}) {
      return Status::InvalidArgument("keep decisions: entries not all of segment " +
                                     std::to_string(segment));
    }
  }
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(hooks_.check(h));
  dsm::PmRange mem;
  dsm::PAllocator* alloc = nullptr;
  PDPM_RETURN_IF_ERROR(hooks_.segment(global, TxCopy::kBackup, h.epoch, &mem, &alloc));
  Locked lock(this);
  if (promoted_.count(global) != 0) {
    return Status::FailedPrecondition("segment " + std::to_string(segment) + " was promoted here");
  }
  for (Decision& dec : decisions) {
    // A BACKUP record of it from before this fill: decided now, and its
    // values came with the fill.
    bool logged = false;
    for (Rec* r : RecordsOf(dec.key)) {
      if (r->r.kind != TxRecordKind::kBackup || SegmentOf(r->entries) != global) continue;
      if (r->r.state == TxState::kLocked || r->r.state == TxState::kCommitted) {
        SetState(r, TxState::kApplied);
      }
      logged |= r->r.state == TxState::kApplied;
    }
    if (logged) continue;
    Area* area = nullptr;
    PDPM_RETURN_IF_ERROR(AreaFor(dec.key.first, &area));
    auto rec = std::make_unique<Rec>();
    rec->entries = std::move(dec.entries);
    rec->coordinator = dec.key.first;
    rec->participants = std::move(dec.participants);
    const uint16_t flags = rec->participants.empty() ? 0 : dsm::kTxRecordListsParticipants;
    PDPM_RETURN_IF_ERROR(
        AppendTo(area, TxRecordKind::kBackup, flags, dec.key.second, global, dec.body, &rec->r));
    Rec* kept = rec.get();
    AddRec(area, std::move(rec));
    SetState(kept, TxState::kApplied);
  }
  return Status::OK();
}

void TxParticipant::BackupNotJoined(uint32_t segment, uint32_t backup) {
  Locked lock(this);
  if (auto j = joining_.find(segment); j != joining_.end()) j->second.erase(backup);
}

void TxParticipant::AddRec(Area* area, std::unique_ptr<Rec> rec) {
  rec->area = area;
  rec->since = Clock::now();
  area->by_offset[rec->r.offset] = rec.get();
  Key key{rec->coordinator, rec->r.tx};
  recs_[key].push_back(std::move(rec));
}

Status TxParticipant::Apply(const Rec& rec) {
  const TxCopy copy = rec.r.kind == TxRecordKind::kLock ? TxCopy::kPrimary : TxCopy::kBackup;
  const TxTag whole{rec.coordinator, rec.r.tx};
  const std::string what = "apply transaction " + std::to_string(rec.r.tx);
  // One replicated mutation per heap segment, per vnode and per object
  // table, the holder's first: once its backups have the commit, a failover
  // of any other part finds it decided.
  std::map<uint32_t, std::vector<const TxEntry*>> heap, kv, objects;
  // Written by coordinators that named no table segment: one by one.
  std::vector<const TxEntry*> loose_objects;
  for (const auto& e : rec.entries) {
    switch (e.kind) {
      case TxEntryKind::kWrite:
      case TxEntryKind::kFree:
      case TxEntryKind::kAllocated: heap[e.segment].push_back(&e); break;
      case TxEntryKind::kPutObject:
      case TxEntryKind::kDeleteObject:
        (e.segment != 0 ? objects[e.segment] : loose_objects).push_back(&e);
        break;
      default:
        if (!dsm::IsKvEntry(e)) return Status::Corruption(what + ": unknown entry kind");
        kv[e.segment].push_back(&e);
        break;
    }
  }
  // A vnode's puts go in mutations of at most kKvPutsPerMutation each, as
  // its batches do: one shipment of them all could outlast the backups'
  // reply timeout, and the commit, retried after each lock timeout, would
  // keep its keys locked for good. The earlier ones ship as parts (below).
  std::map<uint32_t, std::vector<std::vector<const TxEntry*>>> kv_chunks;
  for (const auto& [segment, entries] : kv) {
    std::vector<std::vector<const TxEntry*>>& chunks = kv_chunks[segment];
    for (size_t at = 0; at < entries.size(); at += kKvPutsPerMutation) {
      const size_t end = std::min(entries.size(), at + kKvPutsPerMutation);
      chunks.emplace_back(entries.begin() + static_cast<ptrdiff_t>(at),
                          entries.begin() + static_cast<ptrdiff_t>(end));
    }
  }
  const bool holder_named = (rec.r.flags & dsm::kTxRecordHolderIsTable) == 0;
  std::vector<std::pair<uint32_t, const std::vector<const TxEntry*>*>> order;
  for (bool holder_pass : {true, false}) {
    auto add = [&](uint32_t segment, const std::vector<const TxEntry*>* entries) {
      bool holder = holder_named && segment == rec.r.holder_segment;
      if (holder == holder_pass) order.push_back({segment, entries});
    };
    for (const auto& [segment, entries] : heap) add(segment, &entries);
    for (const auto& [segment, chunks] : kv_chunks) {
      for (const auto& chunk : chunks) add(segment, &chunk);
    }
    for (const auto& [segment, entries] : objects) add(segment, &entries);
  }
  for (size_t i = 0; i < order.size(); i++) {
    // Named references, not a structured binding: the lambdas below
    // capture them.
    const auto& segment = order[i].first;
    const auto& entries = order[i].second;
    // A table segment's pDKVS vnode (one or more chunks) and object table
    // are several mutations: all but the last ship as parts, so that a
    // backup marks its BACKUP record applied only with the last (a
    // promotion between them applies them all again: absolute puts).
    TxTag tag = whole;
    for (size_t j = i + 1; j < order.size(); j++) {
      if (order[j].first == segment) tag.kind = TxTagKind::kCommitPart;
    }
    const TxEntry& first = *entries->front();
    if (dsm::IsKvEntry(first)) {
      // Absolute puts and deletes: applying twice (after a crash) leaves
      // the same.
      PDPM_RETURN_IF_ERROR(hooks_
                               .kv(segment, static_cast<uint32_t>(first.offset), copy, 0, tag, true,
                                   {},
                                   [&](pdkvs::CcehIndex* index, pdkvs::VnodeHashes* hashes) {
                                     for (const TxEntry* e : *entries) {
                                       PDPM_RETURN_IF_ERROR(ApplyKvEntry(*e, index, hashes));
                                     }
                                     return Status::OK();
                                   })
                               .WithContext(what));
      continue;
    }
    if (dsm::IsObjectEntry(first)) {
      PDPM_RETURN_IF_ERROR(ApplyObjects(*entries, segment, copy, tag).WithContext(what));
      continue;
    }
    PDPM_RETURN_IF_ERROR(hooks_
                             .mutate(segment, copy, tag,
                                     [&](const dsm::PmRange& mem, dsm::PAllocator* alloc) {
                                       for (const TxEntry* e : *entries) {
                                         PDPM_RETURN_IF_ERROR(
                                             ApplyHeapEntry(*e, mem, alloc, log_, rec.r.tx));
                                       }
                                       return Status::OK();
                                     })
                             .WithContext(what));
  }
  for (const TxEntry* e : loose_objects) {
    PDPM_RETURN_IF_ERROR(ApplyObjects({e}, 0, copy, whole).WithContext(what));
  }
  return Status::OK();
}

Status TxParticipant::ApplyObjects(const std::vector<const TxEntry*>& entries, uint32_t segment,
                                   TxCopy copy, TxTag tag) {
  bool create = false;
  for (const TxEntry* e : entries) create |= e->kind == TxEntryKind::kPutObject;
  Status s = hooks_.mutate_object(ObjectIdOf(*entries.front()), segment, copy, create, tag,
                                  [&](dsm::ObjectStoreTable* table) {
                                    for (const TxEntry* e : entries) {
                                      PDPM_RETURN_IF_ERROR(ApplyObjectEntry(*e, table));
                                    }
                                    return Status::OK();
                                  });
  // Only deletes in a table without a segment: nothing to delete.
  if (!create && segment == 0 && s.code() == StatusCode::kNotFound) return Status::OK();
  return s;
}

bool TxParticipant::CloseSegment(uint32_t segment) {
  Locked lock(this);
  for (const auto& [key, recs] : recs_) {
    for (const auto& rec : recs) {
      // Holders and participants as segment | is-table << 32: a table's
      // number is no segment.
      if (HolderOf(rec->r) == uint64_t{segment}) return false;
      for (const TxEntry& e : rec->entries) {
        if (e.segment == segment) return false;
      }
      for (uint64_t p : rec->participants) {
        if (p == uint64_t{segment}) return false;
      }
    }
  }
  closed_.insert(segment);
  return true;
}

void TxParticipant::ReopenSegment(uint32_t segment) {
  Locked lock(this);
  closed_.erase(segment);
}

uint32_t TxParticipant::KvSlot(uint32_t table, std::string_view key) const {
  return dsm::TxKvSlot(table, pdkvs::HashKey(key), options_.version_slots);
}

bool TxParticipant::KvLocked(uint32_t table, std::string_view key) const {
  return (KvVersion(table, key) & kTxVersionLock) != 0;
}

uint64_t TxParticipant::KvVersion(uint32_t table, std::string_view key) const {
  if (versions_ == nullptr) return 0;
  return versions_[KvSlot(table, key)].load();
}

TxParticipant::KvKeyVersion TxParticipant::KvKey(uint32_t table, std::string_view key) {
  KvKeyVersion v;
  if (versions_ != nullptr) v.word_ = &versions_[KvSlot(table, key)];
  return v;
}

Status TxParticipant::CheckKvEntries(const std::vector<TxEntry>& entries, uint64_t epoch) {
  std::map<uint32_t, std::vector<const TxEntry*>> by_segment;
  for (const auto& e : entries) {
    if (dsm::IsKvEntry(e)) by_segment[e.segment].push_back(&e);
  }
  for (const auto& group : by_segment) {
    const uint32_t segment = group.first;
    const std::vector<const TxEntry*>& part = group.second;  // captured below
    const auto table = static_cast<uint32_t>(part.front()->offset);
    std::vector<std::string_view> keys;
    for (const TxEntry* e : part) {
      if (e->offset != table) {
        return Status::InvalidArgument("lock: two tables in segment " + std::to_string(segment));
      }
      keys.push_back(dsm::KvEntryKey(*e));
    }
    PDPM_RETURN_IF_ERROR(hooks_.kv(segment, table, TxCopy::kPrimary, epoch, {}, false, keys,
                                   [&](pdkvs::CcehIndex* index, pdkvs::VnodeHashes*) {
                                     if (index == nullptr) return Status::OK();
                                     for (const TxEntry* e : part) {
                                       if (e->kind != TxEntryKind::kKvPutIfAbsent) continue;
                                       bool exists = false;
                                       PDPM_RETURN_IF_ERROR(
                                           index->Exists(dsm::KvEntryKey(*e), &exists));
                                       if (exists) {
                                         return Status::AlreadyExists("a key exists");
                                       }
                                     }
                                     return Status::OK();
                                   }));
  }
  return Status::OK();
}

void TxParticipant::Unlock(Rec* rec, bool bump) {
  for (uint32_t s : rec->slots) {
    uint64_t v = versions_[s].load() & ~kTxVersionLock;
    versions_[s].store(bump ? v + 1 : v);
  }
  rec->slots.clear();
}

bool TxParticipant::Terminal(const Rec& rec) const {
  switch (rec.r.state) {
    case TxState::kTruncated:
    case TxState::kAborted: return true;
    // The holder's record answers RESOLVE until its coordinator truncates
    // it; so does a BACKUP record of the holder segment, for a promotion.
    case TxState::kApplied:
      return (rec.r.flags & dsm::kTxRecordHolder) == 0 &&
             !(rec.r.kind == TxRecordKind::kBackup &&
               (rec.r.flags & dsm::kTxRecordHolderIsTable) == 0 &&
               SegmentOf(rec.entries) == rec.r.holder_segment);
    default: return false;
  }
}

dsm::TxLogArea::Owner TxParticipant::OwnerOf(Area* area) {
  dsm::TxLogArea::Owner o;
  o.done = [this, area](uint64_t offset) {
    auto it = area->by_offset.find(offset);
    return it == area->by_offset.end() || Terminal(*it->second);
  };
  o.dropped = [this, area](uint64_t offset) {
    auto it = area->by_offset.find(offset);
    if (it == area->by_offset.end()) return;  // superseded by a moved copy
    swept_.push_back(it->second);
    area->by_offset.erase(it);
  };
  // A record another thread applies or frees (mu_ released) is changed by
  // it later: it stays where it is.
  o.movable = [area](uint64_t offset) {
    auto it = area->by_offset.find(offset);
    return it != area->by_offset.end() && !it->second->working;
  };
  o.moved = [area](uint64_t from, const dsm::TxRecord& to) {
    auto it = area->by_offset.find(from);
    Rec* rec = it->second;
    area->by_offset.erase(it);
    rec->r.offset = to.offset;
    rec->r.seq = to.seq;
    rec->r.size = to.size;
    rec->r.flags = to.flags;
    area->by_offset[to.offset] = rec;
  };
  return o;
}

Status TxParticipant::AppendTo(Area* area, TxRecordKind kind, uint16_t flags, uint64_t tx,
                               uint32_t holder_segment, std::string_view body, dsm::TxRecord* out) {
  area->log->Compact(body.size(), OwnerOf(area));
  Status s = area->log->Append(kind, flags, tx, holder_segment, body, out);
  if (s.code() == StatusCode::kResourceExhausted) {
    // Every record of the area is live (transactions of this coordinator
    // in flight or not yet truncated): nothing was locked here, and the
    // space comes back as they end.
    return Status::Aborted(std::string(s.message()) + ": run the transaction again");
  }
  return s;
}

void TxParticipant::SetState(Rec* rec, TxState s) {
  auto live = rec->area->by_offset.find(rec->r.offset);
  if (live == rec->area->by_offset.end() || live->second != rec) return;  // trimmed already
  rec->area->log->SetState(rec->r, s);
  rec->r.state = s;
  const dsm::TxLogArea::Owner owner = OwnerOf(rec->area);
  rec->area->log->Trim([&](uint64_t offset) {
    if (!owner.done(offset)) return false;
    owner.dropped(offset);
    return true;
  });
}

std::vector<TxParticipant::Rec*> TxParticipant::RecordsOf(Key key) {
  std::vector<Rec*> out;
  auto it = recs_.find(key);
  if (it != recs_.end()) {
    for (auto& r : it->second) out.push_back(r.get());
  }
  return out;
}

void TxParticipant::Truncate(uint64_t coordinator, const std::vector<uint64_t>& txs) {
  for (uint64_t t : txs) {
    for (Rec* r : RecordsOf({coordinator, t})) {
      // A BACKUP record still only committed: its primary applied the
      // transaction (the coordinator truncates once every participant
      // did) without shipping it here, so this copy was dropped there and
      // is filled again before it can be promoted. Kept, it would never
      // end (the truncation is not sent again).
      bool dropped_copy = r->r.kind == TxRecordKind::kBackup && r->r.state == TxState::kCommitted;
      if (r->r.state == TxState::kApplied || r->r.state == TxState::kAborted || dropped_copy) {
        SetState(r, TxState::kTruncated);
      }
    }
  }
}

void TxParticipant::Sweep() {
  if (busy_ > 0) return;  // another thread holds record pointers
  for (Rec* r : swept_) {
    auto list = recs_.find({r->coordinator, r->r.tx});
    if (list == recs_.end()) continue;
    auto& v = list->second;
    v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& p) { return p.get() == r; }),
            v.end());
    if (v.empty()) recs_.erase(list);
  }
  swept_.clear();
}

Status TxParticipant::CommitRec(Locked& lock, Rec* rec, bool decide, uint64_t promoting) {
  WaitIdle(lock, rec);
  switch (rec->r.state) {
    case TxState::kAborted: return Status::Aborted("transaction aborted (resolved meanwhile)");
    case TxState::kApplied:
    case TxState::kTruncated: return Status::OK();
    default: break;
  }
  if (rec->r.kind == TxRecordKind::kAlloc || rec->r.kind == TxRecordKind::kBackupAlloc) {
    SetState(rec, TxState::kApplied);  // the block stays
    return Status::OK();
  }
  if (decide || rec->r.kind == TxRecordKind::kBackup) {
    if (rec->r.state == TxState::kLocked) SetState(rec, TxState::kCommitted);
  }
  // A backup's copy gets the values from its primary's shipment
  // (ApplyShipped), or from its own record when promoted; a copy dropped
  // by the cluster needs neither.
  if (rec->r.kind == TxRecordKind::kBackup && SegmentOf(rec->entries) != promoting) {
    dsm::PmRange mem;
    dsm::PAllocator* alloc = nullptr;
    if (Moved(hooks_.segment(SegmentOf(rec->entries), TxCopy::kBackup, 0, &mem, &alloc))) {
      SetState(rec, TxState::kApplied);
    }
    return Status::OK();
  }
  Status s = WithoutLock(lock, rec, [&] { return Apply(*rec); });
  if (!s.ok() && Moved(s)) {
    // The copy here was fenced: the segment's new primary applies the
    // transaction from its BACKUP record (or decided it aborted).
    log_.Warn("committed transaction dropped: its segment moved away",
              {{"tx", rec->r.tx}, {"status", s}});
    Unlock(rec, true);
    SetState(rec, TxState::kTruncated);
    return s;
  }
  PDPM_RETURN_IF_ERROR(s);
  Unlock(rec, true);
  SetState(rec, TxState::kApplied);
  return Status::OK();
}

void TxParticipant::FreeBlock(Locked& lock, Rec* rec, TxCopy copy) {
  (void)WithoutLock(lock, rec, [&] {
    for (const auto& e : rec->entries) {
      FreeAllocated(rec->coordinator, rec->r.tx, e.segment, e.offset, copy);
    }
    return Status::OK();
  });
}

void TxParticipant::FreeAllocated(uint64_t coordinator, uint64_t tx, uint32_t segment,
                                  uint64_t offset, TxCopy copy) {
  // At a primary the free tells the backups which BACKUP-ALLOC record it
  // ends; a promoted copy has none to tell.
  TxTag tag;
  if (copy == TxCopy::kPrimary) tag = {coordinator, tx, TxTagKind::kAllocFreed, offset};
  Status s = hooks_.mutate(segment, copy, tag, [&](const dsm::PmRange&, dsm::PAllocator* alloc) {
    return alloc->Free(offset, dsm::BlockOwner::kHeap);
  });
  if (!s.ok() && s.code() != StatusCode::kFailedPrecondition) {
    log_.Warn("cannot free a block of an aborted transaction", {{"tx", tx}, {"status", s}});
  }
}

void TxParticipant::AbortRec(Locked& lock, Rec* rec) {
  WaitIdle(lock, rec);
  if (rec->r.state != TxState::kLocked) return;
  // Its primary's shipment ends it, or a promotion here.
  if (rec->r.kind == TxRecordKind::kBackupAlloc) return;
  if (rec->r.kind == TxRecordKind::kAlloc) {
    // Free the block first: a crash before the state store frees it again
    // at recovery (a double free, ignored).
    FreeBlock(lock, rec, TxCopy::kPrimary);
    if (rec->r.state != TxState::kLocked) return;
  }
  Unlock(rec, false);
  SetState(rec, TxState::kAborted);
}

Status TxParticipant::ParseTxRequest(std::span<const uint8_t> req, uint64_t* coordinator,
                                     uint64_t* tx, uint64_t* extra) {
  Decoder d(req);
  RequestHeader h;
  PDPM_RETURN_IF_ERROR(Begin(&d, coordinator, &h));
  PDPM_RETURN_IF_ERROR(d.U64(tx));
  if (extra != nullptr) PDPM_RETURN_IF_ERROR(d.U64(extra));
  PDPM_RETURN_IF_ERROR(d.Done());
  return hooks_.check(h);
}

Status TxParticipant::HandleCommit(std::span<const uint8_t> req, std::string* /*reply*/) {
  uint64_t coordinator = 0, tx = 0, decide = 0;
  PDPM_RETURN_IF_ERROR(ParseTxRequest(req, &coordinator, &tx, &decide));
  Locked lock(this);
  Heard(coordinator);
  std::vector<Rec*> list = RecordsOf({coordinator, tx});
  if (list.empty()) {
    return decide != 0 ? Status::Aborted("no lock record of the transaction (resolved meanwhile)")
                       : Status::NotFound("no record of transaction " + std::to_string(tx));
  }
  for (Rec* r : list) PDPM_RETURN_IF_ERROR(CommitRec(lock, r, decide != 0));
  return Status::OK();
}

Status TxParticipant::HandleAbort(std::span<const uint8_t> req, std::string* /*reply*/) {
  uint64_t coordinator = 0, tx = 0;
  PDPM_RETURN_IF_ERROR(ParseTxRequest(req, &coordinator, &tx, nullptr));
  Locked lock(this);
  Heard(coordinator);
  std::vector<Rec*> list = RecordsOf({coordinator, tx});  // none: never locked here
  for (Rec* r : list) {
    if (r->r.state == TxState::kCommitted || r->r.state == TxState::kApplied) {
      return Status::FailedPrecondition("abort of a committed transaction");
    }
  }
  for (Rec* r : list) AbortRec(lock, r);
  return Status::OK();
}

Status TxParticipant::HandleTruncate(std::span<const uint8_t> req, std::string* /*reply*/) {
  Decoder d(req);
  RequestHeader h;
  uint64_t coordinator = 0, n = 0;
  PDPM_RETURN_IF_ERROR(Begin(&d, &coordinator, &h));
  PDPM_RETURN_IF_ERROR(d.U64(&n));
  if (n > (1u << 20)) return Status::InvalidArgument("truncate: too many transactions");
  std::vector<uint64_t> txs(n);
  for (auto& t : txs) PDPM_RETURN_IF_ERROR(d.U64(&t));
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(hooks_.check(h));
  Locked lock(this);
  Heard(coordinator);
  Truncate(coordinator, txs);
  return Status::OK();
}

Status TxParticipant::HandleResolve(std::span<const uint8_t> req, std::string* reply) {
  uint64_t coordinator = 0, tx = 0;
  PDPM_RETURN_IF_ERROR(ParseTxRequest(req, &coordinator, &tx, nullptr));
  Locked lock(this);
  uint64_t outcome = kTxOutcomeAbort;
  std::vector<Rec*> list = RecordsOf({coordinator, tx});
  for (Rec* r : list) {
    if (r->r.state == TxState::kCommitted || r->r.state == TxState::kApplied) {
      outcome = kTxOutcomeCommit;
    }
  }
  // Not decided here: decide abort, durably, so that a late coordinator
  // fails to commit.
  if (outcome == kTxOutcomeAbort) {
    for (Rec* r : list) AbortRec(lock, r);
  }
  Encoder(reply).U64(outcome);
  return Status::OK();
}

Status TxParticipant::HandlePending(std::span<const uint8_t> req, std::string* reply) {
  uint64_t coordinator = 0, tx = 0;
  PDPM_RETURN_IF_ERROR(ParseTxRequest(req, &coordinator, &tx, nullptr));
  Locked lock(this);
  uint64_t pending = 0;
  for (Rec* r : RecordsOf({coordinator, tx})) {
    if (r->r.state == TxState::kLocked || r->r.state == TxState::kCommitted) pending = 1;
  }
  Encoder(reply).U64(pending);
  return Status::OK();
}

Status TxParticipant::HandleAlloc(std::span<const uint8_t> req, std::string* reply) {
  uint64_t coordinator = 0, tx = 0, size = 0;
  PDPM_RETURN_IF_ERROR(ParseTxRequest(req, &coordinator, &tx, &size));
  if (size == 0) return Status::InvalidArgument("pallocate of 0 bytes");
  {
    Locked lock(this);
    Area* area = nullptr;
    PDPM_RETURN_IF_ERROR(AreaFor(coordinator, &area));  // before allocating: no leak on failure
  }
  dsm::GlobalAddress a;
  // The backups log a BACKUP-ALLOC record with the allocation itself.
  PDPM_RETURN_IF_ERROR(hooks_.allocate(size, {coordinator, tx, TxTagKind::kAllocated, 0}, &a));
  Status s;
  {
    Locked lock(this);
    s = LogBlock(TxRecordKind::kAlloc, {coordinator, tx}, a.segment, a.offset);
    if (s.ok()) {
      Encoder(reply).Address(a);
      return Status::OK();
    }
  }
  // Not logged: the block goes back (outside mu_: the free is shipped).
  FreeAllocated(coordinator, tx, a.segment, a.offset, TxCopy::kPrimary);
  return s;
}

Status TxParticipant::LogBlock(TxRecordKind kind, Key key, uint32_t segment, uint64_t offset) {
  auto rec = std::make_unique<Rec>();
  TxEntry e;
  e.kind = TxEntryKind::kFree;  // what an abort does
  e.segment = segment;
  e.offset = offset;
  rec->entries.push_back(e);
  rec->coordinator = key.first;
  std::string body;
  dsm::EncodeTxEntries(rec->entries, &body);
  Area* area = nullptr;
  PDPM_RETURN_IF_ERROR(AreaFor(key.first, &area));
  PDPM_RETURN_IF_ERROR(AppendTo(area, kind, 0, key.second, 0, body, &rec->r));
  AddRec(area, std::move(rec));
  return Status::OK();
}

Status TxParticipant::HandleTable(std::span<const uint8_t> req, std::string* reply) {
  Decoder d(req);
  RequestHeader h;
  uint64_t coordinator = 0;
  dsm::ObjectId id;
  PDPM_RETURN_IF_ERROR(Begin(&d, &coordinator, &h));
  PDPM_RETURN_IF_ERROR(d.U64(&id.hi));
  PDPM_RETURN_IF_ERROR(d.U64(&id.lo));
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(hooks_.check(h));
  dsm::ObjectStoreTable* table = nullptr;
  uint32_t segment = 0;
  PDPM_RETURN_IF_ERROR(hooks_.object_table(id, h.epoch, true, &table, &segment));
  Encoder(reply).U64(segment);
  return Status::OK();
}

Status TxParticipant::ResolveRemote(Key key, uint32_t holder, bool holder_is_table,
                                    uint64_t promoting) {
  std::string req, reply;
  Encoder e(&req);
  e.U64(key.first);
  e.U64(key.second);
  PDPM_RETURN_IF_ERROR(hooks_.call_primary(holder, holder_is_table, kTxResolve, req, &reply));
  Decoder d(Bytes(reply));
  uint64_t outcome = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&outcome));
  PDPM_RETURN_IF_ERROR(d.Done());
  Locked lock(this);
  for (Rec* r : RecordsOf(key)) {
    if (r->r.state != TxState::kLocked) continue;
    if (outcome == kTxOutcomeCommit) {
      PDPM_RETURN_IF_ERROR(CommitRec(lock, r, false, promoting));
    } else {
      AbortRec(lock, r);
    }
  }
  log_.Info("transaction resolved",
            {{"coordinator", key.first},
             {"tx", key.second},
             {"outcome", outcome == kTxOutcomeCommit ? "commit" : "abort"}});
  return Status::OK();
}

Status TxParticipant::PromoteSegment(uint32_t segment) {
  {
    Locked lock(this);
    promoted_.insert(segment);
  }
  // Until every BACKUP record of the segment is applied or aborted: while
  // a holder is asked (mu_ released), the resolver may commit a record
  // without applying it (a backup's copy waits for its primary's shipment,
  // which will never come now), so each round looks again.
  for (;;) {
    std::vector<std::pair<Key, uint64_t>> ask;  // holder | is-table << 32
    {
      Locked lock(this);
      std::vector<Rec*> todo;
      for (auto& [key, list] : recs_) {
        for (auto& r : list) {
          if (r->r.kind == TxRecordKind::kBackup && SegmentOf(r->entries) == segment) {
            todo.push_back(r.get());
          }
        }
      }
      for (Rec* r : todo) {
        // Committed and never marked applied: the primary's shipment did not
        // come, and no later commit of these bytes can have overtaken it (a
        // later writer locks only after this commit's shipment).
        if (r->r.state == TxState::kCommitted) {
          PDPM_RETURN_IF_ERROR(CommitRec(lock, r, false, segment));
        } else if (r->r.state == TxState::kLocked) {
          if (r->r.holder_segment == segment && (r->r.flags & dsm::kTxRecordHolderIsTable) == 0) {
            AbortRec(lock, r);  // this server now holds the decision: none reached it
          } else {
            ask.push_back({{r->coordinator, r->r.tx}, HolderOf(r->r)});
          }
        }
      }
    }
    if (ask.empty()) {
      Locked lock(this);
      ResolvePromotedAllocations(lock, segment);
      return Status::OK();
    }
    for (const auto& [key, holder] : ask) {
      PDPM_RETURN_IF_ERROR(
          ResolveRemote(key, static_cast<uint32_t>(holder), (holder >> 32) != 0, segment));
    }
  }
}

void TxParticipant::ResolvePromotedAllocations(Locked& lock, uint32_t segment) {
  std::vector<Rec*> blocks;
  for (auto& [key, list] : recs_) {
    for (auto& r : list) {
      if (r->r.kind == TxRecordKind::kBackupAlloc && r->r.state == TxState::kLocked &&
          SegmentOf(r->entries) == segment) {
        blocks.push_back(r.get());
      }
    }
  }
  for (Rec* r : blocks) {
    // The transaction's LOCK named the block, so a commit has a BACKUP
    // record of the segment here (its coordinator logs at every in-sync
    // backup, and none is taken from the promotion on). One marked applied
    // by its shipment marked this record too; an aborted one may be
    // trimmed already.
    TxState fate = TxState::kAborted;
    for (Rec* other : RecordsOf({r->coordinator, r->r.tx})) {
      if (other->r.kind == TxRecordKind::kBackup && SegmentOf(other->entries) == segment) {
        fate = other->r.state;
      }
    }
    if (fate == TxState::kCommitted || fate == TxState::kApplied) {
      SetState(r, TxState::kApplied);
      continue;
    }
    log_.Info("block of an unfinished transaction freed at a promotion",
              {{"coordinator", r->coordinator}, {"tx", r->r.tx}, {"segment", segment}});
    FreeBlock(lock, r, TxCopy::kBackup);
    SetState(r, TxState::kAborted);
  }
}

void TxParticipant::BackupRefilled(uint32_t segment) {
  Locked lock(this);
  promoted_.erase(segment);
  std::vector<Rec*> done;
  for (auto& [key, list] : recs_) {
    for (auto& r : list) {
      bool backup = r->r.kind == TxRecordKind::kBackup && r->r.state == TxState::kCommitted;
      bool block = r->r.kind == TxRecordKind::kBackupAlloc && r->r.state == TxState::kLocked;
      if ((backup || block) && SegmentOf(r->entries) == segment) done.push_back(r.get());
    }
  }
  for (Rec* r : done) SetState(r, TxState::kApplied);
}

Status TxParticipant::ApplyShipped(uint32_t segment, const TxTag& tag,
                                   const std::function<Status()>& apply) {
  Locked lock(this);
  const Key key{tag.coordinator, tag.tx};
  // The transaction's BACKUP-ALLOC records of the segment not decided
  // yet (of block `tag.block` only, when `one`).
  auto blocks = [&](bool one) {
    std::vector<Rec*> out;
    for (Rec* r : RecordsOf(key)) {
      if (r->r.kind == TxRecordKind::kBackupAlloc && r->r.state == TxState::kLocked &&
          SegmentOf(r->entries) == segment && (!one || r->entries.front().offset == tag.block)) {
        out.push_back(r);
      }
    }
    return out;
  };
  switch (tag.kind) {
    case TxTagKind::kAllocated: {
      // A promotion here resolved the records it found (a deposed primary's
      // shipment; its epoch is refused first).
      if (promoted_.count(segment) != 0) {
        return Status::FailedPrecondition("segment " + std::to_string(segment) +
                                          " was promoted here");
      }
      // Logged before the bytes: a crash between leaves a record of a block
      // free here, whose free at a promotion is ignored. A shipment sent
      // again finds its record.
      if (blocks(true).empty()) {
        PDPM_RETURN_IF_ERROR(LogBlock(TxRecordKind::kBackupAlloc, key, segment, tag.block));
      }
      return apply();
    }
    case TxTagKind::kAllocFreed:
      PDPM_RETURN_IF_ERROR(apply());
      for (Rec* r : blocks(true)) SetState(r, TxState::kAborted);
      return Status::OK();
    case TxTagKind::kCommit:
    case TxTagKind::kCommitPart: break;
  }
  std::vector<Rec*> mine;
  for (Rec* r : RecordsOf(key)) {
    if (r->r.kind != TxRecordKind::kBackup || SegmentOf(r->entries) != segment) continue;
    if (r->r.state == TxState::kAborted) {
      return Status::FailedPrecondition("transaction " + std::to_string(tag.tx) +
                                        " was resolved as aborted at this backup");
    }
    mine.push_back(r);
  }
  PDPM_RETURN_IF_ERROR(apply());
  if (tag.kind == TxTagKind::kCommitPart) {
    // Decided; applied only with the segment's last part.
    for (Rec* r : mine) {
      if (r->r.state == TxState::kLocked) SetState(r, TxState::kCommitted);
    }
    return Status::OK();
  }
  for (Rec* r : mine) {
    if (r->r.state == TxState::kLocked || r->r.state == TxState::kCommitted) {
      SetState(r, TxState::kApplied);
    }
  }
  for (Rec* r : blocks(false)) SetState(r, TxState::kApplied);  // committed: kept
  return Status::OK();
}

void TxParticipant::ResolverLoop() {
  std::unique_lock<std::mutex> stop(stop_mu_);
  while (!stop_cv_.wait_for(stop, std::chrono::milliseconds(200), [&] { return stopping_; })) {
    stop.unlock();
    std::vector<std::pair<Key, uint64_t>> ask;  // holder | is-table << 32
    {
      Locked lock(this);
      Clock::time_point deadline =
          Clock::now() - std::chrono::milliseconds(options_.lock_timeout_ms);
      std::vector<Rec*> local, allocs, unapplied, orphans;
      for (auto& [key, list] : recs_) {
        for (auto& r : list) {
          if (r->since > deadline || r->working) continue;
          // A BACKUP-ALLOC record ends with its primary's shipment or a
          // promotion here, unless its copy is gone.
          if (r->r.kind == TxRecordKind::kBackupAlloc) {
            if (r->r.state == TxState::kLocked) orphans.push_back(r.get());
            continue;
          }
          // Decided here, but its commit failed (a backup did not take the
          // shipment in time): applied again.
          if (r->r.state == TxState::kCommitted && r->r.kind == TxRecordKind::kLock) {
            unapplied.push_back(r.get());
          }
          if (r->r.state != TxState::kLocked) continue;
          if (r->r.kind == TxRecordKind::kAlloc) {
            allocs.push_back(r.get());
          } else if ((r->r.flags & dsm::kTxRecordHolder) != 0) {
            local.push_back(r.get());
          } else {
            ask.push_back({key, HolderOf(r->r)});
          }
        }
      }
      // A copy the cluster dropped (or fenced at a restart) needs nothing.
      for (Rec* r : orphans) {
        dsm::PmRange mem;
        dsm::PAllocator* alloc = nullptr;
        if (Moved(hooks_.segment(SegmentOf(r->entries), TxCopy::kBackup, 0, &mem, &alloc))) {
          SetState(r, TxState::kAborted);
        }
      }
      // The holder's own record past the timeout: its coordinator is gone
      // (or too slow); decide abort.
      for (Rec* r : local) {
        log_.Info("transaction aborted after the lock timeout",
                  {{"coordinator", r->coordinator}, {"tx", r->r.tx}});
        AbortRec(lock, r);
      }
      for (Rec* r : unapplied) {
        Status s = CommitRec(lock, r, false);
        if (!s.ok()) log_.Warn("cannot apply a committed transaction yet", {{"status", s}});
      }
      // A block follows its transaction's LOCK record here; without one
      // (never locked here, or aborted) it is freed.
      for (Rec* r : allocs) {
        TxState fate = TxState::kAborted;
        for (Rec* other : RecordsOf({r->coordinator, r->r.tx})) {
          if (other->r.kind == TxRecordKind::kLock) fate = other->r.state;
        }
        if (fate == TxState::kLocked) continue;  // decided with the LOCK record
        if (fate == TxState::kCommitted || fate == TxState::kApplied) {
          (void)CommitRec(lock, r, false);
        } else {
          AbortRec(lock, r);
        }
      }
    }
    std::sort(ask.begin(), ask.end());
    ask.erase(std::unique(ask.begin(), ask.end()), ask.end());
    for (const auto& [key, holder] : ask) {
      Status s = ResolveRemote(key, static_cast<uint32_t>(holder), (holder >> 32) != 0);
      if (!s.ok()) {
        log_.Warn("cannot resolve a transaction yet",
                  {{"coordinator", key.first}, {"tx", key.second}, {"status", s}});
      }
    }
    ReleaseKeptDecisions();
    stop.lock();
  }
}

void TxParticipant::ReleaseKeptDecisions() {
  // A kept decision is one the coordinator truncates once every
  // participant applied; a coordinator that died never does. Then the
  // participants tell: none waiting on the outcome means none will ask
  // again (a participant's record waits until it is resolved, across its
  // restarts and failovers — the promoted copy holds it), exactly the
  // coordinator's condition. Records that list no participants (written
  // before version 6) stay.
  std::vector<std::pair<Key, std::vector<uint64_t>>> check;
  {
    Locked lock(this);
    const Clock::time_point now = Clock::now();
    const auto silent = std::chrono::milliseconds(options_.silent_coordinator_ms);
    for (auto& [key, list] : recs_) {
      for (auto& r : list) {
        if (r->working || r->r.state != TxState::kApplied || Terminal(*r) ||
            (r->r.flags & dsm::kTxRecordListsParticipants) == 0) {
          continue;
        }
        if (now - r->area->last_active < silent || now < r->next_check) continue;
        r->next_check = now + silent;
        check.push_back({key, r->participants});
      }
    }
  }
  std::sort(check.begin(), check.end());
  check.erase(std::unique(check.begin(), check.end()), check.end());
  for (const auto& [key, participants] : check) {
    std::string req;
    Encoder e(&req);
    e.U64(key.first);
    e.U64(key.second);
    bool waiting = false;
    for (uint64_t p : participants) {
      std::string reply;
      uint64_t pending = 1;  // unknown until it answers
      Status s =
          hooks_.call_primary(static_cast<uint32_t>(p), (p >> 32) != 0, kTxPending, req, &reply);
      if (s.ok()) {
        Decoder d(Bytes(reply));
        if (!d.U64(&pending).ok() || !d.Done().ok()) pending = 1;
      }
      if (pending != 0) {
        waiting = true;
        break;
      }
    }
    if (waiting) continue;
    Locked lock(this);
    for (Rec* r : RecordsOf(key)) {
      if (r->working || r->r.state != TxState::kApplied || Terminal(*r) ||
          (r->r.flags & dsm::kTxRecordListsParticipants) == 0) {
        continue;
      }
      SetState(r, TxState::kTruncated);
      log_.Info("decision of a silent coordinator dropped: no participant waits on it",
                {{"coordinator", key.first}, {"tx", key.second}});
    }
  }
}

}  // namespace pdpm::server
