// The transaction log of a participant (docs/tx.md): per-coordinator log
// areas in PM, each a ring of self-describing, checksummed records, and the
// encoding of a transaction's write set, shared by the wire (the LOCK
// request) and the PM record.
//
// Format version 1. A log region is `area_count` areas of `area_size`
// bytes. Area header (64 B, persisted when a coordinator is assigned, its
// `start` word moved by one persisted 8-byte store):
//   magic "PDPMTXAR" u64 | version u32 | index u32 | coordinator u64 |
//   start u64 (seq << 24 | offset / 64 of the oldest live record) |
//   crc32c u32 (of magic..coordinator) | reserved
// Assigning an area clears the magic first and stores it last, so a torn
// assignment leaves an unassigned area; its records were all terminal.
// Records follow from offset 64, each padded to 64 bytes:
//   magic "PTXR" u32 | version u8 | kind u8 |
//   flags u16 (1: at the decision holder, 2: the holder is named by a table,
//   4: moved: a copy of an earlier record, which it supersedes) |
//   state u64 (changed in place by one persisted store) |
//   seq u64 | tx u64 | holder segment (or table) u32 | body length u32 |
//   crc32c u32 (of magic..body length, state excluded, then the body) |
//   reserved u32 | body
// A wrap record (kind kWrap, no body) sends the reader back to offset 64;
// so does reaching the end of the area. Reading starts at `start` and
// stops at the first record that is not intact or whose seq is not the
// previous one plus one: a torn append is thus never read back, and older
// records beyond the tail (lower seq) are ignored. Sequence numbers only
// grow in an area: a new assignment starts above every intact record.
//
// Body of a LOCK or BACKUP record (and of the LOCK request), or of an ALLOC
// or BACKUP-ALLOC record (one free entry naming the block): entries
//   kind u8 (1 write, 2 free, 3 put object, 4 delete object, 5 pDKVS put,
//   6 pDKVS put if absent, 7 allocated, 8 pDKVS put with an expiry,
//   9 pDKVS delete, 10 participant) | reserved 3 |
//   segment u32 | offset u64 | length u32 | reserved u32 | data (length bytes)
// Writes carry the bytes; a free none; object entries have segment and
// offset 0 and data = object id hi u64 | lo u64 | content (puts only);
// pDKVS entries name the table segment (segment) and the table (offset),
// data = key length u32 | key | value; an allocated entry names a block the
// transaction allocated (kept if it commits), no data; a participant entry
// (only in a record flagged kTxRecordListsParticipants: the decision
// holder's, and its segment's BACKUP records) names another segment the
// transaction wrote (offset 0), or a table without a segment (offset 1),
// no data.
//
// A record that stays live while those behind it are done (its commit
// pending at a slow or absent party) does not hold the ring: when the area
// runs short, the oldest live records are copied to the tail (flag moved,
// the same kind, state, tx and body) and the head trimmed past them. A
// crash between the copy and the trim leaves both: a reader keeps the
// moved copy (the later one) and skips the original.
//
// Record versions: 6 (written now) adds the participant entry kind and the
// lists-participants flag; 5 the moved flag; 4 the expiring
// pDKVS put and the pDKVS delete; 3 the BACKUP-ALLOC record kind and the
// allocated entry kind; 2 the pDKVS entry kinds; records of versions 1 to
// 5 are read as before.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pdpm::dsm {

