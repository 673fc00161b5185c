// Decodes the frame stream arriving on one tcp connection and acts on it:
// requests from the peer are executed against the local RegionTable (the
// emulated NIC) and answered through the sink; responses to our own ops
// are matched to them through the sink. Socket-free, so the fuzzer drives
// exactly the code the transport runs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/tcp/region_table.h"
#include "net/tcp/wire.h"

namespace pdpm::net::tcp {

class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // Passive side: queue the response `h` with `payload`. When `range` is
  // set the payload lies in that registered range and may be sent from
  // there later (under the range's lock, checking it is still registered);
  // otherwise it is valid only during the call.
  virtual void Respond(const FrameHeader& h, std::span<const uint8_t> payload,
                       std::shared_ptr<RegionEntry> range) = 0;
  // Passive side: a WRITE_WITH_IMM landed (and was persisted if it asked).
  virtual void DeliverIncoming(uint32_t imm, uint32_t length) = 0;
  // Active side: the response `h` arrived. Sets where its payload goes (the
  // op's local buffer; empty for none) or fails if it answers no
  // outstanding op or its length does not fit it (the stream is then bad).
  virtual Status BeginResponse(const FrameHeader& h, std::span<uint8_t>* dest) = 0;
  // Active side: the payload is in place; `error` is the peer's message
  // when h.status is not ok.
  virtual void EndResponse(const FrameHeader& h, std::string_view error) = 0;
};

class FrameMachine {
 public:
  FrameMachine(const RegionTable* table, uint32_t max_transfer, FrameSink* sink)
      : table_(table), max_transfer_(max_transfer), sink_(sink) {}

  // Consumes all of [data, data+n). Not ok when the stream is malformed:
  // the connection must then end (nothing more is consumed).
  Status Consume(const uint8_t* data, size_t n);

  // When the current frame's payload goes to memory, lets `fill` write up
  // to the rest of it there directly (saving a copy) and returns what fill
  // returned; fill(char* dst, size_t max) returns bytes written, 0 for end
  // of stream or -1 with errno. Returns -2 without calling fill when there
  // is no such destination.
  template <typename Fill>
  ssize_t FillDirect(Fill&& fill);

  void Reset();

  // The payload length of the frame being received.
  uint32_t payload_length() const { return h_.length; }
  // The flags of the frame being handled (in a FrameSink call: the request
  // being answered).
  uint8_t flags() const { return h_.flags; }

 private:
  enum class State { kHeader, kPayload };
  enum class Dest { kRegion, kLocal, kMessage, kDiscard };

  Status StartFrame();
  Status FinishFrame();
  void RespondError(const Status& s);
  void PayloadProgress(size_t n) { done_ += n; }

  const RegionTable* const table_;
  const uint32_t max_transfer_;
  FrameSink* const sink_;

  State state_ = State::kHeader;
  uint8_t header_bytes_[kFrameHeaderSize];
  size_t header_have_ = 0;
  FrameHeader h_;
  Dest dest_ = Dest::kDiscard;
  size_t done_ = 0;                     // payload bytes consumed so far
  std::shared_ptr<RegionEntry> entry_;  // kRegion
  char* target_ = nullptr;              // kRegion / kLocal: payload start
  std::string message_;                 // kMessage
  Status request_error_;                // request to answer with an error
};

template <typename Fill>
ssize_t FrameMachine::FillDirect(Fill&& fill) {
  if (state_ != State::kPayload || done_ >= h_.length) return -2;
  if (dest_ == Dest::kLocal) {
    ssize_t n = fill(target_ + done_, h_.length - done_);
    if (n > 0) done_ += n;
    return n;
  }
  if (dest_ != Dest::kRegion) return -2;
  std::shared_lock lock(entry_->mu);
  if (entry_->dead) return -2;  // Consume discards the rest
  ssize_t n = fill(target_ + done_, h_.length - done_);
  if (n > 0) done_ += n;
  return n;
}

}  // namespace pdpm::net::tcp
