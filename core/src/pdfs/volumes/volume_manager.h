// VolumeManager: the operations on pDFS volumes (docs/pdfs.md "Volumes"
// and "Volume API"), the one implementation behind both `pdpm fs volume
// ...` and the pdfs-volume-api gRPC service.
//
// Contract:
//   * Every call returns a Status: kInvalidArgument for a bad name, quota
//     or page token; kNotFound for a volume that does not exist;
//     kAlreadyExists when Create finds the name taken by a volume with
//     other quotas (or by something that is not a volume);
//     kFailedPrecondition when a resize would go below what the volume
//     uses, or the name is a directory without quotas; kResourceExhausted
//     when the cluster has no room; kUnavailable/kIOError when the cluster
//     failed the operation.
//   * Create and Delete are idempotent: a Create repeated with the same
//     quotas returns the volume, a Delete of a missing volume is OK.
//   * Only directories of the root made with quotas are volumes: List and
//     Stat do not show the others.
//   * Thread-safe (as FileSystem is).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "common/status.h"
#include "monitor/monitor_client.h"
#include "pdfs/client/file_system.h"

namespace pdpm::pdfs {

// A volume name: one path component of at most 255 bytes.
Status CheckVolumeName(std::string_view name);

// What new volumes can still hold.
struct VolumeCapacity {
  uint64_t available_bytes = 0;  // free bytes of the servers up / replica_count
  uint64_t total_bytes = 0;      // capacity of the servers up / replica_count
  uint32_t replica_count = 1;
};

class VolumeManager {
 public:
  // Connects to the cluster `options` names (kPermissionDenied for a wrong
  // secret, kUnavailable when its monitor cannot be reached).
  static Status Open(const client::ClientOptions& options, std::unique_ptr<VolumeManager>* out);
  ~VolumeManager();
  VolumeManager(const VolumeManager&) = delete;
  VolumeManager& operator=(const VolumeManager&) = delete;

  // A volume with these quotas (0: none) whose directory `owner` owns.
  // With a non-empty `source`, the new volume holds a copy of that
  // volume's files (kResourceExhausted when they do not fit its quotas);
  // the copy is made under a hidden name and renamed into place when
  // complete, so the volume never appears half copied.
  Status Create(std::string_view name, uint64_t byte_limit, uint64_t inode_limit,
                const Owner& owner, std::string_view source, VolumeInfo* out);
  Status Delete(std::string_view name);
  // New quotas, effective at once for every client.
  Status Resize(std::string_view name, uint64_t byte_limit, uint64_t inode_limit, VolumeInfo* out);
  Status Stat(std::string_view name, VolumeInfo* out);
  // Volumes in name order after the one `page_token` names ("" from the
  // start), at most `max` (0: all); *next_page_token is "" after the last.
  Status List(std::string_view page_token, size_t max, std::vector<VolumeInfo>* out,
              std::string* next_page_token);
  Status Capacity(VolumeCapacity* out);

  FileSystem* file_system() { return fs_.get(); }

 private:
  VolumeManager(std::unique_ptr<client::Client> client, std::unique_ptr<FileSystem> fs,
                std::unique_ptr<monitor::MonitorClient> monitor);
  // Copies the contents of directory `from` into the empty directory `to`.
  // `copied` maps the inodes with several names copied so far to their
  // copies, so hard links stay links.
  Status CopyTree(uint64_t from, uint64_t to, std::map<uint64_t, uint64_t>* copied);
  Status CopyNode(uint64_t from_parent, const ReaddirEntry& entry, uint64_t to_parent,
                  std::map<uint64_t, uint64_t>* copied);

  std::unique_ptr<client::Client> client_;
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<monitor::MonitorClient> monitor_;
};

}  // namespace pdpm::pdfs
