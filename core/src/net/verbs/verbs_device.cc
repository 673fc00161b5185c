#include "net/verbs/verbs_device.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "net/verbs/verbs_connection.h"
#include "net/verbs/verbs_wire.h"

namespace pdpm::net::verbs {

namespace {
// The service thread looks at the connections every kTickMs while one of
// them goes unpolled by its owner. While every owner polls on its own, the
// look finds nothing to do and the interval doubles up to kMaxTickMs: each
// wakeup preempts a busy-polling owner, and a context switch (worse, one
// between processes) costs a polling round trip several times its length.
constexpr int kTickMs = 1;
constexpr int kMaxTickMs = 16;
}  // namespace

Status ErrnoStatus(std::string_view what) {
  return Status::FromErrno(what, errno);
}

Status Device::Open(const TransportOptions& options, std::shared_ptr<Device>* out) {
  int count = 0;
  ibv_context** contexts = rdma_get_devices(&count);
  if (contexts == nullptr || count == 0) {
    if (contexts != nullptr) rdma_free_devices(contexts);
    return Status::NotSupported("no RDMA device");
  }
  ibv_context* chosen = nullptr;
  bool named_found = false;
  for (int i = 0; i < count && chosen == nullptr; i++) {
    std::string name = ibv_get_device_name(contexts[i]->device);
    if (!options.device.empty() && name != options.device) continue;
    named_found = true;
    ibv_port_attr port{};
    if (ibv_query_port(contexts[i], options.ib_port, &port) == 0 && port.state == IBV_PORT_ACTIVE) {
      chosen = contexts[i];
    }
  }
  rdma_free_devices(contexts);  // the contexts stay open: librdmacm owns them
  if (chosen == nullptr) {
    if (!options.device.empty() && !named_found) {
      return Status::NotSupported("no RDMA device named '" + options.device + "'");
    }
    return Status::NotSupported("no RDMA device with an active port " +
                                std::to_string(options.ib_port));
  }

  std::shared_ptr<Device> device(new Device());
  device->options_ = options;
  device->context_ = chosen;
  if (ibv_query_device(chosen, &device->attr_) != 0) return ErrnoStatus("ibv_query_device");
  device->pd_ = ibv_alloc_pd(chosen);
  if (device->pd_ == nullptr) return ErrnoStatus("ibv_alloc_pd");
  device->cm_channel_ = rdma_create_event_channel();
  if (device->cm_channel_ == nullptr) return ErrnoStatus("rdma_create_event_channel");
  int flags = fcntl(device->cm_channel_->fd, F_GETFL);
  if (fcntl(device->cm_channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus("fcntl O_NONBLOCK on the rdma_cm channel");
  }
  device->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (device->epoll_fd_ < 0) return ErrnoStatus("epoll_create1");
  device->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (device->wake_fd_ < 0) return ErrnoStatus("eventfd");
  for (int fd : {device->cm_channel_->fd, device->wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(device->epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return ErrnoStatus("epoll_ctl");
    }
  }
  Device* raw = device.get();
  device->service_ = std::thread([raw] { raw->ServiceLoop(); });
  *out = std::move(device);
  return Status::OK();
}

Device::~Device() {
  if (service_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    Wake();
    if (service_.get_id() == std::this_thread::get_id()) {
      service_.detach();  // the last owner let go inside a handler
    } else {
      service_.join();
    }
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (cm_channel_ != nullptr) rdma_destroy_event_channel(cm_channel_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
}

std::string Device::name() const {
  return ibv_get_device_name(context_->device);
}

void Device::AddRegion(uint32_t key, uint64_t io_base, uint32_t access, char* data, size_t size,
                       PersistFn persist) {
  std::lock_guard lock(regions_mu_);
  regions_[key] = Region{io_base, access, data, size, std::move(persist)};
}

Status Device::Describe(uint32_t key, RangeInfo* info) {
  std::lock_guard lock(regions_mu_);
  auto it = regions_.find(key);
  if (it == regions_.end()) {
    return Status::NotFound("no registered range with key " + std::to_string(key));
  }
  *info = RangeInfo{it->second.io_base, it->second.size, it->second.access};
  return Status::OK();
}

void Device::RemoveRegion(uint32_t key) {
  std::lock_guard lock(regions_mu_);
  regions_.erase(key);
}

Status Device::Persist(uint32_t key, uint64_t offset, uint32_t length) {
  std::lock_guard lock(regions_mu_);
  auto it = regions_.find(key);
  if (it == regions_.end()) {
    return Status::NotFound("persist: no registered range with key " + std::to_string(key));
  }
  const Region& region = it->second;
  if (offset > region.size || length > region.size - offset) {
    return Status::OutOfRange("persist: range outside the registered region");
  }
  // A range without a PersistFn is as durable as its memory gets once the
  // write is placed, which the request's arrival already proves.
  if (region.persist) region.persist(region.data + offset, length);
  return Status::OK();
}

void Device::AddConnection(rdma_cm_id* id, VerbsConnection* conn) {
  {
    std::lock_guard lock(mu_);
    connections_[id] = conn;
    polls_seen_[conn] = conn->owner_polls();
  }
  Wake();  // the service thread starts ticking
}

void Device::RemoveConnection(rdma_cm_id* id) {
  std::lock_guard lock(mu_);
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  polls_seen_.erase(it->second);
  connections_.erase(it);
}

void Device::StartListener(rdma_cm_id* listen_id, AcceptHandler handler) {
  std::lock_guard lock(mu_);
  listen_id_ = listen_id;
  handler_ = std::move(handler);
}

rdma_cm_id* Device::StopListener() {
  std::map<rdma_cm_id*, std::unique_ptr<VerbsConnection>> accepting;
  rdma_cm_id* id;
  {
    std::lock_guard handler_lock(handler_mu_);
    std::lock_guard lock(mu_);
    id = listen_id_;
    listen_id_ = nullptr;
    handler_ = AcceptHandler();
    accepting.swap(accepting_);
  }
  return id;  // `accepting` (half-open connections) is torn down here
}

std::unique_ptr<VerbsConnection> Device::TakeAccepting(rdma_cm_id* id) {
  std::lock_guard lock(mu_);
  auto it = accepting_.find(id);
  if (it == accepting_.end()) return nullptr;
  std::unique_ptr<VerbsConnection> conn = std::move(it->second);
  accepting_.erase(it);
  return conn;
}

void Device::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void Device::ServiceLoop() {
  int tick_ms = kTickMs;
  for (;;) {
    bool ticking;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      ticking = !connections_.empty();
    }
    epoll_event events[4];
    int n = epoll_wait(epoll_fd_, events, 4, ticking ? tick_ms : -1);
    for (int i = 0; i < n; i++) {
      if (events[i].data.fd == wake_fd_) {
        uint64_t value;
        (void)!read(wake_fd_, &value, sizeof(value));
      }
    }
    rdma_cm_event* event;
    while (rdma_get_cm_event(cm_channel_, &event) == 0) HandleCmEvent(event);
    tick_ms = ServeIdleConnections() ? kTickMs : std::min(2 * tick_ms, kMaxTickMs);
  }
}

bool Device::ServeIdleConnections() {
  std::lock_guard lock(mu_);
  bool served = false;
  for (auto& [id, conn] : connections_) {
    uint64_t polls = conn->owner_polls();
    uint64_t& seen = polls_seen_[conn];
    if (polls == seen) {
      conn->ServeIfIdle();
      served = true;
    }
    seen = polls;
  }
  return served;
}

void Device::HandleCmEvent(rdma_cm_event* event) {
  // Copy what is needed and acknowledge first: destroying an id waits for
  // its events to be acknowledged, and handlers may destroy connections.
  rdma_cm_event_type type = event->event;
  rdma_cm_id* id = event->id;
  std::vector<uint8_t> data;
  uint8_t peer_initiator = 0, peer_responder = 0;
  if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
    const auto* p = static_cast<const uint8_t*>(event->param.conn.private_data);
    data.assign(p, p + event->param.conn.private_data_len);
    peer_initiator = event->param.conn.initiator_depth;
    peer_responder = event->param.conn.responder_resources;
  }
  rdma_ack_cm_event(event);

  switch (type) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      HandleConnectRequest(id, data, peer_initiator, peer_responder);
      return;
    case RDMA_CM_EVENT_ESTABLISHED: {
      std::unique_ptr<VerbsConnection> conn = TakeAccepting(id);
      if (!conn) return;
      AddConnection(id, conn.get());
      AcceptHandler handler;
      std::lock_guard handler_lock(handler_mu_);
      {
        std::lock_guard lock(mu_);
        handler = handler_;
      }
      if (handler.on_connected) {
        handler.on_connected(std::move(conn));
      }
      return;  // without a handler (transport gone) `conn` closes here
    }
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_DEVICE_REMOVAL: {
      // A half-open connection is destroyed outside mu_ (its destructor
      // takes it); an established one breaks and waits for its owner.
      std::unique_ptr<VerbsConnection> half_open = TakeAccepting(id);
      std::lock_guard lock(mu_);
      auto it = connections_.find(id);
      if (it != connections_.end()) it->second->OnPeerDisconnected();
      return;
    }
    default: return;  // address/route events belong to setup channels; TIMEWAIT_EXIT etc.
  }
}

void Device::HandleConnectRequest(rdma_cm_id* id, std::span<const uint8_t> data,
                                  uint8_t peer_initiator, uint8_t peer_responder) {
  auto reject = [id](const Status& why) {
    uint8_t buffer[kRejectDataSize];
    size_t length = EncodeRejectData(why, buffer);
    rdma_reject(id, buffer, static_cast<uint8_t>(length));
    rdma_destroy_id(id);
  };
  uint32_t core;
  std::string peer_blob;
  Status s = DecodeConnectData(data, &core, &peer_blob);
  if (!s.ok()) return reject(s);
  if (id->verbs != context_) {
    return reject(Status::FailedPrecondition("request arrived on another RDMA device"));
  }
  core %= std::max<uint32_t>(options_.cores, 1);

  std::lock_guard handler_lock(handler_mu_);
  AcceptHandler handler;
  {
    std::lock_guard lock(mu_);
    handler = handler_;
  }
  if (!handler.on_request) return reject(Status::Unavailable("not listening"));
  std::string reply;
  s = handler.on_request(core,
                         std::span<const uint8_t>(
                             reinterpret_cast<const uint8_t*>(peer_blob.data()), peer_blob.size()),
                         &reply);
  if (!s.ok()) return reject(s);
  if (reply.size() > kMaxConnectBlob) {
    return reject(Status::Internal("listener's reply blob exceeds 48 bytes"));
  }
  // A listening transport holds the device, so shared_from_this() is valid.
  std::unique_ptr<VerbsConnection> conn;
  s = VerbsConnection::ForRequest(shared_from_this(), id, core, std::move(peer_blob), reply, &conn);
  if (!s.ok()) return reject(s);

  uint8_t private_data[kConnectDataSize];
  rdma_conn_param param{};
  param.private_data = private_data;
  param.private_data_len = static_cast<uint8_t>(EncodeConnectData(core, reply, private_data));
  param.responder_resources =
      static_cast<uint8_t>(std::min<int>(attr_.max_qp_rd_atom, peer_initiator));
  param.initiator_depth =
      static_cast<uint8_t>(std::min<int>(attr_.max_qp_init_rd_atom, peer_responder));
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  {
    std::lock_guard lock(mu_);
    accepting_[id] = std::move(conn);
  }
  if (rdma_accept(id, &param) != 0) {
    // The peer sees a connect error; the half-open connection goes away.
    std::unique_ptr<VerbsConnection> dropped = TakeAccepting(id);
  }
}

}  // namespace pdpm::net::verbs
