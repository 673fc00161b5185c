// TxParticipant: the server side of pDSM transactions (docs/tx.md, FaRM
// optimistic concurrency as seeds/000 §4.1.6).
//
// It owns
//   * the version table: a fixed array of 64-bit words in DRAM, registered
//     for one-sided reads, one word per hash(segment, 64-byte granule)
//     (false sharing is a false conflict, never a missed one). Bit 63 is the
//     lock; bits 62..40 the server start count (so no version survives a
//     restart); bits 39..0 count commits.
//   * the transaction log: a server-local segment (role kind 3) holding
//     per-coordinator log areas (dsm/txlog.h), created on first use.
//
// It serves ALLOC (allocate a heap block and log it: kept if the
// transaction commits, freed if it aborts or its coordinator dies before
// locking here), LOCK (log the new values at a written segment's primary, lock
// their words; kAborted on conflict), BACKUP (log the values at a backup),
// COMMIT (at the decision holder first: decide durably, then apply; then at
// every other participant: apply, bump versions, unlock), ABORT, TRUNCATE
// and RESOLVE (what the holder decided; it decides abort when it has not
// decided). A record left locked past the lock timeout (its coordinator
// died) and every undecided record found at start are resolved with the
// holder in the background; nothing stays locked. A decision kept for
// RESOLVE whose coordinator went silent (it died before truncating) is
// dropped once none of the transaction's participants waits on it (PENDING),
// so a dead coordinator's log area empties and goes to another.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "dsm/object_store.h"
#include "dsm/pallocator.h"
#include "dsm/txlog.h"
#include "net/rpc.h"
#include "net/transport.h"
#include "pdkvs/cceh.h"
#include "pdkvs/hash.h"
#include "server/protocol.h"
#include "server/replication.h"

