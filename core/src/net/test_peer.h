// What the transport tests and their peer process (net_test_peer) share:
// the peer's connect-blob layout, the backend and host taken from the
// environment, and a handle on a child process.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/transport.h"

namespace pdpm::net {
class RpcServer;
}

namespace pdpm::net::testing {

// RPC methods the rpc tests call on a peer's server.
enum TestMethod : uint16_t {
  kEcho = 1,  // reply = request
  // request: u32 milliseconds; sleeps; reply: two u64, the server's
  // steady clock (ns) when the sleep began and ended
  kSleepMs = 2,
  kFail = 3,       // fails with kAborted, or with the u16 status code in the request
  kMakeBytes = 4,  // request: u32 n; reply: n bytes, byte i = i * 13
  kSum = 5,        // reply: u64 sum of the request's bytes
};
void RegisterTestMethods(RpcServer* server);

// The serving peer registers three ranges and tells every connecting
// client their keys through its reply blob.
inline constexpr size_t kRwSize = 4 << 20;   // read/write/atomic
inline constexpr size_t kRoSize = 64 << 10;  // read-only, byte i = i * 7
inline constexpr size_t kMetaSize = 4096;    // read-only counters below
// Words of the meta range.
inline constexpr size_t kMetaPersistCalls = 0;
inline constexpr size_t kMetaPersistBytes = 8;
inline constexpr size_t kMetaIncomingCount = 16;
inline constexpr size_t kMetaLastImm = 24;

struct PeerKeys {
  uint32_t rw = 0, ro = 0, meta = 0;
};
std::string EncodeKeys(const PeerKeys& k);
Status DecodeKeys(std::span<const uint8_t> blob, PeerKeys* out);

// PDPM_TEST_TRANSPORT (tcp|verbs, default tcp) and PDPM_TEST_HOST
// (default 127.0.0.1).
BackendKind TestBackend();
std::string TestHost();
// PDPM_TEST_TIMEOUT_SCALE (1..100, default 1): how many times slower than
// a quiet host the tests run (an emulated guest sets it). Every deadline
// against a hang — connect and op timeouts, "fails within" bounds — is
// multiplied by it; what the tests check is not.
uint32_t TestTimeoutScale();
// `ms` times TestTimeoutScale().
uint32_t ScaledMs(uint32_t ms);
// The backend above, op and connect timeouts scaled.
TransportOptions TestOptions();

// A child process running net_test_peer (found beside the running
// executable). Its stdin is a pipe: the peer exits when the test does.
class PeerProcess {
 public:
  PeerProcess() = default;
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess();

  // Starts the peer with `args` and, when `wait_listen` is set, waits for
  // its "LISTEN <address>" line.
  Status Start(const std::vector<std::string>& args, bool wait_listen);
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // SIGSTOP, returning once the process is stopped.
  void Freeze();
  // Waits for the process to exit; returns its exit code (128+signal).
  int Wait();

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  std::string address_;
};

}  // namespace pdpm::net::testing
