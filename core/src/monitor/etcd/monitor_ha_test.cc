// Monitor high availability with real processes: three etcd members, three
// pdpm-monitor --etcd, a real pdpm-server heartbeating, and view changes
// (segment allocations) made through MonitorClient during failures.
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "client/client.h"
#include "client/cluster_harness.h"
#include "monitor/etcd/etcd_test_cluster.h"
#include "monitor/grpc_status.h"
#include "monitor/monitor_client.h"

namespace pdpm::monitor {
namespace {

using client::ChildProcess;
using client::FileTail;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr char kSecret[] = "ha-test-secret";
constexpr uint64_t kSegmentSize = 64ULL << 20;
constexpr seconds kLeaseTtl{2};

// Polls `done` every 50 ms until it holds or `limit` passes. A deadline
// against hangs, never the assertion itself.
template <typename Fn>
bool PollUntil(Fn done, seconds limit = seconds(60)) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return done();
}

// One monitor, asked directly (no failover): what it answers itself.
Status AskStatus(const std::string& address, v1::ClusterStatus* st) {
  auto stub =
      v1::Monitor::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(1000));
  v1::GetClusterStatusRequest req;
  return FromGrpcStatus(stub->GetClusterStatus(&ctx, req, st), ctx);
}

bool RefusesAsStandby(const std::string& address, std::string* message = nullptr) {
  v1::ClusterStatus st;
  Status s = AskStatus(address, &st);
  if (message != nullptr) *message = std::string(s.message());
  return s.code() == StatusCode::kUnavailable &&
         s.message().find(kNotLeaderMessage) != std::string_view::npos;
}

// A loopback TCP relay to one etcd member that the test can cut: closing
// it refuses new connections and breaks the open ones, as a network
// partition between a monitor and etcd would.
class TcpProxy {
 public:
  ~TcpProxy() { Cut(); }

