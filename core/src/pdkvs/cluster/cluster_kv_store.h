// ClusterKvStore: the distributed pDKVS, a KvStore whose vnodes are the
// object-store tables of a pDSM cluster (docs/pdkvs.md "Distributed
// store"). A key lives in table monitor::TableForKey(HashKey(key)); each
// operation is an RPC to the table's owner, which applies it to the
// table's CCEH index and ships the change to every backup before it
// answers, so an acknowledged write survives the loss of its server.
//
// Beyond the KvStore contract (kv_store.h):
// - Values are limited to server::kKvMaxValueSize (64 MiB - 64 KiB), one
//   RPC; larger ones fail with kTooLarge.
// - A request whose server fails waits (ClientOptions::failover_wait_ms)
//   for the promotion of a backup, then runs there; kUnavailable after. A
//   request that may have reached the failed server is sent again only if
//   it is idempotent (server::IsKvIdempotent); any other fails with
//   kUnavailable, its outcome unknown.
// - Multi-key operations are atomic: MultiPut of keys of one vnode (and
//   MultiGet of them) is one step of its server; MultiPut across vnodes is
//   one pDSM transaction (docs/tx.md, pDKVS entries), if_none_exist checked
//   under its locks: all keys or none become visible, whoever crashes.
//   MultiGet across vnodes validates the keys' version words around its
//   reads and reads again until nothing changed meanwhile, so it never
//   sees part of a multi-put. A transaction that keeps conflicting is
//   retried until ClientOptions::failover_wait_ms, then fails with
//   kAborted; a plain multi-put whose outcome is unknown is run again, a
//   multi-put if none exist fails with kUnavailable. Flush and Count visit
//   the vnodes in turn.
// - A scan cursor is a hash position whose low 16 bits name its vnode;
//   cursors stay valid while the cluster's table count does.
//
// Thread-safe: one store may be shared by many threads.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "client/client.h"
#include "pdkvs/gateway/kv_store.h"
#include "server/kv_protocol.h"

namespace pdpm::pdkvs {

class ClusterKvStore final : public KvStore {
 public:
  // Connects to the cluster (client::Client::Open).
  static Status Open(const client::ClientOptions& options, std::unique_ptr<ClusterKvStore>* out);
  ~ClusterKvStore() override;

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
  // A key given twice is sent once, with its last value.
  Status MultiPut(const std::vector<std::pair<std::string_view, std::string_view>>& pairs,
                  bool if_none_exist, bool* applied) override;
  Status Scan(uint64_t cursor, size_t count, KvScanPage* page) override;
  Status GetExpiry(std::string_view key, uint64_t* expire_at_ms) override;
  Status SetExpiry(std::string_view key, uint64_t expire_at_ms, ExpiryCondition condition,
                   bool* changed) override;
  Status Type(std::string_view key, KvType* type) override;
  // Each hash operation is one kKvHash request to the hash's vnode (one
  // step of its server, its changes shipped to every backup before the
  // reply); only the reads are sent again after a failover.
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
  // TxRead: the values and versions of one multi-get step per vnode
  // (kKvMultiGetVersioned), then each present key's expiry. TxCommit: one
  // pDSM transaction of the writes (puts with their expiry, deletes),
  // validating every checked key's version word at the server holding its
  // vnode at commit time: kAborted when that is not the server the key
  // was read from (the vnode moved: a drain, a failover) or the word
  // changed; run again on a failover or a stale route (kUnavailable when
  // its outcome is unknown).
  Status TxRead(const std::vector<std::string_view>& keys, std::vector<KvTxRead>* out) override;
  Status TxCommit(const std::vector<KvTxCheck>& checks,
                  const std::vector<KvTxWrite>& writes) override;
  // The ops of each vnode go as one kKvBatch request (one step of its
  // server, one shipment to its backups), those of one server as one
  // kKvVnodeBatches request, the servers' requests in flight at once
  // (Client::TableCallAll, from the calling thread). An op refused for a
  // key a multi-put holds locked, or whose keys a new table count split,
  // runs again on its own.
  void RunBatch(std::span<KvOp> ops) override;

  client::Client* client() { return client_.get(); }

