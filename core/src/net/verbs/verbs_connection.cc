#include "net/verbs/verbs_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <typeinfo>

namespace pdpm::net::verbs {

namespace {

using Clock = std::chrono::steady_clock;

// Time for the op timeout, read on the datapath: the coarse monotonic clock
// costs a memory read everywhere (no clock-source access, which emulated
// machines serialize), and millisecond resolution suits a timeout.
std::chrono::nanoseconds CoarseNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// Receive work requests carry this bit in wr_id; send ones their sequence.
constexpr uint64_t kRecvTag = 1ull << 63;
// Bytes per control buffer (one ControlMessage, cache-line sized).
constexpr uint32_t kControlSlot = 64;
// What we ask for as max_inline_data; providers that refuse get less.
constexpr uint32_t kInlineWanted[] = {256, 128, 64, 0};
constexpr uint32_t kPollsPerClockRead = 64;
// Consumed receive buffers re-posted even while completions keep coming.
constexpr size_t kRepostBatch = 16;

Status StatusFromCompletion(const ibv_wc& wc) {
  std::string detail = std::string(" (") + ibv_wc_status_str(wc.status) + ")";
  switch (wc.status) {
    case IBV_WC_REM_ACCESS_ERR:
      return Status::PermissionDenied(
          "remote access refused: wrong key, outside the range or no access right" + detail);
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
      return Status::InvalidArgument("local buffer refused by the device" + detail);
    case IBV_WC_REM_INV_REQ_ERR:
      return Status::InvalidArgument("the peer's device refused the request" + detail);
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return Status::Unavailable("peer does not answer: retries exhausted" + detail);
    case IBV_WC_WR_FLUSH_ERR: return Status::Unavailable("connection broken" + detail);
    case IBV_WC_REM_OP_ERR:
      return Status::IOError("the peer failed to execute the request" + detail);
    default: return Status::Unavailable("completion error" + detail);
  }
}

Status SplitAddress(const std::string& address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return Status::InvalidArgument("address '" + address + "' is not host:port");
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return Status::OK();
}

// Waits on `channel` for `expected`; other outcomes become a Status.
Status WaitCmEvent(rdma_event_channel* channel, rdma_cm_event_type expected,
                   Clock::time_point deadline, const std::string& address,
                   std::vector<uint8_t>* private_data) {
  for (;;) {
    rdma_cm_event* event;
    if (rdma_get_cm_event(channel, &event) == 0) {
      rdma_cm_event_type type = event->event;
      int status = event->status;
      const auto* data = static_cast<const uint8_t*>(event->param.conn.private_data);
      std::vector<uint8_t> copy;
      if (data != nullptr) copy.assign(data, data + event->param.conn.private_data_len);
      rdma_ack_cm_event(event);
      if (type == expected) {
        if (private_data != nullptr) *private_data = std::move(copy);
        return Status::OK();
      }
      if (type == RDMA_CM_EVENT_REJECTED) {
        return DecodeRejectData(copy).WithContext("connect to " + address);
      }
      return Status::Unavailable("connect to " + address + ": " + rdma_event_str(type) +
                                 " (status " + std::to_string(status) + ")");
    }
    if (errno != EAGAIN) return ErrnoStatus("rdma_get_cm_event");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return Status::Timeout("connect to " + address + ": no answer in time");
    }
    pollfd pfd{channel->fd, POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(left.count()) + 1);
  }
}

}  // namespace

VerbsRegion::~VerbsRegion() {
  device_->RemoveRegion(mr_->rkey);
  ibv_dereg_mr(mr_);
}

Link::~Link() {
  if (has_qp) rdma_destroy_qp(id);
  if (id != nullptr) rdma_destroy_id(id);
  if (setup_channel != nullptr) rdma_destroy_event_channel(setup_channel);
  if (cq != nullptr) {
    // Events of this CQ the owner did not take must be acknowledged first.
    ibv_cq* event_cq;
    void* context;
    while (ibv_get_cq_event(comp_channel, &event_cq, &context) == 0) {
      ibv_ack_cq_events(event_cq, 1);
    }
    ibv_destroy_cq(cq);
  }
  if (control_mr != nullptr) ibv_dereg_mr(control_mr);
  free(control);
}

VerbsConnection::VerbsConnection(std::shared_ptr<Device> device, bool active, uint32_t core,
                                 std::string address)
    : device_(std::move(device)), active_(active), core_(core), address_(std::move(address)) {}

VerbsConnection::~VerbsConnection() {
  if (link_) {
    device_->RemoveConnection(link_->id);
    if (!broken_) rdma_disconnect(link_->id);
    link_.reset();
  }
  if (comp_channel_ != nullptr) ibv_destroy_comp_channel(comp_channel_);
}

