#include "client/client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/server_conns.h"
#include "monitor/monitor_client.h"
#include "monitor/placement.h"
#include "net/buffer_pool.h"
#include "net/rpc.h"
#include "server/protocol.h"

namespace pdpm::client {
namespace {

using server::Decoder;
using server::Encoder;

// One-sided transfers move at most this much per op (the staging buffer).
constexpr uint32_t kStagingSize = 1u << 20;

// An immutable snapshot of the cluster mapping; replaced whole on refresh.
struct Mapping {
  struct Server {
    std::string address;
    uint32_t cores = 1;
    bool up = false;
    bool down = false;  // declared DOWN: what it held moved (not SUSPECT, DRAINING)
  };
  struct Copy {
    uint32_t server = 0;
    uint32_t key = 0;
  };
  struct Seg {
    uint32_t server = 0;  // the primary
    uint32_t key = 0;
    std::vector<Copy> backups;  // in sync: one-sided writes go to each
    bool syncing = false;       // a backup is being filled: write through the primary
  };
  uint64_t epoch = 0;
  uint64_t segment_size = 0;
  uint32_t table_count = 0;
  uint32_t replica_count = 1;
  std::map<uint32_t, Server> servers;
  std::unordered_map<uint32_t, Seg> segments;
  std::map<uint32_t, uint32_t> table_owner;
  std::map<uint32_t, uint32_t> table_segment;  // table -> its global segment
};

bool IsConnectionFailure(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout;
}

class ClientImpl final : public Client, public TxHost {
 public:
  explicit ClientImpl(const ClientOptions& o)
      : options_(o), credential_(server::ClusterCredential(o.cluster_secret)) {}

  Status Init() {
    if (options_.cluster_secret.empty()) {
      return Status::PermissionDenied("no cluster secret given");
    }
    monitor::MonitorClientOptions mo;
    mo.cluster_secret = options_.cluster_secret;
    mo.call_timeout = std::chrono::milliseconds(options_.monitor_timeout_ms);
    monitor_ = std::make_unique<monitor::MonitorClient>(options_.monitor, mo);
    net::TransportOptions to;
    to.backend = options_.transport;
    to.op_timeout_ms = options_.op_timeout_ms;
    to.connect_timeout_ms = options_.connect_timeout_ms;
    to.max_transfer = server::kMaxRpcPayload;
    PDPM_RETURN_IF_ERROR(net::Transport::Create(to, &transport_));
    return RefreshMapping();
  }

