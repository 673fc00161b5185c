// Gateway: the Redis-protocol front end of pDKVS. A few event-loop threads
// share one listening socket (EPOLLEXCLUSIVE); each owns the connections it
// accepted and runs their requests in rounds: every complete request of
// every connection that is ready, the plain GETs and SETs (and one-field
// HGETs and HSETs) of all of them as one KvStore::RunBatch (one request per
// vnode, all in flight at once), the others in turn, each connection's replies in its request order
// and sent in one write. A protocol error replies and closes that connection only.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "pdkvs/gateway/commands.h"
#include "pdkvs/gateway/expiry_sweeper.h"
#include "pdkvs/gateway/kv_store.h"

namespace pdpm::pdkvs {

class Gateway {
 public:
  // Listens on config.bind:config.port (0: any free port; see port()) and
  // serves `store` with `threads` event loops until destroyed; sweeps the
  // expired keys of `store` meanwhile (config.active_expiry_interval).
  static Status Start(KvStore* store, const GatewayConfig& config, int threads, const Logger& log,
                      std::unique_ptr<Gateway>* out);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  int port() const { return config_.port; }

 private:
  struct Loop;
  Gateway(KvStore* store, const GatewayConfig& config, const Logger& log);
  void Run(Loop* loop);

  KvStore* const store_;
  GatewayConfig config_;
  Logger log_;
  ClientRegistry clients_;
  GatewayStats stats_;
  CommandExecutor executor_;
  int listen_fd_ = -1;
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::thread> threads_;
  std::unique_ptr<ExpirySweeper> sweeper_;  // null without active expiry
};

}  // namespace pdpm::pdkvs
