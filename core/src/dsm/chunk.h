// On-PM format of a PAllocator region (format version 1) and the small
// abstraction of a PM range every persistent structure of pDSM works on.
//
// A region is cut into 4 MiB chunks; chunk i starts at region offset
// i * kChunkSize. Every chunk that is not the tail of a large run starts with
// a ChunkHeader; chunk 0 also carries the RegionHeader. All offsets stored on
// PM are region offsets; offset 0 is never a block, so 0 means "none".
//
//   chunk + 0     ChunkHeader (64 B): magic, version, state word
//   chunk + 64    RegionHeader in chunk 0 (448 B reserved in every chunk)
//   chunk + 512   allocation bitmap of a small-class chunk (bit set = allocated)
//   DataStart(c)  blocks of the chunk's size class, back to back
//
// A large allocation is a run of whole chunks: the head chunk's state word
// records the run length and the data starts at head + kLargeDataOffset; the
// other chunks of the run carry no header (their bytes are the block's data).
//
// Every state change of a chunk is one 8-byte store of its state word, so a
// crash leaves either the old or the new state, never a mixture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/crc32c.h"
#include "common/status.h"

namespace pdpm::dsm {

// A mapped PM range. `persist` makes [p, p + n) durable (flush + fence on
// real PM; in the power-loss simulation only persisted bytes survive a kill).
struct PmRange {
  char* base = nullptr;
  uint64_t size = 0;
  std::function<void(const void*, size_t)> persist;
};

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kChunkSize = 4ull << 20;
inline constexpr uint64_t kPageSize = 4096;
inline constexpr uint64_t kChunkHeaderSize = 64;
inline constexpr uint64_t kRegionHeaderOffset = 64;
inline constexpr uint64_t kBitmapOffset = 512;
inline constexpr uint64_t kLargeDataOffset = 4096;
inline constexpr uint64_t kChunkMagic = 0x4b4e48434d504450ull;   // "PDPMCHNK"
inline constexpr uint64_t kRegionMagic = 0x4e4745524d504450ull;  // "PDPMREGN"
inline constexpr int kNumRoots = 16;

// Size classes: 64 B << c for c in [0, kNumClasses); larger requests are
// runs of whole chunks.
inline constexpr int kNumClasses = 15;
inline constexpr uint64_t kMinBlockSize = 64;
inline constexpr uint64_t kMaxClassSize = kMinBlockSize << (kNumClasses - 1);  // 1 MiB

inline constexpr uint64_t ClassBlockSize(int c) {
  return kMinBlockSize << c;
}
// Region offset of block 0 inside a chunk of class c, relative to the chunk.
uint64_t ClassDataStart(int c);
uint32_t ClassBlockCount(int c);
// The smallest class holding `size` bytes, or -1 when size > kMaxClassSize.
int ClassForSize(uint64_t size);
// Chunks a large allocation of `size` bytes needs.
inline uint64_t LargeRunChunks(uint64_t size) {
  return (size + kLargeDataOffset + kChunkSize - 1) / kChunkSize;
}

// Who a block belongs to. Recovery reclaims unreachable blocks of the object
// store and of the pDKVS indexes (each can trace its own); heap blocks are
// the application's.
enum class BlockOwner : uint8_t { kHeap = 0, kObjectStore = 1, kKvStore = 2 };
inline constexpr int kNumOwners = 3;

enum class ChunkKind : uint8_t { kFree = 0, kSmall = 1, kLarge = 2 };

// The decoded state word of a chunk.
struct ChunkState {
  ChunkKind kind = ChunkKind::kFree;
  BlockOwner owner = BlockOwner::kHeap;
  uint8_t size_class = 0;   // kSmall
  uint32_t run_chunks = 0;  // kLarge: chunks in the run, head included
};

struct ChunkHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  // kind (bits 0-7) | owner (8-15) | class (16-23) | run (24-55) | check (56-63)
  uint64_t state;
  uint64_t padding[5];
};
static_assert(sizeof(ChunkHeader) == kChunkHeaderSize);

struct RegionHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t chunk_count;
  uint64_t chunk_size;
  uint64_t region_size;
  uint32_t crc;  // crc32c of the fields above
  uint32_t reserved;
  // Root slots: 8-byte region offsets of the structures living in the region
  // (e.g. an object-store table), each updated by one atomic store.
  uint64_t roots[kNumRoots];
};
static_assert(sizeof(RegionHeader) <= kBitmapOffset - kRegionHeaderOffset);

uint64_t EncodeChunkState(const ChunkState& s);
// kCorruption when the check byte or a field is invalid.
Status DecodeChunkState(uint64_t word, uint32_t chunk_count, uint32_t chunk, ChunkState* out);
// Validates magic, version and state word of chunk `chunk` of a region.
Status ReadChunkHeader(const char* base, uint32_t chunk_count, uint32_t chunk, ChunkState* out);
// Validates the region header against a mapping of `size` bytes.
Status ReadRegionHeader(const char* base, uint64_t size, const RegionHeader** out);
uint32_t RegionHeaderCrc(const RegionHeader& h);

inline ChunkHeader* ChunkAt(char* base, uint32_t chunk) {
  return reinterpret_cast<ChunkHeader*>(base + uint64_t{chunk} * kChunkSize);
}
inline const ChunkHeader* ChunkAt(const char* base, uint32_t chunk) {
  return reinterpret_cast<const ChunkHeader*>(base + uint64_t{chunk} * kChunkSize);
}
inline uint64_t* BitmapOf(char* base, uint32_t chunk) {
  return reinterpret_cast<uint64_t*>(base + uint64_t{chunk} * kChunkSize + kBitmapOffset);
}
inline const uint64_t* BitmapOf(const char* base, uint32_t chunk) {
  return reinterpret_cast<const uint64_t*>(base + uint64_t{chunk} * kChunkSize + kBitmapOffset);
}
inline uint64_t BitmapWords(int c) {
  return (ClassBlockCount(c) + 63) / 64;
}

// Whether a record of `len` bytes at region offset `off` (8-byte aligned,
// never 0) lies inside a region of `region_size` bytes: checked before any
// offset read from PM is followed.
inline bool RecordInBounds(uint64_t region_size, uint64_t off, uint64_t len) {
  return off != 0 && off % 8 == 0 && off < region_size && len <= region_size - off;
}

// "0x1a2b": how offsets appear in error messages.
std::string HexOffset(uint64_t offset);

}  // namespace pdpm::dsm
