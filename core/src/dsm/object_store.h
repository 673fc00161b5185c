// ObjectStoreTable: one table (consistent-hashing vnode) of the object store,
// living in one PAllocator region. Objects have 128-bit IDs and hold up to
// kMaxObjectSize (64 MiB) bytes in 4 KiB pages; the index is a persistent
// chained hash table (hash_index.h), each object's page map a persistent skip
// list of extents (skiplist.h). Format and guarantees: docs/dsm.md.
//
// Contract:
// - Put, Write and Delete are durable and atomic when they return OK: after
//   a crash an object reads either entirely as before or entirely as after
//   the operation that was in flight, never a mixture.
// - Overwrite is copy-on-write: new pages are written and persisted, one
//   persisted 8-byte pointer store publishes them, and the old pages are
//   freed only after that.
// - Ranges never written (a write past the end leaves a hole) read as zeros.
// - Errors: kNotFound (unknown ID), kTooLarge (an object would exceed
//   64 MiB), kOutOfRange (a read beyond the object's size),
//   kAlreadyExists (Create on a region that holds a table),
//   kResourceExhausted (the region is full; the object is unchanged),
//   kCorruption (Open found a damaged structure).
// - Thread-safe: reads run concurrently, mutations one at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "dsm/hash_index.h"
#include "dsm/pallocator.h"
#include "dsm/skiplist.h"
#include "dsm/table_range.h"

namespace pdpm::dsm {

struct ObjectStoreOptions {
  // Region root slot holding the table's index root.
  int root_slot = 0;
  // Buckets of the hash index (fixed when the table is created).
  // The default's 64 KiB array shares the chunk of 16-page extents; size
  // it to the expected object count (chains grow past it), up to 2^24.
  uint32_t bucket_count = 8192;
  // Seed of the skip-list level generator (tests fix it for determinism).
  uint64_t seed = 0x5eed;
};

// An object id with its position in its table (ListIdsByPosition).
struct PositionedId {
  uint64_t position = 0;
  ObjectId id;
  bool operator==(const PositionedId&) const = default;
};

struct ObjectStoreRecovery {
  uint64_t objects = 0;
  uint64_t reclaimed_blocks = 0;  // leaked blocks freed by Open
  uint64_t repaired_links = 0;    // skip-list links of levels >= 1 rebuilt
};

class ObjectStoreTable {
 public:
  // Creates an empty table in the region and records it in the root slot.
  // A region holds at most one table (every object-store block of the region
  // belongs to it), so object-store blocks already in the region — left by a
  // Create that crashed before publishing — are reclaimed first.
  static Status Create(PAllocator* alloc, const ObjectStoreOptions& options,
                       std::unique_ptr<ObjectStoreTable>* out);
  // Opens the table after a restart or crash: validates the index and every
  // object, rebuilds skip-list towers, and frees object-store blocks that no
  // object reaches (leaks of operations a crash interrupted). kNotFound when
  // the root slot is empty.
  static Status Open(PAllocator* alloc, const ObjectStoreOptions& options,
                     std::unique_ptr<ObjectStoreTable>* out, ObjectStoreRecovery* recovery);

  // Creates the object or replaces its whole content.
  Status Put(const ObjectId& id, std::string_view value);
  // Writes `data` at `offset` of an existing object, growing it if needed.
  Status Write(const ObjectId& id, uint64_t offset, std::string_view data);
  // Drops the bytes at and past `size` of an existing object that is
  // larger (its size becomes `size`); a smaller object is left as it is.
  Status Truncate(const ObjectId& id, uint64_t size);
  // Reads [offset, offset + length) of an object into `out`.
  Status Read(const ObjectId& id, uint64_t offset, uint64_t length, char* out) const;
  // The whole object.
  Status Get(const ObjectId& id, std::string* value) const;
  Status Size(const ObjectId& id, uint64_t* size) const;
  Status Delete(const ObjectId& id);
  // The ids of objects whose id.hi has `tag` in its upper 32 bits, from
  // `start` on (inclusive) in (hi, lo) order, at most `max` of them, sorted:
  // a listing in pages (each next page from the last id + 1) returns every
  // object present for the whole listing once (for consistency checkers
  // such as pDFS's fsck, docs/pdfs.md).
  void ListIds(uint32_t tag, const ObjectId& start, size_t max, std::vector<ObjectId>* out) const;
  // The objects whose position (`position_of`, e.g. monitor::ObjectPosition)
  // lies in `range`, after `after` in (position, id.hi, id.lo) order
  // (nullptr: from the range's start), at most `max` of them, sorted in that
  // order: a listing in pages (each next page after the last item returned)
  // returns every object present for the whole listing once. What a split
  // of a table segment copies and later sweeps (docs/dsm.md "Tables across
  // segments").
  void ListIdsByPosition(const std::function<uint64_t(const ObjectId&)>& position_of,
                         const TableRange& range, const PositionedId* after, size_t max,
                         std::vector<PositionedId>* out) const;
  // How many objects the table holds (kept in DRAM: counted by Open,
  // changed by every Put of a new id and every Delete).
  uint64_t ObjectCount() const { return objects_.load(std::memory_order_relaxed); }
  // Offsets of every block the table reaches: the index root, the bucket
  // array, entries, object headers, extent nodes and data pages.
  void Trace(std::unordered_set<uint64_t>* blocks) const;

 private:
  ObjectStoreTable(PAllocator* alloc, const ObjectStoreOptions& options,
                   std::unique_ptr<HashIndex> index)
      : alloc_(alloc), index_(std::move(index)), lists_(alloc, options.seed) {}
  // The `max` smallest (by `less`) of the items `pick` makes of the index's
  // ids (std::nullopt: skip the id), sorted. Callers hold mu_.
  template <typename T, typename Pick, typename Less>
  void KeepSmallest(size_t max, Pick pick, Less less, std::vector<T>* out) const;
  // The object header of `id`, or kNotFound.
  Status HeaderOf(const ObjectId& id, uint64_t* header) const;
  void TraceLocked(std::unordered_set<uint64_t>* blocks) const;

  PAllocator* alloc_;
  std::unique_ptr<HashIndex> index_;
  SkipList lists_;
  mutable std::shared_mutex mu_;
  std::atomic<uint64_t> objects_{0};
};

}  // namespace pdpm::dsm
