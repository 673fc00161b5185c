#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "net/rpc.h"
#include "net/test_peer.h"

namespace pdpm::net::testing {

std::string EncodeKeys(const PeerKeys& k) {
  std::string out(12, '\0');
  std::memcpy(out.data(), &k.rw, 4);
  std::memcpy(out.data() + 4, &k.ro, 4);
  std::memcpy(out.data() + 8, &k.meta, 4);
  return out;
}

Status DecodeKeys(std::span<const uint8_t> blob, PeerKeys* out) {
  if (blob.size() != 12) return Status::Corruption("peer blob is not 12 bytes");
  std::memcpy(&out->rw, blob.data(), 4);
  std::memcpy(&out->ro, blob.data() + 4, 4);
  std::memcpy(&out->meta, blob.data() + 8, 4);
  return Status::OK();
}

void RegisterTestMethods(RpcServer* server) {
  server->Register(kEcho, [](std::span<const uint8_t> req, std::string* reply) {
    reply->assign(reinterpret_cast<const char*>(req.data()), req.size());
    return Status::OK();
  });
  server->Register(kSleepMs, [](std::span<const uint8_t> req, std::string* reply) {
    uint32_t ms = 0;
    if (req.size() != 4) return Status::InvalidArgument("sleep wants a u32");
    std::memcpy(&ms, req.data(), 4);
    auto now = [] {
      return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch())
                                       .count());
    };
    uint64_t span[2];
    span[0] = now();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    span[1] = now();
    reply->assign(reinterpret_cast<const char*>(span), sizeof(span));
    return Status::OK();
  });
  server->Register(kFail, [](std::span<const uint8_t> req, std::string*) {
    uint16_t code = static_cast<uint16_t>(StatusCode::kAborted);
    if (req.size() == 2) std::memcpy(&code, req.data(), 2);
    if (code == 0 || code > static_cast<uint16_t>(StatusCode::kInternal)) {
      return Status::InvalidArgument("fail wants a u16 status code");
    }
    return Status(static_cast<StatusCode>(code), "asked to fail");
  });
  server->Register(kMakeBytes, [](std::span<const uint8_t> req, std::string* reply) {
    uint32_t n = 0;
    if (req.size() != 4) return Status::InvalidArgument("make-bytes wants a u32");
    std::memcpy(&n, req.data(), 4);
    reply->resize(n);
    for (uint32_t i = 0; i < n; i++) (*reply)[i] = static_cast<char>(i * 13);
    return Status::OK();
  });
  server->Register(kSum, [](std::span<const uint8_t> req, std::string* reply) {
    uint64_t sum = 0;
    for (uint8_t b : req) sum += b;
    reply->assign(reinterpret_cast<const char*>(&sum), 8);
    return Status::OK();
  });
}

BackendKind TestBackend() {
  BackendKind kind = BackendKind::kTcp;
  // Tests read the environment before they start threads.
  if (const char* env = std::getenv("PDPM_TEST_TRANSPORT")) {  // NOLINT(concurrency-mt-unsafe)
    if (!ParseBackendKind(env, &kind).ok()) std::abort();
  }
  return kind;
}

std::string TestHost() {
  const char* env = std::getenv("PDPM_TEST_HOST");  // NOLINT(concurrency-mt-unsafe)
  return env != nullptr && *env != '\0' ? env : "127.0.0.1";
}

uint32_t TestTimeoutScale() {
  const char* env = std::getenv("PDPM_TEST_TIMEOUT_SCALE");  // NOLINT(concurrency-mt-unsafe)
  if (env == nullptr || *env == '\0') return 1;
  char* end = nullptr;
  unsigned long scale = std::strtoul(env, &end, 10);
  // A typo must not silently run with the quiet-host deadlines.
  if (*end != '\0' || scale < 1 || scale > 100) {
    std::fprintf(stderr, "PDPM_TEST_TIMEOUT_SCALE=%s: want 1..100\n", env);
    std::abort();
  }
  return static_cast<uint32_t>(scale);
}

uint32_t ScaledMs(uint32_t ms) {
  return ms * TestTimeoutScale();
}

TransportOptions TestOptions() {
  TransportOptions o;
  o.backend = TestBackend();
  o.op_timeout_ms = ScaledMs(1500);
  o.connect_timeout_ms = ScaledMs(3000);
  return o;
}

PeerProcess::~PeerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);
    Wait();
  }
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
}

Status PeerProcess::Start(const std::vector<std::string>& args, bool wait_listen) {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return Status::FromErrno("readlink /proc/self/exe", errno);
  self[n] = '\0';
  std::string exe = std::string(self);
  exe = exe.substr(0, exe.rfind('/')) + "/net_test_peer";
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    return Status::FromErrno("pipe", errno);
  }
  std::vector<char*> argv;
  argv.push_back(exe.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) return Status::FromErrno("fork", errno);
  if (pid_ == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  stdin_fd_ = in[1];
  std::string line;
  char c;
  while (wait_listen && ::read(out[0], &c, 1) == 1) {
    if (c == '\n') {
      if (line.rfind("LISTEN ", 0) == 0) {
        address_ = line.substr(7);
        break;
      }
      line.clear();
    } else {
      line.push_back(c);
    }
  }
  ::close(out[0]);
  if (wait_listen && address_.empty()) return Status::Unavailable("peer did not start: " + line);
  return Status::OK();
}

void PeerProcess::Signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

void PeerProcess::Freeze() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGSTOP);
  // kill() only queues the signal: a thread running on another CPU goes on
  // until it is interrupted. The stop is reported to the parent (us) once
  // every thread of the process has stopped.
  int status = 0;
  while (::waitpid(pid_, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
}

int PeerProcess::Wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace pdpm::net::testing
