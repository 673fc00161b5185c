#include "dsm/pallocator.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace pdpm::dsm {
namespace {

bool BitIsSet(const uint64_t* bitmap, uint32_t b) {
  return (bitmap[b / 64] >> (b % 64)) & 1;
}

// Whether some size class, or a large run, could place a block at this
// offset inside a chunk: distinguishes "already free" from "never a block".
bool IsPossibleBlockStart(uint64_t in_chunk) {
  if (in_chunk == kLargeDataOffset) return true;
  for (int c = 0; c < kNumClasses; ++c) {
    uint64_t ds = ClassDataStart(c);
    if (in_chunk >= ds && (in_chunk - ds) % ClassBlockSize(c) == 0 &&
        (in_chunk - ds) / ClassBlockSize(c) < ClassBlockCount(c)) {
      return true;
    }
  }
  return false;
}

}  // namespace

Status PAllocator::Format(const PmRange& range) {
  if (range.base == nullptr || range.size < kChunkSize || !range.persist) {
    return Status::InvalidArgument("PM range must hold at least one 4 MiB chunk");
  }
  uint64_t count64 = std::min<uint64_t>(range.size / kChunkSize, UINT32_MAX);
  auto count = static_cast<uint32_t>(count64);
  // Chunk headers first, the region header last: a region header with a
  // valid crc means the whole format is durable.
  for (uint32_t i = 0; i < count; ++i) {
    ChunkHeader* h = ChunkAt(range.base, i);
    memset(h, 0, sizeof(*h));
    h->magic = kChunkMagic;
    h->version = kFormatVersion;
    h->state = EncodeChunkState(ChunkState{});
    range.persist(h, sizeof(*h));
  }
  auto* r = reinterpret_cast<RegionHeader*>(range.base + kRegionHeaderOffset);
  memset(r, 0, sizeof(*r));
  r->magic = kRegionMagic;
  r->version = kFormatVersion;
  r->chunk_count = count;
  r->chunk_size = kChunkSize;
  r->region_size = count64 * kChunkSize;
  r->crc = RegionHeaderCrc(*r);
  range.persist(r, sizeof(*r));
  return Status::OK();
}

PAllocator::PAllocator(const PmRange& range, const PAllocatorOptions& options, uint32_t chunk_count)
    : range_(range), options_(options), chunk_count_(chunk_count), chunks_(chunk_count) {
  for (int i = 0; i < options.num_cores; ++i) cores_.push_back(std::make_unique<CoreState>());
}

Status PAllocator::Open(const PmRange& range, const PAllocatorOptions& options,
                        std::unique_ptr<PAllocator>* out) {
  if (range.base == nullptr || !range.persist) {
    return Status::InvalidArgument("PM range without base or persist function");
  }
  if (options.num_cores < 1 || options.num_cores > 1024) {
    return Status::InvalidArgument("num_cores must be in [1, 1024]");
  }
  const RegionHeader* r;
  PDPM_RETURN_IF_ERROR(ReadRegionHeader(range.base, range.size, &r));
  std::unique_ptr<PAllocator> a(new PAllocator(range, options, r->chunk_count));
  int next_core = 0;
  for (uint32_t i = 0; i < a->chunk_count_;) {
    ChunkInfo& info = a->chunks_[i];
    PDPM_RETURN_IF_ERROR(ReadChunkHeader(range.base, a->chunk_count_, i, &info.state));
    if (info.state.kind == ChunkKind::kLarge) {
      for (uint32_t j = 1; j < info.state.run_chunks; ++j) a->chunks_[i + j].tail = true;
      i += info.state.run_chunks;
      continue;
    }
    if (info.state.kind == ChunkKind::kSmall) {
      int c = info.state.size_class;
      const uint64_t* bitmap = BitmapOf(range.base, i);
      uint32_t count = ClassBlockCount(c);
      for (uint32_t b = count; b < BitmapWords(c) * 64; ++b) {
        if (BitIsSet(bitmap, b)) {
          return Status::Corruption("chunk " + std::to_string(i) +
                                    ": bitmap bit set past the last block");
        }
      }
      a->FillFreeList(i);
      if (info.used == 0) {
        // An empty chunk is free for any use; its header is rewritten when
        // it is handed out again.
        info.state = ChunkState{};
        info.free_blocks.clear();
      } else {
        int core = next_core++ % options.num_cores;
        info.core.store(core);
        if (!info.free_blocks.empty()) {
          a->cores_[core]->partial[static_cast<int>(info.state.owner)][c].push_back(i);
        }
      }
    }
    ++i;
  }
  *out = std::move(a);
  return Status::OK();
}