  Status RefreshMapping() override {
    std::lock_guard<std::mutex> refresh(refresh_mu_);
    auto m = std::make_shared<Mapping>();
    for (int attempt = 0;; attempt++) {
      v1::GetMappingResponse resp;
      PDPM_RETURN_IF_ERROR(monitor_->GetMapping(0, &resp).WithContext("monitor"));
      v1::GetSegmentKeysResponse keys;
      PDPM_RETURN_IF_ERROR(monitor_->GetSegmentKeys({}, &keys).WithContext("monitor"));
      if (keys.epoch() != resp.epoch() && attempt < 5) continue;  // changed between the calls
      m->epoch = resp.epoch();
      m->segment_size = resp.segment_size();
      m->table_count = resp.table_count();
      for (const auto& s : resp.servers()) {
        m->servers[s.id()] = {s.address(), std::max(1u, s.cores()),
                              s.state() == v1::SERVER_STATE_UP, s.state() == v1::SERVER_STATE_DOWN};
      }
      for (const auto& t : resp.tables()) m->table_owner[t.table()] = t.server_id();
      for (const auto& sm : resp.segments()) {
        if (sm.table() != 0) m->table_segment[sm.table()] = static_cast<uint32_t>(sm.segment());
      }
      m->replica_count = std::max(1u, resp.replica_count());
      for (const auto& s : keys.segments()) {
        Mapping::Seg& seg = m->segments[static_cast<uint32_t>(s.segment())];
        seg = {s.primary().server_id(), s.access_key(), {}, false};
        for (const auto& b : s.backups()) {
          if (b.state() == v1::REPLICA_STATE_IN_SYNC) {
            seg.backups.push_back({b.server_id(), b.access_key()});
          } else {
            seg.syncing = true;
          }
        }
      }
      break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    mapping_ = std::move(m);
    return Status::OK();
  }

  uint64_t epoch() const override { return Snapshot()->epoch; }
  uint32_t table_count() const override { return Snapshot()->table_count; }
  uint32_t replica_count() const override { return Snapshot()->replica_count; }
  uint32_t table_owner(uint32_t table) const override {
    auto m = Snapshot();
    auto it = m->table_owner.find(table);
    return it == m->table_owner.end() ? 0 : it->second;
  }

  Status TxBegin(std::unique_ptr<Transaction>* out) override {
    {
      std::lock_guard<std::mutex> lock(tx_mu_);
      if (tx_ == nullptr) tx_ = std::make_unique<TxCoordinator>(this);
    }
    return tx_->Begin(out);
  }

  // TxHost.
  Status RouteSegment(uint32_t segment, SegmentRoute* out) override {
    for (int attempt = 0; attempt < 2; attempt++) {
      auto m = Snapshot();
      auto it = m->segments.find(segment);
      if (it != m->segments.end()) {
        out->primary = it->second.server;
        out->key = it->second.key;
        out->backups.clear();
        for (const auto& b : it->second.backups) out->backups.push_back(b.server);
        return Status::OK();
      }
      if (attempt == 0) PDPM_RETURN_IF_ERROR(RefreshMapping());
    }
    return Status::NotFound("segment " + std::to_string(segment) + " not mapped");
  }

  Status RouteTable(uint32_t table, uint32_t* segment) override {
    auto m = Snapshot();
    auto it = m->table_segment.find(table);
    if (it == m->table_segment.end()) {
      return Status::NotFound("table " + std::to_string(table) + " has no segment");
    }
    *segment = it->second;
    return Status::OK();
  }

  Status ReadRegion(uint32_t server, uint32_t key, uint64_t offset, void* buf,
                    uint64_t len) override {
    auto m = Snapshot();
    ConnRef ref;
    PDPM_RETURN_IF_ERROR(GetConn(*m, server, &ref));
    return Transfer(ref.conn, key, offset, static_cast<char*>(buf), len, false, false, {});
  }

  Status CallServer(uint32_t server, uint16_t method, const std::string& body,
                    std::string* reply) override {
    return Call(
        [&](const Mapping& m, uint32_t* out) {
          // A server the cluster declared down will not answer: its
          // segments moved, so the caller routes again (a transaction
          // aborts) rather than wait out the failover here.
          auto it = m.servers.find(server);
          if (it != m.servers.end() && !it->second.up) {
            return Status::Unavailable("server " + std::to_string(server) + " is down");
          }
          *out = server;
          return Status::OK();
        },
        method, [&](Encoder& e) { e.Bytes(body); }, reply);
  }

  uint64_t segment_size() const override { return Snapshot()->segment_size; }

  Status PickServer(uint32_t* server) override {
    auto m = Snapshot();
    std::vector<uint32_t> ids;
    for (const auto& [id, s] : m->servers) {
      if (s.up) ids.push_back(id);
    }
    if (ids.empty()) return Status::Unavailable("no live server");
    *server = ids[next_server_.fetch_add(1) % ids.size()];
    return Status::OK();
  }

  Status RouteObject(const ObjectId& id, uint32_t* table, uint32_t* server) override {
    return ObjectRoute(*Snapshot(), id, table, server);
  }

  Status Read(const GlobalAddress& addr, void* buf, uint64_t len) override {
    return OneSided(addr, static_cast<char*>(buf), len, false);
  }

  Status Write(const GlobalAddress& addr, const void* buf, uint64_t len) override {
    return OneSided(addr, static_cast<char*>(const_cast<void*>(buf)), len, true);
  }

  Status WriteUnpersisted(const GlobalAddress& addr, const void* buf, uint64_t len) override {
    return OneSided(addr, static_cast<char*>(const_cast<void*>(buf)), len, true,
                    /*persist=*/false);
  }

  Status Persist(const GlobalAddress& addr, uint64_t len) override {
    PDPM_RETURN_IF_ERROR(CheckHeapAccess(addr, /*write=*/true));
    PDPM_RETURN_IF_ERROR(addr.CheckRange(len, Snapshot()->segment_size));
    if (len == 0) return Status::OK();
    std::string reply;
    return Call([&](const Mapping& m, uint32_t* server) { return SegmentServer(m, addr, server); },
                server::kHeapPersist,
                [&](Encoder& e) {
                  e.Address(addr);
                  e.U64(len);
                },
                &reply);
  }

  Status PAllocate(uint64_t size, GlobalAddress* out) override {
    if (size == 0) return Status::InvalidArgument("pallocate of 0 bytes");
    // Round-robin over live servers; a dead or full one passes the turn on.
    auto m = Snapshot();
    std::vector<uint32_t> ids;
    for (const auto& [id, s] : m->servers) {
      if (s.up) ids.push_back(id);
    }
    if (ids.empty()) return Status::Unavailable("no live server");
    uint64_t start = next_server_.fetch_add(1);
    Status s;
    for (size_t i = 0; i < ids.size(); i++) {
      s = PAllocate(size, ids[(start + i) % ids.size()], out);
      if (s.code() != StatusCode::kUnavailable && s.code() != StatusCode::kResourceExhausted) {
        return s;
      }
    }
    return s;
  }

  Status PAllocate(uint64_t size, uint32_t server_id, GlobalAddress* out) override {
    if (size == 0) return Status::InvalidArgument("pallocate of 0 bytes");
    std::string reply;
    // Not sent twice when it may have reached the server: a second
    // allocation would leak the first. A server whose heap segments are
    // full refuses it (kAborted, nothing allocated) while it makes one.
    PDPM_RETURN_IF_ERROR(WhileSegmentCreated([&] {
      return Call(
          [&](const Mapping&, uint32_t* server) {
            *server = server_id;
            return Status::OK();
          },
          server::kPAllocate, [&](Encoder& e) { e.U64(size); }, &reply, /*idempotent=*/false);
    }));
    Decoder d({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
    PDPM_RETURN_IF_ERROR(d.Address(out));
    return d.Done();
  }

  Status PFree(const GlobalAddress& addr) override {
    if (addr.is_null()) return Status::InvalidArgument("pfree of the null address");
    if (addr.kind() != dsm::SpaceKind::kHeap) {
      return Status::InvalidArgument("pfree of " + addr.ToString() + ": not a heap address");
    }
    std::string reply;
    return Call([&](const Mapping& m, uint32_t* server) { return SegmentServer(m, addr, server); },
                server::kPFree, [&](Encoder& e) { e.Address(addr); }, &reply);
  }

  Status PutObj(const ObjectId& id, std::string_view data) override {
    if (data.size() > kMaxObjectSize) {
      return Status::TooLarge("object of " + std::to_string(data.size()) +
                              " bytes: the limit is 64 MiB");
    }
    std::string reply;
    return ObjectCall(
        id, server::kPutObj, [&](Encoder& e) { e.Bytes(data); }, &reply);
  }

  Status GetObj(const ObjectId& id, std::string* data) override {
    return ReadObj(id, 0, server::kWholeObject, data);
  }

  Status ReadObj(const ObjectId& id, uint64_t offset, uint64_t length, std::string* data) override {
    if (length != server::kWholeObject &&
        (offset > kMaxObjectSize || length > kMaxObjectSize - offset)) {
      return Status::OutOfRange("read beyond 64 MiB");
    }
    data->clear();
    return ObjectCall(
        id, server::kReadObj,
        [&](Encoder& e) {
          e.U64(offset);
          e.U64(length);
        },
        data);
  }

  Status WriteObj(const ObjectId& id, uint64_t offset, std::string_view data) override {
    if (offset > kMaxObjectSize || data.size() > kMaxObjectSize - offset) {
      return Status::TooLarge("a write ending past 64 MiB");
    }
    std::string reply;
    return ObjectCall(
        id, server::kWriteObj,
        [&](Encoder& e) {
          e.U64(offset);
          e.Bytes(data);
        },
        &reply);
  }

  Status TruncateObj(const ObjectId& id, uint64_t size) override {
    std::string reply;
    return ObjectCall(
        id, server::kTruncateObj, [&](Encoder& e) { e.U64(size); }, &reply);
  }

  Status ObjSize(const ObjectId& id, uint64_t* size) override {
    std::string reply;
    PDPM_RETURN_IF_ERROR(ObjectCall(
        id, server::kObjSize, [](Encoder&) {}, &reply));
    Decoder d({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
    PDPM_RETURN_IF_ERROR(d.U64(size));
    return d.Done();
  }

  Status ListObj(uint32_t table, uint32_t tag, const ObjectId& start, uint32_t max,
                 std::vector<ObjectId>* out) override {
    out->clear();
    if (max > server::kMaxListObj) {
      return Status::InvalidArgument("list objects: at most " +
                                     std::to_string(server::kMaxListObj) + " ids a call");
    }
    std::string reply;
    PDPM_RETURN_IF_ERROR(WhileSegmentCreated([&] {
      return TableCall(
          [table](uint32_t count, uint32_t* t) {
            if (table == 0 || table > count) {
              return Status::InvalidArgument("table " + std::to_string(table) +
                                             ": the cluster has tables 1.." +
                                             std::to_string(count));
            }
            *t = table;
            return Status::OK();
          },
          server::kListObj,
          [&](uint32_t t, std::string* body) {
            Encoder e(body);
            e.U64(t);
            e.U64(tag);
            e.Id(start);
            e.U64(max);
          },
          /*idempotent=*/true, &reply);
    }));
    Decoder d({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
    uint64_t count = 0;
    PDPM_RETURN_IF_ERROR(d.U64(&count));
    if (count > max) return Status::Corruption("list objects: more ids than asked for");
    out->resize(count);
    for (ObjectId& id : *out) PDPM_RETURN_IF_ERROR(d.Id(&id));
    return d.Done();
  }

  Status Space(uint64_t* capacity, uint64_t* used) override {
    v1::ClusterStatus st;
    PDPM_RETURN_IF_ERROR(monitor_->GetClusterStatus(&st).WithContext("monitor"));
    const uint64_t copies = std::max<uint32_t>(1, st.replica_count());
    *capacity = st.capacity_bytes() / copies;
    *used = std::min(st.used_bytes() / copies, *capacity);
    return Status::OK();
  }

  Status TableCall(const TableRoute& route, uint16_t method, const TableBody& body, bool idempotent,
                   std::string* reply) override {
    uint32_t table = 0;
    return Call(
        [&](const Mapping& m, uint32_t* server) {
          if (m.table_count == 0) return Status::Unavailable("the cluster has no table map");
          PDPM_RETURN_IF_ERROR(route(m.table_count, &table));
          return TableOwner(m, table, server);
        },
        method,
        [&](Encoder& e) {
          std::string b;
          body(table, &b);
          e.Bytes(b);
        },
        reply, idempotent);
  }

  void TableCallAll(std::span<TableCallArgs> calls) override {
    // First attempts in the order of their servers (the locks of their
    // connections are held together: one order for every thread).
    auto m = Snapshot();
    struct Attempt {
      size_t call;
      uint32_t table = 0;
      uint32_t server = 0;
      std::string request;
      ConnRef ref;
      bool posted = false;
    };
    std::vector<Attempt> attempts;
    std::vector<size_t> again;  // calls to run as a TableCall
    for (size_t i = 0; i < calls.size(); ++i) {
      uint32_t table = 0, server = 0;
      if (m->table_count == 0 || !calls[i].route(m->table_count, &table).ok() ||
          !TableOwner(*m, table, &server).ok()) {
        again.push_back(i);  // TableCall answers it, refreshing as it does
        continue;
      }
      Attempt& a = attempts.emplace_back();
      a.call = i;
      a.table = table;
      a.server = server;
      Encoder e(&a.request);
      e.Header({m->epoch, credential_});
      std::string body;
      calls[i].body(table, &body);
      e.Bytes(body);
    }
    std::stable_sort(attempts.begin(), attempts.end(),
                     [](const Attempt& a, const Attempt& b) { return a.server < b.server; });
    for (size_t k = 0; k < attempts.size(); ++k) {
      Attempt& a = attempts[k];
      if ((k > 0 && attempts[k - 1].server == a.server) || !GetConn(*m, a.server, &a.ref).ok()) {
        Release(&a.ref);
        again.push_back(a.call);
        continue;
      }
      Status s = a.ref.conn->rpc->Start(
          calls[a.call].method,
          {reinterpret_cast<const uint8_t*>(a.request.data()), a.request.size()});
      a.posted = s.ok();
      if (!a.posted) Finished(a.server, &a.ref, std::move(s), &calls[a.call], &again, a.call);
    }
    for (Attempt& a : attempts) {
      if (!a.posted) continue;
      TableCallArgs& c = calls[a.call];
      c.reply.clear();
      const uint32_t table = a.table;
      const net::GiveUpFn give_up =
          GiveUpWhen(*m, [table, server = a.server](const Mapping& newest) {
            uint32_t now_at = 0;
            return IsDown(newest, server) && TableOwner(newest, table, &now_at).ok() &&
                   now_at != server;
          });
      Finished(a.server, &a.ref, a.ref.conn->rpc->Finish(&c.reply, give_up), &c, &again, a.call);
      Release(&a.ref);  // free for other threads while the rest is awaited
    }
    attempts.clear();  // every connection unlocked before the TableCalls
    std::sort(again.begin(), again.end());
    for (size_t i : again) {
      TableCallArgs& c = calls[i];
      c.status = TableCall(c.route, c.method, c.body, c.idempotent, &c.reply);
    }
  }

  Status DelObj(const ObjectId& id) override {
    std::string reply;
    return ObjectCall(
        id, server::kDelObj, [](Encoder&) {}, &reply);
  }

 private:
  using Conn = ServerConns::Conn;
  using Route = std::function<Status(const Mapping&, uint32_t* server)>;
  using Body = std::function<void(Encoder&)>;

  std::shared_ptr<const Mapping> Snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return mapping_;
  }

  // Whether the current mapping has `server` at another address than `old`.
  bool Moved(const Mapping& old, uint32_t server) const {
    auto now = Snapshot();
    auto a = old.servers.find(server);
    auto b = now->servers.find(server);
    return a == old.servers.end() || b == now->servers.end() ||
           a->second.address != b->second.address;
  }

  static Status SegmentServer(const Mapping& m, const GlobalAddress& addr, uint32_t* server) {
    auto it = m.segments.find(addr.segment);
    if (it == m.segments.end()) {
      return Status::NotFound("address " + addr.ToString() + ": segment not mapped");
    }
    *server = it->second.server;
    return Status::OK();
  }

  // A connection for this thread to one server, locked; keeps its
  // ServerConns alive even if a refresh replaces it meanwhile.
  struct ConnRef {
    std::shared_ptr<ServerConns> owner;
    Conn* conn = nullptr;
    std::unique_lock<std::mutex> lock;  // destroyed before owner
  };

  // Unlocks `ref`'s connection, then lets its owner go.
  static void Release(ConnRef* ref) {
    if (ref->lock.owns_lock()) ref->lock.unlock();
    ref->conn = nullptr;
    ref->owner.reset();
  }

  // Connects on first use, or again after the connection broke.
  Status GetConn(const Mapping& m, uint32_t server, ConnRef* ref) {
    auto it = m.servers.find(server);
    if (it == m.servers.end()) return Status::NotFound("no server " + std::to_string(server));
    {
      std::lock_guard<std::mutex> l(conns_mu_);
      auto& slot = conns_[server];
      if (slot == nullptr || slot->address() != it->second.address) {
        slot = std::make_shared<ServerConns>(it->second.address, it->second.cores,
                                             options_.connections_per_server, kStagingSize);
      }
      ref->owner = slot;
    }
    const size_t preferred = std::hash<std::thread::id>{}(std::this_thread::get_id());
    Status s = ref->owner->Acquire(transport_.get(),
                                   server::DataPlaneRpcOptions(1, options_.op_timeout_ms),
                                   preferred, &ref->conn, &ref->lock);
    if (!s.ok()) ref->conn = nullptr;
    if (s.code() == StatusCode::kUnavailable) {
      return Status::Unavailable("server " + std::to_string(server) + " at " +
                                 std::string(s.message()));
    }
    return s;
  }

  // An RPC routed by `route`, refreshed and retried once when the server
  // refuses the epoch or the route (kStaleEpoch) or cannot be reached
  // (the server may have restarted elsewhere).
  // `idempotent` false: a request that may have reached the server (its
  // connection failed or timed out after sending) is not sent again — its
  // outcome is unknown and the caller gets kUnavailable.
  Status Call(const Route& route, uint16_t method, const Body& body, std::string* reply,
              bool idempotent = true) {
    Status s;
    const auto deadline = FailoverDeadline();
    for (int attempt = 0;; attempt++) {
      auto m = Snapshot();
      uint32_t server = 0;
      s = route(*m, &server);
      // A route the mapping cannot give — an object it does not know
      // (kNotFound), or no table map yet (kUnavailable: the client started
      // before any server joined, as a gateway may in Kubernetes; nothing
      // else refreshes its mapping) — is tried once more on a fresh one.
      if ((s.code() == StatusCode::kNotFound || s.code() == StatusCode::kUnavailable) &&
          attempt == 0) {
        PDPM_RETURN_IF_ERROR(RefreshMapping());
        continue;
      }
      PDPM_RETURN_IF_ERROR(s);
      std::string req;
      Encoder e(&req);
      e.Header({m->epoch, credential_});
      body(e);
      ConnRef ref;
      bool maybe_applied = false;
      bool answered = false;
      s = GetConn(*m, server, &ref);
      if (s.ok()) {
        reply->clear();
        s = ref.conn->rpc->Call(method, {reinterpret_cast<const uint8_t*>(req.data()), req.size()},
                                reply, 0, GiveUpWhenRerouted(*m, route, server));
        answered = ref.conn->rpc->replied();
        maybe_applied = DropIfFailed(ref.conn, s);
      }
      const bool retry = Retryable(server, idempotent, maybe_applied, &s);
      if (!retry) break;
      if (!MayRetry(*m, attempt, deadline)) {
        s = AfterFailoverWait(*m, s, server);
        break;
      }
      if (ref.lock.owns_lock()) ref.lock.unlock();
      if (s.code() == StatusCode::kUnavailable && !answered) ReportUnreachable(*m, server);
      Status r = RefreshMapping();
      if (!r.ok() && m->replica_count == 1) {
        s = WithReloadFailure(s, r);
        break;
      }
      // Without replication an unreachable server is retried only if it
      // moved meanwhile; with it, until a backup takes over.
      if (s.code() == StatusCode::kUnavailable && m->replica_count == 1 && !Moved(*m, server)) {
        break;
      }
    }
    return s;
  }

  // After an RPC on `c` ended with `s`: whether the request may have been
  // applied though it failed (kUnavailable or kTimeout: a server's answer
  // with those codes may come after a mutation it could not ship). The
  // connection is dropped only when the server did not answer (timed out,
  // abandoned, broken): a server's refusal ("lease expired", "not open
  // here yet") leaves it usable — connecting again costs a registration of
  // its buffers, seconds each under an emulated RDMA device.
  static bool DropIfFailed(Conn* c, const Status& s) {
    if (!IsConnectionFailure(s)) return false;
    if (!c->rpc->replied()) c->rpc.reset();
    return true;
  }

  // Whether an attempt that failed with `*s` on `server` may go again: a
  // refused epoch or route always, an unreachable server unless the request
  // may have reached it (`maybe_applied`) and must not run twice. A timeout
  // becomes kUnavailable naming the server.
  static bool Retryable(uint32_t server, bool idempotent, bool maybe_applied, Status* s) {
    if (s->code() == StatusCode::kTimeout) {
      *s = Status::Unavailable("server " + std::to_string(server) + ": " +
                               std::string(s->message()));
    }
    return s->code() == StatusCode::kStaleEpoch ||
           (s->code() == StatusCode::kUnavailable && (idempotent || !maybe_applied));
  }

  // The outcome `s` of a TableCallAll attempt on `server`, as Call judges
  // it: final, or the call goes on as a TableCall (added to `again`).
  static void Finished(uint32_t server, ConnRef* ref, Status s, TableCallArgs* call,
                       std::vector<size_t>* again, size_t index) {
    const bool maybe_applied = DropIfFailed(ref->conn, s);
    if (Retryable(server, call->idempotent, maybe_applied, &s)) {
      again->push_back(index);
    } else {
      call->status = std::move(s);
    }
  }

  // `failed`, with why the mapping that might have routed around it could
  // not be reloaded.
  static Status WithReloadFailure(const Status& failed, const Status& reload) {
    return Status(failed.code(),
                  std::string(failed.message()) + "; mapping not reloaded: " + reload.ToString());
  }

  // With replication, a server this client cannot reach is reported to the
  // monitor, which fails it over at once when its address refuses
  // connections (the process is gone) rather than after the heartbeat
  // timeouts. Once per server and epoch; best effort (the heartbeats decide
  // otherwise).
  void ReportUnreachable(const Mapping& m, uint32_t server) {
    // The monitor confirms a report with a TCP connect to the data address
    // (monitor/probe.h), which on verbs is rdma_cm's port and refuses even
    // a live server: there the heartbeat timeouts decide alone.
    if (m.replica_count == 1 || options_.transport != net::BackendKind::kTcp) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      uint64_t& last = reported_[server];
      if (last == m.epoch) return;
      last = m.epoch;
    }
    v1::ReportUnreachableRequest req;
    req.set_server_id(server);
    v1::ReportUnreachableResponse resp;
    (void)monitor_->ReportUnreachable(req, &resp);
  }

  static Status ObjectRoute(const Mapping& m, const ObjectId& id, uint32_t* table,
                            uint32_t* server) {
    if (m.table_count == 0) return Status::Unavailable("the cluster has no table map");
    *table = monitor::TableForObject(id.hi, id.lo, m.table_count);
    return TableOwner(m, *table, server);
  }

  static Status TableOwner(const Mapping& m, uint32_t table, uint32_t* server) {
    auto it = m.table_owner.find(table);
    if (it == m.table_owner.end() || it->second == 0) {
      return Status::Unavailable("table " + std::to_string(table) + " has no server");
    }
    *server = it->second;
    return Status::OK();
  }

  std::chrono::steady_clock::time_point FailoverDeadline() const {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.failover_wait_ms);
  }

  // Whether a failed attempt is retried: once without replication; with
  // it, until `deadline` (the cluster reconfigures meanwhile), pausing a
  // little more each time.
  static bool MayRetry(const Mapping& m, int attempt,
                       std::chrono::steady_clock::time_point deadline) {
    if (m.replica_count == 1) return attempt == 0;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 5)));
    return true;
  }

  // `failed` (kUnavailable from `server`) when the failover wait of a
  // replicated cluster (`m`) has ended, with what the newest view says of
  // the server: whether the cluster may still move the data (the server is
  // only suspected) or cannot (it is down, and no in-sync copy of the data
  // was left to take over: served again once the server returns).
  Status AfterFailoverWait(const Mapping& m, const Status& failed, uint32_t server) const {
    if (m.replica_count == 1 || failed.code() != StatusCode::kUnavailable) return failed;
    auto newest = Snapshot();
    auto it = newest->servers.find(server);
    const std::string state =
        it == newest->servers.end() ? "no longer a member of the cluster"
        : it->second.down ? "down, and no in-sync copy of this data was left to take over: it is "
                            "served again once that server returns"
        : it->second.up   ? "up"
                          : "suspected (missing heartbeats), not declared down yet";
    return Status::Unavailable(std::string(failed.message()) + "; after the failover wait (" +
                               std::to_string(options_.failover_wait_ms) + " ms) the view (epoch " +
                               std::to_string(newest->epoch) + ") still routes to server " +
                               std::to_string(server) + ", which is " + state);
  }

  // `call` again while its server refuses it with kAborted (nothing done:
  // the segment it needs — its table's, or a heap segment with room — is
  // being created there, which may take longer than a reply timeout),
  // until the failover wait ends.
  Status WhileSegmentCreated(const std::function<Status()>& call) {
    const auto deadline = FailoverDeadline();
    uint32_t backoff_us = 100;
    while (true) {
      Status s = call();
      if (s.code() != StatusCode::kAborted || std::chrono::steady_clock::now() > deadline) return s;
      std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
      backoff_us = std::min<uint32_t>(backoff_us * 2, 5000);
    }
  }

  Status ObjectCall(const ObjectId& id, uint16_t method, const Body& body, std::string* reply) {
    return WhileSegmentCreated([&] {
      return Call(
          [&](const Mapping& m, uint32_t* server) {
            uint32_t table = 0;
            return ObjectRoute(m, id, &table, server);
          },
          method,
          [&](Encoder& e) {
            e.Id(id);
            body(e);
          },
          reply);
    });
  }

  // Whether `addr` is a heap address this client may read or write.
  static Status CheckHeapAccess(const GlobalAddress& addr, bool write) {
    if (addr.is_null()) return Status::InvalidArgument("the null address");
    PDPM_RETURN_IF_ERROR(addr.descriptor.Validate());
    if (addr.kind() != dsm::SpaceKind::kHeap) {
      return Status::InvalidArgument(addr.ToString() +
                                     " is in the object space: use the object operations");
    }
    if (write ? !addr.descriptor.can_write() : !addr.descriptor.can_read()) {
      return Status::PermissionDenied(addr.ToString() + " is not " +
                                      (write ? "writable" : "readable"));
    }
    return Status::OK();
  }

  // `persist`: a write waits for remote persistence (Write) or not
  // (WriteUnpersisted, on a segment without copies).
  Status OneSided(const GlobalAddress& addr, char* buf, uint64_t len, bool write,
                  bool persist = true) {
    PDPM_RETURN_IF_ERROR(CheckHeapAccess(addr, write));
    Status s;
    const auto deadline = FailoverDeadline();
    for (int attempt = 0;; attempt++) {
      auto m = Snapshot();
      PDPM_RETURN_IF_ERROR(addr.CheckRange(len, m->segment_size));
      if (len == 0) return Status::OK();
      auto it = m->segments.find(addr.segment);
      if (it == m->segments.end()) {
        if (attempt > 0) {
          return Status::NotFound("address " + addr.ToString() + ": segment not mapped");
        }
        PDPM_RETURN_IF_ERROR(RefreshMapping());
        continue;
      }
      const Mapping::Seg& seg = it->second;
      // Copies must never differ: a segment with copies takes only
      // persisted writes.
      const bool persisted = persist || m->replica_count > 1 || !seg.backups.empty() || seg.syncing;
      if (write && seg.syncing) {
        // A backup is being filled: the primary writes and ships (it orders
        // the write with the fill).
        return HeapWriteThroughPrimary(addr, buf, len);
      }
      uint32_t failed = seg.server;
      const net::GiveUpFn give_up = GiveUpWhenMoved(*m, addr.segment);
      if (write && !seg.backups.empty()) {
        // A write is durable only once every in-sync copy has it: it goes
        // to all of them at once.
        std::vector<Mapping::Copy> copies{{seg.server, seg.key}};
        copies.insert(copies.end(), seg.backups.begin(), seg.backups.end());
        s = WriteCopies(*m, copies, addr.offset, buf, len, give_up, &failed);
      } else {
        ConnRef ref;
        s = GetConn(*m, seg.server, &ref);
        if (s.ok()) {
          s = Transfer(ref.conn, seg.key, addr.offset, buf, len, write, persisted, give_up);
        }
      }
      bool retry =
          s.code() == StatusCode::kPermissionDenied || s.code() == StatusCode::kUnavailable;
      if (!retry) break;
      if (!MayRetry(*m, attempt, deadline)) {
        s = AfterFailoverWait(*m, s, failed);
        break;
      }
      // A refused key or a lost server: the server may have restarted with
      // new keys, or the cluster is moving the segment. Reload and retry.
      if (s.code() == StatusCode::kUnavailable) ReportUnreachable(*m, failed);
      Status r = RefreshMapping();
      if (!r.ok() && m->replica_count == 1) {
        s = WithReloadFailure(s, r);
        break;
      }
      if (s.code() == StatusCode::kUnavailable && m->replica_count == 1 && !Moved(*m, failed)) {
        break;
      }
    }
    return s;
  }

  Status HeapWriteThroughPrimary(const GlobalAddress& addr, const char* buf, uint64_t len) {
    std::string reply;
    for (uint64_t done = 0; done < len;) {
      uint64_t n = std::min<uint64_t>(len - done, kMaxObjectSize);
      GlobalAddress at = addr;
      at.offset += done;
      PDPM_RETURN_IF_ERROR(
          Call([&](const Mapping& m, uint32_t* server) { return SegmentServer(m, at, server); },
               server::kHeapWrite,
               [&](Encoder& e) {
                 e.Address(at);
                 e.Bytes(std::string_view(buf + done, n));
               },
               &reply));
      done += n;
    }
    return Status::OK();
  }

  // Writes buf to [offset, offset+len) of every copy, persisted, each
  // staged chunk posted to all copies before any completion is awaited.
  // `*failed` names the copy whose server failed first.
  // With copies, a wait on a server that stopped answering ends as soon as
  // a newer view has moved what the wait is for (`moved`, given the newest
  // view) rather than after the op timeout: the op is retried where the
  // data went (docs/replication.md "Leases"). Only a wait that has lasted
  // options_.hang_suspicion_ms asks, and the monitor is asked first only whether its
  // epoch is newer than the client's — the newest the client knows, not
  // `m`'s: a view that changed something else (a table moved off the
  // server when it turned SUSPECT) must not end the asking before the one
  // that moves the data.
  net::GiveUpFn GiveUpWhen(const Mapping& m, std::function<bool(const Mapping&)> moved) {
    if (m.replica_count == 1 || options_.hang_suspicion_ms == 0) return {};
    const auto ask_from =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.hang_suspicion_ms);
    return [this, moved = std::move(moved), ask_from] {
      if (std::chrono::steady_clock::now() < ask_from) return false;
      auto current = Snapshot();
      if (moved(*current)) return true;
      v1::GetMappingResponse resp;
      if (!monitor_->GetMapping(current->epoch, &resp).ok() || resp.unchanged()) return false;
      if (!RefreshMapping().ok()) return false;
      return moved(*Snapshot());
    };
  }

