// KvStore: the operations pDKVS offers to its users (the Redis gateway, the
// C++ client and its C ABI). LocalKvStore (local_kv_store.h) implements it
// on the PM of one machine; the distributed client implements it on vnodes
// served by pDSM servers.
//
// Contract (every implementation):
// - An operation that returns OK is durable: no crash loses it.
// - Keys are byte strings of 0..kMaxKeySize bytes, values of
//   0..kMaxValueSize bytes (item.h); larger ones fail with kTooLarge, and
//   nothing changes.
// - Expiry times are absolute Unix times in milliseconds; 0 means none. A
//   key whose expiry time has passed is absent for every operation.
// - Single-key operations are atomic (linearizable). MultiPut is atomic for
//   concurrent readers of the same store.
// - Errors: kNotFound (absent key, where the operation needs one),
//   kInvalidArgument (a value that is not an integer for IncrBy),
//   kOutOfRange (IncrBy overflow, SetRange past the value limit), kTooLarge,
//   kResourceExhausted (store full), kCorruption, kUnavailable.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace pdpm::pdkvs {

struct SetOptions {
  enum class Condition { kAlways, kIfAbsent, kIfPresent };
  enum class Expiry { kClear, kKeep, kSet };
  Condition condition = Condition::kAlways;
  // kClear: the key has no expiry afterwards; kKeep: a replaced key keeps
  // its expiry (a new key has none); kSet: expire_at_ms.
  Expiry expiry = Expiry::kClear;
  uint64_t expire_at_ms = 0;
  // Fill SetResult::old_value (costs a copy of the old value).
  bool want_old = false;
};

struct SetResult {
  bool applied = false;                  // false: the condition did not hold
  std::optional<std::string> old_value;  // with want_old: the value before, if any
};

// One page of a scan: keys in an order the cursor encodes; start at 0 and
// follow next_cursor until it is 0 again. Every key present for the whole
// scan is returned exactly once.
struct KvScanPage {
  std::vector<std::string> keys;
  uint64_t next_cursor = 0;
};

// The integers IncrBy stores and reads: optional '-', then decimal digits
// without leading zeros ("0" itself excepted, "-0" not), within int64.
inline bool ParseDecimalInt64(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = 0;
  const bool negative = s[0] == '-';
  if (negative) i = 1;
  if (i == s.size() || (s[i] == '0' && s.size() > i + 1) || (negative && s[i] == '0')) {
    return false;
  }
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    const uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (negative) {
    if (v > uint64_t{INT64_MAX} + 1) return false;
    *out = static_cast<int64_t>(0 - v);
  } else {
    if (v > uint64_t{INT64_MAX}) return false;
    *out = static_cast<int64_t>(v);
  }
  return true;
}

// What KvStore::Count reports. Both may include expired keys that the
// active expiry (KvStore::ReclaimExpired) has not freed yet.
struct KvCounts {
  uint64_t keys = 0;
  uint64_t expires = 0;  // keys with an expiry time
};

// One operation of KvStore::RunBatch: a Get, a Set without options, or a
// HashGet or HashSet (not if absent) of one field.
struct KvOp {
  enum class Kind { kGet, kSet, kHashGet, kHashSet };
  Kind kind = Kind::kGet;
  std::string_view key;
  std::string_view field;  // kHashGet, kHashSet
  std::string_view value;  // kSet, kHashSet
  // The outcome, as the single operation's; kHashGet: kNotFound when the
  // field (or the hash) is absent.
  Status status;
  std::string result;  // kGet, kHashGet: the value
  uint64_t added = 0;  // kHashSet: 1 when the field was new
};

// A key's version as a transaction read it: equal versions of a key mean
// no write of it in between (opaque otherwise; on a cluster, the server
// that answered and its version word of the key).
struct KvVersion {
  uint64_t server = 0;
  uint64_t word = 0;
  bool operator==(const KvVersion&) const = default;
};

// A key as KvStore::TxRead found it.
struct KvTxRead {
  // nullopt: absent; a hash (hash true) reads as an empty value: the
  // transaction reads its fields with the hash calls (a write of the hash
  // changes its version, so the commit's check covers them).
  std::optional<std::string> value;
  uint64_t expire_at_ms = 0;  // 0: none
  KvVersion version;
  bool hash = false;
};

// A key a transaction read, and the version it read.
struct KvTxCheck {
  std::string_view key;
  KvVersion version;
};

// What a transaction leaves at a key: a value with its expiry, nothing, or
// a hash.
struct KvTxWrite {
  std::string_view key;
  std::optional<std::string_view> value;  // nullopt: delete the key (unless hash)
  uint64_t expire_at_ms = 0;              // 0: none
  // A hash: the key holds a hash afterwards, with expiry expire_at_ms
  // (value unused). `fresh`: what the key held goes first (the hash was
  // made, or made again, by the transaction); else the hash the
  // transaction read is changed. `fields`: the fields changed, each once,
  // set to a value or removed (nullopt). The hash is never left empty.
  bool hash = false;
  bool fresh = false;
  std::vector<std::pair<std::string_view, std::optional<std::string_view>>> fields = {};
};

