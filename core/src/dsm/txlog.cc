#include "dsm/txlog.h"

#include <cstring>
#include <map>
#include <tuple>

#include "common/crc32c.h"

namespace pdpm::dsm {
namespace {

constexpr uint64_t kStartOffsetBits = 24;
constexpr uint64_t kMaxAreaSize = (1ull << kStartOffsetBits) * kTxRecordAlign;
constexpr uint64_t kSeqMask = (1ull << (64 - kStartOffsetBits)) - 1;

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}

uint64_t Pad(uint64_t n) {
  return (n + kTxRecordAlign - 1) / kTxRecordAlign * kTxRecordAlign;
}

uint32_t HeaderCrc(const char* area) {
  return Crc32c(area, 24);
}

uint32_t RecordCrc(const char* rec, uint32_t body_len) {
  uint32_t crc = Crc32c(rec, 8);          // magic, version, kind, reserved
  crc = Crc32cExtend(crc, rec + 16, 24);  // seq .. body length
  return Crc32cExtend(crc, rec + kTxRecordHeaderSize, body_len);
}

// The record at `pos` if intact and of sequence `seq`.
bool ReadRecord(const char* base, uint64_t size, uint64_t pos, uint64_t seq, TxRecord* r) {
  if (pos + kTxRecordHeaderSize > size) return false;
  const char* p = base + pos;
  const auto version = static_cast<uint8_t>(p[4]);
  if (Load<uint32_t>(p) != kTxRecordMagic || version < kTxRecordVersionOldest ||
      version > kTxRecordVersion) {
    return false;
  }
  uint32_t body_len = Load<uint32_t>(p + 36);
  if (body_len > size - pos - kTxRecordHeaderSize) return false;
  if (Load<uint32_t>(p + 40) != RecordCrc(p, body_len)) return false;
  uint64_t got_seq = Load<uint64_t>(p + 16);
  if (seq != 0 && (got_seq & kSeqMask) != (seq & kSeqMask)) return false;
  r->offset = pos;
  r->size = Pad(kTxRecordHeaderSize + body_len);
  r->kind = static_cast<TxRecordKind>(p[5]);
  r->state = static_cast<TxState>(Load<uint64_t>(p + 8));
  r->seq = got_seq;
  r->tx = Load<uint64_t>(p + 24);
  r->holder_segment = Load<uint32_t>(p + 32);
  r->flags = Load<uint16_t>(p + 6);
  r->body.assign(p + kTxRecordHeaderSize, body_len);
  return true;
}

// Follows the chain from the start word. `wrapped` tells whether it went
// past the end; `next_seq` and `tail` where the next record goes.
void ScanChain(const char* base, uint64_t size, uint64_t start_word, std::vector<TxRecord>* out,
               bool* wrapped, uint64_t* tail, uint64_t* next_seq) {
  uint64_t pos = (start_word & ((1ull << kStartOffsetBits) - 1)) * kTxRecordAlign;
  uint64_t seq = start_word >> kStartOffsetBits;
  *wrapped = false;
  if (pos < kTxAreaHeaderSize || pos > size) pos = kTxAreaHeaderSize;
  for (uint64_t steps = 0; steps <= size / kTxRecordAlign; steps++) {
    if (pos == size) {
      pos = kTxAreaHeaderSize;
      *wrapped = true;
    }
    TxRecord r;
    if (!ReadRecord(base, size, pos, seq, &r)) break;
    seq = r.seq + 1;
    if (r.kind == TxRecordKind::kWrap) {
      pos = kTxAreaHeaderSize;
      *wrapped = true;
      continue;
    }
    pos += r.size;
    out->push_back(std::move(r));
  }
  *tail = pos;
  *next_seq = seq;
}

// Which records of a chain a later moved copy supersedes (the same kind,
// tx, holder and body; docs/tx.md "Log format").
std::vector<bool> Superseded(const std::vector<TxRecord>& chain) {
  std::vector<bool> out(chain.size(), false);
  std::map<std::tuple<TxRecordKind, uint64_t, uint32_t, std::string_view>, size_t> last;
  for (size_t i = 0; i < chain.size(); i++) {
    const TxRecord& r = chain[i];
    auto key = std::make_tuple(r.kind, r.tx, r.holder_segment, std::string_view(r.body));
    auto it = last.find(key);
    if (it != last.end() && (r.flags & kTxRecordMoved) != 0) out[it->second] = true;
    last[key] = i;
  }
  return out;
}

// One above every intact record anywhere in the area (for a new owner).
uint64_t SeqAboveAll(const char* base, uint64_t size) {
  uint64_t max = 0;
  for (uint64_t pos = kTxAreaHeaderSize; pos + kTxRecordHeaderSize <= size; pos += kTxRecordAlign) {
    TxRecord r;
    if (Load<uint32_t>(base + pos) == kTxRecordMagic && ReadRecord(base, size, pos, 0, &r)) {
      max = std::max(max, r.seq);
    }
  }
  return max + 1;
}

}  // namespace