namespace pdpm::server {

enum class TxCopy { kPrimary, kBackup };

// A change of one segment's PM: its memory (the persist of a primary's is
// captured for shipping) and its allocator.
using TxMutation = std::function<Status(const dsm::PmRange& mem, dsm::PAllocator* alloc)>;

// What the participant needs from its server.
struct TxHooks {
  // Validates a request header (credential, epoch) as every RPC does.
  std::function<Status(const RequestHeader& h)> check;
  // The PM of global segment `segment` held here as `copy`, and its
  // allocator; kNotFound (kStaleEpoch for a primary routed by an older
  // epoch than `epoch`) otherwise.
  std::function<Status(uint32_t segment, TxCopy copy, uint64_t epoch, dsm::PmRange* mem,
                       dsm::PAllocator** alloc)>
      segment;
  // The object-store table of object `id` here (created when `create`),
  // with the ownership and epoch checks of the object RPCs, and the global
  // segment that holds it.
  std::function<Status(const dsm::ObjectId& id, uint64_t epoch, bool create,
                       dsm::ObjectStoreTable** out, uint32_t* segment)>
      object_table;
  // Runs `op` on global heap segment `segment` held here as `copy`. At a
  // primary it is one replicated mutation: its persists reach every backup
  // (the last shipment tagged `tag`) before it returns. At a backup — only
  // while it is being promoted — it runs directly (no shipping: the backups
  // left are filled again). kNotFound / kStaleEpoch: not held here (moved).
  std::function<Status(uint32_t segment, TxCopy copy, TxTag tag, const TxMutation& op)> mutate;
  // The same for the object-store table of object `id`, held in global
  // segment `segment` (0: wherever the table is) here as `copy`. At a
  // primary (the table created when `create`): one replicated mutation
  // whose last shipment is tagged `tag`. At a backup — only while it is
  // being promoted — directly.
  std::function<Status(const dsm::ObjectId& id, uint32_t segment, TxCopy copy, bool create,
                       TxTag tag, const std::function<Status(dsm::ObjectStoreTable*)>& op)>
      mutate_object;
  // Runs `op` on the pDKVS vnode of table `table`, whose segment is global
  // `segment`, held here as `copy` (docs/pdkvs.md). At a primary: after the
  // checks of a pDKVS request (the table is owned here by `epoch`, 0: any;
  // every key of `keys` belongs to it), as one replicated mutation whose
  // last shipment is tagged `tag`. At a backup — only while it is being
  // promoted — directly. The vnode is created first when `create`; else
  // `op` gets null when the table holds none yet. `op` gets the vnode's
  // index and its hashes.
  std::function<Status(uint32_t segment, uint32_t table, TxCopy copy, uint64_t epoch, TxTag tag,
                       bool create, const std::vector<std::string_view>& keys,
                       const std::function<Status(pdkvs::CcehIndex*, pdkvs::VnodeHashes*)>& op)>
      kv;
  // Allocates `size` heap bytes here (as kPAllocate does): the block's
  // global address. The allocation's shipment to the segment's backups is
  // tagged `tag` (kAllocated) with the block.
  std::function<Status(uint64_t size, TxTag tag, dsm::GlobalAddress* out)> allocate;
  // The transaction-log segment: its PM and allocator; created when
  // `create` and there is none, else kNotFound when there is none.
  std::function<Status(bool create, dsm::PmRange* mem, dsm::PAllocator** alloc)> log_segment;
  // The backups of global segment `segment` in this server's view: in sync,
  // and being filled.
  std::function<void(uint32_t segment, std::vector<uint32_t>* in_sync,
                     std::vector<uint32_t>* syncing)>
      backups;
  // Calls `method` at the current primary of `segment` (or the owner of
  // table `segment` when `is_table`) with the request header (this
  // server's epoch and credential) followed by `body`.
  std::function<Status(uint32_t segment, bool is_table, uint16_t method, const std::string& body,
                       std::string* reply)>
      call_primary;
};

struct TxParticipantOptions {
  uint32_t version_slots = 1u << 16;  // a power of two
  uint32_t lock_timeout_ms = 2000;    // then a locked record is resolved with its holder
  uint32_t area_count = 64;           // of a new log
  uint64_t area_size = 512u << 10;    // of a new log, at least (half its segment in all)
  // A decision kept for RESOLVE (the holder's record, a BACKUP record of
  // the holder segment) whose coordinator has sent nothing here for this
  // long is checked with the transaction's participants, and dropped once
  // none waits on it; checked again at this interval while one does.
  uint32_t silent_coordinator_ms = 5000;
};

using dsm::kTxGenerationShift;
using dsm::kTxOutcomeAbort;
using dsm::kTxOutcomeCommit;
using dsm::kTxRoleBackup;
using dsm::kTxRolePrimary;
using dsm::kTxVersionLock;

class TxParticipant {
 public:
  TxParticipant(TxHooks hooks, net::Transport* transport, const Logger& log,
                TxParticipantOptions options = {});
  ~TxParticipant();
  TxParticipant(const TxParticipant&) = delete;
  TxParticipant& operator=(const TxParticipant&) = delete;

  // Once the server's segments are open and announced, before serving:
  // opens the log (if any), bumps the start count, fills and registers the
  // version table, applies decided records, locks the undecided ones and
  // starts resolving them.
  Status Recover();
  // Registers the kTx* methods (before the server listens).
  void RegisterRpcs(net::RpcServer* rpc);

  // For replication: called when this server becomes the primary of
  // global segment `segment` (its allocator open), before it serves it.
  // Applies every committed BACKUP record of `segment` not marked applied,
  // and resolves the undecided ones with their decision holders (deciding
  // abort itself when it is now the holder). Then the blocks of its
  // undecided BACKUP-ALLOC records follow their transaction's BACKUP
  // record of `segment`: kept if it committed, else (aborted, or none)
  // freed. Errors: kUnavailable when a holder cannot be asked (retry).
  Status PromoteSegment(uint32_t segment);

