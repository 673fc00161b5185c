#include "client/transaction.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <set>

namespace pdpm::client {
namespace {

using server::Decoder;
using server::Encoder;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

uint64_t NewCoordinatorId() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  return id;
}

// The granules [first, last] an entry covers.
std::pair<uint64_t, uint64_t> Granules(uint64_t offset, uint64_t len) {
  return {offset / dsm::kTxGranule, (offset + std::max<uint64_t>(len, 1) - 1) / dsm::kTxGranule};
}

// A one-sided access refused for a stale key: the server registered the
// copy again, because it restarted or because it promoted the copy
// (docs/tx.md). Either way the versions read may be of another
// generation, so the transaction aborts and may simply be retried.
Status CopyReRegistered(std::optional<uint32_t> server) {
  const std::string who = server ? "server " + std::to_string(*server) : "a server";
  return Status::Aborted(who + " registered its memory again (it restarted or promoted a copy)");
}

}  // namespace

// --- TxCoordinator ---

TxCoordinator::TxCoordinator(TxHost* host) : host_(host), id_(NewCoordinatorId()) {
  // Test hook: "phase:n" makes the process _exit at the n-th pass of phase.
  // "phase:n" as PDPM_TX_STOP_AT makes it stop (SIGSTOP) there instead.
  auto parse = [](const char* name, std::string* phase, uint64_t* countdown) {
    const char* spec = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): env never changes
    if (spec == nullptr) return;
    std::string v(spec);
    size_t colon = v.find(':');
    *phase = v.substr(0, colon);
    *countdown = colon == std::string::npos ? 1 : std::strtoull(v.c_str() + colon + 1, nullptr, 10);
  };
  parse("PDPM_TX_CRASH_AT", &crash_phase_, &crash_countdown_);
  parse("PDPM_TX_STOP_AT", &stop_phase_, &stop_countdown_);
}

TxCoordinator::~TxCoordinator() {
  std::map<uint32_t, std::vector<uint64_t>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(truncations_);
  }
  for (const auto& [server, txs] : pending) {
    std::string body, reply;
    Encoder e(&body);
    e.U64(id_);
    e.U64(txs.size());
    for (uint64_t t : txs) e.U64(t);
    (void)host_->CallServer(server, server::kTxTruncate, body, &reply);
  }
}

void TxCoordinator::MaybeCrash(const char* phase) {
  if (crash_phase_.empty() || crash_phase_ != phase) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (--crash_countdown_ == 0) _exit(86);
}

void TxCoordinator::MaybeStop(const char* phase) {
  if (stop_phase_.empty() || stop_phase_ != phase) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (--stop_countdown_ == 0) raise(SIGSTOP);
}

Status TxCoordinator::Begin(std::unique_ptr<Transaction>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  out->reset(new Transaction(this, next_tx_++));
  return Status::OK();
}

std::string TxCoordinator::Body(uint64_t tx) const {
  std::string b;
  Encoder e(&b);
  e.U64(id_);
  e.U64(tx);
  return b;
}

Status TxCoordinator::Info(uint32_t server, ServerInfo* out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = servers_.find(server);
    if (it != servers_.end()) {
      *out = it->second;
      return Status::OK();
    }
  }
  std::string body, reply;
  Encoder(&body).U64(id_);
  PDPM_RETURN_IF_ERROR(host_->CallServer(server, server::kTxHello, body, &reply));
  Decoder d(Bytes(reply));
  uint64_t v = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&v));
  PDPM_RETURN_IF_ERROR(d.Done());
  ServerInfo info{static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32)};
  if (info.slots == 0 || (info.slots & (info.slots - 1)) != 0) {
    return Status::Corruption("server " + std::to_string(server) + ": bad version table size");
  }
  std::lock_guard<std::mutex> lock(mu_);
  servers_[server] = info;
  *out = info;
  return Status::OK();
}

void TxCoordinator::ForgetAll() {
  std::lock_guard<std::mutex> lock(mu_);
  servers_.clear();
}

std::vector<uint64_t> TxCoordinator::TakeTruncations(uint32_t server) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  auto it = truncations_.find(server);
  if (it != truncations_.end()) out.swap(it->second);
  return out;
}