Status VerbsConnection::CreateCompChannel() {
  comp_channel_ = ibv_create_comp_channel(device_->context());
  if (comp_channel_ == nullptr) return ErrnoStatus("ibv_create_comp_channel");
  int flags = fcntl(comp_channel_->fd, F_GETFL);
  if (fcntl(comp_channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus("fcntl O_NONBLOCK on the completion channel");
  }
  return Status::OK();
}

Status VerbsConnection::Setup(std::unique_ptr<Link> link) {
  PDPM_RETURN_IF_ERROR(CreateCompChannel());
  link_ = std::move(link);
  return InitLink(link_.get());
}

// CQ, queue pair, control buffers and a full receive ring on link->id.
Status VerbsConnection::InitLink(Link* link) {
  const ibv_device_attr& attr = device_->attr();
  const TransportOptions& options = device_->options();
  // Persist ops take two requests; replies to the peer need room too.
  uint32_t depth = std::min<uint32_t>(2 * options.max_outstanding + 64, attr.max_qp_wr);
  link->sq_depth = depth;
  link->rq_depth = depth;
  link->comp_channel = comp_channel_;
  int cqe = std::min<int>(2 * depth, attr.max_cqe);
  link->cq = ibv_create_cq(device_->context(), cqe, nullptr, comp_channel_, 0);
  if (link->cq == nullptr) return ErrnoStatus("ibv_create_cq");

  size_t control_size = size_t{kControlSlot} * (link->rq_depth + link->sq_depth);
  link->control = static_cast<char*>(aligned_alloc(4096, (control_size + 4095) / 4096 * 4096));
  if (link->control == nullptr) return Status::ResourceExhausted("control buffers");
  link->control_mr = ibv_reg_mr(device_->pd(), link->control, control_size, IBV_ACCESS_LOCAL_WRITE);
  if (link->control_mr == nullptr) return ErrnoStatus("ibv_reg_mr (control buffers)");

  Status created;
  for (uint32_t inline_size : kInlineWanted) {
    ibv_qp_init_attr init{};
    init.send_cq = link->cq;
    init.recv_cq = link->cq;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = link->sq_depth;
    init.cap.max_recv_wr = link->rq_depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = inline_size;
    if (rdma_create_qp(link->id, device_->pd(), &init) == 0) {
      link->has_qp = true;
      link->max_inline = init.cap.max_inline_data;
      break;
    }
    created = ErrnoStatus("rdma_create_qp");
  }
  if (!link->has_qp) return created;
  consumed_receives_.clear();
  consumed_receives_.reserve(link->rq_depth);
  for (uint32_t i = 0; i < link->rq_depth; i++) consumed_receives_.push_back(i);
  return RepostReceives();
}

Status VerbsConnection::RepostReceives() {
  constexpr size_t kChain = 32;
  ibv_recv_wr wrs[kChain];
  ibv_sge sges[kChain];
  size_t posted = 0;
  while (posted < consumed_receives_.size()) {
    size_t n = std::min(kChain, consumed_receives_.size() - posted);
    for (size_t i = 0; i < n; i++) {
      uint32_t index = consumed_receives_[posted + i];
      sges[i] = ibv_sge{reinterpret_cast<uintptr_t>(link_->control + size_t{index} * kControlSlot),
                        kControlSlot, link_->control_mr->lkey};
      wrs[i] = ibv_recv_wr{};
      wrs[i].wr_id = kRecvTag | index;
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad;
    int err = ibv_post_recv(link_->id->qp, wrs, &bad);
    if (err != 0) return Status::FromErrno("ibv_post_recv", err);
    posted += n;
  }
  consumed_receives_.clear();
  return Status::OK();
}

VerbsRegion* VerbsConnection::OwnRegion(MemoryRegion* region) const {
  // VerbsRegion is final: comparing the dynamic type is the whole check,
  // and it is cheaper than a dynamic_cast on the datapath.
  if (region == nullptr || typeid(*region) != typeid(VerbsRegion)) return nullptr;
  auto* verbs = static_cast<VerbsRegion*>(region);
  return verbs->device() == device_.get() ? verbs : nullptr;
}

Status VerbsConnection::ConnectTo(std::shared_ptr<Device> device, const std::string& address,
                                  uint32_t core, std::string_view local_blob,
                                  std::unique_ptr<Connection>* out) {
  if (local_blob.size() > kMaxConnectBlob) {
    return Status::InvalidArgument("connect blob exceeds 48 bytes");
  }
  std::unique_ptr<VerbsConnection> conn(
      new VerbsConnection(std::move(device), true, core, address));
  conn->local_blob_ = std::string(local_blob);
  PDPM_RETURN_IF_ERROR(conn->CreateCompChannel());
  std::lock_guard lock(conn->mu_);
  PDPM_RETURN_IF_ERROR(conn->Establish());
  *out = std::move(conn);
  return Status::OK();
}

Status VerbsConnection::Establish() {
  const TransportOptions& options = device_->options();
  auto deadline = Clock::now() + std::chrono::milliseconds(options.connect_timeout_ms);
  std::string host, port;
  PDPM_RETURN_IF_ERROR(SplitAddress(address_, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  int gai = getaddrinfo(host.c_str(), port.c_str(), &hints, &resolved);
  if (gai != 0) {
    return Status::InvalidArgument("resolve '" + address_ + "': " + gai_strerror(gai));
  }
  sockaddr_storage destination{};
  std::memcpy(&destination, resolved->ai_addr, resolved->ai_addrlen);
  freeaddrinfo(resolved);

  auto link = std::make_unique<Link>();
  link->setup_channel = rdma_create_event_channel();
  if (link->setup_channel == nullptr) return ErrnoStatus("rdma_create_event_channel");
  int flags = fcntl(link->setup_channel->fd, F_GETFL);
  if (fcntl(link->setup_channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus("fcntl O_NONBLOCK on the rdma_cm channel");
  }
  if (rdma_create_id(link->setup_channel, &link->id, nullptr, RDMA_PS_TCP) != 0) {
    return ErrnoStatus("rdma_create_id");
  }
  int timeout_ms = static_cast<int>(options.connect_timeout_ms);
  if (rdma_resolve_addr(link->id, nullptr, reinterpret_cast<sockaddr*>(&destination), timeout_ms) !=
      0) {
    return ErrnoStatus("rdma_resolve_addr " + address_);
  }
  PDPM_RETURN_IF_ERROR(
      WaitCmEvent(link->setup_channel, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, address_, nullptr));
  if (link->id->verbs != device_->context()) {
    return Status::FailedPrecondition("connect to " + address_ +
                                      ": the route leaves through another device than " +
                                      device_->name());
  }
  if (rdma_resolve_route(link->id, timeout_ms) != 0) {
    return ErrnoStatus("rdma_resolve_route " + address_);
  }
  PDPM_RETURN_IF_ERROR(
      WaitCmEvent(link->setup_channel, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, address_, nullptr));
  link_ = std::move(link);
  PDPM_RETURN_IF_ERROR(InitLink(link_.get()));

  uint8_t private_data[kConnectDataSize];
  rdma_conn_param param{};
  param.private_data = private_data;
  param.private_data_len =
      static_cast<uint8_t>(EncodeConnectData(core_, local_blob_, private_data));
  param.responder_resources = static_cast<uint8_t>(device_->attr().max_qp_rd_atom);
  param.initiator_depth = static_cast<uint8_t>(device_->attr().max_qp_init_rd_atom);
  param.retry_count = 7;
  param.rnr_retry_count = 7;  // receiver-not-ready forever: the op timeout bounds it
  if (rdma_connect(link_->id, &param) != 0) return ErrnoStatus("rdma_connect " + address_);
  std::vector<uint8_t> reply;
  PDPM_RETURN_IF_ERROR(
      WaitCmEvent(link_->setup_channel, RDMA_CM_EVENT_ESTABLISHED, deadline, address_, &reply));
  uint32_t echoed_core;
  PDPM_RETURN_IF_ERROR(DecodeConnectData(reply, &echoed_core, &peer_blob_)
                           .WithContext("accept data from " + address_));
  peer_address_ = address_;

  // From here on disconnects arrive at the device's service thread.
  device_->AddConnection(link_->id, this);
  if (rdma_migrate_id(link_->id, device_->cm_channel()) != 0) {
    Status s = ErrnoStatus("rdma_migrate_id");
    device_->RemoveConnection(link_->id);
    return s;
  }
  rdma_destroy_event_channel(link_->setup_channel);
  link_->setup_channel = nullptr;
  broken_ = false;
  peer_gone_ = false;
  progress_++;
  return Status::OK();
}

Status VerbsConnection::ForRequest(std::shared_ptr<Device> device, rdma_cm_id* id, uint32_t core,
                                   std::string peer_blob, std::string local_blob,
                                   std::unique_ptr<VerbsConnection>* out) {
  std::unique_ptr<VerbsConnection> conn(new VerbsConnection(std::move(device), false, core, ""));
  conn->peer_blob_ = std::move(peer_blob);
  conn->local_blob_ = std::move(local_blob);
  char host[INET6_ADDRSTRLEN] = "?";
  sockaddr* peer = rdma_get_peer_addr(id);
  const void* raw =
      peer->sa_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(peer)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(peer)->sin_addr);
  inet_ntop(peer->sa_family, raw, host, sizeof(host));
  conn->peer_address_ = (peer->sa_family == AF_INET6 ? "[" + std::string(host) + "]" : host) + ":" +
                        std::to_string(ntohs(rdma_get_dst_port(id)));
  auto link = std::make_unique<Link>();
  link->id = id;
  std::lock_guard lock(conn->mu_);
  Status s = conn->Setup(std::move(link));
  if (!s.ok()) {
    // The caller rejects the request and destroys the id itself.
    if (conn->link_) {
      if (conn->link_->has_qp) rdma_destroy_qp(id);
      conn->link_->has_qp = false;
      conn->link_->id = nullptr;
    }
    return s;
  }
  *out = std::move(conn);
  return Status::OK();
}

Status VerbsConnection::DescribeRemote(uint32_t key, Device::RangeInfo* info, bool* found) {
  if (recent_range_ != nullptr && recent_key_ == key) {
    *info = *recent_range_;
    *found = true;
    return Status::OK();
  }
  auto cached = remote_ranges_.find(key);
  if (cached != remote_ranges_.end()) {
    recent_key_ = key;
    recent_range_ = &cached->second;
    *info = cached->second;
    *found = true;
    return Status::OK();
  }
  ControlMessage request{};
  request.version = kWireVersion;
  request.type = static_cast<uint8_t>(ControlType::kDescribeRequest);
  request.key = key;
  request.seq = describe_seq_ = ++describes_;
  describe_answered_ = false;
  deferred_.push_back(request);
  FlushDeferredLocked();
  auto start = CoarseNow();
  auto timeout = std::chrono::milliseconds(device_->options().op_timeout_ms);
  for (uint32_t spins = 1; !describe_answered_; spins++) {
    if (broken_ || peer_gone_) {
      describe_seq_ = 0;
      return broken_status_.ok() ? Status::Unavailable("peer " + peer_address_ + " disconnected")
                                 : broken_status_;
    }
    DrainLocked();
    if (spins % kPollsPerClockRead == 0 && CoarseNow() - start > timeout) {
      Break(Status::Timeout("peer " + peer_address_ + " did not answer within " +
                            std::to_string(device_->options().op_timeout_ms) + " ms"));
      describe_seq_ = 0;
      return broken_status_;
    }
  }
  describe_seq_ = 0;
  peer_max_transfer_ = describe_reply_.max_transfer;
  // An unknown key is not cached: it may be registered later.
  *found = describe_reply_.status == 0;
  if (*found) {
    *info = Device::RangeInfo{describe_reply_.offset, describe_reply_.size, describe_reply_.access};
    remote_ranges_[key] = *info;
  }
  return Status::OK();
}

void VerbsConnection::AcceptFailed(const Op& op, const Status& status) {
  Pending p{};
  p.first_seq = p.last_seq = posted_;
  p.id = op.id;
  p.opcode = op.opcode;
  p.signaled = op.signaled;
  p.retired = p.replied = true;
  p.status = status;
  pending_.push_back(std::move(p));
  if (op.signaled) signaled_outstanding_++;
}

bool VerbsConnection::TakeSignal(bool wanted) {
  uint32_t interval = std::max<uint32_t>(link_->sq_depth / 4, 1);
  if (wanted || unsignaled_run_ + 1 >= interval) {
    unsignaled_run_ = 0;
    return true;
  }
  unsignaled_run_++;
  return false;
}

void VerbsConnection::FillWorkRequest(const Op& op, VerbsRegion* region, uint64_t remote_address,
                                      bool persist, ibv_send_wr* wr, ibv_sge* sge) {
  *wr = ibv_send_wr{};
  *sge = ibv_sge{};
  // The device addresses registered memory by I/O address (io_base +
  // offset); inline data is copied by the CPU from the real address.
  sge->addr = region->io_base() + op.local.offset;
  sge->length = op.local.length;
  sge->lkey = region->lkey();
  wr->wr_id = ++posted_;
  wr->sg_list = sge;
  wr->num_sge = op.local.length == 0 ? 0 : 1;
  switch (op.opcode) {
    case Opcode::kRead:
      wr->opcode = IBV_WR_RDMA_READ;
      wr->wr.rdma.remote_addr = remote_address;
      wr->wr.rdma.rkey = op.remote_key;
      last_read_ = posted_;
      break;
    case Opcode::kWrite:
    case Opcode::kWriteWithImm:
      // A persisted WRITE_WITH_IMM travels as WRITE + persist request;
      // the peer raises the Incoming event once the range is durable.
      wr->opcode = op.opcode == Opcode::kWriteWithImm && !persist ? IBV_WR_RDMA_WRITE_WITH_IMM
                                                                  : IBV_WR_RDMA_WRITE;
      wr->imm_data = htonl(op.imm);
      wr->wr.rdma.remote_addr = remote_address;
      wr->wr.rdma.rkey = op.remote_key;
      if (op.local.length <= link_->max_inline) {
        wr->send_flags |= IBV_SEND_INLINE;
        sge->addr = reinterpret_cast<uintptr_t>(region->data() + op.local.offset);
      }
      // A write must not overtake an earlier READ or atomic whose result
      // lands in memory it may be sending.
      if (last_read_ > retired_) wr->send_flags |= IBV_SEND_FENCE;
      break;
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd:
      wr->opcode = op.opcode == Opcode::kCompareSwap ? IBV_WR_ATOMIC_CMP_AND_SWP
                                                     : IBV_WR_ATOMIC_FETCH_AND_ADD;
      wr->wr.atomic.remote_addr = remote_address;
      wr->wr.atomic.rkey = op.remote_key;
      wr->wr.atomic.compare_add = op.compare_or_add;
      wr->wr.atomic.swap = op.swap;
      last_read_ = posted_;
      break;
  }
}

Status VerbsConnection::CheckLocal(const Op& op) const {
  const LocalBuffer& local = op.local;
  VerbsRegion* region = OwnRegion(local.region);
  if (region == nullptr) {
    return Status::InvalidArgument(std::string(OpcodeName(op.opcode)) +
                                   ": local buffer not registered with this transport");
  }
  if (local.offset > region->size() || local.length > region->size() - local.offset) {
    return Status::InvalidArgument(std::string(OpcodeName(op.opcode)) +
                                   ": local buffer outside its region");
  }
  switch (op.opcode) {
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd:
      if (local.length != 8 || op.remote_offset % 8 != 0 ||
          (reinterpret_cast<uintptr_t>(region->data()) + local.offset) % 8 != 0) {
        return Status::InvalidArgument(std::string(OpcodeName(op.opcode)) +
                                       ": atomics take 8 bytes at 8-aligned offsets");
      }
      if (device_->attr().atomic_cap == IBV_ATOMIC_NONE) {
        return Status::NotSupported("device " + device_->name() + " has no atomics");
      }
      break;
    case Opcode::kRead:
    case Opcode::kWrite:
    case Opcode::kWriteWithImm:
      if (local.length > device_->options().max_transfer ||
          local.length > device_->attr().max_mr_size) {
        return Status::TooLarge(std::string(OpcodeName(op.opcode)) + " of " +
                                std::to_string(local.length) + " bytes exceeds max_transfer");
      }
      break;
    default:
      return Status::InvalidArgument("unknown opcode " +
                                     std::to_string(static_cast<int>(op.opcode)));
  }
  return Status::OK();
}

Status VerbsConnection::CheckRemote(const Op& op, const Device::RangeInfo& range) const {
  uint32_t needed = op.opcode == Opcode::kRead ? kRemoteRead
                    : op.opcode == Opcode::kWrite || op.opcode == Opcode::kWriteWithImm
                        ? kRemoteWrite
                        : kRemoteAtomic;
  if (op.remote_offset > range.size || op.local.length > range.size - op.remote_offset) {
    return Status::OutOfRange(std::string(OpcodeName(op.opcode)) + " outside the remote range");
  }
  if ((range.access & needed) == 0) {
    return Status::PermissionDenied(std::string(OpcodeName(op.opcode)) +
                                    ": no such access right to the remote range");
  }
  return Status::OK();
}

Status VerbsConnection::CheckRoom(size_t requests, size_t signaled) const {
  if (signaled_outstanding_ + signaled > device_->options().max_outstanding) {
    return Status::ResourceExhausted("more than max_outstanding signaled ops in flight");
  }
  // Keep room for the replies to the peer's persist requests (deferred
  // when the queue is full, but never starved by our own ops).
  if (requests + link_->sq_depth / 8 > FreeSendSlots()) {
    return Status::ResourceExhausted("send queue full: poll completions first");
  }
  return Status::OK();
}

bool VerbsConnection::ExpectingCompletion() const {
  return !pending_.empty() && last_signaled_ >= pending_.front().first_seq;
}

void VerbsConnection::AddPending(const Op& op, uint64_t first_seq, bool needs_reply) {
  Pending pending{};
  pending.first_seq = first_seq;
  pending.last_seq = posted_;
  pending.id = op.id;
  pending.opcode = op.opcode;
  pending.signaled = op.signaled;
  pending.needs_reply = needs_reply;
  pending_.push_back(std::move(pending));
  if (op.signaled) signaled_outstanding_++;
}

bool VerbsConnection::PostAlone(const Op& op) {
  if (op.persist || recent_range_ == nullptr || recent_key_ != op.remote_key) return false;
  if (op.opcode != Opcode::kRead && op.opcode != Opcode::kWrite &&
      op.opcode != Opcode::kWriteWithImm) {
    return false;
  }
  if (!CheckLocal(op).ok() || !CheckRemote(op, *recent_range_).ok()) return false;
  if ((peer_max_transfer_ != 0 && op.local.length > peer_max_transfer_) ||
      !CheckRoom(1, op.signaled ? 1 : 0).ok()) {
    return false;
  }
  const bool had_expected = ExpectingCompletion();
  ibv_send_wr wr;
  ibv_sge sge;
  FillWorkRequest(op, static_cast<VerbsRegion*>(op.local.region),
                  recent_range_->io_base + op.remote_offset, false, &wr, &sge);
  if (TakeSignal(op.signaled)) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    last_signaled_ = posted_;
  }
  AddPending(op, posted_, false);
  if (!had_expected) progress_++;  // the stall clock starts now
  ibv_send_wr* bad = nullptr;
  int err = ibv_post_send(link_->id->qp, &wr, &bad);
  if (err != 0) Break(Status::FromErrno("ibv_post_send", err));
  return true;
}

Status VerbsConnection::Post(std::span<const Op> ops) {
  std::lock_guard lock(mu_);
  if (broken_ || peer_gone_ || !link_) {
    return Status::Unavailable(
        "connection to " + peer_address_ + " is broken: " +
        (broken_status_.ok() ? std::string("peer disconnected") : broken_status_.ToString()));
  }
  if (ops.size() == 1 && PostAlone(ops[0])) return Status::OK();
  size_t requests = 0, signaled = 0;
  for (const Op& op : ops) {
    PDPM_RETURN_IF_ERROR(CheckLocal(op));
    bool persist = op.persist && op.opcode != Opcode::kRead && op.opcode != Opcode::kCompareSwap &&
                   op.opcode != Opcode::kFetchAdd;
    requests += persist ? 2 : 1;
    signaled += op.signaled ? 1 : 0;
  }
  // Every op's target range, learned before anything is queued. Wrong
  // keys, bounds and rights fail the op here, as the peer's device would,
  // but without breaking the queue pair (the device still checks).
  targets_.resize(ops.size());
  bool refused_any = false;
  for (size_t i = 0; i < ops.size(); i++) {
    const Op& op = ops[i];
    OpTarget& target = targets_[i];
    bool found = false;
    Status described = DescribeRemote(op.remote_key, &target.range, &found);
    if (!described.ok()) {
      // The connection broke or timed out while asking: the ops fail with
      // that, in order, like ops that were in flight.
      for (const Op& failed : ops) AcceptFailed(failed, described);
      FinishReady();
      return Status::OK();
    }
    if (peer_max_transfer_ != 0 && op.local.length > peer_max_transfer_) {
      return Status::TooLarge(std::string(OpcodeName(op.opcode)) + " of " +
                              std::to_string(op.local.length) + " bytes exceeds the peer's " +
                              std::to_string(peer_max_transfer_));
    }
    target.refused = found
                         ? CheckRemote(op, target.range)
                         : Status::PermissionDenied("no range with key " +
                                                    std::to_string(op.remote_key) + " at the peer");
    refused_any = refused_any || !target.refused.ok();
  }
  // An op refused here completes in order, behind the ops posted before
  // it; if none of those is signaled, nothing may ever retire them (the
  // RPC layer posts its sends unsignaled) and the refusal would never
  // surface. A signaled zero-length WRITE to a range the peer described
  // (it moves no data) retires them.
  const bool needs_marker =
      refused_any && !remote_ranges_.empty() &&
      std::any_of(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.retired; });
  if (needs_marker) requests++;
  PDPM_RETURN_IF_ERROR(CheckRoom(requests, signaled));
  if (ops.empty()) return Status::OK();

  wrs_.assign(requests, ibv_send_wr{});
  sges_.assign(requests, ibv_sge{});
  const bool had_expected = ExpectingCompletion();
  size_t w = 0;
  for (size_t op_index = 0; op_index < ops.size(); op_index++) {
    const Op& op = ops[op_index];
    if (!targets_[op_index].refused.ok()) {
      AcceptFailed(op, targets_[op_index].refused);
      continue;
    }
    const uint64_t remote_address = targets_[op_index].range.io_base + op.remote_offset;
    auto* region = static_cast<VerbsRegion*>(op.local.region);
    bool persist =
        op.persist && (op.opcode == Opcode::kWrite || op.opcode == Opcode::kWriteWithImm);
    const uint64_t first_seq = posted_ + 1;
    FillWorkRequest(op, region, remote_address, persist, &wrs_[w], &sges_[w]);
    ibv_send_wr& wr = wrs_[w];
    if (TakeSignal(op.signaled && !persist)) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      last_signaled_ = posted_;
    }
    w++;
    if (persist) {
      // The request follows the WRITE on the same queue pair, so the peer
      // sees it only after the data is placed.
      ibv_send_wr& request = wrs_[w];
      ibv_sge& request_sge = sges_[w];
      ControlMessage message{};
      message.version = kWireVersion;
      message.type = static_cast<uint8_t>(ControlType::kPersistRequest);
      message.key = op.remote_key;
      message.seq = ++posted_;
      message.offset = op.remote_offset;
      message.length = op.local.length;
      message.imm = op.imm;
      message.has_imm = op.opcode == Opcode::kWriteWithImm ? 1 : 0;
      char* slot =
          link_->control + size_t{kControlSlot} * (link_->rq_depth + posted_ % link_->sq_depth);
      std::memcpy(slot, &message, sizeof(message));
      request_sge.addr = reinterpret_cast<uintptr_t>(slot);
      request_sge.length = sizeof(message);
      request_sge.lkey = link_->control_mr->lkey;
      request.wr_id = posted_;
      request.opcode = IBV_WR_SEND;
      request.sg_list = &request_sge;
      request.num_sge = 1;
      request.send_flags = IBV_SEND_SIGNALED;
      if (sizeof(message) <= link_->max_inline) request.send_flags |= IBV_SEND_INLINE;
      TakeSignal(true);
      last_signaled_ = posted_;
      w++;
    }
    AddPending(op, first_seq, persist);
  }
  if (needs_marker) {
    const auto& [key, range] = *remote_ranges_.begin();
    ibv_send_wr& wr = wrs_[w++];
    wr.wr_id = ++posted_;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.num_sge = 0;
    wr.wr.rdma.remote_addr = range.io_base;
    wr.wr.rdma.rkey = key;
    wr.send_flags = IBV_SEND_SIGNALED;
    TakeSignal(true);
    last_signaled_ = posted_;
    Pending marker{};
    marker.first_seq = marker.last_seq = posted_;
    marker.opcode = Opcode::kWrite;  // not the caller's: completes silently
    pending_.push_back(std::move(marker));
  }
  for (size_t i = 0; i + 1 < w; i++) wrs_[i].next = &wrs_[i + 1];
  if (!had_expected) progress_++;  // the stall clock starts now

  if (w > 0) {
    ibv_send_wr* bad = nullptr;
    int err = ibv_post_send(link_->id->qp, wrs_.data(), &bad);
    if (err != 0) {
      // Accounting said it fits, so the queue pair itself is in trouble;
      // some requests may be in flight: the connection cannot be trusted.
      Break(Status::FromErrno("ibv_post_send", err));
    }
  }
  FinishReady();  // ops refused above may be next in line
  return Status::OK();
}

size_t VerbsConnection::PollCompletions(std::span<Completion> out) {
  // Only the owner writes it (the service thread reads): no locked add.
  owner_polls_.store(owner_polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  DrainLocked();
  size_t n = 0;
  while (n < out.size() && !ready_.empty()) {
    Ready& ready = ready_.front();
    if (ready.signaled) signaled_outstanding_--;
    out[n++] = std::move(ready.completion);
    ready_.pop_front();
  }
  return n;
}

size_t VerbsConnection::PollIncoming(std::span<Incoming> out) {
  // Only the owner writes it (the service thread reads): no locked add.
  owner_polls_.store(owner_polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  DrainLocked();
  size_t n = 0;
  while (n < out.size() && !incoming_.empty()) {
    out[n++] = incoming_.front();
    incoming_.pop_front();
  }
  return n;
}

void VerbsConnection::ServeIfIdle() {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) DrainLocked();
}

void VerbsConnection::DrainLocked() {
  if (!link_) return;
  ibv_wc wcs[32];
  int handled = 0;
  for (;;) {
    int n = ibv_poll_cq(link_->cq, 32, wcs);
    if (n < 0) {
      Break(Status::IOError("ibv_poll_cq failed"));
      break;
    }
    for (int i = 0; i < n; i++) HandleCompletion(wcs[i]);
    handled += n;
    // The ring stays posted but for less than a batch, even in a burst:
    // below that the peer's sends would meet receiver-not-ready.
    if (consumed_receives_.size() >= kRepostBatch) RepostReceivesOrBreak();
    if (n < 32) break;
  }
  if (!broken_ && peer_gone_) Break(Status::Unavailable("peer " + peer_address_ + " disconnected"));
  if (!broken_) {
    FlushDeferredLocked();
    if (handled == 0) {
      if (!consumed_receives_.empty()) RepostReceivesOrBreak();
      CheckTimeoutLocked();
    }
  }
}

void VerbsConnection::RepostReceivesOrBreak() {
  if (broken_) return;
  Status s = RepostReceives();
  if (!s.ok()) Break(s);
}

void VerbsConnection::HandleCompletion(const ibv_wc& wc) {
  if (wc.wr_id & kRecvTag) {
    if (wc.status != IBV_WC_SUCCESS) {
      if (!broken_) Break(StatusFromCompletion(wc));
      return;
    }
    auto index = static_cast<uint32_t>(wc.wr_id & ~kRecvTag);
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      // The CQE is polled after the data is placed; ibv_poll_cq orders the
      // caller's later loads after it.
      incoming_.push_back(Incoming{ntohl(wc.imm_data), wc.byte_len});
    } else if (wc.opcode == IBV_WC_RECV) {
      HandleControl(reinterpret_cast<const uint8_t*>(link_->control) + size_t{index} * kControlSlot,
                    wc.byte_len);
    } else {
      Break(Status::Corruption("unexpected receive completion opcode"));
    }
    consumed_receives_.push_back(index);
    return;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    FailFrom(wc.wr_id, StatusFromCompletion(wc));
    return;
  }
  Retire(wc.wr_id);
}

void VerbsConnection::HandleControl(const uint8_t* data, uint32_t length) {
  ControlMessage message;
  Status s = DecodeControl(std::span<const uint8_t>(data, length), &message);
  if (!s.ok()) {
    Break(s.WithContext("from peer " + peer_address_));
    return;
  }
  if (message.type == static_cast<uint8_t>(ControlType::kPersistRequest)) {
    Status persisted = device_->Persist(message.key, message.offset, message.length);
    if (persisted.ok() && message.has_imm) {
      incoming_.push_back(Incoming{message.imm, message.length});
    }
    ControlMessage reply{};
    reply.version = kWireVersion;
    reply.type = static_cast<uint8_t>(ControlType::kPersistReply);
    reply.status = static_cast<uint16_t>(persisted.code());
    reply.seq = message.seq;
    deferred_.push_back(reply);
    FlushDeferredLocked();
    return;
  }
  if (message.type == static_cast<uint8_t>(ControlType::kDescribeRequest)) {
    Device::RangeInfo range{};
    Status described = device_->Describe(message.key, &range);
    ControlMessage reply{};
    reply.version = kWireVersion;
    reply.type = static_cast<uint8_t>(ControlType::kDescribeReply);
    reply.status = static_cast<uint16_t>(described.code());
    reply.key = message.key;
    reply.seq = message.seq;
    reply.offset = range.io_base;
    reply.size = range.size;
    reply.access = static_cast<uint8_t>(range.access);
    reply.max_transfer = device_->options().max_transfer;
    deferred_.push_back(reply);
    FlushDeferredLocked();
    return;
  }
  if (message.type == static_cast<uint8_t>(ControlType::kDescribeReply)) {
    if (describe_seq_ == 0 || message.seq != describe_seq_) {
      Break(Status::Corruption("describe reply for no request, from peer " + peer_address_));
      return;
    }
    describe_reply_ = message;
    describe_answered_ = true;
    return;
  }
  // A persist reply: find the op whose persist request carried this sequence.
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const Pending& p) { return p.last_seq == message.seq; });
  if (it == pending_.end() || !it->needs_reply || it->replied) {
    Break(Status::Corruption("persist reply for no request, from peer " + peer_address_));
    return;
  }
  it->replied = true;
  if (message.status != 0) {
    it->status = Status(static_cast<StatusCode>(message.status),
                        "the peer could not persist the written range");
  }
  progress_++;
  FinishReady();
}