  // For a one-sided op on `segment`: its copies in the newest view differ
  // from `m`'s.
  net::GiveUpFn GiveUpWhenMoved(const Mapping& m, uint32_t segment) {
    return GiveUpWhen(
        m, [&m, segment](const Mapping& newest) { return CopiesDiffer(m, newest, segment); });
  }

  // For an RPC to `server`: the newest view declared it DOWN and routes
  // the call elsewhere. Only DOWN: an RPC may not be sent twice, so a
  // server that is merely slow (SUSPECT, or a table moved off it) is waited
  // for — abandoning its reply would turn a success into kUnavailable.
  net::GiveUpFn GiveUpWhenRerouted(const Mapping& m, const Route& route, uint32_t server) {
    return GiveUpWhen(m, [&route, server](const Mapping& newest) {
      uint32_t now_at = 0;
      return IsDown(newest, server) && route(newest, &now_at).ok() && now_at != server;
    });
  }

  static bool IsDown(const Mapping& m, uint32_t server) {
    auto it = m.servers.find(server);
    return it == m.servers.end() || it->second.down;
  }

  static bool CopiesDiffer(const Mapping& a, const Mapping& b, uint32_t segment) {
    auto x = a.segments.find(segment);
    auto y = b.segments.find(segment);
    if (x == a.segments.end() || y == b.segments.end()) return true;
    const Mapping::Seg& s = x->second;
    const Mapping::Seg& t = y->second;
    if (s.server != t.server || s.key != t.key || s.syncing != t.syncing ||
        s.backups.size() != t.backups.size()) {
      return true;
    }
    for (size_t i = 0; i < s.backups.size(); i++) {
      if (s.backups[i].server != t.backups[i].server || s.backups[i].key != t.backups[i].key) {
        return true;
      }
    }
    return false;
  }

