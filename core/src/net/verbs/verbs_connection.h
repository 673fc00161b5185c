// One RC queue pair to a peer core, with its completion queue (send and
// receive share it), a ring of receive buffers that takes both the
// WRITE_WITH_IMM notifications and the control messages, and the send
// queue accounting.
//
// Send queue: every work request gets a sequence number. A signaled request
// that completes retires itself and every earlier one (RC completes in
// order), so the queue holds posted - retired requests; Post refuses what
// would not fit. Unsignaled runs are cut by an internally signaled request
// every sq_depth/4, so the queue drains even if the caller never signals.
//
// Completions reach the caller in posting order: an op completes once its
// requests retired and, for `persist`, once the peer's reply arrived.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/transport.h"
#include "net/verbs/verbs_device.h"
#include "net/verbs/verbs_wire.h"

namespace pdpm::net::verbs {

class VerbsRegion final : public MemoryRegion {
 public:
  VerbsRegion(std::shared_ptr<Device> device, ibv_mr* mr, uint64_t io_base, char* data, size_t size)
      : MemoryRegion(data, size), device_(std::move(device)), mr_(mr), io_base_(io_base) {}
  ~VerbsRegion() override;

  uint32_t key() const override { return mr_->rkey; }
  uint32_t lkey() const { return mr_->lkey; }
  // The I/O address of offset 0 (what the device addresses it by).
  uint64_t io_base() const { return io_base_; }
  const Device* device() const { return device_.get(); }

 private:
  std::shared_ptr<Device> device_;
  ibv_mr* const mr_;
  const uint64_t io_base_;
};

// Registered ranges' I/O addresses keep the page offset of their address.
inline constexpr uint64_t kIoPageSize = 4096;

// The per-connection verbs resources; RAII over cm id, queue pair, CQ and
// the control buffers.
struct Link {
  Link() = default;
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  rdma_event_channel* setup_channel = nullptr;  // active side, until established
  rdma_cm_id* id = nullptr;
  ibv_cq* cq = nullptr;
  ibv_comp_channel* comp_channel = nullptr;  // not owned: the connection's
  bool has_qp = false;
  char* control = nullptr;  // recv buffers, then send buffers, kControlSlot each
  ibv_mr* control_mr = nullptr;
  uint32_t sq_depth = 0;
  uint32_t rq_depth = 0;
  uint32_t max_inline = 0;
};

class VerbsConnection final : public Connection {
 public:
  // Active side: resolves, connects and waits for the accept.
  static Status ConnectTo(std::shared_ptr<Device> device, const std::string& address, uint32_t core,
                          std::string_view local_blob, std::unique_ptr<Connection>* out);
  // Passive side (service thread): builds the queue pair on the request's
  // id; the caller accepts with AcceptParams().
  static Status ForRequest(std::shared_ptr<Device> device, rdma_cm_id* id, uint32_t core,
                           std::string peer_blob, std::string local_blob,
                           std::unique_ptr<VerbsConnection>* out);
  ~VerbsConnection() override;

  Status Post(std::span<const Op> ops) override;
  size_t PollCompletions(std::span<Completion> out) override;
  size_t PollIncoming(std::span<Incoming> out) override;
  size_t outstanding() const override;
  bool healthy() const override;
  Status Reconnect() override;
  int notify_fd() const override;
  Status ArmNotify() override;
  void AckNotify() override;
  std::span<const uint8_t> peer_blob() const override;
  std::span<const uint8_t> local_blob() const override;
  std::string peer_address() const override { return peer_address_; }
  uint32_t core() const override { return core_; }

  // Service thread.
  rdma_cm_id* cm_id() const { return link_ ? link_->id : nullptr; }
  uint64_t owner_polls() const { return owner_polls_.load(std::memory_order_relaxed); }
  void OnPeerDisconnected();
  // Serves the completion queue unless the owner holds the connection.
  void ServeIfIdle();

 private:
  // One caller op in flight: its work requests are [first_seq, last_seq].
  struct Pending {
    uint64_t first_seq;
    uint64_t last_seq;
    uint64_t id;
    Opcode opcode;
    bool signaled;     // the caller wants a completion on success
    bool needs_reply;  // persist: done when the peer's reply arrived
    bool retired = false;
    bool replied = false;
    Status status;
  };
  struct Ready {
    Completion completion;
    bool signaled;
  };

  VerbsConnection(std::shared_ptr<Device> device, bool active, uint32_t core, std::string address);
  Status CreateCompChannel();
  Status Setup(std::unique_ptr<Link> link);
  Status Establish();  // active side: connect link_ and register it
  Status InitLink(Link* link);
  // Hands the consumed receive buffers back to the device, chained.
  Status RepostReceives();
  void RepostReceivesOrBreak();
  // `region` as this device's region, or null if it is not one.
  VerbsRegion* OwnRegion(MemoryRegion* region) const;

