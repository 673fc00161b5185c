// In-process tests of ViewManager over a real FileViewStore: concurrency
// (also run under ThreadSanitizer, which the gRPC-based process tests cannot
// be: Debian's gRPC is not instrumented) and recovery of the stored view.
#include "monitor/view_manager.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "monitor/file_view_store.h"

namespace pdpm::monitor {
namespace {

namespace fs = std::filesystem;
constexpr char kSecret[] = "s3cret";
constexpr uint64_t kSegmentSize = 4ULL << 20;

class ViewManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pdpm-viewmanager-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    null_fd_ = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(null_fd_, 0);
    options_.segment_size = kSegmentSize;
    options_.replicas = 2;
    options_.tables = 16;
    options_.cluster_secret = kSecret;
  }
  void TearDown() override {
    manager_.reset();
    store_.reset();
    close(null_fd_);
    fs::remove_all(dir_);
  }

  void Open() {
    manager_.reset();
    store_.reset();
    ASSERT_TRUE(FileViewStore::Open(dir_, &store_).ok());
    Status s = ViewManager::Open(store_.get(), options_, Logger("monitor", null_fd_), &manager_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  v1::GetMappingResponse Mapping() {
    v1::GetMappingResponse m;
    EXPECT_TRUE(manager_->GetMapping(v1::GetMappingRequest(), &m).ok());
    return m;
  }

 public:
  static v1::RegisterServerRequest NewServer(int n) {
    v1::RegisterServerRequest req;
    req.set_cluster_secret(kSecret);
    req.mutable_info()->set_address("10.0.0." + std::to_string(n) + ":7000");
    req.mutable_info()->set_transport("tcp");
    req.set_segment_count(64);
    req.set_segment_size(kSegmentSize);
    return req;
  }

 protected:
  std::string dir_;
  int null_fd_ = -1;
  MonitorOptions options_;
  std::unique_ptr<FileViewStore> store_;
  std::unique_ptr<ViewManager> manager_;
};

TEST_F(ViewManagerTest, ConcurrentCallsKeepTheViewConsistent) {
  // The epoch count below assumes no liveness change: on a loaded host the
  // servers that never heartbeat went DOWN within the default timeouts.
  options_.suspect_timeout = std::chrono::minutes(1);
  options_.down_timeout = std::chrono::minutes(2);
  ASSERT_NO_FATAL_FAILURE(Open());
  constexpr int kThreads = 4, kServersEach = 3, kSegmentsEach = 6;
  std::atomic<int> errors{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  threads.reserve(kThreads + 1);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint32_t> mine;
      for (int i = 0; i < kServersEach; ++i) {
        v1::RegisterServerResponse r;
        if (!manager_->RegisterServer(NewServer(t * 10 + i), &r).ok()) ++errors;
        mine.push_back(r.server_id());
      }
      for (int i = 0; i < kSegmentsEach; ++i) {
        v1::AllocateSegmentRequest a;
        a.set_cluster_secret(kSecret);
        a.set_server_id(mine[static_cast<size_t>(i) % mine.size()]);
        a.set_local_index(static_cast<uint32_t>(i / kServersEach));
        a.set_access_key(static_cast<uint32_t>(t * 100 + i));
        v1::AllocateSegmentResponse ar;
        if (!manager_->AllocateSegment(a, &ar).ok()) ++errors;
        v1::HeartbeatRequest hb;
        hb.set_cluster_secret(kSecret);
        hb.set_server_id(mine[0]);
        hb.set_used_bytes(static_cast<uint64_t>(i));
        v1::HeartbeatResponse hr;
        if (!manager_->Heartbeat(hb, &hr).ok()) ++errors;
        v1::GetMappingResponse m;
        v1::GetMappingRequest mr;
        if (!manager_->GetMapping(mr, &m).ok()) ++errors;
      }
    });
  }
  threads.emplace_back([&] {
    while (!done) {
      manager_->CheckLiveness();
      v1::ClusterStatus st;
      if (!manager_->GetClusterStatus(&st).ok()) ++errors;
    }
  });
  for (int t = 0; t < kThreads; ++t) threads[static_cast<size_t>(t)].join();
  done = true;
  threads.back().join();
  EXPECT_EQ(errors.load(), 0);

  v1::GetMappingResponse m;
  ASSERT_TRUE(manager_->GetMapping(v1::GetMappingRequest(), &m).ok());
  EXPECT_EQ(m.servers_size(), kThreads * kServersEach);
  EXPECT_EQ(m.segments_size(), kThreads * kSegmentsEach);
  // One epoch per registration and per allocation, none lost or doubled.
  EXPECT_EQ(m.epoch(), 1u + kThreads * kServersEach + kThreads * kSegmentsEach);
  std::set<uint64_t> numbers;
  std::set<std::pair<uint32_t, uint32_t>> slots;
  for (const auto& seg : m.segments()) {
    numbers.insert(seg.segment());
    EXPECT_TRUE(slots.insert({seg.primary().server_id(), seg.primary().local_index()}).second);
    ASSERT_EQ(seg.backups_size(), 1);
    EXPECT_NE(seg.backups(0).server_id(), seg.primary().server_id());
    EXPECT_TRUE(slots.insert({seg.backups(0).server_id(), seg.backups(0).local_index()}).second)
        << "a local segment holds two replicas";
  }
  EXPECT_EQ(numbers.size(), static_cast<size_t>(kThreads * kSegmentsEach));

