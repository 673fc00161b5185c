// Self-identified RPC over iRDMA (Octopus-style), written only against
// Connection, so it behaves the same on every backend.
//
// Each connection has N request slots at the server and N reply slots at
// the client, registered when it is made; their keys travel in the connect
// blobs. A call is one WRITE_WITH_IMM of the request message into server
// slot i with immediate i, and the reply comes back the same way into
// client slot i: neither side scans memory for messages. Payloads that do
// not fit a slot travel by one-sided transfer: the request names a buffer
// of the client's registered pool; the server READs the request from it
// and WRITEs a large reply into it before sending the reply message.
// Message format: docs/net.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "net/buffer_pool.h"
#include "net/transport.h"

namespace pdpm::net {

struct RpcOptions {
  uint32_t slots = 8;               // calls a connection can have in flight
  uint32_t slot_size = 4096;        // message header + inline payload
  uint32_t max_payload = 1u << 20;  // largest request or reply
  uint32_t pool_buffers = 16;       // bulk buffers per client / per server
  uint32_t server_threads = 1;      // threads a server polls its connections on
  // The last `reserved_threads` of them serve only connections bound to a
  // core >= server_threads - reserved_threads, and those connections no
  // other thread: traffic sent to such a core (e.g. replication between
  // servers) never waits behind handlers of the other cores.
  uint32_t reserved_threads = 0;
  uint32_t timeout_ms = 2000;  // a call's deadline unless it gives one
  // Clients and server threads poll this long before sleeping on the
  // notify fds. Spinning pays only with spare cores; on a busy host
  // sleeping at once is faster.
  uint32_t spin_us = 0;
};

// Bytes of a slot taken by the message header.
inline constexpr uint32_t kRpcHeaderSize = 48;

// Serves one method: fills `reply` from `request`. A non-ok Status travels
// to the caller (code and message) instead of a reply.
using RpcHandler = std::function<Status(std::span<const uint8_t> request, std::string* reply)>;

class RpcServer {
 public:
  static Status Create(Transport* transport, const RpcOptions& options,
                       std::unique_ptr<RpcServer>* out);
  // Stops the threads and closes every connection.
  ~RpcServer();

  // Before Listen. Calls to an unregistered method fail with kNotFound.
  void Register(uint16_t method, RpcHandler handler);
  // Accepts RPC connections on the transport (at most one listener each).
  Status Listen(const std::string& address);

  class Impl;

 private:
  explicit RpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One client connection. Calls are made by one thread at a time.
class RpcClient {
 public:
  static Status Connect(Transport* transport, const std::string& address, uint32_t core,
                        const RpcOptions& options, std::unique_ptr<RpcClient>* out);
  ~RpcClient();

  // Calls `method`; kTimeout when no reply within timeout_ms (0: the
  // options' default), kUnavailable when the server is gone, kTooLarge for
  // a payload over max_payload, else the handler's Status. `give_up`, when
  // given, is asked every kGiveUpCheckMs while the reply is awaited; true
  // ends the wait with kUnavailable — the request may have reached the
  // server, and its reply may still come: the caller drops this client
  // before another call (as after a timeout).
  Status Call(uint16_t method, std::span<const uint8_t> request, std::string* reply,
              uint32_t timeout_ms = 0, const GiveUpFn& give_up = {});

  // Call in two halves, so that one thread can have calls on several
  // connections in flight at once: Start posts the request (its deadline
  // runs from now) and Finish waits for its reply, with Call's results. At
  // most one started call per client; no other call until its Finish.
  Status Start(uint16_t method, std::span<const uint8_t> request, uint32_t timeout_ms = 0);
  Status Finish(std::string* reply, const GiveUpFn& give_up = {});

  Connection& connection();

  // Whether the last Call (or Finish) ended with the server's reply: its
  // Status, whatever its code, is the handler's answer and the connection
  // stays usable. False after a timeout, a give-up or a transport failure
  // (the connection may be broken, or a late reply may still come: drop
  // it), and before any call.
  bool replied() const;

  class Impl;

 private:
  explicit RpcClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pdpm::net
