// CcehIndex: the persistent hash index of one pDKVS vnode, a
// cacheline-conscious extendible hash (CCEH) in a PAllocator region, crash
// consistent without a log. Format on PM, invariants and recovery:
// docs/pdkvs.md ("Index").
//
// Contract:
// - Every operation that returns OK is durable: a crash (kill -9, power
//   loss) afterwards never loses it, and a crash during it leaves the key
//   with its old or its new value, never a torn item.
// - Keys are byte strings of 0..kMaxKeySize bytes, values of
//   0..kMaxValueSize bytes; larger ones fail with kTooLarge.
// - An item whose expiry time (Unix ms, from the clock of the options) has
//   passed reads as absent everywhere; its block is freed lazily by the next
//   operation that finds it.
// - Thread-safe: many threads may call every method at once. Writers of one
//   segment (and a segment split) are serialized by that segment's lock;
//   readers of a segment share it.
// - Errors: kNotFound (absent key), kAlreadyExists / kNotFound (put modes),
//   kTooLarge, kInvalidArgument, kResourceExhausted (region full, or a
//   segment that cannot split further), kCorruption (bad format on PM).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "dsm/pallocator.h"
#include "pdkvs/item.h"

namespace pdpm::pdkvs {

// The message of Peek's kFailedPrecondition: the key's item expired and is
// still stored.
inline constexpr std::string_view kExpiredMessage = "expired item not yet freed";

struct CcehOptions {
  // Geometry, fixed at Create and read back from PM by Open: buckets of a
  // segment (each a 64-byte cache line of 4 slots) and how many consecutive
  // buckets a key may probe. Small values make splits frequent (tests).
  uint32_t buckets_per_segment = 255;
  uint32_t probe_buckets = 4;
  // Current Unix time in ms for TTLs; null: the system clock.
  std::function<uint64_t()> clock_ms;
};

enum class PutMode {
  kAlways,     // create or replace
  kIfAbsent,   // kAlreadyExists when the key is present
  kIfPresent,  // kNotFound when the key is absent
};

struct PutOptions {
  PutMode mode = PutMode::kAlways;
  ItemMeta meta;
  // Replacing an item keeps its expiry time instead of meta.expire_at_ms.
  bool keep_ttl = false;
};

// What an Update callback decides for the key.
struct Mutation {
  enum Kind {
    kKeep,
    kPut,  // a new item of value and meta
    kDelete,
    kSetExpiry,  // meta.expire_at_ms into the present item, in place (no copy)
  };
  Kind kind = kKeep;
  std::string value;  // kPut
  ItemMeta meta;      // kPut; kSetExpiry: the expiry time only
};

// Called with the key's current value and meta (nullptr / {} when absent or
// expired) while the key's segment is locked; fills *out. A non-OK status is
// returned by Update with nothing changed. It must not call into the index.
using UpdateFn = std::function<Status(const std::string_view* old_value, const ItemMeta& old_meta,
                                      Mutation* out)>;

// One page of a scan. The cursor is a position in hash order: a scan starts
// at cursor 0 and continues with next_cursor until done. Every key present
// for the whole scan is returned exactly once, whatever splits and
// doublings happen in between; keys added or removed during the scan may
// or may not be returned.
struct ScanPage {
  std::vector<std::string> keys;
  uint64_t next_cursor = 0;
  bool done = false;
};

struct CcehStats {
  uint64_t items = 0;  // stored items, expired ones not yet freed included
  uint64_t segments = 0;
  uint32_t global_depth = 0;
  uint64_t splits = 0;     // since Open
  uint64_t doublings = 0;  // since Open
};

// What the offline check found. Violations break an invariant; interrupted
// splits and stale slots are what a crash may leave and Open repairs.
struct CcehCheckReport {
  std::vector<std::string> violations;
  uint64_t interrupted_splits = 0;
  uint64_t stale_slots = 0;
  uint64_t segments = 0;
  uint64_t items = 0;
  // Every block the index reaches: header, directory, segments, items.
  std::unordered_set<uint64_t> reachable;
  // The items flagged kItemFlagHash (key, value): hash headers, whose
  // field indexes VnodeHashes::Check checks.
  std::vector<std::pair<std::string, std::string>> hashes;
  uint64_t empty_hashes = 0;  // hashes with no field (VnodeHashes::Check)