void TxCoordinator::AddTruncation(uint32_t server, uint64_t tx) {
  std::lock_guard<std::mutex> lock(mu_);
  truncations_[server].push_back(tx);
}

void TxCoordinator::AddUnfinished(Unfinished u) {
  std::lock_guard<std::mutex> lock(mu_);
  unfinished_.push_back(std::move(u));
}

void TxCoordinator::RetryUnfinished() {
  std::vector<Unfinished> todo;
  {
    std::lock_guard<std::mutex> lock(mu_);
    todo.swap(unfinished_);
  }
  for (auto& u : todo) {
    std::string body = Body(u.tx), reply;
    Encoder(&body).U64(0);
    std::vector<uint32_t> still;
    for (uint32_t server : u.missing) {
      Status s = host_->CallServer(server, server::kTxCommit, body, &reply);
      // not_found: the participant resolved it meanwhile and dropped it.
      if (s.ok() || s.code() == StatusCode::kNotFound) {
        u.acked.push_back(server);
      } else {
        still.push_back(server);
      }
    }
    u.missing = std::move(still);
    if (u.missing.empty()) {
      for (uint32_t server : u.acked) AddTruncation(server, u.tx);
    } else {
      AddUnfinished(std::move(u));
    }
  }
}

// --- Transaction ---

Transaction::~Transaction() {
  if (!finished_) Abort();
}

Status Transaction::Fail(Status s) {
  finished_ = true;
  if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kPermissionDenied) {
    // A server restarted (new keys, maybe a new address): the next
    // transaction starts from a fresh mapping and fresh version-table keys.
    coordinator_->ForgetAll();
    (void)coordinator_->host_->RefreshMapping();
  }
  // The servers free the blocks this transaction allocated (and, were this
  // message lost, after the lock timeout).
  std::vector<uint32_t> servers;
  for (const auto& [server, blocks] : allocated_) servers.push_back(server);
  AbortAt(servers);
  allocated_.clear();
  return s;
}

void Transaction::Abort() {
  if (finished_) return;
  // Nothing is locked before Commit: only the allocations to undo.
  (void)Fail(Status::OK());
}

void Transaction::AbortAt(const std::vector<uint32_t>& servers) {
  std::string body = coordinator_->Body(id_), reply;
  for (uint32_t s : servers)
    (void)coordinator_->host_->CallServer(s, server::kTxAbort, body, &reply);
}

Status Transaction::CheckAddress(const dsm::GlobalAddress& addr, uint64_t len, bool write) {
  if (finished_) return Status::FailedPrecondition("the transaction is finished");
  if (addr.is_null()) return Status::InvalidArgument("the null address");
  PDPM_RETURN_IF_ERROR(addr.descriptor.Validate());
  if (addr.kind() != dsm::SpaceKind::kHeap) {
    return Status::InvalidArgument(addr.ToString() + " is in the object space");
  }
  if (write ? !addr.descriptor.can_write() : !addr.descriptor.can_read()) {
    return Status::PermissionDenied(addr.ToString() + " is not " +
                                    (write ? "writable" : "readable"));
  }
  if (len == 0) return Status::InvalidArgument("a transactional access of 0 bytes");
  if (len > server::kMaxRpcPayload / 2)
    return Status::TooLarge("a transactional access over 32 MiB");
  return addr.CheckRange(len, coordinator_->host_->segment_size());
}

Status Transaction::ReadVersions(uint32_t server, uint32_t segment, uint64_t offset, uint64_t len,
                                 std::vector<std::pair<uint32_t, uint64_t>>* out) {
  TxCoordinator::ServerInfo info;
  PDPM_RETURN_IF_ERROR(coordinator_->Info(server, &info));
  auto [first, last] = Granules(offset, len);
  uint64_t n = last - first + 1;
  if (n > info.slots) return Status::TooLarge("a transactional read over the version table");
  uint32_t s0 = dsm::TxVersionSlot(segment, first, info.slots);
  uint64_t head = std::min<uint64_t>(n, info.slots - s0);
  std::vector<uint64_t> words(n);
  PDPM_RETURN_IF_ERROR(
      coordinator_->host_->ReadRegion(server, info.key, uint64_t{s0} * 8, words.data(), head * 8));
  if (n > head) {
    PDPM_RETURN_IF_ERROR(
        coordinator_->host_->ReadRegion(server, info.key, 0, words.data() + head, (n - head) * 8));
  }
  out->clear();
  for (uint64_t i = 0; i < n; i++) {
    out->push_back({static_cast<uint32_t>((s0 + i) & (info.slots - 1)), words[i]});
  }
  return Status::OK();
}