  // What a new manager loads from the store is exactly what was served.
  v1::GetSegmentKeysRequest kr;
  kr.set_cluster_secret(kSecret);
  v1::GetSegmentKeysResponse keys_before;
  ASSERT_TRUE(manager_->GetSegmentKeys(kr, &keys_before).ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  v1::GetSegmentKeysResponse keys_after;
  ASSERT_TRUE(manager_->GetSegmentKeys(kr, &keys_after).ok());
  EXPECT_EQ(keys_after.SerializeAsString(), keys_before.SerializeAsString());
  EXPECT_EQ(manager_->epoch(), m.epoch());
}

TEST_F(ViewManagerTest, RestartedServerReannouncesANewKey) {
  ASSERT_NO_FATAL_FAILURE(Open());
  v1::RegisterServerResponse r;
  ASSERT_TRUE(manager_->RegisterServer(NewServer(1), &r).ok());
  v1::AllocateSegmentRequest a;
  a.set_cluster_secret(kSecret);
  a.set_server_id(r.server_id());
  a.set_local_index(0);
  a.set_access_key(7);
  v1::AllocateSegmentResponse first, again;
  ASSERT_TRUE(manager_->AllocateSegment(a, &first).ok());
  a.set_access_key(8);  // the server re-registered its segment: new key
  ASSERT_TRUE(manager_->AllocateSegment(a, &again).ok());
  EXPECT_EQ(again.mapping().segment(), first.mapping().segment());
  EXPECT_EQ(again.epoch(), first.epoch() + 1);  // clients' cached keys are stale
  v1::GetSegmentKeysRequest kr;
  kr.set_cluster_secret(kSecret);
  v1::GetSegmentKeysResponse keys;
  ASSERT_TRUE(manager_->GetSegmentKeys(kr, &keys).ok());
  EXPECT_EQ(keys.segments(0).access_key(), 8u);
}

// A loopback socket bound to a free port, listening or not: its address
// accepts connections, or refuses them like a dead server's.
class LoopbackPort {
 public:
  explicit LoopbackPort(bool listening) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    if (listening) {
      EXPECT_EQ(::listen(fd_, 4), 0);
    }
    address_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  ~LoopbackPort() { ::close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

// Registers a server at `primary` and one at `backup`, and allocates a
// segment on the first whose backup is on the second.
void RegisterWithASegmentBackedUpOnTheOther(ViewManager* manager, const LoopbackPort& primary,
                                            const LoopbackPort& backup,
                                            v1::RegisterServerResponse* rp,
                                            v1::RegisterServerResponse* rb) {
  v1::RegisterServerRequest req = ViewManagerTest::NewServer(1);
  req.mutable_info()->set_address(primary.address());
  ASSERT_TRUE(manager->RegisterServer(req, rp).ok());
  req = ViewManagerTest::NewServer(2);
  req.mutable_info()->set_address(backup.address());
  ASSERT_TRUE(manager->RegisterServer(req, rb).ok());
  v1::AllocateSegmentRequest a;
  a.set_cluster_secret(kSecret);
  a.set_server_id(rp->server_id());
  a.set_local_index(0);
  a.set_access_key(7);
  v1::AllocateSegmentResponse seg;
  ASSERT_TRUE(manager->AllocateSegment(a, &seg).ok());
  ASSERT_EQ(seg.mapping().backups_size(), 1);
}

TEST_F(ViewManagerTest, UnreachableReportDownsOnlyARefusingServer) {
  ASSERT_NO_FATAL_FAILURE(Open());
  LoopbackPort alive(true), dead(false);
  v1::RegisterServerResponse ra, rd;
  ASSERT_NO_FATAL_FAILURE(
      RegisterWithASegmentBackedUpOnTheOther(manager_.get(), alive, dead, &ra, &rd));

  v1::ReportUnreachableRequest report;
  report.set_cluster_secret(kSecret);
  report.set_server_id(ra.server_id());
  v1::ReportUnreachableResponse resp;
  const uint64_t before = manager_->epoch();
  ASSERT_TRUE(manager_->ReportUnreachable(report, &resp).ok());
  EXPECT_FALSE(resp.confirmed());  // it accepts connections: alive
  EXPECT_EQ(resp.epoch(), before);

  report.set_server_id(rd.server_id());
  ASSERT_TRUE(manager_->ReportUnreachable(report, &resp).ok());
  EXPECT_TRUE(resp.confirmed());
  EXPECT_GT(resp.epoch(), before);  // reconfigured before the answer
  v1::GetMappingRequest mr;
  v1::GetMappingResponse m;
  ASSERT_TRUE(manager_->GetMapping(mr, &m).ok());
  EXPECT_EQ(m.segments(0).backups_size(), 0) << m.DebugString();
  for (const auto& s : m.servers()) {
    EXPECT_EQ(s.state(), s.id() == rd.server_id() ? v1::SERVER_STATE_DOWN : v1::SERVER_STATE_UP);
  }

  // Heard from again: up.
  v1::HeartbeatRequest hb;
  hb.set_cluster_secret(kSecret);
  hb.set_server_id(rd.server_id());
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(manager_->Heartbeat(hb, &hr).ok());
  m.Clear();
  ASSERT_TRUE(manager_->GetMapping(mr, &m).ok());
  for (const auto& s : m.servers()) EXPECT_EQ(s.state(), v1::SERVER_STATE_UP);

  report.set_server_id(99);
  EXPECT_EQ(manager_->ReportUnreachable(report, &resp).code(), StatusCode::kNotFound);
  report.set_cluster_secret("wrong");
  EXPECT_EQ(manager_->ReportUnreachable(report, &resp).code(), StatusCode::kPermissionDenied);
}

// The real file store with a gate in front of CompareAndPut: closed, a put
// waits inside the store until the test opens it, as a put to an etcd that
// is starting or electing does.
class GatedViewStore : public ViewStore {
 public:
  explicit GatedViewStore(ViewStore* store) : store_(store) {}
  Status Load(v1::ClusterView* view, uint64_t* revision) override {
    return store_->Load(view, revision);
  }
  Status CompareAndPut(uint64_t expected_revision, const v1::ClusterView& view,
                       uint64_t* new_revision) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    return store_->CompareAndPut(expected_revision, view, new_revision);
  }
  std::string Describe() const override { return "gated " + store_->Describe(); }

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits until a put has entered the store `count` times in all.
  void AwaitEntered(int count) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= count; });
  }
  int entered() {
    std::lock_guard<std::mutex> lock(mu_);
    return entered_;
  }

 private:
  ViewStore* const store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int entered_ = 0;
};