  Status WriteCopies(const Mapping& m, std::vector<Mapping::Copy> copies, uint64_t offset,
                     const char* buf, uint64_t len, const net::GiveUpFn& give_up,
                     uint32_t* failed) {
    // Connections of several servers are taken in the order of servers
    // (ServerConns::Acquire), so threads writing overlapping sets of
    // copies cannot deadlock.
    std::sort(copies.begin(), copies.end(),
              [](const Mapping::Copy& a, const Mapping::Copy& b) { return a.server < b.server; });
    std::vector<ConnRef> refs(copies.size());
    std::vector<net::BufferPool::Buffer> staging(copies.size());
    for (size_t i = 0; i < copies.size(); i++) {
      *failed = copies[i].server;
      PDPM_RETURN_IF_ERROR(GetConn(m, copies[i].server, &refs[i]));
      PDPM_RETURN_IF_ERROR(refs[i].conn->staging->Acquire(&staging[i]));
    }
    std::vector<uint64_t> ids(copies.size());
    for (uint64_t done = 0; done < len;) {
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kStagingSize, len - done));
      Status first;
      size_t first_failed = 0;
      size_t posted = 0;
      for (; posted < copies.size(); posted++) {
        std::memcpy(staging[posted].data(), buf + done, n);
        net::Op op;
        op.opcode = net::Opcode::kWrite;
        op.id = ids[posted] = ++op_id_;
        op.local = staging[posted].local(n);
        op.remote_key = copies[posted].key;
        op.remote_offset = offset + done;
        op.persist = true;
        first = refs[posted].conn->rpc->connection().Post({&op, 1});
        if (!first.ok()) {
          first_failed = posted;
          break;
        }
      }
      // Every posted op is awaited, even after a failure: its staging
      // buffer must not be reused while the transport may still read it.
      for (size_t i = 0; i < posted; i++) {
        Status s = net::AwaitCompletion(refs[i].conn->rpc->connection(), ids[i], give_up);
        // A connection whose op failed or was abandoned is dropped (the
        // transport lets go of the op's staging buffer with it).
        if (IsConnectionFailure(s)) refs[i].conn->rpc.reset();
        if (!s.ok() && first.ok()) {
          first = s;
          first_failed = i;
        }
      }
      if (!first.ok()) {
        *failed = copies[first_failed].server;
        if (!IsConnectionFailure(first)) return first;
        return Status::Unavailable(std::string(first.message()));
      }
      done += n;
    }
    return Status::OK();
  }