// A condition on a key's expiry for KvStore::SetExpiry (EXPIRE's NX XX GT
// LT), checked in the same atomic step as the change. No expiry counts as
// infinite, as in Redis.
enum class ExpiryCondition : uint8_t {
  kAlways = 0,
  kIfNone = 1,     // NX: the key has no expiry
  kIfSome = 2,     // XX: the key has one
  kIfLater = 3,    // GT: the new expiry is later than the key's
  kIfEarlier = 4,  // LT: the new expiry is earlier than the key's
  // XX LT: the key has an expiry, and the new one is earlier (XX GT is
  // GT: no expiry is never earlier).
  kIfSomeEarlier = 5,
  kLast = kIfSomeEarlier,
};

// Whether `condition` holds for a key expiring at `current` (0: never)
// given a new expiry `wanted`.
inline bool ExpiryConditionHolds(ExpiryCondition condition, uint64_t current, uint64_t wanted) {
  switch (condition) {
    case ExpiryCondition::kAlways: return true;
    case ExpiryCondition::kIfNone: return current == 0;
    case ExpiryCondition::kIfSome: return current != 0;
    case ExpiryCondition::kIfLater: return current != 0 && wanted > current;
    case ExpiryCondition::kIfEarlier: return current == 0 || wanted < current;
    case ExpiryCondition::kIfSomeEarlier: return current != 0 && wanted < current;
  }
  return false;
}

// What a key holds (TYPE).
enum class KvType { kNone, kString, kHash };

// One page of a hash's fields (KvStore::HashScan): start at cursor 0 and
// follow next_cursor until it is 0 again; every field present for the
// whole scan is returned exactly once.
struct KvHashPage {
  std::vector<std::pair<std::string, std::string>> fields;
  uint64_t next_cursor = 0;
};

class KvStore {
 public:
  virtual ~KvStore() = default;

  // kNotFound when absent.
  virtual Status Get(std::string_view key, std::string* value) = 0;
  // Sets the value subject to `options`; *result says whether it did and
  // (want_old) what the value was before, in the same atomic step.
  virtual Status Set(std::string_view key, std::string_view value, const SetOptions& options,
                     SetResult* result) = 0;
  // Removes the key and returns its value; kNotFound when absent.
  virtual Status GetDelete(std::string_view key, std::string* value) = 0;
  // kNotFound when absent.
  virtual Status Delete(std::string_view key) = 0;
  virtual Status Exists(std::string_view key, bool* exists) = 0;
  // Adds `delta` to the decimal 64-bit integer stored at key (0 when
  // absent), keeping its expiry. kInvalidArgument: the value is not such an
  // integer; kOutOfRange: the result would overflow.
  virtual Status IncrBy(std::string_view key, int64_t delta, int64_t* result) = 0;
  // Appends to the value (creating the key); *length is the new length.
  virtual Status Append(std::string_view key, std::string_view suffix, uint64_t* length) = 0;
  // Bytes [start, end] of the value with negative indexes counted from its
  // end, clamped as Redis GETRANGE does; "" when absent or empty range.
  virtual Status GetRange(std::string_view key, int64_t start, int64_t end, std::string* value) = 0;
  // Overwrites the value from `offset`, zero-padding a shorter (or absent)
  // value; *length is the new length. An empty `data` changes nothing.
  virtual Status SetRange(std::string_view key, uint64_t offset, std::string_view data,
                          uint64_t* length) = 0;
  // One answer per key, nullopt for absent ones.
  virtual Status MultiGet(const std::vector<std::string_view>& keys,
                          std::vector<std::optional<std::string>>* values) = 0;
  // Sets every pair atomically (expiries cleared). `if_none_exist`: sets
  // nothing, *applied false, when any key exists. A key given twice takes
  // its last value.
  virtual Status MultiPut(const std::vector<std::pair<std::string_view, std::string_view>>& pairs,
                          bool if_none_exist, bool* applied) = 0;
  // About `count` keys of the page at `cursor`.
  virtual Status Scan(uint64_t cursor, size_t count, KvScanPage* page) = 0;
  // The expiry of a key (0: none); kNotFound when absent.
  virtual Status GetExpiry(std::string_view key, uint64_t* expire_at_ms) = 0;
  // Sets (expire_at_ms > 0) or removes (0) the expiry of a present key
  // (string or hash) if `condition` holds, in one atomic step; *changed is
  // false when the key is absent, the condition does not hold or (removal)
  // the key had none. An expiry in the past deletes the key.
  virtual Status SetExpiry(std::string_view key, uint64_t expire_at_ms, ExpiryCondition condition,
                           bool* changed) = 0;
  // TYPE: what the key holds (kNone when absent).
  virtual Status Type(std::string_view key, KvType* type) = 0;

