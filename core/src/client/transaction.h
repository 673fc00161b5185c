// Transactions over pDSM heap data (docs/tx.md): FaRM optimistic
// concurrency, seeds/000 §4.1.6. The client is the coordinator and keeps
// no durable state.
//
//   std::unique_ptr<Transaction> tx;
//   PDPM_RETURN_IF_ERROR(client->TxBegin(&tx));
//   uint64_t v;  s = tx->Read(a, &v, 8);  v++;  s = tx->Write(a, &v, 8);
//   s = tx->Commit();   // OK, or kAborted: a conflict, retry the transaction
//
// Contract:
//   * Read is a one-sided read of the item's version words, the data and
//     the version words again; a locked or changing item fails with
//     kAborted at once. Reads see the transaction's own writes.
//   * Write and PFree are buffered; nothing reaches a server before Commit.
//   * Commit: LOCK at the primary of every written segment (the decision
//     holder — the primary of the lowest written segment — first), VALIDATE
//     the read set (one-sided), COMMIT-BACKUP at every backup, COMMIT at the
//     decision holder (the durable decision), then at the other
//     participants; truncation is lazy. Returns OK when committed, kAborted
//     on a conflict (nothing of the transaction is visible), or another
//     error (kUnavailable, ...) after aborting. A read-only transaction
//     only validates.
//   * PAllocate allocates at once at a server of the client's choice, which
//     logs the block for the transaction: it stays allocated if the
//     transaction commits and is freed if it aborts — also when the
//     coordinator dies (the server frees it after the lock timeout unless
//     the transaction locked there and committed).
//   * Objects: GetObj/PutObj/DelObj of whole small objects go through the
//     same lock/validate/commit path (the object's version word lives on
//     its table's server); the non-transactional object calls do not.
//   * Heap writes outside transactions racing transactional access to the
//     same bytes are undefined.
//   * KvPut: pDKVS sets (puts if absent) logged and applied like the
//     objects, locking the key at its vnode's server.
//   * A Transaction is used by one thread; destroying it unfinished aborts it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "dsm/address.h"
#include "dsm/hash_index.h"
#include "dsm/txlog.h"
#include "server/protocol.h"

namespace pdpm::client {

// What a coordinator needs from its Client (implemented by client.cc).
class TxHost {
 public:
  virtual ~TxHost() = default;
  struct SegmentRoute {
    uint32_t primary = 0;
    uint32_t key = 0;
    std::vector<uint32_t> backups;
  };
  // The placement of a global segment (refreshing the mapping once when
  // unknown): kNotFound when not mapped.
  virtual Status RouteSegment(uint32_t segment, SegmentRoute* out) = 0;
  // One-sided read of [offset, offset+len) of the region `key` on `server`.
  virtual Status ReadRegion(uint32_t server, uint32_t key, uint64_t offset, void* buf,
                            uint64_t len) = 0;
  // An RPC to `server`: header, then `body`.
  virtual Status CallServer(uint32_t server, uint16_t method, const std::string& body,
                            std::string* reply) = 0;
  // The table of object `id` and the server owning it.
  virtual Status RouteObject(const dsm::ObjectId& id, uint32_t* table, uint32_t* server) = 0;
  // The global segment of object-store table `table` in the cached
  // mapping; kNotFound when it has none (yet).
  virtual Status RouteTable(uint32_t table, uint32_t* segment) = 0;
  virtual Status RefreshMapping() = 0;
  virtual uint64_t segment_size() const = 0;
  // A live server, round-robin.
  virtual Status PickServer(uint32_t* server) = 0;
};

class TxCoordinator;

// Largest object a transaction puts.
inline constexpr uint64_t kMaxTxObject = 1ull << 20;

class Transaction {
 public:
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Status Read(const dsm::GlobalAddress& addr, void* buf, uint64_t len);
  Status Write(const dsm::GlobalAddress& addr, const void* buf, uint64_t len);
  Status PAllocate(uint64_t size, dsm::GlobalAddress* out);
  Status PFree(const dsm::GlobalAddress& addr);
  // Small objects (up to kMaxTxObject bytes, whole objects): GetObj reads
  // through the object RPC between two one-sided reads of the object's
  // version word (kNotFound for an absent object, which is also validated);
  // PutObj and DelObj are buffered and applied at commit.
  Status GetObj(const dsm::ObjectId& id, std::string* data);
  Status PutObj(const dsm::ObjectId& id, std::string_view data);
  Status DelObj(const dsm::ObjectId& id);
  // pDKVS (docs/pdkvs.md): sets `key` (of table `table`: the caller routes
  // it; `key_hash` is pdkvs::HashKey(key)) to `value` in its vnode at
  // commit, expiring at `expire_at_ms` (Unix ms, 0: never). With
  // `if_absent` (no expiry) the LOCK fails — and Commit with it — with
  // kAlreadyExists when the key exists; that holds until the commit (the
  // key is locked). kNotFound when the table has no segment yet (a first
  // write to the table creates it).
  Status KvPut(uint32_t table, uint64_t key_hash, std::string_view key, std::string_view value,
               bool if_absent, uint64_t expire_at_ms = 0);
  // Removes `key` at commit (absent already: nothing). As KvPut otherwise.
  Status KvDelete(uint32_t table, uint64_t key_hash, std::string_view key);
  // Sets field `field` of hash `key` (creating the hash) at commit. The
  // key holds a hash or nothing then (the caller validates it read so).
  // As KvPut otherwise; entries of one key apply in the order given.
  Status KvHashSet(uint32_t table, uint64_t key_hash, std::string_view key, std::string_view field,
                   std::string_view value);
  // Removes field `field` of hash `key` at commit (the hash with its last
  // field; absent: nothing). As KvHashSet otherwise.
  Status KvHashDelete(uint32_t table, uint64_t key_hash, std::string_view key,
                      std::string_view field);
  // Sets the expiry time of `key` (0: none) in place at commit, whatever
  // it holds (absent: nothing). As KvPut otherwise.
  Status KvSetExpiry(uint32_t table, uint64_t key_hash, std::string_view key,
                     uint64_t expire_at_ms);
  // A read of `key` (of table `table`) at `server` saw its version word
  // `word` (kKvMultiGetVersioned): Commit validates that the word is
  // unchanged at that server — under the lock when the key is written
  // there, else by reading it — so the transaction serialises after the
  // read. kAborted when the word is locked (a transaction is writing it).
  Status KvRead(uint32_t server, uint32_t table, uint64_t key_hash, uint64_t word);
  // Adds a check Commit runs in VALIDATE, after every LOCK is held and the
  // read set is validated, before anything is decided; a failure aborts
  // the transaction and Commit returns it. For reads whose validation needs
  // an RPC: pDKVS checks each read key's word where its vnode lives then.
  void AddValidation(std::function<Status()> check);
  Status Commit();
  // After a Commit that failed with kUnavailable: true when the failure
  // came after LOCK and VALIDATE (the outcome is unknown to the client,
  // the participants resolve it), false when the transaction aborted.
  bool outcome_unknown() const { return outcome_unknown_; }
  void Abort();
  uint64_t id() const { return id_; }

