// The data-plane RPC messages between libpdpm and pdpm-server (format
// version 1, docs/server.md). They ride on net/rpc.h: a method number and
// one request payload, one reply payload or a Status. Integers are
// little-endian.
//
// Every request starts with a 32-byte header:
//   u16 version (1) | u16 reserved (0) | u32 reserved (0)
//   u64 epoch        the mapping epoch the client routed the request with
//   u64 credential   ClusterCredential(secret): requests without the
//                    cluster's are refused with kPermissionDenied
//   u64 reserved (0) (part 2: transaction id)
// followed by the method's body:
//   kPAllocate  u64 size                       -> 16-byte global address
//   kPFree      16-byte global address         -> empty
//   kPutObj     16-byte id | data              -> empty
//   kWriteObj   16-byte id | u64 offset | data -> empty
//   kReadObj    16-byte id | u64 offset | u64 length (kWholeObject: all)
//                                               -> data
//   kObjSize    16-byte id                     -> u64 size
//   kDelObj     16-byte id                     -> empty
//   kTruncateObj 16-byte id | u64 size         -> empty
//   kListObj    u64 table | u64 tag | 16-byte start id | u64 max
//                                               -> u64 count | count ids
//               (the table's objects whose id.hi has `tag` in its upper
//               32 bits, from `start` on, sorted; max <= kMaxListObj)
//   kTx*        transactions: docs/tx.md
//   kKv*        pDKVS vnode operations: docs/pdkvs.md ("Distributed store")
// A decoder refuses a short, long or unknown-version message with
// kInvalidArgument.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "dsm/address.h"
#include "dsm/hash_index.h"
#include "net/rpc.h"

namespace pdpm::server {

inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kRequestHeaderSize = 32;
inline constexpr uint64_t kWholeObject = ~0ull;
// Most ids one kListObj reply carries (16 bytes each: 32 KiB).
inline constexpr uint64_t kMaxListObj = 2048;

// Most bytes one RPC carries: a whole 64 MiB object plus its header. Large
// payloads travel by one-sided transfer through the RPC layer's
// pre-registered buffers (net/rpc.h), not through the message slots.
inline constexpr uint32_t kMaxRpcPayload = (64u << 20) + 4096;
// The data plane's RPC slot (message header and inline payload), the same
// on every peer (the RPC connect refuses another size).
inline constexpr uint32_t kDataPlaneSlotSize = 64u << 10;

// The RPC options client and server must agree on; `threads` serving
// threads (server side).
net::RpcOptions DataPlaneRpcOptions(uint32_t threads, uint32_t timeout_ms);

enum Method : uint16_t {
  kPAllocate = 0x101,
  kPFree = 0x102,
  kPutObj = 0x111,
  kWriteObj = 0x112,
  kReadObj = 0x113,
  kObjSize = 0x114,
  kDelObj = 0x115,
  kTruncateObj = 0x116,  // drops an object's bytes past a size (pDFS truncate)
  kListObj = 0x117,      // the ids of a table's objects of one tag (pDFS fsck)
  // Transactions (server/tx_participant.h, docs/tx.md).
  kTxHello = 0x201,
  kTxLock = 0x202,
  kTxCommit = 0x203,
  kTxAbort = 0x204,
  kTxTruncate = 0x205,
  kTxResolve = 0x206,
  kTxAlloc = 0x207,
  kTxTable = 0x208,    // the segment of an object's table, created if absent
  kTxPending = 0x209,  // whether a transaction's records here still wait on its outcome
  // primary -> a joining backup: the decisions it keeps as a holder segment's primary
  kTxKeepDecisions = 0x20a,
  // Replication (server/replication.h, docs/replication.md).
  kReplicaApply = 0x301,   // primary -> backup: u64 segment | redo ranges -> empty
  kHeapWrite = 0x302,      // client -> primary: 16-byte address | data -> empty
  kReplicaAttach = 0x303,  // primary -> backup: u64 segment | u64 local -> u64 key
  // client -> primary: 16-byte address | u64 length -> empty (client.h Persist)
  kHeapPersist = 0x304,
  // primary -> backup: several kReplicaApply messages in one
  // (server/data_server_kv_ship.cc) -> empty
  kReplicaApplyMany = 0x310,
  // pDKVS: operations on the vnode (the CCEH index) of a table
  // (server/data_server_kv.cc, docs/pdkvs.md "Distributed store").
  kKvGet = 0x401,
  kKvSet = 0x402,
  kKvGetDelete = 0x403,
  kKvDelete = 0x404,
  kKvExists = 0x405,
  kKvIncrBy = 0x406,
  kKvAppend = 0x407,
  kKvGetRange = 0x408,
  kKvSetRange = 0x409,
  kKvMultiGet = 0x40a,
  kKvMultiPut = 0x40b,
  kKvScan = 0x40c,
  kKvGetExpiry = 0x40d,
  kKvSetExpiry = 0x40e,
  kKvCount = 0x40f,
  kKvFlush = 0x410,
  kKvVersions = 0x411,           // the version words of keys (consistent multi-vnode reads)
  kKvMultiGetVersioned = 0x412,  // a multi-get with the keys' version words
  kKvBatch = 0x413,              // single-key requests of one vnode in one step
  kKvVnodeBatches = 0x414,       // kKvBatch requests of several vnodes of one server
  kKvReclaimExpired = 0x415,     // active expiry: one step of a vnode's sweep
  kKvHash = 0x416,               // a key's type, or an operation on a hash's fields
  kKvSetExpiryIf = 0x417,        // an expiry change under a condition (EXPIRE NX XX GT LT)
  kKvLast = kKvSetExpiryIf,
};

// A 64-bit identifier of the cluster secret carried by every request. It
// names the secret without revealing it; it is not a MAC (the data plane,
// like the control plane, assumes a trusted network).
uint64_t ClusterCredential(std::string_view secret);

struct RequestHeader {
  uint64_t epoch = 0;
  uint64_t credential = 0;
};

// Appends fields to a message.
class Encoder {
 public:
  explicit Encoder(std::string* out) : out_(out) {}
  void Header(const RequestHeader& h);
  // Inline: the hot paths encode a few words per key.
  void U64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; i++) b[i] = static_cast<char>(v >> (8 * i));
    out_->append(b, 8);
  }
  void Id(const dsm::ObjectId& id);
  void Address(const dsm::GlobalAddress& a);
  void Bytes(std::string_view data) { out_->append(data); }
  // u64 length | bytes.
  void Str(std::string_view data) {
    U64(data.size());
    Bytes(data);
  }

 private:
  std::string* out_;
};

// Reads fields from a message; every getter fails with kInvalidArgument
// once the message is too short.
class Decoder {
 public:
  explicit Decoder(std::span<const uint8_t> in) : in_(in) {}
  Status Header(RequestHeader* h);
  Status U64(uint64_t* v);
  Status Id(dsm::ObjectId* id);
  Status Address(dsm::GlobalAddress* a);
  // u64 length | bytes; the view borrows the message.
  Status Str(std::string_view* s);
  // The rest of the message.
  std::string_view Rest();
  // kInvalidArgument unless the whole message was consumed.
  Status Done() const;

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace pdpm::server