 private:
  ClusterKvStore(std::unique_ptr<client::Client> client, uint32_t failover_wait_ms);
  using KvPairs = std::vector<std::pair<std::string_view, std::string_view>>;
  // Request `*r` to the table `route` picks (client::Client::TableCall).
  Status Send(uint16_t method, const client::Client::TableRoute& route, server::KvRequest* r,
              std::string* reply);
  // Request `r` about the key r.key, routed to its table.
  Status KeyCall(uint16_t method, server::KvRequest r, std::string* reply);
  // A kKvHash request of `op` about hash `key`; kNotFound when the hash
  // is absent.
  Status HashCall(server::KvHashOp op, std::string_view key, std::vector<std::string_view> fields,
                  std::string* reply, uint64_t arg = 0, uint64_t count = 0);
  // A request without keys to table `table` (1-based; kOutOfRange past the
  // last), `arg0` its argument if it takes one.
  Status VnodeCall(uint16_t method, uint32_t table, std::string* reply, uint64_t arg0 = 0);
  // Request `*r` carrying the keys of `pending` (indexes into `keys`) that
  // share the table of the first under the current table count — as keys,
  // or with `pairs` as those pairs; *sent names them in order.
  Status GroupCall(uint16_t method, const std::vector<std::string_view>& keys,
                   const std::vector<size_t>& pending, const KvPairs* pairs, server::KvRequest* r,
                   std::vector<size_t>* sent, std::string* reply);
  // Where key residues go for one table count (cached).
  struct ResidueMap {
    std::vector<uint32_t> table;  // by residue
    std::vector<uint64_t> least;  // by table: its least residue (index 0 unused)
  };
  std::shared_ptr<const ResidueMap> Residues(uint32_t table_count);
  // MultiPut of keys of more than one vnode (`tables[i]`: the table of
  // pair i): one transaction, run again on conflicts and failovers.
  Status TxMultiPut(const KvPairs& pairs, const std::vector<uint32_t>& tables, bool if_none_exist,
                    bool* applied);
  // Adds the entries of hash write `w` (KvTxWrite) of `table` to `tx`.
  Status TxHashWrite(client::Transaction* tx, uint32_t table, uint64_t hash, const KvTxWrite& w);
  // Runs a transaction `fill` fills in (it calls `ensure_table` for a table
  // that must have a segment) until it commits: again after a failover or
  // a stale route, and after a conflict when `retry_conflicts` (else
  // kAborted). Of unknown outcome: run again when `rerun_unknown`, else
  // kUnavailable. Another error of `fill` or the commit is returned.
  Status RunTransaction(const std::function<Status(client::Transaction* tx)>& fill,
                        bool retry_conflicts, bool rerun_unknown);
  // `put`, the outcome of a transactional put to `table`, unless it is
  // kNotFound (the table has no segment yet): then an empty multi-put
  // creates the segment, and kNotFound tells RunTransaction to route again.
  Status CreatedIfNone(uint32_t table, Status put);
  // A key's version word and the server it is of.
  struct KeyVersion {
    uint64_t server = 0;
    uint64_t word = 0;
    bool operator==(const KeyVersion&) const = default;
  };
  // Sends `method` with the keys of each vnode in turn (GroupCall); `read`
  // decodes a reply whose first `*answered` keys of `sent` it answered (the
  // rest go again).
  using GroupReader = std::function<Status(const std::vector<size_t>& sent, server::Decoder* d,
                                           uint64_t* answered)>;
  Status ForEachGroup(uint16_t method, const std::vector<std::string_view>& keys,
                      const GroupReader& read);
  // The version words of `keys` (kKvVersions), by index.
  Status Versions(const std::vector<std::string_view>& keys, std::vector<KeyVersion>* out);
  // MultiGet without validation (one step per vnode); with `versions`,
  // each key's version word read in the same step, and with `hashes`
  // whether each key holds a hash (its value then absent).
  Status MultiGetOnce(const std::vector<std::string_view>& keys,
                      std::vector<std::optional<std::string>>* values,
                      std::vector<KeyVersion>* versions, std::vector<bool>* hashes = nullptr);
  // The kKvBatch of the ops `group` names, in their order (table unset).
  static server::KvRequest BatchRequest(std::span<KvOp> ops, const std::vector<size_t>& group);
  // One kKvBatch of the ops `group` names (all of one table under the
  // table count when grouped), in their order.
  void SendBatch(std::span<KvOp> ops, const std::vector<size_t>& group);
  // One kKvVnodeBatches request: the groups `members` names (tables of
  // one server, grouped under one table count), a kKvBatch each.
  struct VnodeBatches {
    const std::vector<size_t>* members = nullptr;
    std::string batches;  // the body after the header
    bool idempotent = true;
    bool regrouped = false;  // the table count changed: not sent
  };
  static VnodeBatches EncodeVnodeBatches(std::span<KvOp> ops,
                                         const std::vector<std::vector<size_t>>& groups,
                                         const std::vector<uint32_t>& tables,
                                         const std::vector<size_t>& members);
  // Applies the outcome of `v` (its call's status and reply) to its ops; a
  // batch not answered runs again as its own kKvBatch.
  void ReadVnodeBatchesReply(std::span<KvOp> ops, const std::vector<std::vector<size_t>>& groups,
                             const VnodeBatches& v, Status s, const std::string& reply);
  // Applies a kKvBatch reply to the ops of `group`: statuses and values;
  // ops not answered, or meeting a multi-put's lock, run again on their
  // own. `may_answer_none`: a reply inside a kKvVnodeBatches one.
  // (KvStore::RunOne runs an op on its own.)
  void ReadBatchReply(std::span<KvOp> ops, const std::vector<size_t>& group, std::string_view reply,
                      bool may_answer_none);

  std::unique_ptr<client::Client> client_;
  const uint32_t failover_wait_ms_;
  std::mutex residue_mu_;
  uint32_t residue_count_ = 0;  // table count of residues_
  std::shared_ptr<const ResidueMap> residues_;
};

}  // namespace pdpm::pdkvs
