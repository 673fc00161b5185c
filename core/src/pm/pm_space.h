// PmSpace: a server's PM as PDPM lays it out — a superblock area, then
// segment_count segments of segment_size bytes each.
//
//   offset 0                    kSuperblockAreaSize          + segment_size
//   | slot 0 | slot 1 | unused  | segment 0                  | segment 1 | ...
//
// Contract:
//   * A device is formatted only by an explicit Format. Open never formats:
//     it refuses an unformatted (blank) device (kNotFound), a damaged
//     superblock or other data (kCorruption), a layout version this build
//     cannot read
//     (kNotSupported), a device of another cluster or with another segment
//     size than expected (kFailedPrecondition, naming both values), and a
//     device smaller than its superblock records (kCorruption).
//   * Every superblock update (AssignIdentity) is crash-atomic: after a
//     crash at any point Open finds either the old or the new record, never
//     a mix. The new record goes to the slot not holding the current one
//     and counts once persisted; the valid slot with the higher generation
//     wins.
//   * Format and updates persist before they return. Segment contents are
//     not touched: after Format they are whatever the device held (zero for
//     a new file); the layers above initialise what they use.
//   * Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>

#include "common/status.h"
#include "common/uuid.h"
#include "pm/pm_device.h"
#include "pm/superblock.h"

namespace pdpm::pm {

inline constexpr uint64_t kDefaultSegmentSize = 2ull << 30;
// Segment sizes are multiples of this, so every segment starts 2 MiB-aligned.
inline constexpr uint64_t kSegmentAlignment = 2ull << 20;

struct FormatOptions {
  uint64_t segment_size = kDefaultSegmentSize;
  // 0: as many as fit.
  uint64_t segment_count = 0;
  Uuid cluster_uuid;       // nil: assigned later through AssignIdentity
  uint32_t server_id = 0;  // 0: assigned later through AssignIdentity
  // A device whose superblock area is not blank (a superblock, a damaged
  // one, or other data) is refused with kAlreadyExists unless this is set.
  bool overwrite = false;
};

struct OpenOptions {
  // Non-nil: refuse a device that belongs to another cluster. A device not
  // yet in any cluster (nil UUID) is accepted.
  Uuid cluster_uuid;
  // Non-zero: refuse a device formatted with another segment size.
  uint64_t segment_size = 0;
};

class PmSpace {
 public:
  // Writes a new superblock (generation 1) on `device` and opens it.
  // Errors: kInvalidArgument (segment size not a non-zero multiple of
  // kSegmentAlignment), kResourceExhausted (device too small for one
  // segment, or for segment_count), kAlreadyExists (see overwrite).
  // Interrupted by a crash, it leaves the device unformatted, with its old
  // superblock, or formatted — never a mix.
  static Status Format(std::unique_ptr<PmDevice> device, const FormatOptions& options,
                       std::unique_ptr<PmSpace>* out);

  // Opens a formatted device (see the contract for the errors).
  static Status Open(std::unique_ptr<PmDevice> device, const OpenOptions& options,
                     std::unique_ptr<PmSpace>* out);

  PmSpace(const PmSpace&) = delete;
  PmSpace& operator=(const PmSpace&) = delete;

  PmDevice& device() const { return *device_; }
  Superblock superblock() const;
  uint64_t segment_size() const { return segment_size_; }
  uint64_t segment_count() const { return segment_count_; }
  // Segment `index` (< segment_count(); an empty span otherwise).
  std::span<char> segment(uint64_t index) const;

  // Records the cluster and server identity, crash-atomically. A device
  // already in a cluster cannot move to another (kFailedPrecondition).
  Status AssignIdentity(const Uuid& cluster_uuid, uint32_t server_id);

 private:
  PmSpace(std::unique_ptr<PmDevice> device, const Superblock& sb, int active_slot);

  // Writes `next` into the inactive slot and persists it; then it is the
  // current record. Requires mu_.
  void CommitLocked(const Superblock& next);

  const std::unique_ptr<PmDevice> device_;
  const uint64_t segment_size_;
  const uint64_t segment_count_;
  const uint64_t segments_offset_;
  mutable std::mutex mu_;
  Superblock current_;  // guarded by mu_
  int active_slot_;     // guarded by mu_: the slot holding current_
};

}  // namespace pdpm::pm
