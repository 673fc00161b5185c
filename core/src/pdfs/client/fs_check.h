// The pDFS consistency checker (what `pdpm fsck --fs` runs, docs/pdfs.md
// "fsck"). It lists every pDFS record of the cluster (Client::ListObj, table
// by table), reads them all and checks the file system's invariants:
//
//   * the root exists; every directory is reachable from it by exactly one
//     name and its parent pointer names that directory; every entry names
//     an inode of the type its d_type says, sits in the bucket its key
//     belongs to and is the only entry of its name;
//   * nlink of a directory is 2 + its subdirectories, of anything else the
//     number of its names; a directory's size is its entry count; an inode
//     counts against the volume with a quota its place in the tree says;
//   * a volume's quota usage equals what its inodes use;
//   * no orphan inodes: an inode no name reaches has nlink 0 and is on an
//     orphan list (unlinked while open, or a purge a crash interrupted);
//   * no leaked objects: every data chunk belongs to a regular file and
//     lies below its data_end, every directory record to a directory,
//     every quota record to a volume of the root, every lock table to an
//     inode; lock tables and lock sessions decode.
//
// Findings are violations (broken invariants: loss or corruption) or
// repairable (what a client crash legitimately leaves, or what a repair
// can set right without losing anything acknowledged). Repair frees orphans
// and leaked objects and sets quota usage to what is used; it leaves
// violations other than quota usage as they are.
//
// The checker reads records one at a time, not in one transaction: run it
// on a file system that no client changes meanwhile (a busy one may show
// operations half seen). Repair frees orphans, so no client may hold an
// unlinked file open either (its data would go).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/status.h"
#include "dsm/hash_index.h"
#include "pdfs/client/file_system.h"
#include "pdfs/client/records.h"

namespace pdpm::pdfs {

struct FsCheckReport {
  // What was found.
  uint64_t records = 0;  // pDFS objects listed
  uint64_t inodes = 0;
  uint64_t directories = 0;
  uint64_t chunks = 0;
  uint64_t volumes = 0;

  std::vector<std::string> violations;
  std::vector<std::string> repairable;

  // What a repair does about the repairable findings.
  std::vector<uint64_t> inodes_to_purge;          // orphans and stale orphan entries
  std::vector<dsm::ObjectId> objects_to_delete;   // leaked chunks and records
  std::map<uint64_t, VolumeQuota> quotas_to_set;  // volume -> the usage found

  bool ok() const { return violations.empty(); }
  bool clean() const { return violations.empty() && repairable.empty(); }
  // Counts, then one finding per line (violations first).
  std::string ToString() const;
};

// Checks the pDFS of the cluster `client` talks to. Errors: the cluster's
// (listing or reading a record failed); findings are in the report.
Status CheckFileSystem(client::Client* client, FsCheckReport* report);

// Carries out the repairs of `report` (a CheckFileSystem report of an
// unchanged file system) through `fs` and `client`; check again afterwards
// to see the result.
Status RepairFileSystem(client::Client* client, FileSystem* fs, const FsCheckReport& report);

}  // namespace pdpm::pdfs
