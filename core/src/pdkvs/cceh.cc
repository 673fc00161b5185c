#include "pdkvs/cceh.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/crc32c.h"

namespace pdpm::pdkvs {
namespace {

using dsm::BlockOwner;
using dsm::HexOffset;
using dsm::PAllocator;

constexpr uint64_t kIndexMagic = 0x48434543564b4450ull;    // "PDKVCECH"
constexpr uint64_t kDirMagic = 0x5249444456564b44ull;      // "DKVVDDIR"
constexpr uint64_t kSegmentMagic = 0x4745535656564b44ull;  // "DKVVVSEG"
constexpr uint32_t kIndexVersion = 1;
constexpr uint32_t kSlotsPerBucket = 4;
constexpr uint32_t kMaxBuckets = 1024;
// Hash bits a directory may use; a segment never gets deeper.
constexpr uint32_t kMaxDepth = 40;

// The entry point of an index; one cache line.
struct IndexHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t buckets_per_segment;
  uint32_t probe_buckets;
  uint32_t crc;        // crc32c of the 20 bytes above
  uint64_t directory;  // the current directory block, switched by one store
  uint64_t reserved[4];
};
static_assert(sizeof(IndexHeader) == 64);

// A directory block: this header, then 2^global_depth segment offsets.
// Entry i serves the hashes whose top global_depth bits are i.
struct DirectoryHeader {
  uint64_t magic;
  uint32_t global_depth;
  uint32_t crc;  // crc32c of the 12 bytes above
  uint64_t reserved[6];
};
static_assert(sizeof(DirectoryHeader) == 64);

// A segment block: this header, then buckets of 4 slots (one cache line
// each). The segment holds the hashes whose top `depth` bits are `pattern`.
struct SegmentHeader {
  uint64_t magic;
  uint64_t depth_pattern;  // depth (bits 0-7) | pattern << 8: one store
  uint64_t reserved[6];
};
static_assert(sizeof(SegmentHeader) == 64);

uint64_t EncodeDepth(uint32_t depth, uint64_t pattern) {
  return depth | pattern << 8;
}
uint32_t DepthOf(uint64_t word) {
  return word & 0xff;
}
uint64_t PatternOf(uint64_t word) {
  return word >> 8;
}
// The top `depth` bits of a hash.
uint64_t Prefix(uint64_t hash, uint32_t depth) {
  return depth == 0 ? 0 : hash >> (64 - depth);
}

void Store(uint64_t* word, uint64_t value) {
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
}
uint64_t Load(const uint64_t* word) {
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

uint32_t HeaderCrc(const IndexHeader& h) {
  return Crc32c(&h, 20);
}
uint32_t DirectoryCrc(const DirectoryHeader& d) {
  return Crc32c(&d, 12);
}

Status ValidateGeometry(uint32_t buckets, uint32_t probe) {
  if (buckets == 0 || buckets > kMaxBuckets || probe == 0 || probe > buckets) {
    return Status::InvalidArgument(
        "index geometry needs 1..1024 buckets per segment and 1..buckets "
        "probe buckets, not " +
        std::to_string(buckets) + " and " + std::to_string(probe));
  }
  return Status::OK();
}

}  // namespace

struct CcehSlot {
  uint64_t hash;
  uint64_t item;  // 0: empty; published and cleared by one store
};
static_assert(sizeof(CcehSlot) * kSlotsPerBucket == 64);

struct CcehIndex::SegmentLock {
  explicit SegmentLock(uint64_t off) : offset(off) {}
  const uint64_t offset;  // the segment's
  std::shared_mutex mu;
};

struct CcehIndex::Change {
  Mutation::Kind kind = Mutation::kKeep;
  std::string_view value;
  ItemMeta meta;
};

// Addressing of the blocks of one index.
class CcehLayout {
 public:
  CcehLayout(const PAllocator* alloc, uint64_t header_offset)
      : alloc_(alloc),
        header_offset_(header_offset),
        buckets_(header()->buckets_per_segment),
        probe_(header()->probe_buckets) {}

  // kCorruption unless `offset` holds a valid index header.
  static Status ValidateHeader(const PAllocator& alloc, uint64_t offset) {
    if (!dsm::RecordInBounds(alloc.region_size(), offset, sizeof(IndexHeader))) {
      return Status::Corruption("index header " + HexOffset(offset) + " is outside the region");
    }
    const auto* h = alloc.At<const IndexHeader>(offset);
    if (h->magic != kIndexMagic || h->crc != HeaderCrc(*h)) {
      return Status::Corruption("no valid index header at " + HexOffset(offset));
    }
    if (h->version != kIndexVersion) {
      return Status::Corruption("index format version " + std::to_string(h->version) +
                                " is not supported");
    }
    return ValidateGeometry(h->buckets_per_segment, h->probe_buckets)
        .WithContext("index header " + HexOffset(offset));
  }