std::string_view TxStateName(TxState s) {
  switch (s) {
    case TxState::kLocked: return "locked";
    case TxState::kCommitted: return "committed";
    case TxState::kApplied: return "applied";
    case TxState::kAborted: return "aborted";
    case TxState::kTruncated: return "truncated";
  }
  return "unknown";
}

bool IsObjectEntry(const TxEntry& e) {
  return e.kind == TxEntryKind::kPutObject || e.kind == TxEntryKind::kDeleteObject;
}

bool IsKvEntry(const TxEntry& e) {
  switch (e.kind) {
    case TxEntryKind::kKvPut:
    case TxEntryKind::kKvPutIfAbsent:
    case TxEntryKind::kKvPutExpiring:
    case TxEntryKind::kKvDelete:
    case TxEntryKind::kKvHashSet:
    case TxEntryKind::kKvHashDelete:
    case TxEntryKind::kKvSetExpiry: return true;
    default: return false;
  }
}

namespace {

bool IsKvHashEntry(TxEntryKind kind) {
  return kind == TxEntryKind::kKvHashSet || kind == TxEntryKind::kKvHashDelete;
}

bool KvEntryHasExpiry(TxEntryKind kind) {
  return kind == TxEntryKind::kKvPutExpiring || kind == TxEntryKind::kKvSetExpiry;
}

bool KvEntryHasValue(TxEntryKind kind) {
  return kind != TxEntryKind::kKvDelete && kind != TxEntryKind::kKvSetExpiry &&
         kind != TxEntryKind::kKvHashDelete;
}

// Where a pDKVS entry's key starts: after the key length and, for an
// expiring put or an expiry change, the expiry time, or for a hash entry
// the field length.
size_t KvKeyStart(TxEntryKind kind) {
  return KvEntryHasExpiry(kind) ? 12 : IsKvHashEntry(kind) ? 8 : 4;
}

// The length of a hash entry's field (0 for other entries).
size_t KvFieldLength(const TxEntry& e) {
  return IsKvHashEntry(e.kind) ? Load<uint32_t>(e.data.data() + 4) : 0;
}

// A pDKVS entry of any kind: the key length, then the expiry time or the
// field length where the kind has one, the key, the field, the value.
TxEntry MakeAnyKvEntry(TxEntryKind kind, uint32_t segment, uint32_t table, std::string_view key,
                       std::string_view field, std::string_view value, uint64_t expire_at_ms) {
  TxEntry e;
  e.kind = kind;
  e.segment = segment;
  e.offset = table;
  e.data.resize(KvKeyStart(kind));
  Store<uint32_t>(e.data.data(), static_cast<uint32_t>(key.size()));
  if (KvEntryHasExpiry(kind)) Store<uint64_t>(e.data.data() + 4, expire_at_ms);
  if (IsKvHashEntry(kind)) Store<uint32_t>(e.data.data() + 4, static_cast<uint32_t>(field.size()));
  e.data.append(key);
  e.data.append(field);
  if (KvEntryHasValue(kind)) e.data.append(value);
  return e;
}

}  // namespace

TxEntry MakeKvEntry(TxEntryKind kind, uint32_t segment, uint32_t table, std::string_view key,
                    std::string_view value, uint64_t expire_at_ms) {
  return MakeAnyKvEntry(kind, segment, table, key, {}, value, expire_at_ms);
}

TxEntry MakeKvHashEntry(TxEntryKind kind, uint32_t segment, uint32_t table, std::string_view key,
                        std::string_view field, std::string_view value) {
  return MakeAnyKvEntry(kind, segment, table, key, field, value, 0);
}