void VerbsConnection::FlushDeferredLocked() {
  while (!deferred_.empty() && FreeSendSlots() > 0) {
    ControlMessage& message = deferred_.front();
    ibv_sge sge{};
    uint64_t seq = ++posted_;
    char* slot = link_->control + size_t{kControlSlot} * (link_->rq_depth + seq % link_->sq_depth);
    std::memcpy(slot, &message, sizeof(message));
    sge.addr = reinterpret_cast<uintptr_t>(slot);
    sge.length = sizeof(message);
    sge.lkey = link_->control_mr->lkey;
    ibv_send_wr wr{};
    wr.wr_id = seq;
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (sizeof(message) <= link_->max_inline) wr.send_flags |= IBV_SEND_INLINE;
    if (TakeSignal(false)) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      last_signaled_ = seq;
    }
    ibv_send_wr* bad;
    int err = ibv_post_send(link_->id->qp, &wr, &bad);
    if (err != 0) {
      Break(Status::FromErrno("ibv_post_send (persist reply)", err));
      return;
    }
    deferred_.pop_front();
  }
}

void VerbsConnection::Retire(uint64_t seq) {
  retired_ = std::max(retired_, seq);
  for (Pending& p : pending_) {
    if (p.last_seq > seq) break;
    p.retired = true;
  }
  progress_++;
  FinishReady();
}

