#include "dsm/skiplist.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace pdpm::dsm {
namespace {

uint32_t HeaderCrc(const ObjectHeader& h) {
  return Crc32c(&h, offsetof(ObjectHeader, crc));
}
uint32_t NodeCrc(const ExtentNode& n) {
  return Crc32c(&n, offsetof(ExtentNode, crc));
}

uint64_t PageCeil(uint64_t x) {
  return (x + kPageSize - 1) / kPageSize * kPageSize;
}

// Pages of the next extent when `remaining` pages are left to cover: whole
// extents first, then the binary decomposition of the rest, so every data
// block is exactly one size class.
uint32_t NextExtentPages(uint64_t remaining) {
  if (remaining >= kMaxExtentPages) return kMaxExtentPages;
  uint32_t p = 1;
  while (uint64_t{p} * 2 <= remaining) p *= 2;
  return p;
}

}  // namespace

Status CheckObjectHeader(const char* base, uint64_t region_size, uint64_t header,
                         const ObjectId& id) {
  if (!RecordInBounds(region_size, header, sizeof(ObjectHeader))) {
    return Status::Corruption("object header offset outside the region");
  }
  auto* h = reinterpret_cast<const ObjectHeader*>(base + header);
  if (h->magic != kObjectHeaderMagic) return Status::Corruption("object header: bad magic");
  if (h->version != kFormatVersion) return Status::Corruption("object header: unsupported version");
  if (h->crc != HeaderCrc(*h)) return Status::Corruption("object header: crc mismatch");
  if (h->id_hi != id.hi || h->id_lo != id.lo) {
    return Status::Corruption("object header: belongs to another object ID");
  }
  return Status::OK();
}

Status CheckExtentNode(const char* base, uint64_t region_size, uint64_t node) {
  if (!RecordInBounds(region_size, node, kExtentNodeFixedSize)) {
    return Status::Corruption("extent node offset outside the region");
  }
  auto* n = reinterpret_cast<const ExtentNode*>(base + node);
  if (n->magic != kExtentMagic) return Status::Corruption("extent node: bad magic");
  if (n->version != kFormatVersion) return Status::Corruption("extent node: unsupported version");
  if (n->level < 1 || n->level > kMaxLevel ||
      !RecordInBounds(region_size, node, ExtentNodeSize(n->level))) {
    return Status::Corruption("extent node: bad level");
  }
  if (n->crc != NodeCrc(*n)) return Status::Corruption("extent node: crc mismatch");
  uint64_t bytes = uint64_t{n->pages} * kPageSize;
  if (n->pages == 0 || n->pages > kMaxExtentPages || (n->pages & (n->pages - 1)) != 0 ||
      n->offset % kPageSize != 0 || n->offset > kMaxObjectSize - bytes || n->valid_bytes == 0 ||
      n->valid_bytes > bytes) {
    return Status::Corruption("extent node: bad extent geometry");
  }
  if (n->data % kPageSize != 0 || !RecordInBounds(region_size, n->data, bytes)) {
    return Status::Corruption("extent node: data block outside the region");
  }
  return Status::OK();
}

uint32_t ExtentDataCrc(const char* base, const ExtentNode& node) {
  return Crc32c(base + node.data, uint64_t{node.pages} * kPageSize);
}

int SkipList::RandomLevel() {
  int level = 1;
  while (level < kMaxLevel && (rng_() & 3) == 0) ++level;
  return level;
}

