// Process-level tests of pdpm-monitor: each test starts the real daemon on a
// free loopback port with its own directory and drives it over gRPC through
// MonitorClient.
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <thread>

#include "monitor/grpc_status.h"
#include "monitor/monitor_client.h"

namespace pdpm::monitor {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr uint64_t kSegmentSize = 8ULL << 20;
constexpr char kSecret[] = "test-cluster-secret";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One pdpm-monitor process; killed (SIGKILL) when destroyed if still running.
class MonitorProcess {
 public:
  // Starts the daemon and waits until it serves (true) or exits (false).
  bool Start(const std::string& dir, const std::string& log_path,
             const std::vector<std::string>& extra_args,
             const std::string& listen = "127.0.0.1:0") {
    port_file_ = dir + ".port";
    std::error_code ignored;
    fs::remove(port_file_, ignored);
    std::vector<std::string> args = {PDPM_MONITOR_BINARY, "--embedded", "--dir",       dir,
                                     "--listen",          listen,       "--port-file", port_file_};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    // posix_spawn, not fork: this process runs gRPC threads, and a forked
    // child of a threaded process may only call async-signal-safe functions.
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = -1;
      return false;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::string addr = ReadFile(port_file_);
      if (!addr.empty() && addr.back() == '\n') {
        address_ = addr.substr(0, addr.size() - 1);
        return true;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    pid_ = -1;
  }
  ~MonitorProcess() { Kill(SIGKILL); }

  const std::string& address() const { return address_; }
  int exit_code() const { return exit_code_; }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string port_file_;
  std::string address_;
};

class MonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pdpm-monitor-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/view";
    log_ = root_ + "/monitor.log";
    std::ofstream(root_ + "/secret") << kSecret << "\n";
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "monitor log:\n" << ReadFile(log_);
    monitor_.reset();
    fs::remove_all(root_);
  }

  std::vector<std::string> BaseArgs() const {
    return {"--secret-file", root_ + "/secret", "--segment-size", "8MiB", "--tables", "64"};
  }

