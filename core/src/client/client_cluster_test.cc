// libpdpm against a real cluster: a pdpm-monitor and three pdpm-server
// processes, by default on file-backed PM in a temporary directory and tcp
// on loopback; on devdax and verbs in the hardware guest (cluster_harness.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "client/cluster_harness.h"
#include "client/cluster_journal.h"
#include "client/cluster_pm_check.h"
#include "common/crc32c.h"
#include "monitor/monitor_client.h"
#include "monitor/placement.h"
#include "net/buffer_pool.h"
#include "net/rpc.h"
#include "server/protocol.h"

namespace pdpm::client {
namespace {

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) s[i] = static_cast<char>((i * 131 + size_t{seed} * 7) >> 3);
  return s;
}

class ClusterFixture : public ::testing::Test {
 protected:
  explicit ClusterFixture(const LocalClusterOptions& options) : cluster_(options) {}
  void SetUp() override {
    Status s = cluster_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(OpenClient(&client_).ok());
  }

  Status OpenClient(std::unique_ptr<Client>* out, const std::string& secret = "") {
    return Client::Open(
        TestClientOptions(cluster_.monitor_address(), secret.empty() ? cluster_.secret() : secret),
        out);
  }

  // Starts `n` load processes, each `ops` operations.
  void StartLoad(int n, uint32_t ops, std::vector<ChildProcess>* procs) {
    *procs = std::vector<ChildProcess>(static_cast<size_t>(n));
    for (int w = 0; w < n; w++) {
      Status s =
          (*procs)[w].Start({PDPM_LOAD_BINARY, "--monitor", cluster_.monitor_address(),
                             "--secret-file", cluster_.secret_file(), "--worker", std::to_string(w),
                             "--ops", std::to_string(ops), "--out", LoadOut(w)},
                            {}, LoadLog(w));
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }

  // Waits for every load to finish; one still running after the deadline
  // fails the test with the logs of the loads and the cluster.
  void FinishLoad(std::vector<ChildProcess>* procs) {
    const uint32_t deadline_ms = net::testing::ScaledMs(60000);
    for (size_t w = 0; w < procs->size(); w++) {
      int ws = 0;
      if (!(*procs)[w].WaitFor(deadline_ms, &ws)) {
        ADD_FAILURE() << "load " << w << " still running after " << deadline_ms << " ms:\n"
                      << cluster_.HangReport((*procs)[w], LoadLog(static_cast<int>(w)));
        continue;  // destruction kills it
      }
      EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
          << "load " << w << " status " << ws << ":\n"
          << FileTail(LoadLog(static_cast<int>(w)));
    }
  }

  // Every load's expectations hold, read through a fresh client.
  void VerifyLoad(int n) {
    std::unique_ptr<Client> c;
    Status s = OpenClient(&c);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int w = 0; w < n; w++) {
      Expectations e;
      s = e.Load(LoadOut(w));
      ASSERT_TRUE(s.ok()) << s.ToString();
      std::string problems;
      size_t checked = e.Verify(c.get(), &problems);
      EXPECT_TRUE(problems.empty()) << "load " << w << ":\n" << problems;
      EXPECT_GT(checked, 0u);
    }
  }

