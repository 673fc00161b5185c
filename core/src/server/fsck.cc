#include "server/fsck.h"

#include <cstring>
#include <memory>

#include "dsm/chunk.h"
#include "dsm/pallocator.h"
#include "pdkvs/cceh.h"
#include "pdkvs/hash.h"
#include "pm/pm_device.h"
#include "pm/pm_space.h"

namespace pdpm::server {

bool PmCheckReport::ok() const {
  for (const auto& s : segments) {
    if (!s.ok()) return false;
  }
  return true;
}

bool PmCheckReport::clean() const {
  for (const auto& s : segments) {
    if (!s.report.clean() || !s.tx_log.violations.empty()) return false;
  }
  return true;
}

std::string PmCheckReport::ToString() const {
  std::string out = "cluster " + (cluster_uuid.empty() ? std::string("(none)") : cluster_uuid) +
                    " server " + std::to_string(server_id) + ": " +
                    std::to_string(segments.size()) + " of " + std::to_string(segment_count) +
                    " segments in use\n";
  // Heap blocks stay allocated until freed: a client that died between
  // PAllocate and linking a block leaks it (docs/dsm.md), and this is
  // where an operator sees the heap grow.
  uint64_t heap_segments = 0, heap_blocks = 0, heap_bytes = 0;
  for (const auto& s : segments) {
    if (s.role.kind != SegmentKind::kHeap) continue;
    heap_segments++;
    heap_blocks += s.report.allocated_blocks;
    heap_bytes += s.report.allocated_bytes;
  }
  out += "heap: " + std::to_string(heap_blocks) + " blocks allocated, " +
         std::to_string(heap_bytes) + " bytes, in " + std::to_string(heap_segments) +
         " segments of " + std::to_string(segment_size) + " bytes\n";
  for (const auto& s : segments) {
    const char* kind = s.role.kind == SegmentKind::kHeap    ? "heap"
                       : s.role.kind == SegmentKind::kTable ? "table"
                                                            : "transaction log";
    out += "segment " + std::to_string(s.local_index) + " (" + kind;
    if (s.role.kind == SegmentKind::kTable) out += " " + std::to_string(s.role.table);
    out += ", global " + std::to_string(s.role.global) + "): " +
           (!s.ok()            ? "VIOLATIONS"
            : s.report.clean() ? "clean"
                               : "repairable") +
           ", blocks " + std::to_string(s.report.allocated_blocks) + " (" +
           std::to_string(s.report.allocated_bytes) + " bytes), objects " +
           std::to_string(s.report.objects) + "\n";
    if (s.role.kind == SegmentKind::kTxLog) {
      out += "  areas assigned " + std::to_string(s.tx_log.assigned_areas) + ", live records " +
             std::to_string(s.tx_log.live_records) + ", in doubt " +
             std::to_string(s.tx_log.in_doubt) + "\n";
      for (const auto& r : s.tx_log.in_doubt_records) out += "  in doubt: " + r + "\n";
      for (const auto& v : s.tx_log.violations) out += "  violation: " + v + "\n";
    }
    if (!s.report.clean()) out += s.report.ToString();
  }
  return out;
}

namespace {

// The log region named by the segment's root slots (segment_role.h).
void CheckTxLog(std::span<const char> seg, dsm::TxLogCheck* out) {
  dsm::RegionHeader h;
  std::memcpy(&h, seg.data() + dsm::kRegionHeaderOffset, sizeof(h));
  uint64_t region = h.roots[kTxLogRegionSlot];
  uint64_t geometry = h.roots[kTxLogGeometrySlot];
  if (region == 0) return;  // created, log region not yet allocated
  uint64_t count = geometry >> 32, area_size = geometry & 0xffffffffu;
  if (count == 0 || area_size == 0 || region > seg.size() ||
      count * area_size > seg.size() - region) {
    out->violations.push_back("transaction log region outside its segment");
    return;
  }
  dsm::CheckTxLogRegion(seg.data() + region, area_size, static_cast<uint32_t>(count), out);
}

// The pDKVS vnode of a table segment (root slot kKvRootSlot), if it has one:
// its findings join the segment's report.
void CheckVnode(std::span<char> seg, dsm::SegmentCheckReport* out) {
  dsm::RegionHeader h;
  std::memcpy(&h, seg.data() + dsm::kRegionHeaderOffset, sizeof(h));
  const uint64_t header = h.roots[kKvRootSlot];
  if (header == 0) return;
  // Opening the allocator only reads PM (it rebuilds its free lists in
  // memory); the check never persists.
  dsm::PmRange range{seg.data(), seg.size(), [](const void*, size_t) {}};
  std::unique_ptr<dsm::PAllocator> alloc;
  Status s = dsm::PAllocator::Open(range, dsm::PAllocatorOptions{}, &alloc);
  if (!s.ok()) {
    out->violations.push_back("pDKVS vnode: cannot open the region: " + s.ToString());
    return;
  }
  pdkvs::CcehCheckReport r = pdkvs::CcehIndex::Check(alloc.get(), header);
  pdkvs::VnodeHashes::Check(alloc.get(), &r);  // the hashes' field indexes
  for (const auto& v : r.violations) out->violations.push_back("pDKVS vnode: " + v);
  if (r.interrupted_splits > 0 || r.stale_slots > 0 || r.empty_hashes > 0) {
    out->repairable.push_back("pDKVS vnode: " + std::to_string(r.interrupted_splits) +
                              " interrupted splits, " + std::to_string(r.stale_slots) +
                              " stale slots, " + std::to_string(r.empty_hashes) + " empty hashes");
  }
}

}  // namespace

Status CheckServerPm(const std::string& path, PmCheckReport* report) {
  *report = PmCheckReport{};
  std::unique_ptr<pm::PmDevice> device;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(path, pm::PmOptions{}, &device));
  std::unique_ptr<pm::PmSpace> space;
  PDPM_RETURN_IF_ERROR(pm::PmSpace::Open(std::move(device), pm::OpenOptions{}, &space));
  pm::Superblock sb = space->superblock();
  if (!sb.cluster_uuid.is_nil()) report->cluster_uuid = sb.cluster_uuid.ToString();
  report->server_id = sb.server_id;
  report->segment_size = space->segment_size();
  report->segment_count = space->segment_count();
  for (uint64_t i = 0; i < space->segment_count(); i++) {
    std::span<char> seg = space->segment(i);
    SegmentFinding f;
    f.local_index = static_cast<uint32_t>(i);
    PDPM_RETURN_IF_ERROR(ReadSegmentRole(seg, &f.role).WithContext("segment " + std::to_string(i)));
    if (f.role.kind == SegmentKind::kFree) continue;
    f.report = dsm::CheckSegment(seg.data(), seg.size(),
                                 f.role.kind == SegmentKind::kTable ? kObjectRootSlot : -1);
    if (f.role.kind == SegmentKind::kTxLog) CheckTxLog(seg, &f.tx_log);
    if (f.role.kind == SegmentKind::kTable && f.report.ok()) CheckVnode(seg, &f.report);
    report->segments.push_back(std::move(f));
  }
  return Status::OK();
}

}  // namespace pdpm::server