Status Transaction::Read(const dsm::GlobalAddress& addr, void* buf, uint64_t len) {
  PDPM_RETURN_IF_ERROR(CheckAddress(addr, len, false));
  TxHost* host = coordinator_->host_;
  TxHost::SegmentRoute route;
  PDPM_RETURN_IF_ERROR(host->RouteSegment(addr.segment, &route));
  std::vector<std::pair<uint32_t, uint64_t>> before, after;
  Status s = ReadVersions(route.primary, addr.segment, addr.offset, len, &before);
  if (s.ok()) s = host->ReadRegion(route.primary, route.key, addr.offset, buf, len);
  if (s.ok()) s = ReadVersions(route.primary, addr.segment, addr.offset, len, &after);
  if (s.code() == StatusCode::kPermissionDenied) {
    // New keys, and versions from a new generation.
    (void)Fail(s);
    return CopyReRegistered(route.primary);
  }
  if (!s.ok()) return Fail(s);
  for (size_t i = 0; i < before.size(); i++) {
    if ((before[i].second & dsm::kTxVersionLock) != 0 || before[i] != after[i]) {
      return Fail(Status::Aborted("conflict: " + addr.ToString() + " is being written"));
    }
    auto [it, fresh] = read_set_.insert({{route.primary, before[i].first}, before[i].second});
    if (!fresh && it->second != before[i].second) {
      return Fail(
          Status::Aborted("conflict: " + addr.ToString() + " changed during the transaction"));
    }
  }
  // The transaction's own writes, in order.
  for (const auto& w : writes_) {
    if (w.kind != dsm::TxEntryKind::kWrite || w.segment != addr.segment) continue;
    uint64_t lo = std::max(w.offset, addr.offset);
    uint64_t hi = std::min(w.offset + w.data.size(), addr.offset + len);
    if (lo < hi) {
      std::memcpy(static_cast<char*>(buf) + (lo - addr.offset), w.data.data() + (lo - w.offset),
                  hi - lo);
    }
  }
  return Status::OK();
}

Status Transaction::ReadVersion(uint32_t server, uint32_t slot, uint64_t* word) {
  TxCoordinator::ServerInfo info;
  PDPM_RETURN_IF_ERROR(coordinator_->Info(server, &info));
  return coordinator_->host_->ReadRegion(server, info.key, uint64_t{slot} * 8, word, 8);
}

namespace {

std::string ObjectKey(const dsm::ObjectId& id) {
  std::string key(dsm::kTxObjectIdSize, '\0');
  std::memcpy(key.data(), &id.hi, 8);
  std::memcpy(key.data() + 8, &id.lo, 8);
  return key;
}

dsm::ObjectId ObjectIdOf(const dsm::TxEntry& e) {
  dsm::ObjectId id;
  std::memcpy(&id.hi, e.data.data(), 8);
  std::memcpy(&id.lo, e.data.data() + 8, 8);
  return id;
}

}  // namespace