 private:
  friend class TxCoordinator;
  Transaction(TxCoordinator* coordinator, uint64_t id) : coordinator_(coordinator), id_(id) {}

  struct Slot {
    uint32_t server;
    uint32_t slot;
    auto operator<=>(const Slot&) const = default;  // NOLINT(modernize-use-nullptr): tidy 14 bug
  };
  // Reads the version words of [offset, offset+len) of `segment` on its primary.
  Status ReadVersions(uint32_t server, uint32_t segment, uint64_t offset, uint64_t len,
                      std::vector<std::pair<uint32_t, uint64_t>>* out);
  Status CheckAddress(const dsm::GlobalAddress& addr, uint64_t len, bool write);
  // Reads one version word, failing the transaction when it is locked.
  Status ReadVersion(uint32_t server, uint32_t slot, uint64_t* word);
  // The table of object `id`, its owner and the global segment holding it
  // (0: none yet; created first when `create`).
  Status ObjectTableSegment(const dsm::ObjectId& id, bool create, uint32_t* table, uint32_t* server,
                            uint32_t* segment);
  Status Fail(Status s);  // aborts and returns s
  // Buffers pDKVS entry `entry` (dsm::MakeKvEntry, MakeKvHashEntry),
  // filling in the segment of its table.
  Status AddKvEntry(dsm::TxEntry entry, uint64_t key_hash);
  void AbortAt(const std::vector<uint32_t>& servers);

  TxCoordinator* coordinator_;
  uint64_t id_;
  bool finished_ = false;
  bool outcome_unknown_ = false;
  std::map<Slot, uint64_t> read_set_;
  std::vector<std::function<Status()>> validations_;  // AddValidation, in order
  std::vector<dsm::TxEntry> writes_;                  // in program order; frees too
  std::vector<uint64_t> key_hashes_;  // by writes_ index: a pDKVS entry's key hash (else 0)
  std::map<uint32_t, std::vector<dsm::GlobalAddress>> allocated_;  // by server
};

// One per Client: the coordinator's identity, the per-server version-table
// keys, and the truncations not yet sent.
class TxCoordinator {
 public:
  explicit TxCoordinator(TxHost* host);
  // Sends the pending truncations (best effort).
  ~TxCoordinator();
  Status Begin(std::unique_ptr<Transaction>* out);
  uint64_t id() const { return id_; }

 private:
  friend class Transaction;
  struct ServerInfo {
    uint32_t key = 0;
    uint32_t slots = 0;
  };
  Status Info(uint32_t server, ServerInfo* out);
  void ForgetAll();
  // The body prefix of every kTx* request.
  std::string Body(uint64_t tx) const;
  std::vector<uint64_t> TakeTruncations(uint32_t server);
  void AddTruncation(uint32_t server, uint64_t tx);
  // A committed transaction some participants did not acknowledge: the
  // commit is sent to them again before later commits; once all have it,
  // every participant's record (the holder's last) may be truncated.
  struct Unfinished {
    uint64_t tx = 0;
    std::vector<uint32_t> acked;    // the holder first
    std::vector<uint32_t> missing;  // not yet acknowledged
  };
  void AddUnfinished(Unfinished u);
  void RetryUnfinished();
  // Test hook (PDPM_TX_CRASH_AT=phase:n): _exit at the n-th pass of a phase.
  void MaybeCrash(const char* phase);
  // Test hook (PDPM_TX_STOP_AT=phase:n): SIGSTOP at the n-th pass of a
  // phase (the test continues the process when it has done its part).
  void MaybeStop(const char* phase);

  TxHost* const host_;
  const uint64_t id_;
  std::mutex mu_;
  std::map<uint32_t, ServerInfo> servers_;
  std::map<uint32_t, std::vector<uint64_t>> truncations_;
  std::vector<Unfinished> unfinished_;
  uint64_t next_tx_ = 1;
  std::string crash_phase_;
  uint64_t crash_countdown_ = 0;
  std::string stop_phase_;
  uint64_t stop_countdown_ = 0;
};

}  // namespace pdpm::client