RegionHeader* PAllocator::region() const {
  return reinterpret_cast<RegionHeader*>(range_.base + kRegionHeaderOffset);
}

void PAllocator::StoreAndPersist(uint64_t* word, uint64_t value) const {
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
  range_.persist(word, sizeof(*word));
}

uint64_t PAllocator::GetRoot(int slot) const {
  if (slot < 0 || slot >= kNumRoots) return 0;
  return __atomic_load_n(&region()->roots[slot], __ATOMIC_ACQUIRE);
}

Status PAllocator::SetRoot(int slot, uint64_t value) {
  if (slot < 0 || slot >= kNumRoots) {
    return Status::InvalidArgument("root slot " + std::to_string(slot) + " out of range");
  }
  std::lock_guard<std::mutex> lock(root_mu_);
  StoreAndPersist(&region()->roots[slot], value);
  return Status::OK();
}

Status PAllocator::ResolveCore(int core, int* resolved) const {
  if (core == kCurrentCore) {
    int cpu = sched_getcpu();
    *resolved = cpu < 0 ? 0 : cpu % options_.num_cores;
    return Status::OK();
  }
  if (core < 0 || core >= options_.num_cores) {
    return Status::InvalidArgument("core " + std::to_string(core) + " outside [0, " +
                                   std::to_string(options_.num_cores) + ")");
  }
  *resolved = core;
  return Status::OK();
}

Status PAllocator::Allocate(uint64_t size, BlockOwner owner, int core, uint64_t* offset) {
  if (size == 0) return Status::InvalidArgument("allocation of 0 bytes");
  if (static_cast<int>(owner) >= kNumOwners) return Status::InvalidArgument("unknown owner");
  int c = ClassForSize(size);
  if (c < 0) return AllocateLarge(size, owner, offset);
  int resolved;
  PDPM_RETURN_IF_ERROR(ResolveCore(core, &resolved));
  return AllocateSmall(c, owner, resolved, offset);
}

Status PAllocator::AllocateSmall(int c, BlockOwner owner, int core, uint64_t* offset) {
  CoreState& cs = *cores_[core];
  std::lock_guard<std::mutex> lock(cs.mu);
  std::vector<uint32_t>& partial = cs.partial[static_cast<int>(owner)][c];
  if (partial.empty()) {
    uint32_t chunk;
    PDPM_RETURN_IF_ERROR(AcquireChunk(c, owner, core, &chunk));
    partial.push_back(chunk);
  }
  uint32_t chunk = partial.back();
  ChunkInfo& info = chunks_[chunk];
  uint32_t b = info.free_blocks.back();
  info.free_blocks.pop_back();
  ++info.used;
  if (info.free_blocks.empty()) partial.pop_back();
  uint64_t* word = &BitmapOf(range_.base, chunk)[b / 64];
  StoreAndPersist(word, *word | (1ull << (b % 64)));
  *offset = uint64_t{chunk} * kChunkSize + ClassDataStart(c) + uint64_t{b} * ClassBlockSize(c);
  return Status::OK();
}

Status PAllocator::AcquireChunk(int c, BlockOwner owner, int core, uint32_t* chunk) {
  std::lock_guard<std::mutex> lock(chunk_mu_);
  auto is_free = [&](uint32_t i) {
    return chunks_[i].state.kind == ChunkKind::kFree && !chunks_[i].tail;
  };
  int64_t found = -1;
  if (owner == BlockOwner::kHeap) {
    for (uint32_t i = 0; i < chunk_count_ && found < 0; ++i) {
      if (is_free(i)) found = i;
    }
  } else {
    for (int64_t i = int64_t{chunk_count_} - 1; i >= 0 && found < 0; --i) {
      if (is_free(static_cast<uint32_t>(i))) found = i;
    }
  }
  if (found < 0) {
    return Status::ResourceExhausted("no free chunk for " + std::to_string(ClassBlockSize(c)) +
                                     "-byte blocks");
  }
  auto i = static_cast<uint32_t>(found);
  // The bitmap must read "all free" before the header says "small chunk".
  uint64_t* bitmap = BitmapOf(range_.base, i);
  memset(bitmap, 0, BitmapWords(c) * 8);
  range_.persist(bitmap, BitmapWords(c) * 8);
  ChunkState s;
  s.kind = ChunkKind::kSmall;
  s.owner = owner;
  s.size_class = static_cast<uint8_t>(c);
  WriteState(i, s);
  FillFreeList(i);
  chunks_[i].core.store(core, std::memory_order_release);
  *chunk = i;
  return Status::OK();
}