std::string_view KvEntryKey(const TxEntry& e) {
  return std::string_view(e.data).substr(KvKeyStart(e.kind), Load<uint32_t>(e.data.data()));
}

std::string_view KvEntryField(const TxEntry& e) {
  return std::string_view(e.data).substr(KvKeyStart(e.kind) + Load<uint32_t>(e.data.data()),
                                         KvFieldLength(e));
}

std::string_view KvEntryValue(const TxEntry& e) {
  return std::string_view(e.data).substr(KvKeyStart(e.kind) + Load<uint32_t>(e.data.data()) +
                                         KvFieldLength(e));
}

uint64_t KvEntryExpiry(const TxEntry& e) {
  return KvEntryHasExpiry(e.kind) ? Load<uint64_t>(e.data.data() + 4) : 0;
}

void EncodeTxEntries(const std::vector<TxEntry>& entries, std::string* out) {
  for (const auto& e : entries) {
    char h[24] = {};
    h[0] = static_cast<char>(e.kind);
    Store<uint32_t>(h + 4, e.segment);
    Store<uint64_t>(h + 8, e.offset);
    Store<uint32_t>(h + 16, static_cast<uint32_t>(e.data.size()));
    out->append(h, sizeof(h));
    out->append(e.data);
  }
}

Status DecodeTxEntries(std::string_view body, bool on_pm, std::vector<TxEntry>* out) {
  auto bad = [&](const char* what) {
    std::string m = std::string("transaction entries: ") + what;
    return on_pm ? Status::Corruption(m) : Status::InvalidArgument(m);
  };
  out->clear();
  size_t pos = 0;
  while (pos < body.size()) {
    if (body.size() - pos < 24) return bad("truncated entry header");
    const char* h = body.data() + pos;
    TxEntry e;
    e.kind = static_cast<TxEntryKind>(h[0]);
    e.segment = Load<uint32_t>(h + 4);
    e.offset = Load<uint64_t>(h + 8);
    uint32_t len = Load<uint32_t>(h + 16);
    pos += 24;
    if (len > body.size() - pos) return bad("entry data past the end");
    switch (e.kind) {
      case TxEntryKind::kWrite:
        if (len == 0) return bad("a write of 0 bytes");
        break;
      case TxEntryKind::kFree:
      case TxEntryKind::kAllocated:
        if (len != 0) return bad("a free or an allocated block with data");
        break;
      case TxEntryKind::kParticipant:
        if (len != 0 || e.offset > 1) return bad("a participant with data or a bad table flag");
        break;
      case TxEntryKind::kPutObject:
        if (len < kTxObjectIdSize) return bad("a put without an object id");
        break;
      case TxEntryKind::kDeleteObject:
        if (len != kTxObjectIdSize) return bad("a delete without an object id");
        break;
      case TxEntryKind::kKvPut:
      case TxEntryKind::kKvPutIfAbsent:
      case TxEntryKind::kKvPutExpiring:
      case TxEntryKind::kKvDelete:
      case TxEntryKind::kKvSetExpiry:
      case TxEntryKind::kKvHashSet:
      case TxEntryKind::kKvHashDelete: {
        const uint32_t head = static_cast<uint32_t>(KvKeyStart(e.kind));
        if (len < head) return bad("a key-value entry with a bad key length");
        // The key, and a hash entry's field, inside the entry.
        const uint64_t named = uint64_t{Load<uint32_t>(body.data() + pos)} +
                               (IsKvHashEntry(e.kind) ? Load<uint32_t>(body.data() + pos + 4) : 0);
        if (named > len - head) return bad("a key-value entry with a bad key length");
        if (!KvEntryHasValue(e.kind) && named != len - head) {
          return bad("a key-value delete or expiry change with a value");
        }
        if (e.kind == TxEntryKind::kKvPutExpiring && Load<uint64_t>(body.data() + pos + 4) == 0) {
          return bad("an expiring key-value put without an expiry time");
        }
        if (e.offset == 0 || e.offset > UINT32_MAX) return bad("a key-value entry of no table");
        break;
      }
      default: return bad("unknown entry kind");
    }
    e.data.assign(body.data() + pos, len);
    pos += len;
    out->push_back(std::move(e));
  }
  return Status::OK();
}

