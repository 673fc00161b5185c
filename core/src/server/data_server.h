// DataServer: the body of pdpm-server (docs/server.md). It owns the PM
// (pm::PmSpace), cuts it into segments, runs a PAllocator per segment in
// use and an object-store table per table segment, registers every segment
// with the transport under its own key (remote writes with `persist` run
// the PM layer's persist), announces segments to the monitor and serves
// the data-plane RPCs of server/protocol.h.
//
// Start recovers everything from PM alone: each segment's role word says
// what it holds; allocators and tables reopen (leaks reclaimed by the
// object store's Open) and every segment is announced again with its new
// key. Destruction stops serving; nothing needs flushing (every
// acknowledged operation is already durable).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fair_mutex.h"
#include "common/log.h"
#include "common/status.h"
#include "dsm/object_store.h"
#include "dsm/pallocator.h"
#include "monitor/monitor_client.h"
#include "net/rpc.h"
#include "net/transport.h"
#include "pdkvs/cceh.h"
#include "pdkvs/hash.h"
#include "pm/pm_space.h"
#include "server/kv_protocol.h"
#include "server/protocol.h"
#include "server/replication.h"
#include "server/segment_role.h"
#include "server/tx_participant.h"

namespace pdpm::server {

struct ServerOptions {
  std::string pm_path;
  uint64_t pm_size = 0;       // create/extend a file to this size; 0: must exist
  bool format = false;        // format a blank PM; never a formatted one
  uint64_t segment_size = 0;  // 0: the cluster's (asked from the monitor)
  std::string monitor;        // host:port
  std::string cluster_secret;
  std::string listen = "127.0.0.1:7500";
  std::string advertise;  // address announced to the monitor; "" = bound listen address
  net::BackendKind transport = net::BackendKind::kTcp;
  uint32_t cores = 1;
  uint32_t op_timeout_ms = 2000;
  std::map<std::string, std::string> labels;  // topology and pod labels
  // Rate at which a primary fills a new backup (docs/replication.md).
  uint64_t resync_bytes_per_sec = 256ull << 20;
};

class DataServer {
 public:
  // Opens the PM, recovers, listens, registers with the monitor and starts
  // heartbeating. Keeps retrying an unreachable monitor until `stop` is set.
  static Status Start(const ServerOptions& options, const Logger& log,
                      const std::atomic<bool>* stop, std::unique_ptr<DataServer>* out);
  ~DataServer();

  std::string address() const { return address_; }
  uint32_t server_id() const { return server_id_; }
  // Transactions' participant (for replication: PromoteSegment).
  TxParticipant* transactions() { return tx_.get(); }

 private:
  struct Segment {
    uint32_t local = 0;
    SegmentRole role;
    uint64_t placement_epoch = 0;
    std::unique_ptr<dsm::PAllocator> alloc;        // primaries only
    std::unique_ptr<dsm::ObjectStoreTable> table;  // kTable primaries only
    std::unique_ptr<pdkvs::CcehIndex> kv;  // kTable primaries: the pDKVS vnode once made; repl_mu
    std::unique_ptr<pdkvs::VnodeHashes> kv_hashes;  // the vnode's hashes, with kv
    std::unique_ptr<net::MemoryRegion> region;
    // Replication (docs/replication.md).
    char* base = nullptr;
    bool backup = false;  // a byte copy of another server's primary
    // Persists and records into `capture` while a mutation runs.
    std::function<void(const void*, size_t)> persist;
    // One mutation (or copy step) and its shipping at a time, in the order
    // asked: a fill's copy steps never keep a client's write waiting long.
    FairMutex repl_mu;
    std::atomic<RedoBatch*> capture{nullptr};
    std::set<ReplicaId> attached;     // syncing backups that receive shipping; repl_mu
    std::atomic<bool> fenced{false};  // no longer ours: serve nothing
    // Created here and not yet taking writes: its first backups fill
    // (data_server_first_fill.cc).
    std::atomic<bool> first_fill{false};
    // pDKVS read-only path (data_server_kv.cc): the vnode once made, and its
    // writes (each around its apply and shipping) in progress (low 32
    // bits) and completed (high 32 bits).
    std::atomic<pdkvs::CcehIndex*> kv_published{nullptr};
    std::atomic<uint64_t> kv_writes{0};
    // Heap and table primaries: when the heartbeat first found it holding
    // nothing (HoldsNothing; steady-clock nanoseconds; 0: it holds
    // something). Released once empty for kReleaseEmptyAfter.
    std::atomic<int64_t> empty_since_ns{0};
    // Being released: allocations and table mutations refused. Guarded by
    // repl_mu.
    bool released = false;
  };

