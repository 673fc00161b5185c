// libpdpm: the pDSM client API (seeds/000 Table 4). Guarantees, the
// data-plane messages and failure handling: docs/client.md.
//
//   std::unique_ptr<pdpm::client::Client> c;
//   Status s = Client::Open({.monitor = "127.0.0.1:7400", .cluster_secret = secret}, &c);
//   GlobalAddress a;  s = c->PAllocate(4096, &a);  s = c->Write(a, buf, 4096);
//   s = c->PutObj(ObjectId{1, 2}, data);  s = c->GetObj(ObjectId{1, 2}, &data);
//
// Contract:
//   * Read/Write are one-sided transfers to the segment's primary; Write
//     returns only when the bytes are durable on the server's PM (the
//     transport's remote persistence). Object operations are RPCs to the
//     server owning the object's table (consistent hashing of the 128-bit
//     ID, monitor::TableForObject); object data travels by one-sided
//     transfers through pre-registered transfer buffers.
//   * The client caches the cluster mapping tagged with its epoch. A request
//     refused with kStaleEpoch, or a one-sided op refused for its key, makes
//     it refresh the mapping and keys from the monitor and retry once.
//   * Errors (distinct StatusCode per cause):
//       kNotFound           unknown address (segment not mapped), unknown object
//       kInvalidArgument    null address, size 0, an address that is not the
//                           start of an allocated block (PFree)
//       kFailedPrecondition double free
//       kOutOfRange         a range crossing its segment's end; a read past an
//                           object's end
//       kTooLarge           an object over 64 MiB
//       kPermissionDenied   missing or wrong cluster secret or segment key; a
//                           write through a read-only address
//       kStaleEpoch         the server still refuses the epoch after a refresh
//       kUnavailable        the server is dead or unreachable (within the
//                           transport timeout); the monitor is unreachable
//       kResourceExhausted  no PM left
//   * Thread-safe: one Client may be shared by many threads; a call to a
//     server takes one of the client's connections to it that is free
//     (ClientOptions::connections_per_server), waiting only when all are busy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/transaction.h"
#include "common/status.h"
#include "dsm/address.h"
#include "dsm/hash_index.h"
#include "net/transport.h"

namespace pdpm::client {

using dsm::GlobalAddress;
using dsm::ObjectId;

// Largest object (seeds/000 §4.1.5).
inline constexpr uint64_t kMaxObjectSize = 64ull << 20;

struct ClientOptions {
  std::string monitor;         // host:port of the monitor, or of every HA monitor: a,b,c
  std::string cluster_secret;  // needed for segment keys and every request
  net::BackendKind transport = net::BackendKind::kTcp;
  // A one-sided op or RPC to a dead or hung server fails within this.
  uint32_t op_timeout_ms = 2000;
  uint32_t connect_timeout_ms = 2000;
  uint32_t monitor_timeout_ms = 5000;
  // With replication: how long an operation whose server failed waits for
  // the cluster to move the data to a backup (polling the mapping) before
  // it gives up with kUnavailable. Longer than the monitor's down timeout
  // (10 s by default) plus a backup's promotion.
  uint32_t failover_wait_ms = 30000;
  // With replication: an op or RPC waiting this long on a server starts
  // asking the monitor (every 50 ms) whether a newer view moved what it
  // waits for, and if so ends the wait and goes where the data went —
  // a server that hangs without closing anything (frozen, cut off) costs
  // the monitor's failover, not op_timeout_ms. 0: never asks (only the
  // op timeout ends a wait).
  uint32_t hang_suspicion_ms = 100;
  // Connections kept to each server (made on first use): at least one per
  // server core, and at least this many. A call takes a free one, so this
  // many threads calling one server at once need not wait for each other;
  // give the number of threads that call concurrently (the pDKVS gateway
  // gives its event-loop threads).
  uint32_t connections_per_server = 1;
};

class Client {
 public:
  // Connects to the monitor and loads the mapping and segment keys.
  // kPermissionDenied for a missing or wrong secret, kUnavailable when the
  // monitor cannot be reached.
  static Status Open(const ClientOptions& options, std::unique_ptr<Client>* out);
  virtual ~Client() = default;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One-sided read of [addr, addr+len) into buf.
  virtual Status Read(const GlobalAddress& addr, void* buf, uint64_t len) = 0;
  // One-sided write of buf to [addr, addr+len), durable when it returns.
  virtual Status Write(const GlobalAddress& addr, const void* buf, uint64_t len) = 0;
  // A write that does not wait for remote persistence, for batching: when
  // it returns the bytes are in the server's memory and every later Read
  // (by any client) sees them, but a server crash or power failure may
  // lose them (wholly or in part) until a Persist covering them returns.
  // On a segment with copies (replica count above 1) it is a Write: the
  // copies never differ in what they hold. Same errors as Write.
  virtual Status WriteUnpersisted(const GlobalAddress& addr, const void* buf, uint64_t len) = 0;
  // Makes [addr, addr+len) durable on the segment's PM: every write to the
  // range that returned before Persist was called survives a crash of the
  // server once Persist returns. One RPC to the segment's primary however
  // long the range; len 0 does nothing. Same errors as Write (a read-only
  // address: kPermissionDenied).
  virtual Status Persist(const GlobalAddress& addr, uint64_t len) = 0;