  // Starts the monitor with BaseArgs() plus `extra` and connects a client.
  // The servers these tests register heartbeat only where a test of
  // liveness says so, and gives its own timing: with the daemon's default
  // 250/500 ms timeouts a loaded host let them go DOWN mid-test (a
  // reconfiguration and an epoch the test did not expect), so the others
  // run with timeouts no test reaches.
  void StartMonitor(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = BaseArgs();
    if (std::find(extra.begin(), extra.end(), "--down-timeout") == extra.end()) {
      args.insert(args.end(), {"--suspect-timeout", "10m", "--down-timeout", "20m"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    monitor_ = std::make_unique<MonitorProcess>();
    ASSERT_TRUE(monitor_->Start(dir_, log_, args)) << "monitor did not start:\n" << ReadFile(log_);
    client_ = Client(kSecret);
    ASSERT_TRUE(client_->WaitReady(milliseconds(10000)).ok());
  }

  std::unique_ptr<MonitorClient> Client(std::string secret) const {
    return std::make_unique<MonitorClient>(monitor_->address(),
                                           MonitorClientOptions{std::move(secret)});
  }

  // Runs the daemon expecting it to refuse to start; returns its log.
  std::string ExpectStartFailure(const std::vector<std::string>& args, int* exit_code,
                                 const std::string& listen = "127.0.0.1:0",
                                 const std::string& dir = "") {
    fs::remove(log_ + ".fail");
    MonitorProcess p;
    EXPECT_FALSE(p.Start(dir.empty() ? dir_ : dir, log_ + ".fail", args, listen));
    *exit_code = p.exit_code();
    return ReadFile(log_ + ".fail");
  }

  static v1::RegisterServerRequest NewServer(
      const std::string& addr, uint32_t segments = 16,
      const std::map<std::string, std::string>& labels = {}) {
    v1::RegisterServerRequest req;
    req.mutable_info()->set_address(addr);
    req.mutable_info()->set_transport("tcp");
    req.mutable_info()->set_cores(2);
    for (auto& [k, v] : labels) (*req.mutable_info()->mutable_labels())[k] = v;
    req.set_segment_count(segments);
    req.set_segment_size(kSegmentSize);
    return req;
  }

  v1::RegisterServerResponse Register(const v1::RegisterServerRequest& req) {
    v1::RegisterServerResponse resp;
    Status s = client_->RegisterServer(req, &resp);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return resp;
  }

  Status Allocate(uint32_t server, uint32_t local, uint32_t table, uint32_t key,
                  v1::AllocateSegmentResponse* resp) {
    v1::AllocateSegmentRequest req;
    req.set_server_id(server);
    req.set_epoch(client_epoch_);
    req.set_local_index(local);
    req.set_table(table);
    req.set_access_key(key);
    return client_->AllocateSegment(req, resp);
  }

  v1::GetMappingResponse Mapping() {
    v1::GetMappingResponse m;
    Status s = client_->GetMapping(0, &m);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return m;
  }

  v1::ClusterStatus ClusterStatus() {
    v1::ClusterStatus st;
    Status s = client_->GetClusterStatus(&st);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return st;
  }

  // The first table owned by `server` in `m`, 0 if none.
  static uint32_t TableOf(const v1::GetMappingResponse& m, uint32_t server) {
    for (const auto& t : m.tables()) {
      if (t.server_id() == server) return t.table();
    }
    return 0;
  }

  std::string root_, dir_, log_;
  std::unique_ptr<MonitorProcess> monitor_;
  std::unique_ptr<MonitorClient> client_;
  uint64_t client_epoch_ = 0;
};

TEST_F(MonitorTest, RegisterAllocateFreeAndMappingWithEpoch) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  v1::ClusterStatus empty = ClusterStatus();
  EXPECT_EQ(empty.health(), v1::HEALTH_DOWN);
  EXPECT_EQ(empty.servers_total(), 0u);
  EXPECT_TRUE(empty.cluster_uuid().empty());

  std::vector<v1::RegisterServerResponse> joined;
  joined.reserve(3);
  for (int i = 0; i < 3; ++i) {
    joined.push_back(Register(NewServer("127.0.0.1:710" + std::to_string(i))));
  }
  EXPECT_FALSE(joined[0].cluster_uuid().empty());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(joined[i].cluster_uuid(), joined[0].cluster_uuid());
    EXPECT_EQ(joined[i].server_id(), static_cast<uint32_t>(i + 1));
    if (i > 0) {
      EXPECT_GT(joined[i].epoch(), joined[i - 1].epoch());
    }
  }
  client_epoch_ = joined[2].epoch();

  v1::GetMappingResponse m = Mapping();
  EXPECT_EQ(m.epoch(), client_epoch_);
  EXPECT_EQ(m.servers_size(), 3);
  EXPECT_EQ(m.segment_size(), kSegmentSize);
  EXPECT_EQ(m.table_count(), 64u);
  ASSERT_EQ(m.tables_size(), 64);
  std::map<uint32_t, int> per_server;
  for (const auto& t : m.tables()) ++per_server[t.server_id()];
  ASSERT_EQ(per_server.size(), 3u);  // every table owned, by the three servers
  for (auto [id, n] : per_server) EXPECT_TRUE(n == 21 || n == 22) << id << " owns " << n;

  // Unchanged view: the client skips it.
  v1::GetMappingResponse same;
  ASSERT_TRUE(client_->GetMapping(client_epoch_, &same).ok());
  EXPECT_TRUE(same.unchanged());
  EXPECT_EQ(same.servers_size(), 0);

  // A heap segment and an object segment on server 1.
  v1::AllocateSegmentResponse heap, obj;
  ASSERT_TRUE(Allocate(1, 0, 0, 0xaaaa, &heap).ok());
  EXPECT_EQ(heap.mapping().segment(), 1u);  // heap numbers grow from the bottom
  EXPECT_EQ(heap.mapping().primary().server_id(), 1u);
  EXPECT_EQ(heap.mapping().access_key(), 0u);             // keys never travel in mappings
  EXPECT_EQ(heap.mapping().segment_descriptor(), 0x13u);  // rw, 1 replica
  EXPECT_GT(heap.epoch(), client_epoch_);
  uint32_t t1 = TableOf(m, 1);
  ASSERT_NE(t1, 0u);
  ASSERT_TRUE(Allocate(1, 1, t1, 0xbbbb, &obj).ok());
  EXPECT_EQ(obj.mapping().segment(), 0xffffffffu);  // object numbers from the top
  EXPECT_EQ(obj.mapping().table(), t1);
  EXPECT_GT(obj.epoch(), heap.epoch());
  EXPECT_EQ(obj.mapping().placement_epoch(), obj.epoch());

  // The client's epoch is stale now: it gets the full view.
  v1::GetMappingResponse fresh;
  ASSERT_TRUE(client_->GetMapping(client_epoch_, &fresh).ok());
  EXPECT_FALSE(fresh.unchanged());
  EXPECT_EQ(fresh.epoch(), obj.epoch());
  EXPECT_EQ(fresh.segments_size(), 2);
  for (const auto& seg : fresh.segments()) EXPECT_EQ(seg.access_key(), 0u);

  // Retrying an allocation returns the same mapping without a new epoch.
  v1::AllocateSegmentResponse again;
  ASSERT_TRUE(Allocate(1, 0, 0, 0xaaaa, &again).ok());
  EXPECT_EQ(again.mapping().segment(), 1u);
  EXPECT_EQ(again.epoch(), obj.epoch());

  // Bad allocations, each with its own error.
  v1::AllocateSegmentResponse bad;
  EXPECT_EQ(Allocate(1, 0, t1, 1, &bad).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Allocate(1, 16, 0, 1, &bad).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Allocate(1, 2, 65, 1, &bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Allocate(9, 0, 0, 1, &bad).code(), StatusCode::kNotFound);
  EXPECT_EQ(Allocate(1, 2, TableOf(m, 2), 1, &bad).code(), StatusCode::kFailedPrecondition);
  client_epoch_ = 1u << 30;
  EXPECT_EQ(Allocate(1, 2, 0, 1, &bad).code(), StatusCode::kInvalidArgument);
  client_epoch_ = obj.epoch();

  // Free: only by the owner, only once.
  v1::FreeSegmentRequest fr;
  fr.set_server_id(2);
  fr.set_segment(1);
  v1::FreeSegmentResponse freed;
  EXPECT_EQ(client_->FreeSegment(fr, &freed).code(), StatusCode::kFailedPrecondition);
  fr.set_server_id(1);
  ASSERT_TRUE(client_->FreeSegment(fr, &freed).ok());
  EXPECT_GT(freed.epoch(), obj.epoch());
  EXPECT_EQ(client_->FreeSegment(fr, &freed).code(), StatusCode::kNotFound);
  fr.set_segment(12345);
  EXPECT_EQ(client_->FreeSegment(fr, &freed).code(), StatusCode::kNotFound);
  v1::GetMappingResponse after = Mapping();
  ASSERT_EQ(after.segments_size(), 1);
  EXPECT_EQ(after.segments(0).segment(), 0xffffffffu);
  // Numbers are never reused.
  v1::AllocateSegmentResponse next_heap;
  ASSERT_TRUE(Allocate(1, 0, 0, 0xcccc, &next_heap).ok());
  EXPECT_EQ(next_heap.mapping().segment(), 2u);

  // Heartbeats record use and do not change the epoch.
  v1::HeartbeatRequest hb;
  hb.set_server_id(2);
  hb.set_used_bytes(12345);
  v1::HeartbeatResponse hbr;
  ASSERT_TRUE(client_->Heartbeat(hb, &hbr).ok());
  EXPECT_EQ(hbr.epoch(), next_heap.epoch());
  hb.set_server_id(77);
  EXPECT_EQ(client_->Heartbeat(hb, &hbr).code(), StatusCode::kNotFound);

  v1::ClusterStatus st = ClusterStatus();
  EXPECT_EQ(st.health(), v1::HEALTH_OK) << st.message();
  EXPECT_EQ(st.servers_up(), 3u);
  EXPECT_EQ(st.servers_total(), 3u);
  EXPECT_EQ(st.capacity_bytes(), kSegmentSize * 48);
  EXPECT_EQ(st.used_bytes(), 12345u);
  EXPECT_EQ(st.epoch(), next_heap.epoch());
  EXPECT_EQ(st.leader(), monitor_->address());
  EXPECT_EQ(st.segments(), 2u);
}

TEST_F(MonitorTest, SecretIsRequiredAndChecked) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  auto no_secret = Client("");
  auto wrong = Client("not-the-secret");
  v1::RegisterServerResponse resp;
  Status s = no_secret->RegisterServer(NewServer("127.0.0.1:7100"), &resp);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  s = wrong->RegisterServer(NewServer("127.0.0.1:7100"), &resp);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("wrong cluster secret"), std::string::npos);
  EXPECT_TRUE(ClusterStatus().cluster_uuid().empty());  // nothing was registered

