// TxKvStore: the KvStore the commands of a MULTI/EXEC transaction run on.
// Key operations go to the transaction's TxOverlay (tx_overlay.h) through
// the vnode operations, so each command behaves exactly as it does on a
// vnode, and nothing reaches the store before the EXEC commits the overlay
// (KvStore::TxCommit). Count and Scan read the store itself (they see
// neither the transaction's writes nor an isolated state); MultiPut with
// if_none_exist and the rest of the single-key contract hold within the
// transaction. Flush and the hash operations are refused
// (kFailedPrecondition): the gateway does not queue them. A hash key read by
// the transaction may be tested (EXISTS, TYPE), deleted or replaced by a
// string; string operations on it answer WRONGTYPE.
#pragma once

#include "pdkvs/gateway/kv_store.h"
#include "pdkvs/tx_overlay.h"

namespace pdpm::pdkvs {

inline constexpr std::string_view kHashInTransactionMessage =
    "hash commands inside MULTI are not supported by pDKVS";

class TxKvStore final : public KvStore {
 public:
  // `overlay` and `store` outlive this object.
  TxKvStore(TxOverlay* overlay, KvStore* store, uint64_t now_ms)
      : overlay_(overlay), store_(store), now_ms_(now_ms) {}

  Status Get(std::string_view key, std::string* value) override;
  Status Set(std::string_view key, std::string_view value, const SetOptions& options,
             SetResult* result) override;
  Status GetDelete(std::string_view key, std::string* value) override;
  Status Delete(std::string_view key) override;
  Status Exists(std::string_view key, bool* exists) override;
  Status IncrBy(std::string_view key, int64_t delta, int64_t* result) override;
  Status Append(std::string_view key, std::string_view suffix, uint64_t* length) override;
  Status GetRange(std::string_view key, int64_t start, int64_t end, std::string* value) override;
  Status SetRange(std::string_view key, uint64_t offset, std::string_view data,
                  uint64_t* length) override;
  Status MultiGet(const std::vector<std::string_view>& keys,
                  std::vector<std::optional<std::string>>* values) override;
  Status MultiPut(const std::vector<std::pair<std::string_view, std::string_view>>& pairs,
                  bool if_none_exist, bool* applied) override;
  Status Scan(uint64_t cursor, size_t count, KvScanPage* page) override;
  Status GetExpiry(std::string_view key, uint64_t* expire_at_ms) override;
  Status SetExpiry(std::string_view key, uint64_t expire_at_ms, ExpiryCondition condition,
                   bool* changed) override;
  Status Type(std::string_view key, KvType* type) override;
  Status HashSet(std::string_view key,
                 std::span<const std::pair<std::string_view, std::string_view>> fields,
                 bool if_absent, uint64_t* added) override;
  Status HashGet(std::string_view key, std::span<const std::string_view> fields,
                 std::vector<std::optional<std::string>>* values) override;
  Status HashDelete(std::string_view key, std::span<const std::string_view> fields,
                    uint64_t* removed) override;
  Status HashLength(std::string_view key, uint64_t* fields) override;
  Status HashIncrBy(std::string_view key, std::string_view field, int64_t delta,
                    int64_t* result) override;
  Status HashIncrByFloat(std::string_view key, std::string_view field, std::string_view incr,
                         std::string* result) override;
  Status HashScan(std::string_view key, uint64_t cursor, size_t count, KvHashPage* page) override;
  Status Count(KvCounts* counts) override;
  Status ReclaimExpired(uint32_t vnode, uint64_t position, uint64_t* next_position,
                        uint64_t* reclaimed) override;
  Status Flush() override;
  uint32_t BackupCount() override;
  // A transaction does not nest.
  Status TxRead(const std::vector<std::string_view>& keys, std::vector<KvTxRead>* out) override;
  Status TxCommit(const std::vector<KvTxCheck>& checks,
                  const std::vector<KvTxWrite>& writes) override;

 private:
  static Status HashInTransaction();
  TxOverlay* const overlay_;
  KvStore* const store_;
  const uint64_t now_ms_;
};

}  // namespace pdpm::pdkvs