Status SkipList::MakeExtents(uint64_t begin, uint64_t end, uint64_t size_after,
                             const std::function<void(char*, uint64_t, uint64_t)>& fill,
                             std::vector<uint64_t>* nodes) {
  for (uint64_t off = begin; off < end;) {
    uint32_t pages = NextExtentPages((end - off) / kPageSize);
    uint64_t bytes = uint64_t{pages} * kPageSize;
    int level = RandomLevel();
    uint64_t data;
    Status s = alloc_->Allocate(bytes, BlockOwner::kObjectStore, PAllocator::kCurrentCore, &data);
    if (!s.ok()) {
      PDPM_RETURN_IF_ERROR(FreeExtents(*nodes));
      return s;
    }
    char* dst = alloc_->At<char>(data);
    fill(dst, off, bytes);
    alloc_->Persist(dst, bytes);
    uint64_t node;
    s = alloc_->Allocate(ExtentNodeSize(level), BlockOwner::kObjectStore, PAllocator::kCurrentCore,
                         &node);
    if (!s.ok()) {
      PDPM_RETURN_IF_ERROR(alloc_->Free(data, BlockOwner::kObjectStore));
      PDPM_RETURN_IF_ERROR(FreeExtents(*nodes));
      return s;
    }
    ExtentNode* n = Node(node);
    memset(n, 0, ExtentNodeSize(level));
    n->magic = kExtentMagic;
    n->version = kFormatVersion;
    n->level = static_cast<uint8_t>(level);
    n->pages = static_cast<uint16_t>(pages);
    n->valid_bytes = static_cast<uint32_t>(std::min(bytes, size_after - off));
    n->offset = off;
    n->data = data;
    n->data_crc = Crc32c(dst, bytes);
    n->crc = NodeCrc(*n);
    nodes->push_back(node);
    off += bytes;
  }
  return Status::OK();
}

void SkipList::LinkChain(const std::vector<uint64_t>& nodes, const uint64_t* succ,
                         uint64_t* first) {
  uint64_t* prev[kMaxLevel] = {};
  for (uint64_t n : nodes) {
    ExtentNode* node = Node(n);
    for (int l = 0; l < node->level; ++l) {
      if (prev[l] != nullptr) {
        prev[l][l] = n;
      } else {
        first[l] = n;
      }
      prev[l] = node->next;
    }
  }
  for (int l = 0; l < kMaxLevel; ++l) {
    if (prev[l] != nullptr) {
      prev[l][l] = succ[l];
    } else {
      first[l] = succ[l];
    }
  }
  for (uint64_t n : nodes) alloc_->Persist(Node(n), ExtentNodeSize(Node(n)->level));
}

Status SkipList::FreeExtents(const std::vector<uint64_t>& nodes) {
  for (uint64_t n : nodes) {
    PDPM_RETURN_IF_ERROR(alloc_->Free(Node(n)->data, BlockOwner::kObjectStore));
    PDPM_RETURN_IF_ERROR(alloc_->Free(n, BlockOwner::kObjectStore));
  }
  return Status::OK();
}

Status SkipList::Build(const ObjectId& id, std::string_view value, uint64_t* header) {
  std::vector<uint64_t> nodes;
  auto fill = [&](char* dst, uint64_t off, uint64_t len) {
    uint64_t n = off < value.size() ? std::min<uint64_t>(len, value.size() - off) : 0;
    memcpy(dst, value.data() + off, n);
    memset(dst + n, 0, len - n);
  };
  PDPM_RETURN_IF_ERROR(MakeExtents(0, PageCeil(value.size()), value.size(), fill, &nodes));
  uint64_t h;
  Status s = alloc_->Allocate(sizeof(ObjectHeader), BlockOwner::kObjectStore,
                              PAllocator::kCurrentCore, &h);
  if (!s.ok()) {
    PDPM_RETURN_IF_ERROR(FreeExtents(nodes));
    return s;
  }
  ObjectHeader* hdr = Header(h);
  memset(hdr, 0, sizeof(*hdr));
  hdr->magic = kObjectHeaderMagic;
  hdr->id_hi = id.hi;
  hdr->id_lo = id.lo;
  hdr->version = kFormatVersion;
  hdr->crc = HeaderCrc(*hdr);
  const uint64_t none[kMaxLevel] = {};
  LinkChain(nodes, none, hdr->head);
  alloc_->Persist(hdr, sizeof(*hdr));
  *header = h;
  return Status::OK();
}

