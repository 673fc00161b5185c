// iRDMA: the transport every PDPM component talks through.
//
// One interface, two backends that are always compiled:
//   - verbs (net/verbs): libibverbs + librdmacm, RC queue pairs; the NIC
//     executes one-sided operations;
//   - tcp (net/tcp): epoll, no thread per connection; the passive side
//     emulates one-sided operations against its registered ranges and
//     checks key and bounds on every one.
//
// Model (the verbs model, which tcp emulates):
//   * A Transport owns the device (or the socket machinery). Memory is
//     registered once, off the hot path, and yields a MemoryRegion whose
//     key() a peer needs to touch it. Every remote access is checked
//     against key, bounds and access rights.
//   * A Connection is one reliable, ordered channel to a peer core (a QP).
//     Operations are posted in batches and complete by polling; operations
//     on one connection are executed in posting order.
//   * A WRITE_WITH_IMM additionally raises an Incoming event with its
//     32-bit immediate on the passive side; the RPC layer (net/rpc.h) is
//     built on that alone, identically for both backends.
//   * A dead or hung peer fails every outstanding operation with
//     kUnavailable/kTimeout within Options::op_timeout; it never hangs.
//
// Threading: a Connection is driven by one thread at a time (core i talks
// to core i). Transport and MemoryRegion methods are thread-safe.
// Lifetime: a Transport outlives its connections and memory regions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace pdpm::net {

enum class BackendKind { kTcp, kVerbs };

// Parses "tcp" / "verbs".
Status ParseBackendKind(std::string_view name, BackendKind* out);
std::string_view BackendKindName(BackendKind kind);

// Remote access rights of a registered range. Local access is always allowed.
enum Access : uint32_t {
  kRemoteRead = 1u << 0,
  kRemoteWrite = 1u << 1,
  kRemoteAtomic = 1u << 2,
  kRemoteAll = kRemoteRead | kRemoteWrite | kRemoteAtomic,
  // tcp only: every remote access first asks the transport's
  // `remote_access_allowed` (a server past its lease serves nothing). verbs
  // refuses it: the NIC serves one-sided ops without asking the CPU.
  kAccessGated = 1u << 3,
};

// Makes [addr, addr+len) durable. Registered with PM ranges so that a
// remote write with `persist` set is durable before it completes.
using PersistFn = std::function<void(const void* addr, size_t len)>;

// A registered memory range. Deregisters on destruction; the memory itself
// belongs to the caller and must outlive the region.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  // The key a peer presents to access this range (an rkey on verbs).
  virtual uint32_t key() const = 0;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 protected:
  MemoryRegion(char* data, size_t size) : data_(data), size_(size) {}

 private:
  char* const data_;
  const size_t size_;
};

// A slice of a local registered region: the source or destination of an op.
struct LocalBuffer {
  MemoryRegion* region = nullptr;
  uint64_t offset = 0;
  uint32_t length = 0;
};

enum class Opcode : uint8_t {
  kRead = 1,          // remote -> local
  kWrite = 2,         // local -> remote
  kWriteWithImm = 3,  // local -> remote, then an Incoming event at the peer
  kCompareSwap = 4,   // 8 bytes, 8-aligned; old value -> local (8 bytes)
  kFetchAdd = 5,      // 8 bytes, 8-aligned; old value -> local (8 bytes)
};
std::string_view OpcodeName(Opcode op);

struct Op {
  Opcode opcode = Opcode::kRead;
  uint64_t id = 0;  // caller's tag, returned in the Completion
  LocalBuffer local;
  uint32_t remote_key = 0;
  uint64_t remote_offset = 0;   // offset inside the remote registered range
  uint64_t compare_or_add = 0;  // kCompareSwap: expected; kFetchAdd: addend
  uint64_t swap = 0;            // kCompareSwap: new value
  uint32_t imm = 0;             // kWriteWithImm
  // kWrite/kWriteWithImm: the range is durable at the peer (its PersistFn
  // ran) before this op completes. One round trip.
  bool persist = false;
  // When false the op completes silently unless it fails (selective
  // signaling); a later signaled op on the same connection implies it.
  bool signaled = true;
};

struct Completion {
  uint64_t id = 0;
  Opcode opcode = Opcode::kRead;
  Status status;
};

// A WRITE_WITH_IMM that arrived from the peer: its data is in place (and
// persisted, if it asked for that) before the event is delivered.
struct Incoming {
  uint32_t imm = 0;
  uint32_t length = 0;  // bytes written
};

// Up to kMaxConnectBlob bytes the two sides exchange while connecting
// (rdma_cm private data on verbs): e.g. the RPC slot region's key.
inline constexpr size_t kMaxConnectBlob = 48;

class Connection {
 public:
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues `ops` in order. Fails without queueing any op if the connection
  // is broken (kUnavailable), an op is malformed locally (kInvalidArgument:
  // local buffer outside its region, atomic without an 8-byte local buffer
  // or on a misaligned word), a transfer exceeds max_transfer of either side
  // (kTooLarge) or the send queue cannot take them all (kResourceExhausted). Remote-side failures
  // (wrong key, out of bounds, no access right) arrive as failed Completions.
  virtual Status Post(std::span<const Op> ops) = 0;

  // Non-blocking. Fills `out` with finished ops; returns how many.
  virtual size_t PollCompletions(std::span<Completion> out) = 0;