  IndexHeader* header() const { return alloc_->At<IndexHeader>(header_offset_); }
  uint64_t directory() const { return Load(&header()->directory); }
  DirectoryHeader* dir() const { return alloc_->At<DirectoryHeader>(directory()); }
  uint64_t* entries() const { return reinterpret_cast<uint64_t*>(dir() + 1); }
  uint32_t global_depth() const { return dir()->global_depth; }
  static uint64_t DirectoryBytes(uint32_t depth) {
    return sizeof(DirectoryHeader) + (sizeof(uint64_t) << depth);
  }

  // kCorruption unless the current directory block is valid.
  Status ValidateDirectory() const {
    uint64_t off = directory();
    const uint64_t region = alloc_->region_size();
    if (!dsm::RecordInBounds(region, off, sizeof(DirectoryHeader))) {
      return Status::Corruption("directory " + HexOffset(off) + " is outside the region");
    }
    const DirectoryHeader* d = dir();
    if (d->magic != kDirMagic || d->crc != DirectoryCrc(*d) || d->global_depth > kMaxDepth) {
      return Status::Corruption("no valid directory at " + HexOffset(off));
    }
    if (!dsm::RecordInBounds(region, off, DirectoryBytes(d->global_depth))) {
      return Status::Corruption("directory " + HexOffset(off) + " runs past the region");
    }
    return Status::OK();
  }

  uint64_t segment_bytes() const { return SegmentBytes(buckets_); }
  static uint64_t SegmentBytes(uint32_t buckets) {
    return sizeof(SegmentHeader) + uint64_t{buckets} * 64;
  }
  SegmentHeader* seg(uint64_t off) const { return alloc_->At<SegmentHeader>(off); }
  uint32_t depth(uint64_t seg_off) const { return DepthOf(Load(&seg(seg_off)->depth_pattern)); }
  uint64_t pattern(uint64_t seg_off) const { return PatternOf(Load(&seg(seg_off)->depth_pattern)); }

  // kCorruption unless `off` holds a segment no deeper than `global_depth`.
  Status ValidateSegment(uint64_t off, uint32_t global_depth) const {
    if (!dsm::RecordInBounds(alloc_->region_size(), off, segment_bytes())) {
      return Status::Corruption("segment " + HexOffset(off) + " is outside the region");
    }
    uint32_t d = depth(off);
    if (seg(off)->magic != kSegmentMagic || d > global_depth || pattern(off) >> d != 0) {
      return Status::Corruption("no valid segment at " + HexOffset(off));
    }
    return Status::OK();
  }

  uint32_t slot_count() const { return buckets_ * kSlotsPerBucket; }
  CcehSlot* slot(uint64_t seg_off, uint32_t index) const {
    return reinterpret_cast<CcehSlot*>(seg(seg_off) + 1) + index;
  }
  uint32_t home(uint64_t hash) const { return static_cast<uint32_t>(hash % buckets_); }
  uint32_t probe() const { return probe_; }
  uint32_t buckets() const { return buckets_; }
  // Whether the slot index lies in the probe window of `hash`.
  bool InWindow(uint64_t hash, uint32_t index) const {
    uint32_t bucket = index / kSlotsPerBucket;
    return (bucket + buckets_ - home(hash)) % buckets_ < probe_;
  }

  bool Covers(uint64_t seg_off, uint64_t hash) const {
    uint64_t w = Load(&seg(seg_off)->depth_pattern);
    return Prefix(hash, DepthOf(w)) == PatternOf(w);
  }