  // For replication, at a backup of `segment`: a shipped batch of
  // transaction `tag`; `apply` writes its bytes. By the tag's kind:
  //   kCommit: then the transaction's BACKUP record for `segment` is
  //     marked applied (a later promotion does not apply it again), and so
  //     are its BACKUP-ALLOC records there (the blocks stay);
  //     kFailedPrecondition (nothing written) when that record was
  //     resolved as aborted here;
  //   kCommitPart: the same, but the record is only marked committed
  //     (another part of the segment's commit follows; a promotion applies
  //     the whole record again);
  //   kAllocated: first a BACKUP-ALLOC record of block `tag.block` is
  //     logged (a promotion here frees the block unless the transaction
  //     committed);
  //   kAllocFreed: then that record is marked aborted (the block is free).
  Status ApplyShipped(uint32_t segment, const TxTag& tag, const std::function<Status()>& apply);
  // For replication: the copy of `segment` here is about to be filled
  // again from its primary, whose copy holds every commit it applied.
  // Committed BACKUP records of `segment` are marked applied (a promotion
  // must not apply them over newer values); undecided ones stay (their
  // commit's shipment reaches the filling copy). BACKUP records for it are
  // taken again (a promotion here stopped them). Undecided BACKUP-ALLOC
  // records of `segment` are done with: the fill brings their blocks'
  // state, and the primary's fill waits for their ALLOC records to be
  // resolved before the copy joins (BackupJoining).
  void BackupRefilled(uint32_t segment);
  // For replication, at the primary of `segment`, before it reports the
  // backup on server `backup` in sync: from now on a LOCK on the segment
  // must be logged at that backup too (else it is refused), and this
  // waits until every transaction locked on the segment before is applied
  // or aborted here (so the backup holds its values, or a BACKUP record),
  // and every block allocated in it for a transaction before is kept or
  // freed here (an allocation after the start is logged at the backup).
  // kUnavailable after three lock timeouts (the backup is not required
  // then; the fill is tried again).
  // Then `decisions` gets the decisions this server keeps for RESOLVE with
  // `segment` as their holder segment (its own holder records and BACKUP
  // records of the segment, committed or applied), as the body of a
  // kTxKeepDecisions request (empty when there are none): the joining
  // backup has no BACKUP record of them (their LOCKs came before it
  // joined), and once promoted it must answer RESOLVE as this server would
  // — else a participant still waiting aborts what the holder applied.
  Status BackupJoining(uint32_t segment, uint32_t backup, std::string* decisions);
  // The report that `backup` is in sync failed: it is not required.
  void BackupNotJoined(uint32_t segment, uint32_t backup);

  // For the release of an empty table segment (docs/server.md "Freed
  // segments"): when no record here names global segment `segment` (an
  // entry in it, or it as a holder or participant), closes it — a LOCK
  // naming it is refused from then on with kAborted (the coordinator runs
  // the transaction again, and finds the table's next segment) — and
  // returns true; false when a record names it.
  bool CloseSegment(uint32_t segment);
  // Undoes CloseSegment: the release did not happen.
  void ReopenSegment(uint32_t segment);

  // pDKVS keys and transactions (docs/pdkvs.md): a key of table `table`
  // put by a transaction is locked from its LOCK to its commit or abort.
  // The store's requests on the key are refused meanwhile; every write of
  // it bumps its version word (so a reader spanning vnodes can validate).
  bool KvLocked(uint32_t table, std::string_view key) const;
  // The key's version word (lock bit included); 0 before Recover.
  uint64_t KvVersion(uint32_t table, std::string_view key) const;
  // The version word of a key, found once for a write's lock check and
  // its bump (the key's hash and the word's cache line taken once).
  class KvKeyVersion {
   public:
    bool locked() const { return word_ != nullptr && (word_->load() & kTxVersionLock) != 0; }
    // Called inside the vnode mutation that wrote the key.
    void Written() {
      if (word_ != nullptr) word_->fetch_add(1);
    }

   private:
    friend class TxParticipant;
    std::atomic<uint64_t>* word_ = nullptr;  // null before Recover
  };
  KvKeyVersion KvKey(uint32_t table, std::string_view key);

  // The handlers (public for in-process tests); `req` is a whole message.
  Status HandleHello(std::span<const uint8_t> req, std::string* reply);
  Status HandleLock(std::span<const uint8_t> req, std::string* reply);
  Status HandleCommit(std::span<const uint8_t> req, std::string* reply);
  Status HandleAbort(std::span<const uint8_t> req, std::string* reply);
  Status HandleTruncate(std::span<const uint8_t> req, std::string* reply);
  Status HandleResolve(std::span<const uint8_t> req, std::string* reply);
  Status HandleAlloc(std::span<const uint8_t> req, std::string* reply);
  Status HandleTable(std::span<const uint8_t> req, std::string* reply);
  // PENDING (coordinator, tx): u64 1 when a record of the transaction here
  // still waits on its outcome (locked, or committed and not applied).
  Status HandlePending(std::span<const uint8_t> req, std::string* reply);
  // KEEP-DECISIONS, from the primary of `segment` to a backup of it that
  // is joining (header, u64 segment, u64 count, then per decision u64
  // coordinator, u64 tx, Str entries — its entries of the segment, then
  // its participant entries): each is logged here as a BACKUP record of
  // the holder segment, marked applied (the fill brought its values).
  Status HandleKeepDecisions(std::span<const uint8_t> req, std::string* reply);

