#include "pm/pm_space.h"

#include <array>
#include <cstring>
#include <string>
#include <utility>

namespace pdpm::pm {
namespace {

struct SlotState {
  Status status;  // as DecodeSuperblock says
  Superblock sb;
  // The record is intact, so its generation counts (readable or not).
  bool intact() const { return status.ok() || status.code() == StatusCode::kNotSupported; }
};

std::array<SlotState, kSuperblockSlots> ReadSlots(const PmDevice& device) {
  std::array<SlotState, kSuperblockSlots> slots;
  for (int i = 0; i < kSuperblockSlots; ++i) {
    slots[i].status = DecodeSuperblock(device.base() + i * kSuperblockSlotStride,
                                       kSuperblockSlotStride, &slots[i].sb);
  }
  return slots;
}

// The intact slot with the highest generation, or -1.
int NewestIntactSlot(const std::array<SlotState, kSuperblockSlots>& slots) {
  int best = -1;
  for (int i = 0; i < kSuperblockSlots; ++i) {
    if (slots[i].intact() && (best < 0 || slots[i].sb.generation > slots[best].sb.generation)) {
      best = i;
    }
  }
  return best;
}

std::string Describe(const Superblock& sb) {
  return "cluster " + sb.cluster_uuid.ToString() + ", server " + std::to_string(sb.server_id) +
         ", generation " + std::to_string(sb.generation);
}

std::string SlotSummary(const std::array<SlotState, kSuperblockSlots>& slots) {
  std::string s;
  for (int i = 0; i < kSuperblockSlots; ++i) {
    if (i > 0) s += "; ";
    s += "slot " + std::to_string(i) + ": ";
    s += slots[i].status.ok() ? Describe(slots[i].sb) : std::string(slots[i].status.message());
  }
  return s;
}

Status CheckSegmentSize(uint64_t segment_size) {
  if (segment_size == 0 || segment_size % kSegmentAlignment != 0) {
    return Status::InvalidArgument("segment size " + std::to_string(segment_size) +
                                   " is not a non-zero multiple of " +
                                   std::to_string(kSegmentAlignment));
  }
  return Status::OK();
}

char* SlotAddress(const PmDevice& device, int slot) {
  return device.base() + slot * kSuperblockSlotStride;
}

// The geometry a superblock records must describe this device.
Status CheckGeometry(const PmDevice& device, const Superblock& sb) {
  Status s = CheckSegmentSize(sb.segment_size);
  if (!s.ok())
    return Status::Corruption(device.path() + ": superblock records " + std::string(s.message()));
  if (sb.segments_offset < kSuperblockAreaSize || sb.segments_offset % kSegmentAlignment != 0) {
    return Status::Corruption(device.path() + ": superblock records segments at offset " +
                              std::to_string(sb.segments_offset));
  }
  if (sb.segment_count == 0 || sb.segments_offset > device.capacity() ||
      sb.segment_count > (device.capacity() - sb.segments_offset) / sb.segment_size) {
    return Status::Corruption(
        device.path() + " has " + std::to_string(device.capacity()) +
        " bytes but its superblock records " + std::to_string(sb.segment_count) + " segments of " +
        std::to_string(sb.segment_size) + " bytes from offset " +
        std::to_string(sb.segments_offset) + " (device truncated or replaced?)");
  }
  return Status::OK();
}

}  // namespace

PmSpace::PmSpace(std::unique_ptr<PmDevice> device, const Superblock& sb, int active_slot)
    : device_(std::move(device)),
      segment_size_(sb.segment_size),
      segment_count_(sb.segment_count),
      segments_offset_(sb.segments_offset),
      current_(sb),
      active_slot_(active_slot) {}

Status PmSpace::Format(std::unique_ptr<PmDevice> device, const FormatOptions& options,
                       std::unique_ptr<PmSpace>* out) {
  const std::string& path = device->path();
  PDPM_RETURN_IF_ERROR(CheckSegmentSize(options.segment_size).WithContext("format " + path));
  const uint64_t capacity = device->capacity();
  if (capacity < kSuperblockAreaSize + options.segment_size) {
    return Status::ResourceExhausted(
        "format " + path + ": device too small: " + std::to_string(capacity) +
        " bytes, one segment of " + std::to_string(options.segment_size) + " bytes after the " +
        std::to_string(kSuperblockAreaSize) + "-byte superblock area needs " +
        std::to_string(kSuperblockAreaSize + options.segment_size));
  }
  const uint64_t fit = (capacity - kSuperblockAreaSize) / options.segment_size;
  if (options.segment_count > fit) {
    return Status::ResourceExhausted(
        "format " + path + ": " + std::to_string(options.segment_count) + " segments of " +
        std::to_string(options.segment_size) + " bytes requested, " + std::to_string(fit) + " fit");
  }

  const auto slots = ReadSlots(*device);
  if (!options.overwrite) {
    for (const SlotState& slot : slots) {
      if (slot.status.code() == StatusCode::kNotFound) continue;
      return Status::AlreadyExists(
          "format " + path + ": its superblock area is not blank (" + SlotSummary(slots) +
          "); formatting would lose what it holds, so it needs an explicit overwrite");
    }
  }

  // The new record outranks every intact old one and goes to the slot not
  // holding the newest of them; only then is the other slot wiped. A crash
  // leaves the old superblock (or none) until the new one is persisted.
  const int newest = NewestIntactSlot(slots);
  Superblock sb;
  sb.generation = newest < 0 ? 1 : slots[newest].sb.generation + 1;
  sb.cluster_uuid = options.cluster_uuid;
  sb.server_id = options.server_id;
  sb.segment_size = options.segment_size;
  sb.segment_count = options.segment_count == 0 ? fit : options.segment_count;
  sb.segments_offset = kSuperblockAreaSize;
  const int target = newest < 0 ? 0 : 1 - newest;
  char record[kSuperblockEncodedSize];
  EncodeSuperblock(sb, record);
  device->CopyPersist(SlotAddress(*device, target), record, sizeof(record));
  char* other = SlotAddress(*device, 1 - target);
  std::memset(other, 0, kSuperblockSlotStride);
  device->Persist(other, kSuperblockSlotStride);

  out->reset(new PmSpace(std::move(device), sb, target));
  return Status::OK();
}

Status PmSpace::Open(std::unique_ptr<PmDevice> device, const OpenOptions& options,
                     std::unique_ptr<PmSpace>* out) {
  const std::string& path = device->path();
  const auto slots = ReadSlots(*device);
  bool blank = true;
  for (const SlotState& slot : slots) blank = blank && slot.status.code() == StatusCode::kNotFound;
  if (blank) {
    return Status::NotFound(path +
                            " is not formatted (no PDPM superblock); it must be formatted "
                            "explicitly (PmSpace::Format)");
  }
  const int newest = NewestIntactSlot(slots);
  if (newest < 0) {
    return Status::Corruption(path + ": superblock damaged, no intact slot (" + SlotSummary(slots) +
                              ")");
  }
  const SlotState& chosen = slots[newest];
  if (!chosen.status.ok()) {
    return Status::NotSupported(path + ": superblock generation " +
                                std::to_string(chosen.sb.generation) + " has " +
                                std::string(chosen.status.message()));
  }
  const SlotState& other = slots[1 - newest];
  if (other.status.ok() && other.sb.generation == chosen.sb.generation &&
      !(other.sb == chosen.sb)) {
    return Status::Corruption(path + ": both superblock slots hold generation " +
                              std::to_string(chosen.sb.generation) + " with different contents");
  }
  const Superblock& sb = chosen.sb;
  PDPM_RETURN_IF_ERROR(CheckGeometry(*device, sb));
  if (!options.cluster_uuid.is_nil() && !sb.cluster_uuid.is_nil() &&
      options.cluster_uuid != sb.cluster_uuid) {
    return Status::FailedPrecondition(path + " belongs to cluster " + sb.cluster_uuid.ToString() +
                                      ", not to cluster " + options.cluster_uuid.ToString());
  }
  if (options.segment_size != 0 && options.segment_size != sb.segment_size) {
    return Status::FailedPrecondition(path + " is formatted with segments of " +
                                      std::to_string(sb.segment_size) + " bytes, expected " +
                                      std::to_string(options.segment_size) +
                                      " (another segment size needs a new format)");
  }
  out->reset(new PmSpace(std::move(device), sb, newest));
  return Status::OK();
}

Superblock PmSpace::superblock() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

std::span<char> PmSpace::segment(uint64_t index) const {
  if (index >= segment_count_) return {};
  return {device_->base() + segments_offset_ + index * segment_size_, segment_size_};
}

Status PmSpace::AssignIdentity(const Uuid& cluster_uuid, uint32_t server_id) {
  if (cluster_uuid.is_nil() || server_id == 0) {
    return Status::InvalidArgument("assign identity: cluster UUID and server ID must be set");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!current_.cluster_uuid.is_nil() && current_.cluster_uuid != cluster_uuid) {
    return Status::FailedPrecondition(device_->path() + " belongs to cluster " +
                                      current_.cluster_uuid.ToString() +
                                      "; it cannot join cluster " + cluster_uuid.ToString());
  }
  Superblock next = current_;
  next.cluster_uuid = cluster_uuid;
  next.server_id = server_id;
  ++next.generation;
  CommitLocked(next);
  return Status::OK();
}

void PmSpace::CommitLocked(const Superblock& next) {
  char record[kSuperblockEncodedSize];
  EncodeSuperblock(next, record);
  const int target = 1 - active_slot_;
  device_->CopyPersist(SlotAddress(*device_, target), record, sizeof(record));
  active_slot_ = target;
  current_ = next;
}

}  // namespace pdpm::pm