  // How long a request waits for a new segment (its table's, or a heap
  // segment with room) before it is refused (kAborted): well below a
  // client's reply timeout (2 s by default).
  static constexpr int64_t kNewSegmentWaitMs = 500;
  // The creator's job for a heap segment (tables are numbered from 1).
  static constexpr uint32_t kHeapJob = 0;

  // How long a heap segment stays empty before it goes back to the free
  // segments: long enough that a client freeing and allocating again does
  // not pay a segment's creation (format and backup fill) each time.
  static constexpr std::chrono::seconds kReleaseEmptyAfter{5};

  DataServer(const ServerOptions& options, const Logger& log);
  Status OpenPm(const std::atomic<bool>* stop);
  Status RecoverSegments();
  Status OpenSegment(uint32_t local, const SegmentRole& role, std::unique_ptr<Segment>* out);
  Status Register(const std::atomic<bool>* stop);
  // Tells the monitor about `seg` (new or with a new key) and records the
  // global number it got.
  Status Announce(Segment* seg);
  // The lowest free local segment; kResourceExhausted when none is left.
  Status FreeLocalSegment(uint32_t* local);
  // Clears the first page of local segment `local` (persisted), so that it
  // reads as free, after a restart too.
  void ClearLocalSegment(uint32_t local);
  // Whether primary `seg` holds nothing: a heap segment no block, a table
  // segment no object and no pDKVS key. Other kinds always hold something.
  static bool HoldsNothing(const Segment& seg);
  // Releases every heap and table segment that has held nothing for
  // kReleaseEmptyAfter (docs/server.md "Freed segments").
  void ReleaseEmptySegments();
  // Gives the primary `seg` back if it still holds nothing (a table
  // segment also no transaction's record: TxParticipant::CloseSegment):
  // the monitor frees its global segment (its backups are dropped with
  // it), then its local segment is cleared and free again; a table's next
  // mutation creates a new segment.
  Status ReleaseSegment(Segment* seg);
  // Formats a free local segment for `role` and announces it. Requires
  // grow_mu_.
  Status CreateSegment(SegmentRole role, Segment** out);
  Status RefreshMapping();
  // Whether this server may serve now: false once its lease ran out
  // (requests are refused with kUnavailable, one-sided ops too on tcp).
  bool HoldsLease() const;
  // Takes the lease the monitor granted in answer to a request sent at
  // `sent`, answered with `epoch`. After a lapse, only once a mapping of
  // `epoch` has been applied: the monitor may have handed this server's
  // segments to others meanwhile.
  void RenewLease(std::chrono::steady_clock::time_point sent, uint64_t lease_ms, uint64_t epoch);
  void HeartbeatLoop();
  // Reloads the mapping when the heartbeat saw a new epoch, on its own
  // thread: a slow reconfiguration (promotion) never delays a heartbeat.
  void RefreshLoop();
  // The participant's view of this server (tx_participant.h).
  TxHooks MakeTxHooks();
  // Formats a free local segment as the transaction log (never announced).
  Status CreateTxLogSegment(Segment** out);
  // The copy of heap segment `global` the participant asks for (epoch 0:
  // any): a primary (kStaleEpoch when routed by an older epoch) or a
  // backup; kNotFound when not held here.
  Status TxSegment(uint32_t global, TxCopy copy, uint64_t epoch, Segment** out);

