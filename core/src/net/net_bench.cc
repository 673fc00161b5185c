// net_bench: iRDMA throughput and latency between two processes.
//
//   net_bench server <host:port> <host:port>
//       one-sided target (64 MiB, all rights) on the first address, RPC echo
//       server on the second; prints "LISTEN <one-sided> <rpc>".
//   net_bench client <one-sided address> <rpc address> [seconds per figure]
//       [prefix]   (only the figures whose names start with it)
//       prints "RESULT <name> <value> <unit>" lines (scripts/bench-net.sh
//       turns them into BENCH lines next to their references).
// The backend comes from PDPM_BENCH_TRANSPORT (tcp, the default, or verbs).
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "net/rpc.h"
#include "net/transport.h"

using namespace pdpm;
using namespace pdpm::net;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kTargetSize = 64 << 20;
constexpr uint16_t kEchoMethod = 1;

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "net_bench: %s: %s\n", what, s.ToString().c_str());
    std::fflush(stderr);
    std::_Exit(2);
  }
}

TransportOptions Options(uint32_t cores) {
  TransportOptions o;
  // Read before any thread exists.
  if (const char* env = std::getenv("PDPM_BENCH_TRANSPORT")) {  // NOLINT(concurrency-mt-unsafe)
    Check(ParseBackendKind(env, &o.backend), "PDPM_BENCH_TRANSPORT");
  }
  o.cores = cores;
  o.op_timeout_ms = 10000;
  return o;
}

int Server(const std::string& raw_address, const std::string& rpc_address) {
  std::unique_ptr<Transport> raw, rpc;
  Check(Transport::Create(Options(2), &raw), "transport");
  Check(Transport::Create(Options(1), &rpc), "transport");
  std::vector<char> target(kTargetSize, 1);
  std::unique_ptr<MemoryRegion> region;
  Check(raw->RegisterMemory(target.data(), target.size(), kRemoteAll, {}, &region), "register");
  std::vector<std::unique_ptr<Connection>> conns;
  std::mutex mu;
  AcceptHandler h;
  h.on_request = [&](uint32_t, std::span<const uint8_t>, std::string* reply) {
    uint32_t key = region->key();
    reply->assign(reinterpret_cast<char*>(&key), 4);
    return Status::OK();
  };
  h.on_connected = [&](std::unique_ptr<Connection> c) {
    std::lock_guard lock(mu);
    conns.push_back(std::move(c));
  };
  Check(raw->Listen(raw_address, h), "listen");
  std::unique_ptr<RpcServer> server;
  Check(RpcServer::Create(rpc.get(), RpcOptions(), &server), "rpc server");
  server->Register(kEchoMethod, [](std::span<const uint8_t> req, std::string* reply) {
    reply->assign(reinterpret_cast<const char*>(req.data()), req.size());
    return Status::OK();
  });
  Check(server->Listen(rpc_address), "rpc listen");
  std::printf("LISTEN %s %s\n", raw->listen_address().c_str(), rpc->listen_address().c_str());
  std::fflush(stdout);
  char c;
  while (::read(0, &c, 1) > 0) {  // until the script closes our stdin
  }
  return 0;
}