  uint32_t id = Register(NewServer("127.0.0.1:7100")).server_id();
  v1::AllocateSegmentResponse a;
  ASSERT_TRUE(Allocate(id, 3, 0, 0x5eed, &a).ok());

  v1::GetSegmentKeysResponse keys;
  EXPECT_EQ(no_secret->GetSegmentKeys({}, &keys).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(wrong->GetSegmentKeys({}, &keys).code(), StatusCode::kPermissionDenied);
  v1::HeartbeatRequest hb;
  hb.set_server_id(id);
  v1::HeartbeatResponse hbr;
  EXPECT_EQ(wrong->Heartbeat(hb, &hbr).code(), StatusCode::kPermissionDenied);
  v1::FreeSegmentRequest fr;
  fr.set_server_id(id);
  fr.set_segment(a.mapping().segment());
  v1::FreeSegmentResponse frr;
  EXPECT_EQ(no_secret->FreeSegment(fr, &frr).code(), StatusCode::kPermissionDenied);
  v1::AllocateSegmentRequest ar;
  ar.set_server_id(id);
  ar.set_local_index(4);
  v1::AllocateSegmentResponse arr;
  EXPECT_EQ(wrong->AllocateSegment(ar, &arr).code(), StatusCode::kPermissionDenied);

  // Without the secret the mapping and status are still readable, keyless.
  v1::GetMappingResponse m;
  ASSERT_TRUE(no_secret->GetMapping(0, &m).ok());
  ASSERT_EQ(m.segments_size(), 1);
  EXPECT_EQ(m.segments(0).access_key(), 0u);

  ASSERT_TRUE(client_->GetSegmentKeys({}, &keys).ok());
  ASSERT_EQ(keys.segments_size(), 1);
  EXPECT_EQ(keys.segments(0).access_key(), 0x5eedu);
  ASSERT_TRUE(client_->GetSegmentKeys({a.mapping().segment()}, &keys).ok());
  EXPECT_EQ(client_->GetSegmentKeys({999}, &keys).code(), StatusCode::kNotFound);

  // Other languages see the plain gRPC code.
  auto stub = v1::Monitor::NewStub(
      grpc::CreateChannel(monitor_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::GetSegmentKeysRequest kreq;
  kreq.set_cluster_secret("nope");
  grpc::Status gs = stub->GetSegmentKeys(&ctx, kreq, &keys);
  EXPECT_EQ(gs.error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(MonitorTest, RestartingServersAreRecognisedStrangersRefused) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  auto first = Register(NewServer("127.0.0.1:7100"));
  auto second = Register(NewServer("127.0.0.1:7101"));

  // A restart presents the identity from its PM superblock, maybe a new address.
  v1::RegisterServerRequest again = NewServer("127.0.0.1:7200");
  again.set_cluster_uuid(first.cluster_uuid());
  again.set_server_id(second.server_id());
  auto rejoined = Register(again);
  EXPECT_EQ(rejoined.server_id(), second.server_id());
  EXPECT_GT(rejoined.epoch(), second.epoch());  // the address changed
  EXPECT_EQ(Mapping().servers(1).address(), "127.0.0.1:7200");
  // The same identity again, unchanged: recognised, no new epoch.
  EXPECT_EQ(Register(again).epoch(), rejoined.epoch());
  EXPECT_EQ(Mapping().servers_size(), 2);

  v1::RegisterServerResponse resp;
  v1::RegisterServerRequest stranger = again;
  stranger.set_cluster_uuid("00000000-0000-4000-8000-000000000000");
  Status s = client_->RegisterServer(stranger, &resp);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("belongs to cluster 00000000"), std::string::npos);
  v1::RegisterServerRequest unknown_id = again;
  unknown_id.set_server_id(42);
  EXPECT_EQ(client_->RegisterServer(unknown_id, &resp).code(), StatusCode::kNotFound);
  v1::RegisterServerRequest id_without_uuid = NewServer("127.0.0.1:7300");
  id_without_uuid.set_server_id(1);
  EXPECT_EQ(client_->RegisterServer(id_without_uuid, &resp).code(), StatusCode::kInvalidArgument);
  v1::RegisterServerRequest other_size = NewServer("127.0.0.1:7300");
  other_size.set_segment_size(kSegmentSize * 2);
  EXPECT_EQ(client_->RegisterServer(other_size, &resp).code(), StatusCode::kFailedPrecondition);
  v1::RegisterServerRequest bad_transport = NewServer("127.0.0.1:7300");
  bad_transport.mutable_info()->set_transport("carrier-pigeon");
  EXPECT_EQ(client_->RegisterServer(bad_transport, &resp).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->RegisterServer(NewServer("127.0.0.1:7300", 0), &resp).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Mapping().servers_size(), 2);
}

TEST_F(MonitorTest, ViewSurvivesKill9) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor({"--replicas", "2"}));
  std::vector<v1::RegisterServerResponse> joined;
  joined.reserve(3);
  for (int i = 0; i < 3; ++i) {
    joined.push_back(Register(NewServer("127.0.0.1:710" + std::to_string(i))));
  }
  client_epoch_ = joined.back().epoch();
  v1::GetMappingResponse before_tables = Mapping();
  v1::AllocateSegmentResponse a;
  ASSERT_TRUE(Allocate(1, 0, 0, 111, &a).ok());
  ASSERT_TRUE(Allocate(2, 0, TableOf(before_tables, 2), 222, &a).ok());
  ASSERT_TRUE(Allocate(3, 5, 0, 333, &a).ok());
  v1::GetMappingResponse before = Mapping();
  v1::GetSegmentKeysResponse keys_before;
  ASSERT_TRUE(client_->GetSegmentKeys({}, &keys_before).ok());

  monitor_->Kill(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(StartMonitor());  // same directory; --replicas may be left out
  v1::GetMappingResponse after = Mapping();
  EXPECT_EQ(after.epoch(), before.epoch());
  EXPECT_EQ(after.cluster_uuid(), before.cluster_uuid());
  EXPECT_EQ(after.replica_count(), 2u);
  ASSERT_EQ(after.servers_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(after.servers(i).id(), before.servers(i).id());
    EXPECT_EQ(after.servers(i).address(), before.servers(i).address());
    EXPECT_EQ(after.servers(i).segments_used(), before.servers(i).segments_used());
  }
  EXPECT_EQ(after.segments_size(), 3);
  for (int i = 0; i < after.segments_size(); ++i) {
    EXPECT_EQ(after.segments(i).SerializeAsString(), before.segments(i).SerializeAsString());
  }
  for (int i = 0; i < after.tables_size(); ++i) {
    EXPECT_EQ(after.tables(i).SerializeAsString(), before.tables(i).SerializeAsString());
  }
  v1::GetSegmentKeysResponse keys_after;
  ASSERT_TRUE(client_->GetSegmentKeys({}, &keys_after).ok());
  EXPECT_EQ(keys_after.SerializeAsString(), keys_before.SerializeAsString());

  // A server restarting after the monitor is recognised; new ones get new ids.
  v1::RegisterServerRequest again = NewServer("127.0.0.1:7101");
  again.set_cluster_uuid(before.cluster_uuid());
  again.set_server_id(2);
  EXPECT_EQ(Register(again).server_id(), 2u);
  EXPECT_EQ(Register(NewServer("127.0.0.1:7109")).server_id(), 4u);
}

// A split over gRPC (docs/dsm.md "Tables across segments"): reserved, its
// new segment announced, the monitor killed with the split pending — the
// restarted monitor has it —, committed, and its commit retried.
TEST_F(MonitorTest, SplitSurvivesKill9AndCommitsOnce) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  for (int i = 0; i < 2; ++i) {
    v1::RegisterServerRequest req = NewServer("127.0.0.1:720" + std::to_string(i));
    req.set_features(v1::SERVER_FEATURE_SPLIT);
    client_epoch_ = Register(req).epoch();
  }
  const uint32_t table = TableOf(Mapping(), 1);
  ASSERT_NE(table, 0u);
  v1::AllocateSegmentResponse parent;
  ASSERT_TRUE(Allocate(1, 0, table, 0xaaaa, &parent).ok());
  v1::SplitSegmentRequest split_req;
  split_req.set_server_id(1);
  split_req.set_segment(parent.mapping().segment());
  v1::SplitSegmentResponse split;
  EXPECT_EQ(Client("")->SplitSegment(split_req, &split).code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(client_->SplitSegment(split_req, &split).ok());
  EXPECT_EQ(split.split().target_server(), 2u);  // the most free segments
  EXPECT_EQ(Mapping().splits_size(), 1);

  v1::AllocateSegmentRequest child_req;
  child_req.set_server_id(2);
  child_req.set_local_index(0);
  child_req.set_table(table);
  child_req.set_access_key(0xbbbb);
  child_req.set_split_parent(parent.mapping().segment());
  v1::AllocateSegmentResponse child;
  ASSERT_TRUE(client_->AllocateSegment(child_req, &child).ok());
  EXPECT_EQ(child.mapping().split_parent(), parent.mapping().segment());
  const v1::GetMappingResponse before = Mapping();

  monitor_->Kill(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  const v1::GetMappingResponse after = Mapping();
  EXPECT_EQ(after.epoch(), before.epoch());
  ASSERT_EQ(after.splits_size(), 1);
  EXPECT_EQ(after.splits(0).SerializeAsString(), before.splits(0).SerializeAsString());

  v1::CommitSplitRequest commit_req;
  commit_req.set_server_id(1);
  commit_req.set_segment(parent.mapping().segment());
  commit_req.set_child(child.mapping().segment());
  v1::CommitSplitResponse committed, again;
  ASSERT_TRUE(client_->CommitSplit(commit_req, &committed).ok());
  EXPECT_EQ(committed.parent().range_depth(), 1u);
  EXPECT_EQ(committed.child().range_prefix(), 1u);
  ASSERT_TRUE(client_->CommitSplit(commit_req, &again).ok());
  EXPECT_EQ(again.epoch(), committed.epoch());
  v1::CancelSplitRequest cancel_req;
  cancel_req.set_server_id(2);
  cancel_req.set_segment(parent.mapping().segment());
  v1::CancelSplitResponse cancelled;
  EXPECT_EQ(client_->CancelSplit(cancel_req, &cancelled).code(),
            StatusCode::kFailedPrecondition);  // not the parent's primary
  EXPECT_EQ(Mapping().splits_size(), 0);
}

TEST_F(MonitorTest, Kill9DuringChangesLosesNothingAcknowledged) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  v1::RegisterServerResponse joined = Register(NewServer("127.0.0.1:7100", 4096));
  client_epoch_ = joined.epoch();
  std::vector<uint64_t> acknowledged;
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    // Let a stream of changes run, then kill the monitor in the middle of it.
    std::this_thread::sleep_for(milliseconds(300));
    killed = true;
    monitor_->Kill(SIGKILL);
  });
  for (uint32_t local = 0; local < 4096; ++local) {
    v1::AllocateSegmentResponse r;
    Status s = Allocate(joined.server_id(), local, 0, local + 1, &r);
    if (!s.ok()) {
      EXPECT_TRUE(killed.load()) << s.ToString();
      break;
    }
    acknowledged.push_back(r.mapping().segment());
  }
  killer.join();
  ASSERT_FALSE(acknowledged.empty());

  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  v1::GetSegmentKeysResponse keys;
  ASSERT_TRUE(client_->GetSegmentKeys({}, &keys).ok());
  std::map<uint64_t, uint32_t> stored;
  for (const auto& m : keys.segments()) stored[m.segment()] = m.access_key();
  // Every acknowledged change is there; at most the one in flight is extra.
  for (size_t i = 0; i < acknowledged.size(); ++i) {
    ASSERT_EQ(stored.count(acknowledged[i]), 1u) << "segment " << acknowledged[i] << " lost";
    EXPECT_EQ(stored[acknowledged[i]], i + 1);
  }
  EXPECT_LE(stored.size(), acknowledged.size() + 1);
  EXPECT_EQ(keys.epoch(), joined.epoch() + stored.size());
}