void PAllocator::ReleaseChunk(uint32_t chunk) {
  std::lock_guard<std::mutex> lock(chunk_mu_);
  WriteState(chunk, ChunkState{});
  ChunkInfo& info = chunks_[chunk];
  info.free_blocks.clear();
  info.free_blocks.shrink_to_fit();
  info.used = 0;
  info.core.store(kNoCore, std::memory_order_release);
}

void PAllocator::WriteState(uint32_t chunk, const ChunkState& s) {
  StoreAndPersist(&ChunkAt(range_.base, chunk)->state, EncodeChunkState(s));
  chunks_[chunk].state = s;
}

void PAllocator::FillFreeList(uint32_t chunk) {
  ChunkInfo& info = chunks_[chunk];
  int c = info.state.size_class;
  const uint64_t* bitmap = BitmapOf(range_.base, chunk);
  uint32_t count = ClassBlockCount(c);
  info.free_blocks.clear();
  for (uint32_t b = count; b-- > 0;) {
    if (!BitIsSet(bitmap, b)) info.free_blocks.push_back(b);
  }
  info.used = count - static_cast<uint32_t>(info.free_blocks.size());
}

Status PAllocator::AllocateLarge(uint64_t size, BlockOwner owner, uint64_t* offset) {
  uint64_t run = LargeRunChunks(size);
  if (size > uint64_t{chunk_count_} * kChunkSize || run > chunk_count_) {
    return Status::ResourceExhausted("allocation of " + std::to_string(size) +
                                     " bytes exceeds the region");
  }
  std::lock_guard<std::mutex> lock(chunk_mu_);
  auto is_free = [&](uint32_t i) {
    return chunks_[i].state.kind == ChunkKind::kFree && !chunks_[i].tail;
  };
  int64_t head = -1;
  if (owner == BlockOwner::kHeap) {
    uint64_t len = 0;
    for (uint32_t i = 0; i < chunk_count_ && head < 0; ++i) {
      len = is_free(i) ? len + 1 : 0;
      if (len == run) head = i + 1 - run;
    }
  } else {
    uint64_t len = 0;
    for (int64_t i = int64_t{chunk_count_} - 1; i >= 0 && head < 0; --i) {
      len = is_free(static_cast<uint32_t>(i)) ? len + 1 : 0;
      if (len == run) head = i;
    }
  }
  if (head < 0) {
    return Status::ResourceExhausted("no run of " + std::to_string(run) + " free chunks for a " +
                                     std::to_string(size) + "-byte allocation");
  }
  auto h = static_cast<uint32_t>(head);
  ChunkState s;
  s.kind = ChunkKind::kLarge;
  s.owner = owner;
  s.run_chunks = static_cast<uint32_t>(run);
  // One persisted store publishes the run; the other chunks keep whatever
  // header they had, which becomes block data.
  WriteState(h, s);
  for (uint32_t j = 1; j < run; ++j) chunks_[h + j].tail = true;
  *offset = uint64_t{h} * kChunkSize + kLargeDataOffset;
  return Status::OK();
}

void PAllocator::ReleaseRun(uint32_t chunk) {
  uint32_t run = chunks_[chunk].state.run_chunks;
  // Give every other chunk of the run its header back before the head says
  // "free": until then the run is still one allocated block.
  for (uint32_t j = 1; j < run; ++j) {
    ChunkHeader* h = ChunkAt(range_.base, chunk + j);
    memset(h, 0, sizeof(*h));
    h->magic = kChunkMagic;
    h->version = kFormatVersion;
    h->state = EncodeChunkState(ChunkState{});
    range_.persist(h, sizeof(*h));
    chunks_[chunk + j].tail = false;
    chunks_[chunk + j].state = ChunkState{};
  }
  WriteState(chunk, ChunkState{});
}

