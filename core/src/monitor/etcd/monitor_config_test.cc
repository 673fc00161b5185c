// pdpm-monitor --config=FILE with the file exactly as the Kubernetes
// operator renders it: the operator's own golden file
// (operator/internal/controller/testdata/pdpm.conf.golden, which its Go test
// compares with what it renders), against a real etcd.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "client/cluster_harness.h"
#include "common/cluster_config.h"
#include "common/file_util.h"
#include "monitor/etcd/etcd_test_cluster.h"
#include "monitor/monitor_client.h"

namespace pdpm::monitor {
namespace {

using client::ChildProcess;
using client::FileTail;
using Clock = std::chrono::steady_clock;

constexpr char kSecret[] = "config-test-secret";

class MonitorConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ClusterConfig::Load(PDPM_OPERATOR_CONFIG, &golden_).ok());
    ASSERT_TRUE(ReadWholeFile(PDPM_OPERATOR_CONFIG, &golden_text_).ok());
    ASSERT_TRUE(etcd_.Start(1).ok());
    secret_ = etcd_.dir() + "/cluster-key";
    std::ofstream(secret_) << kSecret << "\n";
  }

  // Starts a monitor with `args` and waits for its port file; "" when it
  // did not serve.
  std::string StartMonitor(ChildProcess* p, std::vector<std::string> args, const std::string& log) {
    std::string port_file = log + ".addr";
    std::vector<std::string> argv = {PDPM_MONITOR_BINARY, "--listen", "127.0.0.1:0", "--port-file",
                                     port_file};
    argv.insert(argv.end(), args.begin(), args.end());
    EXPECT_TRUE(p->Start(argv, {}, log).ok());
    for (auto deadline = Clock::now() + std::chrono::seconds(30); Clock::now() < deadline;) {
      std::ifstream in(port_file);
      std::string bound;
      if (std::getline(in, bound) && !bound.empty()) return bound;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "";
  }

  // Runs a monitor that must refuse to start; its output.
  std::string Refused(const std::string& config_text, const std::string& name) {
    std::string path = etcd_.dir() + "/" + name + ".conf";
    std::ofstream(path) << config_text;
    std::string log = etcd_.dir() + "/" + name + ".log";
    ChildProcess p;
    EXPECT_TRUE(p.Start({PDPM_MONITOR_BINARY, "--config=" + path, "--secret-file", secret_,
                         "--listen", "127.0.0.1:0"},
                        {}, log)
                    .ok());
    int ws = p.Wait();
    EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 1) << name << ": status " << ws;
    return FileTail(log);
  }

  // The golden text with the line of `key` replaced by `line`.
  std::string WithLine(const std::string& key, const std::string& line) const {
    std::string text = golden_text_;
    size_t at = text.find("\n" + key + " = ");
    EXPECT_NE(at, std::string::npos) << key;
    size_t end = text.find('\n', at + 1);
    return text.substr(0, at + 1) + line + text.substr(end);
  }

  ClusterConfig golden_;
  std::string golden_text_;
  EtcdTestCluster etcd_;
  std::string secret_;
};