void TxLogArea::PersistStart(uint64_t offset, uint64_t seq) {
  if (offset == size_) offset = kTxAreaHeaderSize;
  Store<uint64_t>(base_ + 24, ((seq & kSeqMask) << kStartOffsetBits) | (offset / kTxRecordAlign));
  persist_(base_ + 24, 8);
  start_ = offset;
}

Status TxLogArea::Open(std::vector<TxRecord>* records) {
  records->clear();
  live_.clear();
  if (size_ > kMaxAreaSize || size_ % kTxRecordAlign != 0 || size_ < 2 * kTxRecordAlign) {
    return Status::InvalidArgument("transaction log area of " + std::to_string(size_) + " bytes");
  }
  std::string where = "transaction log area " + std::to_string(index_);
  if (Load<uint64_t>(base_) != kTxAreaMagic) {
    coordinator_ = 0;  // never assigned, or a torn assignment: nothing live
    next_seq_ = SeqAboveAll(base_, size_);
    start_ = tail_ = kTxAreaHeaderSize;
    return Status::OK();
  }
  if (Load<uint32_t>(base_ + 8) != kTxLogVersion) {
    return Status::Corruption(where + ": unknown version");
  }
  if (Load<uint32_t>(base_ + 12) != index_ || Load<uint32_t>(base_ + 32) != HeaderCrc(base_)) {
    return Status::Corruption(where + ": damaged header");
  }
  coordinator_ = Load<uint64_t>(base_ + 16);
  uint64_t start_word = Load<uint64_t>(base_ + 24);
  start_ = (start_word & ((1ull << kStartOffsetBits) - 1)) * kTxRecordAlign;
  if (start_ < kTxAreaHeaderSize || start_ >= size_) {
    return Status::Corruption(where + ": start outside the area");
  }
  std::vector<TxRecord> chain;
  ScanChain(base_, size_, start_word, &chain, &wrapped_, &tail_, &next_seq_);
  // A superseded record still takes its place in the ring until trimmed.
  std::vector<bool> superseded = Superseded(chain);
  for (size_t i = 0; i < chain.size(); i++) {
    live_.push_back({chain[i].offset, chain[i].seq, chain[i].size});
    if (!superseded[i]) records->push_back(std::move(chain[i]));
  }
  if (live_.empty()) wrapped_ = false;
  return Status::OK();
}

Status TxLogArea::Assign(uint64_t coordinator) {
  if (!live_.empty()) return Status::FailedPrecondition("transaction log area in use");
  if (Load<uint64_t>(base_) == kTxAreaMagic)
    next_seq_ = std::max(next_seq_, SeqAboveAll(base_, size_));
  Store<uint64_t>(base_, 0);
  persist_(base_, 8);
  Store<uint32_t>(base_ + 8, kTxLogVersion);
  Store<uint32_t>(base_ + 12, index_);
  Store<uint64_t>(base_ + 16, coordinator);
  Store<uint32_t>(base_ + 32, 0);
  start_ = tail_ = kTxAreaHeaderSize;
  wrapped_ = false;
  Store<uint64_t>(base_ + 24, ((next_seq_ & kSeqMask) << kStartOffsetBits) |
                                  (kTxAreaHeaderSize / kTxRecordAlign));
  // The crc covers the magic as it will be.
  Store<uint64_t>(base_, kTxAreaMagic);
  uint32_t crc = HeaderCrc(base_);
  Store<uint64_t>(base_, 0);
  Store<uint32_t>(base_ + 32, crc);
  persist_(base_, kTxAreaHeaderSize);
  Store<uint64_t>(base_, kTxAreaMagic);
  persist_(base_, 8);
  coordinator_ = coordinator;
  return Status::OK();
}

Status TxLogArea::Append(TxRecordKind kind, uint16_t flags, uint64_t tx, uint32_t holder_segment,
                         std::string_view body, TxRecord* out) {
  return AppendRecord(kind, flags, TxState::kLocked, tx, holder_segment, body, out);
}

bool TxLogArea::Fits(uint64_t need) const {
  if (live_.empty()) return need <= size_ - kTxAreaHeaderSize;
  if (wrapped_) return tail_ + need <= start_;
  return tail_ + need <= size_ || kTxAreaHeaderSize + need <= start_;
}

uint64_t TxLogArea::FreeBytes() const {
  if (live_.empty()) return size_ - kTxAreaHeaderSize;
  if (wrapped_) return start_ - tail_;
  return (size_ - tail_) + (start_ - kTxAreaHeaderSize);
}