inline constexpr uint32_t kTxLogVersion = 1;  // of the area header
// Of a record: 7 added the pDKVS hash and expiry entries (kinds 11 to 13),
// 6 participant entries (kind 10) and the lists-participants flag, 5 the moved flag, 4 the expiring
// pDKVS put and the pDKVS delete (entry kinds 8, 9), 3 BACKUP-ALLOC records and allocated entries,
// 2 the pDKVS entry kinds; 1 to 6 are still read.
inline constexpr uint8_t kTxRecordVersion = 7;
inline constexpr uint8_t kTxRecordVersionOldest = 1;
inline constexpr uint64_t kTxAreaMagic = 0x524158544d504450ull;  // "PDPMTXAR"
inline constexpr uint32_t kTxRecordMagic = 0x52585450;           // "PTXR"
inline constexpr uint64_t kTxAreaHeaderSize = 64;
inline constexpr uint64_t kTxRecordHeaderSize = 48;
inline constexpr uint64_t kTxRecordAlign = 64;
// Bytes of heap data one version word covers.
inline constexpr uint64_t kTxGranule = 64;
// A version word: bit 63 the lock, bits 62..40 the server's start count,
// bits 39..0 the commits.
inline constexpr uint64_t kTxVersionLock = 1ull << 63;
inline constexpr int kTxGenerationShift = 40;
// Outcomes in a RESOLVE reply; roles in a LOCK request (docs/tx.md).
inline constexpr uint64_t kTxOutcomeCommit = 1;
inline constexpr uint64_t kTxOutcomeAbort = 2;
inline constexpr uint64_t kTxRolePrimary = 1;
inline constexpr uint64_t kTxRoleBackup = 2;
// LOCK info word: the request lists the backups the coordinator logs at.
inline constexpr uint64_t kTxLockListsBackups = 1ull << 42;
// LOCK info word: the request's entries list the transaction's other
// participants (kParticipant entries): at the holder, and at a backup of
// the holder segment.
inline constexpr uint64_t kTxLockListsParticipants = 1ull << 43;

enum class TxRecordKind : uint8_t {
  kLock = 1,    // at a written segment's primary: the new values, locks taken
  kBackup = 2,  // at a backup of a written segment: its new values
  kWrap = 3,    // continue at the area's first record
  kAlloc = 4,   // a block allocated by a transaction: kept if it commits, else freed
  // At a backup of the block's segment: an ALLOC record of its primary,
  // resolved by the primary's shipments or by a promotion here.
  kBackupAlloc = 5,
};

// The life of a record; terminal states free its space.
enum class TxState : uint64_t {
  kLocked = 1,     // values logged, outcome unknown here
  kCommitted = 2,  // decided commit (at the decision holder or a backup), maybe not yet applied
  kApplied = 3,    // committed and its values are in place
  kAborted = 4,    // decided abort, nothing applied
  kTruncated = 5,  // its coordinator is done with it
};
std::string_view TxStateName(TxState s);

enum class TxEntryKind : uint8_t {
  kWrite = 1,
  kFree = 2,
  kPutObject = 3,
  kDeleteObject = 4,
  kKvPut = 5,          // a pDKVS key set in a vnode (docs/pdkvs.md)
  kKvPutIfAbsent = 6,  // the same, refused at LOCK when the key exists
  kAllocated = 7,      // a block the transaction allocated: kept if it commits
  kKvPutExpiring = 8,  // a pDKVS key set with an expiry time (MULTI/EXEC)
  kKvDelete = 9,       // a pDKVS key removed (MULTI/EXEC)
  // Another segment the transaction wrote (offset 0) or a table without a
  // segment (offset 1), at the holder: it may drop its decision once none
  // of them waits on it (docs/tx.md "Coordinators that die").
  kParticipant = 10,
  kKvHashSet = 11,     // a field of a pDKVS hash set (MULTI/EXEC)
  kKvHashDelete = 12,  // a field of a pDKVS hash removed (MULTI/EXEC)
  kKvSetExpiry = 13,   // a pDKVS key's expiry time changed in place (MULTI/EXEC)
};