void VerbsConnection::FinishReady() {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    if (!p.retired || (p.needs_reply && !p.replied)) break;
    if (p.signaled || !p.status.ok()) {
      ready_.push_back(Ready{Completion{p.id, p.opcode, std::move(p.status)}, p.signaled});
    }
    pending_.pop_front();
  }
}

void VerbsConnection::FailFrom(uint64_t failed_seq, const Status& status) {
  if (broken_) return;  // flushed requests after the first failure
  // RC completes in order: everything before the failed request succeeded.
  for (Pending& p : pending_) {
    if (!p.status.ok()) {
      // refused before it was sent: keeps its own status
    } else if (p.last_seq < failed_seq) {
      if (p.needs_reply && !p.replied) {
        p.status = Status::Unavailable("connection broke before the persist reply");
      }
    } else if (p.first_seq <= failed_seq) {
      p.status = status;
    } else {
      p.status = Status::Unavailable("not executed: an earlier op on the connection failed");
    }
    p.retired = true;
    p.replied = true;
  }
  FinishReady();
  Break(status);
}

void VerbsConnection::Break(const Status& status) {
  if (broken_) return;
  broken_status_ = status;
  broken_ = true;
  // The device stops touching our buffers before the caller learns the ops
  // failed and reuses them.
  if (link_ && link_->has_qp) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(link_->id->qp, &attr, IBV_QP_STATE);
  }
  for (Pending& p : pending_) {
    if (p.status.ok()) p.status = status;
    ready_.push_back(Ready{Completion{p.id, p.opcode, std::move(p.status)}, p.signaled});
  }
  pending_.clear();
  deferred_.clear();
}