  Status Start(uint32_t target_port) {
    target_port_ = target_port;
    if (port_ == 0) PDPM_RETURN_IF_ERROR(FreeLoopbackPort(&port_));
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr = Loopback(port_);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
      return Status::FromErrno("proxy listen", errno);
    }
    cut_ = false;
    acceptor_ = std::thread([this] { AcceptLoop(); });
    return Status::OK();
  }

  void Cut() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cut_ = true;
      for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    }
    if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& t : pumps_) t.join();
    pumps_.clear();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  static sockaddr_in Loopback(uint32_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }

  void AcceptLoop() {
    while (true) {
      int in = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (in < 0) return;
      int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr = Loopback(target_port_);
      if (::connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(in);
        ::close(out);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (cut_) {
        ::close(in);
        ::close(out);
        return;
      }
      open_.insert(in);
      open_.insert(out);
      pumps_.emplace_back([this, in, out] { Pump(in, out); });
    }
  }

  void Pump(int a, int b) {
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    char buf[16384];
    bool open = true;
    while (open && ::poll(fds, 2, -1) > 0) {
      for (int i = 0; i < 2 && open; ++i) {
        if (fds[i].revents == 0) continue;
        ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
        // Cut() shuts the sockets down under a running pump: a write then
        // must fail (EPIPE), not raise SIGPIPE and end the test process.
        open = n > 0 && ::send(fds[1 - i].fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL) == n;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(a);
    open_.erase(b);
    ::close(a);
    ::close(b);
  }

  uint32_t port_ = 0;
  uint32_t target_port_ = 0;
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::mutex mu_;
  bool cut_ = false;
  std::set<int> open_;
  std::vector<std::thread> pumps_;
};

class MonitorHaTest : public ::testing::Test {
 protected:
  struct Monitor {
    ChildProcess proc;
    std::string etcd;  // the --etcd it was given
    std::string address;
  };

  void SetUp() override {
    ASSERT_TRUE(etcd_.Start(3).ok());
    secret_file_ = etcd_.dir() + "/cluster.secret";
    std::ofstream(secret_file_) << kSecret << "\n";
  }

  std::string MonitorLog(int i) const {
    return etcd_.dir() + "/monitor-" + std::to_string(i) + ".log";
  }

  // Starts monitor i (again) against `etcd` and waits until it serves.
  Status StartMonitor(int i, const std::string& etcd) {
    Monitor& m = monitors_[i];
    m.etcd = etcd;
    std::string port_file = etcd_.dir() + "/monitor-" + std::to_string(i) + ".addr";
    ::unlink(port_file.c_str());
    // The same port on a restart: the others name it as the leader.
    std::string listen = m.address.empty() ? "127.0.0.1:0" : m.address;
    PDPM_RETURN_IF_ERROR(m.proc.Start(
        {PDPM_MONITOR_BINARY, "--etcd", etcd, "--etcd-prefix", "/pdpm/ha-test", "--lease-ttl",
         std::to_string(kLeaseTtl.count()) + "s", "--secret-file", secret_file_, "--listen", listen,
         "--port-file", port_file, "--segment-size", std::to_string(kSegmentSize), "--tables", "3",
         // The timing these tests were written for (not the defaults):
         // the monitors' own failover outlasts a 500 ms down timeout.
         "--heartbeat-interval", "250ms", "--suspect-timeout", "3s", "--down-timeout", "10s"},
        {}, MonitorLog(i)));
    std::string bound;
    if (!PollUntil([&] {
          std::ifstream in(port_file);
          return std::getline(in, bound) && in.good() && !bound.empty();
        })) {
      return Status::Timeout("monitor " + std::to_string(i) + " not serving:\n" +
                             FileTail(MonitorLog(i)));
    }
    m.address = bound;
    return Status::OK();
  }

  Status StartMonitors(const std::vector<std::string>& etcd) {
    for (int i = 0; i < 3; ++i) PDPM_RETURN_IF_ERROR(StartMonitor(i, etcd[i]));
    return Status::OK();
  }

  std::string AllMonitors() const {
    return monitors_[0].address + "," + monitors_[1].address + "," + monitors_[2].address;
  }

  // The monitor that answers as leader (other than `not`), -1 when none
  // within the limit.
  int WaitLeader(int not_this = -1, seconds limit = seconds(60)) {
    int leader = -1;
    PollUntil(
        [&] {
          for (int i = 0; i < 3; ++i) {
            v1::ClusterStatus st;
            if (i == not_this || !monitors_[i].proc.running()) continue;
            if (AskStatus(monitors_[i].address, &st).ok()) {
              EXPECT_EQ(st.leader(), monitors_[i].address);
              leader = i;
              return true;
            }
          }
          return false;
        },
        limit);
    return leader;
  }

  std::string Logs() {
    std::string all;
    for (int i = 0; i < 3; ++i)
      all += "--- monitor " + std::to_string(i) + ":\n" + FileTail(MonitorLog(i));
    return all;
  }

  std::string ServerLog() const { return etcd_.dir() + "/server.log"; }

  // A real server with `segments` segments, given every monitor; waits
  // until it serves.
  Status StartServer(ChildProcess* server, int segments, std::string* address) {
    std::string port_file = etcd_.dir() + "/server.addr";
    PDPM_RETURN_IF_ERROR(
        server->Start({PDPM_SERVER_BINARY, "--pm", etcd_.dir() + "/server.pm", "--pm-size",
                       std::to_string(segments * kSegmentSize + (2 << 20)), "--format", "--monitor",
                       AllMonitors(), "--secret-file", secret_file_, "--listen", "127.0.0.1:0",
                       "--port-file", port_file, "--cores", "1"},
                      {}, ServerLog()));
    if (!PollUntil([&] {
          std::ifstream in(port_file);
          return std::getline(in, *address) && in.good();
        })) {
      return Status::Timeout("the server is not serving");
    }
    return Status::OK();
  }

  // A member registered through the monitor API, whose segments the load
  // allocates (its PM is never touched: only the view is exercised).
  uint32_t RegisterLoadMember(MonitorClient* client) {
    v1::RegisterServerRequest req;
    req.mutable_info()->set_address("127.0.0.1:9");
    req.mutable_info()->set_transport("tcp");
    req.set_segment_size(kSegmentSize);
    req.set_segment_count(100000);
    v1::RegisterServerResponse resp;
    Status s = client->RegisterServer(req, &resp);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return resp.server_id();
  }

  // Allocates local segment `index` of `member`; the global number it got.
  Status Allocate(MonitorClient* client, uint32_t member, uint32_t index, uint64_t* segment) {
    v1::AllocateSegmentRequest req;
    req.set_server_id(member);
    req.set_local_index(index);
    req.set_access_key(1000 + index);
    v1::AllocateSegmentResponse resp;
    PDPM_RETURN_IF_ERROR(client->AllocateSegment(req, &resp));
    *segment = resp.mapping().segment();
    return Status::OK();
  }

  // Every acknowledged allocation is in the leader's view, unchanged.
  void ExpectAllPresent(MonitorClient* client, uint32_t member,
                        const std::map<uint32_t, uint64_t>& acked) {
    v1::GetMappingResponse m;
    Status s = client->GetMapping(0, &m);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::map<uint32_t, uint64_t> stored;
    for (const auto& seg : m.segments()) {
      if (seg.primary().server_id() == member) stored[seg.primary().local_index()] = seg.segment();
    }
    for (const auto& [index, segment] : acked) {
      auto it = stored.find(index);
      ASSERT_NE(it, stored.end()) << "acknowledged local segment " << index << " lost";
      EXPECT_EQ(it->second, segment) << "local segment " << index;
    }
  }

  EtcdTestCluster etcd_;
  std::string secret_file_;
  Monitor monitors_[3];
};

TEST_F(MonitorHaTest, LeaderKilledDuringLoadStandbyTakesOverNothingLost) {
  ASSERT_TRUE(StartMonitors({etcd_.endpoints(), etcd_.endpoints(), etcd_.endpoints()}).ok());
  int leader = WaitLeader();
  ASSERT_GE(leader, 0) << Logs();
  for (int i = 0; i < 3; ++i) {
    if (i != leader) {
      EXPECT_TRUE(RefusesAsStandby(monitors_[i].address));
    }
  }

  // A real server, given every monitor.
  ChildProcess server;
  std::string server_address;
  ASSERT_TRUE(StartServer(&server, 2, &server_address).ok()) << FileTail(ServerLog());

  MonitorClient client(AllMonitors(), {kSecret, milliseconds(10000)});
  uint32_t member = RegisterLoadMember(&client);
  ASSERT_NE(member, 0u);

  // The load: allocations one after another, each retried until
  // acknowledged; the member heartbeats between them.
  std::mutex mu;
  std::map<uint32_t, uint64_t> acked;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread load([&] {
    for (uint32_t index = 0; !stop.load();) {
      uint64_t segment = 0;
      Status s = Allocate(&client, member, index, &segment);
      if (!s.ok()) {
        ++failures;
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        acked[index] = segment;
      }
      ++index;
      v1::HeartbeatRequest hb;
      hb.set_server_id(member);
      v1::HeartbeatResponse hr;
      (void)client.Heartbeat(hb, &hr);
    }
  });
  auto acked_count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return acked.size();
  };
  ASSERT_TRUE(PollUntil([&] { return acked_count() >= 20; })) << Logs();

  // kill -9 the leader in the middle of the load.
  monitors_[leader].proc.Signal(SIGKILL);
  monitors_[leader].proc.Wait();
  const auto killed = Clock::now();
  const uint64_t killed_unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  size_t at_kill = acked_count();
  ASSERT_TRUE(PollUntil([&] { return acked_count() > at_kill; })) << Logs();
  auto resumed = Clock::now() - killed;
  ASSERT_TRUE(PollUntil([&] { return acked_count() >= at_kill + 20; })) << Logs();
  stop = true;
  load.join();
  // A standby took over "within seconds": the lease TTL plus a poll and a
  // view load; generous for a loaded machine.
  EXPECT_LT(resumed, seconds(15)) << Logs();
  EXPECT_EQ(failures.load(), 0) << "the client did not ride out the failover";

  int successor = WaitLeader(leader);
  ASSERT_GE(successor, 0) << Logs();
  EXPECT_NE(successor, leader);
  ExpectAllPresent(&client, member, acked);

  // The real server's heartbeats reach the new leader.
  EXPECT_TRUE(PollUntil([&] {
    v1::ClusterStatus st;
    if (!client.GetClusterStatus(&st).ok()) return false;
    for (const auto& s : st.servers()) {
      if (s.address() == server_address) {
        return s.state() == v1::SERVER_STATE_UP && s.last_heartbeat_unix_ms() > killed_unix_ms;
      }
    }
    return false;
  })) << FileTail(ServerLog())
      << Logs();

  // The old leader comes back as a standby naming the new one.
  ASSERT_TRUE(StartMonitor(leader, etcd_.endpoints()).ok());
  std::string message;
  EXPECT_TRUE(PollUntil([&] {
    return RefusesAsStandby(monitors_[leader].address, &message) &&
           message.find(kLeaderIsMessage + monitors_[successor].address) != std::string::npos;
  })) << message;

  // A client given only that standby follows it to the leader.
  MonitorClient via_standby(monitors_[leader].address, {kSecret, milliseconds(10000)});
  v1::ClusterStatus st;
  Status s = via_standby.GetClusterStatus(&st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(st.leader(), monitors_[successor].address);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << FileTail(ServerLog());
}

TEST_F(MonitorHaTest, EtcdMemberKilledClusterGoesOn) {
  ASSERT_TRUE(StartMonitors({etcd_.endpoints(), etcd_.endpoints(), etcd_.endpoints()}).ok());
  ASSERT_GE(WaitLeader(), 0) << Logs();
  MonitorClient client(AllMonitors(), {kSecret, milliseconds(10000)});
  uint32_t member = RegisterLoadMember(&client);
  std::map<uint32_t, uint64_t> acked;
  for (uint32_t i = 0; i < 10; ++i) {
    Status s = Allocate(&client, member, i, &acked[i]);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // The member every monitor asks first.
  etcd_.Kill(0);
  for (uint32_t i = 10; i < 30; ++i) {
    Status s = Allocate(&client, member, i, &acked[i]);
    ASSERT_TRUE(s.ok()) << s.ToString() << Logs();
  }
  ExpectAllPresent(&client, member, acked);
  // It rejoins with its data.
  ASSERT_TRUE(etcd_.Restart(0).ok()) << FileTail(etcd_.log(0));
  uint64_t segment = 0;
  ASSERT_TRUE(Allocate(&client, member, 30, &segment).ok());
}

TEST_F(MonitorHaTest, LeaderCutOffFromEtcdStopsLeadingBeforeAnotherLeads) {
  // Each monitor reaches etcd through its own relay to one member.
  TcpProxy proxies[3];
  std::vector<std::string> etcd;
  for (int i = 0; i < 3; ++i) {
    std::string ep = etcd_.endpoint(i);
    ASSERT_TRUE(
        proxies[i].Start(static_cast<uint32_t>(std::stoul(ep.substr(ep.rfind(':') + 1)))).ok());
    etcd.push_back(proxies[i].address());
  }
  ASSERT_TRUE(StartMonitors(etcd).ok());
  int leader = WaitLeader();
  ASSERT_GE(leader, 0) << Logs();
  MonitorClient client(AllMonitors(), {kSecret, milliseconds(10000)});
  uint32_t member = RegisterLoadMember(&client);
  std::map<uint32_t, uint64_t> acked;
  ASSERT_TRUE(Allocate(&client, member, 0, &acked[0]).ok());

  proxies[leader].Cut();
  const auto cut = Clock::now();
  // Safety: whenever another monitor answers as leader, the cut-off one
  // already refuses — asked after the other answered.
  Clock::duration refused_after{};
  int successor = -1;
  ASSERT_TRUE(PollUntil([&] {
    if (refused_after == Clock::duration{} && RefusesAsStandby(monitors_[leader].address)) {
      refused_after = Clock::now() - cut;
    }
    for (int i = 0; i < 3; ++i) {
      v1::ClusterStatus st;
      if (i != leader && AskStatus(monitors_[i].address, &st).ok()) {
        bool refuses = RefusesAsStandby(monitors_[leader].address);
        EXPECT_TRUE(refuses) << "two leaders";
        if (refuses && refused_after == Clock::duration{}) refused_after = Clock::now() - cut;
        successor = i;
        return true;
      }
    }
    return false;
  })) << Logs();
  // Its deadline is 2/3 of the lease after its last keep-alive; the bound
  // is generous for polling on a loaded machine (the order above is the
  // safety property).
  EXPECT_LT(refused_after, 2 * kLeaseTtl) << Logs();

  // The view goes on at the successor, with the change made before.
  ASSERT_TRUE(Allocate(&client, member, 1, &acked[1]).ok());
  ExpectAllPresent(&client, member, acked);

  // Reconnected, the old leader stays a standby naming the successor.
  ASSERT_TRUE(proxies[leader]
                  .Start(static_cast<uint32_t>(std::stoul(
                      etcd_.endpoint(leader).substr(etcd_.endpoint(leader).rfind(':') + 1))))
                  .ok());
  std::string message;
  EXPECT_TRUE(PollUntil([&] {
    return RefusesAsStandby(monitors_[leader].address, &message) &&
           message.find(monitors_[successor].address) != std::string::npos;
  })) << message;
}

TEST_F(MonitorHaTest, LibpdpmClientFollowsTheFailover) {
  ASSERT_TRUE(StartMonitors({etcd_.endpoints(), etcd_.endpoints(), etcd_.endpoints()}).ok());
  int leader = WaitLeader();
  ASSERT_GE(leader, 0) << Logs();
  ChildProcess server;
  std::string server_address;
  // Room for new heap segments after the failover.
  ASSERT_TRUE(StartServer(&server, 4, &server_address).ok()) << FileTail(ServerLog());

  client::ClientOptions options;
  options.monitor = AllMonitors();
  options.cluster_secret = kSecret;
  options.monitor_timeout_ms = 10000;
  std::unique_ptr<client::Client> c;
  Status s = client::Client::Open(options, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string before(4096, 'b');
  dsm::GlobalAddress a;
  ASSERT_TRUE(c->PAllocate(before.size(), &a).ok());
  ASSERT_TRUE(c->Write(a, before.data(), before.size()).ok());
  ASSERT_TRUE(c->PutObj(dsm::ObjectId{0, 7}, before).ok());

  monitors_[leader].proc.Signal(SIGKILL);
  monitors_[leader].proc.Wait();
  // The mapping comes from whichever monitor leads now.
  s = c->RefreshMapping();
  ASSERT_TRUE(s.ok()) << s.ToString() << Logs();
  std::string back(before.size(), 0);
  ASSERT_TRUE(c->Read(a, back.data(), back.size()).ok());
  EXPECT_EQ(back, before);
  // Allocations that need new segments go through the new leader.
  const std::string after(1 << 20, 'a');
  for (int i = 0; i < 80; ++i) {
    dsm::GlobalAddress b;
    s = c->PAllocate(after.size(), &b);
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString() << FileTail(ServerLog());
    ASSERT_TRUE(c->Write(b, after.data(), after.size()).ok());
  }
  std::string obj;
  ASSERT_TRUE(c->GetObj(dsm::ObjectId{0, 7}, &obj).ok());
  EXPECT_EQ(obj, before);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << FileTail(ServerLog());
}

// Bad HA command lines exit 1 with one error naming the mistake.
TEST(MonitorHaFlagsTest, BadCommandLinesAreClearErrors) {
  EtcdTestCluster scratch;  // only for its temporary directory
  std::string secret = scratch.dir() + "/secret";
  std::ofstream(secret) << kSecret << "\n";
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"--etcd", "127.0.0.1:2379"}, "--secret-file is required"},
      {{"--etcd", "127.0.0.1:2379", "--secret-file", secret, "--dir", scratch.dir()},
       "--dir is not used"},
      {{"--etcd", "127.0.0.1:2379", "--embedded", "--dir", scratch.dir()}, "give either"},
      {{"--secret-file", secret}, "give either"},
      {{"--etcd", "127.0.0.1", "--secret-file", secret}, "want host:port"},
      {{"--etcd", "127.0.0.1:2379", "--secret-file", secret, "--lease-ttl", "1500ms"},
       "--lease-ttl must be a whole number of seconds"},
      {{"--etcd", "127.0.0.1:2379", "--secret-file", secret, "--etcd-prefix", "pdpm/"},
       "--etcd-prefix"},
      {{"--etcd", "127.0.0.1:2379", "--secret-file", secret, "--advertise", "pod-0"},
       "--advertise pod-0: want host:port"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {PDPM_MONITOR_BINARY, "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    std::string log = scratch.dir() + "/flags.log";
    ::unlink(log.c_str());
    ChildProcess p;
    ASSERT_TRUE(p.Start(argv, {}, log).ok());
    int ws = p.Wait();
    EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 1) << c.expect << ": status " << ws;
    std::string out = FileTail(log);
    EXPECT_NE(out.find("level=error"), std::string::npos) << out;
    EXPECT_NE(out.find(c.expect), std::string::npos) << c.expect << " not in: " << out;
  }
}

}  // namespace
}  // namespace pdpm::monitor
