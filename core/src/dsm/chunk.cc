#include "dsm/chunk.h"

#include <cstddef>
#include <cstdio>
#include <string>

namespace pdpm::dsm {
namespace {

uint8_t StateCheck(uint64_t low56) {
  uint8_t check = 0x5a;
  for (int i = 0; i < 7; ++i) check ^= static_cast<uint8_t>(low56 >> (8 * i));
  return check;
}

}  // namespace

uint64_t ClassDataStart(int c) {
  uint64_t bs = ClassBlockSize(c);
  uint64_t bitmap_bytes = (kChunkSize / bs + 63) / 64 * 8;
  uint64_t align = bs < kPageSize ? bs : kPageSize;
  return (kBitmapOffset + bitmap_bytes + align - 1) / align * align;
}

uint32_t ClassBlockCount(int c) {
  return static_cast<uint32_t>((kChunkSize - ClassDataStart(c)) / ClassBlockSize(c));
}

int ClassForSize(uint64_t size) {
  for (int c = 0; c < kNumClasses; ++c) {
    if (size <= ClassBlockSize(c)) return c;
  }
  return -1;
}

uint64_t EncodeChunkState(const ChunkState& s) {
  uint64_t low = uint64_t{static_cast<uint8_t>(s.kind)} |
                 uint64_t{static_cast<uint8_t>(s.owner)} << 8 | uint64_t{s.size_class} << 16 |
                 uint64_t{s.run_chunks} << 24;
  return low | uint64_t{StateCheck(low)} << 56;
}

Status DecodeChunkState(uint64_t word, uint32_t chunk_count, uint32_t chunk, ChunkState* out) {
  uint64_t low = word & ((1ull << 56) - 1);
  auto bad = [&](const char* what) {
    return Status::Corruption("chunk " + std::to_string(chunk) + ": " + what);
  };
  if (StateCheck(low) != static_cast<uint8_t>(word >> 56)) return bad("state word check mismatch");
  ChunkState s;
  uint8_t kind = low & 0xff;
  uint8_t owner = (low >> 8) & 0xff;
  s.size_class = (low >> 16) & 0xff;
  s.run_chunks = static_cast<uint32_t>(low >> 24);
  if (kind > static_cast<uint8_t>(ChunkKind::kLarge)) return bad("unknown chunk kind");
  if (owner >= kNumOwners) return bad("unknown block owner");
  s.kind = static_cast<ChunkKind>(kind);
  s.owner = static_cast<BlockOwner>(owner);
  switch (s.kind) {
    case ChunkKind::kFree:
      if (low != 0) return bad("free chunk with fields set");
      break;
    case ChunkKind::kSmall:
      if (s.size_class >= kNumClasses || s.run_chunks != 0) return bad("bad size class");
      break;
    case ChunkKind::kLarge:
      if (s.run_chunks == 0 || s.size_class != 0 || uint64_t{chunk} + s.run_chunks > chunk_count) {
        return bad("large run outside the region");
      }
      break;
  }
  *out = s;
  return Status::OK();
}

Status ReadChunkHeader(const char* base, uint32_t chunk_count, uint32_t chunk, ChunkState* out) {
  const ChunkHeader* h = ChunkAt(base, chunk);
  if (h->magic != kChunkMagic) {
    return Status::Corruption("chunk " + std::to_string(chunk) + ": bad magic");
  }
  if (h->version != kFormatVersion) {
    return Status::Corruption("chunk " + std::to_string(chunk) + ": unsupported version " +
                              std::to_string(h->version));
  }
  return DecodeChunkState(h->state, chunk_count, chunk, out);
}

uint32_t RegionHeaderCrc(const RegionHeader& h) {
  return Crc32c(&h, offsetof(RegionHeader, crc));
}

Status ReadRegionHeader(const char* base, uint64_t size, const RegionHeader** out) {
  if (size < kChunkSize) return Status::Corruption("region smaller than one chunk");
  auto* h = reinterpret_cast<const RegionHeader*>(base + kRegionHeaderOffset);
  if (h->magic != kRegionMagic) return Status::Corruption("region header: bad magic");
  if (h->version != kFormatVersion) {
    return Status::Corruption("region header: unsupported version " + std::to_string(h->version));
  }
  if (h->crc != RegionHeaderCrc(*h)) return Status::Corruption("region header: crc mismatch");
  if (h->chunk_size != kChunkSize || h->region_size > size ||
      uint64_t{h->chunk_count} * kChunkSize > h->region_size || h->chunk_count == 0) {
    return Status::Corruption("region header: geometry does not match the mapping");
  }
  *out = h;
  return Status::OK();
}

std::string HexOffset(uint64_t offset) {
  char buf[24];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(offset));
  return buf;
}

}  // namespace pdpm::dsm
