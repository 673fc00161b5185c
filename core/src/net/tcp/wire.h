// The tcp backend's wire format, version 1 (docs/net.md).
//
// A connection starts with a Hello from the connecting side and a
// HelloReply from the listener; after that both directions carry frames:
// a fixed 56-byte little-endian header, then `length` payload bytes.
// Requests (one per posted op) travel from the active side; the passive
// side executes them in order and answers each with one Response frame,
// in the same order. Every field is validated before it is used: a header
// that fails DecodeFrameHeader ends the connection, a valid request that
// names a wrong key or range fails only that request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"

namespace pdpm::net::tcp {

inline constexpr uint16_t kFrameMagic = 0x4450;  // "PD"
inline constexpr uint8_t kWireVersion = 1;
inline constexpr size_t kFrameHeaderSize = 56;
inline constexpr uint32_t kHelloMagic = 0x31444450;  // "PDD1"
inline constexpr size_t kHelloSize = 16;             // + blob
inline constexpr size_t kHelloReplySize = 16;        // + blob
// Error responses carry a message of at most this many bytes.
inline constexpr uint32_t kMaxErrorMessage = 256;

enum class FrameType : uint8_t {
  kRead = 1,
  kWrite = 2,
  kWriteWithImm = 3,
  kCompareSwap = 4,
  kFetchAdd = 5,
  kResponse = 0x81,
};

inline constexpr uint8_t kFlagPersist = 1u << 0;
// On a request: the requester awaits this op's completion (a signaled op),
// so a peer's thread that is about to sleep sends the answer at once
// instead of holding it back for a later send.
inline constexpr uint8_t kFlagAwaited = 1u << 1;

struct FrameHeader {
  FrameType type = FrameType::kResponse;
  uint8_t flags = 0;
  uint16_t status = 0;       // response: StatusCode
  uint32_t length = 0;       // payload bytes after the header
  uint32_t key = 0;          // request: remote key
  uint32_t imm = 0;          // kWriteWithImm
  uint32_t read_length = 0;  // kRead request: bytes wanted
  uint64_t seq = 0;          // request number; a response echoes it
  uint64_t offset = 0;       // request: offset in the remote range
  uint64_t arg0 = 0;         // compare / add
  uint64_t arg1 = 0;         // swap
};

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]);

// Parses and validates a header: magic, version, type, flags, and the
// length rules of its type (reads and atomics carry no payload, a
// response's payload and a read's length are at most `max_transfer`, and
// so on). kCorruption for a malformed header, kTooLarge for an oversize one.
Status DecodeFrameHeader(const uint8_t in[kFrameHeaderSize], uint32_t max_transfer,
                         FrameHeader* out);

// Hello: magic u32, version u8, blob length u8, reserved u16, core u32,
// max_transfer u32, blob. HelloReply: magic u32, version u8, blob length
// u8, status u16, cores u32, max_transfer u32, blob.
struct Hello {
  uint32_t core = 0;
  uint32_t max_transfer = 0;
  uint8_t blob_length = 0;
  uint16_t status = 0;  // reply only: 0 accepted, else a StatusCode
};
void EncodeHello(const Hello& h, uint8_t out[kHelloSize]);
// Validates magic, version and blob length (<= kMaxConnectBlob).
Status DecodeHello(const uint8_t in[kHelloSize], Hello* out);

}  // namespace pdpm::net::tcp
