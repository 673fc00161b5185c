// TxKvStore: the KvStore the commands of a MULTI/EXEC transaction run on.
// Key operations go to the transaction's TxOverlay (tx_overlay.h) through
// the vnode operations, so each command behaves exactly as it does on a
// vnode, and nothing reaches the store before the EXEC commits the overlay
// (KvStore::TxCommit). Count and Scan read the store itself (they see
// neither the transaction's writes nor an isolated state); MultiPut with
// if_none_exist and the rest of the single-key contract hold within the
// transaction. Flush is refused (kFailedPrecondition): the gateway does not
// queue it.
//
// Hashes: a hash's fields are read from the store (its hash calls) the
// first time the transaction names each (its field count once), and
// changed in the overlay (TxOverlay::HashFields); the commit writes the
// changed fields (KvTxWrite). The store's answers are as of the commit:
// the hash's version, read by TxRead, is checked then, and any write of
// the hash changes it. A hash made by the transaction, or emptied and
// made again, reads nothing from the store.
#pragma once

#include <functional>

#include "pdkvs/gateway/kv_store.h"
#include "pdkvs/tx_overlay.h"

namespace pdpm::pdkvs {

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

  // The first failure of a read of the store's hash calls (OK if none):
  // the transaction's attempt fails with it (kAborted, to run again, when
  // the key stopped holding a hash meanwhile) rather than answer a command
  // with it.
  const Status& read_error() const { return read_error_; }

 private:
  // `s`, the outcome of a read of the store, kept when it is the first
  // failure.
  Status Read(Status s);
  // The fields of hash `key` as the transaction sees them in *fields (and
  // its entry in *entry): null when the key is absent and not `create`,
  // else a new hash when absent. kFailedPrecondition (WRONGTYPE) when the
  // key holds a string.
  Status HashOf(std::string_view key, bool create, TxOverlay::Entry** entry,
                TxOverlay::HashFields** fields);
  // Runs `update` (it may set `field`) on the fields of hash `key`, made
  // when absent, counting the field if it is new.
  Status UpdateField(std::string_view key, std::string_view field,
                     const std::function<Status(TxOverlay* fields)>& update);
  // After a change of hash `entry`'s fields (or a new hash that got none):
  // a hash left without a field is removed, as in Redis; else the entry is
  // written.
  static void Changed(TxOverlay::Entry* entry);

  TxOverlay* const overlay_;
  KvStore* const store_;
  const uint64_t now_ms_;
  Status read_error_;
};

}  // namespace pdpm::pdkvs