  void DrainLocked();
  void HandleCompletion(const ibv_wc& wc);
  void HandleControl(const uint8_t* data, uint32_t length);
  void Retire(uint64_t seq);
  void FailFrom(uint64_t failed_seq, const Status& status);
  void Break(const Status& status);
  void FinishReady();
  void CheckTimeoutLocked();
  // The peer's range `key`: cached, or asked for with one round trip (the
  // first use of a key on a connection). *found is false for a key the
  // peer does not have. Fails only if the connection breaks meanwhile.
  Status DescribeRemote(uint32_t key, Device::RangeInfo* info, bool* found);
  // Why `op`'s local buffer cannot be used (InvalidArgument, TooLarge,
  // NotSupported), or OK.
  Status CheckLocal(const Op& op) const;
  // Why the peer's device would refuse `op` on `range` (bounds, rights), or OK.
  Status CheckRemote(const Op& op, const Device::RangeInfo& range) const;
  // Fills one work request (taking the next sequence number) for `op`,
  // whose local buffer CheckLocal accepted, at `remote_address`.
  void FillWorkRequest(const Op& op, VerbsRegion* region, uint64_t remote_address, bool persist,
                       ibv_send_wr* wr, ibv_sge* sge);
  // Why `requests` more work requests, `signaled` of them the caller's,
  // do not fit now (kResourceExhausted), or OK.
  Status CheckRoom(size_t requests, size_t signaled) const;
  // Whether a signaled request already posted will retire the oldest op
  // (else a post starts the op timeout's stall clock).
  bool ExpectingCompletion() const;
  // Records the caller's op whose requests are [first_seq, posted_].
  void AddPending(const Op& op, uint64_t first_seq, bool needs_reply);
  // The common post, one READ, WRITE or WRITE_WITH_IMM without persist to
  // the range addressed last, without the batch bookkeeping of the general
  // path (about a microsecond a post in the emulated guest). False, with
  // nothing queued, when the op needs the general path, which then also
  // produces its error.
  bool PostAlone(const Op& op);
  // Queues `op` as already failed (its completion keeps posting order).
  void AcceptFailed(const Op& op, const Status& status);
  void FlushDeferredLocked();
  size_t FreeSendSlots() const { return link_->sq_depth - (posted_ - retired_); }
  bool TakeSignal(bool wanted);

  const std::shared_ptr<Device> device_;
  const bool active_;
  const uint32_t core_;
  const std::string address_;  // active side: what to reconnect to
  std::string peer_address_;
  std::string local_blob_;
  std::string peer_blob_;
  ibv_comp_channel* comp_channel_ = nullptr;  // survives Reconnect: notify_fd is stable

  mutable std::mutex mu_;
  std::unique_ptr<Link> link_;
  std::atomic<bool> broken_{false};
  std::atomic<bool> peer_gone_{false};
  std::atomic<uint64_t> owner_polls_{0};
  Status broken_status_;

  uint64_t posted_ = 0;   // sequence number of the last work request posted
  uint64_t retired_ = 0;  // every request up to this one has completed
  uint64_t last_signaled_ = 0;
  uint64_t last_read_ = 0;  // last READ or atomic (fences later writes)
  uint32_t unsignaled_run_ = 0;
  // Op timeout: progress_ counts retirements, replies and posts that start
  // the clock; a stall is progress_ unchanged for op_timeout_ms.
  uint64_t progress_ = 0;
  uint64_t progress_seen_ = ~0ull;
  uint32_t idle_polls_ = 0;
  std::chrono::nanoseconds stalled_since_{0};  // CLOCK_MONOTONIC_COARSE
  std::deque<Pending> pending_;
  std::deque<Ready> ready_;
  std::deque<Incoming> incoming_;
  std::deque<ControlMessage> deferred_;  // replies waiting for send queue room
  // By peer key. Entries are erased only all at once, with recent_range_,
  // on Reconnect; an unordered_map's elements keep their addresses through
  // rehashing, so recent_range_ stays valid meanwhile.
  std::unordered_map<uint32_t, Device::RangeInfo> remote_ranges_;
  // The last range looked up: most connections address one peer range.
  uint32_t recent_key_ = 0;
  const Device::RangeInfo* recent_range_ = nullptr;  // into remote_ranges_
  // Receive buffers whose completion was handled but that are not posted
  // again yet: re-posting is left to a poll that finds the queue idle (or
  // to when a batch piled up), off the path of the message that used them.
  std::vector<uint32_t> consumed_receives_;
  uint32_t peer_max_transfer_ = 0;  // from the first describe reply; 0 unknown
  struct OpTarget {
    Device::RangeInfo range;
    Status refused;  // the op fails without being sent (key, bounds, rights)
  };
  std::vector<OpTarget> targets_;  // Post's scratch
  uint64_t describes_ = 0;         // describe requests sent
  uint64_t describe_seq_ = 0;      // the describe request in flight (0: none)
  bool describe_answered_ = false;
  ControlMessage describe_reply_{};
  size_t signaled_outstanding_ = 0;
  std::vector<ibv_send_wr> wrs_;
  std::vector<ibv_sge> sges_;
};

}  // namespace pdpm::net::verbs
