// Verbs backend figures next to perftest's, measured in the same run (the
// hardware guest's bench script runs perftest and passes its results):
//   net.verbs.write.64KiB  MiB/s, 32 signaled 64 KiB WRITEs in flight   vs ib_write_bw
//   net.verbs.read.64KiB   MiB/s, 32 signaled 64 KiB READs in flight    vs ib_read_bw
//   net.verbs.rpc64.p50    µs, 64-byte WRITE_WITH_IMM request and reply vs ib_write_lat
//                          (whose one-way figure is doubled: a round trip)
//
//   verbs_bench bw <host> <seconds> <ib_write_bw MiB/s> <ib_read_bw MiB/s>
//   verbs_bench rpc <host> <seconds> [<client cpu> <server cpu>]
//       one round: a fresh server process and connection; prints its p50 (µs).
//       With CPUs, client and server are pinned to them, as the script pins
//       perftest's two processes: otherwise the scheduler's placement decides
//       the figure (in the emulated guest, runs land in one of two modes)
//   verbs_bench rpc-report <our p50s, comma-separated> <ib_write_lat one-way µs, comma-separated>
//       the figure: the best of the rounds against twice the best perftest
//       run. Runs of either program land in one of two modes (in the
//       emulated guest, about 20 or 40 µs one way for perftest, even
//       pinned), so a median compares whichever modes the runs happened to
//       hit; the best of each compares both in the fast one. The script
//       alternates the two, so both see the same moments of the host.
//
// The server is this binary re-executed (verbs contexts do not survive fork).
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "net/verbs/peer_process.h"
#include "net/verbs/verbs_transport.h"

namespace pdpm::net::verbs {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kRegionSize = 4 << 20;
constexpr uint32_t kBlock = 64 << 10;
// Each op signaled, as perftest signals each (CQ moderation 1). Its
// default 128 in flight measured no better here than 32 (a little worse).
constexpr int kWindow = 32;
constexpr uint32_t kRpcSize = 64;
// Empty polls after which the server sleeps on the notify fd (some
// milliseconds in the guest: far longer than a latency round's gap).
constexpr uint64_t kSpinPolls = 20000;
constexpr char kServerEnv[] = "PDPM_VERBS_BENCH_SERVER";

[[noreturn]] void Die(const char* what, const Status& s) {
  fprintf(stderr, "verbs_bench: %s: %s\n", what, s.ToString().c_str());
  _exit(1);
}

// Pins the calling process (and the threads it starts later) to `cpu`;
// a negative cpu leaves it where the scheduler puts it.
void PinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    Die("pin to a cpu", Status::FromErrno("sched_setaffinity", errno));
  }
}

char* MapRegion() {
  void* p = mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) abort();
  std::memset(p, 1, kRegionSize);
  return static_cast<char*>(p);
}

// A verbs transport with one registered region of kRegionSize bytes.
struct Endpoint {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<MemoryRegion> region;
};

Endpoint OpenEndpoint() {
  TransportOptions options;
  options.backend = BackendKind::kVerbs;
  Endpoint endpoint;
  Status s = CreateVerbsTransport(options, &endpoint.transport);
  if (!s.ok()) Die("create transport", s);
  s = endpoint.transport->RegisterMemory(MapRegion(), kRegionSize, kRemoteAll, nullptr,
                                         &endpoint.region);
  if (!s.ok()) Die("register", s);
  return endpoint;
}

// Answers every 64-byte request (imm 1) with a 64-byte reply (imm 2) into
// the client's region, whose key the client sent as its blob.
[[noreturn]] void RunServer(const std::string& host, int address_fd, int control_fd, int cpu) {
  PinTo(cpu);
  Endpoint server = OpenEndpoint();
  Transport* transport = server.transport.get();
  MemoryRegion* region = server.region.get();
  uint32_t key = region->key();
  Status s;
  std::unique_ptr<Connection> conn;
  std::atomic<Connection*> ready{nullptr};
  AcceptHandler handler;
  handler.on_request = [key](uint32_t, std::span<const uint8_t>, std::string* reply) {
    reply->assign(reinterpret_cast<const char*>(&key), sizeof(key));
    return Status::OK();
  };
  handler.on_connected = [&](std::unique_ptr<Connection> c) {
    conn = std::move(c);
    ready.store(conn.get(), std::memory_order_release);
  };
  s = transport->Listen(host + ":0", handler);
  if (!s.ok()) Die("listen", s);
  std::string address = transport->listen_address() + "\n";
  if (write(address_fd, address.data(), address.size()) < 0) _exit(1);
  Connection* c;
  while ((c = ready.load(std::memory_order_acquire)) == nullptr) usleep(100);
  uint32_t client_key;
  std::memcpy(&client_key, c->peer_blob().data(), sizeof(client_key));
  auto answer = [&](size_t requests) {
    for (size_t i = 0; i < requests; i++) {
      Op reply;
      reply.opcode = Opcode::kWriteWithImm;
      reply.local = {region, 0, kRpcSize};
      reply.remote_key = client_key;
      reply.imm = 2;
      reply.signaled = false;
      if (!c->Post({&reply, 1}).ok()) _exit(1);
    }
  };
  Incoming in[16];
  Completion done[16];
  // Spins while requests come (the latency rounds), sleeps on the notify fd
  // once none came for a while (the bandwidth runs): a spinning server
  // would take a core from the NIC's work, which perftest's idle server
  // leaves alone.
  for (uint64_t idle_polls = 0;;) {
    // Each poll drains the whole completion queue; the replies' own
    // completions (failures only: they are unsignaled) are collected after
    // answering, off the path of the next request.
    size_t n = c->PollIncoming(in);
    answer(n);
    if (n > 0) c->PollCompletions(done);
    idle_polls = n > 0 ? 0 : idle_polls + 1;
    if (idle_polls < kSpinPolls) continue;
    idle_polls = 0;
    if (!c->ArmNotify().ok()) _exit(1);
    n = c->PollIncoming(in);
    if (n == 0) {
      // The client closes the control pipe when it is done (POLLHUP).
      pollfd fds[2] = {{control_fd, POLLIN, 0}, {c->notify_fd(), POLLIN, 0}};
      if (poll(fds, 2, 50) > 0 && fds[0].revents != 0) break;
    }
    c->AckNotify();
    answer(n);
  }
  _exit(0);
}

