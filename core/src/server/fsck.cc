#include "server/fsck.h"

#include <memory>

#include "pm/pm_device.h"
#include "pm/pm_space.h"

namespace pdpm::server {

bool PmCheckReport::ok() const {
  for (const auto& s : segments) {
    if (!s.report.ok()) return false;
  }
  return true;
}

bool PmCheckReport::clean() const {
  for (const auto& s : segments) {
    if (!s.report.clean()) return false;
  }
  return true;
}

std::string PmCheckReport::ToString() const {
  std::string out = "cluster " + (cluster_uuid.empty() ? std::string("(none)") : cluster_uuid) +
                    " server " + std::to_string(server_id) + ": " +
                    std::to_string(segments.size()) + " of " + std::to_string(segment_count) +
                    " segments in use\n";
  for (const auto& s : segments) {
    const char* kind = s.role.kind == SegmentKind::kHeap ? "heap" : "table";
    out += "segment " + std::to_string(s.local_index) + " (" + kind;
    if (s.role.kind == SegmentKind::kTable) out += " " + std::to_string(s.role.table);
    out += ", global " + std::to_string(s.role.global) + "): " +
           (s.report.clean() ? "clean"
            : s.report.ok()  ? "repairable"
                             : "VIOLATIONS") +
           ", blocks " + std::to_string(s.report.allocated_blocks) + ", objects " +
           std::to_string(s.report.objects) + "\n";
    if (!s.report.clean()) out += s.report.ToString();
  }
  return out;
}

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
    report->segments.push_back(std::move(f));
  }
  return Status::OK();
}

}  // namespace pdpm::server