  // Waits until load 0 has reported `ops` operations.
  void WaitForProgress(uint32_t ops) {
    for (int i = 0; i < 3000; i++) {
      std::ifstream in(LoadLog(0));
      std::string line;
      uint32_t done = 0;
      while (std::getline(in, line)) {
        if (line.rfind("progress ", 0) == 0)
          done = static_cast<uint32_t>(std::stoul(line.substr(9)));
        if (line.rfind("done ", 0) == 0) return;
      }
      if (done >= ops) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::string LoadOut(int w) const { return cluster_.dir() + "/load" + std::to_string(w) + ".exp"; }
  std::string LoadLog(int w) const { return cluster_.dir() + "/load" + std::to_string(w) + ".log"; }

  LocalCluster cluster_;
  std::unique_ptr<Client> client_;
};

class ClusterTest : public ClusterFixture {
 protected:
  ClusterTest() : ClusterFixture(LocalClusterOptions{}) {}
};

TEST_F(ClusterTest, HeapRoundTripAndAffinity) {
  for (uint32_t server = 1; server <= 3; server++) {
    GlobalAddress a;
    Status s = client_->PAllocate(5000, server, &a);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(a.descriptor.can_write());
    std::string in = Pattern(5000, server), out(5000, '\0');
    ASSERT_TRUE(client_->Write(a, in.data(), in.size()).ok());
    ASSERT_TRUE(client_->Read(a, out.data(), out.size()).ok());
    EXPECT_EQ(in, out);
    ASSERT_TRUE(client_->PFree(a).ok());
  }
  GlobalAddress a;
  EXPECT_EQ(client_->PAllocate(64, 99, &a).code(), StatusCode::kNotFound);
}

TEST_F(ClusterTest, ObjectsWholeAndPartial) {
  ObjectId id{7, 7};
  std::string big = Pattern(3 << 20, 1);  // over an RPC slot: moves by one-sided transfer
  ASSERT_TRUE(client_->PutObj(id, big).ok());
  std::string got;
  ASSERT_TRUE(client_->GetObj(id, &got).ok());
  EXPECT_EQ(got, big);
  ASSERT_TRUE(client_->WriteObj(id, 12345, "hello").ok());
  big.replace(12345, 5, "hello");
  ASSERT_TRUE(client_->ReadObj(id, 12340, 20, &got).ok());
  EXPECT_EQ(got, big.substr(12340, 20));
  uint64_t size = 0;
  ASSERT_TRUE(client_->ObjSize(id, &size).ok());
  EXPECT_EQ(size, big.size());
  EXPECT_EQ(client_->ReadObj(id, big.size() - 2, 10, &got).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(client_->DelObj(id).ok());
  EXPECT_EQ(client_->GetObj(id, &got).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->DelObj(id).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->WriteObj(id, 0, "x").code(), StatusCode::kNotFound);
  // Objects spread over the tables of every server.
  for (uint64_t i = 0; i < 40; i++) {
    ASSERT_TRUE(client_->PutObj({1, i}, Pattern(100 + i, i)).ok());
  }
  for (uint64_t i = 0; i < 40; i++) {
    ASSERT_TRUE(client_->GetObj({1, i}, &got).ok());
    EXPECT_EQ(got, Pattern(100 + i, i));
  }
}

TEST_F(ClusterTest, OneClientSharedByThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint64_t t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 25; i++) {
        std::string d = Pattern(1000 + t * 100 + i, static_cast<uint32_t>(t * 100 + i));
        GlobalAddress a;
        std::string back(d.size(), '\0');
        std::string got;
        bool ok = client_->PAllocate(d.size(), &a).ok() &&
                  client_->Write(a, d.data(), d.size()).ok() &&
                  client_->Read(a, back.data(), back.size()).ok() && back == d &&
                  client_->PFree(a).ok() && client_->PutObj({100 + t, i}, d).ok() &&
                  client_->GetObj({100 + t, i}, &got).ok() && got == d;
        if (!ok) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(ClusterTest, BadInputsGetTheirErrorAndHarmNothing) {
  // Data that must survive every bad request below.
  GlobalAddress keep;
  ASSERT_TRUE(client_->PAllocate(4096, &keep).ok());
  std::string keep_data = Pattern(4096, 9);
  ASSERT_TRUE(client_->Write(keep, keep_data.data(), keep_data.size()).ok());
  ASSERT_TRUE(client_->PutObj({5, 5}, "kept object").ok());

  char buf[64] = {};
  // Unknown address: a segment nobody mapped.
  GlobalAddress unknown = keep;
  unknown.segment = 4242;
  EXPECT_EQ(client_->Read(unknown, buf, 8).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Write(unknown, buf, 8).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->PFree(unknown).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Read(GlobalAddress{}, buf, 8).code(), StatusCode::kInvalidArgument);
  // A range crossing the segment's end.
  GlobalAddress end = keep;
  end.offset = (128ull << 20) - 8;
  EXPECT_EQ(client_->Read(end, buf, 16).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(client_->Write(end, buf, 16).code(), StatusCode::kOutOfRange);
  // A read-only address cannot write.
  GlobalAddress ro = keep;
  ro.descriptor = dsm::Descriptor::Make(dsm::kPermRead, ro.descriptor.replicas());
  EXPECT_EQ(client_->Write(ro, buf, 8).code(), StatusCode::kPermissionDenied);
  // The unpersisted write and the persist refuse the same inputs.
  EXPECT_EQ(client_->WriteUnpersisted(unknown, buf, 8).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Persist(unknown, 8).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->WriteUnpersisted(GlobalAddress{}, buf, 8).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Persist(GlobalAddress{}, 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->WriteUnpersisted(end, buf, 16).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(client_->Persist(end, 16).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(client_->WriteUnpersisted(ro, buf, 8).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(client_->Persist(ro, 8).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(client_->Persist(keep, 0).ok());
  // Not a block start; then freed, and freed again.
  GlobalAddress inside = keep;
  inside.offset += 8;
  EXPECT_EQ(client_->PFree(inside).code(), StatusCode::kInvalidArgument);
  GlobalAddress victim;
  ASSERT_TRUE(client_->PAllocate(100, &victim).ok());
  ASSERT_TRUE(client_->PFree(victim).ok());
  EXPECT_EQ(client_->PFree(victim).code(), StatusCode::kFailedPrecondition);
  // Objects over 64 MiB, and zero-size allocations.
  std::string huge((64 << 20) + 1, 'x');
  EXPECT_EQ(client_->PutObj({5, 6}, huge).code(), StatusCode::kTooLarge);
  EXPECT_EQ(client_->WriteObj({5, 5}, 64 << 20, "x").code(), StatusCode::kTooLarge);
  GlobalAddress a;
  EXPECT_EQ(client_->PAllocate(0, &a).code(), StatusCode::kInvalidArgument);
  std::string got;
  EXPECT_EQ(client_->GetObj({5, 6}, &got).code(), StatusCode::kNotFound);
  // Missing or wrong secret.
  std::unique_ptr<Client> other;
  EXPECT_EQ(OpenClient(&other, "wrong-secret").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Client::Open(TestClientOptions(cluster_.monitor_address(), ""), &other).code(),
            StatusCode::kPermissionDenied);

  // Raw data-plane requests: wrong epoch, wrong credential, wrong key.
  monitor::MonitorClient mon(cluster_.monitor_address(), {cluster_.secret()});
  v1::GetMappingResponse m;
  ASSERT_TRUE(mon.GetMapping(0, &m).ok());
  ASSERT_GT(m.servers_size(), 0);
  std::unique_ptr<net::Transport> t;
  ASSERT_TRUE(net::Transport::Create(net::testing::TestOptions(), &t).ok());
  std::unique_ptr<net::RpcClient> rpc;
  ASSERT_TRUE(net::RpcClient::Connect(t.get(), m.servers(0).address(), 0,
                                      server::DataPlaneRpcOptions(1, net::testing::ScaledMs(2000)),
                                      &rpc)
                  .ok());
  auto call = [&](uint64_t epoch, uint64_t credential) {
    std::string req, reply;
    server::Encoder e(&req);
    e.Header({epoch, credential});
    e.U64(64);
    return rpc->Call(server::kPAllocate, {reinterpret_cast<const uint8_t*>(req.data()), req.size()},
                     &reply);
  };
  uint64_t cred = server::ClusterCredential(cluster_.secret());
  EXPECT_EQ(call(0, cred).code(), StatusCode::kStaleEpoch);
  EXPECT_EQ(call(m.epoch() + 1000, cred).code(), StatusCode::kStaleEpoch);
  EXPECT_EQ(call(m.epoch(), cred ^ 1).code(), StatusCode::kPermissionDenied);
  {
    std::string req, reply;
    server::Encoder e(&req);
    e.Header({m.epoch(), cred});  // no body
    EXPECT_EQ(rpc->Call(server::kPAllocate,
                        {reinterpret_cast<const uint8_t*>(req.data()), req.size()}, &reply)
                  .code(),
              StatusCode::kInvalidArgument);
  }
  // A one-sided write with a key no segment has.
  std::unique_ptr<net::BufferPool> pool;
  ASSERT_TRUE(net::BufferPool::Create(t.get(), 4096, 1, 0, &pool).ok());
  net::BufferPool::Buffer b;
  ASSERT_TRUE(pool->Acquire(&b).ok());
  net::Op op;
  op.opcode = net::Opcode::kWrite;
  op.local = b.local(64);
  op.remote_key = 0x5eed1234;
  op.persist = true;
  EXPECT_EQ(net::ExecuteSync(rpc->connection(), op).code(), StatusCode::kPermissionDenied);
  // An object request routed to a server not owning its table: stale route.
  for (uint64_t i = 0;; i++) {
    uint32_t table = monitor::TableForObject(9, i, m.table_count());
    uint32_t owner = 0;
    for (const auto& ta : m.tables()) {
      if (ta.table() == table) owner = ta.server_id();
    }
    if (owner == m.servers(0).id()) continue;
    std::string req, reply;
    server::Encoder e(&req);
    e.Header({m.epoch(), cred});
    e.Id({9, i});
    EXPECT_EQ(rpc->Call(server::kObjSize,
                        {reinterpret_cast<const uint8_t*>(req.data()), req.size()}, &reply)
                  .code(),
              StatusCode::kStaleEpoch);
    break;
  }

  // Nothing else was harmed.
  std::string back(4096, '\0');
  ASSERT_TRUE(client_->Read(keep, back.data(), back.size()).ok());
  EXPECT_EQ(back, keep_data);
  ASSERT_TRUE(client_->GetObj({5, 5}, &got).ok());
  EXPECT_EQ(got, "kept object");
  StopServersAndExpectCleanPm(cluster_);
}

TEST_F(ClusterTest, RestartedServerKeepsDataAndClientsRefresh) {
  GlobalAddress a;
  ASSERT_TRUE(client_->PAllocate(8192, 2, &a).ok());
  std::string d = Pattern(8192, 3);
  ASSERT_TRUE(client_->Write(a, d.data(), d.size()).ok());
  std::vector<std::string> objs;
  for (uint64_t i = 0; i < 30; i++) {
    Status put = client_->PutObj({2, i}, Pattern(i * 1000, i));
    ASSERT_TRUE(put.ok()) << "object " << i << ": " << put.ToString();
  }
  uint64_t before = client_->epoch();
  Status s = cluster_.StopServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string out(8192, '\0');
  EXPECT_EQ(client_->Read(a, out.data(), out.size()).code(), StatusCode::kUnavailable);
  s = cluster_.StartServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // New keys and a new address: the cached mapping is refreshed on refusal.
  s = client_->Read(a, out.data(), out.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, d);
  EXPECT_GT(client_->epoch(), before);
  std::string got;
  for (uint64_t i = 0; i < 30; i++) {
    s = client_->GetObj({2, i}, &got);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(got, Pattern(i * 1000, i));
  }
  StopServersAndExpectCleanPm(cluster_);
}

TEST_F(ClusterTest, ConcurrentClientsReadBackTheirLastWrites) {
  std::vector<ChildProcess> load;
  StartLoad(4, 150, &load);
  FinishLoad(&load);
  VerifyLoad(4);
  StopServersAndExpectCleanPm(cluster_);
  // And everything again after a restart from PM alone.
  for (int i = 0; i < 3; i++) ASSERT_TRUE(cluster_.StartServer(i).ok());
  VerifyLoad(4);
}

TEST_F(ClusterTest, KillServerDuringWritesLosesNothingAcknowledged) {
  std::vector<ChildProcess> load;
  StartLoad(2, 500, &load);
  WaitForProgress(100);
  cluster_.KillServer(1);
  ExpectPmChecks(cluster_, 1, /*clean=*/false);  // the image kill -9 left: no violation
  Status s = cluster_.StartServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  FinishLoad(&load);
  VerifyLoad(2);
  StopServersAndExpectCleanPm(cluster_);
}

// Server 1's PM is a file in every environment: the simulation needs one.
class ClusterPowerLossTest : public ClusterFixture {
 protected:
  ClusterPowerLossTest() : ClusterFixture(ServerOneOnFile()) {}
  static LocalClusterOptions ServerOneOnFile() {
    LocalClusterOptions o;
    o.file_pm_server = 1;
    return o;
  }
};

TEST_F(ClusterPowerLossTest, PowerLossDuringWritesLosesNothingAcknowledged) {
  // Server 1 runs on simulated PM that keeps only what was persisted, and
  // kills itself once 1 MB more have been persisted.
  ASSERT_TRUE(cluster_.StopServer(1).ok());
  Status s = cluster_.StartServer(
      1, {"PDPM_PM_SIMULATE_POWER_LOSS=1", "PDPM_PM_CRASH_AFTER_PERSISTED_BYTES=1000000"});
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<ChildProcess> load;
  StartLoad(2, 200, &load);
  FinishLoad(&load);
  // Crashed by the injection, or cut now: either way a power loss.
  cluster_.KillServer(1);
  ExpectPmChecks(cluster_, 1, /*clean=*/false);
  s = cluster_.StartServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  VerifyLoad(2);
  StopServersAndExpectCleanPm(cluster_);
}

// Unpersisted writes are visible at once; only those a Persist covered
// survive a power loss (the simulated PM keeps only persisted lines).
TEST_F(ClusterPowerLossTest, OnlyPersistedUnpersistedWritesSurviveAPowerLoss) {
  ASSERT_TRUE(cluster_.StopServer(1).ok());
  Status s = cluster_.StartServer(1, {"PDPM_PM_SIMULATE_POWER_LOSS=1"});
  ASSERT_TRUE(s.ok()) << s.ToString();
  constexpr uint64_t kSize = 16 << 10;
  const std::string before = Pattern(kSize, 1), kept_data = Pattern(kSize, 2),
                    lost_data = Pattern(kSize, 3);
  GlobalAddress kept, lost;
  ASSERT_TRUE(client_->PAllocate(kSize, 2, &kept).ok());
  ASSERT_TRUE(client_->PAllocate(kSize, 2, &lost).ok());
  ASSERT_TRUE(client_->Write(lost, before.data(), kSize).ok());
  // A batch of unpersisted writes, then one persist of the whole range.
  for (uint64_t off = 0; off < kSize; off += 4096) {
    GlobalAddress at = kept;
    at.offset += off;
    ASSERT_TRUE(client_->WriteUnpersisted(at, kept_data.data() + off, 4096).ok());
  }
  ASSERT_TRUE(client_->Persist(kept, kSize).ok());
  // Last: no persist after it touches these lines.
  ASSERT_TRUE(client_->WriteUnpersisted(lost, lost_data.data(), kSize).ok());
  std::string got(kSize, '\0');
  ASSERT_TRUE(client_->Read(lost, got.data(), kSize).ok());
  EXPECT_EQ(got, lost_data);

  cluster_.KillServer(1);
  ExpectPmChecks(cluster_, 1, /*clean=*/false);
  s = cluster_.StartServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = client_->Read(kept, got.data(), kSize);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, kept_data);
  ASSERT_TRUE(client_->Read(lost, got.data(), kSize).ok());
  EXPECT_EQ(got, before) << "the unpersisted write was persisted anyway";
  StopServersAndExpectCleanPm(cluster_);
}

// Two copies of every segment, and a monitor that declares a silent
// server DOWN after half a second.
LocalClusterOptions ReplicatedOptions() {
  LocalClusterOptions o;
  o.replicas = 2;
  o.pm_size = (8 * 128 + 2) * (1ull << 20);  // room for backups and re-replication
  o.heartbeat_ms = 50;
  o.suspect_ms = 250;
  o.down_ms = 500;
  return o;
}

class ReplicatedClusterTest : public ClusterFixture {
 protected:
  explicit ReplicatedClusterTest(const LocalClusterOptions& options = ReplicatedOptions())
      : ClusterFixture(options) {}

  v1::GetMappingResponse Mapping() {
    v1::GetMappingResponse m;
    Status s = cluster_.GetMapping(&m);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return m;
  }

  uint32_t IdOf(int i) {
    uint32_t id = cluster_.ServerId(i);
    EXPECT_NE(id, 0u) << "server " << i << " is not a member";
    return id;
  }

  // Waits (bounded, against a hang) until every segment has a primary and
  // min(2, live) - 1 in-sync backups, none on a server in `gone`.
  void WaitReplicated(const std::set<uint32_t>& gone, uint32_t live) {
    const int wanted_backups = static_cast<int>(std::min(2u, live)) - 1;
    v1::GetMappingResponse m;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      m = Mapping();
      bool done = true;
      for (const auto& seg : m.segments()) {
        int in_sync = 0;
        done &= gone.count(seg.primary().server_id()) == 0;
        for (const auto& b : seg.backups()) {
          done &= gone.count(b.server_id()) == 0;
          in_sync += b.state() == v1::REPLICA_STATE_IN_SYNC;
        }
        done &= in_sync == wanted_backups && seg.backups_size() == wanted_backups;
      }
      if (done) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "not replicated after 60 s:\n" << m.DebugString();
  }

  // The index of the server that holds `segment`'s primary copy, -1 if none.
  int PrimaryOf(uint32_t segment) {
    uint32_t primary = 0;
    const v1::GetMappingResponse m = Mapping();
    for (const auto& seg : m.segments()) {
      if (seg.segment() == segment) primary = seg.primary().server_id();
    }
    for (int i = 0; i < 3; i++) {
      if (primary != 0 && IdOf(i) == primary) return i;
    }
    return -1;
  }
};

// The first segment of a quiet cluster: no later change of the view makes
// its primary reload the mapping, yet its backup must fill, and the copy
// must serve once the primary dies.
// With copies an unpersisted write is a Write: every copy holds it, so the
// promoted backup serves it once the primary is killed.
TEST_F(ReplicatedClusterTest, UnpersistedWriteReachesEveryCopy) {
  GlobalAddress a;
  ASSERT_TRUE(client_->PAllocate(8192, &a).ok());
  WaitReplicated({}, 3);
  ASSERT_TRUE(client_->RefreshMapping().ok());  // sees the in-sync backup
  const std::string data = Pattern(8192, 5);
  Status s = client_->WriteUnpersisted(a, data.data(), data.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  uint32_t primary = 0;
  const v1::GetMappingResponse m = Mapping();
  for (const auto& seg : m.segments()) {
    if (seg.segment() == a.segment) primary = seg.primary().server_id();
  }
  int victim = -1;
  for (int i = 0; i < 3; i++) {
    if (primary != 0 && IdOf(i) == primary) victim = i;
  }
  ASSERT_GE(victim, 0);
  cluster_.KillServer(victim);
  std::string got(data.size(), '\0');
  s = client_->Read(a, got.data(), got.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, data);
}

TEST_F(ReplicatedClusterTest, TheOnlySegmentGetsItsSecondCopy) {
  const std::string data = Pattern(5000, 3);
  Status s = client_->PutObj(ObjectId{7, 7}, data);
  ASSERT_TRUE(s.ok()) << s.ToString();
  WaitReplicated({}, 3);
  v1::GetMappingResponse m = Mapping();
  ASSERT_EQ(m.segments_size(), 1);
  const uint32_t primary = m.segments(0).primary().server_id();
  int victim = -1;
  for (int i = 0; i < 3; i++) {
    if (IdOf(i) == primary) victim = i;
  }
  ASSERT_GE(victim, 0);
  cluster_.KillServer(victim);
  std::string got;
  s = client_->GetObj(ObjectId{7, 7}, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, data);
}

TEST_F(ReplicatedClusterTest, KillDuringWritesLosesNothingAndReplicasComeBack) {
  std::vector<ChildProcess> load;
  StartLoad(2, 400, &load);
  WaitForProgress(100);
  // No wait for the backups: a new segment takes its first write only once
  // its backup is in sync (docs/replication.md).
  const uint32_t first = IdOf(1), second = IdOf(0);
  cluster_.KillServer(1);
  ExpectPmChecks(cluster_, 1, /*clean=*/false);
  FinishLoad(&load);
  VerifyLoad(2);
  // Re-replication: every segment has its second copy again, on the two
  // servers left.
  WaitReplicated({first}, 2);
  // Those copies are complete: lose another server and read it all back
  // from the one left.
  cluster_.KillServer(0);
  ExpectPmChecks(cluster_, 0, /*clean=*/false);
  WaitReplicated({first, second}, 1);
  VerifyLoad(2);
  // Both return with a stale epoch: fenced (their old copies freed), then
  // filled again as backups.
  ASSERT_TRUE(cluster_.StartServer(0).ok());
  ASSERT_TRUE(cluster_.StartServer(1).ok());
  WaitReplicated({}, 3);
  for (int i : {0, 1}) {
    EXPECT_NE(FileTail(cluster_.server_log(i), 1 << 22).find("freeing a fenced copy"),
              std::string::npos)
        << FileTail(cluster_.server_log(i));
  }
  VerifyLoad(2);
  StopServersAndExpectCleanPm(cluster_);
}

// A server that hangs without closing anything (SIGSTOP) under write load,
// with the monitor's default timing (50 ms heartbeats, 500 ms down
// timeout): its data is written again through the promoted copy long
// before the old 10 s down timeout, and when it wakes up its lease has
// expired — a client that still routes to it is refused and finds the new
// primary, so it never reads the value the frozen server held, and a write
// it had acknowledged is one the new primary has.
TEST_F(ReplicatedClusterTest, FrozenServerIsFencedByItsLeaseAndServesNothingStale) {
  constexpr size_t kSize = 8192;
  GlobalAddress a;
  ASSERT_TRUE(client_->PAllocate(kSize, &a).ok());
  const std::string before = Pattern(kSize, 21), during = Pattern(kSize, 22);
  ASSERT_TRUE(client_->Write(a, before.data(), kSize).ok());
  WaitReplicated({}, 3);
  ASSERT_TRUE(client_->RefreshMapping().ok());
  // A client that learns the view now and never again by itself (it never
  // asks whether a hanging wait should follow a newer view): after the
  // failover it still routes to the frozen server.
  std::unique_ptr<Client> stale;
  ClientOptions never_asks = TestClientOptions(cluster_.monitor_address(), cluster_.secret());
  never_asks.hang_suspicion_ms = 0;
  ASSERT_TRUE(Client::Open(never_asks, &stale).ok());
  std::string got(kSize, '\0');
  ASSERT_TRUE(stale->Read(a, got.data(), kSize).ok());
  ASSERT_EQ(got, before);

  const int victim = PrimaryOf(a.segment);
  ASSERT_GE(victim, 0);
  const uint32_t primary = IdOf(victim);

  std::vector<ChildProcess> load;
  StartLoad(2, 300, &load);
  WaitForProgress(50);
  const auto frozen_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster_.server(victim).Freeze().ok());
  Status s = client_->Write(a, during.data(), kSize);
  const auto resumed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - frozen_at)
                              .count();
  // Wake the server before any assertion can end the test with it stopped.
  auto wake = [&] { cluster_.server(victim).Signal(SIGCONT); };
  if (!s.ok()) wake();
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::printf("write through the promoted copy %lld ms after the freeze\n",
              static_cast<long long>(resumed_ms));
  EXPECT_LT(resumed_ms, 10000) << "not before the old down timeout";
  bool moved = false;
  const v1::GetMappingResponse after_freeze = Mapping();
  for (const auto& seg : after_freeze.segments()) {
    if (seg.segment() == a.segment) moved = seg.primary().server_id() != primary;
  }
  EXPECT_TRUE(moved) << "the write succeeded but the segment did not move";

  // The stale client's read and write are on their way to the frozen server
  // when it wakes up: they find it past its lease.
  Status read_status, write_status;
  std::string stale_read(kSize, '\0');
  const std::string stale_write = Pattern(kSize, 23);
  std::thread reader([&] { read_status = stale->Read(a, stale_read.data(), kSize); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  wake();
  reader.join();
  ASSERT_TRUE(read_status.ok()) << read_status.ToString();
  EXPECT_EQ(stale_read, during) << "a stale read from the woken server";
  write_status = stale->Write(a, stale_write.data(), kSize);
  ASSERT_TRUE(write_status.ok()) << write_status.ToString();
  std::unique_ptr<Client> fresh;
  ASSERT_TRUE(OpenClient(&fresh).ok());
  ASSERT_TRUE(fresh->Read(a, got.data(), kSize).ok());
  EXPECT_EQ(got, stale_write) << "an acknowledged write the new primary does not have";

  FinishLoad(&load);
  VerifyLoad(2);
  const std::string victim_log = FileTail(cluster_.server_log(victim), 1 << 22);
  EXPECT_NE(victim_log.find("lease had expired"), std::string::npos)
      << FileTail(cluster_.server_log(victim));
  // No live server was declared DOWN on the way. How late the live
  // servers' heartbeats came is printed: the margin the default timing
  // leaves on this host (docs/monitor.md "Timing").
  const std::string monitor_log = FileTail(cluster_.dir() + "/monitor.log", 1 << 22);
  int late = 0;
  long longest_gap_ms = 0;
  for (int i = 0; i < 3; i++) {
    if (i == victim) continue;
    const std::string id = "server_id=" + std::to_string(IdOf(i)) + " ";
    std::istringstream lines(monitor_log);
    for (std::string line; std::getline(lines, line);) {
      if (line.find(id) == std::string::npos) continue;
      if (line.find("server is down") != std::string::npos) {
        ADD_FAILURE() << "a live server was declared DOWN: " << line;
      }
      const size_t gap = line.find("gap_ms=");
      if (line.find("late heartbeat") != std::string::npos && gap != std::string::npos) {
        late++;
        longest_gap_ms = std::max(longest_gap_ms, std::stol(line.substr(gap + 7)));
      }
    }
  }
  std::printf("live servers: %d late heartbeats, the longest gap %ld ms\n", late, longest_gap_ms);
  StopServersAndExpectCleanPm(cluster_);
}

// A wait on a server that hangs without closing anything (SIGSTOP) ends
// when the monitor's failover moves what it waits for, not at the op
// timeout: with a ten-minute op timeout, a one-sided write and an RPC
// (Persist) that were waiting on the frozen primary complete through the
// promoted copy, and the data is there.
TEST_F(ReplicatedClusterTest, WaitsOnAFrozenServerFollowTheFailoverNotTheOpTimeout) {
  constexpr size_t kSize = 8192;
  GlobalAddress a;
  ASSERT_TRUE(client_->PAllocate(kSize, &a).ok());
  ASSERT_TRUE(client_->Write(a, Pattern(kSize, 1).data(), kSize).ok());
  WaitReplicated({}, 3);
  ClientOptions patient = TestClientOptions(cluster_.monitor_address(), cluster_.secret());
  patient.op_timeout_ms = 600'000;
  std::unique_ptr<Client> writer, persister;
  ASSERT_TRUE(Client::Open(patient, &writer).ok());
  ASSERT_TRUE(Client::Open(patient, &persister).ok());
  const int victim = PrimaryOf(a.segment);
  ASSERT_GE(victim, 0);

  ASSERT_TRUE(cluster_.server(victim).Freeze().ok());
  const std::string data = Pattern(kSize, 2);
  auto write = std::async(std::launch::async, [&] { return writer->Write(a, data.data(), kSize); });
  auto persist = std::async(std::launch::async, [&] { return persister->Persist(a, kSize); });
  // Far below the op timeout, far above a failover on a loaded host.
  const auto bound = std::chrono::seconds(120);
  const bool wrote = write.wait_for(bound) == std::future_status::ready;
  const bool persisted = persist.wait_for(bound) == std::future_status::ready;
  cluster_.server(victim).Signal(SIGCONT);
  ASSERT_TRUE(wrote) << "the write still waited on the frozen server after 120 s";
  ASSERT_TRUE(persisted) << "the Persist RPC still waited on the frozen server after 120 s";
  Status s = write.get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = persist.get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(PrimaryOf(a.segment), victim) << "completed without the segment moving";
  std::unique_ptr<Client> fresh;
  ASSERT_TRUE(OpenClient(&fresh).ok());
  std::string got(kSize, '\0');
  ASSERT_TRUE(fresh->Read(a, got.data(), kSize).ok());
  EXPECT_EQ(got, data);
}

// A segment whose every copy is on a killed server: once the failover wait
// ends the client is told the view will not move it (its servers are
// down, no copy took over) rather than only why the last attempt failed;
// with the servers back the data is served again.
TEST_F(ReplicatedClusterTest, DataOnlyOnDownServersFailsSayingSo) {
  constexpr size_t kSize = 8192;
  GlobalAddress a;
  ASSERT_TRUE(client_->PAllocate(kSize, &a).ok());
  const std::string data = Pattern(kSize, 4);
  ASSERT_TRUE(client_->Write(a, data.data(), kSize).ok());
  WaitReplicated({}, 3);
  std::set<uint32_t> holders;
  const v1::GetMappingResponse m = Mapping();
  for (const auto& seg : m.segments()) {
    if (seg.segment() != a.segment) continue;
    holders.insert(seg.primary().server_id());
    for (const auto& b : seg.backups()) holders.insert(b.server_id());
  }
  ASSERT_EQ(holders.size(), 2u);
  ClientOptions o = TestClientOptions(cluster_.monitor_address(), cluster_.secret());
  o.failover_wait_ms = net::testing::ScaledMs(3000);
  std::unique_ptr<Client> reader;
  ASSERT_TRUE(Client::Open(o, &reader).ok());
  std::vector<int> killed;
  for (int i = 0; i < 3; i++) {
    if (holders.count(IdOf(i)) != 0) killed.push_back(i);
  }
  for (int i : killed) cluster_.KillServer(i);
  std::string got(kSize, '\0');
  Status s = reader->Read(a, got.data(), kSize);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("no in-sync copy of this data was left"), std::string_view::npos)
      << s.ToString();
  for (int i : killed) {
    s = cluster_.StartServer(i);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::unique_ptr<Client> fresh;
  ASSERT_TRUE(OpenClient(&fresh).ok());
  s = fresh->Read(a, got.data(), kSize);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, data);
}

// A table segment's objects change only through its server's RPCs: its
// memory is registered for remote reads only, also under the key a
// promotion registers it anew with (every access before: a client holding
// the key could have written the table's bytes behind its server).
TEST_F(ReplicatedClusterTest, APromotedTableSegmentIsOnlyReadRemotely) {
  ASSERT_TRUE(client_->PutObj({7, 1}, "table data").ok());
  WaitReplicated({}, 3);
  auto table_segment = [&](v1::SegmentMapping* out) {
    const v1::GetMappingResponse m = Mapping();
    for (const auto& seg : m.segments()) {
      if (seg.table() != 0) *out = seg;
    }
    return out->table() != 0;
  };
  v1::SegmentMapping seg;
  ASSERT_TRUE(table_segment(&seg));
  const int victim = PrimaryOf(static_cast<uint32_t>(seg.segment()));
  ASSERT_GE(victim, 0);
  cluster_.KillServer(victim);
  std::string got;
  Status s = client_->GetObj({7, 1}, &got);  // follows the promotion
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, "table data");
  WaitReplicated({IdOf(victim)}, 2);
  ASSERT_TRUE(table_segment(&seg));
  const int primary = PrimaryOf(static_cast<uint32_t>(seg.segment()));
  ASSERT_GE(primary, 0);
  ASSERT_NE(primary, victim);

  monitor::MonitorClient mon(cluster_.monitor_address(), {cluster_.secret()});
  v1::GetSegmentKeysResponse keys;
  ASSERT_TRUE(mon.GetSegmentKeys({seg.segment()}, &keys).ok());
  ASSERT_EQ(keys.segments_size(), 1);
  std::unique_ptr<net::Transport> t;
  ASSERT_TRUE(net::Transport::Create(net::testing::TestOptions(), &t).ok());
  std::unique_ptr<net::RpcClient> rpc;
  s = net::RpcClient::Connect(t.get(), cluster_.server_address(primary), 0,
                              server::DataPlaneRpcOptions(1, net::testing::ScaledMs(2000)), &rpc);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::unique_ptr<net::BufferPool> pool;
  ASSERT_TRUE(
      net::BufferPool::Create(t.get(), 4096, 1, net::kRemoteRead | net::kRemoteWrite, &pool).ok());
  net::BufferPool::Buffer b;
  ASSERT_TRUE(pool->Acquire(&b).ok());
  net::Op op;
  op.opcode = net::Opcode::kRead;
  op.id = 1;
  op.local = b.local(64);
  op.remote_key = keys.segments(0).access_key();
  op.remote_offset = 1 << 20;
  s = net::ExecuteSync(rpc->connection(), op);
  EXPECT_TRUE(s.ok()) << s.ToString();
  op.opcode = net::Opcode::kWrite;
  op.id = 2;
  op.persist = true;
  EXPECT_EQ(net::ExecuteSync(rpc->connection(), op).code(), StatusCode::kPermissionDenied);
  s = client_->GetObj({7, 1}, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, "table data");
}

TEST_F(ReplicatedClusterTest, DrainedServerHoldsNothingAndLeaves) {
  std::vector<GlobalAddress> blocks;
  for (uint64_t i = 1; i <= 12; i++) {
    Status s = client_->PutObj({3, i}, Pattern(i * 5000, static_cast<uint32_t>(i)));
    ASSERT_TRUE(s.ok()) << s.ToString();
    GlobalAddress a;
    s = client_->PAllocate(i * 1000, &a);
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = client_->Write(a, Pattern(i * 1000, static_cast<uint32_t>(i + 50)).data(), i * 1000);
    ASSERT_TRUE(s.ok()) << s.ToString();
    blocks.push_back(a);
  }
  WaitReplicated({}, 3);
  const uint32_t leaving = IdOf(2);
  monitor::MonitorClient mc(cluster_.monitor_address(), {cluster_.secret()});
  v1::DrainServerRequest req;
  req.set_server_id(leaving);
  v1::DrainServerResponse resp;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  do {
    Status s = mc.DrainServer(req, &resp);
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (resp.state() == v1::SERVER_STATE_DRAINED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  ASSERT_EQ(resp.state(), v1::SERVER_STATE_DRAINED) << resp.message();
  WaitReplicated({leaving}, 2);
  ASSERT_TRUE(cluster_.StopServer(2).ok());
  for (uint64_t i = 1; i <= 12; i++) {
    std::string got;
    Status s = client_->GetObj({3, i}, &got);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(got, Pattern(i * 5000, static_cast<uint32_t>(i)));
    std::string mem(i * 1000, '\0');
    s = client_->Read(blocks[i - 1], mem.data(), mem.size());
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(mem, Pattern(i * 1000, static_cast<uint32_t>(i + 50)));
  }
  StopServersAndExpectCleanPm(cluster_);
}

// Six local segments of `segment_mib` MiB a server.
LocalClusterOptions SixSegmentOptions(uint64_t segment_mib) {
  LocalClusterOptions o = ReplicatedOptions();
  o.segment_size = segment_mib << 20;
  o.pm_size = (6 * segment_mib + 2) * (1ull << 20);
  return o;
}

class SegmentReleaseTest : public ReplicatedClusterTest {
 protected:
  // Small segments by default, so that a few megabytes of heap take
  // several of them.
  explicit SegmentReleaseTest(uint64_t segment_mib = 8)
      : ReplicatedClusterTest(SixSegmentOptions(segment_mib)) {}

  // What `pdpm status` shows of the cluster's use: mapped segments, bytes
  // allocated, and per server the local segments holding a copy.
  struct Use {
    uint32_t segments = 0;
    uint64_t used_bytes = 0;
    std::map<uint32_t, uint32_t> segments_used;  // server id -> local segments
    bool operator==(const Use&) const = default;
    std::string ToString() const {
      std::string out =
          std::to_string(segments) + " segment(s), " + std::to_string(used_bytes) + " bytes used;";
      for (auto [id, n] : segments_used) {
        out += " server " + std::to_string(id) + ": " + std::to_string(n);
      }
      return out;
    }
  };

  Use StatusUse() {
    monitor::MonitorClient mc(cluster_.monitor_address(), {cluster_.secret()});
    v1::ClusterStatus st;
    Status s = mc.GetClusterStatus(&st);
    EXPECT_TRUE(s.ok()) << s.ToString();
    Use use;
    use.segments = st.segments();
    use.used_bytes = st.used_bytes();
    for (const auto& sv : st.servers()) use.segments_used[sv.id()] = sv.segments_used();
    return use;
  }

  // Waits (bounded: the release waits five seconds of emptiness, and
  // servers report their bytes with their heartbeats) until the status
  // satisfies `want`, described by `what`.
  template <typename Want>
  void WaitForUse(const std::string& what, Want want) {
    Use now;
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(net::testing::ScaledMs(60000));
    while (std::chrono::steady_clock::now() < deadline) {
      now = StatusUse();
      if (want(now)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "use is " << now.ToString() << ", expected " << what << "\n"
                  << cluster_.LogTails();
  }
  void WaitForUse(const Use& start) {
    WaitForUse(start.ToString(), [&](const Use& now) { return now == start; });
  }

  // Heap segments whose primary is server `id`.
  uint32_t HeapSegmentsOf(uint32_t id) {
    uint32_t n = 0;
    const v1::GetMappingResponse m = Mapping();
    for (const auto& seg : m.segments()) n += seg.table() == 0 && seg.primary().server_id() == id;
    return n;
  }

  // Allocates 1 MiB blocks on server `id`, each written and read back,
  // until `segments` of its heap segments hold them.
  void FillHeap(uint32_t id, uint32_t segments, std::vector<GlobalAddress>* blocks) {
    constexpr uint64_t kBlock = 1ull << 20;
    while (HeapSegmentsOf(id) < segments) {
      ASSERT_LT(blocks->size(), 200u) << "the heap does not grow";
      GlobalAddress a;
      Status s = client_->PAllocate(kBlock, id, &a);
      ASSERT_TRUE(s.ok()) << s.ToString() << " after " << blocks->size() << " blocks";
      const std::string data = Pattern(kBlock, static_cast<uint32_t>(blocks->size()));
      s = client_->Write(a, data.data(), data.size());
      ASSERT_TRUE(s.ok()) << s.ToString();
      blocks->push_back(a);
    }
    for (size_t i = 0; i < blocks->size(); ++i) {
      std::string got(kBlock, '\0');
      Status s = client_->Read((*blocks)[i], got.data(), got.size());
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_EQ(got, Pattern(kBlock, static_cast<uint32_t>(i)));
    }
  }

  void FreeAll(std::vector<GlobalAddress>* blocks) {
    for (const GlobalAddress& a : *blocks) {
      Status s = client_->PFree(a);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    blocks->clear();
  }
};

// Deleting data gives its segments back (issue 16): once the heap blocks
// are freed, their segments leave the view, every copy's local segment is
// free again, and `pdpm status` shows the use the cluster started with.
// Each server in turn fills 5 of its 6 local segments with heap segments
// of its own (their backups on the other two): the local segments that
// held the previous round's backups must have come back for that. A full
// restart keeps it so.
TEST_F(SegmentReleaseTest, FreedHeapSegmentsGoBackAndUseReturnsToItsStart) {
  WaitReplicated({}, 3);
  const Use start = StatusUse();
  std::vector<GlobalAddress> blocks;
  for (int i = 0; i < cluster_.server_count(); ++i) {
    FillHeap(IdOf(i), 5, &blocks);
    if (HasFatalFailure()) return;
    WaitForUse("5 more segments and 5 MiB more", [&](const Use& now) {
      return now.segments >= start.segments + 5 && now.used_bytes > start.used_bytes + (5ull << 20);
    });
    FreeAll(&blocks);
    if (HasFatalFailure()) return;
    WaitForUse(start);
    if (HasFailure()) return;
  }
  // A full restart: nothing released comes back, the heap grows again.
  for (int i = 0; i < cluster_.server_count(); ++i) {
    Status s = cluster_.StopServer(i);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (int i = 0; i < cluster_.server_count(); ++i) {
    Status s = cluster_.StartServer(i);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  WaitForUse(start);
  FillHeap(IdOf(0), 2, &blocks);
  if (HasFatalFailure()) return;
  StopServersAndExpectCleanPm(cluster_);
}

// Segments a table's size classes fit in (a table takes a chunk per class:
// index entries, object headers, its bucket array with the 64 KiB extents,
// 4 KiB pages), and so does the transaction log (half a segment's worth of
// areas).
class TableSegmentReleaseTest : public SegmentReleaseTest {
 protected:
  TableSegmentReleaseTest() : SegmentReleaseTest(64) {}
};

// Emptied tables give their segments back too (issue 16): objects put
// into two tables take a table segment each (with its backup); once every
// object is deleted the segments leave the view and `pdpm status` shows
// the use the cluster started with. Then the same through transactions
// (a table segment closes to them before its release,
// TxParticipant::CloseSegment): the view drops the segments again (the
// transaction logs the first transaction created stay, server-local). A
// table used again gets a new segment.
TEST_F(TableSegmentReleaseTest, EmptiedTableSegmentsGoBackAndUseReturnsToItsStart) {
  WaitReplicated({}, 3);
  const Use start = StatusUse();
  const uint32_t tables = Mapping().table_count();
  std::vector<ObjectId> ids;  // 6 objects in each of two tables
  std::map<uint32_t, int> per_table;
  for (uint64_t i = 0; ids.size() < 12; ++i) {
    const ObjectId id{0x5e9, i};
    const uint32_t t = monitor::TableForObject(id.hi, id.lo, tables);
    if ((per_table.size() == 2 && per_table.count(t) == 0) || per_table[t] == 6) continue;
    ++per_table[t];
    ids.push_back(id);
  }
  auto read_all = [&](size_t size) {
    for (size_t i = 0; i < ids.size(); ++i) {
      std::string got;
      Status s = client_->GetObj(ids[i], &got);
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_EQ(got, Pattern(size, static_cast<uint32_t>(i)));
    }
  };

  constexpr size_t kPlainSize = 256 << 10;
  for (size_t i = 0; i < ids.size(); ++i) {
    Status s = client_->PutObj(ids[i], Pattern(kPlainSize, static_cast<uint32_t>(i)));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  WaitForUse("2 more segments and 2 MiB more", [&](const Use& now) {
    return now.segments == start.segments + 2 && now.used_bytes > start.used_bytes + (2ull << 20);
  });
  ASSERT_NO_FATAL_FAILURE(read_all(kPlainSize));
  for (const ObjectId& id : ids) {
    Status s = client_->DelObj(id);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  WaitForUse(start);
  if (HasFailure()) return;

  // Transactions; one may abort (run again) while its table's segment is
  // being created or released.
  auto run = [&](const std::function<Status(Transaction*)>& fill) {
    Status s;
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::unique_ptr<Transaction> tx;
      s = client_->TxBegin(&tx);
      if (s.ok()) s = fill(tx.get());
      if (s.ok()) s = tx->Commit();
      if (s.code() != StatusCode::kAborted) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return s;
  };
  constexpr size_t kTxSize = 2000;
  for (size_t i = 0; i < ids.size(); i += 2) {
    Status s = run([&](Transaction* tx) {
      PDPM_RETURN_IF_ERROR(tx->PutObj(ids[i], Pattern(kTxSize, static_cast<uint32_t>(i))));
      return tx->PutObj(ids[i + 1], Pattern(kTxSize, static_cast<uint32_t>(i + 1)));
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  WaitForUse("2 more segments", [&](const Use& now) { return now.segments == start.segments + 2; });
  ASSERT_NO_FATAL_FAILURE(read_all(kTxSize));
  for (size_t i = 0; i < ids.size(); i += 2) {
    Status s = run([&](Transaction* tx) {
      PDPM_RETURN_IF_ERROR(tx->DelObj(ids[i]));
      return tx->DelObj(ids[i + 1]);
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  WaitForUse("the starting segments",
             [&](const Use& now) { return now.segments == start.segments; });
  if (HasFailure()) return;
  std::string gone;
  EXPECT_EQ(client_->GetObj(ids[0], &gone).code(), StatusCode::kNotFound);
  ASSERT_TRUE(client_->PutObj(ids[0], Pattern(kTxSize, 0)).ok());
  std::string got;
  ASSERT_TRUE(client_->GetObj(ids[0], &got).ok());
  EXPECT_EQ(got, Pattern(kTxSize, 0));
  StopServersAndExpectCleanPm(cluster_);
}

// The daemon alone: it never formats without being asked, and wipes a
// device on request.
TEST(ServerBinaryTest, RefusesUnformattedPmAndWipes) {
  LocalClusterOptions o;
  o.servers = 0;
  LocalCluster dir(o);  // only for its temporary directory and secret file
  std::string pm = dir.dir() + "/blank", log = dir.dir() + "/server.log";
  ChildProcess p;
  ASSERT_TRUE(p.Start({PDPM_SERVER_BINARY, "--pm", pm, "--pm-size", "260MiB", "--monitor",
                       "127.0.0.1:1", "--secret-file", dir.secret_file()},
                      {}, log)
                  .ok());
  int ws = p.Wait();
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 1) << ws;
  EXPECT_NE(FileTail(log).find("not formatted"), std::string::npos) << FileTail(log);

  { std::ofstream(pm, std::ios::in | std::ios::out | std::ios::binary) << "data to wipe"; }
  ASSERT_TRUE(p.Start({PDPM_SERVER_BINARY, "--wipe-pm=" + pm}, {}, log).ok());
  ws = p.Wait();
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << FileTail(log);
  std::ifstream in(pm, std::ios::binary);
  std::string head(4096, 'x');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  EXPECT_EQ(head, std::string(4096, '\0'));
}

// A server's labels reach the monitor's view: --label first, then the
// labels file (what the operator's node-topology step writes), then
// POD_NAME and NODE_NAME from the environment.
TEST(ServerBinaryTest, RegistersLabelsFromFlagFileAndEnvironment) {
  LocalClusterOptions o;
  o.servers = 0;
  LocalCluster probe(o);  // a directory for the labels file
  std::string labels = probe.dir() + "/labels";
  std::ofstream(labels) << "# node n1\nconfig_version = 1\nzone = z1\nrack = file-rack\n"
                           "host = file-host\n";
  o.servers = 1;
  o.server_args = {"--labels-file", labels, "--label", "rack=flag-rack"};
  o.server_env = {"POD_NAME=pod-0", "NODE_NAME=env-host"};
  LocalCluster cluster(o);
  Status s = cluster.Start();
  ASSERT_TRUE(s.ok()) << s.ToString() << cluster.LogTails();
  v1::GetMappingResponse view;
  ASSERT_TRUE(cluster.GetMapping(&view).ok());
  ASSERT_EQ(view.servers_size(), 1);
  std::map<std::string, std::string> got(view.servers(0).labels().begin(),
                                         view.servers(0).labels().end());
  EXPECT_EQ(got,
            (std::map<std::string, std::string>{
                {"zone", "z1"}, {"rack", "flag-rack"}, {"host", "file-host"}, {"pod", "pod-0"}}));
}

// A labels file that is missing or malformed stops the start with one
// error naming it.
TEST(ServerBinaryTest, RefusesABadLabelsFile) {
  LocalClusterOptions o;
  o.servers = 0;
  LocalCluster dir(o);
  std::string bad = dir.dir() + "/bad-labels", log = dir.dir() + "/server.log";
  std::ofstream(bad) << "zone = z1\nrack\n";
  for (const auto& [file, says] : std::vector<std::pair<std::string, std::string>>{
           {dir.dir() + "/absent", "labels file"}, {bad, bad + " line 2"}}) {
    ChildProcess p;
    ASSERT_TRUE(
        p.Start({PDPM_SERVER_BINARY, "--pm", dir.dir() + "/pm", "--pm-size", "260MiB", "--monitor",
                 "127.0.0.1:1", "--secret-file", dir.secret_file(), "--labels-file", file},
                {}, log)
            .ok());
    int ws = p.Wait();
    EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 1) << ws;
    EXPECT_NE(FileTail(log).find(says), std::string::npos) << FileTail(log);
  }
}

// Backups filled at 1 MiB/s: a new heap segment's first fill (its region
// header's 4 MiB chunk, then its free chunks' headers) takes about four
// seconds, past the clients' reply timeout, as pinning a segment and its
// backup's copy with an emulated RDMA device does.
LocalClusterOptions SlowFillOptions() {
  LocalClusterOptions o = ReplicatedOptions();
  o.server_args = {"--resync-rate=1MiB"};
  return o;
}

class SlowFillClusterTest : public ReplicatedClusterTest {
 protected:
  SlowFillClusterTest() : ReplicatedClusterTest(SlowFillOptions()) {}
};

// Every server's first allocation, at once, while its heap segment is
// created and first filled for longer than a reply timeout: the servers
// refuse them (nothing allocated) until the segments take writes, and each
// succeeds, once, in its server's one new segment. Made inside the request
// (before), the allocations timed out (kUnavailable: their outcome unknown,
// so not sent again).
TEST_F(SlowFillClusterTest, FirstAllocationsWaitForTheirHeapSegment) {
  std::vector<uint32_t> ids;
  for (int i = 0; i < 3; i++) ids.push_back(IdOf(i));
  std::vector<Status> allocated(ids.size());
  std::vector<GlobalAddress> blocks(ids.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ids.size(); i++) {
    threads.emplace_back([&, i] { allocated[i] = client_->PAllocate(4096, ids[i], &blocks[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < ids.size(); i++) {
    ASSERT_TRUE(allocated[i].ok()) << "server " << ids[i] << ": " << allocated[i].ToString();
  }
  WaitReplicated({}, 3);
  // One heap segment a server, each holding its server's block.
  const v1::GetMappingResponse m = Mapping();
  EXPECT_EQ(m.segments_size(), 3) << m.DebugString();
  for (size_t i = 0; i < ids.size(); i++) {
    EXPECT_EQ(PrimaryOf(blocks[i].segment), static_cast<int>(i));
    const std::string data = Pattern(4096, static_cast<uint32_t>(i));
    Status s = client_->Write(blocks[i], data.data(), data.size());
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::string got(data.size(), '\0');
    s = client_->Read(blocks[i], got.data(), got.size());
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(got, data);
  }
  StopServersAndExpectCleanPm(cluster_);
}

// Two servers with one announced core each, every segment's backup on the
// other: each mutation a server serves ships to the other. More concurrent
// writers than both servers' serving threads: shipping reaches the peer's
// replication core, whose thread serves nothing else, so no write waits for
// the other server's busy threads (sharing them, two servers shipping to
// each other could hold them all until the transport timeout).
LocalClusterOptions CrossReplicationOptions() {
  LocalClusterOptions o = ReplicatedOptions();
  o.servers = 2;
  o.cores = 1;
  o.tables = 4;
  return o;
}

class CrossReplicationTest : public ClusterFixture {
 protected:
  CrossReplicationTest() : ClusterFixture(CrossReplicationOptions()) {}
};

TEST_F(CrossReplicationTest, WritersBeyondServingThreadsNeverWaitForThePeer) {
  constexpr int kWriters = 8;
  constexpr uint64_t kOps = 40;
  // A write that waited for a peer's serving thread would take the whole
  // transport timeout.
  const auto stalled = std::chrono::milliseconds(net::testing::ScaledMs(2000));
  // Every table's segment exists (created and first filled) before the
  // timed writes.
  for (uint32_t t = 1; t <= 4; t++) {
    uint64_t id = 0;
    while (monitor::TableForObject(99, id, 4) != t) id++;
    Status s = client_->PutObj({99, id}, "warm-up");
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::atomic<int> failures{0}, stalls{0};
  std::vector<std::thread> writers;
  writers.reserve(kWriters);
  for (int w = 0; w < kWriters; w++) {
    writers.emplace_back([&, w] {
      std::unique_ptr<Client> c;
      Status s = OpenClient(&c);
      if (!s.ok()) {
        ADD_FAILURE() << s.ToString();
        failures++;
        return;
      }
      for (uint64_t i = 0; i < kOps; i++) {
        auto start = std::chrono::steady_clock::now();
        s = c->PutObj({static_cast<uint64_t>(w + 1), i},
                      Pattern(3000, static_cast<uint32_t>(static_cast<uint64_t>(w) * 1000 + i)));
        if (!s.ok()) {
          ADD_FAILURE() << "writer " << w << " op " << i << ": " << s.ToString();
          failures++;
          return;
        }
        if (std::chrono::steady_clock::now() - start >= stalled) stalls++;
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(stalls.load(), 0);
  // Both servers were primaries shipping to each other.
  monitor::MonitorClient mc(cluster_.monitor_address(), {cluster_.secret()});
  v1::GetMappingResponse m;
  ASSERT_TRUE(mc.GetMapping(0, &m).ok());
  std::set<uint32_t> primaries;
  for (const auto& seg : m.segments()) primaries.insert(seg.primary().server_id());
  EXPECT_EQ(primaries.size(), 2u) << m.DebugString();
  for (int w = 0; w < kWriters; w++) {
    for (uint64_t i = 0; i < kOps; i++) {
      std::string got;
      Status s = client_->GetObj({static_cast<uint64_t>(w + 1), i}, &got);
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_EQ(got, Pattern(3000, static_cast<uint32_t>(static_cast<uint64_t>(w) * 1000 + i)));
    }
  }
}

}  // namespace
}  // namespace pdpm::client
