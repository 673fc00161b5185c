#include "server/protocol.h"

#include <cstring>

#include "common/crc32c.h"

namespace pdpm::server {
namespace {

void PutU64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; i++) b[i] = static_cast<char>(v >> (8 * i));
  out->append(b, 8);
}

}  // namespace

net::RpcOptions DataPlaneRpcOptions(uint32_t threads, uint32_t timeout_ms) {
  net::RpcOptions o;
  o.slots = 8;
  // Payloads up to a slot travel in the message itself; a larger one costs
  // its receiver a one-sided read first (a round trip over TCP). 64 KiB
  // carries a gateway's batch of a vnode (tens to hundreds of requests)
  // and its shipment to the backups inline.
  o.slot_size = kDataPlaneSlotSize;
  o.max_payload = kMaxRpcPayload;
  // Each serving thread (or calling thread) holds one bulk buffer at a
  // time. Buffers are backed by memory only once large payloads use them.
  o.pool_buffers = threads + 1;
  o.server_threads = threads;
  o.timeout_ms = timeout_ms;
  return o;
}

uint64_t ClusterCredential(std::string_view secret) {
  // Two independent 32-bit digests: of the secret, and of the secret under
  // a domain prefix, so the value differs from any other use of its CRC.
  static constexpr char kDomain[] = "pdpm data plane v1";
  uint32_t a = Crc32c(secret);
  uint32_t b = Crc32cExtend(Crc32c(kDomain, sizeof(kDomain) - 1), secret.data(), secret.size());
  return (uint64_t{a} << 32) | b;
}

void Encoder::Header(const RequestHeader& h) {
  PutU64(out_, kProtocolVersion);  // u16 version, u16 + u32 reserved
  PutU64(out_, h.epoch);
  PutU64(out_, h.credential);
  PutU64(out_, 0);
}

void Encoder::Id(const dsm::ObjectId& id) {
  PutU64(out_, id.hi);
  PutU64(out_, id.lo);
}

void Encoder::Address(const dsm::GlobalAddress& a) {
  auto bytes = a.Encode();
  out_->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Status Decoder::U64(uint64_t* v) {
  if (in_.size() - pos_ < 8) return Status::InvalidArgument("rpc message too short");
  uint64_t x = 0;
  for (int i = 0; i < 8; i++) x |= uint64_t{in_[pos_ + i]} << (8 * i);
  pos_ += 8;
  *v = x;
  return Status::OK();
}

Status Decoder::Header(RequestHeader* h) {
  uint64_t version = 0, reserved = 0;
  PDPM_RETURN_IF_ERROR(U64(&version));
  if (version != kProtocolVersion) {
    return Status::InvalidArgument("rpc message version " + std::to_string(version & 0xffff) +
                                   " (this server speaks " + std::to_string(kProtocolVersion) +
                                   ")");
  }
  PDPM_RETURN_IF_ERROR(U64(&h->epoch));
  PDPM_RETURN_IF_ERROR(U64(&h->credential));
  return U64(&reserved);
}

Status Decoder::Id(dsm::ObjectId* id) {
  PDPM_RETURN_IF_ERROR(U64(&id->hi));
  return U64(&id->lo);
}

Status Decoder::Address(dsm::GlobalAddress* a) {
  if (in_.size() - pos_ < dsm::GlobalAddress::kEncodedSize) {
    return Status::InvalidArgument("rpc message too short");
  }
  PDPM_RETURN_IF_ERROR(
      dsm::GlobalAddress::Decode(in_.data() + pos_, dsm::GlobalAddress::kEncodedSize, a));
  pos_ += dsm::GlobalAddress::kEncodedSize;
  return Status::OK();
}

Status Decoder::Str(std::string_view* s) {
  uint64_t len = 0;
  PDPM_RETURN_IF_ERROR(U64(&len));
  if (len > in_.size() - pos_) return Status::InvalidArgument("rpc message too short");
  *s = std::string_view(reinterpret_cast<const char*>(in_.data()) + pos_, len);
  pos_ += len;
  return Status::OK();
}

std::string_view Decoder::Rest() {
  std::string_view rest(reinterpret_cast<const char*>(in_.data()) + pos_, in_.size() - pos_);
  pos_ = in_.size();
  return rest;
}

Status Decoder::Done() const {
  if (pos_ != in_.size()) return Status::InvalidArgument("rpc message too long");
  return Status::OK();
}

}  // namespace pdpm::server
