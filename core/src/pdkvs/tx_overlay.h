// TxOverlay: the keys one transaction (the gateway's MULTI/EXEC) reads and
// writes, in DRAM, with the operations of a CcehIndex that the vnode
// operations (vnode_ops.h) use — so a queued command does exactly what it
// does on a vnode, but to the overlay. A key is read from the store
// (KvStore::TxRead, through the Reader) the first time the transaction
// names it; its version is kept for the commit's check. Nothing reaches the
// store until the caller commits what `entries()` holds
// (KvStore::TxCommit).
//
// A hash's fields live in a TxOverlay of their own (HashFields: key = the
// field), read through the store's hash calls the first time each is named,
// so the same vnode operations serve them (HINCRBY is INCRBY on a field).
//
// Time stands still in a transaction: a key expires when its expiry time is
// at or before the `now_ms` given at construction (Redis does the same).
// Not thread-safe (one transaction, one thread).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "pdkvs/cceh.h"
#include "pdkvs/gateway/kv_store.h"

namespace pdpm::pdkvs {

class TxOverlay {
 public:
  using Reader = std::function<Status(std::string_view key, KvTxRead* out)>;
  TxOverlay(Reader reader, uint64_t now_ms) : reader_(std::move(reader)), now_ms_(now_ms) {}

  struct HashFields;
  // A key's state: as read, then as the transaction left it.
  struct Entry {
    std::optional<std::string> value;  // nullopt: absent
    uint64_t expire_at_ms = 0;
    KvVersion version;  // as read
    bool written = false;
    // The key holds a hash (value empty): string operations see its
    // kItemFlagHash (WRONGTYPE); it may be deleted, replaced, or have its
    // expiry changed. `fields`: its fields once a hash command named it
    // (TxKvStore), null before; dropped with the hash.
    bool hash = false;
    std::shared_ptr<HashFields> fields;
  };
  // Adds a key read beforehand (KvStore::TxRead of many keys at once).
  void Preload(std::string_view key, KvTxRead read);
  // The key's entry, read through the Reader the first time.
  Status Find(std::string_view key, Entry** out);
  // Makes `e` absent (written), as a removal does.
  static void Remove(Entry* e);

  // CcehIndex's contract (cceh.h), on the overlay.
  Status Get(std::string_view key, std::string* value, ItemMeta* meta = nullptr);
  Status Exists(std::string_view key, bool* exists);
  Status Put(std::string_view key, std::string_view value, const PutOptions& options = {});
  Status Delete(std::string_view key);
  Status Update(std::string_view key, const UpdateFn& fn);

  const std::map<std::string, Entry, std::less<>>& entries() const { return entries_; }

  // What commits the transaction (KvStore::TxCommit): a check of every key
  // read, with its version, and the final state of every key written — a
  // hash as the fields the transaction changed. Both view the overlay.
  void Commit(std::vector<KvTxCheck>* checks, std::vector<KvTxWrite>* writes) const;

 private:
  // An entry whose expiry time has come is absent.
  void Settle(Entry* e) const;

  Reader reader_;
  const uint64_t now_ms_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// The fields of a hash inside a transaction.
struct TxOverlay::HashFields {
  // `reader` reads a field of the hash in the store (value or absent).
  HashFields(Reader reader, bool fresh, uint64_t length)
      : fields(std::move(reader), 0), fresh(fresh), length(length) {}
  // Field -> value; written entries are the transaction's changes.
  TxOverlay fields;
  // The hash was made (again) by the transaction: none of the store's
  // fields are its own, and what the key held goes at the commit.
  bool fresh;
  uint64_t length;  // the fields it has now
};

}  // namespace pdpm::pdkvs
