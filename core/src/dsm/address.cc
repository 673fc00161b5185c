#include "dsm/address.h"

#include <cstdio>

namespace pdpm::dsm {
namespace {

void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t GetLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

Status Descriptor::Validate() const {
  if ((bits & ~(kPermMask | kReplicaMask)) != 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "descriptor 0x%08x has reserved bits set", bits);
    return Status::InvalidArgument(buf);
  }
  if (replicas() == 0) return Status::InvalidArgument("descriptor has a replica count of 0");
  return Status::OK();
}

std::string Descriptor::ToString() const {
  std::string s;
  s += can_read() ? 'r' : '-';
  s += can_write() ? 'w' : '-';
  s += " r" + std::to_string(replicas());
  return s;
}

SpaceKind SegmentKind(uint32_t segment) {
  if (segment == kNullSegment) return SpaceKind::kNull;
  return segment < kHeapSegmentLimit ? SpaceKind::kHeap : SpaceKind::kObject;
}

Status ValidateSegmentSize(uint64_t segment_size) {
  if (segment_size < kMinSegmentSize || segment_size > kMaxSegmentSize ||
      segment_size % kSegmentAlignment != 0) {
    return Status::InvalidArgument("segment size " + std::to_string(segment_size) +
                                   " must be a multiple of 4 MiB between 4 MiB and 1 TiB");
  }
  return Status::OK();
}

std::array<uint8_t, GlobalAddress::kEncodedSize> GlobalAddress::Encode() const {
  std::array<uint8_t, kEncodedSize> out{};
  PutLe64(out.data(), hi());
  PutLe64(out.data() + 8, lo());
  return out;
}

Status GlobalAddress::Decode(const uint8_t* bytes, size_t size, GlobalAddress* out) {
  if (size != kEncodedSize) {
    return Status::InvalidArgument("a global address is 16 bytes, got " + std::to_string(size));
  }
  GlobalAddress a = FromWords(GetLe64(bytes), GetLe64(bytes + 8));
  PDPM_RETURN_IF_ERROR(a.descriptor.Validate());
  *out = a;
  return Status::OK();
}

Status GlobalAddress::CheckRange(uint64_t length, uint64_t segment_size) const {
  if (is_null()) return Status::InvalidArgument("null global address");
  PDPM_RETURN_IF_ERROR(descriptor.Validate());
  if (offset >= segment_size || length > segment_size - offset) {
    return Status::OutOfRange(ToString() + " length " + std::to_string(length) +
                              " leaves its segment of " + std::to_string(segment_size) + " bytes");
  }
  return Status::OK();
}

Status GlobalAddress::Advance(uint64_t delta, uint64_t segment_size, GlobalAddress* out) const {
  if (offset >= segment_size || delta >= segment_size - offset) {
    return Status::OutOfRange(ToString() + " + " + std::to_string(delta) +
                              " leaves its segment of " + std::to_string(segment_size) + " bytes");
  }
  *out = *this;
  out->offset += delta;
  return Status::OK();
}

std::string GlobalAddress::ToString() const {
  if (is_null()) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "seg %u + 0x%llx", segment,
                static_cast<unsigned long long>(offset));
  return buf;
}

}  // namespace pdpm::dsm
