// The bodies of the pDKVS data-plane requests (protocol.h kKv*), format
// version 1 of docs/pdkvs.md ("Distributed store"). After the request
// header every body starts with u64 table (the vnode), then:
//   kKvGet, kKvGetDelete, kKvDelete, kKvExists, kKvGetExpiry   key
//   kKvSet        key | value | u64 flags | u64 expire_at_ms
//                 flags: bits 0-1 condition (0 always, 1 if absent,
//                 2 if present), bits 2-3 expiry (0 clear, 1 keep, 2 set),
//                 bit 4 want_old; other bits 0
//   kKvIncrBy     key | u64 delta (two's complement)
//   kKvAppend     key | value (the suffix)
//   kKvGetRange   key | u64 start | u64 end (two's complement)
//   kKvSetRange   key | u64 offset | value (the data)
//   kKvSetExpiry  key | u64 expire_at_ms
//   kKvSetExpiryIf  key | u64 expire_at_ms | u64 condition
//                 (pdkvs::ExpiryCondition, 1..5)
//   kKvMultiGet   u64 n | n keys (reply: u64 answered | answered (u64 0
//                 absent | u64 1 | value | u64 2, a hash))
//   kKvVersions   u64 n | n keys (reply: u64 server id | u64 n | n
//                 version words)
//   kKvMultiGetVersioned  as kKvMultiGet (reply: kKvMultiGet's, then u64
//                 server id and a version word per answered key)
//   kKvMultiPut   u64 if_none_exist (0/1) | u64 n | n (key | value)
//   kKvScan       u64 cursor | u64 count
//   kKvCount, kKvFlush  nothing (kKvCount's reply: u64 keys | u64 keys
//                 with an expiry time; servers before the latter sent keys
//                 only)
//   kKvReclaimExpired  u64 position (reply: u64 next position, 0 when the
//                 vnode is done | u64 keys freed): frees the expired keys
//                 of the index segment covering the hash position
//   kKvHash       key | u64 op (KvHashOp) | u64 arg | u64 count | u64 n |
//                 n strings: fields (kGet, kDelete), field and value pairs
//                 (kSet, kSetIfAbsent), the field (kIncrBy: arg the delta;
//                 kIncrByFloat: then the increment's text), none (kType,
//                 kLength; kScan: arg the cursor, count the page's).
//                 Replies: kType u64 0 none, 1 string, 2 hash; kSet,
//                 kSetIfAbsent u64 fields added; kGet u64 n | n (u64 0 |
//                 u64 1 | bytes); kDelete u64 removed; kLength u64;
//                 kIncrBy u64 result; kIncrByFloat the result's text; kScan
//                 u64 next cursor | u64 done | u64 n | n (field | value).
//                 An absent hash answers kNotFound (but kType); a string
//                 kFailedPrecondition (WRONGTYPE)
//   kKvBatch      u64 n | n (u64 method | that request's body without
//                 its table): requests (IsKvBatchable) of keys of the
//                 vnode, run in order in one step (reply: u64 answered |
//                 answered (u64 status code | bytes: the request's reply,
//                 or the error message)); the server answers fewer than n
//                 only when a read's value would overflow the reply, and
//                 the client sends the rest again
//   kKvVnodeBatches  no table: u64 n | n bytes (each a kKvBatch body,
//                 its table first), vnodes of this server (reply: u64
//                 answered | answered (u64 status code | bytes: that
//                 kKvBatch's reply, or the error message)); each runs as a
//                 kKvBatch of its own, its reads within what is left of
//                 half the reply (it may answer none of its requests); the
//                 whole request at most half a reply
// where key and value are u64 length | bytes. Replies: docs/pdkvs.md.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/protocol.h"