Status TxLogArea::AppendRecord(TxRecordKind kind, uint16_t flags, TxState state, uint64_t tx,
                               uint32_t holder_segment, std::string_view body, TxRecord* out) {
  uint64_t need = Pad(kTxRecordHeaderSize + body.size());
  if (need > size_ - kTxAreaHeaderSize - kTxRecordAlign) {
    return Status::TooLarge("a transaction record of " + std::to_string(need) +
                            " bytes: more than a log area holds");
  }
  if (live_.empty()) {
    // Nothing live: start afresh at the tail.
    wrapped_ = false;
    if (tail_ + need > size_) tail_ = kTxAreaHeaderSize;
    PersistStart(tail_, next_seq_);
  }
  uint64_t pos = tail_;
  auto write_header = [&](uint64_t at, TxRecordKind k, uint16_t f, TxState st, uint32_t body_len) {
    char* p = base_ + at;
    std::memset(p, 0, kTxRecordHeaderSize);
    Store<uint32_t>(p, kTxRecordMagic);
    p[4] = static_cast<char>(kTxRecordVersion);
    p[5] = static_cast<char>(k);
    Store<uint16_t>(p + 6, f);
    Store<uint64_t>(p + 8, static_cast<uint64_t>(st));
    Store<uint64_t>(p + 16, next_seq_);
    Store<uint64_t>(p + 24, tx);
    Store<uint32_t>(p + 32, holder_segment);
    Store<uint32_t>(p + 36, body_len);
  };
  if (!wrapped_ && pos + need > size_) {
    if (kTxAreaHeaderSize + need > start_) {
      return Status::ResourceExhausted("transaction log area " + std::to_string(index_) + " full");
    }
    if (pos < size_) {
      write_header(pos, TxRecordKind::kWrap, 0, TxState::kLocked, 0);
      Store<uint32_t>(base_ + pos + 40, RecordCrc(base_ + pos, 0));
      persist_(base_ + pos, kTxRecordHeaderSize);
      next_seq_++;
    }
    pos = kTxAreaHeaderSize;
    wrapped_ = true;
  } else if (wrapped_ && pos + need > start_) {
    return Status::ResourceExhausted("transaction log area " + std::to_string(index_) + " full");
  }
  write_header(pos, kind, flags, state, static_cast<uint32_t>(body.size()));
  std::memcpy(base_ + pos + kTxRecordHeaderSize, body.data(), body.size());
  Store<uint32_t>(base_ + pos + 40, RecordCrc(base_ + pos, static_cast<uint32_t>(body.size())));
  persist_(base_ + pos, kTxRecordHeaderSize + body.size());
  out->offset = pos;
  out->size = need;
  out->kind = kind;
  out->state = state;
  out->seq = next_seq_;
  out->tx = tx;
  out->holder_segment = holder_segment;
  out->flags = flags;
  live_.push_back({pos, next_seq_, need});
  next_seq_++;
  tail_ = pos + need;
  return Status::OK();
}

void TxLogArea::Compact(uint64_t body_size, const Owner& owner) {
  auto trim = [&] {
    Trim([&](uint64_t offset) {
      if (!owner.done(offset)) return false;
      owner.dropped(offset);
      return true;
    });
  };
  trim();
  const uint64_t want = Pad(kTxRecordHeaderSize + body_size) + (size_ - kTxAreaHeaderSize) / 4;
  for (size_t moves = 0, lap = live_.size(); moves < lap && !live_.empty(); moves++) {
    if (FreeBytes() >= want) return;
    // Worth it only when some record behind the head is done: moving live
    // ones past live ones frees nothing.
    bool garbage = false;
    for (size_t i = 1; i < live_.size() && !garbage; i++) garbage = owner.done(live_[i].offset);
    if (!garbage) return;
    const Live head = live_.front();
    if (!owner.movable(head.offset) || !Fits(head.size)) return;
    // The record as it is on PM (it is intact: it was read or written so),
    // copied with its current state; the copy never overlaps it.
    const char* p = base_ + head.offset;
    const uint32_t body_len = Load<uint32_t>(p + 36);
    TxRecord copy;
    Status s = AppendRecord(static_cast<TxRecordKind>(p[5]),
                            static_cast<uint16_t>(Load<uint16_t>(p + 6) | kTxRecordMoved),
                            static_cast<TxState>(Load<uint64_t>(p + 8)), Load<uint64_t>(p + 24),
                            Load<uint32_t>(p + 32),
                            std::string_view(p + kTxRecordHeaderSize, body_len), &copy);
    if (!s.ok()) return;
    owner.moved(head.offset, copy);
    trim();
  }
}