Status Transaction::GetObj(const dsm::ObjectId& id, std::string* data) {
  if (finished_) return Status::FailedPrecondition("the transaction is finished");
  std::string key = ObjectKey(id);
  // The transaction's own last put or delete.
  for (auto w = writes_.rbegin(); w != writes_.rend(); ++w) {
    if (!dsm::IsObjectEntry(*w) || w->data.compare(0, key.size(), key) != 0) continue;
    if (w->kind == dsm::TxEntryKind::kDeleteObject) return Status::NotFound("no such object");
    *data = w->data.substr(dsm::kTxObjectIdSize);
    return Status::OK();
  }
  TxHost* host = coordinator_->host_;
  uint32_t table = 0, server = 0;
  Status s = host->RouteObject(id, &table, &server);
  TxCoordinator::ServerInfo info;
  if (s.ok()) s = coordinator_->Info(server, &info);
  if (!s.ok()) return Fail(s);
  uint32_t slot = dsm::TxObjectSlot(id.hi, id.lo, info.slots);
  uint64_t before = 0, after = 0;
  std::string body(key);
  Encoder e(&body);
  e.U64(0);
  e.U64(server::kWholeObject);
  s = ReadVersion(server, slot, &before);
  Status got;
  if (s.ok()) {
    got = host->CallServer(server, server::kReadObj, body, data);
    if (!got.ok() && got.code() != StatusCode::kNotFound) s = got;
  }
  if (s.ok()) s = ReadVersion(server, slot, &after);
  if (s.code() == StatusCode::kPermissionDenied) {
    (void)Fail(s);
    return CopyReRegistered(server);
  }
  if (!s.ok()) return Fail(s);
  if ((before & dsm::kTxVersionLock) != 0 || before != after) {
    return Fail(Status::Aborted("conflict: object being written"));
  }
  auto [it, fresh] = read_set_.insert({{server, slot}, before});
  if (!fresh && it->second != before) {
    return Fail(Status::Aborted("conflict: object changed during the transaction"));
  }
  if (!got.ok()) data->clear();
  return got;
}

Status Transaction::PutObj(const dsm::ObjectId& id, std::string_view data) {
  if (finished_) return Status::FailedPrecondition("the transaction is finished");
  if (data.size() > kMaxTxObject) {
    return Status::TooLarge("a transactional put of " + std::to_string(data.size()) +
                            " bytes: the limit is 1 MiB");
  }
  dsm::TxEntry e;
  e.kind = dsm::TxEntryKind::kPutObject;
  e.data = ObjectKey(id);
  e.data.append(data);
  writes_.push_back(std::move(e));
  return Status::OK();
}

Status Transaction::DelObj(const dsm::ObjectId& id) {
  if (finished_) return Status::FailedPrecondition("the transaction is finished");
  dsm::TxEntry e;
  e.kind = dsm::TxEntryKind::kDeleteObject;
  e.data = ObjectKey(id);
  writes_.push_back(std::move(e));
  return Status::OK();
}

Status Transaction::KvPut(uint32_t table, uint64_t key_hash, std::string_view key,
                          std::string_view value, bool if_absent, uint64_t expire_at_ms) {
  if (if_absent && expire_at_ms != 0) {
    return Status::InvalidArgument("a key-value put if absent with an expiry");
  }
  const dsm::TxEntryKind kind = if_absent           ? dsm::TxEntryKind::kKvPutIfAbsent
                                : expire_at_ms != 0 ? dsm::TxEntryKind::kKvPutExpiring
                                                    : dsm::TxEntryKind::kKvPut;
  return AddKvEntry(dsm::MakeKvEntry(kind, 0, table, key, value, expire_at_ms), key_hash);
}

Status Transaction::KvDelete(uint32_t table, uint64_t key_hash, std::string_view key) {
  return AddKvEntry(dsm::MakeKvEntry(dsm::TxEntryKind::kKvDelete, 0, table, key, {}), key_hash);
}

Status Transaction::KvHashSet(uint32_t table, uint64_t key_hash, std::string_view key,
                              std::string_view field, std::string_view value) {
  return AddKvEntry(dsm::MakeKvHashEntry(dsm::TxEntryKind::kKvHashSet, 0, table, key, field, value),
                    key_hash);
}

Status Transaction::KvHashDelete(uint32_t table, uint64_t key_hash, std::string_view key,
                                 std::string_view field) {
  return AddKvEntry(dsm::MakeKvHashEntry(dsm::TxEntryKind::kKvHashDelete, 0, table, key, field, {}),
                    key_hash);
}

