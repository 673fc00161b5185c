#include "net/tcp/wire.h"

#include <bit>
#include <cstring>

#include "net/transport.h"

namespace pdpm::net::tcp {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; add byte swapping for this host");

template <typename T>
void Put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

// Layout: 0 magic u16 | 2 version u8 | 3 type u8 | 4 flags u8 | 5 pad u8 |
// 6 status u16 | 8 length u32 | 12 key u32 | 16 imm u32 | 20 read_length u32 |
// 24 seq u64 | 32 offset u64 | 40 arg0 u64 | 48 arg1 u64.
void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) {
  Put<uint16_t>(out + 0, kFrameMagic);
  out[2] = kWireVersion;
  out[3] = static_cast<uint8_t>(h.type);
  out[4] = h.flags;
  out[5] = 0;
  Put<uint16_t>(out + 6, h.status);
  Put<uint32_t>(out + 8, h.length);
  Put<uint32_t>(out + 12, h.key);
  Put<uint32_t>(out + 16, h.imm);
  Put<uint32_t>(out + 20, h.read_length);
  Put<uint64_t>(out + 24, h.seq);
  Put<uint64_t>(out + 32, h.offset);
  Put<uint64_t>(out + 40, h.arg0);
  Put<uint64_t>(out + 48, h.arg1);
}

Status DecodeFrameHeader(const uint8_t in[kFrameHeaderSize], uint32_t max_transfer,
                         FrameHeader* out) {
  if (Get<uint16_t>(in) != kFrameMagic) return Status::Corruption("frame: bad magic");
  if (in[2] != kWireVersion) {
    return Status::Corruption("frame: unsupported version " + std::to_string(in[2]));
  }
  FrameHeader h;
  h.type = static_cast<FrameType>(in[3]);
  h.flags = in[4];
  h.status = Get<uint16_t>(in + 6);
  h.length = Get<uint32_t>(in + 8);
  h.key = Get<uint32_t>(in + 12);
  h.imm = Get<uint32_t>(in + 16);
  h.read_length = Get<uint32_t>(in + 20);
  h.seq = Get<uint64_t>(in + 24);
  h.offset = Get<uint64_t>(in + 32);
  h.arg0 = Get<uint64_t>(in + 40);
  h.arg1 = Get<uint64_t>(in + 48);
  if (in[5] != 0 || (h.flags & ~(kFlagPersist | kFlagAwaited)) != 0) {
    return Status::Corruption("frame: reserved bits set");
  }
  const bool is_request = h.type != FrameType::kResponse;
  switch (h.type) {
    case FrameType::kRead:
      if (h.length != 0) return Status::Corruption("frame: read request with payload");
      if (h.read_length > max_transfer) return Status::TooLarge("frame: read over max_transfer");
      break;
    case FrameType::kWrite:
    case FrameType::kWriteWithImm:
      if (h.read_length != 0) return Status::Corruption("frame: write with read length");
      break;
    case FrameType::kCompareSwap:
    case FrameType::kFetchAdd:
      if (h.length != 0 || h.read_length != 0) {
        return Status::Corruption("frame: atomic request with payload");
      }
      break;
    case FrameType::kResponse:
      if (h.status > static_cast<uint16_t>(StatusCode::kInternal)) {
        return Status::Corruption("frame: unknown status code");
      }
      if (h.status != 0 && h.length > kMaxErrorMessage) {
        return Status::Corruption("frame: error message too long");
      }
      break;
    default: return Status::Corruption("frame: unknown type " + std::to_string(in[3]));
  }
  if (h.length > max_transfer) return Status::TooLarge("frame: payload over max_transfer");
  if (is_request && h.status != 0) return Status::Corruption("frame: request with status");
  if (h.type != FrameType::kWrite && h.type != FrameType::kWriteWithImm &&
      (h.flags & kFlagPersist) != 0) {
    return Status::Corruption("frame: persist flag on a non-write");
  }
  if (!is_request && h.flags != 0) return Status::Corruption("frame: flags on a response");
  *out = h;
  return Status::OK();
}

void EncodeHello(const Hello& h, uint8_t out[kHelloSize]) {
  Put<uint32_t>(out + 0, kHelloMagic);
  out[4] = kWireVersion;
  out[5] = h.blob_length;
  Put<uint16_t>(out + 6, h.status);
  Put<uint32_t>(out + 8, h.core);
  Put<uint32_t>(out + 12, h.max_transfer);
}

Status DecodeHello(const uint8_t in[kHelloSize], Hello* out) {
  if (Get<uint32_t>(in) != kHelloMagic) return Status::Corruption("hello: bad magic");
  if (in[4] != kWireVersion) {
    return Status::Corruption("hello: unsupported version " + std::to_string(in[4]));
  }
  Hello h;
  h.blob_length = in[5];
  h.status = Get<uint16_t>(in + 6);
  h.core = Get<uint32_t>(in + 8);
  h.max_transfer = Get<uint32_t>(in + 12);
  if (h.blob_length > kMaxConnectBlob) return Status::Corruption("hello: blob too long");
  if (h.status > static_cast<uint16_t>(StatusCode::kInternal)) {
    return Status::Corruption("hello: unknown status code");
  }
  *out = h;
  return Status::OK();
}

}  // namespace pdpm::net::tcp
