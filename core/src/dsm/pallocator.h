// PAllocator: the persistent, Hoard-like allocator of one PM region (a
// segment). Format on PM: chunk.h; design and guarantees: docs/dsm.md.
//
// Contract:
// - A block is durable-allocated before Allocate returns (its bitmap bit or
//   its run's header is persisted), and durable-free before Free returns.
//   After any crash, Open rebuilds every DRAM structure from the chunk
//   headers alone, so a block that some persistent structure still reaches
//   is never handed out again.
// - Allocations on core i come from chunks owned by core i; chunks are handed
//   to cores on demand and given back when they become empty. Requests over
//   kMaxClassSize take a run of whole chunks. Heap (BlockOwner::kHeap) chunks
//   are taken from the bottom of the region, object-store chunks from the top.
// - Errors: kInvalidArgument (size 0, bad core, an offset that is not the
//   start of a block of the given owner), kFailedPrecondition (double free:
//   the offset is a block start but the block is already free),
//   kResourceExhausted (no room), kCorruption (bad headers at Open).
// - Thread-safe. ReclaimUnreachable must not run concurrently with others.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "dsm/chunk.h"

namespace pdpm::dsm {

struct PAllocatorOptions {
  // Cores allocating concurrently; each owns its own chunks.
  int num_cores = 1;
};

struct PAllocatorStats {
  uint64_t chunks_total = 0;
  uint64_t chunks_free = 0;
  uint64_t blocks_allocated = 0;
  uint64_t bytes_allocated = 0;  // sum of block sizes
};

class PAllocator {
 public:
  // Pass as `core` to use the calling thread's CPU (modulo num_cores).
  static constexpr int kCurrentCore = -1;

  // Writes an empty allocator format over the whole range (every chunk free,
  // every root slot 0). Previous content is lost. The range must hold at
  // least one chunk; a tail shorter than a chunk is left unused.
  static Status Format(const PmRange& range);

  // Recovers the allocator of a formatted range: validates the region and
  // chunk headers (kCorruption names the first bad one) and rebuilds the
  // free lists. Chunks are dealt to cores round-robin.
  static Status Open(const PmRange& range, const PAllocatorOptions& options,
                     std::unique_ptr<PAllocator>* out);

  PAllocator(const PAllocator&) = delete;
  PAllocator& operator=(const PAllocator&) = delete;

  // Allocates `size` bytes for `owner` on `core`; *offset is the region
  // offset of the block (never 0). The block content is unspecified.
  Status Allocate(uint64_t size, BlockOwner owner, int core, uint64_t* offset);

  // Frees the block starting at `offset`, which must belong to `owner`.
  Status Free(uint64_t offset, BlockOwner owner);

  // Usable size of the allocated block starting at `offset`.
  Status BlockSize(uint64_t offset, BlockOwner owner, uint64_t* size);

  // Root slots of the region header: where the structures living in the
  // region keep their entry points. SetRoot is one persisted 8-byte store.
  uint64_t GetRoot(int slot) const;
  Status SetRoot(int slot, uint64_t value);

  // Recovery of leaks: frees every allocated block of `owner` that is not in
  // `reachable` (block start offsets). Fails with kCorruption, changing
  // nothing, if a reachable offset is not an allocated block of `owner`.
  Status ReclaimUnreachable(BlockOwner owner, const std::unordered_set<uint64_t>& reachable,
                            uint64_t* reclaimed);

  PAllocatorStats Stats();

  char* base() const { return range_.base; }
  // Bytes covered by chunks (a tail shorter than a chunk is not used).
  uint64_t region_size() const { return uint64_t{chunk_count_} * kChunkSize; }
  void Persist(const void* p, size_t n) const { range_.persist(p, n); }
  // Stores an 8-byte word and persists it: the unit of every atomic switch.
  void StoreAndPersist(uint64_t* word, uint64_t value) const;
  template <typename T>
  T* At(uint64_t offset) const {
    return reinterpret_cast<T*>(range_.base + offset);
  }

 private:
  static constexpr int kNoCore = -1;

  struct ChunkInfo {
    ChunkState state;
    bool tail = false;                  // inside a large run (no header)
    std::atomic<int> core{kNoCore};     // owning core of a small chunk
    uint32_t used = 0;                  // allocated blocks of a small chunk
    std::vector<uint32_t> free_blocks;  // free block indices, popped from the back
  };
  struct CoreState {
    std::mutex mu;
    // Small chunks of this core with at least one free block.
    std::vector<uint32_t> partial[kNumOwners][kNumClasses];
  };

  PAllocator(const PmRange& range, const PAllocatorOptions& options, uint32_t chunk_count);
  RegionHeader* region() const;
  Status ResolveCore(int core, int* resolved) const;
  Status AllocateSmall(int c, BlockOwner owner, int core, uint64_t* offset);
  Status AllocateLarge(uint64_t size, BlockOwner owner, uint64_t* offset);
  // With chunk_mu_ held: frees (free_it) or sizes the block at `offset` in a
  // chunk that no core owns (free, large head or large tail).
  Status InspectUnowned(uint32_t chunk, uint64_t offset, BlockOwner owner, bool free_it,
                        uint64_t* size);
  // Frees (free_it) or sizes the block at `offset`.
  Status Inspect(uint64_t offset, BlockOwner owner, bool free_it, uint64_t* size);
  // With chunk_mu_ held: frees the large run headed by `chunk`.
  void ReleaseRun(uint32_t chunk);
  // With the core's mutex held: takes a free chunk, formats it for class c.
  Status AcquireChunk(int c, BlockOwner owner, int core, uint32_t* chunk);
  // With the core's mutex held: gives an empty small chunk back.
  void ReleaseChunk(uint32_t chunk);
  // Clears a block's bit (persisted) and updates the DRAM lists; the core's
  // mutex is held.
  void FreeSmallBlock(uint32_t chunk, uint32_t block, int core);
  void WriteState(uint32_t chunk, const ChunkState& s);
  void FillFreeList(uint32_t chunk);
  // Which chunk and block `offset` names; kInvalidArgument if no block can
  // start there.
  Status Locate(uint64_t offset, uint32_t* chunk, uint32_t* block) const;

  PmRange range_;
  PAllocatorOptions options_;
  uint32_t chunk_count_;
  std::vector<ChunkInfo> chunks_;
  std::vector<std::unique_ptr<CoreState>> cores_;
  // Guards chunk kind transitions and the free-chunk count. Lock order: a
  // core's mu before chunk_mu_.
  std::mutex chunk_mu_;
  std::mutex root_mu_;
};

}  // namespace pdpm::dsm
