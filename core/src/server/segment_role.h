// What a local segment of a server's PM is used for, recorded in the
// segment itself so that a server recovers from PM alone (docs/server.md).
//
// A segment in use is a PAllocator region (dsm/chunk.h) whose root slot
// kRoleSlot holds the role word:
//   bits 63..56 kind (1 heap, 2 object-store table, 3 transaction log)
//   bits 55..32 table number (kind 2; 0 for heap)
//   bits 31..0  global segment number; 0 while the monitor has not yet
//               confirmed it (the server re-announces it on restart)
// A segment whose region header is absent (no region magic) or whose role
// word is 0 is free: its content is garbage that a Format overwrites.
// The object-store table of a kind-2 segment sits in root slot
// kObjectRootSlot, the header of its pDKVS vnode (a CCEH index, created by
// the first key written; 0 until then) in kKvRootSlot.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"

namespace pdpm::server {

inline constexpr int kObjectRootSlot = 0;
inline constexpr int kKvRootSlot = 1;
inline constexpr int kRoleSlot = 15;

enum class SegmentKind : uint8_t { kFree = 0, kHeap = 1, kTable = 2, kTxLog = 3 };

// Root slots of a transaction-log segment (kind 3, server-local: never
// announced, global 0): the offset of its log region (a large heap block of
// the segment's PAllocator), the count of server starts, which seeds the
// version words, and the region's geometry (docs/tx.md).
inline constexpr int kTxLogRegionSlot = 1;
inline constexpr int kTxStartCountSlot = 2;
// area count << 32 | area size
inline constexpr int kTxLogGeometrySlot = 3;

struct SegmentRole {
  SegmentKind kind = SegmentKind::kFree;
  uint32_t table = 0;
  uint32_t global = 0;

  uint64_t Encode() const {
    return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (uint64_t{table & 0xffffff} << 32) |
           global;
  }
  // kCorruption for an unknown kind or a heap role naming a table.
  static Status Decode(uint64_t word, SegmentRole* out);
};

// Reads the role of the segment at `segment` without changing it: kFree
// when it holds no region or an unconfirmed format. kCorruption when the
// role word is malformed.
Status ReadSegmentRole(std::span<const char> segment, SegmentRole* out);

}  // namespace pdpm::server