 private:
  const PAllocator* alloc_;
  uint64_t header_offset_;
  uint32_t buckets_;
  uint32_t probe_;
};

namespace {

// A segment as the directory walk found it, with the depth and pattern it
// has once an interrupted split of it is completed.
struct SegmentRef {
  uint64_t offset;
  uint32_t depth;
  uint64_t pattern;
};

// A split of `parent` interrupted between its directory updates: the upper
// half of its entries [first, first + count) must all point to `child`.
struct InterruptedSplit {
  uint64_t parent;
  uint64_t child;
  uint64_t first;
  uint64_t count;
};

}  // namespace

// Walks the directory range by range. A segment of depth d appears in the
// 2^(G-d) entries whose index has the segment's pattern as prefix, and in
// no other. The one allowed deviation is what a crash leaves during a
// split: some entries of the upper half already point to the new segment
// (depth d+1, pattern 2p+1) while the old one still has depth d.
static Status WalkDirectory(const CcehLayout& L, std::vector<SegmentRef>* segments,
                            std::vector<InterruptedSplit>* interrupted) {
  PDPM_RETURN_IF_ERROR(L.ValidateDirectory());
  const uint32_t g = L.global_depth();
  const uint64_t* e = L.entries();
  const uint64_t n = uint64_t{1} << g;
  for (uint64_t i = 0; i < n;) {
    uint64_t x = Load(&e[i]);
    PDPM_RETURN_IF_ERROR(
        L.ValidateSegment(x, g).WithContext("directory entry " + std::to_string(i)));
    uint32_t d = L.depth(x);
    uint64_t span = uint64_t{1} << (g - d);
    if (i % span != 0 || L.pattern(x) != i >> (g - d)) {
      return Status::Corruption("directory entry " + std::to_string(i) + " points to segment " +
                                HexOffset(x) + " whose depth and pattern do not cover it");
    }
    uint64_t child = 0;
    for (uint64_t j = i + 1; j < i + span; ++j) {
      uint64_t y = Load(&e[j]);
      if (y == x) continue;
      bool upper = j >= i + span / 2;
      if (!upper || (child != 0 && y != child)) {
        return Status::Corruption("directory entries " + std::to_string(i) + ".." +
                                  std::to_string(i + span - 1) + " of segment " + HexOffset(x) +
                                  " point to other segments");
      }
      if (child == 0) {
        PDPM_RETURN_IF_ERROR(
            L.ValidateSegment(y, g).WithContext("directory entry " + std::to_string(j)));
        if (L.depth(y) != d + 1 || L.pattern(y) != (L.pattern(x) << 1 | 1)) {
          return Status::Corruption("directory entry " + std::to_string(j) + " points to segment " +
                                    HexOffset(y) + " that is no split half of " + HexOffset(x));
        }
        child = y;
      }
    }
    if (child == 0) {
      segments->push_back({x, d, L.pattern(x)});
    } else {
      segments->push_back({x, d + 1, L.pattern(x) << 1});
      segments->push_back({child, d + 1, L.pattern(x) << 1 | 1});
      interrupted->push_back({x, child, i + span / 2, span / 2});
    }
    i += span;
  }
  return Status::OK();
}

std::string CcehCheckReport::ToString() const {
  std::string s = std::to_string(segments) + " segments, " + std::to_string(items) + " items, " +
                  std::to_string(interrupted_splits) + " interrupted splits, " +
                  std::to_string(stale_slots) + " stale slots, " +
                  std::to_string(violations.size()) + " violations";
  for (const std::string& v : violations) s += "\n  " + v;
  return s;
}

CcehIndex::CcehIndex(PAllocator* alloc, uint64_t header_offset, const CcehOptions& options)
    : alloc_(alloc),
      header_offset_(header_offset),
      options_(options),
      layout_(std::make_unique<CcehLayout>(alloc, header_offset)) {}

CcehIndex::~CcehIndex() = default;

uint64_t CcehIndex::NowMs() const {
  if (options_.clock_ms) return options_.clock_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status CcehIndex::Create(PAllocator* alloc, const CcehOptions& options, uint64_t* header_offset,
                         std::unique_ptr<CcehIndex>* out) {
  PDPM_RETURN_IF_ERROR(ValidateGeometry(options.buckets_per_segment, options.probe_buckets));
  if (alloc->region_size() >> 48 != 0) {
    return Status::InvalidArgument("region over 256 TiB: offsets do not fit a slot");
  }
  const int core = PAllocator::kCurrentCore;
  const uint64_t seg_bytes = Layout::SegmentBytes(options.buckets_per_segment);
  const uint64_t dir_bytes = Layout::DirectoryBytes(0);
  uint64_t seg = 0, dir = 0, head = 0;
  Status s = alloc->Allocate(seg_bytes, BlockOwner::kKvStore, core, &seg);
  if (s.ok()) s = alloc->Allocate(dir_bytes, BlockOwner::kKvStore, core, &dir);
  if (s.ok()) s = alloc->Allocate(sizeof(IndexHeader), BlockOwner::kKvStore, core, &head);
  if (!s.ok()) {
    // Blocks not yet reachable from anything: give them back now.
    for (uint64_t off : {seg, dir}) {
      if (off != 0) alloc->Free(off, BlockOwner::kKvStore).ok();
    }
    return s;
  }
  auto* sh = alloc->At<SegmentHeader>(seg);
  std::memset(sh, 0, seg_bytes);
  sh->magic = kSegmentMagic;
  sh->depth_pattern = EncodeDepth(0, 0);
  alloc->Persist(sh, seg_bytes);

  auto* dh = alloc->At<DirectoryHeader>(dir);
  std::memset(dh, 0, dir_bytes);
  dh->magic = kDirMagic;
  dh->global_depth = 0;
  dh->crc = DirectoryCrc(*dh);
  reinterpret_cast<uint64_t*>(dh + 1)[0] = seg;
  alloc->Persist(dh, dir_bytes);

  auto* h = alloc->At<IndexHeader>(head);
  std::memset(h, 0, sizeof(*h));
  h->magic = kIndexMagic;
  h->version = kIndexVersion;
  h->buckets_per_segment = options.buckets_per_segment;
  h->probe_buckets = options.probe_buckets;
  h->crc = HeaderCrc(*h);
  h->directory = dir;
  alloc->Persist(h, sizeof(*h));

  std::unique_ptr<CcehIndex> index(new CcehIndex(alloc, head, options));
  index->locks_.emplace(seg, std::make_unique<SegmentLock>(seg));
  index->MirrorDirectory();
  *header_offset = head;
  *out = std::move(index);
  return Status::OK();
}

Status CcehIndex::Open(PAllocator* alloc, uint64_t header_offset, const CcehOptions& options,
                       std::unique_ptr<CcehIndex>* out) {
  PDPM_RETURN_IF_ERROR(Layout::ValidateHeader(*alloc, header_offset));
  std::unique_ptr<CcehIndex> index(new CcehIndex(alloc, header_offset, options));
  PDPM_RETURN_IF_ERROR(index->Recover());
  *out = std::move(index);
  return Status::OK();
}

Status CcehIndex::Recover() {
  const Layout& L = *layout_;
  std::vector<SegmentRef> segments;
  std::vector<InterruptedSplit> interrupted;
  PDPM_RETURN_IF_ERROR(WalkDirectory(L, &segments, &interrupted));
  // Complete interrupted splits: the new segment was persisted whole before
  // the first entry pointed to it, so pointing the rest of the upper half
  // to it and deepening the old segment finishes what the split began.
  uint64_t* e = layout_->entries();
  for (const InterruptedSplit& split : interrupted) {
    for (uint64_t j = split.first; j < split.first + split.count; ++j) Store(&e[j], split.child);
    alloc_->Persist(&e[split.first], split.count * sizeof(uint64_t));
    uint64_t w = Load(&L.seg(split.parent)->depth_pattern);
    alloc_->StoreAndPersist(&L.seg(split.parent)->depth_pattern,
                            EncodeDepth(DepthOf(w) + 1, PatternOf(w) << 1));
  }
  uint64_t items = 0, expiring = 0;
  for (const SegmentRef& ref : segments) {
    ClearStaleSlots(ref.offset);
    for (uint32_t i = 0; i < L.slot_count(); ++i) {
      Slot* slot = L.slot(ref.offset, i);
      uint64_t item = Load(&slot->item);
      if (item == 0) continue;
      ItemView view;
      Status s = ItemView::Open(*alloc_, item, &view);
      if (s.ok() && (view.header().hash != slot->hash || !L.InWindow(slot->hash, i))) {
        s = Status::Corruption("item " + HexOffset(item) + " does not belong to its slot");
      }
      PDPM_RETURN_IF_ERROR(s.WithContext("segment " + HexOffset(ref.offset)));
      ++items;
      if (view.meta().expire_at_ms != 0) ++expiring;
    }
    locks_.emplace(ref.offset, std::make_unique<SegmentLock>(ref.offset));
  }
  MirrorDirectory();
  items_.store(items);
  expiring_.store(expiring);
  return Status::OK();
}

void CcehIndex::ClearStaleSlots(uint64_t seg) {
  const Layout& L = *layout_;
  bool cleared = false;
  for (uint32_t i = 0; i < L.slot_count(); ++i) {
    Slot* slot = L.slot(seg, i);
    if (Load(&slot->item) != 0 && !L.Covers(seg, slot->hash)) {
      Store(&slot->item, 0);
      cleared = true;
    }
  }
  if (cleared) alloc_->Persist(L.slot(seg, 0), uint64_t{L.slot_count()} * sizeof(Slot));
}

CcehCheckReport CcehIndex::Check(PAllocator* alloc, uint64_t header_offset) {
  CcehCheckReport r;
  Status s = Layout::ValidateHeader(*alloc, header_offset);
  if (!s.ok()) {
    r.violations.push_back(s.ToString());
    return r;
  }
  CcehLayout L(alloc, header_offset);
  // Every reachable block: an allocated index block of at least `need` bytes.
  auto block = [&](uint64_t off, uint64_t need, const char* what) {
    uint64_t size = 0;
    Status b = alloc->BlockSize(off, BlockOwner::kKvStore, &size);
    if (!b.ok()) {
      r.violations.push_back(std::string(what) + " " + HexOffset(off) +
                             " is not an allocated index block: " + b.ToString());
    } else if (size < need) {
      r.violations.push_back(std::string(what) + " " + HexOffset(off) + " needs " +
                             std::to_string(need) + " bytes, its block has " +
                             std::to_string(size));
    }
    r.reachable.insert(off);
  };
  block(header_offset, sizeof(IndexHeader), "index header");
  std::vector<SegmentRef> segments;
  std::vector<InterruptedSplit> interrupted;
  s = WalkDirectory(L, &segments, &interrupted);
  if (!s.ok()) {
    r.violations.push_back(s.ToString());
    return r;
  }
  block(L.directory(), Layout::DirectoryBytes(L.global_depth()), "directory");
  r.interrupted_splits = interrupted.size();
  r.segments = segments.size();
  for (const SegmentRef& ref : segments) {
    block(ref.offset, L.segment_bytes(), "segment");
    std::unordered_map<uint64_t, std::vector<std::string_view>> keys;  // by hash
    for (uint32_t i = 0; i < L.slot_count(); ++i) {
      const Slot* slot = L.slot(ref.offset, i);
      if (slot->item == 0) continue;
      if (Prefix(slot->hash, ref.depth) != ref.pattern) {
        ++r.stale_slots;
        continue;
      }
      std::string where = "slot " + std::to_string(i) + " of segment " + HexOffset(ref.offset);
      ItemView view;
      s = ItemView::Open(*alloc, slot->item, &view);
      if (s.ok()) s = view.VerifyChecksum();
      if (!s.ok()) {
        r.violations.push_back(where + ": " + s.ToString());
        continue;
      }
      if (r.reachable.count(slot->item) != 0) {
        r.violations.push_back(where + ": item " + HexOffset(slot->item) + " is reached twice");
        continue;
      }
      block(slot->item, view.size(), "item");
      if (view.header().hash != slot->hash || HashKey(view.key()) != slot->hash) {
        r.violations.push_back(where + ": item hash does not match its key or slot");
      } else if (!L.InWindow(slot->hash, i)) {
        r.violations.push_back(where + ": outside the probe window of its key");
      }
      std::vector<std::string_view>& same = keys[slot->hash];
      if (std::find(same.begin(), same.end(), view.key()) != same.end()) {
        r.violations.push_back(where + ": key stored twice");
      }
      same.push_back(view.key());
      if (view.header().flags == kItemFlagHash) r.hashes.emplace_back(view.key(), view.value());
      ++r.items;
    }
  }
  return r;
}

void CcehIndex::AddReachable(std::unordered_set<uint64_t>* reachable) {
  const Layout& L = *layout_;
  std::vector<std::pair<uint64_t, std::shared_mutex*>> segments;
  {
    std::shared_lock<std::shared_mutex> dl(dir_mu_);
    reachable->insert(header_offset_);
    reachable->insert(L.directory());
    for (const auto& [seg, lock] : locks_) segments.emplace_back(seg, &lock->mu);
  }
  // Segment locks are taken without dir_mu_ held (the lock order).
  for (const auto& [seg, mu] : segments) {
    std::shared_lock<std::shared_mutex> sl(*mu);
    reachable->insert(seg);
    for (uint32_t i = 0; i < L.slot_count(); ++i) {
      const Slot* slot = L.slot(seg, i);
      if (slot->item != 0 && L.Covers(seg, slot->hash)) reachable->insert(slot->item);
    }
  }
}

Status CcehIndex::ReclaimUnreachable(PAllocator* alloc, std::span<CcehIndex* const> indexes,
                                     uint64_t* reclaimed) {
  std::unordered_set<uint64_t> reachable;
  for (CcehIndex* index : indexes) index->AddReachable(&reachable);
  return alloc->ReclaimUnreachable(BlockOwner::kKvStore, reachable, reclaimed);
}

void CcehIndex::MirrorDirectory() {
  const Layout& L = *layout_;
  dir_depth_ = L.global_depth();
  const uint64_t* e = L.entries();
  dir_locks_.resize(uint64_t{1} << dir_depth_);
  for (uint64_t j = 0; j < dir_locks_.size(); ++j) dir_locks_[j] = locks_.at(Load(&e[j])).get();
}

template <typename Lock>
uint64_t CcehIndex::LockSegment(uint64_t hash, Lock* lock) {
  for (;;) {
    uint64_t seg;
    std::shared_mutex* mu;
    {
      std::shared_lock<std::shared_mutex> dl(dir_mu_);
      SegmentLock* sl = dir_locks_[Prefix(hash, dir_depth_)];
      seg = sl->offset;
      mu = &sl->mu;
    }
    Lock l(*mu);
    // A split may have moved the hash to a new segment in between.
    if (layout_->Covers(seg, hash)) {
      *lock = std::move(l);
      return seg;
    }
  }
}

Status CcehIndex::FindSlot(uint64_t seg, uint64_t hash, std::string_view key, Slot** found,
                           Slot** free_slot) {
  const Layout& L = *layout_;
  *found = nullptr;
  if (free_slot != nullptr) *free_slot = nullptr;
  const uint32_t home = L.home(hash);
  for (uint32_t p = 0; p < L.probe(); ++p) {
    uint32_t bucket = (home + p) % L.buckets();
    for (uint32_t k = 0; k < kSlotsPerBucket; ++k) {
      Slot* slot = L.slot(seg, bucket * kSlotsPerBucket + k);
      if (slot->item == 0) {
        if (free_slot != nullptr && *free_slot == nullptr) *free_slot = slot;
        continue;
      }
      if (slot->hash != hash) continue;
      ItemView view;
      PDPM_RETURN_IF_ERROR(ItemView::Open(*alloc_, slot->item, &view));
      if (view.key() == key) {
        *found = slot;
        return Status::OK();
      }
    }
  }
  return Status::OK();
}

void CcehIndex::CountExpiry(uint64_t before, uint64_t after) {
  if ((before == 0) == (after == 0)) return;
  if (after != 0) {
    expiring_.fetch_add(1, std::memory_order_relaxed);
  } else {
    expiring_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void CcehIndex::Dropping(uint64_t item) {
  if (!drop_hook_ || alloc_->At<ItemHeader>(item)->flags == 0) return;
  ItemView view;
  if (ItemView::Open(*alloc_, item, &view).ok()) drop_hook_(view);
}

Status CcehIndex::RemoveSlot(Slot* slot) {
  uint64_t item = slot->item;
  const uint64_t expire_at_ms = alloc_->At<ItemHeader>(item)->expire_at_ms;
  alloc_->StoreAndPersist(&slot->item, 0);
  Dropping(item);
  items_.fetch_sub(1, std::memory_order_relaxed);
  CountExpiry(expire_at_ms, 0);
  Status freed = alloc_->Free(item, BlockOwner::kKvStore);
  if (!freed.ok()) {
    return freed.WithContext("the removal is durable, freeing item " + HexOffset(item) + " failed");
  }
  return Status::OK();
}

Status CcehIndex::Get(std::string_view key, std::string* value, ItemMeta* meta) {
  return Lookup(key, value, meta, /*free_expired=*/true);
}

Status CcehIndex::Peek(std::string_view key, std::string* value, ItemMeta* meta) {
  return Lookup(key, value, meta, /*free_expired=*/false);
}

Status CcehIndex::Exists(std::string_view key, bool* exists) {
  Status s = Lookup(key, nullptr, nullptr, /*free_expired=*/true);
  *exists = s.ok();
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

Status CcehIndex::Lookup(std::string_view key, std::string* value, ItemMeta* meta,
                         bool free_expired) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  const uint64_t hash = HashKey(key);
  {
    std::shared_lock<std::shared_mutex> lock;
    uint64_t seg = LockSegment(hash, &lock);
    Slot* slot;
    PDPM_RETURN_IF_ERROR(FindSlot(seg, hash, key, &slot, nullptr));
    if (slot == nullptr) return Status::NotFound("no such key");
    ItemView view;
    PDPM_RETURN_IF_ERROR(ItemView::Open(*alloc_, slot->item, &view));
    if (!view.ExpiredAt(NowMs())) {
      if (value != nullptr) {
        PDPM_RETURN_IF_ERROR(view.VerifyChecksum());
        value->assign(view.value());
      }
      if (meta != nullptr) *meta = view.meta();
      return Status::OK();
    }
  }
  if (!free_expired) return Status::FailedPrecondition(kExpiredMessage);
  // Expired: free it (a change that keeps the key as it is does).
  PDPM_RETURN_IF_ERROR(
      Apply(key, /*may_insert=*/false, /*reads_old=*/false,
            [](const std::string_view*, const ItemMeta&, Change*) { return Status::OK(); }));
  return Status::NotFound("no such key (expired)");
}

Status CcehIndex::Put(std::string_view key, std::string_view value, const PutOptions& options) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, value.size()));
  return Apply(key, /*may_insert=*/true, /*reads_old=*/false,
               [&](const std::string_view* old, const ItemMeta& old_meta, Change* c) {
                 if (old != nullptr && options.mode == PutMode::kIfAbsent) {
                   return Status::AlreadyExists("key exists");
                 }
                 if (old == nullptr && options.mode == PutMode::kIfPresent) {
                   return Status::NotFound("no such key");
                 }
                 c->kind = Mutation::kPut;
                 c->value = value;
                 c->meta = options.meta;
                 if (options.keep_ttl && old != nullptr)
                   c->meta.expire_at_ms = old_meta.expire_at_ms;
                 return Status::OK();
               });
}

Status CcehIndex::Delete(std::string_view key) {
  return Apply(key, /*may_insert=*/false, /*reads_old=*/false,
               [](const std::string_view* old, const ItemMeta&, Change* c) {
                 if (old == nullptr) return Status::NotFound("no such key");
                 c->kind = Mutation::kDelete;
                 return Status::OK();
               });
}

Status CcehIndex::Update(std::string_view key, const UpdateFn& fn) {
  Mutation m;
  return Apply(key, /*may_insert=*/true, /*reads_old=*/true,
               [&](const std::string_view* old, const ItemMeta& old_meta, Change* c) {
                 PDPM_RETURN_IF_ERROR(fn(old, old_meta, &m));
                 c->kind = m.kind;
                 c->value = m.value;
                 c->meta = m.meta;
                 return Status::OK();
               });
}

Status CcehIndex::Apply(std::string_view key, bool may_insert, bool reads_old,
                        const Decide& decide) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  const uint64_t hash = HashKey(key);
  for (;;) {
    std::unique_lock<std::shared_mutex> lock;
    uint64_t seg = LockSegment(hash, &lock);
    Slot* found;
    Slot* free_slot;
    PDPM_RETURN_IF_ERROR(FindSlot(seg, hash, key, &found, &free_slot));
    ItemView view;
    if (found != nullptr) {
      PDPM_RETURN_IF_ERROR(ItemView::Open(*alloc_, found->item, &view));
      if (view.ExpiredAt(NowMs())) {
        PDPM_RETURN_IF_ERROR(RemoveSlot(found));
        free_slot = found;
        found = nullptr;
      }
    }
    if (may_insert && found == nullptr && free_slot == nullptr) {
      // No room in the key's probe window: split before deciding, so that
      // the decision is taken once, on the state it applies to.
      PDPM_RETURN_IF_ERROR(Split(seg));
      continue;
    }
    std::string_view old_value;
    if (found != nullptr && reads_old) {
      PDPM_RETURN_IF_ERROR(view.VerifyChecksum());
      old_value = view.value();
    }
    Change change;
    PDPM_RETURN_IF_ERROR(decide(found != nullptr ? &old_value : nullptr,
                                found != nullptr ? view.meta() : ItemMeta{}, &change));
    switch (change.kind) {
      case Mutation::kKeep: return Status::OK();
      case Mutation::kDelete: return found != nullptr ? RemoveSlot(found) : Status::OK();
      case Mutation::kSetExpiry:
        if (found == nullptr) return Status::NotFound("no such key to set the expiry of");
        // Outside the checksum: one persisted store, old or new after a crash.
        CountExpiry(view.meta().expire_at_ms, change.meta.expire_at_ms);
        alloc_->StoreAndPersist(&alloc_->At<ItemHeader>(found->item)->expire_at_ms,
                                change.meta.expire_at_ms);
        return Status::OK();
      case Mutation::kPut: break;
    }
    if (found == nullptr && free_slot == nullptr) {
      return Status::Internal("a change that may not insert the key inserted it");
    }
    uint64_t item;
    PDPM_RETURN_IF_ERROR(WriteItem(alloc_, key, change.value, change.meta, hash, &item));
    if (found != nullptr) {
      // The slot already carries the key's hash: one store switches it; the
      // old item is freed only once the switch is durable.
      uint64_t old = found->item;
      CountExpiry(view.meta().expire_at_ms, change.meta.expire_at_ms);
      alloc_->StoreAndPersist(&found->item, item);
      // A flagged item (a hash's header) replaced by another: dropped.
      if (view.meta().flags != 0 &&
          (view.meta().flags != change.meta.flags || view.value() != change.value)) {
        Dropping(old);
      }
      Status freed = alloc_->Free(old, BlockOwner::kKvStore);
      if (!freed.ok()) {
        return freed.WithContext("the update is durable, freeing item " + HexOffset(old) +
                                 " failed");
      }
      return Status::OK();
    }
    // The hash first, durable while the slot is still empty; then the item.
    Store(&free_slot->hash, hash);
    alloc_->Persist(&free_slot->hash, sizeof(uint64_t));
    alloc_->StoreAndPersist(&free_slot->item, item);
    items_.fetch_add(1, std::memory_order_relaxed);
    CountExpiry(0, change.meta.expire_at_ms);
    return Status::OK();
  }
}

