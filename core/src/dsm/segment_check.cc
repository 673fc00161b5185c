#include "dsm/segment_check.h"

#include <set>
#include <unordered_map>
#include <utility>

#include "dsm/chunk.h"
#include "dsm/hash_index.h"
#include "dsm/skiplist.h"

namespace pdpm::dsm {
namespace {

struct Block {
  uint64_t size;
  BlockOwner owner;
};

class Checker {
 public:
  Checker(const char* base, uint64_t size, SegmentCheckReport* report)
      : base_(base), size_(size), r_(*report) {}

  void Run(int object_root_slot) {
    const RegionHeader* region;
    Status s = ReadRegionHeader(base_, size_, &region);
    if (!s.ok()) {
      r_.violations.push_back(s.ToString());
      return;
    }
    region_size_ = uint64_t{region->chunk_count} * kChunkSize;
    ScanChunks(region->chunk_count);
    if (object_root_slot < 0) return;
    if (object_root_slot >= kNumRoots) {
      r_.violations.push_back("object root slot out of range");
      return;
    }
    uint64_t root = region->roots[object_root_slot];
    if (root != 0) CheckTable(root);
    ReportLeaks();
  }

 private:
  void ScanChunks(uint32_t count) {
    r_.chunks = count;
    for (uint32_t i = 0; i < count;) {
      ChunkState st;
      Status s = ReadChunkHeader(base_, count, i, &st);
      if (!s.ok()) {
        r_.violations.push_back(s.ToString());
        ++i;
        continue;
      }
      uint64_t chunk_off = uint64_t{i} * kChunkSize;
      if (st.kind == ChunkKind::kLarge) {
        Add(chunk_off + kLargeDataOffset, uint64_t{st.run_chunks} * kChunkSize - kLargeDataOffset,
            st.owner);
        i += st.run_chunks;
        continue;
      }
      if (st.kind == ChunkKind::kSmall) {
        int c = st.size_class;
        const uint64_t* bitmap = BitmapOf(base_, i);
        for (uint64_t b = 0; b < BitmapWords(c) * 64; ++b) {
          if (bitmap[b / 64] == 0) {
            b += 63;  // skip a word with no block allocated
            continue;
          }
          if (!((bitmap[b / 64] >> (b % 64)) & 1)) continue;
          if (b >= ClassBlockCount(c)) {
            r_.violations.push_back("chunk " + std::to_string(i) +
                                    ": bitmap bit set past the last block");
            break;
          }
          Add(chunk_off + ClassDataStart(c) + b * ClassBlockSize(c), ClassBlockSize(c), st.owner);
        }
      }
      ++i;
    }
  }

  void Add(uint64_t off, uint64_t size, BlockOwner owner) {
    allocated_[off] = Block{size, owner};
    ++r_.allocated_blocks;
    r_.allocated_bytes += size;
  }

  // Records that the table reaches the block at `off` as `what`; false (and
  // a violation) when that is not an allocated object-store block of at
  // least `size` bytes or something else reaches it too.
  bool Reach(uint64_t off, uint64_t size, const std::string& what) {
    auto [it, fresh] = reached_.emplace(off, what);
    if (!fresh) {
      r_.violations.push_back(what + " " + HexOffset(off) + " is also reachable as " + it->second);
      return false;
    }
    auto a = allocated_.find(off);
    if (a == allocated_.end()) {
      r_.violations.push_back(what + " " + HexOffset(off) +
                              " is reachable but not allocated (free)");
      return false;
    }
    if (a->second.owner != BlockOwner::kObjectStore || a->second.size < size) {
      r_.violations.push_back(what + " " + HexOffset(off) +
                              " is allocated with the wrong owner or size");
      return false;
    }
    return true;
  }