uint64_t SkipList::Size(uint64_t header) const {
  const uint64_t* x = Header(header)->head;
  uint64_t last = 0;
  for (int l = kMaxLevel - 1; l >= 0; --l) {
    while (x[l] != 0) {
      last = x[l];
      x = Node(last)->next;
    }
  }
  return last == 0 ? 0 : Node(last)->offset + Node(last)->valid_bytes;
}

void SkipList::Read(uint64_t header, uint64_t offset, uint64_t length, char* out) const {
  memset(out, 0, length);
  const uint64_t* x = Header(header)->head;
  for (int l = kMaxLevel - 1; l >= 0; --l) {
    while (x[l] != 0 && Node(x[l])->end() <= offset) x = Node(x[l])->next;
  }
  uint64_t end = offset + length;
  for (uint64_t n = x[0]; n != 0 && Node(n)->offset < end; n = Node(n)->next[0]) {
    const ExtentNode* node = Node(n);
    uint64_t from = std::max(offset, node->offset);
    uint64_t to = std::min(end, node->end());
    memcpy(out + (from - offset), alloc_->At<char>(node->data) + (from - node->offset), to - from);
  }
}

Status SkipList::Replace(uint64_t** preds, const std::vector<uint64_t>& fresh, const uint64_t* succ,
                         const std::vector<uint64_t>& old) {
  uint64_t first[kMaxLevel];
  LinkChain(fresh, succ, first);
  // The switch: from here on the new extents are the object.
  alloc_->StoreAndPersist(&preds[0][0], first[0]);
  for (int l = 1; l < kMaxLevel; ++l) {
    if (preds[l][l] != first[l]) alloc_->StoreAndPersist(&preds[l][l], first[l]);
  }
  return FreeExtents(old);
}

void SkipList::FindPreds(uint64_t header, uint64_t offset, uint64_t** preds) const {
  uint64_t* x = Header(header)->head;
  for (int l = kMaxLevel - 1; l >= 0; --l) {
    while (x[l] != 0 && Node(x[l])->end() <= offset) x = Node(x[l])->next;
    preds[l] = x;
  }
}

Status SkipList::Write(uint64_t header, uint64_t offset, std::string_view data) {
  if (data.empty()) return Status::OK();
  uint64_t end = offset + data.size();
  uint64_t p0 = offset / kPageSize * kPageSize;
  uint64_t p1 = PageCeil(end);
  uint64_t* preds[kMaxLevel];
  FindPreds(header, p0, preds);
  std::vector<uint64_t> old;
  for (uint64_t n = preds[0][0]; n != 0 && Node(n)->offset < p1; n = Node(n)->next[0]) {
    old.push_back(n);
  }
  // The rewritten range covers whole old extents.
  uint64_t begin = old.empty() ? p0 : std::min(p0, Node(old.front())->offset);
  uint64_t stop = old.empty() ? p1 : std::max(p1, Node(old.back())->end());
  uint64_t succ[kMaxLevel];
  for (int l = 0; l < kMaxLevel; ++l) {
    uint64_t s = preds[l][l];
    while (s != 0 && Node(s)->offset < stop) s = Node(s)->next[l];
    succ[l] = s;
  }
  auto fill = [&](char* dst, uint64_t off, uint64_t len) {
    memset(dst, 0, len);
    for (uint64_t n : old) {
      const ExtentNode* node = Node(n);
      uint64_t from = std::max(off, node->offset);
      uint64_t to = std::min(off + len, node->end());
      if (from < to) {
        memcpy(dst + (from - off), alloc_->At<char>(node->data) + (from - node->offset), to - from);
      }
    }
    uint64_t from = std::max(off, offset);
    uint64_t to = std::min(off + len, end);
    if (from < to) memcpy(dst + (from - off), data.data() + (from - offset), to - from);
  };
  std::vector<uint64_t> fresh;
  PDPM_RETURN_IF_ERROR(MakeExtents(begin, stop, std::max(Size(header), end), fill, &fresh));
  return Replace(preds, fresh, succ, old);
}