Status PAllocator::Free(uint64_t offset, BlockOwner owner) {
  return Inspect(offset, owner, /*free_it=*/true, nullptr);
}

Status PAllocator::BlockSize(uint64_t offset, BlockOwner owner, uint64_t* size) {
  return Inspect(offset, owner, /*free_it=*/false, size);
}

Status PAllocator::Inspect(uint64_t offset, BlockOwner owner, bool free_it, uint64_t* size) {
  if (offset == 0 || offset >= uint64_t{chunk_count_} * kChunkSize) {
    return Status::InvalidArgument("offset " + HexOffset(offset) +
                                   " is outside the region's chunks");
  }
  auto chunk = static_cast<uint32_t>(offset / kChunkSize);
  ChunkInfo& info = chunks_[chunk];
  for (;;) {
    int core = info.core.load(std::memory_order_acquire);
    if (core == kNoCore) {
      std::lock_guard<std::mutex> lock(chunk_mu_);
      if (info.core.load(std::memory_order_acquire) != kNoCore) continue;
      return InspectUnowned(chunk, offset, owner, free_it, size);
    }
    CoreState& cs = *cores_[core];
    std::lock_guard<std::mutex> lock(cs.mu);
    if (info.core.load(std::memory_order_acquire) != core) continue;
    // A small chunk owned by `core`: stable while cs.mu is held.
    int c = info.state.size_class;
    uint64_t in_chunk = offset % kChunkSize;
    uint64_t ds = ClassDataStart(c);
    uint64_t bs = ClassBlockSize(c);
    if (in_chunk < ds || (in_chunk - ds) % bs != 0) {
      return Status::InvalidArgument("offset " + HexOffset(offset) +
                                     " is not the start of a block");
    }
    if (info.state.owner != owner) {
      return Status::InvalidArgument("block " + HexOffset(offset) + " belongs to another owner");
    }
    auto b = static_cast<uint32_t>((in_chunk - ds) / bs);
    if (!BitIsSet(BitmapOf(range_.base, chunk), b)) {
      return Status::FailedPrecondition("block " + HexOffset(offset) + " is already free");
    }
    if (size != nullptr) *size = bs;
    if (free_it) FreeSmallBlock(chunk, b, core);
    return Status::OK();
  }
}

Status PAllocator::InspectUnowned(uint32_t chunk, uint64_t offset, BlockOwner owner, bool free_it,
                                  uint64_t* size) {
  ChunkInfo& info = chunks_[chunk];
  uint64_t in_chunk = offset % kChunkSize;
  if (info.tail) {
    return Status::InvalidArgument("offset " + HexOffset(offset) + " lies inside a large block");
  }
  if (info.state.kind == ChunkKind::kFree) {
    if (IsPossibleBlockStart(in_chunk)) {
      return Status::FailedPrecondition("block " + HexOffset(offset) + " is already free");
    }
    return Status::InvalidArgument("offset " + HexOffset(offset) + " is not the start of a block");
  }
  // A large head.
  if (in_chunk != kLargeDataOffset) {
    return Status::InvalidArgument("offset " + HexOffset(offset) + " is not the start of a block");
  }
  if (info.state.owner != owner) {
    return Status::InvalidArgument("block " + HexOffset(offset) + " belongs to another owner");
  }
  if (size != nullptr) *size = uint64_t{info.state.run_chunks} * kChunkSize - kLargeDataOffset;
  if (free_it) ReleaseRun(chunk);
  return Status::OK();
}

void PAllocator::FreeSmallBlock(uint32_t chunk, uint32_t block, int core) {
  ChunkInfo& info = chunks_[chunk];
  uint64_t* word = &BitmapOf(range_.base, chunk)[block / 64];
  StoreAndPersist(word, *word & ~(1ull << (block % 64)));
  std::vector<uint32_t>& partial =
      cores_[core]->partial[static_cast<int>(info.state.owner)][info.state.size_class];
  if (info.free_blocks.empty()) partial.push_back(chunk);
  info.free_blocks.push_back(block);
  --info.used;
  // An empty chunk goes back to the region unless it is the core's last
  // chunk with room for this class (avoids reformatting on alloc/free pairs).
  if (info.used == 0 && partial.size() > 1) {
    partial.erase(std::find(partial.begin(), partial.end(), chunk));
    ReleaseChunk(chunk);
  }
}

