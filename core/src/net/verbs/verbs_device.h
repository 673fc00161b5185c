// The device side of the verbs backend, shared by a transport, its regions
// and its connections (whichever lives longest keeps it open): the verbs
// context and protection domain, the registry of regions (for persist
// requests), and the service thread that owns the rdma_cm event channel.
//
// The service thread accepts connections for the listener, turns
// disconnect events into broken connections, and keeps connections whose
// owner does not poll them moving: every millisecond it serves the
// completion queue of each connection that was not polled since the last
// tick, so a peer's persist requests are answered even by a process that
// only exposes memory.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "net/transport.h"

namespace pdpm::net::verbs {

class VerbsConnection;

// Fails with `what: strerror(errno)`.
Status ErrnoStatus(std::string_view what);

class Device : public std::enable_shared_from_this<Device> {
 public:
  // kNotSupported when there is no (matching, active) RDMA device.
  static Status Open(const TransportOptions& options, std::shared_ptr<Device>* out);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const TransportOptions& options() const { return options_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  const ibv_device_attr& attr() const { return attr_; }
  std::string name() const;
  rdma_event_channel* cm_channel() const { return cm_channel_; }

  // Region registry: the PersistFn behind a key.
  void AddRegion(uint32_t key, uint64_t io_base, uint32_t access, char* data, size_t size,
                 PersistFn persist);
  void RemoveRegion(uint32_t key);
  // Runs the PersistFn of the region `key` names over [offset, offset+length).
  Status Persist(uint32_t key, uint64_t offset, uint32_t length);
  // What a peer needs to address the region `key` and check its ops
  // against it (kNotFound if there is none).
  struct RangeInfo {
    uint64_t io_base;  // I/O address of offset 0
    uint64_t size;
    uint32_t access;  // Access bits
  };
  Status Describe(uint32_t key, RangeInfo* info);

  // Established connections whose cm events and progress the service thread
  // handles. Remove before the connection's cm id is destroyed.
  void AddConnection(rdma_cm_id* id, VerbsConnection* conn);
  void RemoveConnection(rdma_cm_id* id);

  // Hands `listen_id` (on cm_channel()) to the service thread.
  void StartListener(rdma_cm_id* listen_id, AcceptHandler handler);
  // Stops accepting and waits for running handler calls; returns the id
  // for the caller to destroy.
  rdma_cm_id* StopListener();

 private:
  struct Region {
    uint64_t io_base;
    uint32_t access;
    char* data;
    size_t size;
    PersistFn persist;
  };

  Device() = default;
  void ServiceLoop();
  void HandleCmEvent(rdma_cm_event* event);
  void HandleConnectRequest(rdma_cm_id* id, std::span<const uint8_t> data, uint8_t peer_initiator,
                            uint8_t peer_responder);
  // Serves each connection its owner did not poll since the last call;
  // true if there was one.
  bool ServeIdleConnections();
  std::unique_ptr<VerbsConnection> TakeAccepting(rdma_cm_id* id);
  void Wake();

  TransportOptions options_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_device_attr attr_{};
  rdma_event_channel* cm_channel_ = nullptr;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread service_;
  bool stopping_ = false;  // guarded by mu_

  std::mutex regions_mu_;
  std::map<uint32_t, Region> regions_;

  // Lock order: mu_, then a connection's own mutex.
  std::mutex mu_;
  std::map<rdma_cm_id*, VerbsConnection*> connections_;
  std::map<VerbsConnection*, uint64_t> polls_seen_;  // owner polls at the last tick
  std::map<rdma_cm_id*, std::unique_ptr<VerbsConnection>> accepting_;
  rdma_cm_id* listen_id_ = nullptr;
  AcceptHandler handler_;
  // Held while a handler runs, so StopListener can wait for it.
  std::mutex handler_mu_;
};

}  // namespace pdpm::net::verbs