  bool ok() const { return violations.empty(); }
  bool clean() const {
    return ok() && interrupted_splits == 0 && stale_slots == 0 && empty_hashes == 0;
  }
  std::string ToString() const;
};

// Format details, defined in cceh.cc.
struct CcehSlot;
class CcehLayout;

class CcehIndex {
 public:
  // Creates an empty index in `alloc`'s region; *header_offset is its entry
  // point, to be published by the caller (e.g. in a root slot). Until then
  // its blocks are leaks that ReclaimUnreachable frees.
  static Status Create(dsm::PAllocator* alloc, const CcehOptions& options, uint64_t* header_offset,
                       std::unique_ptr<CcehIndex>* out);

  // Recovers the index at `header_offset` from PM alone: completes a split
  // interrupted between its directory updates, clears stale slots, counts
  // the items. Leaked blocks are freed by ReclaimUnreachable afterwards.
  // The geometry of `options` is ignored (it is read from PM).
  static Status Open(dsm::PAllocator* alloc, uint64_t header_offset, const CcehOptions& options,
                     std::unique_ptr<CcehIndex>* out);

  // Offline check of the index at `header_offset`; reads PM, writes
  // nothing. Blocks are checked against the allocator: every reachable
  // block must be an allocated kKvStore block large enough for its content.
  static CcehCheckReport Check(dsm::PAllocator* alloc, uint64_t header_offset);

  // Frees every kKvStore block of the region that none of `indexes` (all
  // the region's indexes, freshly opened) reaches. Must not run
  // concurrently with anything else on the region.
  static Status ReclaimUnreachable(dsm::PAllocator* alloc, std::span<CcehIndex* const> indexes,
                                   uint64_t* reclaimed);

  CcehIndex(const CcehIndex&) = delete;
  CcehIndex& operator=(const CcehIndex&) = delete;
  ~CcehIndex();

  // kNotFound when absent or expired. `meta` may be null.
  Status Get(std::string_view key, std::string* value, ItemMeta* meta = nullptr);
  Status Exists(std::string_view key, bool* exists);
  // Get that never writes, for a reader that does not hold the index's
  // writers off (a vnode's read-only path, server/data_server_kv.cc): an
  // expired item is left in place and answered kFailedPrecondition
  // (kExpiredMessage), so the caller can read again through a path that
  // may free it. `value` and `meta` may be null (no copy).
  Status Peek(std::string_view key, std::string* value, ItemMeta* meta = nullptr);
  Status Put(std::string_view key, std::string_view value, const PutOptions& options = {});
  // kNotFound when absent or expired.
  Status Delete(std::string_view key);
  // Atomic read-modify-write of one key (increment, append, set-if-equal,
  // TTL changes): see UpdateFn. `fn` is called exactly once; when the key is
  // absent and its probe window full, the segment splits first (as for a
  // put), whatever `fn` then decides.
  Status Update(std::string_view key, const UpdateFn& fn);
  // Up to about `count` keys (more when keys share a hash) from `cursor`.
  Status Scan(uint64_t cursor, size_t count, ScanPage* page);
  // Stored items, expired ones not yet freed included.
  uint64_t Count() const { return items_.load(std::memory_order_relaxed); }
  // Stored items that carry an expiry time (expired ones not yet freed
  // included).
  uint64_t CountExpiring() const { return expiring_.load(std::memory_order_relaxed); }
  // Active expiry, a step at a time: frees every expired item of the
  // segment covering hash `position` (its exclusive lock held meanwhile),
  // adds their number to *reclaimed and sets *next_position to the first
  // hash of the next segment, 0 after the last one. A sweep starts at 0 and
  // follows *next_position until it is 0 again; splits in between never
  // make it skip a hash.
  Status ReclaimExpired(uint64_t position, uint64_t* next_position, uint64_t* reclaimed);
  CcehStats Stats();

