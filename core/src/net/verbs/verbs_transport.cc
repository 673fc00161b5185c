#include "net/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <cstring>
#include <mutex>

#include "net/verbs/verbs_connection.h"
#include "net/verbs/verbs_device.h"

namespace pdpm::net::verbs {

namespace {

class VerbsTransport final : public Transport {
 public:
  explicit VerbsTransport(std::shared_ptr<Device> device) : device_(std::move(device)) {}

  ~VerbsTransport() override {
    rdma_cm_id* listen_id = device_->StopListener();
    if (listen_id != nullptr) rdma_destroy_id(listen_id);
  }

  BackendKind kind() const override { return BackendKind::kVerbs; }

  Status RegisterMemory(void* data, size_t size, uint32_t access, PersistFn persist,
                        std::unique_ptr<MemoryRegion>* out) override {
    if (data == nullptr || size == 0) {
      return Status::InvalidArgument("register: empty range");
    }
    if ((access & kAccessGated) != 0) {
      return Status::NotSupported("register: the NIC serves one-sided ops without asking");
    }
    if ((access & ~static_cast<uint32_t>(kRemoteAll)) != 0) {
      return Status::InvalidArgument("register: unknown access bits");
    }
    // Local write is always granted: READ results and atomics land in
    // registered memory.
    int flags = IBV_ACCESS_LOCAL_WRITE;
    if (access & kRemoteRead) flags |= IBV_ACCESS_REMOTE_READ;
    if (access & kRemoteWrite) flags |= IBV_ACCESS_REMOTE_WRITE;
    if (access & kRemoteAtomic) flags |= IBV_ACCESS_REMOTE_ATOMIC;
    // The I/O address of offset 0 is the range's offset in its page (the
    // kernel wants address and I/O address congruent modulo the page
    // size): page-aligned ranges start at 0, others at their page offset,
    // which peers learn once per key (docs/net-verbs.md).
    uint64_t io_base = reinterpret_cast<uintptr_t>(data) % kIoPageSize;
    ibv_mr* mr = ibv_reg_mr_iova2(device_->pd(), data, size, io_base, flags);
    if (mr == nullptr) {
      int err = errno;
      std::string hint =
          err == EOPNOTSUPP ? " (file-system DAX memory cannot be pinned; register devdax)" : "";
      return Status::FromErrno("ibv_reg_mr of " + std::to_string(size) + " bytes" + hint, err);
    }
    device_->AddRegion(mr->rkey, io_base, access, static_cast<char*>(data), size,
                       std::move(persist));
    *out = std::make_unique<VerbsRegion>(device_, mr, io_base, static_cast<char*>(data), size);
    return Status::OK();
  }

  Status Listen(const std::string& address, AcceptHandler handler) override {
    std::lock_guard lock(mu_);
    if (listen_id_ != nullptr) return Status::FailedPrecondition("already listening");
    size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      return Status::InvalidArgument("listen address '" + address + "' is not host:port");
    }
    std::string host = address.substr(0, colon);
    std::string port = address.substr(colon + 1);
    std::string bare =
        host.size() >= 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* resolved = nullptr;
    int gai = getaddrinfo(bare.empty() ? nullptr : bare.c_str(), port.c_str(), &hints, &resolved);
    if (gai != 0) {
      return Status::InvalidArgument("resolve '" + address + "': " + gai_strerror(gai));
    }
    sockaddr_storage local{};
    std::memcpy(&local, resolved->ai_addr, resolved->ai_addrlen);
    freeaddrinfo(resolved);

    rdma_cm_id* id;
    if (rdma_create_id(device_->cm_channel(), &id, nullptr, RDMA_PS_TCP) != 0) {
      return ErrnoStatus("rdma_create_id");
    }
    Status s;
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&local)) != 0) {
      s = ErrnoStatus("rdma_bind_addr " + address);
    } else if (id->verbs != nullptr && id->verbs != device_->context()) {
      s = Status::FailedPrecondition("listen address " + address +
                                     " belongs to another device than " + device_->name());
    } else if (rdma_listen(id, 128) != 0) {
      s = ErrnoStatus("rdma_listen " + address);
    }
    if (!s.ok()) {
      rdma_destroy_id(id);
      return s;
    }
    listen_id_ = id;
    listen_address_ = host + ":" + std::to_string(ntohs(rdma_get_src_port(id)));
    device_->StartListener(id, std::move(handler));
    return Status::OK();
  }

  std::string listen_address() const override {
    std::lock_guard lock(mu_);
    return listen_address_;
  }

  Status Connect(const std::string& address, uint32_t core, std::string_view local_blob,
                 std::unique_ptr<Connection>* out) override {
    return VerbsConnection::ConnectTo(device_, address, core, local_blob, out);
  }

 private:
  const std::shared_ptr<Device> device_;
  mutable std::mutex mu_;
  rdma_cm_id* listen_id_ = nullptr;  // destroyed through Device::StopListener
  std::string listen_address_;
};

}  // namespace

Status CreateVerbsTransport(const TransportOptions& options, std::unique_ptr<Transport>* out) {
  if (options.max_outstanding == 0) {
    return Status::InvalidArgument("max_outstanding must be at least 1");
  }
  std::shared_ptr<Device> device;
  PDPM_RETURN_IF_ERROR(Device::Open(options, &device));
  *out = std::make_unique<VerbsTransport>(std::move(device));
  return Status::OK();
}

}  // namespace pdpm::net::verbs
