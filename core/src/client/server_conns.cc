#include "client/server_conns.h"

#include <algorithm>
#include <string>
#include <utility>

namespace pdpm::client {

ServerConns::ServerConns(std::string address, uint32_t cores, uint32_t connections,
                         uint32_t staging_size)
    : address_(std::move(address)), staging_size_(staging_size) {
  cores = std::max(1u, cores);
  const uint32_t n = std::max(cores, connections);
  for (uint32_t i = 0; i < n; i++) conns_.push_back(std::make_unique<Conn>(i % cores));
}

Status ServerConns::Acquire(net::Transport* transport, const net::RpcOptions& rpc_options,
                            size_t preferred, Conn** out, std::unique_lock<std::mutex>* lock) {
  preferred %= conns_.size();
  Conn* c = nullptr;
  for (size_t i = 0; i < conns_.size() && c == nullptr; i++) {
    Conn* candidate = conns_[(preferred + i) % conns_.size()].get();
    std::unique_lock<std::mutex> l(candidate->mu, std::try_to_lock);
    if (l.owns_lock()) {
      *lock = std::move(l);
      c = candidate;
    }
  }
  if (c == nullptr) {  // every one busy: queue for the preferred one
    c = conns_[preferred].get();
    *lock = std::unique_lock<std::mutex>(c->mu);
  }
  *out = c;
  if (c->staging == nullptr) {
    PDPM_RETURN_IF_ERROR(net::BufferPool::Create(
        transport, staging_size_, 1, net::kRemoteRead | net::kRemoteWrite, &c->staging));
  }
  if (c->rpc == nullptr || !c->rpc->connection().healthy()) {
    c->rpc.reset();
    Status s = net::RpcClient::Connect(transport, address_, c->core, rpc_options, &c->rpc);
    if (!s.ok()) {
      c->rpc.reset();
      return Status::Unavailable(address_ + ": " + std::string(s.message()));
    }
  }
  return Status::OK();
}

}  // namespace pdpm::client