namespace pdpm::server {

// The largest value of the distributed store: a request carrying a key and
// its value fits one RPC (kMaxRpcPayload), as does the reply carrying it.
inline constexpr uint64_t kKvMaxValueSize = (64ull << 20) - (64ull << 10);
// Keys a scan page returns at most (a reply stays within kMaxRpcPayload).
inline constexpr uint64_t kKvMaxScanCount = 512;

// kAborted (with this message) refuses a request naming a key that a
// multi-put transaction holds locked: nothing was done; the client sends it
// again once the transaction is resolved.
inline constexpr std::string_view kKvKeyLockedMessage = "a key is locked by a multi-put";

inline constexpr uint64_t kKvSetConditionMask = 0x3;
inline constexpr uint64_t kKvSetExpiryShift = 2;
inline constexpr uint64_t kKvSetWantOld = 1u << 4;

// The operations of kKvHash.
enum class KvHashOp : uint64_t {
  kType = 0,
  kSet = 1,
  kSetIfAbsent = 2,
  kGet = 3,
  kDelete = 4,
  kLength = 5,
  kIncrBy = 6,
  kIncrByFloat = 7,
  kScan = 8,
  kLast = kScan,
};
// Whether a kKvHash operation may change the hash.
bool KvHashOpWrites(KvHashOp op);
// A multi-get's answer for a key holding a hash (no value follows).
inline constexpr uint64_t kKvMultiGetHash = 2;

// A decoded pDKVS request; views borrow the message.
struct KvBatchEntry;

struct KvRequest {
  uint32_t table = 0;
  std::string_view key;
  std::string_view value;  // kKvSet value, kKvAppend suffix, kKvSetRange data
  // kKvSet flags / kKvIncrBy delta / kKvGetRange start / kKvSetRange offset
  // / kKvSetExpiry expiry / kKvMultiPut if_none_exist / kKvScan cursor.
  uint64_t arg0 = 0;
  // kKvSet expiry / kKvGetRange end / kKvScan count / kKvHash arg /
  // kKvSetExpiryIf condition.
  uint64_t arg1 = 0;
  KvHashOp hash_op = KvHashOp::kType;    // kKvHash
  uint64_t hash_count = 0;               // kKvHash kScan
  std::vector<std::string_view> fields;  // kKvHash
  std::vector<std::string_view> keys;    // kKvMultiGet(Versioned), kKvVersions
  std::vector<std::pair<std::string_view, std::string_view>> pairs;  // kKvMultiPut
  std::vector<KvBatchEntry> batch;                                   // kKvBatch
};

// One request of a kKvBatch: a single-key method; its table is the batch's.
struct KvBatchEntry {
  uint16_t method = 0;
  KvRequest r;
};

// The most requests one kKvBatch carries.
inline constexpr uint64_t kKvMaxBatch = 4096;
// The most kKvBatch bodies one kKvVnodeBatches carries.
inline constexpr uint64_t kKvMaxVnodeBatches = 4096;

// Whether `method` is a pDKVS request.
bool IsKvMethod(uint16_t method);
// Whether the request names one key (KvRequest::key).
bool IsKvSingleKey(uint16_t method);
// Whether a kKvBatch may carry the request: a single-key one whose reply
// carries a value only if it is a read (not kKvGetDelete, nor a kKvSet
// with want_old; a kKvHash write answers a count or a number's text), so
// a read can always be left for the client to resend. kKvHash requests
// were added to batches with the gateway's hash batching: a server
// before answers invalid_argument for a batch carrying one.
bool IsKvBatchable(uint16_t method);

// Whether running the request twice answers and leaves what running it
// once does (reads, a plain set, set-range, a plain multi-put, flush): only
// such a request is sent again when its first sending may have reached
// the server.
bool IsKvIdempotent(uint16_t method, const KvRequest& r);

// Appends the body of `method` (after the request header).
void EncodeKvRequest(uint16_t method, const KvRequest& r, Encoder* e);
// Decodes the body of `method` from `d` (positioned after the header) to
// its end; kInvalidArgument for a short, long or malformed body.
Status DecodeKvRequest(uint16_t method, Decoder* d, KvRequest* r);

}  // namespace pdpm::server