  // Called, under the key's segment lock, with every item carrying flags
  // (a hash's header item, hash.h) that the index drops: removed (a
  // delete, an expiry) or replaced by an item of another value or flags.
  // It must not call into the index. Set before the index is shared
  // (null: none).
  using DropHook = std::function<void(const ItemView& dropped)>;
  void SetDropHook(DropHook hook) { drop_hook_ = std::move(hook); }

  uint64_t header_offset() const { return header_offset_; }
  // Adds every block the index reaches to *reachable. Not concurrently
  // with writers.
  void AddReachable(std::unordered_set<uint64_t>* reachable);

 private:
  using Slot = CcehSlot;
  using Layout = CcehLayout;
  struct SegmentLock;
  // What Apply's callback decides; the value is borrowed until Apply returns.
  struct Change;
  using Decide =
      std::function<Status(const std::string_view* old_value, const ItemMeta& old_meta, Change*)>;

  CcehIndex(dsm::PAllocator* alloc, uint64_t header_offset, const CcehOptions& options);
  uint64_t NowMs() const;
  // Recovery steps of Open.
  Status Recover();
  // Rebuilds dir_locks_ and dir_depth_ from the directory on PM; dir_mu_
  // held exclusively (or the index not yet shared).
  void MirrorDirectory();
  // The segment covering `hash`, locked with `lock` (shared or exclusive).
  template <typename Lock>
  uint64_t LockSegment(uint64_t hash, Lock* lock);
  // The slot holding `key` in segment `seg` (null if none) and the first
  // free slot of the key's probe window (null if none). Segment locked.
  Status FindSlot(uint64_t seg, uint64_t hash, std::string_view key, Slot** found,
                  Slot** free_slot);
  // The one write path: locks the key's segment exclusively, frees an
  // expired item, makes room (splits), calls `decide` once with the current
  // value and applies its change.
  // `may_insert` false: the change never adds the key (no split for room).
  // `reads_old` false: `decide` looks only at whether the key exists and
  // at its meta, not at its value (*old_value is then empty): a plain
  // overwrite or delete does not verify the checksum of the item it drops.
  Status Apply(std::string_view key, bool may_insert, bool reads_old, const Decide& decide);
  // Get without a copy when value is null (Exists); an expired item is
  // freed when `free_expired`, else answered as Peek does.
  Status Lookup(std::string_view key, std::string* value, ItemMeta* meta, bool free_expired);
  // Clears a slot and frees its item; segment locked exclusively.
  Status RemoveSlot(Slot* slot);
  // Splits segment `seg` (locked exclusively), doubling the directory when
  // its local depth equals the global depth.
  Status Split(uint64_t seg);
  // Clears the slots of `seg` whose hash its depth no longer covers.
  void ClearStaleSlots(uint64_t seg);

  dsm::PAllocator* const alloc_;
  const uint64_t header_offset_;
  const CcehOptions options_;
  std::unique_ptr<Layout> layout_;
  // Guards the directory (its block, its entries, the global depth) and
  // locks_. Lock order: a segment's lock before dir_mu_.
  std::shared_mutex dir_mu_;
  std::unordered_map<uint64_t, std::unique_ptr<SegmentLock>> locks_;
  // The directory in DRAM: each entry's segment lock, which names the
  // segment, so a lookup neither reads the entries on PM nor searches
  // locks_. Kept with the directory under dir_mu_ (exclusive to change).
  std::vector<SegmentLock*> dir_locks_;
  uint32_t dir_depth_ = 0;  // the global depth: 2^dir_depth_ entries
  // Counts an item's expiry time changing from `before` to `after` (0:
  // none; an item added or removed: 0 on the other side) in expiring_.
  void CountExpiry(uint64_t before, uint64_t after);

  // Calls drop_hook_ for the item at `item` if it carries flags.
  void Dropping(uint64_t item);

  DropHook drop_hook_;
  std::atomic<uint64_t> items_{0};
  std::atomic<uint64_t> expiring_{0};
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> doublings_{0};
};

}  // namespace pdpm::pdkvs