  // Replication (data_server_replication.cc, docs/replication.md).
  // Opens a recovered or promoted primary's allocator (and table) with the
  // capturing persist.
  Status OpenPrimary(Segment* seg);
  // Registers a backup copy's memory, for remote writes only (a copy is
  // read only once promoted); `fresh`: a copy about to be filled (its
  // region header is cleared first, so a partial copy reads as free).
  Status OpenBackup(uint32_t local, uint32_t global, bool fresh, std::unique_ptr<Segment>* out);
  // The remote access a primary's memory is registered with: every access
  // for a heap segment, reads only for a table's.
  static uint32_t PrimaryAccess(SegmentKind kind);
  // Registers a primary's memory anew (PrimaryAccess) under a new key
  // (announce it next); one-sided ops with the old key are waited for,
  // later ones refused. Requires seg->repl_mu.
  Status RegisterAnew(Segment* seg);
  // Queues a fill of every syncing backup of `sm` (this server is primary).
  void ScheduleSyncs(const v1::SegmentMapping& sm);
  // Decides what each recovered segment is from the mapping: primary
  // (announced), backup (key reported) or fenced (freed).
  Status ClassifyRecovered(const std::atomic<bool>* stop);
  // Runs `op` (a mutation of seg) with its persists captured, then ships
  // them to every backup; the result is acknowledged only if all took it.
  // `tag`: the transaction `op` works for (shipped even when `op`
  // persisted nothing); read after `op` ran (an allocation names its block).
  Status Mutate(Segment* seg, const std::function<Status()>& op, const TxTag& tag = {});
  // Whether `seg` takes a mutation now: kStaleEpoch once fenced, kAborted
  // (nothing done, the client asks again) while a table segment is being
  // released. Requires seg->repl_mu.
  Status CheckMutable(const Segment& seg) const;
  // A backup's server did not answer: the monitor fails it over at once if
  // it is gone (ViewManager::ReportUnreachable).
  void ReportUnreachable(uint32_t server);
  // Requires seg->repl_mu.
  Status ShipLocked(Segment* seg, const RedoBatch& batch, TxTag tag = {});
  // Acts on a new placement: promotions, fencing, dropped backups, syncs.
  void Reconcile(const v1::GetMappingResponse& m);
  Status Promote(Segment* seg, const v1::SegmentMapping& sm);
  void SyncLoop();
  // A new segment's first fill (data_server_first_fill.cc). Whether `seg`
  // may take writes: not before its first backups are in sync. Requires
  // mu_ (shared).
  bool AcceptsWritesLocked(Segment* seg) const;
  // Fills every backup of the new segment `seg` (retrying, bounded like
  // shipping); kUnavailable when one is not in sync in time. Requires
  // new_segment_mu_.
  Status FillNewSegment(Segment* seg);
  // New segments (a table's, or a heap segment when those here are full)
  // are created and first filled by the creator thread, off the request
  // path: on the hardware guest one takes tens of seconds (pinning its
  // memory, and its backup's, with the RDMA device), longer than a client
  // waits for a reply. A request that needs one asks the creator for
  // `job` (a table number, or kHeapJob) and waits until `ready` (asked
  // with create_mu_ held) or `deadline`; then it is refused with kAborted
  // (nothing done, the client asks again) while the creator works. The
  // creator's failure is the answer of the requests that waited for that
  // attempt; the next request starts another.
  Status AwaitCreator(uint32_t job, std::chrono::steady_clock::time_point deadline,
                      const std::function<bool()>& ready);
  // AwaitCreator for table `table`'s segment, waiting at most
  // kNewSegmentWaitMs; sets *out once the segment takes writes.
  Status AwaitTableSegment(uint32_t table, Segment** out);
  // The creator's work for `table`: its segment unless it has one, then
  // its first fill. Takes new_segment_mu_.
  Status CreateTableSegment(uint32_t table);
  // The creator's work for kHeapJob: a new heap segment (or one whose
  // first fill failed earlier) filled. Takes new_segment_mu_.
  Status CreateHeapSegment();
  void CreatorLoop();
  // A heap segment still in its first fill (an earlier fill failed), or
  // null.
  Segment* PendingHeapSegment();
  // SyncBackup unless another thread is filling that backup.
  Status FillBackupOnce(uint32_t global, ReplicaId backup);
  Status SyncBackup(uint32_t global, ReplicaId backup);
  // The last step of a fill before the backup on `server` (at `address`)
  // is reported in sync: TxParticipant::BackupJoining, then the decisions
  // it returns sent there (data_server_tx.cc).
  Status JoinBackup(uint32_t global, uint32_t server, const PeerAddress& address);
  Status HandleReplicaApply(std::span<const uint8_t> req, std::string* reply);
  Status HandleReplicaAttach(std::span<const uint8_t> req, std::string* reply);
  Status HandleHeapWrite(std::span<const uint8_t> req, std::string* reply);
  // Persists a heap range on this primary (data_server_persist.cc).
  Status HandleHeapPersist(std::span<const uint8_t> req, std::string* reply);

