// Reconfiguration of the cluster view after failures and during drains
// (docs/replication.md), as a pure function of the view so it can be tested
// alone. The view manager calls it with the liveness it observed and
// commits the result under a new epoch.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "monitor/placement.h"
#include "pdpm/v1/monitor.pb.h"

namespace pdpm::monitor {

struct ReconfigureInput {
  std::set<uint32_t> dead;     // DOWN: their copies are lost
  std::set<uint32_t> leaving;  // DRAINING: their copies move away
  // Servers that may take new backups (UP, not draining), with their
  // segment counts; segments_used is recomputed from the view.
  std::vector<PlacementCandidate> candidates;
  uint64_t epoch = 0;  // the epoch the changes take effect in
};

// Applies, to every segment of `view`:
//   1. backups on dead or leaving servers are dropped;
//   2. a primary on a dead or leaving server is replaced by its first
//      in-sync backup (placement_epoch = epoch); without one it stays
//      (the segment is unavailable until its server returns, or, for a
//      drain, until a new backup is in sync);
//   3. missing backups are chosen among the candidates (ChooseBackups),
//      each on its holder's highest free local segment, in state SYNCING;
//   4. a table holding a segment is owned by that segment's primary
//      (assigned_epoch = epoch when it changes).
// Returns one line per change (for the log); empty when nothing changed.
std::vector<std::string> Reconfigure(const ReconfigureInput& in, v1::ClusterView* view);

// Whether `server_id` holds any copy of a segment or owns a table of `view`.
bool HoldsData(const v1::ClusterView& view, uint32_t server_id);

}  // namespace pdpm::monitor