Status Transaction::KvSetExpiry(uint32_t table, uint64_t key_hash, std::string_view key,
                                uint64_t expire_at_ms) {
  return AddKvEntry(
      dsm::MakeKvEntry(dsm::TxEntryKind::kKvSetExpiry, 0, table, key, {}, expire_at_ms), key_hash);
}

Status Transaction::AddKvEntry(dsm::TxEntry entry, uint64_t key_hash) {
  if (finished_) return Status::FailedPrecondition("the transaction is finished");
  if (entry.offset == 0) return Status::InvalidArgument("a key-value entry of table 0");
  if (entry.data.size() > server::kMaxRpcPayload / 2) {
    return Status::TooLarge("a transactional key-value put over 32 MiB");
  }
  PDPM_RETURN_IF_ERROR(
      coordinator_->host_->RouteTable(static_cast<uint32_t>(entry.offset), &entry.segment));
  writes_.push_back(std::move(entry));
  key_hashes_.resize(writes_.size());
  key_hashes_.back() = key_hash;
  return Status::OK();
}

Status Transaction::KvRead(uint32_t server, uint32_t table, uint64_t key_hash, uint64_t word) {
  if (finished_) return Status::FailedPrecondition("the transaction is finished");
  if ((word & dsm::kTxVersionLock) != 0)
    return Fail(Status::Aborted("conflict: a read key is locked"));
  TxCoordinator::ServerInfo info;
  PDPM_RETURN_IF_ERROR(coordinator_->Info(server, &info));
  read_set_.emplace(Slot{server, dsm::TxKvSlot(table, key_hash, info.slots)}, word);
  return Status::OK();
}

void Transaction::AddValidation(std::function<Status()> check) {
  validations_.push_back(std::move(check));
}

Status Transaction::Write(const dsm::GlobalAddress& addr, const void* buf, uint64_t len) {
  PDPM_RETURN_IF_ERROR(CheckAddress(addr, len, true));
  dsm::TxEntry e;
  e.kind = dsm::TxEntryKind::kWrite;
  e.segment = addr.segment;
  e.offset = addr.offset;
  e.data.assign(static_cast<const char*>(buf), len);
  writes_.push_back(std::move(e));
  return Status::OK();
}

Status Transaction::PFree(const dsm::GlobalAddress& addr) {
  PDPM_RETURN_IF_ERROR(CheckAddress(addr, 1, true));
  dsm::TxEntry e;
  e.kind = dsm::TxEntryKind::kFree;
  e.segment = addr.segment;
  e.offset = addr.offset;
  writes_.push_back(std::move(e));
  return Status::OK();
}

Status Transaction::PAllocate(uint64_t size, dsm::GlobalAddress* out) {
  if (finished_) return Status::FailedPrecondition("the transaction is finished");
  if (size == 0) return Status::InvalidArgument("pallocate of 0 bytes");
  uint32_t server = 0;
  PDPM_RETURN_IF_ERROR(coordinator_->host_->PickServer(&server));
  std::string body = coordinator_->Body(id_), reply;
  Encoder(&body).U64(size);
  PDPM_RETURN_IF_ERROR(coordinator_->host_->CallServer(server, server::kTxAlloc, body, &reply));
  Decoder d(Bytes(reply));
  PDPM_RETURN_IF_ERROR(d.Address(out));
  PDPM_RETURN_IF_ERROR(d.Done());
  allocated_[server].push_back(*out);
  return Status::OK();
}

Status Transaction::ObjectTableSegment(const dsm::ObjectId& id, bool create, uint32_t* table,
                                       uint32_t* server, uint32_t* segment) {
  TxHost* host = coordinator_->host_;
  PDPM_RETURN_IF_ERROR(host->RouteObject(id, table, server));
  *segment = 0;
  Status s = host->RouteTable(*table, segment);
  if (s.code() != StatusCode::kNotFound) return s;
  // No segment yet (a delete there finds no object at the LOCK): a put has
  // its owner create it now, so that its backups exist before the LOCK.
  if (!create) return Status::OK();
  std::string body, reply;
  Encoder e(&body);
  e.U64(coordinator_->id_);
  e.U64(id.hi);
  e.U64(id.lo);
  PDPM_RETURN_IF_ERROR(host->CallServer(*server, server::kTxTable, body, &reply));
  Decoder d(Bytes(reply));
  uint64_t created = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&created));
  PDPM_RETURN_IF_ERROR(d.Done());
  *segment = static_cast<uint32_t>(created);
  return host->RefreshMapping();
}