Status PAllocator::ReclaimUnreachable(BlockOwner owner,
                                      const std::unordered_set<uint64_t>& reachable,
                                      uint64_t* reclaimed) {
  std::vector<std::unique_lock<std::mutex>> locks;
  for (auto& cs : cores_) locks.emplace_back(cs->mu);
  locks.emplace_back(chunk_mu_);
  // Validate first: a reachable block that is not allocated means the
  // structure and the allocator disagree, and nothing may be freed.
  for (uint64_t off : reachable) {
    if (off == 0 || off >= uint64_t{chunk_count_} * kChunkSize) {
      return Status::Corruption("reachable offset " + HexOffset(off) + " outside the region");
    }
    auto chunk = static_cast<uint32_t>(off / kChunkSize);
    const ChunkInfo& info = chunks_[chunk];
    uint64_t in_chunk = off % kChunkSize;
    bool ok = false;
    if (!info.tail && info.state.owner == owner) {
      if (info.state.kind == ChunkKind::kLarge) {
        ok = in_chunk == kLargeDataOffset;
      } else if (info.state.kind == ChunkKind::kSmall) {
        int c = info.state.size_class;
        uint64_t ds = ClassDataStart(c);
        ok = in_chunk >= ds && (in_chunk - ds) % ClassBlockSize(c) == 0 &&
             BitIsSet(BitmapOf(range_.base, chunk),
                      static_cast<uint32_t>((in_chunk - ds) / ClassBlockSize(c)));
      }
    }
    if (!ok) {
      return Status::Corruption("reachable block " + HexOffset(off) + " is not allocated");
    }
  }
  uint64_t n = 0;
  for (uint32_t i = 0; i < chunk_count_; ++i) {
    ChunkInfo& info = chunks_[i];
    if (info.tail || info.state.owner != owner) continue;
    uint64_t chunk_off = uint64_t{i} * kChunkSize;
    if (info.state.kind == ChunkKind::kLarge) {
      if (!reachable.count(chunk_off + kLargeDataOffset)) {
        ReleaseRun(i);
        ++n;
      }
      continue;
    }
    if (info.state.kind != ChunkKind::kSmall) continue;
    int c = info.state.size_class;
    uint64_t* bitmap = BitmapOf(range_.base, i);
    bool changed = false;
    for (uint32_t b = 0; b < ClassBlockCount(c); ++b) {
      uint64_t off = chunk_off + ClassDataStart(c) + uint64_t{b} * ClassBlockSize(c);
      if (BitIsSet(bitmap, b) && !reachable.count(off)) {
        StoreAndPersist(&bitmap[b / 64], bitmap[b / 64] & ~(1ull << (b % 64)));
        changed = true;
        ++n;
      }
    }
    if (!changed) continue;
    int core = info.core.load();
    std::vector<uint32_t>& partial = cores_[core]->partial[static_cast<int>(owner)][c];
    bool listed = !info.free_blocks.empty();
    FillFreeList(i);
    if (!listed) partial.push_back(i);
  }
  if (reclaimed != nullptr) *reclaimed = n;
  return Status::OK();
}

PAllocatorStats PAllocator::Stats() {
  std::vector<std::unique_lock<std::mutex>> locks;
  for (auto& cs : cores_) locks.emplace_back(cs->mu);
  locks.emplace_back(chunk_mu_);
  PAllocatorStats st;
  st.chunks_total = chunk_count_;
  for (uint32_t i = 0; i < chunk_count_; ++i) {
    const ChunkInfo& info = chunks_[i];
    if (info.tail) continue;
    if (info.state.kind == ChunkKind::kFree) {
      ++st.chunks_free;
    } else if (info.state.kind == ChunkKind::kLarge) {
      ++st.blocks_allocated;
      st.bytes_allocated += uint64_t{info.state.run_chunks} * kChunkSize - kLargeDataOffset;
    } else {
      st.blocks_allocated += info.used;
      st.bytes_allocated += uint64_t{info.used} * ClassBlockSize(info.state.size_class);
    }
  }
  return st;
}

}  // namespace pdpm::dsm