  // The request handlers; `req` is the whole message.
  Status CheckHeader(const RequestHeader& h);
  Status HandlePAllocate(std::span<const uint8_t> req, std::string* reply);
  // Allocates `size` heap bytes in some heap segment here (growing the
  // heap when all are full: kAborted while the creator makes a segment,
  // nothing allocated). With `tag` (kAllocated), the allocation's
  // shipment is tagged with it and the block.
  Status AllocateHeap(uint64_t size, TxTag tag, dsm::GlobalAddress* out);
  Status HandlePFree(std::span<const uint8_t> req, std::string* reply);
  Status HandleObject(uint16_t method, std::span<const uint8_t> req, std::string* reply);
  Status HandleListObj(std::span<const uint8_t> req, std::string* reply);
  // The table segment of `id`'s table after the ownership and epoch checks;
  // creates it when `create` (else kNotFound when there is none).
  Status TableFor(const dsm::ObjectId& id, uint64_t epoch, bool create, Segment** out);
  // The same for table number `table`.
  Status TableSegment(uint32_t table, uint64_t epoch, bool create, Segment** out);

  // pDKVS (data_server_kv.cc, docs/pdkvs.md "Distributed store").
  // A kKvBatch of a kKvVnodeBatches request whose mutation runs with the
  // other batches' (MutateTogether): `run` with its reply budget.
  struct DeferredKvBatch {
    Segment* seg = nullptr;
    std::function<Status(uint64_t budget)> run;
    std::shared_ptr<void> writing;  // counts it in seg->kv_writes until shipped
  };
  Status HandleKv(uint16_t method, std::span<const uint8_t> req, std::string* reply);
  // HandleKv of a decoded request. `reply_budget`: the bytes a kKvBatch
  // reply may take (less than a whole reply inside a kKvVnodeBatches one;
  // then it may answer no request). `deferred`: a kKvBatch that must
  // mutate its vnode is left there instead of run.
  Status HandleKvRequest(uint16_t method, const RequestHeader& h, KvRequest r, std::string* reply,
                         uint64_t reply_budget, std::vector<DeferredKvBatch>* deferred);
  Status HandleKvVnodeBatches(std::span<const uint8_t> req, std::string* reply);
  // Runs the batches of `jobs` (at most one a segment) as Mutate would, one
  // after the other, all under their segments' mutation locks; then ships
  // each backup its share of all of them in one kReplicaApplyMany message
  // (a segment whose share fails ships on its own, as Mutate does).
  // (*results)[i]: job i's outcome (data_server_kv_ship.cc).
  void MutateTogether(std::vector<DeferredKvBatch>* jobs, std::vector<Status>* results);
  Status HandleReplicaApplyMany(std::span<const uint8_t> req, std::string* reply);
  // Reopens the vnode of a table segment being opened as primary (if it
  // has one) and frees the blocks of vnode items no index reaches.
  Status OpenVnode(Segment* seg);
  // Creates the vnode of `seg` unless it has one (inside its mutation).
  Status EnsureVnode(Segment* seg);
  // The participant's `kv` hook (tx_participant.h TxHooks::kv).
  Status TxKv(uint32_t segment, uint32_t table, TxCopy copy, uint64_t epoch, TxTag tag, bool create,
              const std::vector<std::string_view>& keys,
              const std::function<Status(pdkvs::CcehIndex*, pdkvs::VnodeHashes*)>& op);