  Status Transfer(Conn* c, uint32_t key, uint64_t offset, char* buf, uint64_t len, bool write,
                  bool persist, const net::GiveUpFn& give_up) {
    net::BufferPool::Buffer staging;
    PDPM_RETURN_IF_ERROR(c->staging->Acquire(&staging));
    for (uint64_t done = 0; done < len;) {
      uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kStagingSize, len - done));
      if (write) std::memcpy(staging.data(), buf + done, n);
      net::Op op;
      op.opcode = write ? net::Opcode::kWrite : net::Opcode::kRead;
      op.id = ++op_id_;
      op.local = staging.local(n);
      op.remote_key = key;
      op.remote_offset = offset + done;
      op.persist = write && persist;
      Status s = net::ExecuteSync(c->rpc->connection(), op, give_up);
      if (IsConnectionFailure(s)) {
        c->rpc.reset();
        return Status::Unavailable(std::string(s.message()));
      }
      PDPM_RETURN_IF_ERROR(s);
      if (!write) std::memcpy(buf + done, staging.data(), n);
      done += n;
    }
    return Status::OK();
  }

  const ClientOptions options_;
  const uint64_t credential_;
  std::unique_ptr<monitor::MonitorClient> monitor_;
  std::unique_ptr<net::Transport> transport_;
  mutable std::mutex mu_;
  std::shared_ptr<const Mapping> mapping_;  // guarded by mu_
  std::mutex refresh_mu_;
  std::map<uint32_t, uint64_t> reported_;  // server -> epoch it was reported unreachable in; mu_
  std::mutex conns_mu_;
  std::map<uint32_t, std::shared_ptr<ServerConns>> conns_;  // guarded by conns_mu_
  std::atomic<uint64_t> next_server_{0};
  std::atomic<uint64_t> op_id_{0};
  std::mutex tx_mu_;
  // Last: destroyed first (it sends pending truncations through the above).
  std::unique_ptr<TxCoordinator> tx_;
};

}  // namespace

Status Client::Open(const ClientOptions& options, std::unique_ptr<Client>* out) {
  auto c = std::make_unique<ClientImpl>(options);
  PDPM_RETURN_IF_ERROR(c->Init());
  *out = std::move(c);
  return Status::OK();
}

}  // namespace pdpm::client