// Streams `size`-byte ops of `opcode` over `conns` connections (one thread
// each) for `seconds`; returns bytes per second.
double OneSided(Transport* t, const std::string& address, Opcode opcode, uint32_t size, int conns,
                double seconds) {
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  threads.reserve(conns);
  for (int i = 0; i < conns; i++) {
    threads.emplace_back([&, i] {
      std::unique_ptr<Connection> conn;
      Check(t->Connect(address, i, {}, &conn), "connect");
      uint32_t key;
      std::memcpy(&key, conn->peer_blob().data(), 4);
      // Keep about 4 MiB in flight, signaling every eighth op.
      uint32_t depth = std::clamp<uint32_t>((4u << 20) / size, 8, 128);
      std::vector<char> local(size_t{size} * depth);
      std::unique_ptr<MemoryRegion> region;
      Check(t->RegisterMemory(local.data(), local.size(), 0, {}, &region), "register");
      uint64_t posted = 0, done = 0;
      const uint32_t span = kTargetSize / size;
      auto post = [&](uint32_t count) {
        std::vector<Op> ops(count);
        for (uint32_t k = 0; k < count; k++) {
          Op& op = ops[k];
          op.opcode = opcode;
          op.id = posted;
          op.local = {region.get(), (posted % depth) * size, size};
          op.remote_key = key;
          op.remote_offset = uint64_t{(posted + uint64_t(i) * 7) % span} * size;
          op.signaled = posted % 8 == 7;
          posted++;
        }
        Check(conn->Post(ops), "post");
      };
      post(depth - depth % 8);
      // Each completion stands for 8 ops; refill the pipeline behind it.
      auto take = [&](std::span<const Completion> c) {
        for (const Completion& one : c) Check(one.status, "op");
        done += 8 * c.size();
        bytes.fetch_add(8 * c.size() * size, std::memory_order_relaxed);
        if (!c.empty()) post(8 * c.size());
      };
      while (!stop.load()) {
        Completion c[16];
        size_t n = conn->PollCompletions(c);
        if (n == 0) {
          // Nothing yet: sleep rather than take the CPU the peer needs.
          Check(conn->ArmNotify(), "arm");
          if ((n = conn->PollCompletions(c)) == 0) {
            pollfd p{conn->notify_fd(), POLLIN, 0};
            ::poll(&p, 1, 10);
          }
          conn->AckNotify();
        }
        take({c, n});
      }
      while (done < posted) {
        Completion c[16];
        size_t n = conn->PollCompletions(c);
        done += 8 * n;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // connect and ramp up
  uint64_t start_bytes = bytes.load();
  auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  uint64_t end_bytes = bytes.load();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stop.store(true);
  for (auto& th : threads) th.join();
  return (end_bytes - start_bytes) / elapsed;
}

void Result(const std::string& name, double value, const char* unit) {
  std::printf("RESULT %s %.3f %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

int Client(const std::string& raw_address, const std::string& rpc_address, double seconds,
           const std::string& only) {
  auto wanted = [&](const std::string& name) { return name.rfind(only, 0) == 0; };
  std::unique_ptr<Transport> t;
  Check(Transport::Create(Options(1), &t), "transport");
  for (Opcode opcode : {Opcode::kWrite, Opcode::kRead}) {
    for (uint32_t size : {4u << 10, 16u << 10, 64u << 10, 256u << 10, 1u << 20}) {
      for (int conns : {1, 4}) {
        std::string name = std::string(OpcodeName(opcode)) + "." + std::to_string(size >> 10) +
                           "KiB" + (conns == 1 ? "" : ".x" + std::to_string(conns));
        if (!wanted(name)) continue;
        double bps = OneSided(t.get(), raw_address, opcode, size, conns, seconds);
        Result(name, bps / 1e6, "MB/s");
      }
    }
  }
  if (!wanted("rpc64")) return 0;
  // RPC latency: one client, 64-byte echo.
  std::unique_ptr<RpcClient> client;
  Check(RpcClient::Connect(t.get(), rpc_address, 0, RpcOptions(), &client), "rpc connect");
  std::string request(64, 'q'), reply;
  std::span<const uint8_t> req(reinterpret_cast<const uint8_t*>(request.data()), 64);
  for (int i = 0; i < 1000; i++) Check(client->Call(kEchoMethod, req, &reply), "warm up");
  std::vector<double> us;
  auto end = Clock::now() + std::chrono::duration<double>(seconds * 2);
  while (Clock::now() < end) {
    auto a = Clock::now();
    Check(client->Call(kEchoMethod, req, &reply), "rpc");
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
  }
  std::sort(us.begin(), us.end());
  Result("rpc64.p50", us[us.size() / 2], "us");
  Result("rpc64.p99", us[us.size() * 99 / 100], "us");
  // RPC throughput: four clients, one thread each.
  std::atomic<uint64_t> calls{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int i = 0; i < 4; i++) {
    threads.emplace_back([&, i] {
      std::unique_ptr<RpcClient> c;
      Check(RpcClient::Connect(t.get(), rpc_address, i, RpcOptions(), &c), "rpc connect");
      std::string r;
      while (!stop.load()) {
        Check(c->Call(kEchoMethod, req, &r), "rpc");
        calls.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  uint64_t c0 = calls.load();
  auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds * 2));
  double rate = (calls.load() - c0) / std::chrono::duration<double>(Clock::now() - start).count();
  stop.store(true);
  for (auto& th : threads) th.join();
  Result("rpc64.x4", rate / 1e3, "kcalls/s");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  const bool asked = mode == "--help" || mode == "-h";
  if (mode == "server" && argc == 4) return Server(argv[2], argv[3]);
  if (mode == "client" && argc >= 4 && argc <= 6) {
    return Client(argv[2], argv[3], argc >= 5 ? std::atof(argv[4]) : 0.5, argc == 6 ? argv[5] : "");
  }
  std::fprintf(asked ? stdout : stderr,
               "usage: net_bench server <addr> <addr> | client <addr> <addr> [s]\n");
  return asked ? 0 : 2;
}