Status Transaction::Commit() {
  if (finished_) return Status::FailedPrecondition("the transaction is finished");
  TxHost* host = coordinator_->host_;
  auto validate = [&](const std::set<Slot>& locked) {
    coordinator_->MaybeStop("validate");
    for (const auto& [slot, version] : read_set_) {
      if (locked.count(slot) != 0) continue;  // checked when locked
      uint64_t now = 0;
      PDPM_RETURN_IF_ERROR(ReadVersion(slot.server, slot.slot, &now));
      if (now != version) return Status::Aborted("conflict: validation found a changed item");
    }
    for (const auto& check : validations_) PDPM_RETURN_IF_ERROR(check());
    return Status::OK();
  };
  coordinator_->RetryUnfinished();
  if (writes_.empty() && allocated_.empty()) {
    Status s = validate({});
    if (s.code() == StatusCode::kPermissionDenied) {
      (void)Fail(s);
      return CopyReRegistered(std::nullopt);
    }
    if (!s.ok()) return Fail(s);
    finished_ = true;
    return Status::OK();
  }
  // Participants: the primary of every written segment (the owner of
  // every written object's table); the decision holder is the primary of
  // the lowest written segment (heap, or an object or pDKVS table's; the
  // owner of a table only when it has no segment yet) and is locked first.
  std::map<uint32_t, std::vector<dsm::TxEntry>> primaries, backups;
  // Each written segment's backups in the mapping (where BACKUP records
  // go): told to its primary, which refuses the LOCK if it knows more.
  std::map<uint32_t, std::vector<uint32_t>> segment_backups;
  uint64_t holder_key = ~0ull;  // is-table << 32 | segment or table: the lowest wins
  uint32_t holder = 0;
  // Every segment (is-table << 32 | segment or table) written or allocated
  // in: the holder keeps the others with its decision, so that it can
  // drop the decision itself once none waits on it, should this
  // coordinator die before truncating it (docs/tx.md).
  std::set<uint64_t> participants;
  std::set<Slot> locked;
  key_hashes_.resize(writes_.size());
  for (size_t i = 0; i < writes_.size(); i++) {
    dsm::TxEntry w = writes_[i];
    uint32_t server = 0;
    uint64_t key = 0;
    TxHost::SegmentRoute route;
    Status s;
    if (dsm::IsObjectEntry(w)) {
      // Logged under its table's segment, at the segment's backups too.
      uint32_t table = 0;
      s = ObjectTableSegment(ObjectIdOf(w), w.kind == dsm::TxEntryKind::kPutObject, &table, &server,
                             &w.segment);
      if (s.ok() && w.segment != 0) s = host->RouteSegment(w.segment, &route);
      key = w.segment != 0 ? w.segment : (1ull << 32) | table;
    } else {
      s = host->RouteSegment(w.segment, &route);
      server = route.primary;
      key = w.segment;
    }
    if (!s.ok()) return Fail(s);
    participants.insert(key);
    if (key < holder_key) {
      holder_key = key;
      holder = server;
    }
    if (w.segment != 0) segment_backups[w.segment] = route.backups;
    primaries[server].push_back(w);
    for (uint32_t b : route.backups) backups[b].push_back(w);
    TxCoordinator::ServerInfo info;
    s = coordinator_->Info(server, &info);
    if (!s.ok()) return Fail(s);
    if (dsm::IsObjectEntry(w)) {
      dsm::ObjectId id = ObjectIdOf(w);
      locked.insert({server, dsm::TxObjectSlot(id.hi, id.lo, info.slots)});
      continue;
    }
    if (dsm::IsKvEntry(w)) {
      locked.insert(
          {server, dsm::TxKvSlot(static_cast<uint32_t>(w.offset), key_hashes_[i], info.slots)});
      continue;
    }
    auto [first, last] = Granules(w.offset, w.kind == dsm::TxEntryKind::kWrite ? w.data.size() : 1);
    for (uint64_t g = first; g <= last; g++) {
      locked.insert({server, dsm::TxVersionSlot(w.segment, g, info.slots)});
    }
  }
  // A server where the transaction only allocated takes part too (its
  // LOCK carries no entries): its blocks follow the outcome. It holds the
  // decision only when nothing is written: the holder segment must be a
  // written one, whose backups get the decision with its commit.
  // Its LOCK names them, and so do BACKUP records at their segments'
  // backups, so that a promoted backup keeps them when it commits.
  const bool writes = !writes_.empty();
  for (const auto& [server, blocks] : allocated_) {
    std::vector<dsm::TxEntry>& entries = primaries[server];
    for (const auto& a : blocks) {
      if (!writes && a.segment < holder_key) {
        holder_key = a.segment;
        holder = server;
      }
      TxHost::SegmentRoute route;
      Status s = host->RouteSegment(a.segment, &route);
      if (!s.ok()) return Fail(s);
      participants.insert(a.segment);
      dsm::TxEntry e;
      e.kind = dsm::TxEntryKind::kAllocated;
      e.segment = a.segment;
      e.offset = a.offset;
      segment_backups[a.segment] = route.backups;
      for (uint32_t b : route.backups) backups[b].push_back(e);
      entries.push_back(std::move(e));
    }
  }
  uint32_t holder_segment = static_cast<uint32_t>(holder_key);
  uint64_t holder_is_table = holder_key >> 32;
  participants.erase(holder_key);
  std::vector<dsm::TxEntry> participant_entries;
  for (uint64_t p : participants) {
    dsm::TxEntry e;
    e.kind = dsm::TxEntryKind::kParticipant;
    e.segment = static_cast<uint32_t>(p);
    e.offset = p >> 32;
    participant_entries.push_back(std::move(e));
  }
  std::vector<uint32_t> order{holder};
  for (const auto& [server, entries] : primaries) {
    if (server != holder) order.push_back(server);
  }
  auto lock_request = [&](uint32_t server, uint64_t role, const std::vector<dsm::TxEntry>& entries,
                          std::vector<uint64_t>* truncations) {
    std::string body = coordinator_->Body(id_);
    Encoder e(&body);
    const bool primary = role == dsm::kTxRolePrimary;
    bool is_holder = primary && server == holder;
    // The holder, and a backup of the holder segment, keep the list.
    bool lists_participants =
        is_holder || (!primary && holder_is_table == 0 &&
                      std::any_of(entries.begin(), entries.end(), [&](const dsm::TxEntry& w) {
                        return w.segment == holder_segment;
                      }));
    e.U64(uint64_t{holder_segment} | (role << 32) | (uint64_t{is_holder} << 40) |
          (holder_is_table << 41) | (primary ? dsm::kTxLockListsBackups : 0) |
          (lists_participants ? dsm::kTxLockListsParticipants : 0));
    std::vector<std::pair<uint32_t, uint64_t>> expect;
    if (primary) {
      for (const auto& [slot, version] : read_set_) {
        if (slot.server == server) expect.push_back({slot.slot, version});
      }
    }
    e.U64(expect.size() | (uint64_t{truncations->size()} << 32));
    for (const auto& [slot, version] : expect) {
      e.U64(slot);
      e.U64(version);
    }
    for (uint64_t t : *truncations) e.U64(t);
    if (primary) {
      std::vector<uint64_t> listed;
      for (const auto& w : entries) {
        auto it = segment_backups.find(w.segment);
        if (it == segment_backups.end()) continue;
        for (uint32_t b : it->second) listed.push_back(w.segment | (uint64_t{b} << 32));
      }
      std::sort(listed.begin(), listed.end());
      listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
      e.U64(listed.size());
      for (uint64_t v : listed) e.U64(v);
    }
    dsm::EncodeTxEntries(entries, &body);
    if (lists_participants) dsm::EncodeTxEntries(participant_entries, &body);
    std::string reply;
    Status s = host->CallServer(server, server::kTxLock, body, &reply);
    if (!s.ok()) {
      for (uint64_t t : *truncations) coordinator_->AddTruncation(server, t);
    }
    return s;
  };
  // LOCK.
  std::vector<uint32_t> attempted;
  for (uint32_t server : order) {
    std::vector<uint64_t> truncations = coordinator_->TakeTruncations(server);
    attempted.push_back(server);
    Status s = lock_request(server, dsm::kTxRolePrimary, primaries[server], &truncations);
    if (s.code() == StatusCode::kFailedPrecondition) {
      // A segment's backups, or a table's segment, changed since the
      // mapping was read: run the transaction again on a fresh one.
      AbortAt(attempted);
      (void)host->RefreshMapping();
      return Fail(Status::Aborted(s.message()));
    }
    if (!s.ok()) {
      AbortAt(attempted);
      return Fail(s);
    }
    if (server == holder) coordinator_->MaybeCrash("lock-holder");
  }
  coordinator_->MaybeCrash("lock");
  coordinator_->MaybeStop("lock");
  // VALIDATE.
  Status s = validate(locked);
  if (!s.ok()) {
    AbortAt(attempted);
    if (s.code() == StatusCode::kPermissionDenied) {
      (void)Fail(s);
      return CopyReRegistered(std::nullopt);
    }
    return Fail(s);
  }
  coordinator_->MaybeCrash("validate");
  // COMMIT-BACKUP: the values durable on every backup before deciding.
  for (const auto& [server, entries] : backups) {
    // Truncations ride on BACKUP LOCKs too: a server that is only ever a
    // backup of what this coordinator writes keeps the BACKUP records of
    // the holder segment until truncated, and would otherwise never hear
    // of it (its log area filled: docs/tx.md "Log format").
    std::vector<uint64_t> truncations = coordinator_->TakeTruncations(server);
    attempted.push_back(server);
    s = lock_request(server, dsm::kTxRoleBackup, entries, &truncations);
    if (!s.ok()) {
      AbortAt(attempted);
      return Fail(s);
    }
  }
  coordinator_->MaybeCrash("backup");
  // The decision, durable at the holder (which applies its part at once).
  std::string commit_body = coordinator_->Body(id_), reply;
  Encoder(&commit_body).U64(1);
  s = host->CallServer(holder, server::kTxCommit, commit_body, &reply);
  if (s.code() == StatusCode::kAborted) {
    AbortAt(attempted);
    return Fail(s);
  }
  if (!s.ok()) {
    // The holder may or may not have decided: the participants resolve it
    // with the holder, all or nothing. Allocations stay (they may be used).
    finished_ = true;
    outcome_unknown_ = true;
    return Status::Unavailable("commit outcome unknown (resolved by the participants): " +
                               std::string(s.message()));
  }
  coordinator_->MaybeCrash("decide");
  // COMMIT: backups first (the holder segment's carry the decision), then
  // the other primaries.
  commit_body = coordinator_->Body(id_);
  Encoder(&commit_body).U64(0);
  TxCoordinator::Unfinished done;
  done.tx = id_;
  done.acked.push_back(holder);
  auto commit_at = [&](uint32_t server) {
    bool ok = host->CallServer(server, server::kTxCommit, commit_body, &reply).ok();
    (ok ? done.acked : done.missing).push_back(server);
  };
  for (const auto& [server, entries] : backups) commit_at(server);
  coordinator_->MaybeStop("commit-backup");
  for (size_t i = 1; i < order.size(); i++) {
    commit_at(order[i]);
    coordinator_->MaybeCrash("commit-one");
  }
  coordinator_->MaybeCrash("commit");
  // Lazy truncation: sent with the next LOCK to each participant. The
  // holder's record answers the others until every one has applied.
  if (done.missing.empty()) {
    for (uint32_t server : done.acked) coordinator_->AddTruncation(server, id_);
  } else {
    coordinator_->AddUnfinished(std::move(done));
  }
  finished_ = true;
  allocated_.clear();
  return Status::OK();
}

}  // namespace pdpm::client
