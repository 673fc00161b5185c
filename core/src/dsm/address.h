// GlobalAddress: a 128-bit address in pDSM's global address space
// (seeds/000 §4.1.2): < descriptor, segment number, in-segment offset >.
//
// Wire/PM encoding (format 1), two little-endian 64-bit words:
//
//   word 0 (hi):  bits 63..32 descriptor | bits 31..0 segment number
//   word 1 (lo):  in-segment offset (bytes)
//
// Descriptor (32 bits): bits 0..1 permissions (read, write), bits 4..7 the
// segment's replica count (1..15), every other bit reserved and zero.
//
// Segment numbers: 0 is never mapped (the null address). The heap grows up
// from the bottom of the space — heap segments are numbered 1, 2, 3, ... up
// to kHeapSegmentLimit - 1 — and the object space down from the top — object
// segments are numbered kLastSegment, kLastSegment - 1, ... down to
// kHeapSegmentLimit — so the kind of a segment is known from its number.
// The monitor hands out numbers and never reuses one.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace pdpm::dsm {

inline constexpr uint32_t kNullSegment = 0;
inline constexpr uint32_t kFirstHeapSegment = 1;
inline constexpr uint32_t kHeapSegmentLimit = 0x8000'0000;  // first object-space number
inline constexpr uint32_t kLastSegment = 0xffff'ffff;       // first object segment handed out

inline constexpr uint64_t kDefaultSegmentSize = 2ULL << 30;  // 2 GiB
inline constexpr uint64_t kMinSegmentSize = 4ULL << 20;      // 4 MiB (tests)
inline constexpr uint64_t kMaxSegmentSize = 1ULL << 40;      // 1 TiB
// Segment sizes are whole multiples of the PAllocator chunk.
inline constexpr uint64_t kSegmentAlignment = 4ULL << 20;  // 4 MiB

inline constexpr uint32_t kPermRead = 1u << 0;
inline constexpr uint32_t kPermWrite = 1u << 1;
inline constexpr uint32_t kPermMask = kPermRead | kPermWrite;
inline constexpr uint32_t kReplicaShift = 4;
inline constexpr uint32_t kReplicaMask = 0xfu << kReplicaShift;
inline constexpr uint32_t kMaxReplicas = 15;

// A descriptor value; the bits are as above.
struct Descriptor {
  uint32_t bits = 0;

  static Descriptor Make(uint32_t permissions, uint32_t replicas) {
    return Descriptor{(permissions & kPermMask) | ((replicas << kReplicaShift) & kReplicaMask)};
  }
  uint32_t permissions() const { return bits & kPermMask; }
  uint32_t replicas() const { return (bits & kReplicaMask) >> kReplicaShift; }
  bool can_read() const { return (bits & kPermRead) != 0; }
  bool can_write() const { return (bits & kPermWrite) != 0; }

  // InvalidArgument when reserved bits are set or the replica count is
  // outside 1..kMaxReplicas.
  Status Validate() const;
  // "rw r2", "r- r1".
  std::string ToString() const;
};

enum class SpaceKind { kNull, kHeap, kObject };
SpaceKind SegmentKind(uint32_t segment);

// Checks a cluster's segment size: kMinSegmentSize..kMaxSegmentSize and a
// multiple of kSegmentAlignment.
Status ValidateSegmentSize(uint64_t segment_size);

struct GlobalAddress {
  Descriptor descriptor;
  uint32_t segment = kNullSegment;
  uint64_t offset = 0;

  static constexpr size_t kEncodedSize = 16;

  bool is_null() const { return segment == kNullSegment; }
  SpaceKind kind() const { return SegmentKind(segment); }

  uint64_t hi() const { return (uint64_t{descriptor.bits} << 32) | segment; }
  uint64_t lo() const { return offset; }
  static GlobalAddress FromWords(uint64_t hi, uint64_t lo) {
    return GlobalAddress{Descriptor{static_cast<uint32_t>(hi >> 32)}, static_cast<uint32_t>(hi),
                         lo};
  }

  std::array<uint8_t, kEncodedSize> Encode() const;
  // Decodes and validates the descriptor (not the offset: the segment size
  // is a cluster parameter; use CheckRange).
  static Status Decode(const uint8_t* bytes, size_t size, GlobalAddress* out);

  // Whether [offset, offset + length) lies inside a segment of
  // `segment_size` bytes: InvalidArgument for a null address or a bad
  // descriptor, OutOfRange when the range leaves the segment (or wraps).
  Status CheckRange(uint64_t length, uint64_t segment_size) const;

  // The address `delta` bytes further in the same segment; OutOfRange when
  // that leaves the segment.
  Status Advance(uint64_t delta, uint64_t segment_size, GlobalAddress* out) const;

  // "seg 12 + 0x1000"; "null" for the null address.
  std::string ToString() const;
};

inline bool operator==(const GlobalAddress& a, const GlobalAddress& b) {
  return a.descriptor.bits == b.descriptor.bits && a.segment == b.segment && a.offset == b.offset;
}

}  // namespace pdpm::dsm
