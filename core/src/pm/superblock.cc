#include "pm/superblock.h"

#include <bit>
#include <cstring>
#include <string>

#include "common/crc32c.h"

namespace pdpm::pm {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the on-PM format is little-endian; add byte swaps for this target");

constexpr char kMagic[8] = {'P', 'D', 'P', 'M', 'S', 'B', 'L', 'K'};

// Offsets of the version-1 record (docs/pm.md). Magic, version, record size
// and generation sit at these offsets in every version, and the last four
// bytes of the record are always its CRC-32C.
constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 8;
constexpr size_t kRecordSizeOffset = 12;
constexpr size_t kGenerationOffset = 16;
constexpr size_t kClusterUuidOffset = 24;
constexpr size_t kServerIdOffset = 40;
constexpr size_t kSegmentSizeOffset = 48;
constexpr size_t kSegmentCountOffset = 56;
constexpr size_t kSegmentsOffsetOffset = 64;
constexpr size_t kCrcOffset = kSuperblockEncodedSize - 4;
constexpr size_t kMinRecordSize = kGenerationOffset + 8 + 4;

template <typename T>
void Put(char* out, size_t offset, T v) {
  std::memcpy(out + offset, &v, sizeof(v));
}

template <typename T>
T Get(const char* in, size_t offset) {
  T v;
  std::memcpy(&v, in + offset, sizeof(v));
  return v;
}

}  // namespace

void EncodeSuperblock(const Superblock& sb, char* out) {
  std::memset(out, 0, kSuperblockEncodedSize);
  std::memcpy(out + kMagicOffset, kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kVersionOffset, kLayoutVersion);
  Put<uint32_t>(out, kRecordSizeOffset, kSuperblockEncodedSize);
  Put<uint64_t>(out, kGenerationOffset, sb.generation);
  std::memcpy(out + kClusterUuidOffset, sb.cluster_uuid.bytes.data(), sb.cluster_uuid.bytes.size());
  Put<uint32_t>(out, kServerIdOffset, sb.server_id);
  Put<uint64_t>(out, kSegmentSizeOffset, sb.segment_size);
  Put<uint64_t>(out, kSegmentCountOffset, sb.segment_count);
  Put<uint64_t>(out, kSegmentsOffsetOffset, sb.segments_offset);
  Put<uint32_t>(out, kCrcOffset, Crc32c(out, kCrcOffset));
}

Status DecodeSuperblock(const char* slot, size_t len, Superblock* out) {
  if (len < kMinRecordSize || std::memcmp(slot + kMagicOffset, kMagic, sizeof(kMagic)) != 0) {
    for (size_t i = 0; i < len; ++i) {
      if (slot[i] != 0) return Status::Corruption("no superblock magic, and not blank");
    }
    return Status::NotFound("blank");
  }
  const auto record_size = Get<uint32_t>(slot, kRecordSizeOffset);
  if (record_size < kMinRecordSize || record_size > len) {
    return Status::Corruption("record size " + std::to_string(record_size) + " out of range");
  }
  const auto stored_crc = Get<uint32_t>(slot, record_size - 4);
  const uint32_t crc = Crc32c(slot, record_size - 4);
  if (stored_crc != crc) {
    return Status::Corruption("checksum mismatch (stored " + std::to_string(stored_crc) +
                              ", computed " + std::to_string(crc) + ")");
  }
  Superblock sb;
  sb.layout_version = Get<uint32_t>(slot, kVersionOffset);
  sb.generation = Get<uint64_t>(slot, kGenerationOffset);
  if (sb.layout_version != kLayoutVersion) {
    *out = sb;
    return Status::NotSupported("layout version " + std::to_string(sb.layout_version) +
                                " (this build reads version " + std::to_string(kLayoutVersion) +
                                ")");
  }
  if (record_size != kSuperblockEncodedSize) {
    return Status::Corruption("version 1 record of " + std::to_string(record_size) +
                              " bytes, expected " + std::to_string(kSuperblockEncodedSize));
  }
  std::memcpy(sb.cluster_uuid.bytes.data(), slot + kClusterUuidOffset,
              sb.cluster_uuid.bytes.size());
  sb.server_id = Get<uint32_t>(slot, kServerIdOffset);
  sb.segment_size = Get<uint64_t>(slot, kSegmentSizeOffset);
  sb.segment_count = Get<uint64_t>(slot, kSegmentCountOffset);
  sb.segments_offset = Get<uint64_t>(slot, kSegmentsOffsetOffset);
  *out = sb;
  return Status::OK();
}

}  // namespace pdpm::pm