 private:
  using Clock = std::chrono::steady_clock;
  struct Area;
  struct Rec {
    dsm::TxRecord r;  // body dropped once decoded
    std::vector<dsm::TxEntry> entries;
    std::vector<uint32_t> slots;  // version words it holds locked
    // A LOCK record's segments and the backup servers its coordinator
    // logs BACKUP records at (empty after a restart).
    std::map<uint32_t, std::vector<uint32_t>> backups;
    Area* area = nullptr;
    uint64_t coordinator = 0;
    // With kTxRecordListsParticipants: the transaction's other segments
    // (segment | is-table << 32), taken out of `entries`.
    std::vector<uint64_t> participants;
    Clock::time_point since;
    Clock::time_point next_check;  // of a kept decision with its participants
    bool working = false;          // applied or aborted by a thread that released mu_
  };
  struct Area {
    std::unique_ptr<dsm::TxLogArea> log;
    std::map<uint64_t, Rec*> by_offset;
    Clock::time_point last_active;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // coordinator, tx
  // Not a global segment (object segments number down from 2^32 - 1).
  static constexpr uint64_t kNoSegment = ~0ull;
  class Locked;

  Status OpenLog(bool create);                        // requires mu_
  void AddRec(Area* area, std::unique_ptr<Rec> rec);  // requires mu_
  // The body of a kTxKeepDecisions request for a backup of `segment`
  // joining (BackupJoining); empty when there is nothing to send.
  void EncodeKeptDecisions(uint32_t segment, std::string* out);  // requires mu_
  // Decodes header | coordinator | tx [| extra] and checks the header.
  Status ParseTxRequest(std::span<const uint8_t> req, uint64_t* coordinator, uint64_t* tx,
                        uint64_t* extra);
  Status AreaFor(uint64_t coordinator, Area** out);  // requires mu_
  // A request of `coordinator` arrived (requires mu_): its area is active.
  void Heard(uint64_t coordinator);
  // Moves the kParticipant entries of `entries` into `out`.
  static void TakeParticipants(std::vector<dsm::TxEntry>* entries, std::vector<uint64_t>* out);
  // A decision kept for RESOLVE whose coordinator went silent: asks its
  // participants and truncates it when none waits on it (mu_ released
  // while asking).
  void ReleaseKeptDecisions();
  std::vector<uint32_t> SlotsOf(const std::vector<dsm::TxEntry>& entries) const;
  // The global segments `entries` change (0 left out).
  static std::set<uint32_t> SegmentsOf(const std::vector<dsm::TxEntry>& entries);
  // Requires mu_. kFailedPrecondition when a backup of a segment `rec`
  // writes is in sync (or joining) and not among those its coordinator
  // logs at: the coordinator's mapping is older than this server's.
  Status CheckBackupsListed(const Rec& rec);
  uint32_t KvSlot(uint32_t table, std::string_view key) const;
  // Checks, under the vnodes' mutations, that no key put if absent by
  // `entries` exists (kAlreadyExists) and that their tables are held here.
  Status CheckKvEntries(const std::vector<dsm::TxEntry>& entries, uint64_t epoch);
  // Writes the record's entries through the mutate hooks (mu_ released).
  Status Apply(const Rec& rec);
  // Requires mu_. Kept on commit (the transaction's LOCK entries name the
  // blocks it allocated here, their ALLOC records): kAborted when a block
  // named was reclaimed already, or one allocated here is not named.
  Status CheckAllocations(Key key, const std::vector<dsm::TxEntry>& entries);
  // Frees the block of ALLOC or BACKUP-ALLOC record `rec` in its segment,
  // held here as `copy` (mu_ released); a double free is ignored. At a
  // primary the free's shipment ends the backups' BACKUP-ALLOC records.
  void FreeBlock(Locked& lock, Rec* rec, TxCopy copy);
  // The same for block (segment, offset) of transaction (coordinator, tx).
  void FreeAllocated(uint64_t coordinator, uint64_t tx, uint32_t segment, uint64_t offset,
                     TxCopy copy);
  // Requires mu_. Logs an ALLOC (or BACKUP-ALLOC) record of block
  // (segment, offset) for transaction `key`.
  Status LogBlock(dsm::TxRecordKind kind, Key key, uint32_t segment, uint64_t offset);
  // Requires mu_: at the end of a promotion of `segment`, the blocks of
  // its undecided BACKUP-ALLOC records follow their BACKUP records there.
  void ResolvePromotedAllocations(Locked& lock, uint32_t segment);
  // Puts and deletes of one object table (in global segment `segment`; 0:
  // wherever it is) as one mutation.
  Status ApplyObjects(const std::vector<const dsm::TxEntry*>& entries, uint32_t segment,
                      TxCopy copy, TxTag tag);
  // Runs `fn` with mu_ released (it ships to backups, whose handlers take
  // their own server's mu_), `rec` marked working and no record swept.
  Status WithoutLock(Locked& lock, Rec* rec, const std::function<Status()>& fn);
  // Waits until no other thread works on `rec`.
  void WaitIdle(Locked& lock, Rec* rec);
  void Unlock(Rec* rec, bool bump);
  // Requires mu_. Persists the state and trims the area; trimmed records
  // leave the index at the next Sweep (when mu_ is released).
  void SetState(Rec* rec, dsm::TxState s);
  // Requires mu_: what the area's records are to its log (done, movable),
  // and the index kept current as the log drops or moves them.
  dsm::TxLogArea::Owner OwnerOf(Area* area);
  // Requires mu_. Appends a record, moving records that stay live past
  // the done ones first (TxLogArea::Compact); kAborted (run the
  // transaction again) when the area still has no room.
  Status AppendTo(Area* area, dsm::TxRecordKind kind, uint16_t flags, uint64_t tx,
                  uint32_t holder_segment, std::string_view body, dsm::TxRecord* out);
  void Sweep();
  // The records of one transaction here (requires mu_).
  std::vector<Rec*> RecordsOf(Key key);
  // Marks the done records of `txs` truncated (requires mu_).
  void Truncate(uint64_t coordinator, const std::vector<uint64_t>& txs);
  bool Terminal(const Rec& rec) const;
  // Commits `rec` (deciding when `decide`). A BACKUP record is only marked
  // committed (the primary's shipment brings its values), except that of
  // segment `promoting`, which is applied.
  Status CommitRec(Locked& lock, Rec* rec, bool decide, uint64_t promoting = kNoSegment);
  void AbortRec(Locked& lock, Rec* rec);
  // Asks the holder and carries out its answer; `rec` is looked up again.
  Status ResolveRemote(Key key, uint32_t holder, bool holder_is_table,
                       uint64_t promoting = kNoSegment);
  void ResolverLoop();