void VerbsConnection::CheckTimeoutLocked() {
  // Reading the clock on every empty poll would cost more than the poll
  // (and far more where the clock is not a cheap vDSO read): look every
  // kPollsPerClockRead empty polls whether progress was made since.
  if (++idle_polls_ % kPollsPerClockRead != 0) return;
  // Only ops a signaled request will retire can be late; a trailing run of
  // unsignaled ops waits for the caller's next signaled op.
  if (pending_.empty()) return;
  const Pending& front = pending_.front();
  bool expected = last_signaled_ >= front.first_seq || front.needs_reply;
  if (!expected) return;
  auto now = CoarseNow();
  if (progress_ != progress_seen_) {
    progress_seen_ = progress_;
    stalled_since_ = now;
    return;
  }
  auto timeout = std::chrono::milliseconds(device_->options().op_timeout_ms);
  if (now - stalled_since_ > timeout) {
    Break(Status::Timeout(std::string(OpcodeName(front.opcode)) + " to " + peer_address_ +
                          " did not complete within " +
                          std::to_string(device_->options().op_timeout_ms) + " ms"));
  }
}

size_t VerbsConnection::outstanding() const {
  std::lock_guard lock(mu_);
  return signaled_outstanding_;
}

bool VerbsConnection::healthy() const {
  return !broken_ && !peer_gone_;
}

