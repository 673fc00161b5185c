// Feeds arbitrary bytes to the tcp backend's frame decoder and emulated
// one-sided operations (FrameMachine over a RegionTable), in pieces of
// varying size and through both the staging and the direct-fill paths, as
// the transport does. Any crash, sanitizer report or out-of-range access
// is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "net/tcp/frame_machine.h"
#include "net/tcp/region_table.h"

namespace {

using namespace pdpm;
using namespace pdpm::net;
using namespace pdpm::net::tcp;

// Plays the connection: takes responses and events, and stands for a
// queue of our own outstanding ops (seq 1, 2, ...) whose results land in
// a local buffer.
class Sink final : public FrameSink {
 public:
  void Respond(const FrameHeader& h, std::span<const uint8_t> payload,
               std::shared_ptr<RegionEntry> range) override {
    std::shared_lock<std::shared_mutex> lock;
    if (range) {
      lock = std::shared_lock(range->mu);  // as the transport sends it
      if (range->dead) return;
    }
    for (uint8_t b : payload) checksum_ += b;  // reads every byte handed over
    checksum_ += h.seq;
  }
  void DeliverIncoming(uint32_t imm, uint32_t length) override { checksum_ += imm + length; }
  Status BeginResponse(const FrameHeader& h, std::span<uint8_t>* dest) override {
    if (h.seq != next_seq_) return Status::Corruption("unexpected response");
    // Our op k reads k * 8 bytes (k % 4 == 0: a write, nothing back).
    size_t n = next_seq_ % 4 == 0 ? 0 : std::min<size_t>(next_seq_ * 8, sizeof(local_));
    *dest = {local_, n};
    return Status::OK();
  }
  void EndResponse(const FrameHeader&, std::string_view error) override {
    next_seq_++;
    checksum_ += error.size();
  }
  uint64_t checksum() const { return checksum_; }

 private:
  uint64_t next_seq_ = 1;
  uint8_t local_[4096];
  uint64_t checksum_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Keys are reproducible (seed 1) so the corpus can name them:
  // rw = first key (64 KiB, all rights), ro = second (4 KiB, read only).
  RegionTable table(1);
  alignas(8) static uint8_t rw[64 << 10];
  alignas(8) static uint8_t ro[4 << 10];
  auto rw_entry =
      table.Add(reinterpret_cast<char*>(rw), sizeof(rw), kRemoteAll, [](const void* p, size_t n) {
        // Copy the range the persist hook is given, so
        // the sanitizer checks every byte of it.
        const auto* b = static_cast<const uint8_t*>(p);
        std::vector<uint8_t> copy(b, b + n);
      });
  auto ro_entry = table.Add(reinterpret_cast<char*>(ro), sizeof(ro), kRemoteRead, {});
  Sink sink;
  FrameMachine machine(&table, 64 << 10, &sink);
  // The first byte picks the piece size; odd pieces go through FillDirect.
  size_t piece = size > 0 ? (data[0] % 97) + 1 : 1;
  size_t pos = size > 0 ? 1 : 0;
  bool direct = false;
  while (pos < size) {
    size_t n = std::min(piece, size - pos);
    if (direct) {
      ssize_t got = machine.FillDirect([&](char* dst, size_t max) -> ssize_t {
        size_t take = std::min(max, n);
        std::memcpy(dst, data + pos, take);
        return static_cast<ssize_t>(take);
      });
      if (got > 0) {
        pos += got;
        n -= got;
      }
    }
    if (!machine.Consume(data + pos, n).ok()) break;  // the transport closes here
    pos += n;
    direct = !direct;
  }
  table.Remove(rw_entry);
  table.Remove(ro_entry);
  return 0;
}