class GatedViewManagerTest : public ViewManagerTest {
 protected:
  void OpenGated() {
    ASSERT_TRUE(FileViewStore::Open(dir_, &store_).ok());
    gate_ = std::make_unique<GatedViewStore>(store_.get());
    Status s = ViewManager::Open(gate_.get(), options_, Logger("monitor", null_fd_), &manager_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override {
    if (gate_ != nullptr) gate_->Open();
    manager_.reset();
    gate_.reset();
    ViewManagerTest::TearDown();
  }
  std::future<Status> HeartbeatAsync(uint32_t server_id, v1::HeartbeatResponse* resp) {
    return std::async(std::launch::async, [this, server_id, resp] {
      v1::HeartbeatRequest hb;
      hb.set_cluster_secret(kSecret);
      hb.set_server_id(server_id);
      return manager_->Heartbeat(hb, resp);
    });
  }
  std::unique_ptr<GatedViewStore> gate_;
};

// A heartbeat is answered, with the lease and the stored epoch, while a
// view change waits on the store: at etcd's start a server's first lease
// lapsed behind such a put (it took seconds), and the server stopped
// serving for nothing.
TEST_F(GatedViewManagerTest, HeartbeatIsAnsweredWhileAViewChangeIsBeingStored) {
  ASSERT_NO_FATAL_FAILURE(OpenGated());
  v1::RegisterServerResponse first;
  ASSERT_TRUE(manager_->RegisterServer(NewServer(1), &first).ok());
  const uint64_t stored = manager_->epoch();

  gate_->Close();
  const int puts = gate_->entered();
  auto join = std::async(std::launch::async, [this] {
    v1::RegisterServerResponse second;
    return manager_->RegisterServer(NewServer(2), &second);
  });
  gate_->AwaitEntered(puts + 1);
  v1::HeartbeatResponse hr;
  auto beat = HeartbeatAsync(first.server_id(), &hr);
  // Deterministic: were the heartbeat behind the put, it could not end
  // before the gate opens, which only happens after this wait.
  ASSERT_EQ(beat.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the heartbeat waited for the view store";
  Status s = beat.get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(hr.epoch(), stored) << "the epoch of the view stored, not of the one being stored";
  EXPECT_GT(hr.lease_ms(), 0u);
  gate_->Open();
  ASSERT_TRUE(join.get().ok());
  EXPECT_GT(manager_->epoch(), stored);
}

// Fencing with the heartbeat outside the view lock: a server that a
// reconfiguration counts DOWN gets no lease while that view is being
// stored (its segments are being handed to their backups); once stored,
// its heartbeat is answered with the new epoch, which a server whose lease
// lapsed applies before serving again.
TEST_F(GatedViewManagerTest, ServerBeingDeclaredDownGetsNoLeaseUntilTheViewIsStored) {
  ASSERT_NO_FATAL_FAILURE(OpenGated());
  LoopbackPort alive(true), dead(false);
  v1::RegisterServerResponse ra, rd;
  ASSERT_NO_FATAL_FAILURE(
      RegisterWithASegmentBackedUpOnTheOther(manager_.get(), alive, dead, &ra, &rd));
  const uint64_t before = manager_->epoch();

  gate_->Close();
  const int puts = gate_->entered();
  auto report = std::async(std::launch::async, [&] {
    v1::ReportUnreachableRequest r;
    r.set_cluster_secret(kSecret);
    r.set_server_id(rd.server_id());
    v1::ReportUnreachableResponse resp;
    Status s = manager_->ReportUnreachable(r, &resp);
    if (s.ok() && !resp.confirmed()) s = Status::Internal("the refusing server was not downed");
    return s;
  });
  gate_->AwaitEntered(puts + 1);
  v1::HeartbeatResponse hr;
  auto refused = HeartbeatAsync(rd.server_id(), &hr);
  ASSERT_EQ(refused.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the heartbeat waited for the view store";
  Status s = refused.get();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  // The other server is not being declared down: answered as ever.
  s = HeartbeatAsync(ra.server_id(), &hr).get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(hr.epoch(), before);

  gate_->Open();
  ASSERT_TRUE(report.get().ok());
  ASSERT_GT(manager_->epoch(), before);
  s = HeartbeatAsync(rd.server_id(), &hr).get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(hr.epoch(), manager_->epoch()) << "the view that took its segments";
}

// A drained server holds nothing: the cluster it left is healthy, and its
// PM is no longer counted as capacity.
TEST_F(ViewManagerTest, DrainedServerIsNeitherCapacityNorAProblem) {
  ASSERT_NO_FATAL_FAILURE(Open());
  v1::RegisterServerResponse rr;
  for (int n = 1; n <= 3; ++n) ASSERT_TRUE(manager_->RegisterServer(NewServer(n), &rr).ok());
  v1::ClusterStatus before;
  ASSERT_TRUE(manager_->GetClusterStatus(&before).ok());
  ASSERT_EQ(before.health(), v1::HEALTH_OK) << before.message();

  v1::DrainServerRequest drain;
  drain.set_cluster_secret(kSecret);
  drain.set_server_id(rr.server_id());
  v1::DrainServerResponse dr;
  ASSERT_TRUE(manager_->DrainServer(drain, &dr).ok());
  ASSERT_EQ(dr.state(), v1::SERVER_STATE_DRAINED) << dr.message();

  v1::ClusterStatus after;
  ASSERT_TRUE(manager_->GetClusterStatus(&after).ok());
  EXPECT_EQ(after.health(), v1::HEALTH_OK) << after.message();
  EXPECT_EQ(after.message(), "");
  EXPECT_EQ(after.capacity_bytes(), before.capacity_bytes() / 3 * 2);
  EXPECT_EQ(after.servers_up(), 2u);
  ASSERT_EQ(after.servers_size(), 3);
  EXPECT_EQ(after.servers(2).state(), v1::SERVER_STATE_DRAINED);
}

// The lease a server is granted ends before the monitor may declare it
// DOWN, measured from the server's send (earlier than the monitor's
// receipt), with room for a clock running slow.
TEST_F(ViewManagerTest, RegistrationAndHeartbeatsGrantALeaseShorterThanTheDownTimeout) {
  ASSERT_NO_FATAL_FAILURE(Open());
  v1::RegisterServerResponse rr;
  ASSERT_TRUE(manager_->RegisterServer(NewServer(1), &rr).ok());
  const uint64_t down_ms = static_cast<uint64_t>(options_.down_timeout.count());
  EXPECT_EQ(rr.down_timeout_ms(), down_ms);
  EXPECT_GT(rr.lease_ms(), 0u);
  EXPECT_LE(rr.lease_ms(), down_ms - down_ms / 10);
  v1::HeartbeatRequest hb;
  hb.set_cluster_secret(kSecret);
  hb.set_server_id(rr.server_id());
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(manager_->Heartbeat(hb, &hr).ok());
  EXPECT_EQ(hr.lease_ms(), rr.lease_ms());
}

// A join retried after its reply was lost (a timeout on a busy node) gets
// the member its first attempt created, also from a monitor reopened on
// the stored view; without a token, or with another, a join is a new
// member. (A second member for one server never heartbeats: it went DOWN
// and kept the cluster DEGRADED in the e2e run that found this.)
TEST_F(ViewManagerTest, RetriedJoinGetsTheSameMember) {
  ASSERT_NO_FATAL_FAILURE(Open());
  v1::RegisterServerRequest req = NewServer(1);
  req.set_join_token("0123456789abcdef0123456789abcdef");
  v1::RegisterServerResponse first, retried, other, untokened;
  ASSERT_TRUE(manager_->RegisterServer(req, &first).ok());
  ASSERT_TRUE(manager_->RegisterServer(req, &retried).ok());
  EXPECT_EQ(retried.server_id(), first.server_id());
  EXPECT_EQ(retried.cluster_uuid(), first.cluster_uuid());
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_TRUE(manager_->RegisterServer(req, &retried).ok());
  EXPECT_EQ(retried.server_id(), first.server_id());

  v1::RegisterServerRequest another = NewServer(2);
  another.set_join_token("fedcba9876543210fedcba9876543210");
  ASSERT_TRUE(manager_->RegisterServer(another, &other).ok());
  EXPECT_NE(other.server_id(), first.server_id());
  ASSERT_TRUE(manager_->RegisterServer(NewServer(3), &untokened).ok());
  ASSERT_TRUE(manager_->RegisterServer(NewServer(3), &retried).ok());
  EXPECT_NE(retried.server_id(), untokened.server_id());
  v1::GetMappingResponse m;
  ASSERT_TRUE(manager_->GetMapping(v1::GetMappingRequest(), &m).ok());
  EXPECT_EQ(m.servers_size(), 4);
}

// A server that missed heartbeats keeps its tables until it is DOWN:
// moving them off a SUSPECT server churned views under load (clients saw
// CLUSTERDOWN while the server was merely slow).
TEST_F(ViewManagerTest, SuspectServerKeepsItsTables) {
  options_.heartbeat_interval = std::chrono::milliseconds(10);
  options_.suspect_timeout = std::chrono::milliseconds(100);
  options_.down_timeout = std::chrono::minutes(10);
  ASSERT_NO_FATAL_FAILURE(Open());
  v1::RegisterServerResponse a, b;
  ASSERT_TRUE(manager_->RegisterServer(NewServer(1), &a).ok());
  ASSERT_TRUE(manager_->RegisterServer(NewServer(2), &b).ok());
  v1::GetMappingResponse before;
  ASSERT_TRUE(manager_->GetMapping(v1::GetMappingRequest(), &before).ok());
  int owned_by_b = 0;
  for (const auto& t : before.tables()) owned_by_b += t.server_id() == b.server_id();
  ASSERT_GT(owned_by_b, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both SUSPECT
  v1::HeartbeatRequest hb;
  hb.set_cluster_secret(kSecret);
  hb.set_server_id(a.server_id());
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(manager_->Heartbeat(hb, &hr).ok());  // a is UP again, b is not
  manager_->CheckLiveness();
  v1::GetMappingResponse after;
  ASSERT_TRUE(manager_->GetMapping(v1::GetMappingRequest(), &after).ok());
  EXPECT_EQ(after.epoch(), before.epoch());
  for (int i = 0; i < after.tables_size(); ++i) {
    EXPECT_EQ(after.tables(i).server_id(), before.tables(i).server_id()) << "table " << i + 1;
  }
}

TEST_F(ViewManagerTest, OptionsAreValidated) {
  options_.suspect_timeout = options_.heartbeat_interval;
  EXPECT_EQ(options_.Validate().code(), StatusCode::kInvalidArgument);
  options_.suspect_timeout = std::chrono::milliseconds(5000);
  options_.down_timeout = std::chrono::milliseconds(4000);
  EXPECT_EQ(options_.Validate().code(), StatusCode::kInvalidArgument);
  options_.down_timeout = std::chrono::milliseconds(9000);
  EXPECT_TRUE(options_.Validate().ok());
  options_.cluster_secret.clear();
  EXPECT_EQ(options_.Validate().code(), StatusCode::kInvalidArgument);
}

// Server-local segments (a server's transaction log) are in no mapping;
// the view records them per server and no copy is ever placed on one.
class ServerLocalSegmentTest : public ViewManagerTest {
 protected:
  void SetUp() override {
    ViewManagerTest::SetUp();
    // Liveness is no subject here: no server may turn SUSPECT on a slow host.
    options_.suspect_timeout = std::chrono::minutes(1);
    options_.down_timeout = std::chrono::minutes(2);
    ASSERT_NO_FATAL_FAILURE(Open());
  }
  uint32_t Register(int n, std::vector<uint32_t> server_local) {
    v1::RegisterServerRequest req = NewServer(n);
    for (uint32_t local : server_local) req.add_server_local_segments(local);
    v1::RegisterServerResponse r;
    Status s = manager_->RegisterServer(req, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return r.server_id();
  }
  Status Allocate(uint32_t server, uint32_t local, v1::AllocateSegmentResponse* out) {
    v1::AllocateSegmentRequest a;
    a.set_cluster_secret(kSecret);
    a.set_server_id(server);
    a.set_local_index(local);
    a.set_access_key(7);
    return manager_->AllocateSegment(a, out);
  }
  Status Reserve(uint32_t server, uint32_t local) {
    v1::ReserveLocalSegmentRequest req;
    req.set_cluster_secret(kSecret);
    req.set_server_id(server);
    req.set_local_index(local);
    v1::ReserveLocalSegmentResponse resp;
    return manager_->ReserveLocalSegment(req, &resp);
  }
  static std::vector<uint32_t> ServerLocal(const v1::GetMappingResponse& m, uint32_t server) {
    for (const auto& s : m.servers()) {
      if (s.id() == server)
        return {s.server_local_segments().begin(), s.server_local_segments().end()};
    }
    return {};
  }
};

TEST_F(ServerLocalSegmentTest, AllocationPlacesNoBackupOnAReportedServerLocalSegment) {
  uint32_t a = Register(1, {});
  uint32_t b = Register(2, {63});  // its log in its highest local segment
  v1::AllocateSegmentResponse seg;
  ASSERT_TRUE(Allocate(a, 0, &seg).ok());
  ASSERT_EQ(seg.mapping().backups_size(), 1);
  EXPECT_EQ(seg.mapping().backups(0).server_id(), b);
  EXPECT_EQ(seg.mapping().backups(0).local_index(), 62u);
  // Nor does the server itself announce a primary there.
  EXPECT_EQ(Allocate(b, 63, &seg).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ServerLocal(Mapping(), b), std::vector<uint32_t>{63});
}

TEST_F(ServerLocalSegmentTest, ReservationIsRefusedWhereTheMappingPlacedACopy) {
  uint32_t a = Register(1, {});
  uint32_t b = Register(2, {});
  v1::AllocateSegmentResponse seg;
  ASSERT_TRUE(Allocate(a, 0, &seg).ok());
  ASSERT_EQ(seg.mapping().backups(0).local_index(), 63u);
  // Server b has not learnt of that backup yet and takes 63 for its log.
  EXPECT_EQ(Reserve(b, 63).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Reserve(b, 64).code(), StatusCode::kOutOfRange);
  const uint64_t before = Mapping().epoch();
  ASSERT_TRUE(Reserve(b, 62).ok());
  EXPECT_GT(Mapping().epoch(), before);
  ASSERT_TRUE(Reserve(b, 62).ok());  // a retry changes nothing
  EXPECT_EQ(ServerLocal(Mapping(), b), std::vector<uint32_t>{62});
  ASSERT_TRUE(Allocate(a, 1, &seg).ok());
  EXPECT_EQ(seg.mapping().backups(0).local_index(), 61u);
}

TEST_F(ServerLocalSegmentTest, RefusedBackupIsPlacedAnewAndItsSegmentRecorded) {
  uint32_t a = Register(1, {});
  uint32_t b = Register(2, {});
  v1::AllocateSegmentResponse seg;
  ASSERT_TRUE(Allocate(a, 0, &seg).ok());
  v1::ReportReplicaRequest r;
  r.set_cluster_secret(kSecret);
  r.set_segment(seg.mapping().segment());
  r.set_replica_server_id(b);
  r.set_local_index(63);
  r.set_state(v1::REPLICA_STATE_REFUSED);
  v1::ReportReplicaResponse resp;
  r.set_server_id(a);  // only the backup's own server knows what it holds
  EXPECT_EQ(manager_->ReportReplica(r, &resp).code(), StatusCode::kFailedPrecondition);
  r.set_server_id(b);
  ASSERT_TRUE(manager_->ReportReplica(r, &resp).ok());
  v1::GetMappingResponse m = Mapping();
  EXPECT_EQ(ServerLocal(m, b), std::vector<uint32_t>{63});
  ASSERT_EQ(m.segments_size(), 1);
  ASSERT_EQ(m.segments(0).backups_size(), 1);
  EXPECT_EQ(m.segments(0).backups(0).server_id(), b);
  EXPECT_EQ(m.segments(0).backups(0).local_index(), 62u);
  EXPECT_EQ(m.segments(0).backups(0).state(), v1::REPLICA_STATE_SYNCING);
}

TEST_F(ServerLocalSegmentTest, RestartedServerReportingItsLogMovesABackupPlacedThere) {
  uint32_t a = Register(1, {});
  uint32_t b = Register(2, {});
  v1::AllocateSegmentResponse seg;
  ASSERT_TRUE(Allocate(a, 0, &seg).ok());
  ASSERT_EQ(seg.mapping().backups(0).local_index(), 63u);
  v1::RegisterServerRequest again = NewServer(2);
  again.set_cluster_uuid(Mapping().cluster_uuid());
  again.set_server_id(b);
  again.add_server_local_segments(63);
  v1::RegisterServerResponse rr;
  ASSERT_TRUE(manager_->RegisterServer(again, &rr).ok());
  manager_->CheckLiveness();
  v1::GetMappingResponse m = Mapping();
  ASSERT_EQ(m.segments(0).backups_size(), 1);
  EXPECT_EQ(m.segments(0).backups(0).local_index(), 62u);
  // A log where the mapping has a primary is a contradiction, said so.
  again.clear_server_local_segments();
  again.add_server_local_segments(62);
  again.set_server_id(a);
  again.mutable_info()->set_address("10.0.0.1:7000");
  EXPECT_EQ(manager_->RegisterServer(again, &rr).code(), StatusCode::kOk);
  again.clear_server_local_segments();
  again.add_server_local_segments(0);
  Status s = manager_->RegisterServer(again, &rr);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  again.add_server_local_segments(64);
  EXPECT_EQ(manager_->RegisterServer(again, &rr).code(), StatusCode::kInvalidArgument);
}

TEST_F(ServerLocalSegmentTest, ViewFormatIsRecordedAndANewerOneRefused) {
  Register(1, {});
  v1::ClusterView stored;
  uint64_t revision = 0;
  ASSERT_TRUE(store_->Load(&stored, &revision).ok());
  EXPECT_EQ(stored.format_version(), kViewFormatVersion);
  // A view written before server-local segments were recorded loads.
  stored.clear_format_version();
  ASSERT_TRUE(store_->CompareAndPut(revision, stored, &revision).ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  // One from a newer monitor does not.
  stored.set_format_version(kViewFormatVersion + 1);
  manager_.reset();
  v1::ClusterView loaded;
  ASSERT_TRUE(store_->Load(&loaded, &revision).ok());
  ASSERT_TRUE(store_->CompareAndPut(revision, stored, &revision).ok());
  std::unique_ptr<ViewManager> newer;
  Status s = ViewManager::Open(store_.get(), options_, Logger("monitor", null_fd_), &newer);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.ToString().find("newer monitor"), std::string::npos) << s.ToString();
}

// Splits of table segments (docs/dsm.md "Tables across segments").
class SplitTest : public ViewManagerTest {
 protected:
  void SetUp() override {
    ViewManagerTest::SetUp();
    options_.suspect_timeout = std::chrono::minutes(1);
    options_.down_timeout = std::chrono::minutes(2);
  }
  uint32_t Register(int n, bool splits = true, uint32_t segment_count = 64) {
    v1::RegisterServerRequest req = NewServer(n);
    req.set_segment_count(segment_count);
    if (splits) req.set_features(v1::SERVER_FEATURE_SPLIT);
    v1::RegisterServerResponse r;
    Status s = manager_->RegisterServer(req, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return r.server_id();
  }
  // Local segment `local` of `server` as a segment of `table`; the new
  // half of `split_parent`'s split when that is not 0.
  Status Allocate(uint32_t server, uint32_t local, uint32_t table, v1::SegmentMapping* out,
                  uint64_t split_parent = 0) {
    v1::AllocateSegmentRequest a;
    a.set_cluster_secret(kSecret);
    a.set_server_id(server);
    a.set_local_index(local);
    a.set_table(table);
    a.set_access_key(7);
    a.set_split_parent(split_parent);
    v1::AllocateSegmentResponse r;
    Status s = manager_->AllocateSegment(a, &r);
    *out = r.mapping();
    return s;
  }
  uint32_t Owner(uint32_t table) {
    return Mapping().tables(static_cast<int>(table) - 1).server_id();
  }
  Status Split(uint32_t server, uint64_t segment, v1::SplitSegmentResponse* out) {
    v1::SplitSegmentRequest req;
    req.set_cluster_secret(kSecret);
    req.set_server_id(server);
    req.set_segment(segment);
    return manager_->SplitSegment(req, out);
  }
  Status Commit(uint32_t server, uint64_t segment, uint64_t child, v1::CommitSplitResponse* out) {
    v1::CommitSplitRequest req;
    req.set_cluster_secret(kSecret);
    req.set_server_id(server);
    req.set_segment(segment);
    req.set_child(child);
    return manager_->CommitSplit(req, out);
  }
  Status Cancel(uint32_t server, uint64_t segment) {
    v1::CancelSplitRequest req;
    req.set_cluster_secret(kSecret);
    req.set_server_id(server);
    req.set_segment(segment);
    v1::CancelSplitResponse resp;
    return manager_->CancelSplit(req, &resp);
  }
  Status Free(uint32_t server, uint64_t segment) {
    v1::FreeSegmentRequest req;
    req.set_cluster_secret(kSecret);
    req.set_server_id(server);
    req.set_segment(segment);
    v1::FreeSegmentResponse resp;
    return manager_->FreeSegment(req, &resp);
  }
  // Two servers able to split; table 1's segment on its owner's local 0.
  void StartWithATableSegment(uint32_t* owner, v1::SegmentMapping* parent) {
    ASSERT_NO_FATAL_FAILURE(Open());
    Register(1);
    Register(2);
    *owner = Owner(1);
    ASSERT_TRUE(Allocate(*owner, 0, 1, parent).ok());
  }
  // A split of `parent` reserved and its new segment created on the
  // target's local segment `local`.
  void SplitWithChild(uint32_t owner, const v1::SegmentMapping& parent, uint32_t local,
                      v1::SplitSegmentResponse* split, v1::SegmentMapping* child) {
    ASSERT_TRUE(Split(owner, parent.segment(), split).ok());
    ASSERT_TRUE(Allocate(split->split().target_server(), local, 1, child, parent.segment()).ok());
  }
  static const v1::SegmentMapping* Find(const v1::GetMappingResponse& m, uint64_t segment) {
    for (const auto& s : m.segments()) {
      if (s.segment() == segment) return &s;
    }
    return nullptr;
  }
};

TEST_F(SplitTest, ASplitIsReservedCreatedAndCommittedInOneViewChange) {
  ASSERT_NO_FATAL_FAILURE(Open());
  // Server 2 has the most free segments: every split's target here.
  const uint32_t owner = Register(1), other = Register(2, true, 128);
  uint32_t table = 0;
  const v1::GetMappingResponse tables = Mapping();
  for (const auto& t : tables.tables()) {
    if (t.server_id() == owner) table = t.table();
  }
  ASSERT_NE(table, 0u);
  v1::SegmentMapping parent;
  ASSERT_TRUE(Allocate(owner, 0, table, &parent).ok());
  EXPECT_EQ(parent.range_depth(), 0u);

  // Only the primary splits, only a table segment.
  v1::SplitSegmentResponse split;
  EXPECT_EQ(Split(other, parent.segment(), &split).code(), StatusCode::kFailedPrecondition);
  v1::SegmentMapping heap;
  ASSERT_TRUE(Allocate(owner, 1, 0, &heap).ok());
  EXPECT_EQ(Split(owner, heap.segment(), &split).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Split(owner, 12345, &split).code(), StatusCode::kNotFound);

  ASSERT_TRUE(Split(owner, parent.segment(), &split).ok());
  EXPECT_EQ(split.split().parent(), parent.segment());
  EXPECT_EQ(split.split().table(), table);
  EXPECT_EQ(split.split().child_range_depth(), 1u);
  EXPECT_EQ(split.split().child_range_prefix(), 1u);
  EXPECT_EQ(split.split().child(), 0u);
  const uint32_t target = split.split().target_server();
  EXPECT_EQ(target, other);
  // A retry gets the same split, without a view change.
  v1::SplitSegmentResponse again;
  ASSERT_TRUE(Split(owner, parent.segment(), &again).ok());
  EXPECT_EQ(again.split().SerializeAsString(), split.split().SerializeAsString());
  EXPECT_EQ(again.epoch(), split.epoch());
  ASSERT_EQ(Mapping().splits_size(), 1);

  v1::CommitSplitResponse committed;
  EXPECT_EQ(Commit(owner, parent.segment(), 0, &committed).code(),
            StatusCode::kFailedPrecondition);  // nothing created yet
  // Only the target creates the new segment, once.
  v1::SegmentMapping child;
  EXPECT_EQ(Allocate(owner, 2, table, &child, parent.segment()).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(Allocate(target, 0, table % 16 + 1, &child, parent.segment()).code(),
            StatusCode::kFailedPrecondition);  // another table
  ASSERT_TRUE(Allocate(target, 0, table, &child, parent.segment()).ok());
  EXPECT_EQ(child.split_parent(), parent.segment());
  EXPECT_EQ(child.range_depth(), 1u);
  EXPECT_EQ(child.range_prefix(), 1u);
  EXPECT_EQ(child.primary().server_id(), target);
  EXPECT_EQ(child.backups_size(), 1);  // replicated as every segment
  v1::SegmentMapping retried, second;
  ASSERT_TRUE(Allocate(target, 0, table, &retried, parent.segment()).ok());
  EXPECT_EQ(retried.segment(), child.segment());
  EXPECT_EQ(Allocate(target, 1, table, &second, parent.segment()).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(Mapping().splits(0).child(), child.segment());
  // The owner still owns the table: the new segment is not routable yet.
  EXPECT_EQ(Owner(table), owner);

  EXPECT_EQ(Commit(owner, parent.segment(), child.segment() + 1, &committed).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(Commit(target, parent.segment(), child.segment(), &committed).code(),
            StatusCode::kFailedPrecondition);  // not the parent's primary
  ASSERT_TRUE(Commit(owner, parent.segment(), child.segment(), &committed).ok());
  EXPECT_EQ(committed.parent().range_depth(), 1u);
  EXPECT_EQ(committed.parent().range_prefix(), 0u);
  EXPECT_EQ(committed.child().range_depth(), 1u);
  EXPECT_EQ(committed.child().range_prefix(), 1u);
  EXPECT_EQ(committed.child().split_parent(), 0u);
  EXPECT_EQ(committed.parent().placement_epoch(), committed.epoch());
  EXPECT_EQ(committed.child().placement_epoch(), committed.epoch());
  EXPECT_EQ(committed.parent().access_key(), 0u);  // never a key
  v1::GetMappingResponse m = Mapping();
  EXPECT_EQ(m.splits_size(), 0);
  EXPECT_EQ(m.epoch(), committed.epoch());
  EXPECT_EQ(Owner(table), owner);  // a table follows its first segment

  // A retried commit (its reply lost) answers the same; a cancel after it
  // changes nothing.
  v1::CommitSplitResponse retry;
  ASSERT_TRUE(Commit(owner, parent.segment(), child.segment(), &retry).ok());
  EXPECT_EQ(retry.SerializeAsString(), committed.SerializeAsString());
  ASSERT_TRUE(Cancel(owner, parent.segment()).ok());
  EXPECT_EQ(Mapping().epoch(), committed.epoch());

  // The ranges survive a restart of the monitor; the new segment splits
  // further on its own.
  ASSERT_NO_FATAL_FAILURE(Open());
  m = Mapping();
  EXPECT_EQ(Find(m, parent.segment())->range_depth(), 1u);
  EXPECT_EQ(Find(m, child.segment())->range_prefix(), 1u);
  ASSERT_TRUE(Split(target, child.segment(), &split).ok());
  EXPECT_EQ(split.split().child_range_depth(), 2u);
  EXPECT_EQ(split.split().child_range_prefix(), 3u);
}

TEST_F(SplitTest, ASplitWaitsUntilEveryServerSupportsIt) {
  ASSERT_NO_FATAL_FAILURE(Open());
  Register(1);
  const uint32_t old_server = Register(2, /*splits=*/false);
  const uint32_t owner = Owner(1);
  v1::SegmentMapping parent;
  ASSERT_TRUE(Allocate(owner, 0, 1, &parent).ok());
  v1::SplitSegmentResponse split;
  Status s = Split(owner, parent.segment(), &split);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.ToString().find("upgraded"), std::string::npos) << s.ToString();
  // The old server, upgraded and restarted, registers the feature.
  v1::RegisterServerRequest req = NewServer(2);
  req.set_cluster_uuid(Mapping().cluster_uuid());
  req.set_server_id(old_server);
  req.set_features(v1::SERVER_FEATURE_SPLIT);
  v1::RegisterServerResponse r;
  ASSERT_TRUE(manager_->RegisterServer(req, &r).ok());
  EXPECT_TRUE(Split(owner, parent.segment(), &split).ok());
}

TEST_F(SplitTest, AFullClusterRefusesASplit) {
  options_.replicas = 1;
  ASSERT_NO_FATAL_FAILURE(Open());
  const uint32_t a = Register(1, true, 3);
  v1::SegmentMapping first, second, third;
  ASSERT_TRUE(Allocate(a, 0, 1, &first).ok());
  ASSERT_TRUE(Allocate(a, 1, 2, &second).ok());
  ASSERT_TRUE(Allocate(a, 2, 3, &third).ok());
  v1::SplitSegmentResponse split;
  Status s = Split(a, first.segment(), &split);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.ToString().find("cluster is full"), std::string::npos) << s.ToString();
  // A pending split holds its target's free segment until it creates it.
  ASSERT_TRUE(Free(a, third.segment()).ok());
  ASSERT_TRUE(Split(a, first.segment(), &split).ok());
  EXPECT_EQ(split.split().target_server(), a);
  EXPECT_EQ(Split(a, second.segment(), &split).code(), StatusCode::kResourceExhausted);
}

TEST_F(SplitTest, CancelAndFreeGiveTheSplitUp) {
  uint32_t owner = 0;
  v1::SegmentMapping parent, child;
  ASSERT_NO_FATAL_FAILURE(StartWithATableSegment(&owner, &parent));
  v1::SplitSegmentResponse split;
  uint32_t local = 10;
  auto reserve_and_create = [&] {
    ASSERT_NO_FATAL_FAILURE(SplitWithChild(owner, parent, local++, &split, &child));
    ASSERT_NE(Find(Mapping(), child.segment()), nullptr);
  };
  // The parent's primary gives it up: the new segment leaves the view.
  ASSERT_NO_FATAL_FAILURE(reserve_and_create());
  ASSERT_TRUE(Cancel(owner, parent.segment()).ok());
  EXPECT_EQ(Mapping().splits_size(), 0);
  EXPECT_EQ(Find(Mapping(), child.segment()), nullptr);
  v1::CommitSplitResponse committed;
  EXPECT_EQ(Commit(owner, parent.segment(), child.segment(), &committed).code(),
            StatusCode::kFailedPrecondition);
  // The target frees the new segment: the split is gone with it.
  ASSERT_NO_FATAL_FAILURE(reserve_and_create());
  ASSERT_TRUE(Free(split.split().target_server(), child.segment()).ok());
  EXPECT_EQ(Mapping().splits_size(), 0);
  EXPECT_EQ(Find(Mapping(), child.segment()), nullptr);
  // The parent is freed: its split and new segment go too.
  ASSERT_NO_FATAL_FAILURE(reserve_and_create());
  ASSERT_TRUE(Free(owner, parent.segment()).ok());
  EXPECT_EQ(Mapping().splits_size(), 0);
  EXPECT_EQ(Mapping().segments_size(), 0);
  // An abandoned split's new segment is refused at its (late) announce.
  ASSERT_TRUE(Allocate(owner, 0, 1, &parent).ok());
  ASSERT_TRUE(Split(owner, parent.segment(), &split).ok());
  ASSERT_TRUE(Cancel(owner, parent.segment()).ok());
  EXPECT_EQ(Allocate(split.split().target_server(), 20, 1, &child, parent.segment()).code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(SplitTest, AStoredViewWithInconsistentRangesIsRefused) {
  uint32_t owner = 0;
  v1::SegmentMapping parent, child;
  ASSERT_NO_FATAL_FAILURE(StartWithATableSegment(&owner, &parent));
  v1::SplitSegmentResponse split;
  ASSERT_NO_FATAL_FAILURE(SplitWithChild(owner, parent, 5, &split, &child));
  manager_.reset();
  v1::ClusterView good;
  uint64_t revision = 0;
  ASSERT_TRUE(store_->Load(&good, &revision).ok());
  EXPECT_EQ(good.format_version(), 2u);
  auto refused = [&](const std::function<void(v1::ClusterView*)>& damage, const char* what) {
    v1::ClusterView bad = good;
    damage(&bad);
    ASSERT_TRUE(store_->CompareAndPut(revision, bad, &revision).ok());
    std::unique_ptr<ViewManager> m;
    Status s = ViewManager::Open(store_.get(), options_, Logger("monitor", null_fd_), &m);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << what << ": " << s.ToString();
  };
  auto seg = [](v1::ClusterView* v, uint64_t number) {
    for (auto& m : *v->mutable_segments()) {
      if (m.segment() == number) return &m;
    }
    return static_cast<v1::SegmentMapping*>(nullptr);
  };
  refused([](v1::ClusterView* v) { v->clear_splits(); }, "a new segment without its split");
  refused([&](v1::ClusterView* v) { v->mutable_splits(0)->set_child_range_prefix(0); },
          "a split keeping the wrong half");
  refused([&](v1::ClusterView* v) { seg(v, child.segment())->set_range_depth(2); },
          "a new segment of another range");
  refused([&](v1::ClusterView* v) { seg(v, parent.segment())->set_range_depth(33); },
          "an invalid range");
  refused(
      [&](v1::ClusterView* v) {
        v->clear_splits();
        seg(v, child.segment())->set_split_parent(0);
        seg(v, parent.segment())->set_range_depth(1);
        seg(v, parent.segment())->set_range_prefix(1);  // both hold the upper half
      },
      "overlapping ranges");
  // The good view loads.
  ASSERT_TRUE(store_->CompareAndPut(revision, good, &revision).ok());
  ASSERT_NO_FATAL_FAILURE(Open());
}

}  // namespace
}  // namespace pdpm::monitor
