#include "net/tcp/frame_machine.h"

#include <algorithm>
#include <cstring>

namespace pdpm::net::tcp {

void FrameMachine::Reset() {
  state_ = State::kHeader;
  header_have_ = 0;
  done_ = 0;
  entry_.reset();
  target_ = nullptr;
  message_.clear();
  request_error_ = Status::OK();
}

Status FrameMachine::Consume(const uint8_t* data, size_t n) {
  for (;;) {
    if (state_ == State::kPayload && done_ == h_.length) {
      PDPM_RETURN_IF_ERROR(FinishFrame());
      continue;
    }
    if (n == 0) return Status::OK();
    if (state_ == State::kHeader) {
      size_t take = std::min(n, kFrameHeaderSize - header_have_);
      std::memcpy(header_bytes_ + header_have_, data, take);
      header_have_ += take;
      data += take;
      n -= take;
      if (header_have_ == kFrameHeaderSize) PDPM_RETURN_IF_ERROR(StartFrame());
      continue;
    }
    size_t take = std::min<size_t>(n, h_.length - done_);
    switch (dest_) {
      case Dest::kLocal: std::memcpy(target_ + done_, data, take); break;
      case Dest::kMessage: message_.append(reinterpret_cast<const char*>(data), take); break;
      case Dest::kRegion: {
        std::shared_lock lock(entry_->mu);
        if (entry_->dead) {
          dest_ = Dest::kDiscard;
          request_error_ = Status::PermissionDenied("range deregistered during the write");
        } else {
          std::memcpy(target_ + done_, data, take);
        }
        break;
      }
      case Dest::kDiscard: break;
    }
    done_ += take;
    data += take;
    n -= take;
  }
}

Status FrameMachine::StartFrame() {
  PDPM_RETURN_IF_ERROR(DecodeFrameHeader(header_bytes_, max_transfer_, &h_));
  state_ = State::kPayload;
  done_ = 0;
  request_error_ = Status::OK();
  dest_ = Dest::kDiscard;
  switch (h_.type) {
    case FrameType::kWrite:
    case FrameType::kWriteWithImm: {
      request_error_ = table_->Resolve(h_.key, h_.offset, h_.length, kRemoteWrite, &entry_);
      if (request_error_.ok()) {
        dest_ = Dest::kRegion;
        target_ = entry_->data + h_.offset;
      }
      break;
    }
    case FrameType::kResponse: {
      std::span<uint8_t> dest;
      PDPM_RETURN_IF_ERROR(sink_->BeginResponse(h_, &dest));
      if (h_.status != 0) {
        dest_ = Dest::kMessage;
        break;
      }
      if (dest.size() != h_.length) {
        return Status::Corruption("frame: response length does not match its op");
      }
      dest_ = Dest::kLocal;
      target_ = reinterpret_cast<char*>(dest.data());
      break;
    }
    default:  // reads and atomics carry no payload
      break;
  }
  return Status::OK();
}

Status FrameMachine::FinishFrame() {
  state_ = State::kHeader;
  header_have_ = 0;
  FrameHeader response;
  response.type = FrameType::kResponse;
  response.seq = h_.seq;
  switch (h_.type) {
    case FrameType::kRead: {
      std::shared_ptr<RegionEntry> entry;
      Status s = table_->Resolve(h_.key, h_.offset, h_.read_length, kRemoteRead, &entry);
      if (!s.ok()) {
        RespondError(s);
        break;
      }
      response.length = h_.read_length;
      const auto* data = reinterpret_cast<const uint8_t*>(entry->data + h_.offset);
      sink_->Respond(response, {data, h_.read_length}, std::move(entry));
      break;
    }
    case FrameType::kWrite:
    case FrameType::kWriteWithImm: {
      // Gated access may have ended while the payload arrived: no
      // acknowledgement then.
      if (request_error_.ok()) request_error_ = table_->Allowed(*entry_);
      if (request_error_.ok() && (h_.flags & kFlagPersist) && entry_->persist) {
        std::shared_lock lock(entry_->mu);
        if (entry_->dead) {
          request_error_ = Status::PermissionDenied("range deregistered during the write");
        } else {
          entry_->persist(target_, h_.length);
        }
      }
      entry_.reset();
      if (!request_error_.ok()) {
        RespondError(request_error_);
        break;
      }
      if (h_.type == FrameType::kWriteWithImm) sink_->DeliverIncoming(h_.imm, h_.length);
      sink_->Respond(response, {}, nullptr);
      break;
    }
    case FrameType::kCompareSwap:
    case FrameType::kFetchAdd: {
      uint64_t old_value = 0;
      Status s = ExecuteAtomic(*table_, h_.type == FrameType::kCompareSwap, h_.key, h_.offset,
                               h_.arg0, h_.arg1, &old_value);
      if (!s.ok()) {
        RespondError(s);
        break;
      }
      response.length = 8;
      sink_->Respond(response, {reinterpret_cast<const uint8_t*>(&old_value), 8}, nullptr);
      break;
    }
    case FrameType::kResponse:
      sink_->EndResponse(h_, message_);
      message_.clear();
      break;
  }
  target_ = nullptr;
  return Status::OK();
}

void FrameMachine::RespondError(const Status& s) {
  FrameHeader response;
  response.type = FrameType::kResponse;
  response.seq = h_.seq;
  response.status = static_cast<uint16_t>(s.code());
  std::string_view msg = s.message().substr(0, kMaxErrorMessage);
  response.length = msg.size();
  sink_->Respond(response, {reinterpret_cast<const uint8_t*>(msg.data()), msg.size()}, nullptr);
}

}  // namespace pdpm::net::tcp
