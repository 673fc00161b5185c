// Wire formats of the verbs backend: the rdma_cm private data of connect,
// accept and reject, and the control messages (persist request and reply)
// carried by SEND on the connection's queue pair. Little-endian, versioned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/transport.h"

namespace pdpm::net::verbs {

inline constexpr uint8_t kWireVersion = 1;

// Private data of a connect request and of its accept: 8 header bytes and
// the blob. 56 bytes is what rdma_cm carries in a request on every fabric.
struct ConnectHeader {
  uint8_t version;
  uint8_t blob_length;
  uint16_t reserved;
  uint32_t core;
};
static_assert(sizeof(ConnectHeader) == 8);
inline constexpr size_t kConnectDataSize = sizeof(ConnectHeader) + kMaxConnectBlob;

// Fills `out` (kConnectDataSize bytes) and returns the used length.
size_t EncodeConnectData(uint32_t core, std::string_view blob, uint8_t* out);
Status DecodeConnectData(std::span<const uint8_t> data, uint32_t* core, std::string* blob);

// Private data of a reject: why the listener refused (a Status).
inline constexpr size_t kRejectDataSize = 64;
size_t EncodeRejectData(const Status& why, uint8_t* out);
// The refusal as a Status; kUnavailable when the data is not ours (e.g.
// the kernel rejected because nobody listens).
Status DecodeRejectData(std::span<const uint8_t> data);

enum class ControlType : uint8_t {
  kPersistRequest = 1,
  kPersistReply = 2,
  kDescribeRequest = 3,  // what is the I/O address of offset 0 of `key`?
  kDescribeReply = 4,    // status, key, offset = that address, size, access, max_transfer
};

// A control message. Persist requests name a registered range by key and
// offset (`seq` is the requester's tag, echoed in the reply); one with
// has_imm also raises an Incoming event once the range is persisted.
// Describe requests ask for the I/O address a key's range starts at.
struct ControlMessage {
  uint8_t version;
  uint8_t type;     // ControlType
  uint16_t status;  // reply: StatusCode of the persist
  uint32_t key;     // request: the range's key
  uint64_t seq;     // requester's tag
  uint64_t offset;  // request: offset inside the range
  uint32_t length;  // request: bytes written
  uint32_t imm;     // request: immediate to deliver when has_imm
  uint8_t has_imm;
  uint8_t access;  // describe reply: the range's Access bits
  uint8_t padding[2];
  uint32_t max_transfer;  // describe reply: the peer's largest transfer
  uint64_t size;          // describe reply: the range's length
};
static_assert(sizeof(ControlMessage) == 48);

// kCorruption when `data` is not a well-formed control message.
Status DecodeControl(std::span<const uint8_t> data, ControlMessage* out);

}  // namespace pdpm::net::verbs