  const TxHooks hooks_;
  net::Transport* const transport_;
  const Logger log_;
  const TxParticipantOptions options_;

  std::unique_ptr<std::atomic<uint64_t>[]> versions_;
  std::unique_ptr<net::MemoryRegion> versions_region_;
  uint64_t generation_ = 0;

  std::mutex mu_;
  char* log_base_ = nullptr;  // null until the log segment exists
  dsm::PAllocator* log_alloc_ = nullptr;
  uint32_t area_count_ = 0;
  std::vector<Area> areas_;
  std::map<uint64_t, Area*> by_coordinator_;
  std::map<Key, std::vector<std::unique_ptr<Rec>>> recs_;
  std::vector<Rec*> swept_;
  std::map<uint32_t, std::set<uint32_t>> joining_;  // segment -> backup servers (BackupJoining)
  // Segments promoted here (PromoteSegment) and not attached as a backup
  // again (BackupRefilled): a BACKUP record for them is refused, since the
  // promotion resolved those it found and would never apply a later one.
  std::set<uint32_t> promoted_;
  // Table segments being released or released (CloseSegment): no LOCK
  // names them. Global numbers are never reused.
  std::set<uint32_t> closed_;
  uint32_t busy_ = 0;  // threads that released mu_ while working: no sweep
  std::condition_variable idle_cv_;
  std::function<void(const void*, size_t)> persist_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread resolver_;
};

}  // namespace pdpm::server