  const ServerOptions options_;
  const Logger log_;
  const uint64_t credential_;
  // Lease (docs/replication.md "Leases"): with copies that the monitor
  // could promote, this server serves only until this steady-clock time
  // (nanoseconds since the clock's epoch): the send time of the last
  // heartbeat the monitor answered plus the lease it granted. Before
  // transport_: its threads ask HoldsLease until it is gone.
  std::atomic<int64_t> lease_until_ns_{0};
  // Whether the lease applies: the monitor grants leases and the cluster
  // keeps copies (without them no segment is ever handed to another
  // server, so a server cut off from the monitor keeps serving).
  std::atomic<bool> lease_granted_{false};
  std::atomic<bool> cluster_replicated_{false};
  // The epoch of the newest mapping RefreshMapping has acted on (Reconcile
  // done: moved copies fenced).
  std::atomic<uint64_t> applied_epoch_{0};
  // Access bit segment ranges are registered with: kAccessGated on tcp,
  // where the transport asks HoldsLease before each one-sided op.
  uint32_t lease_gated_ = 0;
  std::unique_ptr<pm::PmSpace> space_;
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<monitor::MonitorClient> monitor_;
  std::string address_;
  uint32_t server_id_ = 0;
  uint64_t heartbeat_ms_ = 1000;

  // Serialises segment creation (one format + announce at a time).
  std::mutex grow_mu_;
  // Held while a new segment is created and first filled (not grow_mu_:
  // a peer's kReplicaAttach takes it).
  std::mutex new_segment_mu_;
  // Guards the maps below and epoch_; segments themselves are thread-safe.
  mutable std::shared_mutex mu_;
  std::vector<std::unique_ptr<Segment>> segments_;  // by local index; null = free
  std::map<uint32_t, Segment*> by_global_;
  std::map<uint32_t, Segment*> by_table_;
  std::map<uint32_t, uint64_t> owned_tables_;         // table -> assigned_epoch
  std::map<uint32_t, Segment*> backups_;              // global -> backup copy held here
  std::map<uint32_t, v1::SegmentMapping> placement_;  // global -> mapping entry
  std::map<uint32_t, PeerAddress> server_addresses_;  // id -> data address
  std::vector<std::unique_ptr<Segment>> retired_;     // fenced, kept while handlers may hold them
  uint64_t down_timeout_ms_ = 10000;
  uint32_t table_count_ = 0;
  uint32_t replica_count_ = 1;
  uint64_t epoch_ = 0;
  std::mutex refresh_mu_;  // one mapping refresh at a time
  // Set once Start has registered and announced everything: requests that
  // arrive earlier are refused (kUnavailable).
  std::atomic<bool> serving_{false};

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread heartbeat_;
  bool refresh_wanted_ = false;  // guarded by stop_mu_
  bool release_wanted_ = false;  // an empty heap segment is due; stop_mu_
  // A promotion failed (a decision holder it asked did not answer in
  // time, say): the next heartbeat applies the mapping again instead of
  // leaving the segment unserved until the epoch changes.
  std::atomic<bool> promotion_failed_{false};
  // Test hook PDPM_TEST_REFUSE_PROMOTIONS_MS=n: promotions fail for n ms
  // from the first one tried (-1: not read yet). Guarded by refresh_mu_.
  int64_t refuse_promotions_ms_ = -1;
  std::chrono::steady_clock::time_point refuse_promotions_until_{};
  std::thread refresher_;
  Segment* tx_log_ = nullptr;  // guarded by grow_mu_
  std::unique_ptr<TxParticipant> tx_;
  PeerLinks peers_;
  std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  std::set<std::pair<uint32_t, ReplicaId>> sync_wanted_;  // (global, backup); sync_mu_
  std::set<std::pair<uint32_t, ReplicaId>> filling_;      // fills under way; sync_mu_
  std::atomic<bool> sync_stop_{false};
  std::thread sync_;
  // The creator's queue (AwaitCreator): an attempt per job, kept once
  // failed until a request has seen the failure and asks again.
  struct Creation {
    bool running = false;
    bool done = false;  // failed: `status`
    Status status;
  };
  std::mutex create_mu_;
  std::condition_variable create_cv_;
  std::map<uint32_t, Creation> creating_;  // job -> attempt; create_mu_
  uint64_t heap_segments_made_ = 0;        // by the creator; create_mu_
  bool create_stop_ = false;               // create_mu_
  std::thread creator_;
  // Last: destroyed first, so no handler runs once members go away.
  std::unique_ptr<net::RpcServer> rpc_;
};

}  // namespace pdpm::server
