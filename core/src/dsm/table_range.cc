#include "dsm/table_range.h"

#include <algorithm>

namespace pdpm::dsm {
namespace {

constexpr uint8_t kRangeCheckSeed = 0xa5;

uint8_t RangeCheck(uint64_t word) {
  uint8_t check = kRangeCheckSeed;
  for (int byte = 0; byte < 6; ++byte) check ^= static_cast<uint8_t>(word >> (8 * byte));
  return check;
}

}  // namespace

bool TableRange::Valid() const {
  return depth <= kMaxRangeDepth && (depth == kMaxRangeDepth || prefix < (uint64_t{1} << depth));
}

uint64_t TableRange::first() const {
  return depth == 0 ? 0 : uint64_t{prefix} << (64 - depth);
}

uint64_t TableRange::last() const {
  return first() | (~uint64_t{0} >> depth);
}

std::string TableRange::ToString() const {
  return std::to_string(depth) + "/" + std::to_string(prefix);
}

Status SortAndCheckPartition(std::vector<TableRange>* ranges) {
  for (const TableRange& r : *ranges) {
    if (!r.Valid()) return Status::InvalidArgument("range " + r.ToString() + " is not valid");
  }
  std::sort(ranges->begin(), ranges->end(),
            [](const TableRange& a, const TableRange& b) { return a.first() < b.first(); });
  // Each range must start right after the previous one ends, the first at
  // position 0 and the last end at the top: then none overlap and no
  // position is left out.
  uint64_t next = 0;
  for (size_t i = 0; i < ranges->size(); ++i) {
    const TableRange& r = (*ranges)[i];
    if (i > 0 && r.first() < next) {
      return Status::InvalidArgument("range " + r.ToString() + " overlaps range " +
                                     (*ranges)[i - 1].ToString());
    }
    if (r.first() != next) {
      return Status::InvalidArgument("no range covers the positions before range " + r.ToString());
    }
    if (r.last() == ~uint64_t{0}) {
      if (i + 1 < ranges->size()) {
        return Status::InvalidArgument("range " + (*ranges)[i + 1].ToString() + " overlaps range " +
                                       r.ToString());
      }
      return Status::OK();
    }
    next = r.last() + 1;
  }
  return Status::InvalidArgument(ranges->empty() ? std::string("no range covers any position")
                                                 : "no range covers the positions after range " +
                                                       ranges->back().ToString());
}

size_t RouteRange(const std::vector<TableRange>& partition, uint64_t position) {
  auto it = std::upper_bound(partition.begin(), partition.end(), position,
                             [](uint64_t p, const TableRange& r) { return p < r.first(); });
  return static_cast<size_t>(it - partition.begin()) - 1;
}

uint64_t EncodeRangeWord(const TableRange& range, RangeState state) {
  uint64_t word = (uint64_t{kRangeWordVersion} << 56) | (uint64_t{range.depth} << 40) |
                  (uint64_t{static_cast<uint8_t>(state)} << 32) | range.prefix;
  return word | (uint64_t{RangeCheck(word)} << 48);
}

Status DecodeRangeWord(uint64_t word, TableRange* range, RangeState* state) {
  if (word == 0) {
    *range = TableRange{};
    *state = RangeState::kActive;
    return Status::OK();
  }
  const uint32_t version = static_cast<uint32_t>(word >> 56);
  if (version != kRangeWordVersion) {
    return Status::Corruption("range word version " + std::to_string(version) + ", expected " +
                              std::to_string(kRangeWordVersion));
  }
  if (static_cast<uint8_t>(word >> 48) != RangeCheck(word)) {
    return Status::Corruption("range word check byte mismatch");
  }
  const uint8_t raw_state = static_cast<uint8_t>(word >> 32);
  if (raw_state > static_cast<uint8_t>(RangeState::kFilling)) {
    return Status::Corruption("range word state " + std::to_string(raw_state) + " unknown");
  }
  TableRange r{static_cast<uint32_t>((word >> 40) & 0xff), static_cast<uint32_t>(word)};
  if (!r.Valid()) return Status::Corruption("range word range " + r.ToString() + " not valid");
  *range = r;
  *state = static_cast<RangeState>(raw_state);
  return Status::OK();
}

}  // namespace pdpm::dsm