TEST_F(MonitorTest, CorruptViewFileRefusesToStart) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  Register(NewServer("127.0.0.1:7100"));
  monitor_->Kill(SIGTERM);
  EXPECT_EQ(monitor_->exit_code(), 0);

  std::string view_path = dir_ + "/view";
  std::string bytes = ReadFile(view_path);
  ASSERT_GT(bytes.size(), 48u);
  bytes[bytes.size() - 5] ^= 0x40;
  std::ofstream(view_path, std::ios::binary | std::ios::trunc) << bytes;

  int code = 0;
  std::string log = ExpectStartFailure(BaseArgs(), &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("level=error"), std::string::npos) << log;
  EXPECT_NE(log.find("corruption"), std::string::npos) << log;
  EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
  EXPECT_EQ(ReadFile(view_path), bytes);  // left as found, for the operator

  // A torn (truncated) file too.
  std::ofstream(view_path, std::ios::binary | std::ios::trunc) << bytes.substr(0, 60);
  log = ExpectStartFailure(BaseArgs(), &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("torn"), std::string::npos) << log;
  EXPECT_EQ(ReadFile(view_path).size(), 60u);
}

TEST_F(MonitorTest, BadFlagsUnusableDirAndBusyPortAreClearErrors) {
  int code = 0;
  std::string log = ExpectStartFailure({"--no-such-flag"}, &code);
  EXPECT_EQ(code, 2);
  EXPECT_NE(log.find("unknown flag --no-such-flag"), std::string::npos) << log;
  EXPECT_NE(log.find("usage: pdpm-monitor"), std::string::npos) << log;
  log = ExpectStartFailure({"--replicas", "many"}, &code);
  EXPECT_EQ(code, 2);
  log = ExpectStartFailure({"--secret-file", root_ + "/secret", "--replicas", "0"}, &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("--replicas must be"), std::string::npos) << log;
  log = ExpectStartFailure({"--secret-file", root_ + "/secret", "--segment-size", "5MiB"}, &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("segment size"), std::string::npos) << log;
  log = ExpectStartFailure({"--secret-file", root_ + "/no-such-secret"}, &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("cluster secret"), std::string::npos) << log;
  log = ExpectStartFailure(BaseArgs(), &code, "localhost");
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("want host:port"), std::string::npos) << log;
  std::ofstream(root_ + "/a-file") << "x";
  log = ExpectStartFailure(BaseArgs(), &code, "127.0.0.1:0", root_ + "/a-file/view");
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("cannot use the view directory"), std::string::npos) << log;

  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  // The same directory is locked by the running monitor.
  log = ExpectStartFailure(BaseArgs(), &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("in use by another monitor"), std::string::npos) << log;
  // The port is taken by the running monitor.
  log = ExpectStartFailure(BaseArgs(), &code, monitor_->address(), root_ + "/other");
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("cannot listen on " + monitor_->address()), std::string::npos) << log;

  // Cluster parameters cannot change under an existing view.
  monitor_->Kill(SIGTERM);
  log = ExpectStartFailure({"--secret-file", root_ + "/secret", "--tables", "32"}, &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(log.find("--tables 32 contradicts the stored view"), std::string::npos) << log;
}