  // Allocates `size` bytes of persistent heap on a server of the client's
  // choice (round-robin over live servers). The block stays allocated
  // until PFree, even if this client dies first (docs/dsm.md: allocate in
  // a transaction to link a block atomically).
  virtual Status PAllocate(uint64_t size, GlobalAddress* out) = 0;
  // The same on server `server_id` (affinity). kNotFound for an unknown
  // server.
  virtual Status PAllocate(uint64_t size, uint32_t server_id, GlobalAddress* out) = 0;
  virtual Status PFree(const GlobalAddress& addr) = 0;

  // Creates or replaces an object (atomic: readers and crashes see the old
  // or the new content).
  virtual Status PutObj(const ObjectId& id, std::string_view data) = 0;
  virtual Status GetObj(const ObjectId& id, std::string* data) = 0;
  // Reads [offset, offset+length) of an object.
  virtual Status ReadObj(const ObjectId& id, uint64_t offset, uint64_t length,
                         std::string* data) = 0;
  // Writes at `offset` of an existing object (growing it; a gap reads as
  // zeros); atomic like PutObj.
  virtual Status WriteObj(const ObjectId& id, uint64_t offset, std::string_view data) = 0;
  virtual Status ObjSize(const ObjectId& id, uint64_t* size) = 0;
  // Drops the bytes at and past `size` of an object larger than that (its
  // size becomes `size`; a smaller object is unchanged); atomic like PutObj.
  virtual Status TruncateObj(const ObjectId& id, uint64_t size) = 0;
  virtual Status DelObj(const ObjectId& id) = 0;
  // The ids of the objects of table `table` (1..table_count()) whose id.hi
  // has `tag` in its upper 32 bits, from `start` on (inclusive), sorted by
  // (hi, lo), at most `max` (<= 2048) of them. Fewer than `max`: the
  // table has no more; else the next page starts after the last id. An
  // object present for the whole listing is listed once. For checkers
  // (pDFS fsck); kInvalidArgument for a bad table or max.
  virtual Status ListObj(uint32_t table, uint32_t tag, const ObjectId& start, uint32_t max,
                         std::vector<ObjectId>* out) = 0;

  // Starts a transaction over heap data (client/transaction.h, docs/tx.md).
  virtual Status TxBegin(std::unique_ptr<Transaction>* out) = 0;

  // For services built on the object-store tables (pDKVS, docs/pdkvs.md):
  // sends data-plane RPC `method` (server/protocol.h) to the server owning
  // table `*table` that `route` picks from the cluster's table count; `body`
  // appends the request body after the header, for that table. The epoch
  // and failover handling are the object operations': a kStaleEpoch refusal
  // refreshes the mapping and routes again; with replication a dead
  // server's request waits (failover_wait_ms) for its backup's promotion.
  // A `route` error is returned as it is. `idempotent` false: a request
  // that may have reached its server (the connection failed or timed out
  // after sending) is not sent again; its outcome is unknown and the call
  // fails with kUnavailable (a second run could apply it twice). kAborted:
  // refused, nothing done (a key locked, or the table's segment still
  // being created on its server); the caller asks again.
  using TableRoute = std::function<Status(uint32_t table_count, uint32_t* table)>;
  using TableBody = std::function<void(uint32_t table, std::string* body)>;
  virtual Status TableCall(const TableRoute& route, uint16_t method, const TableBody& body,
                           bool idempotent, std::string* reply) = 0;
  // Several TableCalls from one thread, those to different servers in
  // flight at once: each first attempt is posted before any reply is
  // awaited. A call whose first attempt fails as TableCall would try again
  // (or that shares its server with an earlier call) goes on as a
  // TableCall, after the others. Each outcome is as TableCall's.
  struct TableCallArgs {
    TableRoute route;
    uint16_t method = 0;
    TableBody body;
    bool idempotent = true;
    Status status;      // out
    std::string reply;  // out
  };
  virtual void TableCallAll(std::span<TableCallArgs> calls) = 0;

  // The cluster's room for data, from the monitor: the PM of its servers
  // divided by the replica count, and how much of that the servers'
  // allocators hand out (as of their last heartbeats). For statfs/df.
  virtual Status Space(uint64_t* capacity, uint64_t* used) = 0;

  // The epoch of the cached mapping.
  virtual uint64_t epoch() const = 0;
  // The cluster's object-store table count in the cached mapping (0: none).
  virtual uint32_t table_count() const = 0;
  // Copies of every segment (primary and backups) in the cached mapping.
  virtual uint32_t replica_count() const = 0;
  // The server owning table `table` in the cached mapping (0: none), to
  // group requests by server.
  virtual uint32_t table_owner(uint32_t table) const = 0;
  // Reloads mapping and keys from the monitor.
  virtual Status RefreshMapping() = 0;

 protected:
  Client() = default;
};

}  // namespace pdpm::client
