#include "server/segment_role.h"

#include <cstring>
#include <string>

#include "dsm/chunk.h"

namespace pdpm::server {

Status SegmentRole::Decode(uint64_t word, SegmentRole* out) {
  uint8_t kind = static_cast<uint8_t>(word >> 56);
  SegmentRole r;
  r.table = static_cast<uint32_t>(word >> 32) & 0xffffff;
  r.global = static_cast<uint32_t>(word);
  switch (kind) {
    case 0:
      if (word != 0) return Status::Corruption("segment role: free but not zero");
      r.kind = SegmentKind::kFree;
      break;
    case 1:
      if (r.table != 0) return Status::Corruption("segment role: heap segment names a table");
      r.kind = SegmentKind::kHeap;
      break;
    case 2:
      if (r.table == 0) return Status::Corruption("segment role: table segment without a table");
      r.kind = SegmentKind::kTable;
      break;
    case 3:
      if (r.table != 0 || r.global != 0) {
        return Status::Corruption("segment role: transaction log with a table or global number");
      }
      r.kind = SegmentKind::kTxLog;
      break;
    default: return Status::Corruption("segment role: unknown kind " + std::to_string(kind));
  }
  *out = r;
  return Status::OK();
}

Status ReadSegmentRole(std::span<const char> segment, SegmentRole* out) {
  *out = SegmentRole{};
  if (segment.size() < dsm::kRegionHeaderOffset + sizeof(dsm::RegionHeader)) {
    return Status::OK();
  }
  dsm::RegionHeader h;
  std::memcpy(&h, segment.data() + dsm::kRegionHeaderOffset, sizeof(h));
  if (h.magic != dsm::kRegionMagic) return Status::OK();
  uint64_t word;
  std::memcpy(&word, &h.roots[kRoleSlot], sizeof(word));
  return SegmentRole::Decode(word, out);
}

}  // namespace pdpm::server