TEST_F(MonitorTest, ConcurrentRegistrationsGetDistinctIds) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor());
  constexpr int kThreads = 6, kEach = 5;
  std::vector<std::thread> threads;
  std::vector<std::vector<uint32_t>> ids(kThreads);
  std::atomic<int> failures{0};
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      MonitorClient c(monitor_->address(), MonitorClientOptions{kSecret});
      for (int i = 0; i < kEach; ++i) {
        v1::RegisterServerResponse r;
        Status s =
            c.RegisterServer(NewServer("127.0.0.1:" + std::to_string(8000 + t * 100 + i)), &r);
        if (!s.ok()) {
          ++failures;
          continue;
        }
        ids[t].push_back(r.server_id());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<uint32_t> all;
  for (auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(*all.begin(), 1u);
  EXPECT_EQ(*all.rbegin(), static_cast<uint32_t>(kThreads * kEach));
  v1::GetMappingResponse m = Mapping();
  EXPECT_EQ(m.servers_size(), kThreads * kEach);
  std::map<uint32_t, int> owned;
  for (const auto& t : m.tables()) ++owned[t.server_id()];
  for (auto [id, n] : owned) EXPECT_TRUE(n == 2 || n == 3) << id << " owns " << n;
}

TEST_F(MonitorTest, BackupsSpreadOverDomainsAndLeastUsedServers) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor({"--replicas", "3"}));
  // One server alone: its segments are under-replicated and health says so.
  uint32_t a1 = Register(NewServer("127.0.0.1:7100", 8, {{"zone", "a"}})).server_id();
  client_epoch_ = 1;
  v1::AllocateSegmentResponse lonely;
  ASSERT_TRUE(Allocate(a1, 0, 0, 1, &lonely).ok());
  EXPECT_EQ(lonely.mapping().backups_size(), 0);
  EXPECT_EQ(lonely.mapping().segment_descriptor() >> 4, 3u);  // the configured count
  v1::ClusterStatus st = ClusterStatus();
  EXPECT_EQ(st.health(), v1::HEALTH_DEGRADED);
  EXPECT_NE(st.message().find("under-replicated"), std::string::npos) << st.message();

  uint32_t a2 = Register(NewServer("127.0.0.1:7101", 8, {{"zone", "a"}})).server_id();
  uint32_t b1 = Register(NewServer("127.0.0.1:7102", 8, {{"zone", "b"}})).server_id();
  uint32_t c1 = Register(NewServer("127.0.0.1:7103", 8, {{"zone", "c"}})).server_id();
  v1::AllocateSegmentResponse r;
  ASSERT_TRUE(Allocate(a1, 1, 0, 2, &r).ok());
  std::set<uint32_t> backups;
  for (const auto& b : r.mapping().backups()) backups.insert(b.server_id());
  // Two backups, in the two other zones — not a2, which shares a1's zone.
  EXPECT_EQ(backups, (std::set<uint32_t>{b1, c1}));
  (void)a2;

  // A local segment holding a backup cannot become a primary.
  uint32_t taken = r.mapping().backups(0).local_index();
  uint32_t holder = r.mapping().backups(0).server_id();
  v1::AllocateSegmentResponse clash;
  EXPECT_EQ(Allocate(holder, taken, 0, 3, &clash).code(), StatusCode::kAlreadyExists);
}

