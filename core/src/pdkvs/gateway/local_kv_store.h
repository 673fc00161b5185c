// LocalKvStore: a KvStore on the PM of this machine — one PAllocator region
// over a PM source (pm::PmDevice) holding N vnodes, each a CcehIndex; a key
// lives in vnode HashKey(key) mod N. Everything it stores is durable before
// an operation returns and is found again by Open after any crash.
//
// Format on PM (version 1, see docs/pdkvs.md "Gateway"): the PAllocator
// region over the whole source; root slot 0 holds the layout word
// (magic "LKV1" in the upper 32 bits, vnode count below), written last when
// the store is created; root slots 1..N hold the vnodes' index headers.
//
// Each vnode's hashes are a VnodeHashes (hash.h) over its index.
//
// Thread-safe. Multi-key operations (MultiGet, MultiPut, TxCommit, Flush)
// are atomic for concurrent callers of this object (a store-wide
// reader-writer lock); after a crash during MultiPut or TxCommit a prefix of
// its writes may be present. Transaction versions are counters in DRAM
// (one per key hash slot, bumped by every write of a key of the slot):
// they start again at a restart, as the gateway's transactions do.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "dsm/pallocator.h"
#include "pdkvs/cceh.h"
#include "pdkvs/gateway/kv_store.h"
#include "pdkvs/hash.h"
#include "pm/pm_device.h"

namespace pdpm::pdkvs {

struct LocalKvStoreOptions {
  // Size of the PM file created when `path` does not exist (and the least
  // size of an existing regular file). 0: the path must exist.
  uint64_t create_size = 0;
  // Vnodes of a new store (1..15); an existing store keeps its own.
  uint32_t vnodes = 8;
  // Cores allocating concurrently (PAllocator chunk ownership).
  int cores = 2;
  // Current Unix time in ms; null: the system clock.
  std::function<uint64_t()> clock_ms;
};

class LocalKvStore final : public KvStore {
 public:
  // Opens (creating and formatting a new or never completed one) the store
  // on the PM source `path`. kCorruption when its content is not a store.
  static Status Open(const std::string& path, const LocalKvStoreOptions& options,
                     std::unique_ptr<LocalKvStore>* out);
  ~LocalKvStore() override;

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
  Status TxRead(const std::vector<std::string_view>& keys, std::vector<KvTxRead>* out) override;
  Status TxCommit(const std::vector<KvTxCheck>& checks,
                  const std::vector<KvTxWrite>& writes) override;

  uint32_t vnodes() const { return static_cast<uint32_t>(indexes_.size()); }
  const pm::PmDevice& device() const { return *device_; }

 private:
  LocalKvStore() = default;
  uint64_t NowMs() const;
  size_t VnodeNumber(std::string_view key) const;
  CcehIndex* VnodeOf(std::string_view key) const;
  VnodeHashes* HashesOf(std::string_view key) const;
  // The version counter of a key (TxRead), bumped after each write of it.
  std::atomic<uint64_t>& VersionOf(std::string_view key) const;
  // Runs `op`, a write of `key`, frees the field indexes of the hashes it
  // dropped, and bumps the key's version.
  template <class Op>
  Status Write(std::string_view key, Op op);

  LocalKvStoreOptions options_;
  std::unique_ptr<pm::PmDevice> device_;
  std::unique_ptr<dsm::PAllocator> alloc_;
  std::vector<std::unique_ptr<CcehIndex>> indexes_;
  std::vector<std::unique_ptr<VnodeHashes>> hashes_;  // by vnode
  // Shared by single-key operations, exclusive for multi-key writes.
  std::shared_mutex multi_mu_;
  static constexpr size_t kVersionSlots = size_t{1} << 16;
  std::unique_ptr<std::atomic<uint64_t>[]> versions_ {
    new std::atomic<uint64_t>[ kVersionSlots ]()
  };
};

}  // namespace pdpm::pdkvs
