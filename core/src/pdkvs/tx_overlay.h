// TxOverlay: the keys one transaction (the gateway's MULTI/EXEC) reads and
// writes, in DRAM, with the operations of a CcehIndex that the vnode
// operations (vnode_ops.h) use — so a queued command does exactly what it
// does on a vnode, but to the overlay. A key is read from the store
// (KvStore::TxRead, through the Reader) the first time the transaction
// names it; its version is kept for the commit's check. Nothing reaches the
// store until the caller commits what `entries()` holds
// (KvStore::TxCommit).
//
// Time stands still in a transaction: a key expires when its expiry time is
// at or before the `now_ms` given at construction (Redis does the same).
// Not thread-safe (one transaction, one thread).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"
#include "pdkvs/cceh.h"
#include "pdkvs/gateway/kv_store.h"

namespace pdpm::pdkvs {

class TxOverlay {
 public:
  using Reader = std::function<Status(std::string_view key, KvTxRead* out)>;
  TxOverlay(Reader reader, uint64_t now_ms) : reader_(std::move(reader)), now_ms_(now_ms) {}

  // A key's state: as read, then as the transaction left it.
  struct Entry {
    std::optional<std::string> value;  // nullopt: absent
    uint64_t expire_at_ms = 0;
    KvVersion version;  // as read
    bool written = false;
    // The key holds a hash (as read, value empty): string operations see
    // its kItemFlagHash (WRONGTYPE); it may be deleted or replaced, its
    // expiry is not changed inside a transaction.
    bool hash = false;
  };
  // Adds a key read beforehand (KvStore::TxRead of many keys at once).
  void Preload(std::string_view key, KvTxRead read);

  // CcehIndex's contract (cceh.h), on the overlay.
  Status Get(std::string_view key, std::string* value, ItemMeta* meta = nullptr);
  Status Exists(std::string_view key, bool* exists);
  Status Put(std::string_view key, std::string_view value, const PutOptions& options = {});
  Status Delete(std::string_view key);
  Status Update(std::string_view key, const UpdateFn& fn);

  const std::map<std::string, Entry, std::less<>>& entries() const { return entries_; }

 private:
  // The key's entry, read through the Reader the first time.
  Status Find(std::string_view key, Entry** out);
  // An entry whose expiry time has come is absent.
  void Settle(Entry* e) const;

  Reader reader_;
  const uint64_t now_ms_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace pdpm::pdkvs
