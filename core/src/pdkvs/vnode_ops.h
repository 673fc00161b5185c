// The KvStore operations on one vnode (a CcehIndex), shared by the local
// store (gateway/local_kv_store.h) and the pDSM servers that hold the
// vnodes of the distributed store (server/data_server_kv.cc). Each is one
// atomic step of the index (CcehIndex::Put or Update); semantics and
// errors are those of the KvStore method of the same name (kv_store.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "pdkvs/cceh.h"
#include "pdkvs/gateway/kv_store.h"

namespace pdpm::pdkvs {

// Each operation works on a CcehIndex or on a transaction's TxOverlay
// (tx_overlay.h), which offers the same calls. A string operation meeting a
// hash's header item (kItemFlagHash) answers kFailedPrecondition with
// kWrongTypeMessage (Redis's WRONGTYPE); a plain put or delete replaces or
// removes it as any key (VnodeHashes frees its fields, hash.h).

// kFailedPrecondition (kWrongTypeMessage) unless `meta` is a string's.
Status WrongTypeUnlessString(const ItemMeta& meta);
// Whether `s` is a WRONGTYPE answer.
inline bool IsWrongType(const Status& s) {
  return s.code() == StatusCode::kFailedPrecondition && s.message().ends_with(kWrongTypeMessage);
}
// MGET's read of one key: a hash reads as absent (kNotFound), as Redis
// answers nil for it.
template <class Index>
Status VnodeGetString(Index* index, std::string_view key, std::string* value) {
  Status s = VnodeGet(index, key, value);
  return IsWrongType(s) ? Status::NotFound("the key holds a hash") : s;
}
// GET: kNotFound when absent.
template <class Index>
Status VnodeGet(Index* index, std::string_view key, std::string* value);
// TYPE: kNone when absent.
template <class Index>
Status VnodeType(Index* index, std::string_view key, KvType* type);
// INCRBYFLOAT (and HINCRBYFLOAT on a field index): the value as a long
// double plus `incr`, stored as Redis prints it (LongDoubleString), the
// expiry kept. kInvalidArgument: the value is not a float; kOutOfRange: the
// sum is NaN or infinite.
template <class Index>
Status VnodeIncrByFloat(Index* index, std::string_view key, long double incr, std::string* result);
// Redis's float syntax for INCRBYFLOAT: what strtold takes whole, without
// spaces, and neither NaN nor infinite.
bool ParseLongDouble(std::string_view s, long double* out);
// A long double as Redis prints INCRBYFLOAT's result: 17 decimals, then
// the trailing zeros (and point) dropped.
std::string LongDoubleString(long double v);
template <class Index>
Status VnodeSet(Index* index, std::string_view key, std::string_view value,
                const SetOptions& options, SetResult* result);
template <class Index>
Status VnodeGetDelete(Index* index, std::string_view key, std::string* value);
template <class Index>
Status VnodeIncrBy(Index* index, std::string_view key, int64_t delta, int64_t* result);
// `max_value_size`: the store's value limit (at most kMaxValueSize).
template <class Index>
Status VnodeAppend(Index* index, std::string_view key, std::string_view suffix,
                   uint64_t max_value_size, uint64_t* length);
template <class Index>
Status VnodeGetRange(Index* index, std::string_view key, int64_t start, int64_t end,
                     std::string* value);
// GETRANGE's bytes of `whole`: start and end inclusive, negative ones
// counted from the end.
void SliceRange(std::string_view whole, int64_t start, int64_t end, std::string* value);
template <class Index>
Status VnodeSetRange(Index* index, std::string_view key, uint64_t offset, std::string_view data,
                     uint64_t max_value_size, uint64_t* length);
template <class Index>
Status VnodeGetExpiry(Index* index, std::string_view key, uint64_t* expire_at_ms);
// `now_ms`: the clock the index expires items by.
template <class Index>
Status VnodeSetExpiry(Index* index, std::string_view key, uint64_t expire_at_ms,
                      ExpiryCondition condition, uint64_t now_ms, bool* changed);
// MultiGet's answers (kv_store.h) from `get`, a Get of one key (kNotFound
// when absent).
Status GetEach(const std::vector<std::string_view>& keys,
               const std::function<Status(std::string_view key, std::string* value)>& get,
               std::vector<std::optional<std::string>>* values);
// Removes every key of the vnode, calling `removed` (when set) with each
// key it deleted, after the deletion (the distributed store bumps the key's
// version word there, so a transaction that read the key fails).
Status VnodeFlush(CcehIndex* index,
                  const std::function<void(std::string_view key)>& removed = nullptr);

}  // namespace pdpm::pdkvs