TEST_F(MonitorTest, BackupsGoToTheLeastUsedServer) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor({"--replicas", "2"}));
  for (int i = 0; i < 4; ++i) Register(NewServer("127.0.0.1:710" + std::to_string(i), 8));
  client_epoch_ = 1;
  // Load servers 2 and 3 with primaries; server 4 stays empty.
  v1::AllocateSegmentResponse r;
  for (uint32_t local = 0; local < 3; ++local) {
    ASSERT_TRUE(Allocate(2, local, 0, 1, &r).ok());
    ASSERT_TRUE(Allocate(3, local, 0, 1, &r).ok());
  }
  // Every backup so far went to a server other than its primary.
  v1::GetMappingResponse m = Mapping();
  for (const auto& seg : m.segments()) {
    ASSERT_EQ(seg.backups_size(), 1);
    EXPECT_NE(seg.backups(0).server_id(), seg.primary().server_id());
  }
  std::map<uint32_t, uint32_t> used;
  for (const auto& s : m.servers()) used[s.id()] = s.segments_used();
  // Backups of server 1's new segment land on the least used server.
  uint32_t least = 0;
  for (auto [id, n] : used) {
    if (id != 1 && (least == 0 || n < used[least])) least = id;
  }
  ASSERT_TRUE(Allocate(1, 0, 0, 1, &r).ok());
  ASSERT_EQ(r.mapping().backups_size(), 1);
  EXPECT_EQ(r.mapping().backups(0).server_id(), least);

  // A new server takes empty tables; tables holding segments stay.
  uint32_t busy_table = TableOf(m, 1);
  ASSERT_TRUE(Allocate(1, 1, busy_table, 1, &r).ok());
  uint32_t fifth = Register(NewServer("127.0.0.1:7109", 8)).server_id();
  v1::GetMappingResponse grown = Mapping();
  int fifth_tables = 0;
  for (const auto& t : grown.tables()) fifth_tables += t.server_id() == fifth;
  EXPECT_GE(fifth_tables, 12);
  EXPECT_EQ(grown.tables(static_cast<int>(busy_table) - 1).server_id(), 1u);
}