void VerbsConnection::OnPeerDisconnected() {
  peer_gone_ = true;
  // Moves our queue pair to the error state: its flushed receives wake an
  // owner sleeping on notify_fd.
  if (link_) rdma_disconnect(link_->id);
}

Status VerbsConnection::Reconnect() {
  if (!active_) {
    return Status::FailedPrecondition("the accepting side cannot reconnect; its peer does");
  }
  std::lock_guard lock(mu_);
  if (link_) {
    device_->RemoveConnection(link_->id);
    Break(Status::Unavailable("connection replaced by Reconnect"));
    link_.reset();
  }
  posted_ = retired_ = last_signaled_ = last_read_ = 0;
  unsignaled_run_ = 0;
  // The peer may be a new process whose ranges differ under the same keys.
  remote_ranges_.clear();
  recent_range_ = nullptr;
  broken_status_ = Status::OK();
  Status s = Establish();
  if (!s.ok()) {
    link_.reset();
    broken_status_ = s;
    broken_ = true;
  }
  return s;
}

int VerbsConnection::notify_fd() const {
  return comp_channel_->fd;
}

Status VerbsConnection::ArmNotify() {
  std::lock_guard lock(mu_);
  if (!link_) return Status::Unavailable("connection is broken");
  int err = ibv_req_notify_cq(link_->cq, 0);
  if (err != 0) return Status::FromErrno("ibv_req_notify_cq", err);
  return Status::OK();
}

void VerbsConnection::AckNotify() {
  ibv_cq* cq;
  void* context;
  while (ibv_get_cq_event(comp_channel_, &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
}

std::span<const uint8_t> VerbsConnection::peer_blob() const {
  return {reinterpret_cast<const uint8_t*>(peer_blob_.data()), peer_blob_.size()};
}

std::span<const uint8_t> VerbsConnection::local_blob() const {
  return {reinterpret_cast<const uint8_t*>(local_blob_.data()), local_blob_.size()};
}

}  // namespace pdpm::net::verbs