  // Non-blocking. Fills `out` with WRITE_WITH_IMM events from the peer.
  virtual size_t PollIncoming(std::span<Incoming> out) = 0;

  // Signaled ops posted and not yet returned by PollCompletions.
  virtual size_t outstanding() const = 0;

  // False once the peer died, timed out or sent garbage. All outstanding
  // ops have then completed (or will on the next poll) with an error.
  virtual bool healthy() const = 0;

  // Re-establishes a broken connection to the same peer and core and
  // exchanges the connect blobs again (peer_blob() then returns the new
  // one). Registered keys stay valid. Only the connecting side reconnects:
  // on an accepted connection it fails with kFailedPrecondition (the peer
  // reconnects and the listener gets a new connection).
  virtual Status Reconnect() = 0;

  // For callers that sleep instead of spinning. notify_fd() becomes
  // readable when completions or incoming events may be waiting. To sleep:
  // ArmNotify(), poll once more (closes the race), wait on the fd; when it
  // fires, AckNotify() and poll until empty.
  virtual int notify_fd() const = 0;
  virtual Status ArmNotify() = 0;
  virtual void AckNotify() = 0;

  // What each side sent while connecting.
  virtual std::span<const uint8_t> peer_blob() const = 0;
  virtual std::span<const uint8_t> local_blob() const = 0;
  // Peer's address ("host:port") and the core this connection is bound to.
  virtual std::string peer_address() const = 0;
  virtual uint32_t core() const = 0;

 protected:
  Connection() = default;
};

struct TransportOptions {
  BackendKind backend = BackendKind::kTcp;
  // verbs: device name ("" = first with an active port), port, GID index.
  std::string device;
  uint8_t ib_port = 1;
  int gid_index = -1;  // -1: pick a RoCE v2 IPv4-mapped GID
  // An op not completed within this time fails with kTimeout and the
  // connection is marked broken (bounded failure of a hung peer).
  uint32_t op_timeout_ms = 2000;
  // Connect attempts give up after this long.
  uint32_t connect_timeout_ms = 3000;
  // Most signaled ops outstanding on one connection (send queue depth).
  uint32_t max_outstanding = 256;
  // Largest single transfer; tcp frames over it are refused.
  uint32_t max_transfer = 16u << 20;
  // Cores this endpoint serves (listener side): connections name a core.
  uint32_t cores = 1;
  // tcp: the transport's threads look for timed-out ops, and send answers a
  // polling thread held back, at least this often. Nothing on the latency
  // path waits for it; tests lengthen it to prove that.
  uint32_t progress_tick_ms = 10;
  // tcp: asked on every remote access to a range registered with
  // kAccessGated (from transport threads; must be cheap); false refuses it
  // with kUnavailable. Empty: always allowed.
  std::function<bool()> remote_access_allowed;
};

// The listening side's hooks, called on a transport thread.
struct AcceptHandler {
  // For each connection request: inspect the peer's blob and fill the
  // reply blob (<= kMaxConnectBlob bytes). A non-ok Status refuses it.
  std::function<Status(uint32_t core, std::span<const uint8_t> peer_blob, std::string* reply_blob)>
      on_request;
  // Takes ownership of the established connection; its local_blob() is the
  // reply blob on_request produced for it.
  std::function<void(std::unique_ptr<Connection> conn)> on_connected;
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Creates a transport. kNotSupported, with a message saying so, when the
  // backend cannot run here (e.g. "no RDMA device").
  static Status Create(const TransportOptions& options, std::unique_ptr<Transport>* out);

  virtual BackendKind kind() const = 0;

  // Registers [data, data+size). `persist` (may be empty) makes remote
  // writes with `persist` set durable. Slow path: never on the datapath.
  virtual Status RegisterMemory(void* data, size_t size, uint32_t access, PersistFn persist,
                                std::unique_ptr<MemoryRegion>* out) = 0;

  // Starts accepting at "host:port" (port 0: pick one; see listen_address).
  virtual Status Listen(const std::string& address, AcceptHandler handler) = 0;
  virtual std::string listen_address() const = 0;

  // Connects to the listener at `address`, core `core` (taken modulo the
  // peer's core count), sending `local_blob` (<= kMaxConnectBlob bytes).
  virtual Status Connect(const std::string& address, uint32_t core, std::string_view local_blob,
                         std::unique_ptr<Connection>* out) = 0;

 protected:
  Transport() = default;
};

// Asked now and then (every kGiveUpCheckMs) while an op is awaited: true
// abandons the wait with kUnavailable. The op stays posted and may still
// read or write its local buffer: the caller must drop the connection
// before reusing them.
using GiveUpFn = std::function<bool()>;
inline constexpr int kGiveUpCheckMs = 50;

// Posts one op (signaled) and polls until it completes (tests, slow paths),
// sleeping on the notify fd. Returns the op's status; kTimeout if the
// transport's op timeout passes first. Completions of other ops that
// arrive meanwhile are consumed: use it when no other op is in flight.
Status ExecuteSync(Connection& conn, const Op& op, const GiveUpFn& give_up = {});

// The waiting half of ExecuteSync: polls `conn` until the completion of the
// signaled op `id` (already posted) arrives and returns its status. Lets a
// caller post to several connections first and then wait for each, so the
// ops are in flight at once. Same rules for other ops' completions.
Status AwaitCompletion(Connection& conn, uint64_t id, const GiveUpFn& give_up = {});

}  // namespace pdpm::net
