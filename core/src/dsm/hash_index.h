// The persistent chained hash index of an object-store table: 128-bit object
// ID → the object's current header. Root, bucket array and entries are
// object-store blocks of the table's PAllocator. Format (version 1):
//
//   IndexRoot (64 B): magic "PDPMOIDX", version, bucket_count, offset of
//       the bucket array, crc32c of those fields.
//   bucket array: bucket_count 8-byte heads (entry offset or 0).
//   IndexEntry (64 B): magic "PDPMOENT", id, crc32c of magic and id, next
//       entry of the chain, offset of the object header.
//
// Every change is published by one persisted 8-byte store: a new entry is
// fully written and persisted before the bucket head (or nothing else)
// points to it; an entry is unlinked by one store to its predecessor; an
// object is replaced by one store to its entry's `object`.
//
// Not thread-safe: the owning table serialises access.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "common/status.h"
#include "dsm/pallocator.h"

namespace pdpm::dsm {

struct ObjectId {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const ObjectId&) const = default;
};

inline constexpr uint64_t kIndexRootMagic = 0x5844494f4d504450ull;   // "PDPMOIDX"
inline constexpr uint64_t kIndexEntryMagic = 0x544e454f4d504450ull;  // "PDPMOENT"
inline constexpr uint32_t kMaxBuckets = 1u << 24;

struct IndexRoot {
  uint64_t magic;
  uint32_t version;
  uint32_t bucket_count;
  uint64_t buckets;
  uint32_t crc;
  uint32_t reserved;
  uint64_t padding[4];
};
static_assert(sizeof(IndexRoot) == 64);

struct IndexEntry {
  uint64_t magic;
  uint64_t id_hi;
  uint64_t id_lo;
  uint32_t crc;
  uint32_t reserved;
  uint64_t next;
  uint64_t object;
  uint64_t padding[2];
};
static_assert(sizeof(IndexEntry) == 64);

// Bucket of `id` in a table of `bucket_count` buckets.
uint32_t BucketOf(const ObjectId& id, uint32_t bucket_count);
// Validate records in a raw region of `region_size` bytes (bounds, magic,
// version, crc): shared by the table and the offline checker.
Status CheckIndexRoot(const char* base, uint64_t region_size, uint64_t root);
Status CheckIndexEntry(const char* base, uint64_t region_size, uint64_t entry);

class HashIndex {
 public:
  // Writes an empty index (root and buckets, persisted) and returns the
  // root's offset; nothing points to it yet.
  static Status Create(PAllocator* alloc, uint32_t bucket_count, uint64_t* root);
  // Validates the root and every chain (entries, their buckets, no cycles,
  // no duplicate IDs).
  static Status Open(PAllocator* alloc, uint64_t root, std::unique_ptr<HashIndex>* out);

  // The entry of `id`, or 0.
  uint64_t Find(const ObjectId& id) const;
  IndexEntry* Entry(uint64_t entry) const { return alloc_->At<IndexEntry>(entry); }
  // Adds an entry for a new `id` pointing at `object`.
  Status Insert(const ObjectId& id, uint64_t object);
  // Makes the entry point at a new object header.
  void SetObject(uint64_t entry, uint64_t object);
  // Unlinks and frees the entry of `id`; *object is the header it pointed to.
  Status Remove(const ObjectId& id, uint64_t* object);
  // Calls fn(entry) for every entry.
  void ForEach(const std::function<void(uint64_t)>& fn) const;

  uint64_t root() const { return root_; }
  uint64_t buckets() const { return root_ptr()->buckets; }

 private:
  HashIndex(PAllocator* alloc, uint64_t root) : alloc_(alloc), root_(root) {}
  IndexRoot* root_ptr() const { return alloc_->At<IndexRoot>(root_); }
  uint64_t* bucket(const ObjectId& id) const;

  PAllocator* alloc_;
  uint64_t root_;
};

}  // namespace pdpm::dsm
