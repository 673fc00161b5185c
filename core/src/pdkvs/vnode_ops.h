// The KvStore operations on one vnode (a CcehIndex), shared by the local
// store (gateway/local_kv_store.h) and the pDSM servers that hold the
// vnodes of the distributed store (server/data_server_kv.cc). Each is one
// atomic step of the index (CcehIndex::Put or Update); semantics and
// errors are those of the KvStore method of the same name (kv_store.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "pdkvs/cceh.h"
#include "pdkvs/gateway/kv_store.h"

namespace pdpm::pdkvs {

Status VnodeSet(CcehIndex* index, std::string_view key, std::string_view value,
                const SetOptions& options, SetResult* result);
Status VnodeGetDelete(CcehIndex* index, std::string_view key, std::string* value);
Status VnodeIncrBy(CcehIndex* index, std::string_view key, int64_t delta, int64_t* result);
// `max_value_size`: the store's value limit (at most kMaxValueSize).
Status VnodeAppend(CcehIndex* index, std::string_view key, std::string_view suffix,
                   uint64_t max_value_size, uint64_t* length);
Status VnodeGetRange(CcehIndex* index, std::string_view key, int64_t start, int64_t end,
                     std::string* value);
// GETRANGE's bytes of `whole`: start and end inclusive, negative ones
// counted from the end.
void SliceRange(std::string_view whole, int64_t start, int64_t end, std::string* value);
Status VnodeSetRange(CcehIndex* index, std::string_view key, uint64_t offset, std::string_view data,
                     uint64_t max_value_size, uint64_t* length);
Status VnodeGetExpiry(CcehIndex* index, std::string_view key, uint64_t* expire_at_ms);
// `now_ms`: the clock the index expires items by.
Status VnodeSetExpiry(CcehIndex* index, std::string_view key, uint64_t expire_at_ms,
                      uint64_t now_ms, bool* changed);
// Removes every key of the vnode.
Status VnodeFlush(CcehIndex* index);

}  // namespace pdpm::pdkvs