struct TxEntry {
  TxEntryKind kind = TxEntryKind::kWrite;
  uint32_t segment = 0;  // pDKVS: the table segment
  uint64_t offset = 0;   // pDKVS: the table
  // kWrite: the bytes; objects: id (16 bytes) then content; pDKVS: key
  // length u32, key, value (kKvPutExpiring: key length u32, expire_at_ms
  // u64, key, value; kKvDelete: key length u32, key; kKvSetExpiry: key
  // length u32, expire_at_ms u64 (0: none), key; kKvHashSet: key length
  // u32, field length u32, key, field, value; kKvHashDelete: the same
  // without a value).
  std::string data;
};
inline constexpr size_t kTxObjectIdSize = 16;
bool IsObjectEntry(const TxEntry& e);
bool IsKvEntry(const TxEntry& e);
// A pDKVS entry of table `table` in table segment `segment`: kKvPut,
// kKvPutIfAbsent, kKvPutExpiring (with an expiry, nonzero), kKvDelete (no
// value) or kKvSetExpiry (no value; the expiry, 0 to remove it).
TxEntry MakeKvEntry(TxEntryKind kind, uint32_t segment, uint32_t table, std::string_view key,
                    std::string_view value, uint64_t expire_at_ms = 0);
// A pDKVS entry of a hash's field: kKvHashSet (with its value) or
// kKvHashDelete (no value).
TxEntry MakeKvHashEntry(TxEntryKind kind, uint32_t segment, uint32_t table, std::string_view key,
                        std::string_view field, std::string_view value);
// The key, field (hash entries; else empty), value and expiry time (0:
// none) of a pDKVS entry (decoded, so well formed).
std::string_view KvEntryKey(const TxEntry& e);
std::string_view KvEntryField(const TxEntry& e);
std::string_view KvEntryValue(const TxEntry& e);
uint64_t KvEntryExpiry(const TxEntry& e);

void EncodeTxEntries(const std::vector<TxEntry>& entries, std::string* out);
// kInvalidArgument (kCorruption when `on_pm`) for a malformed body.
Status DecodeTxEntries(std::string_view body, bool on_pm, std::vector<TxEntry>* out);

// The version slot of granule `granule` of global segment `segment` in a
// table of `slots` words (a power of two): consecutive granules of a
// segment take consecutive slots, so a range's words are contiguous modulo
// the table size.
inline uint32_t TxVersionSlot(uint32_t segment, uint64_t granule, uint32_t slots) {
  uint64_t base = uint64_t{segment} * 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>((base >> 32) + granule) & (slots - 1);
}

// The version slot of a pDKVS key (of its vnode's server): `key_hash` is
// pdkvs::HashKey(key).
inline uint32_t TxKvSlot(uint32_t table, uint64_t key_hash, uint32_t slots) {
  uint64_t h = (key_hash ^ (uint64_t{table} << 48)) * 0xd6e8feb86659fd93ull;
  return static_cast<uint32_t>(h >> 32) & (slots - 1);
}

// The version slot of an object (of its table's server).
inline uint32_t TxObjectSlot(uint64_t id_hi, uint64_t id_lo, uint32_t slots) {
  uint64_t h = (id_hi * 0x9e3779b97f4a7c15ull) ^ (id_lo * 0xc2b2ae3d27d4eb4full);
  return static_cast<uint32_t>(h >> 32) & (slots - 1);
}

struct TxRecord {
  uint64_t offset = 0;  // in the area
  uint64_t size = 0;    // padded
  TxRecordKind kind = TxRecordKind::kLock;
  TxState state = TxState::kLocked;
  uint64_t seq = 0;
  uint64_t tx = 0;
  uint32_t holder_segment = 0;
  uint16_t flags = 0;
  std::string body;
};
inline constexpr uint16_t kTxRecordHolder = 1;
// The holder is named by an object-store table number, not a segment.
inline constexpr uint16_t kTxRecordHolderIsTable = 2;
// A copy of an earlier record of the same kind, tx, holder and body, made
// to free the ring behind it (TxLogArea::Compact); it supersedes that one.
inline constexpr uint16_t kTxRecordMoved = 4;
// The record's entries list the transaction's other participants
// (kParticipant, maybe none): its holder may check them itself.
inline constexpr uint16_t kTxRecordListsParticipants = 8;

