#include "net/verbs/verbs_wire.h"

#include <algorithm>

namespace pdpm::net::verbs {

size_t EncodeConnectData(uint32_t core, std::string_view blob, uint8_t* out) {
  ConnectHeader header{kWireVersion, static_cast<uint8_t>(blob.size()), 0, core};
  std::memcpy(out, &header, sizeof(header));
  std::memcpy(out + sizeof(header), blob.data(), blob.size());
  return sizeof(header) + blob.size();
}

Status DecodeConnectData(std::span<const uint8_t> data, uint32_t* core, std::string* blob) {
  ConnectHeader header;
  if (data.size() < sizeof(header)) {
    return Status::Corruption("connect data shorter than its header");
  }
  std::memcpy(&header, data.data(), sizeof(header));
  if (header.version != kWireVersion) {
    return Status::Corruption("connect data of unknown version " + std::to_string(header.version));
  }
  // rdma_cm pads private data with zeros, so the length may exceed ours.
  if (header.blob_length > kMaxConnectBlob || sizeof(header) + header.blob_length > data.size()) {
    return Status::Corruption("connect blob length out of range");
  }
  *core = header.core;
  blob->assign(reinterpret_cast<const char*>(data.data()) + sizeof(header), header.blob_length);
  return Status::OK();
}

size_t EncodeRejectData(const Status& why, uint8_t* out) {
  std::string_view message = why.message();
  size_t length = std::min(message.size(), kRejectDataSize - 4);
  out[0] = kWireVersion;
  out[1] = static_cast<uint8_t>(length);
  uint16_t code = static_cast<uint16_t>(why.code());
  std::memcpy(out + 2, &code, sizeof(code));
  std::memcpy(out + 4, message.data(), length);
  return 4 + length;
}

Status DecodeRejectData(std::span<const uint8_t> data) {
  if (data.size() < 4 || data[0] != kWireVersion || 4u + data[1] > data.size()) {
    return Status::Unavailable("connection refused");
  }
  uint16_t code;
  std::memcpy(&code, data.data() + 2, sizeof(code));
  if (code == 0 || code > static_cast<uint16_t>(StatusCode::kInternal)) {
    return Status::Unavailable("connection refused");
  }
  std::string_view message(reinterpret_cast<const char*>(data.data()) + 4, data[1]);
  return Status(static_cast<StatusCode>(code),
                "peer refused the connection: " + std::string(message));
}

Status DecodeControl(std::span<const uint8_t> data, ControlMessage* out) {
  if (data.size() != sizeof(ControlMessage)) {
    return Status::Corruption("control message of " + std::to_string(data.size()) + " bytes");
  }
  std::memcpy(out, data.data(), sizeof(*out));
  if (out->version != kWireVersion) {
    return Status::Corruption("control message of unknown version");
  }
  if (out->type < static_cast<uint8_t>(ControlType::kPersistRequest) ||
      out->type > static_cast<uint8_t>(ControlType::kDescribeReply)) {
    return Status::Corruption("control message of unknown type");
  }
  if (out->status > static_cast<uint16_t>(StatusCode::kInternal)) {
    return Status::Corruption("control message with unknown status");
  }
  return Status::OK();
}

}  // namespace pdpm::net::verbs
