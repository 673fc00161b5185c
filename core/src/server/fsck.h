// The offline checker of a server's PM (what `pdpm fsck` runs): opens the
// PM read-only in spirit (it never writes), finds every segment in use from
// its role word (segment_role.h) and runs dsm::CheckSegment on it, on a
// table segment's pDKVS vnode pdkvs::CcehIndex::Check (its findings join
// the segment's report), and on a transaction-log segment
// dsm::CheckTxLogRegion on its log region. The PM
// must not be open in a running server (the device lock refuses it with
// kFailedPrecondition).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "dsm/segment_check.h"
#include "dsm/txlog.h"
#include "server/segment_role.h"

namespace pdpm::server {

struct SegmentFinding {
  uint32_t local_index = 0;
  SegmentRole role;
  dsm::SegmentCheckReport report;
  dsm::TxLogCheck tx_log;  // kTxLog segments: the log region (violations count)
  bool ok() const { return report.ok() && tx_log.violations.empty(); }
};

struct PmCheckReport {
  std::string cluster_uuid;  // "" when the PM has not joined a cluster
  uint32_t server_id = 0;
  uint64_t segment_size = 0;
  uint64_t segment_count = 0;
  std::vector<SegmentFinding> segments;  // the segments in use

  // No segment has a violation.
  bool ok() const;
  // No violation and nothing repairable.
  bool clean() const;
  // Human-readable: one line per segment, then its findings.
  std::string ToString() const;
};

// Errors: those of opening the device and its superblock (kNotFound for a
// missing or unformatted PM, kFailedPrecondition while a server holds it,
// kCorruption for a damaged superblock or role word). Broken invariants are
// not errors: they are in the report (check report->ok()).
Status CheckServerPm(const std::string& path, PmCheckReport* report);

}  // namespace pdpm::server
