// TableRange: the part of an object-store table (a pDKVS vnode) one of its
// segments holds, once tables span several segments (docs/dsm.md "Tables
// across segments"). Every item of a table has a 64-bit *position* (an
// object's monitor::ObjectPosition, a pDKVS key's hash); a range of depth
// d and prefix p holds the positions whose top d bits are p, i.e. the
// interval [p << (64 - d), (p + 1) << (64 - d)). A table's first segment
// has depth 0 (every position); a split of (d, p) makes (d + 1, 2p) and
// (d + 1, 2p + 1), a merge the reverse, so the ranges of a table's
// segments always partition the position space.
//
// The range word records a segment's range and state on PM (format
// version 1, one 8-byte root slot, so one persisted store changes it):
//   bits 63..56 version (1)
//   bits 55..48 check: 0xa5 xor the six low bytes
//   bits 47..40 depth (0..kMaxRangeDepth)
//   bits 39..32 state (0 active, 1 filling: a split's new segment before
//               the split committed)
//   bits 31..0  prefix (< 2^depth)
// The word 0 is the format before ranges: depth 0, active.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace pdpm::dsm {

inline constexpr uint32_t kMaxRangeDepth = 32;
inline constexpr uint32_t kRangeWordVersion = 1;

struct TableRange {
  uint32_t depth = 0;
  uint32_t prefix = 0;

  bool operator==(const TableRange&) const = default;

  // depth <= kMaxRangeDepth and prefix < 2^depth.
  bool Valid() const;
  // The first and last position of the range (valid ranges only).
  uint64_t first() const;
  uint64_t last() const;
  bool Covers(uint64_t position) const { return position >= first() && position <= last(); }
  // The halves a split makes: the lower stays, the upper moves. Valid
  // ranges of depth < kMaxRangeDepth only.
  TableRange Lower() const { return {depth + 1, prefix << 1}; }
  TableRange Upper() const { return {depth + 1, (prefix << 1) | 1}; }
  // The range this one merges with (same depth, last prefix bit flipped)
  // and the range the merge makes. Valid ranges of depth > 0 only.
  TableRange Buddy() const { return {depth, prefix ^ 1}; }
  TableRange Parent() const { return {depth - 1, prefix >> 1}; }
  // "d/p", e.g. "2/3" for the top quarter.
  std::string ToString() const;
};

// Sorts `ranges` by first position and checks that they partition the
// position space: every range valid, no two overlapping, no gap.
// kInvalidArgument naming the first offending range otherwise (an empty
// list leaves every position uncovered).
Status SortAndCheckPartition(std::vector<TableRange>* ranges);

// The index of the range covering `position` in a partition sorted by
// SortAndCheckPartition.
size_t RouteRange(const std::vector<TableRange>& partition, uint64_t position);

enum class RangeState : uint8_t { kActive = 0, kFilling = 1 };

// The range word of `range` in `state` (range must be valid).
uint64_t EncodeRangeWord(const TableRange& range, RangeState state);
// Decodes a range word read from PM; 0 decodes as depth 0, active.
// kCorruption (naming the defect) for another version, a bad check, a depth
// over kMaxRangeDepth, a prefix of 2^depth or more, or an unknown state.
Status DecodeRangeWord(uint64_t word, TableRange* range, RangeState* state);

}  // namespace pdpm::dsm
