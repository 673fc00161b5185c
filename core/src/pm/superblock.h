// The PM superblock: what a server's PM holds about itself, in one
// versioned, checksummed record (byte layout in docs/pm.md).
//
// The superblock area (the first kSuperblockAreaSize bytes of the device)
// holds two slots; PmSpace writes them alternately so that one update is
// crash-atomic. This header is only the record and its encoding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "common/uuid.h"

namespace pdpm::pm {

// The layout this build writes and reads.
inline constexpr uint32_t kLayoutVersion = 1;
// Bytes reserved at the start of the device; segments follow. 2 MiB keeps
// segments aligned to the 2 MiB pages of a devdax mapping.
inline constexpr uint64_t kSuperblockAreaSize = 2ull << 20;
// Slot i starts at i * kSuperblockSlotStride (a page apart, so that even
// page-granular persistence of one never touches the other).
inline constexpr uint64_t kSuperblockSlotStride = 4096;
inline constexpr int kSuperblockSlots = 2;
// Bytes of an encoded version-1 record, checksum included.
inline constexpr size_t kSuperblockEncodedSize = 128;

struct Superblock {
  uint32_t layout_version = kLayoutVersion;
  // Grows by one with every update; the valid slot with the highest wins.
  uint64_t generation = 0;
  Uuid cluster_uuid;       // nil until the server joins a cluster
  uint32_t server_id = 0;  // 0 until the monitor assigns one
  uint64_t segment_size = 0;
  uint64_t segment_count = 0;
  uint64_t segments_offset = kSuperblockAreaSize;  // device offset of segment 0

  friend bool operator==(const Superblock&, const Superblock&) = default;
};

// Writes the record into out[0, kSuperblockEncodedSize), checksum included.
void EncodeSuperblock(const Superblock& sb, char* out);

// Decodes one slot of `len` bytes. Errors, by what the slot holds:
//   kNotFound           all zero: never written, or wiped;
//   kCorruption         anything else that is not an intact record (no magic,
//                       bad length or checksum): torn, damaged, or other data;
//   kNotSupported       intact, but a layout version this build cannot read
//                       (`out->layout_version` and `generation` are filled);
//   kOk                 an intact version-1 record.
Status DecodeSuperblock(const char* slot, size_t len, Superblock* out);

}  // namespace pdpm::pm