void TxLogArea::SetState(const TxRecord& r, TxState s) {
  Store<uint64_t>(base_ + r.offset + 8, static_cast<uint64_t>(s));
  persist_(base_ + r.offset + 8, 8);
}

void TxLogArea::Trim(const std::function<bool(uint64_t offset)>& terminal) {
  bool moved = false;
  while (!live_.empty() && terminal(live_.front().offset)) {
    live_.pop_front();
    moved = true;
  }
  if (!moved) return;
  if (live_.empty()) {
    wrapped_ = false;
    PersistStart(tail_, next_seq_);
    tail_ = start_;
  } else {
    if (live_.front().offset < start_) wrapped_ = false;  // the head wrapped too
    PersistStart(live_.front().offset, live_.front().seq);
  }
}

void CheckTxLogRegion(const char* base, uint64_t area_size, uint32_t area_count, TxLogCheck* out) {
  constexpr size_t kMaxInDoubtListed = 16;
  for (uint32_t i = 0; i < area_count; i++) {
    const char* a = base + uint64_t{i} * area_size;
    std::string where = "transaction log area " + std::to_string(i) + ": ";
    if (Load<uint64_t>(a) != kTxAreaMagic) continue;
    if (Load<uint32_t>(a + 8) != kTxLogVersion || Load<uint32_t>(a + 12) != i ||
        Load<uint32_t>(a + 32) != HeaderCrc(a)) {
      out->violations.push_back(where + "damaged header");
      continue;
    }
    out->assigned_areas++;
    uint64_t start_word = Load<uint64_t>(a + 24);
    uint64_t start = (start_word & ((1ull << kStartOffsetBits) - 1)) * kTxRecordAlign;
    if (start < kTxAreaHeaderSize || start >= area_size) {
      out->violations.push_back(where + "start outside the area");
      continue;
    }
    std::vector<TxRecord> records;
    bool wrapped;
    uint64_t tail, next_seq;
    ScanChain(a, area_size, start_word, &records, &wrapped, &tail, &next_seq);
    std::vector<bool> superseded = Superseded(records);
    for (size_t k = 0; k < records.size(); k++) {
      if (superseded[k]) continue;
      const TxRecord& r = records[k];
      std::string rw = where + "record " + std::to_string(r.seq) + ": ";
      if (r.kind != TxRecordKind::kLock && r.kind != TxRecordKind::kBackup &&
          r.kind != TxRecordKind::kAlloc && r.kind != TxRecordKind::kBackupAlloc) {
        out->violations.push_back(rw + "unknown kind");
        continue;
      }
      if (r.state < TxState::kLocked || r.state > TxState::kTruncated) {
        out->violations.push_back(rw + "unknown state");
        continue;
      }
      std::vector<TxEntry> entries;
      Status s = DecodeTxEntries(r.body, true, &entries);
      if (!s.ok()) out->violations.push_back(rw + std::string(s.message()));
      bool participants = false;
      for (const auto& e : entries) participants |= e.kind == TxEntryKind::kParticipant;
      if (participants && (r.flags & kTxRecordListsParticipants) == 0) {
        out->violations.push_back(rw + "participant entries in a record not flagged so");
      }
      if (r.state != TxState::kTruncated) out->live_records++;
      if (r.state == TxState::kLocked || r.state == TxState::kCommitted) {
        out->in_doubt++;
        if (out->in_doubt_records.size() < kMaxInDoubtListed) {
          out->in_doubt_records.push_back(
              rw + "kind " + std::to_string(static_cast<int>(r.kind)) + ", " +
              std::string(TxStateName(r.state)) + ", tx " + std::to_string(r.tx) + ", holder " +
              ((r.flags & kTxRecordHolderIsTable) != 0 ? "table " : "segment ") +
              std::to_string(r.holder_segment) +
              ((r.flags & kTxRecordHolder) != 0 ? " (this is the holder)" : ""));
        }
      }
    }
  }
}

}  // namespace pdpm::dsm
