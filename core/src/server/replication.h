// Replication between pdpm-servers (docs/replication.md): the redo batches
// a primary ships to its backups and the links it ships them over.
//
// A primary runs every mutation of a segment (allocator, object store,
// heap write through the server) with its persists captured, in order, as
// (offset, bytes) ranges: a RedoBatch. The batch goes to every backup
// before the reply; a backup writes and persists the ranges in order. Any
// prefix of a batch is a state the primary itself could have crashed in
// (the PM layer's persist order), so a backup that a crash leaves
// mid-batch holds a state recovery handles.
//
// kReplicaApply body (after the 32-byte request header), format version 3:
//   u64 (global segment | version << 32) | u64 coordinator | u64 tx |
//   u64 tag kind | u64 block | u64 range count | (u64 offset | u64 length | bytes)*
// (coordinator, tx) names the transaction the batch belongs to (0, 0:
// none), the tag kind what it does for it (TxTagKind), block the block of
// an allocation; only the last message of a batch carries them. Version 2
// had no tag kind and block words (every tag a commit); version 1
// (version bits 0) no coordinator and tx words either.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "net/rpc.h"
#include "net/transport.h"
#include "server/protocol.h"

namespace pdpm::server {

// A backup copy: (server id, local segment index).
using ReplicaId = std::pair<uint32_t, uint32_t>;

inline constexpr uint32_t kReplicaApplyVersion = 3;

// What a tagged batch does for its transaction at a backup (docs/tx.md).
enum class TxTagKind : uint64_t {
  // Its commit's last part for the segment: the BACKUP record of the
  // segment (and the BACKUP-ALLOC records there) are marked applied.
  kCommit = 0,
  // A part of its commit followed by another one of the same segment: the
  // BACKUP record is marked committed, not applied.
  kCommitPart = 1,
  // The allocation of `block` for it: a BACKUP-ALLOC record is logged.
  kAllocated = 2,
  // The free of `block`, allocated for it, as it aborted: its BACKUP-ALLOC
  // record is marked aborted.
  kAllocFreed = 3,
};

// The transaction a batch belongs to.
struct TxTag {
  uint64_t coordinator = 0;
  uint64_t tx = 0;
  TxTagKind kind = TxTagKind::kCommit;
  uint64_t block = 0;  // kAllocated, kAllocFreed: the block's offset
  explicit operator bool() const { return coordinator != 0; }
};

class RedoBatch {
 public:
  // Bytes [offset, offset + length) of the segment, at bytes_[at, at + length).
  struct Range {
    uint64_t offset = 0;
    size_t at = 0;
    size_t length = 0;
  };
  // Ranges stay apart even when adjacent: the backup persists each before
  // writing the next, as the primary did (a slot's hash before its item).
  void Add(uint64_t offset, const void* p, size_t n);
  bool empty() const { return ranges_.empty(); }
  const std::vector<Range>& ranges() const { return ranges_; }
  std::string_view bytes(const Range& r) const { return {bytes_.data() + r.at, r.length}; }

  // kReplicaApply messages for `global`, each at most `max_bytes` of
  // ranges (a range longer than that is split); the last carries `tag`.
  // An empty batch is one message when tagged, none otherwise.
  std::vector<std::string> Encode(const RequestHeader& h, uint32_t global, size_t max_bytes,
                                  TxTag tag = {}) const;

 private:
  std::vector<Range> ranges_;
  std::string bytes_;  // every range's bytes, one allocation for the batch
};

// A decoded kReplicaApply body: ranges pointing into the message.
struct ApplyRange {
  uint64_t offset = 0;
  std::string_view bytes;
};
Status DecodeApply(Decoder* d, uint32_t* global, std::vector<ApplyRange>* ranges,
                   TxTag* tag = nullptr);

// Where a peer server takes replication traffic: its data address and its
// replication core (the one past the cores it serves clients on).
struct PeerAddress {
  std::string address;
  uint32_t core = 0;
};

// One call of PeerLinks::CallAll: its inputs, then its outcome.
struct PeerCall {
  PeerCall(PeerAddress p, uint16_t m, std::string_view r)
      : peer(std::move(p)), method(m), request(r) {}
  PeerAddress peer;
  uint16_t method = 0;
  std::string_view request;
  Status status;  // as Call's
  std::string reply;
};

// One RPC connection per peer server, made on first use and again after it
// broke. Calls to one peer are serialised.
class PeerLinks {
 public:
  void Init(net::Transport* transport, uint32_t timeout_ms) {
    transport_ = transport;
    timeout_ms_ = timeout_ms;
  }
  Status Call(const PeerAddress& peer, uint16_t method, std::string_view request,
              std::string* reply);
  // Makes every call, those to different peers in flight at once: posts
  // each request, then waits for each reply, so the wait is the slowest
  // round trip, not their sum. Calls to one peer go one after another.
  // Each call's outcome is as Call's.
  void CallAll(std::span<PeerCall> calls);

 private:
  struct Link {
    std::mutex mu;
    std::unique_ptr<net::RpcClient> rpc;  // guarded by mu
  };
  Link* LinkTo(const std::string& address);
  // With link->mu held: a healthy connection, made again if it broke.
  Status Connected(Link* link, const PeerAddress& peer);
  // The outcome `s` of a call on `link` to `address`, as Call returns it:
  // a lost or late peer is kUnavailable and its connection dropped.
  static Status Judged(Link* link, const std::string& address, Status s);
  net::Transport* transport_ = nullptr;
  uint32_t timeout_ms_ = 2000;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Link>> links_;  // guarded by mu_
};

}  // namespace pdpm::server