  void CheckTable(uint64_t root) {
    Status s = CheckIndexRoot(base_, region_size_, root);
    if (!s.ok()) {
      r_.violations.push_back(s.ToString());
      return;
    }
    auto* r = reinterpret_cast<const IndexRoot*>(base_ + root);
    Reach(root, sizeof(IndexRoot), "index root");
    if (!Reach(r->buckets, uint64_t{r->bucket_count} * 8, "bucket array")) return;
    auto* heads = reinterpret_cast<const uint64_t*>(base_ + r->buckets);
    std::set<std::pair<uint64_t, uint64_t>> ids;
    for (uint32_t b = 0; b < r->bucket_count; ++b) {
      for (uint64_t e = heads[b]; e != 0;) {
        std::string where = "bucket " + std::to_string(b) + " entry " + HexOffset(e);
        s = CheckIndexEntry(base_, region_size_, e);
        if (!s.ok()) {
          r_.violations.push_back(where + ": " + s.ToString());
          break;
        }
        // Reach() refuses a block seen before, which also ends a cycle.
        if (!Reach(e, sizeof(IndexEntry), "index entry")) break;
        auto* entry = reinterpret_cast<const IndexEntry*>(base_ + e);
        ObjectId id{entry->id_hi, entry->id_lo};
        if (BucketOf(id, r->bucket_count) != b) {
          r_.violations.push_back(where + ": entry in the wrong bucket");
        }
        if (!ids.insert({id.hi, id.lo}).second) {
          r_.violations.push_back(where + ": object ID indexed twice");
        }
        CheckObject(entry->object, id, where);
        e = entry->next;
      }
    }
  }

  void CheckObject(uint64_t header, const ObjectId& id, const std::string& where) {
    ++r_.objects;
    Status s = CheckObjectHeader(base_, region_size_, header, id);
    if (!s.ok()) {
      r_.violations.push_back(where + ": " + s.ToString());
      return;
    }
    if (!Reach(header, sizeof(ObjectHeader), "object header")) return;
    auto* h = reinterpret_cast<const ObjectHeader*>(base_ + header);
    std::vector<uint64_t> nodes;
    uint64_t prev_end = 0;
    for (uint64_t n = h->head[0]; n != 0;) {
      s = CheckExtentNode(base_, region_size_, n);
      if (!s.ok()) {
        r_.violations.push_back(where + " extent " + HexOffset(n) + ": " + s.ToString());
        return;
      }
      auto* node = reinterpret_cast<const ExtentNode*>(base_ + n);
      if (!Reach(n, ExtentNodeSize(node->level), "extent node")) return;
      ++r_.extents;
      if (node->offset < prev_end) {
        r_.violations.push_back(where + " extent " + HexOffset(n) +
                                ": overlaps or precedes its predecessor");
      }
      uint64_t bytes = uint64_t{node->pages} * kPageSize;
      if (Reach(node->data, bytes, "extent data") &&
          ExtentDataCrc(base_, *node) != node->data_crc) {
        r_.violations.push_back(where + " extent " + HexOffset(n) + ": data checksum mismatch");
      }
      prev_end = node->end();
      nodes.push_back(n);
      n = node->next[0];
    }
    CheckTowers(h, nodes, where);
  }

  // Every level l >= 1 must list exactly the level-0 nodes taller than l.
  void CheckTowers(const ObjectHeader* h, const std::vector<uint64_t>& nodes,
                   const std::string& where) {
    for (int l = 1; l < kMaxLevel; ++l) {
      const uint64_t* link = h->head;
      bool stale = false;
      for (uint64_t n : nodes) {
        auto* node = reinterpret_cast<const ExtentNode*>(base_ + n);
        if (node->level <= l) continue;
        if (link[l] != n) {
          stale = true;
          break;
        }
        link = node->next;
      }
      if (stale || link[l] != 0) {
        r_.repairable.push_back(where + ": skip-list level " + std::to_string(l) +
                                " disagrees with level 0");
        return;
      }
    }
  }

  void ReportLeaks() {
    std::string first;
    for (const auto& [off, block] : allocated_) {
      if (block.owner != BlockOwner::kObjectStore || reached_.count(off)) continue;
      if (r_.leaked_blocks++ < 8) first += " " + HexOffset(off);
    }
    if (r_.leaked_blocks > 0) {
      r_.repairable.push_back(std::to_string(r_.leaked_blocks) +
                              " object-store blocks allocated but unreachable:" + first +
                              (r_.leaked_blocks > 8 ? " ..." : ""));
    }
  }

  const char* base_;
  uint64_t size_;
  uint64_t region_size_ = 0;
  SegmentCheckReport& r_;
  std::unordered_map<uint64_t, Block> allocated_;
  std::unordered_map<uint64_t, std::string> reached_;
};

}  // namespace

std::string SegmentCheckReport::ToString() const {
  std::string out;
  for (const auto& v : violations) out += "violation: " + v + "\n";
  for (const auto& v : repairable) out += "repairable: " + v + "\n";
  return out;
}

SegmentCheckReport CheckSegment(const char* base, uint64_t size, int object_root_slot) {
  SegmentCheckReport report;
  Checker(base, size, &report).Run(object_root_slot);
  return report;
}

}  // namespace pdpm::dsm
