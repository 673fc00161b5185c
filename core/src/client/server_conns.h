// The connections of one Client to one data server (docs/client.md
// "Connections"). A connection carries one call at a time, so a server has
// several: one per core of the server, and more when the client asks for
// them (ClientOptions::connections_per_server), connection i bound to core
// i % cores. Concurrent threads thereby each get a connection of their own
// even to a one-core server instead of queueing for one.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/buffer_pool.h"
#include "net/rpc.h"
#include "net/transport.h"

namespace pdpm::client {

class ServerConns {
 public:
  // One connection, used by one thread at a time (the holder of mu).
  struct Conn {
    explicit Conn(uint32_t c) : core(c) {}
    const uint32_t core;  // the server core it is bound to
    std::mutex mu;
    std::unique_ptr<net::RpcClient> rpc;       // guarded by mu; null: not connected
    std::unique_ptr<net::BufferPool> staging;  // guarded by mu; one buffer for one-sided ops
  };

  // max(cores, connections) connections (each at least 1) to `address`, none
  // connected yet; each gets a staging buffer of `staging_size` bytes.
  ServerConns(std::string address, uint32_t cores, uint32_t connections, uint32_t staging_size);
  ServerConns(const ServerConns&) = delete;
  ServerConns& operator=(const ServerConns&) = delete;

  const std::string& address() const { return address_; }
  size_t size() const { return conns_.size(); }

  // Locks a connection for the calling thread into `*lock`: the first free
  // one from index `preferred` (modulo size()) on, else it waits for the
  // preferred one. A thread holding connections of several servers takes
  // them in one order of servers (one connection per server), so waiting
  // here cannot deadlock. Then connects the connection if it is not (first
  // use, or its connection broke) and creates its staging buffer. On an
  // error `*lock` still holds the connection; `*out` is set either way.
  // Errors: kUnavailable "address: why" when the connect fails, the
  // transport's error when registering the staging buffer fails.
  Status Acquire(net::Transport* transport, const net::RpcOptions& rpc_options, size_t preferred,
                 Conn** out, std::unique_lock<std::mutex>* lock);

 private:
  const std::string address_;
  const uint32_t staging_size_;
  std::vector<std::unique_ptr<Conn>> conns_;
};

}  // namespace pdpm::client