  // Hashes (docs/pdkvs.md "Hashes"). Each call is atomic for its hash
  // (linearizable); a hash operation on a key holding a string, and a
  // string operation on a hash, fails with kFailedPrecondition and
  // kWrongTypeMessage (item.h), changing nothing. DEL, EXISTS, the expiry
  // calls, Set, Flush and the active expiry treat a hash as any key. A hash
  // is never empty: removing its last field removes it.
  //
  // HSET (if_absent false) and HSETNX (if_absent true, one field):
  // *added counts the fields that were new.
  virtual Status HashSet(std::string_view key,
                         std::span<const std::pair<std::string_view, std::string_view>> fields,
                         bool if_absent, uint64_t* added) = 0;
  // HGET, HMGET, HEXISTS, HSTRLEN: one answer per field, nullopt when the
  // field (or the hash) is absent.
  virtual Status HashGet(std::string_view key, std::span<const std::string_view> fields,
                         std::vector<std::optional<std::string>>* values) = 0;
  // HDEL: *removed counts the fields that were present.
  virtual Status HashDelete(std::string_view key, std::span<const std::string_view> fields,
                            uint64_t* removed) = 0;
  // HLEN: 0 for an absent hash.
  virtual Status HashLength(std::string_view key, uint64_t* fields) = 0;
  // HINCRBY: IncrBy's rules on the field (absent: 0).
  virtual Status HashIncrBy(std::string_view key, std::string_view field, int64_t delta,
                            int64_t* result) = 0;
  // HINCRBYFLOAT: `incr` (Redis's float syntax, ParseLongDouble) added to
  // the field as a long double (absent: 0); *result as stored.
  // kInvalidArgument: the field or `incr` is not a float; kOutOfRange: the
  // sum is NaN or infinite.
  virtual Status HashIncrByFloat(std::string_view key, std::string_view field,
                                 std::string_view incr, std::string* result) = 0;
  // HSCAN, HGETALL, HKEYS, HVALS, HRANDFIELD: about `count` fields of the
  // page at `cursor`. An absent hash is one empty page.
  virtual Status HashScan(std::string_view key, uint64_t cursor, size_t count,
                          KvHashPage* page) = 0;

  // Keys present, and those of them with an expiry time.
  virtual Status Count(KvCounts* counts) = 0;
  // Active expiry, one step: frees the expired keys of a part of vnode
  // `vnode` (0-based) from `position` (0: its start), adding their number
  // to *reclaimed; *next_position is where the vnode's next step starts, 0
  // once the vnode is done. kOutOfRange: there is no vnode `vnode`.
  virtual Status ReclaimExpired(uint32_t vnode, uint64_t position, uint64_t* next_position,
                                uint64_t* reclaimed) = 0;
  // Removes every key.
  virtual Status Flush() = 0;
  // The copies beyond the first that every acknowledged write is on
  // already (WAIT's answer): 0 for a store on one machine.
  virtual uint32_t BackupCount() = 0;

  // Transactions (the gateway's MULTI/EXEC, optimistic): TxRead reads
  // keys with their expiry and version; TxCommit then applies writes
  // atomically and isolated from every other operation, provided every
  // checked key still has the version read — otherwise kAborted and
  // nothing applied (read again and retry). TxRead fails with kAborted
  // when a key is being written by another transaction. No writes: the
  // commit only checks.
  virtual Status TxRead(const std::vector<std::string_view>& keys, std::vector<KvTxRead>* out) = 0;
  virtual Status TxCommit(const std::vector<KvTxCheck>& checks,
                          const std::vector<KvTxWrite>& writes) = 0;

  // Runs every op, each with the contract of its single-key operation, and
  // returns once all are done. Ops naming one key take effect in their
  // order; ops of different keys may run in any order, or at once. This
  // one runs them one by one; a store may group them (fewer round trips).
  virtual void RunBatch(std::span<KvOp> ops) {
    for (KvOp& op : ops) RunOne(&op);
  }

 protected:
  // Runs one op of a batch with its single-key operation.
  void RunOne(KvOp* op) {
    SetResult ignored;
    std::vector<std::optional<std::string>> values;
    const std::pair<std::string_view, std::string_view> field{op->field, op->value};
    switch (op->kind) {
      case KvOp::Kind::kGet: op->status = Get(op->key, &op->result); return;
      case KvOp::Kind::kSet: op->status = Set(op->key, op->value, SetOptions{}, &ignored); return;
      case KvOp::Kind::kHashGet:
        op->status = HashGet(op->key, {&op->field, 1}, &values);
        if (op->status.ok() && !values[0]) op->status = Status::NotFound("no such field");
        if (op->status.ok()) op->result = std::move(*values[0]);
        return;
      case KvOp::Kind::kHashSet:
        op->status = HashSet(op->key, {&field, 1}, /*if_absent=*/false, &op->added);
        return;
    }
  }
};

}  // namespace pdpm::pdkvs