// The file as rendered, with only what exists inside a pod alone overridden
// (the etcd members' names, the key's mount path, the port): the monitor
// leads under the file's prefix with the file's cluster parameters.
TEST_F(MonitorConfigTest, StartsFromTheOperatorsFile) {
  ChildProcess monitor;
  std::string log = etcd_.dir() + "/monitor.log";
  std::string address =
      StartMonitor(&monitor,
                   {std::string("--config=") + PDPM_OPERATOR_CONFIG, "--etcd", etcd_.endpoints(),
                    "--secret-file", secret_, "--lease-ttl", "2s"},
                   log);
  ASSERT_FALSE(address.empty()) << FileTail(log);
  // The failure-detection timing is the file's.
  for (const char* key : {"heartbeat_interval", "suspect_timeout", "down_timeout"}) {
    std::string ms = golden_.Get(key);
    ASSERT_TRUE(ms.size() > 2 && ms.substr(ms.size() - 2) == "ms") << key << " = " << ms;
    ms.resize(ms.size() - 2);
    std::string logged = std::string(key) + "_ms=" + ms;
    EXPECT_NE(FileTail(log).find(logged), std::string::npos) << logged << "\n" << FileTail(log);
  }
  MonitorClientOptions mo;
  mo.cluster_secret = kSecret;
  MonitorClient client(address, mo);
  v1::GetMappingResponse m;
  Status s;
  for (auto deadline = Clock::now() + std::chrono::seconds(30); Clock::now() < deadline;) {
    s = client.GetMapping(0, &m);
    if (s.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << FileTail(log);
  EXPECT_EQ(std::to_string(m.replica_count()), golden_.Get("replica_count"));
  EXPECT_EQ(std::to_string(m.segment_size()), golden_.Get("segment_size"));
  EXPECT_EQ(std::to_string(m.table_count()), golden_.Get("tables"));

  // The view lives under the file's prefix: a monitor given that prefix
  // (without the trailing '/') by flag is a standby naming the leader.
  std::string prefix = golden_.Get("etcd_prefix");
  ASSERT_FALSE(prefix.empty());
  prefix.pop_back();
  ChildProcess standby;
  std::string standby_log = etcd_.dir() + "/standby.log";
  std::string standby_address = StartMonitor(
      &standby, {"--etcd", etcd_.endpoints(), "--etcd-prefix", prefix, "--secret-file", secret_},
      standby_log);
  ASSERT_FALSE(standby_address.empty()) << FileTail(standby_log);
  v1::ClusterStatus st;
  MonitorClient via_standby(standby_address, mo);
  // A standby answers UNAVAILABLE ("no leader is elected yet") until it has
  // read the election from etcd, which may be after it serves.
  for (auto deadline = Clock::now() + std::chrono::seconds(30); Clock::now() < deadline;) {
    s = via_standby.GetClusterStatus(&st);
    if (s.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << FileTail(standby_log);
  EXPECT_EQ(st.leader(), address);
}

// The etcd members come from the file too (http:// endpoints).
TEST_F(MonitorConfigTest, TakesEtcdMembersFromTheFile) {
  std::string path = etcd_.dir() + "/local.conf";
  std::ofstream(path) << WithLine("etcd_endpoints", "etcd_endpoints = http://" + etcd_.endpoints());
  ChildProcess monitor;
  std::string log = etcd_.dir() + "/local.log";
  std::string address = StartMonitor(&monitor, {"--config=" + path, "--secret-file", secret_}, log);
  ASSERT_FALSE(address.empty()) << FileTail(log);
  EXPECT_NE(FileTail(log).find(etcd_.endpoints()), std::string::npos) << FileTail(log);
}

TEST_F(MonitorConfigTest, BadFilesAreClearErrors) {
  const std::string garbage_line =
      "line " + std::to_string(std::count(golden_text_.begin(), golden_text_.end(), '\n') + 1) +
      ": not a key = value line: just words";
  struct Case {
    std::string text, name, expect;
  } cases[] = {
      {golden_text_ + "just words\n", "garbage", garbage_line},
      {WithLine("config_version", "config_version = 2"), "version", "config_version 2"},
      {WithLine("etcd_mode", "etcd_mode = sideways"), "mode", "want embedded or external"},
      {WithLine("etcd_endpoints", "etcd_endpoints = https://etcd-0.example:2379"), "tls",
       "TLS to etcd is not supported"},
      {WithLine("etcd_endpoints", "etcd_endpoints ="), "no-etcd", "etcd_endpoints is missing"},
      {WithLine("replica_count", "replica_count = three"), "replicas", "is not a number"},
      {WithLine("tables", "tables = many"), "tables", "is not a number"},
      {golden_text_ + "transport = verbs\n", "twice", "transport is given twice"},
      {WithLine("heartbeat_interval", "heartbeat_interval = soon"), "heartbeat",
       "heartbeat_interval"},
      {WithLine("down_timeout", "down_timeout = 1s"), "down-before-suspect",
       "--down-timeout must be longer than --suspect-timeout"},
  };
  for (const Case& c : cases) {
    std::string out = Refused(c.text, c.name);
    EXPECT_NE(out.find("level=error"), std::string::npos) << out;
    EXPECT_NE(out.find(c.expect), std::string::npos) << c.expect << " not in: " << out;
  }
  ChildProcess p;
  std::string log = etcd_.dir() + "/missing.log";
  ASSERT_TRUE(
      p.Start({PDPM_MONITOR_BINARY, "--config=" + etcd_.dir() + "/nothing.conf"}, {}, log).ok());
  int ws = p.Wait();
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 1);
  EXPECT_NE(FileTail(log).find("cluster configuration"), std::string::npos) << FileTail(log);
}

}  // namespace
}  // namespace pdpm::monitor
