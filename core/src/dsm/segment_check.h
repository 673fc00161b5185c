// The offline checker of a PAllocator region and the object-store table in
// it (what `pdpm fsck` runs). It only reads: it can run on the image a crash
// left behind, before or after recovery.
//
// Violations are broken invariants (data loss or corruption): bad region or
// chunk headers, bitmap bits past the last block, damaged index entries,
// object headers or extent nodes, overlapping or unsorted extents, a data
// checksum mismatch, a block that is reachable but free (or of the wrong
// size or owner), a block reachable twice.
// Repairable findings are what a crash legitimately leaves and Open repairs:
// object-store blocks nothing reaches (leaks) and skip-list links of levels
// >= 1 that disagree with level 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pdpm::dsm {

struct SegmentCheckReport {
  std::vector<std::string> violations;
  std::vector<std::string> repairable;
  uint64_t chunks = 0;
  uint64_t allocated_blocks = 0;
  uint64_t allocated_bytes = 0;  // the sizes of those blocks
  uint64_t objects = 0;
  uint64_t extents = 0;
  uint64_t leaked_blocks = 0;

  bool ok() const { return violations.empty(); }
  bool clean() const { return violations.empty() && repairable.empty(); }
  // One finding per line, violations first.
  std::string ToString() const;
};

// Checks the region mapped at [base, base + size). `object_root_slot` is the
// root slot of the region's object-store table, or -1 when the region holds
// none (then object-store blocks are not traced).
SegmentCheckReport CheckSegment(const char* base, uint64_t size, int object_root_slot);

}  // namespace pdpm::dsm