Status SkipList::Truncate(uint64_t header, uint64_t size) {
  if (size >= Size(header)) return Status::OK();
  // [p0, p1) is the page holding the last byte kept; it and everything
  // after it is replaced by a copy of what lies below `size`.
  const uint64_t p0 = size == 0 ? 0 : (size - 1) / kPageSize * kPageSize;
  const uint64_t p1 = PageCeil(size);
  uint64_t* preds[kMaxLevel];
  FindPreds(header, p0, preds);
  std::vector<uint64_t> old;
  for (uint64_t n = preds[0][0]; n != 0; n = Node(n)->next[0]) old.push_back(n);
  const uint64_t begin = old.empty() ? p0 : std::min(p0, Node(old.front())->offset);
  auto fill = [&](char* dst, uint64_t off, uint64_t len) {
    memset(dst, 0, len);
    for (uint64_t n : old) {
      const ExtentNode* node = Node(n);
      uint64_t from = std::max(off, node->offset);
      uint64_t to = std::min({off + len, node->end(), size});
      if (from < to) {
        memcpy(dst + (from - off), alloc_->At<char>(node->data) + (from - node->offset), to - from);
      }
    }
  };
  std::vector<uint64_t> fresh;
  if (size > 0) PDPM_RETURN_IF_ERROR(MakeExtents(begin, p1, size, fill, &fresh));
  const uint64_t none[kMaxLevel] = {};
  return Replace(preds, fresh, none, old);
}

Status SkipList::Destroy(uint64_t header) {
  std::vector<uint64_t> nodes;
  for (uint64_t n = Header(header)->head[0]; n != 0; n = Node(n)->next[0]) nodes.push_back(n);
  PDPM_RETURN_IF_ERROR(FreeExtents(nodes));
  return alloc_->Free(header, BlockOwner::kObjectStore);
}

void SkipList::Trace(uint64_t header, std::unordered_set<uint64_t>* blocks) const {
  blocks->insert(header);
  for (uint64_t n = Header(header)->head[0]; n != 0; n = Node(n)->next[0]) {
    blocks->insert(n);
    blocks->insert(Node(n)->data);
  }
}

Status SkipList::Validate(uint64_t header, const ObjectId& id) const {
  const char* base = alloc_->base();
  uint64_t region_size = alloc_->region_size();
  PDPM_RETURN_IF_ERROR(CheckObjectHeader(base, region_size, header, id));
  uint64_t prev_end = 0;
  uint64_t budget = kMaxObjectSize / kPageSize;
  for (uint64_t n = Header(header)->head[0]; n != 0; n = Node(n)->next[0]) {
    PDPM_RETURN_IF_ERROR(CheckExtentNode(base, region_size, n));
    if (Node(n)->offset < prev_end) return Status::Corruption("extents overlap or are unsorted");
    if (budget-- == 0) return Status::Corruption("extent list has a cycle");
    prev_end = Node(n)->end();
  }
  return Status::OK();
}

uint64_t SkipList::RebuildTowers(uint64_t header) {
  uint64_t* head = Header(header)->head;
  uint64_t* last[kMaxLevel];
  std::fill(std::begin(last), std::end(last), head);
  uint64_t changed = 0;
  auto link = [&](int l, uint64_t target) {
    if (last[l][l] != target) {
      alloc_->StoreAndPersist(&last[l][l], target);
      ++changed;
    }
  };
  for (uint64_t n = Header(header)->head[0]; n != 0; n = Node(n)->next[0]) {
    ExtentNode* node = Node(n);
    for (int l = 1; l < node->level; ++l) {
      link(l, n);
      last[l] = node->next;
    }
  }
  for (int l = 1; l < kMaxLevel; ++l) link(l, 0);
  return changed;
}

}  // namespace pdpm::dsm