double Bandwidth(Connection& conn, MemoryRegion* region, uint32_t peer_key, Opcode opcode,
                 double seconds) {
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  auto start = Clock::now();
  uint64_t bytes = 0, next = 0;
  int inflight = 0;
  bool stop = false;
  for (uint64_t round = 0;; round++) {
    if (!stop && round % 64 == 0) stop = Clock::now() >= end;
    while (!stop && inflight < kWindow) {
      uint64_t slot = next++ % (kRegionSize / kBlock);
      Op op;
      op.opcode = opcode;
      op.id = next;
      op.local = {region, slot * kBlock, kBlock};
      op.remote_key = peer_key;
      op.remote_offset = slot * kBlock;
      Status s = conn.Post({&op, 1});
      if (!s.ok()) Die("post", s);
      inflight++;
    }
    if (stop && inflight == 0) break;
    Completion done[32];
    size_t n = conn.PollCompletions(done);
    for (size_t i = 0; i < n; i++) {
      if (!done[i].status.ok()) Die("completion", done[i].status);
      bytes += kBlock;
      inflight--;
    }
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return bytes / elapsed / (1 << 20);
}

// Cycle counter for per-sample timing: in an emulated guest reading the
// system clock can cost more than the round trip being measured.
uint64_t Ticks() {
#if defined(__x86_64__)
  return __builtin_ia32_rdtsc();
#else
  return std::chrono::steady_clock::now().time_since_epoch().count();
#endif
}

double RpcP50(Connection& conn, MemoryRegion* region, uint32_t peer_key, double seconds) {
  std::vector<uint64_t> samples;
  auto start_time = Clock::now();
  uint64_t start_ticks = Ticks();
  auto end = start_time + std::chrono::duration<double>(seconds);
  for (uint64_t round = 0; round % 64 != 0 || Clock::now() < end; round++) {
    Op request;
    request.opcode = Opcode::kWriteWithImm;
    request.local = {region, 0, kRpcSize};
    request.remote_key = peer_key;
    request.remote_offset = 4096;
    request.imm = 1;
    request.signaled = false;
    uint64_t start = Ticks();
    Status s = conn.Post({&request, 1});
    if (!s.ok()) Die("rpc post", s);
    Incoming in;
    while (conn.PollIncoming({&in, 1}) == 0) {
      if (!conn.healthy()) Die("rpc", Status::Unavailable("connection broke"));
    }
    samples.push_back(Ticks() - start);
    Completion done[16];
    conn.PollCompletions(done);
  }
  // Ticks per microsecond, from the whole run against the steady clock.
  double micros = std::chrono::duration<double, std::micro>(Clock::now() - start_time).count();
  double ticks_per_us = static_cast<double>(Ticks() - start_ticks) / micros;
  std::sort(samples.begin(), samples.end());
  return static_cast<double>(samples[samples.size() / 2]) / ticks_per_us;
}

void Report(const char* name, double value, const char* unit, const char* ref_name, double ref) {
  printf("%-24s %10.2f %-5s (%s %.2f, ratio %.3f)\n", name, value, unit, ref_name, ref,
         value / ref);
  printf("BENCH name=%s value=%.2f unit=%s ref=%s:%.2f ratio=%.3f\n", name, value, unit, ref_name,
         ref, value / ref);
}

// A server process of this binary and a connection to it.
struct Session {
  pid_t server = -1;
  int control_fd = -1;  // closing it stops the server
  std::unique_ptr<Connection> conn;
  uint32_t peer_key = 0;
};

Session StartSession(const std::string& host, int server_cpu, Endpoint& client) {
  int address_pipe[2], control_pipe[2];
  if (pipe(address_pipe) != 0 || pipe(control_pipe) != 0) Die("pipe", Status::IOError("pipe"));
  Session session;
  session.server = fork();
  if (session.server == 0) {
    close(address_pipe[0]);
    close(control_pipe[1]);
    std::string env = host + "," + std::to_string(address_pipe[1]) + "," +
                      std::to_string(control_pipe[0]) + "," + std::to_string(server_cpu);
    ExecSelfAsPeer(kServerEnv, env);
  }
  close(address_pipe[1]);
  close(control_pipe[0]);
  session.control_fd = control_pipe[1];
  char buffer[256];
  ssize_t got = 0;
  while (got == 0 || buffer[got - 1] != '\n') {
    ssize_t n = read(address_pipe[0], buffer + got, sizeof(buffer) - got);
    if (n <= 0) Die("server", Status::Unavailable("server died before listening"));
    got += n;
  }
  close(address_pipe[0]);
  std::string address(buffer, got - 1);
  uint32_t key = client.region->key();
  Status s = client.transport->Connect(
      address, 0, std::string_view(reinterpret_cast<char*>(&key), sizeof(key)), &session.conn);
  if (!s.ok()) Die("connect", s);
  std::memcpy(&session.peer_key, session.conn->peer_blob().data(), sizeof(session.peer_key));
  return session;
}

void EndSession(Session& session) {
  session.conn.reset();
  close(session.control_fd);
  int status;
  waitpid(session.server, &status, 0);
}

// The smallest of comma-separated numbers (0 if none parse).
double Best(const char* list) {
  std::vector<double> values;
  for (const char* p = list; *p != '\0';) {
    char* end;
    double v = strtod(p, &end);
    if (end == p) break;
    values.push_back(v);
    p = *end == ',' ? end + 1 : end;
  }
  if (values.empty()) return 0;
  return *std::min_element(values.begin(), values.end());
}

// The usage on stderr (exit 2), or on stdout when asked (--help: exit 0).
int Usage(bool asked = false) {
  fprintf(asked ? stdout : stderr,
          "usage: verbs_bench bw <host> <seconds> <ib_write_bw MiB/s> <ib_read_bw MiB/s>\n"
          "       verbs_bench rpc <host> <seconds> [<client cpu> <server cpu>]\n"
          "       verbs_bench rpc-report <p50s us,...> <ib_write_lat us,...>\n");
  return asked ? 0 : 2;
}

int Main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--help" || mode == "-h") return Usage(true);
  if (mode == "rpc-report" && argc == 4) {
    double ours = Best(argv[2]), theirs = Best(argv[3]);
    if (ours <= 0 || theirs <= 0) return Usage();
    printf("net.verbs.rpc64.p50 rounds (us): %s; ib_write_lat runs (us, one way): %s\n", argv[2],
           argv[3]);
    Report("net.verbs.rpc64.p50", ours, "us", "ib_write_lat.rtt", 2 * theirs);
    return 0;
  }
  if (!((mode == "bw" && argc == 6) || (mode == "rpc" && (argc == 4 || argc == 6)))) {
    return Usage();
  }
  std::string host = argv[2];
  double seconds = atof(argv[3]);
  int client_cpu = -1, server_cpu = -1;
  if (mode == "rpc" && argc == 6) {
    client_cpu = atoi(argv[4]);
    server_cpu = atoi(argv[5]);
  }
  PinTo(client_cpu);
  Endpoint client = OpenEndpoint();
  MemoryRegion* region = client.region.get();
  Session session = StartSession(host, server_cpu, client);
  if (mode == "bw") {
    Report("net.verbs.write.64KiB",
           Bandwidth(*session.conn, region, session.peer_key, Opcode::kWrite, seconds), "MiB/s",
           "ib_write_bw", atof(argv[4]));
    Report("net.verbs.read.64KiB",
           Bandwidth(*session.conn, region, session.peer_key, Opcode::kRead, seconds), "MiB/s",
           "ib_read_bw", atof(argv[5]));
  } else {
    printf("%.2f\n", RpcP50(*session.conn, region, session.peer_key, seconds));
  }
  EndSession(session);
  return 0;
}

}  // namespace
}  // namespace pdpm::net::verbs

int main(int argc, char** argv) {
  std::string env = pdpm::net::verbs::PeerEnv(pdpm::net::verbs::kServerEnv);
  if (!env.empty()) {
    char host[128];
    int address_fd, control_fd, cpu;
    if (sscanf(env.c_str(), "%127[^,],%d,%d,%d", host, &address_fd, &control_fd, &cpu) == 4) {
      pdpm::net::verbs::RunServer(host, address_fd, control_fd, cpu);
    }
    return 2;
  }
  return pdpm::net::verbs::Main(argc, argv);
}