TEST_F(MonitorTest, SilentServersBecomeSuspectThenDown) {
  ASSERT_NO_FATAL_FAILURE(StartMonitor(
      {"--heartbeat-interval", "50ms", "--suspect-timeout", "600ms", "--down-timeout", "1200ms"}));
  uint32_t alive = Register(NewServer("127.0.0.1:7100")).server_id();
  uint32_t silent = Register(NewServer("127.0.0.1:7101")).server_id();
  std::atomic<bool> stop{false};
  std::thread beater([&] {
    MonitorClient c(monitor_->address(), MonitorClientOptions{kSecret});
    while (!stop) {
      v1::HeartbeatRequest hb;
      hb.set_server_id(alive);
      v1::HeartbeatResponse r;
      (void)c.Heartbeat(hb, &r);
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  auto state_of = [&](const v1::ClusterStatus& st, uint32_t id) {
    for (const auto& s : st.servers()) {
      if (s.id() == id) return s.state();
    }
    return v1::SERVER_STATE_UNSPECIFIED;
  };
  // Waits (bounded) until the silent server reaches `want`; states only.
  auto wait_for = [&](v1::ServerState want) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      v1::ClusterStatus st = ClusterStatus();
      if (state_of(st, silent) == want) return st;
      std::this_thread::sleep_for(milliseconds(50));
    }
    ADD_FAILURE() << "server never became " << v1::ServerState_Name(want);
    return v1::ClusterStatus();
  };
  v1::ClusterStatus suspect = wait_for(v1::SERVER_STATE_SUSPECT);
  EXPECT_EQ(suspect.health(), v1::HEALTH_DEGRADED);
  EXPECT_NE(suspect.message().find("is suspect"), std::string::npos) << suspect.message();
  v1::ClusterStatus down = wait_for(v1::SERVER_STATE_DOWN);
  // Those states are computed on demand; the liveness check that logs a
  // change runs once per heartbeat interval: its line is awaited before the
  // server comes back (after that it would log "up again" instead).
  const std::string down_line = "msg=\"server is down\" server_id=2";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ReadFile(log_).find(down_line) == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  // Reconfiguration gave its empty tables to the live server: degraded,
  // not down.
  EXPECT_EQ(down.servers_up(), 1u);
  for (int i = 0; i < 100; i++) {
    down = ClusterStatus();
    if (down.health() == v1::HEALTH_DEGRADED) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(down.health(), v1::HEALTH_DEGRADED) << down.message();
  v1::GetMappingResponse mapping;
  ASSERT_TRUE(client_->GetMapping(0, &mapping).ok());
  for (const auto& t : mapping.tables()) EXPECT_EQ(t.server_id(), alive) << t.table();
  stop = true;
  beater.join();
  EXPECT_EQ(state_of(down, alive), v1::SERVER_STATE_UP);

  // It comes back with a heartbeat.
  v1::HeartbeatRequest hb;
  hb.set_server_id(silent);
  v1::HeartbeatResponse r;
  ASSERT_TRUE(client_->Heartbeat(hb, &r).ok());
  EXPECT_EQ(state_of(ClusterStatus(), silent), v1::SERVER_STATE_UP);
  std::string log = ReadFile(log_);
  EXPECT_NE(log.find("msg=\"server missed its heartbeats\" server_id=2"), std::string::npos) << log;
  EXPECT_NE(log.find(down_line), std::string::npos) << log;
}

}  // namespace
}  // namespace pdpm::monitor