Status CcehIndex::Split(uint64_t seg) {
  const Layout& L = *layout_;
  const uint64_t w = Load(&L.seg(seg)->depth_pattern);
  const uint32_t d = DepthOf(w);
  const uint64_t p = PatternOf(w);
  if (d >= kMaxDepth) {
    return Status::ResourceExhausted("segment " + HexOffset(seg) +
                                     " cannot split further: too many keys share a hash prefix");
  }
  // 1. The new segment, holding the upper half of the old one's slots at
  //    the same positions, persisted whole before anything points to it.
  const uint64_t bytes = L.segment_bytes();
  uint64_t child;
  PDPM_RETURN_IF_ERROR(
      alloc_->Allocate(bytes, BlockOwner::kKvStore, PAllocator::kCurrentCore, &child));
  auto* ch = L.seg(child);
  std::memset(ch, 0, bytes);
  ch->magic = kSegmentMagic;
  ch->depth_pattern = EncodeDepth(d + 1, p << 1 | 1);
  const uint32_t bit = 63 - d;
  for (uint32_t i = 0; i < L.slot_count(); ++i) {
    const Slot* from = L.slot(seg, i);
    if (from->item != 0 && (from->hash >> bit & 1) != 0) *L.slot(child, i) = *from;
  }
  alloc_->Persist(ch, bytes);
  {
    std::unique_lock<std::shared_mutex> dl(dir_mu_);
    const uint32_t g = L.global_depth();
    if (d == g) {
      // 2a. Doubling: the new directory, written whole with the split
      //     applied, then one store of the header switches to it.
      const uint64_t old_dir = L.directory();
      uint64_t dir;
      Status s = alloc_->Allocate(Layout::DirectoryBytes(g + 1), BlockOwner::kKvStore,
                                  PAllocator::kCurrentCore, &dir);
      if (!s.ok()) {
        alloc_->Free(child, BlockOwner::kKvStore).ok();  // never reachable
        return s;
      }
      auto* dh = alloc_->At<DirectoryHeader>(dir);
      std::memset(dh, 0, sizeof(*dh));
      dh->magic = kDirMagic;
      dh->global_depth = g + 1;
      dh->crc = DirectoryCrc(*dh);
      auto* e = reinterpret_cast<uint64_t*>(dh + 1);
      const uint64_t* old = L.entries();
      for (uint64_t i = 0; i < uint64_t{1} << g; ++i) e[2 * i] = e[2 * i + 1] = old[i];
      e[2 * p + 1] = child;
      alloc_->Persist(dh, Layout::DirectoryBytes(g + 1));
      alloc_->StoreAndPersist(&L.header()->directory, dir);
      locks_.emplace(child, std::make_unique<SegmentLock>(child));
      MirrorDirectory();
      doublings_.fetch_add(1, std::memory_order_relaxed);
      PDPM_RETURN_IF_ERROR(alloc_->Free(old_dir, BlockOwner::kKvStore)
                               .WithContext("freeing the old directory " + HexOffset(old_dir)));
    } else {
      // 2b. The upper half of the segment's entries switch to the new one.
      uint64_t span = uint64_t{1} << (g - d);
      uint64_t first = (p << (g - d)) + span / 2;
      uint64_t* e = L.entries();
      for (uint64_t j = first; j < first + span / 2; ++j) Store(&e[j], child);
      alloc_->Persist(&e[first], span / 2 * sizeof(uint64_t));
      SegmentLock* lock =
          locks_.emplace(child, std::make_unique<SegmentLock>(child)).first->second.get();
      for (uint64_t j = first; j < first + span / 2; ++j) dir_locks_[j] = lock;
    }
    // 3. The old segment now covers the lower half only.
    alloc_->StoreAndPersist(&L.seg(seg)->depth_pattern, EncodeDepth(d + 1, p << 1));
  }
  // 4. Lazy deletion made eager: the moved slots are cleared while the
  //    segment is still locked; a crash before leaves them to recovery.
  ClearStaleSlots(seg);
  splits_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status CcehIndex::ReclaimExpired(uint64_t position, uint64_t* next_position, uint64_t* reclaimed) {
  const Layout& L = *layout_;
  std::unique_lock<std::shared_mutex> lock;
  const uint64_t seg = LockSegment(position, &lock);
  const uint32_t d = L.depth(seg);
  const uint64_t now = NowMs();
  for (uint32_t i = 0; i < L.slot_count(); ++i) {
    Slot* slot = L.slot(seg, i);
    if (slot->item == 0 || !L.Covers(seg, slot->hash)) continue;
    ItemView view;
    PDPM_RETURN_IF_ERROR(ItemView::Open(*alloc_, slot->item, &view));
    if (!view.ExpiredAt(now)) continue;
    PDPM_RETURN_IF_ERROR(RemoveSlot(slot));
    ++*reclaimed;
  }
  // The first hash past the segment; 0 (done) after the last one.
  *next_position = d == 0 ? 0 : (L.pattern(seg) + 1) << (64 - d);
  return Status::OK();
}

Status CcehIndex::Scan(uint64_t cursor, size_t count, ScanPage* page) {
  if (count == 0) return Status::InvalidArgument("scan count must be positive");
  const Layout& L = *layout_;
  page->keys.clear();
  page->done = false;
  const uint64_t now = NowMs();
  uint64_t pos = cursor;
  for (;;) {
    std::shared_lock<std::shared_mutex> lock;
    uint64_t seg = LockSegment(pos, &lock);
    const uint32_t d = L.depth(seg);
    // The last hash the segment covers.
    const uint64_t last = d == 0 ? UINT64_MAX : ((L.pattern(seg) + 1) << (64 - d)) - 1;
    std::vector<std::pair<uint64_t, std::string>> found;
    for (uint32_t i = 0; i < L.slot_count(); ++i) {
      const Slot* slot = L.slot(seg, i);
      if (slot->item == 0 || slot->hash < pos || !L.Covers(seg, slot->hash)) continue;
      ItemView view;
      PDPM_RETURN_IF_ERROR(ItemView::Open(*alloc_, slot->item, &view));
      if (!view.ExpiredAt(now)) found.emplace_back(slot->hash, view.key());
    }
    std::sort(found.begin(), found.end());
    // Keys sharing a hash go out together: the cursor cannot split them.
    std::optional<uint64_t> last_hash;
    for (auto& [hash, key] : found) {
      if (page->keys.size() >= count && hash != last_hash) {
        page->next_cursor = hash;
        return Status::OK();
      }
      page->keys.push_back(std::move(key));
      last_hash = hash;
    }
    if (last == UINT64_MAX) {
      page->done = true;
      page->next_cursor = 0;
      return Status::OK();
    }
    pos = last + 1;
    if (page->keys.size() >= count) {
      page->next_cursor = pos;
      return Status::OK();
    }
  }
}

CcehStats CcehIndex::Stats() {
  CcehStats s;
  s.items = items_.load(std::memory_order_relaxed);
  s.splits = splits_.load(std::memory_order_relaxed);
  s.doublings = doublings_.load(std::memory_order_relaxed);
  std::shared_lock<std::shared_mutex> dl(dir_mu_);
  s.segments = locks_.size();
  s.global_depth = layout_->global_depth();
  return s;
}

}  // namespace pdpm::pdkvs