// One coordinator's area. Appends and state changes are serialised by the
// caller (TxParticipant holds one lock per area).
class TxLogArea {
 public:
  using PersistFn = std::function<void(const void*, size_t)>;
  // `base` is the area (area_size bytes, 64-byte aligned).
  TxLogArea(char* base, uint64_t size, uint32_t index, PersistFn persist)
      : base_(base), size_(size), index_(index), persist_(std::move(persist)) {}

  // Reads the area: its coordinator (0 when never assigned) and every
  // record from `start` (a record superseded by a moved copy left out).
  // kCorruption for a damaged header.
  Status Open(std::vector<TxRecord>* records);
  // Gives the (empty or fully terminal) area to `coordinator`: header
  // rewritten, nothing live.
  Status Assign(uint64_t coordinator);
  uint64_t coordinator() const { return coordinator_; }
  uint32_t index() const { return index_; }

  // Appends a record in state kLocked and persists it; kResourceExhausted
  // when the ring has no room.
  Status Append(TxRecordKind kind, uint16_t flags, uint64_t tx, uint32_t holder_segment,
                std::string_view body, TxRecord* out);
  // One persisted store of the record's state word.
  void SetState(const TxRecord& r, TxState s);
  // Drops terminal records from the head (moves `start`, persisted).
  void Trim(const std::function<bool(uint64_t offset)>& terminal);
  bool empty() const { return live_.empty(); }

  // What the area's user knows of its records, for Compact.
  struct Owner {
    // The record at `offset` is done with (may be dropped).
    std::function<bool(uint64_t offset)> done;
    // It was dropped from the head.
    std::function<void(uint64_t offset)> dropped;
    // It may be copied now (no one is about to change it).
    std::function<bool(uint64_t offset)> movable;
    // It was copied: from now on it is `to` (state changes go there).
    std::function<void(uint64_t from, const TxRecord& to)> moved;
  };
  // Makes room before an append of a `body_size`-byte body: trims, and
  // while less than a quarter of the area (beyond the record) is free and
  // records behind the head are done, copies the oldest live record to the
  // tail (flag kTxRecordMoved) and trims again. At most one lap of the live
  // records; stops at a record that is not movable or does not fit.
  void Compact(uint64_t body_size, const Owner& owner);

 private:
  char* base_;
  uint64_t size_;
  uint32_t index_;
  PersistFn persist_;
  uint64_t coordinator_ = 0;
  uint64_t start_ = kTxAreaHeaderSize;
  uint64_t tail_ = kTxAreaHeaderSize;
  uint64_t next_seq_ = 1;
  bool wrapped_ = false;  // the live records run past the end back to the first slot
  struct Live {
    uint64_t offset;
    uint64_t seq;
    uint64_t size;  // padded
  };
  std::deque<Live> live_;  // from start, in order

  void PersistStart(uint64_t offset, uint64_t seq);
  // Whether a record of `need` (padded) bytes fits now; the bytes free.
  bool Fits(uint64_t need) const;
  uint64_t FreeBytes() const;
  // Appends a record as given (Append's, or a moved copy).
  Status AppendRecord(TxRecordKind kind, uint16_t flags, TxState state, uint64_t tx,
                      uint32_t holder_segment, std::string_view body, TxRecord* out);
};

// Offline check of a log region (fsck): every area header and every
// readable record. Appends one line per problem to `violations`.
struct TxLogCheck {
  uint32_t assigned_areas = 0;
  uint64_t live_records = 0;  // not truncated
  uint64_t in_doubt = 0;      // locked or committed-not-applied
  // The first in-doubt records (area, sequence, kind, state, transaction,
  // holder), so a report says which transaction a participant still waits on.
  std::vector<std::string> in_doubt_records;
  std::vector<std::string> violations;
};
void CheckTxLogRegion(const char* base, uint64_t area_size, uint32_t area_count, TxLogCheck* out);

}  // namespace pdpm::dsm
