// LocalCluster (tests): a real pdpm-monitor and real pdpm-server processes
// in a fresh temporary directory. The directory is under $PDPM_TEST_TMPDIR,
// else /dev/shm (memory: persisting is cheap there), else $TMPDIR or /tmp.
// Processes are started with posix_spawn (the test process may run gRPC
// threads) and stopped when the cluster is destroyed.
//
// One suite, two environments: by default the servers serve tcp on
// loopback with their PM in files of the directory. The environment the
// transport and PM suites use moves them onto real hardware (the hardware
// guest, docs/hw.md):
//   PDPM_TEST_TRANSPORT, PDPM_TEST_HOST  the servers' transport and the
//       address they listen on; clients use the same transport;
//   PDPM_TEST_SERVER_PM  comma-separated PM devices (devdax), server i on
//       the i-th; wiped (pdpm-server --wipe-pm) when the cluster starts.
//       Servers beyond the list, and LocalClusterOptions::file_pm_server,
//       keep a file;
//   PDPM_TEST_TIMEOUT_SCALE  multiplies every timeout against a hang.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/status.h"
#include "monitor/monitor_client.h"
#include "net/test_peer.h"

namespace pdpm::client {

// A child process; killed (SIGKILL) and reaped on destruction if running.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts argv[0] with `argv`, extra environment `env` ("K=V") on top of
  // this process's, stdout and stderr appended to `log`.
  Status Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const std::string& log);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // SIGSTOP, returning once the process is stopped (a signal lands
  // asynchronously: until then it may still answer). kInternal if it is
  // not running or exited instead. SIGCONT resumes it.
  Status Freeze();
  // Waits for exit; returns the wait status.
  int Wait();
  // Waits at most `timeout_ms` for exit: true and its wait status if it
  // exited, false if it still runs.
  bool WaitFor(uint32_t timeout_ms, int* wait_status);
  // Whether it has exited (reaps it then).
  bool Exited(int* wait_status);
  // Whether it is stopped (SIGSTOP, e.g. by PDPM_TX_STOP_AT).
  bool Stopped() const;

 private:
  pid_t pid_ = -1;
};

struct LocalClusterOptions {
  int servers = 3;
  uint64_t segment_size = 128ull << 20;
  uint64_t pm_size = (2 * 128 + 2) * (1ull << 20);  // two segments: a table and the heap
  uint32_t tables = 3;
  uint32_t cores = 2;
  uint32_t replicas = 1;  // the monitor's --replicas
  // The monitor's liveness timing; the timeouts scale with the environment
  // (PDPM_TEST_TIMEOUT_SCALE); 0: 3 s to suspect, 10 s to declare down.
  uint32_t heartbeat_ms = 200;
  uint32_t suspect_ms = 0;
  uint32_t down_ms = 0;
  // This server's PM is a file in every environment (the power-loss
  // simulation needs one); -1: none.
  int file_pm_server = -1;
  // Extra environment ("K=V") of every server start (test hooks).
  std::vector<std::string> server_env;
  // Extra flags of every server start.
  std::vector<std::string> server_args;
};

// libpdpm options for a cluster in the test environment (above): its
// monitor and secret, the test transport, timeouts (and the wait for a
// failover) scaled.
inline ClientOptions TestClientOptions(const std::string& monitor, const std::string& secret) {
  ClientOptions o;
  o.monitor = monitor;
  o.cluster_secret = secret;
  o.transport = net::testing::TestBackend();
  o.op_timeout_ms = net::testing::ScaledMs(o.op_timeout_ms);
  o.connect_timeout_ms = net::testing::ScaledMs(o.connect_timeout_ms);
  o.monitor_timeout_ms = net::testing::ScaledMs(o.monitor_timeout_ms);
  o.failover_wait_ms = net::testing::ScaledMs(o.failover_wait_ms);
  return o;
}

class LocalCluster {
 public:
  explicit LocalCluster(const LocalClusterOptions& options = {});
  ~LocalCluster();

  // Starts the monitor and every server; returns once all serve.
  Status Start();
  // Server i (0-based): start (again) with extra environment; waits until
  // it serves (or exits: then an error with its log's tail).
  Status StartServer(int i, const std::vector<std::string>& env = {});
  void KillServer(int i);  // SIGKILL, reaped
  // SIGTERM, expects a clean exit; one still running after a minute
  // (scaled) is an error with its stacks, and is killed.
  Status StopServer(int i);
  ChildProcess& server(int i) { return servers_[i]; }
  int server_count() const { return static_cast<int>(servers_.size()); }

  const std::string& dir() const { return dir_; }
  const std::string& monitor_address() const { return monitor_address_; }
  const std::string& secret() const { return secret_; }
  const std::string& secret_file() const { return secret_file_; }
  // Server i's PM: a device of PDPM_TEST_SERVER_PM or a file.
  const std::string& pm_path(int i) const { return pm_paths_[i]; }
  std::string server_log(int i) const { return dir_ + "/server" + std::to_string(i) + ".log"; }
  // The tails of the monitor's and every server's log (for the message of
  // a test that timed out: where the cluster stood).
  std::string LogTails() const;
  // The stacks of every running server (ProcessStacks).
  std::string ServerStacks() const;
  // For the message of a wait on a test's client process (logging to
  // `log`) that missed its deadline: its log's tail and stacks, then the
  // cluster's log tails and server stacks.
  std::string HangReport(const ChildProcess& proc, const std::string& log) const;
  // The data address server i announced (its port file); "" before it ran.
  std::string server_address(int i) const;
  // The monitor's current view.
  Status GetMapping(v1::GetMappingResponse* out) const;
  // The cluster id of server i (by its announced address); 0 when it is
  // not a member.
  uint32_t ServerId(int i) const;

 private:
  Status WaitForFile(const std::string& path, ChildProcess* proc, const std::string& log,
                     std::string* content);
  // Zeroes the servers' PM devices (files start blank anyway).
  Status WipeDevices();

  LocalClusterOptions options_;
  std::string dir_;
  std::string secret_;
  std::string secret_file_;
  std::string monitor_address_;
  std::vector<std::string> pm_paths_;
  std::vector<bool> pm_is_device_;
  ChildProcess monitor_;
  std::vector<ChildProcess> servers_;
};

// Every thread's stack of a running process, from gdb where it is
// installed, else every thread's kernel wait channel (for the message of a
// test whose process missed its deadline).
std::string ProcessStacks(pid_t pid);

// The last `bytes` of a file (for failure messages).
std::string FileTail(const std::string& path, size_t bytes = 2000);

}  // namespace pdpm::client
