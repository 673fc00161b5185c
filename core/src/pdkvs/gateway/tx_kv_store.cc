#include "pdkvs/gateway/tx_kv_store.h"

#include "pdkvs/item.h"
#include "pdkvs/vnode_ops.h"

namespace pdpm::pdkvs {

Status TxKvStore::Get(std::string_view key, std::string* value) {
  return VnodeGet(overlay_, key, value);
}

Status TxKvStore::Set(std::string_view key, std::string_view value, const SetOptions& options,
                      SetResult* result) {
  return VnodeSet(overlay_, key, value, options, result);
}

Status TxKvStore::GetDelete(std::string_view key, std::string* value) {
  return VnodeGetDelete(overlay_, key, value);
}

Status TxKvStore::Delete(std::string_view key) {
  return overlay_->Delete(key);
}

Status TxKvStore::Exists(std::string_view key, bool* exists) {
  return overlay_->Exists(key, exists);
}

Status TxKvStore::IncrBy(std::string_view key, int64_t delta, int64_t* result) {
  return VnodeIncrBy(overlay_, key, delta, result);
}

Status TxKvStore::Append(std::string_view key, std::string_view suffix, uint64_t* length) {
  return VnodeAppend(overlay_, key, suffix, kMaxValueSize, length);
}

Status TxKvStore::GetRange(std::string_view key, int64_t start, int64_t end, std::string* value) {
  return VnodeGetRange(overlay_, key, start, end, value);
}

Status TxKvStore::SetRange(std::string_view key, uint64_t offset, std::string_view data,
                           uint64_t* length) {
  return VnodeSetRange(overlay_, key, offset, data, kMaxValueSize, length);
}

Status TxKvStore::MultiGet(const std::vector<std::string_view>& keys,
                           std::vector<std::optional<std::string>>* values) {
  return GetEach(
      keys, [&](std::string_view key, std::string* v) { return VnodeGetString(overlay_, key, v); },
      values);
}

Status TxKvStore::MultiPut(const std::vector<std::pair<std::string_view, std::string_view>>& pairs,
                           bool if_none_exist, bool* applied) {
  *applied = false;
  for (const auto& [key, value] : pairs) PDPM_RETURN_IF_ERROR(CheckItemSize(key, value.size()));
  if (if_none_exist) {
    for (const auto& pair : pairs) {
      bool exists = false;
      PDPM_RETURN_IF_ERROR(overlay_->Exists(pair.first, &exists));
      if (exists) return Status::OK();
    }
  }
  for (const auto& [key, value] : pairs) PDPM_RETURN_IF_ERROR(overlay_->Put(key, value));
  *applied = true;
  return Status::OK();
}

Status TxKvStore::Scan(uint64_t cursor, size_t count, KvScanPage* page) {
  return store_->Scan(cursor, count, page);
}

Status TxKvStore::GetExpiry(std::string_view key, uint64_t* expire_at_ms) {
  return VnodeGetExpiry(overlay_, key, expire_at_ms);
}

Status TxKvStore::SetExpiry(std::string_view key, uint64_t expire_at_ms, ExpiryCondition condition,
                            bool* changed) {
  return VnodeSetExpiry(overlay_, key, expire_at_ms, condition, now_ms_, changed);
}

Status TxKvStore::Type(std::string_view key, KvType* type) {
  return VnodeType(overlay_, key, type);
}

Status TxKvStore::HashSet(std::string_view,
                          std::span<const std::pair<std::string_view, std::string_view>>, bool,
                          uint64_t*) {
  return HashInTransaction();
}

Status TxKvStore::HashGet(std::string_view, std::span<const std::string_view>,
                          std::vector<std::optional<std::string>>*) {
  return HashInTransaction();
}

Status TxKvStore::HashDelete(std::string_view, std::span<const std::string_view>, uint64_t*) {
  return HashInTransaction();
}

Status TxKvStore::HashLength(std::string_view, uint64_t*) {
  return HashInTransaction();
}

Status TxKvStore::HashIncrBy(std::string_view, std::string_view, int64_t, int64_t*) {
  return HashInTransaction();
}

Status TxKvStore::HashIncrByFloat(std::string_view, std::string_view, std::string_view,
                                  std::string*) {
  return HashInTransaction();
}

Status TxKvStore::HashScan(std::string_view, uint64_t, size_t, KvHashPage*) {
  return HashInTransaction();
}

Status TxKvStore::HashInTransaction() {
  return Status::FailedPrecondition(kHashInTransactionMessage);
}

Status TxKvStore::Count(KvCounts* counts) {
  return store_->Count(counts);
}

Status TxKvStore::ReclaimExpired(uint32_t, uint64_t, uint64_t*, uint64_t*) {
  return Status::FailedPrecondition("no active expiry inside a transaction");
}

uint32_t TxKvStore::BackupCount() {
  return store_->BackupCount();
}

Status TxKvStore::Flush() {
  return Status::FailedPrecondition("no flush inside a transaction");
}

Status TxKvStore::TxRead(const std::vector<std::string_view>&, std::vector<KvTxRead>*) {
  return Status::FailedPrecondition("transactions do not nest");
}

Status TxKvStore::TxCommit(const std::vector<KvTxCheck>&, const std::vector<KvTxWrite>&) {
  return Status::FailedPrecondition("transactions do not nest");
}

}  // namespace pdpm::pdkvs
