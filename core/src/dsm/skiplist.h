// The page map of one object: a persistent skip list of extents. Format
// (version 1), all records object-store blocks of the table's PAllocator:
//
//   ObjectHeader (128 B): magic "PDPMOBJH", object ID, version, crc32c of
//       those, then the skip list's head tower head[kMaxLevel].
//   ExtentNode (40 B + 8 B per level): magic "PEXT", version, level, pages,
//       valid_bytes, crc32c of the data pages, logical byte offset (page
//       aligned), offset of the data block, crc32c of the node's fields, then
//       next[level].
//   data block: `pages` 4 KiB pages (a PAllocator block of exactly that
//       size; pages is a power of two up to kMaxExtentPages).
//
// Extents are sorted by logical offset and never overlap; pages of an extent
// that hold no data are zero. Level 0 is the truth: an object is exactly the
// extents reachable through head[0]. The object's size is the end of its
// last extent's valid bytes; ranges no extent covers are holes and read as
// zeros.
//
// Overwrite is copy-on-write at extent granularity: the extents a write
// touches are rewritten whole into new blocks (old bytes merged with new),
// the new nodes are persisted, then one persisted 8-byte store to the
// predecessor's next[0] publishes them. Links of levels >= 1 are fixed up
// after that store and are rebuilt by RebuildTowers after a crash; old nodes
// and pages are freed only after the switch is durable.
//
// Not thread-safe: the owning table serialises access.
#pragma once

#include <cstdint>
#include <random>
#include <string_view>
#include <unordered_set>

#include "common/status.h"
#include "dsm/hash_index.h"
#include "dsm/pallocator.h"

namespace pdpm::dsm {

inline constexpr uint64_t kMaxObjectSize = 64ull << 20;
inline constexpr int kMaxLevel = 8;
inline constexpr uint32_t kMaxExtentPages = 16;
inline constexpr uint64_t kObjectHeaderMagic = 0x484a424f4d504450ull;  // "PDPMOBJH"
inline constexpr uint32_t kExtentMagic = 0x54584550u;                  // "PEXT"

struct ObjectHeader {
  uint64_t magic;
  uint64_t id_hi;
  uint64_t id_lo;
  uint32_t version;
  uint32_t crc;
  uint64_t head[kMaxLevel];
  uint64_t padding[4];
};
static_assert(sizeof(ObjectHeader) == 128);

struct ExtentNode {
  uint32_t magic;
  uint8_t version;
  uint8_t level;
  uint16_t pages;
  uint32_t valid_bytes;
  uint32_t data_crc;
  uint64_t offset;
  uint64_t data;
  uint32_t crc;
  uint32_t reserved;
  // next[level] follows; only `level` entries are allocated.
  uint64_t next[kMaxLevel];

  uint64_t end() const { return offset + uint64_t{pages} * kPageSize; }
};
inline constexpr uint64_t kExtentNodeFixedSize = offsetof(ExtentNode, next);
inline constexpr uint64_t ExtentNodeSize(int level) {
  return kExtentNodeFixedSize + 8 * static_cast<uint64_t>(level);
}

// Validate records in a raw region (bounds, magic, version, crc, field
// ranges): shared by the table and the offline checker.
Status CheckObjectHeader(const char* base, uint64_t region_size, uint64_t header,
                         const ObjectId& id);
Status CheckExtentNode(const char* base, uint64_t region_size, uint64_t node);
uint32_t ExtentDataCrc(const char* base, const ExtentNode& node);

class SkipList {
 public:
  SkipList(PAllocator* alloc, uint64_t seed) : alloc_(alloc), rng_(seed) {}

  // Writes a complete, persisted object holding `value` (header, extents,
  // pages) that nothing points to yet; *header is its header's offset. On
  // failure everything allocated is freed again.
  Status Build(const ObjectId& id, std::string_view value, uint64_t* header);
  uint64_t Size(uint64_t header) const;
  // Copies [offset, offset + length) to out, holes as zeros; the caller
  // checks the range against Size.
  void Read(uint64_t header, uint64_t offset, uint64_t length, char* out) const;
  // Copy-on-write of [offset, offset + data.size()) into a published object;
  // the caller checks the range against kMaxObjectSize.
  Status Write(uint64_t header, uint64_t offset, std::string_view data);
  // Drops the bytes at and past `size` when the object is larger (its size
  // becomes `size`; nothing changes otherwise): copy-on-write of the page
  // holding the new end, one persisted store unlinking every extent after.
  Status Truncate(uint64_t header, uint64_t size);
  // Frees an object nothing points to any more.
  Status Destroy(uint64_t header);
  // Adds the object's blocks (header, nodes, data) to `blocks`.
  void Trace(uint64_t header, std::unordered_set<uint64_t>* blocks) const;
  // Validates header and level 0 (records, order, bounds) of an object.
  Status Validate(uint64_t header, const ObjectId& id) const;
  // Re-derives the links of levels >= 1 from level 0; returns how many
  // links it changed.
  uint64_t RebuildTowers(uint64_t header);

 private:
  ObjectHeader* Header(uint64_t off) const { return alloc_->At<ObjectHeader>(off); }
  ExtentNode* Node(uint64_t off) const { return alloc_->At<ExtentNode>(off); }
  int RandomLevel();
  // preds[l]: the next-array of the last node of level l ending at or
  // before `offset` (or the head tower).
  void FindPreds(uint64_t header, uint64_t offset, uint64_t** preds) const;
  // Allocates and fills persisted extents covering [begin, end) (page
  // aligned); fill(dst, logical_offset, length) writes their content. Links
  // are left zero. On failure frees what it allocated.
  Status MakeExtents(uint64_t begin, uint64_t end, uint64_t size_after,
                     const std::function<void(char*, uint64_t, uint64_t)>& fill,
                     std::vector<uint64_t>* nodes);
  // Links `nodes` to each other and their last node of each level to
  // succ[level]; first[level] receives the first new node of each level (or
  // succ[level] when none has that level). Persists the nodes.
  void LinkChain(const std::vector<uint64_t>& nodes, const uint64_t* succ, uint64_t* first);
  Status FreeExtents(const std::vector<uint64_t>& nodes);
  // Links `fresh` between preds and succ (LinkChain), publishes them with
  // one persisted store to preds[0] (then the upper levels) and frees
  // the extents `old` they replace.
  Status Replace(uint64_t** preds, const std::vector<uint64_t>& fresh, const uint64_t* succ,
                 const std::vector<uint64_t>& old);

  PAllocator* alloc_;
  std::mt19937_64 rng_;
};

}  // namespace pdpm::dsm
