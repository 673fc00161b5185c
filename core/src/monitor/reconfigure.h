// Reconfiguration of the cluster view after failures and during drains
// (docs/replication.md), as a pure function of the view so it can be tested
// alone. The view manager calls it with the liveness it observed and
// commits the result under a new epoch.
#pragma once

#include <cstdint>
#include <map>
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

// Local segments of each server that hold something: a primary, a backup,
// or server-local data (ServerInfo.server_local_segments). No copy is ever
// placed on one of them.
std::map<uint32_t, std::set<uint32_t>> TakenLocalSegments(const v1::ClusterView& view);

// The local segment a new backup takes on `holder`: its highest one not in
// `taken` (servers create their own segments from the lowest free one, so
// the two meet only on a nearly full server). The one placement order of
// AllocateSegment and Reconfigure. False when every one is taken.
bool BackupLocalIndex(const v1::ServerInfo& holder, const std::set<uint32_t>& taken,
                      uint32_t* index);

// The index of the pending split of segment `parent` in view.splits(), or
// -1 when it has none.
int FindSplit(const v1::ClusterView& view, uint64_t parent);

// Gives up pending split `index`: its record and, once announced, its new
// segment leave the view (the segment's holders free their copies when
// they see it gone; the parent never deleted anything before a commit).
void AbandonSplit(v1::ClusterView* view, int index);

// Applies, to every pending split of `view`:
//   0. a split whose parent or new segment lost its primary (dead or
//      leaving), or whose target server left before creating the new
//      segment, is abandoned (AbandonSplit);
// then to every segment of `view`:
//   1. backups on dead or leaving servers, and backups on a local segment
//      their server holds server-local data in, are dropped;
//   2. a primary on a dead or leaving server is replaced by its first
//      in-sync backup (placement_epoch = epoch); without one it stays
//      (the segment is unavailable until its server returns, or, for a
//      drain, until a new backup is in sync);
//   3. missing backups are chosen among the candidates (ChooseBackups;
//      segments_used counts every taken local segment), each on
//      BackupLocalIndex, in state SYNCING;
//   4. a table holding a segment is owned by the primary of its segment
//      whose range holds position 0 (its first segment, which every split
//      keeps the lower half of; assigned_epoch = epoch when it changes).
// Returns one line per change (for the log); empty when nothing changed.
std::vector<std::string> Reconfigure(const ReconfigureInput& in, v1::ClusterView* view);

// Whether `server_id` holds any copy of a segment or owns a table of `view`.
bool HoldsData(const v1::ClusterView& view, uint32_t server_id);

}  // namespace pdpm::monitor
