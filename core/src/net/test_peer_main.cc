// net_test_peer: the process at the other end of the transport tests.
//
//   serve <address> [max_transfer]   registers the ranges of test_peer.h,
//       prints "LISTEN <address>", echoes each WRITE_WITH_IMM back to the
//       client's inbox (its key is the client's connect blob) with imm+1.
//   fetch-add <address> <iterations>  FETCH_ADDs 1 to word 0 of the rw
//       range of the listener at <address>.
//   cas-lock <address> <iterations> <id>  takes a CAS lock on word 0, then
//       increments word 8 by a READ and a WRITE, then releases the lock.
//   rpc-serve <address>  an RPC server with the methods of rpc_test.cc.
// Exits when its stdin closes (the test that started it ended).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/rpc.h"
#include "net/test_peer.h"
#include "net/transport.h"

using namespace pdpm;
using namespace pdpm::net;
using namespace pdpm::net::testing;

namespace {

[[noreturn]] void Die(const Status& s, const char* what) {
  std::fprintf(stderr, "net_test_peer: %s: %s\n", what, s.ToString().c_str());
  std::_Exit(2);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(s, what);
}

void ExitWhenStdinCloses() {
  std::thread([] {
    char c;
    while (::read(0, &c, 1) > 0) {
    }
    std::_Exit(0);
  }).detach();
}

void Announce(const std::string& address) {
  std::printf("LISTEN %s\n", address.c_str());
  std::fflush(stdout);
}

std::unique_ptr<Transport> MakeTransport(uint32_t max_transfer = 0) {
  TransportOptions o = TestOptions();
  o.cores = 4;
  if (max_transfer != 0) o.max_transfer = max_transfer;
  std::unique_ptr<Transport> t;
  Check(Transport::Create(o, &t), "create transport");
  return t;
}

int Serve(const std::string& address, uint32_t max_transfer) {
  auto transport = MakeTransport(max_transfer);
  std::vector<char> rw(kRwSize), ro(kRoSize);
  alignas(8) static char meta[kMetaSize];
  for (size_t i = 0; i < ro.size(); i++) ro[i] = static_cast<char>(i * 7);
  std::unique_ptr<MemoryRegion> rw_region, ro_region, meta_region;
  PersistFn persist = [](const void*, size_t len) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(meta + kMetaPersistCalls)).fetch_add(1);
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(meta + kMetaPersistBytes))
        .fetch_add(len);
  };
  Check(transport->RegisterMemory(rw.data(), rw.size(), kRemoteAll, persist, &rw_region), "reg");
  Check(transport->RegisterMemory(ro.data(), ro.size(), kRemoteRead, {}, &ro_region), "reg");
  Check(transport->RegisterMemory(meta, sizeof(meta), kRemoteRead, {}, &meta_region), "reg");
  PeerKeys keys{rw_region->key(), ro_region->key(), meta_region->key()};

  std::mutex mu;
  std::vector<std::unique_ptr<Connection>> conns;
  AcceptHandler handler;
  handler.on_request = [&](uint32_t, std::span<const uint8_t>, std::string* reply) {
    *reply = EncodeKeys(keys);
    return Status::OK();
  };
  handler.on_connected = [&](std::unique_ptr<Connection> c) {
    std::lock_guard lock(mu);
    conns.push_back(std::move(c));
  };
  Check(transport->Listen(address, handler), "listen");
  Announce(transport->listen_address());
  for (;;) {
    bool idle = true;
    {
      std::lock_guard lock(mu);
      for (auto& c : conns) {
        Incoming in[16];
        size_t n = c->PollIncoming(in);
        uint32_t inbox_key = 0;
        if (c->peer_blob().size() == 4) std::memcpy(&inbox_key, c->peer_blob().data(), 4);
        for (size_t i = 0; i < n && inbox_key != 0; i++) {
          Op echo;
          echo.opcode = Opcode::kWriteWithImm;
          echo.local = {rw_region.get(), 0, in[i].length};
          echo.remote_key = inbox_key;
          echo.imm = in[i].imm + 1;
          echo.signaled = false;
          (void)c->Post({&echo, 1});  // a broken client is dropped below
        }
        Completion comp[16];
        c->PollCompletions(comp);
        idle = idle && n == 0;
      }
      std::erase_if(conns, [](auto& c) { return !c->healthy(); });
    }
    if (idle) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

struct Client {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Connection> conn;
  std::unique_ptr<MemoryRegion> local;
  alignas(8) uint64_t words[32] = {};
  PeerKeys keys;

  explicit Client(const std::string& address) : transport(MakeTransport()) {
    Check(transport->RegisterMemory(words, sizeof(words), 0, {}, &local), "reg");
    Check(transport->Connect(address, static_cast<uint32_t>(::getpid()), {}, &conn), "connect");
    Check(DecodeKeys(conn->peer_blob(), &keys), "keys");
  }
  Op Atomic(Opcode opcode, size_t slot, uint64_t remote_offset, uint64_t a, uint64_t b = 0) {
    Op op;
    op.opcode = opcode;
    op.id = slot;
    op.local = {local.get(), slot * 8, 8};
    op.remote_key = keys.rw;
    op.remote_offset = remote_offset;
    op.compare_or_add = a;
    op.swap = b;
    return op;
  }
};

int FetchAdd(const std::string& address, int iterations) {
  Client c(address);
  constexpr int kBatch = 16;
  for (int done = 0; done < iterations;) {
    int n = std::min(kBatch, iterations - done);
    std::vector<Op> ops;
    for (int i = 0; i < n; i++) {
      ops.push_back(c.Atomic(Opcode::kFetchAdd, i, 0, 1));
      ops.back().signaled = i == n - 1;
    }
    Check(c.conn->Post(ops), "post");
    Completion comp;
    while (c.conn->PollCompletions({&comp, 1}) == 0) std::this_thread::yield();
    Check(comp.status, "fetch_add");
    done += n;
  }
  return 0;
}

int CasLock(const std::string& address, int iterations, uint64_t id) {
  Client c(address);
  for (int i = 0; i < iterations; i++) {
    for (;;) {
      Check(ExecuteSync(*c.conn, c.Atomic(Opcode::kCompareSwap, 0, 0, 0, id)), "lock");
      if (c.words[0] == 0) break;
      std::this_thread::yield();
    }
    Op read;
    read.opcode = Opcode::kRead;
    read.local = {c.local.get(), 8, 8};
    read.remote_key = c.keys.rw;
    read.remote_offset = 8;
    Check(ExecuteSync(*c.conn, read), "read counter");
    c.words[1]++;
    Op write = read;
    write.opcode = Opcode::kWrite;
    write.signaled = false;
    Op unlock = c.Atomic(Opcode::kCompareSwap, 2, 0, id, 0);
    Op ops[] = {write, unlock};
    Check(c.conn->Post(ops), "post");
    Completion comp;
    while (c.conn->PollCompletions({&comp, 1}) == 0) std::this_thread::yield();
    Check(comp.status, "unlock");
    if (c.words[2] != id) Die(Status::Internal("lock word changed while held"), "unlock");
  }
  return 0;
}

int RpcServe(const std::string& address) {
  auto transport = MakeTransport();
  std::unique_ptr<RpcServer> server;
  Check(RpcServer::Create(transport.get(), RpcOptions(), &server), "rpc server");
  RegisterTestMethods(server.get());
  Check(server->Listen(address), "rpc listen");
  Announce(transport->listen_address());
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  const bool asked = mode == "--help" || mode == "-h";
  const bool known = (mode == "serve" && argc >= 3) || (mode == "fetch-add" && argc == 4) ||
                     (mode == "cas-lock" && argc == 5) || (mode == "rpc-serve" && argc == 3);
  if (!known) {
    // Answered before the stdin watch, which would end the process first.
    std::fprintf(asked ? stdout : stderr,
                 "usage: net_test_peer serve|fetch-add|cas-lock|rpc-serve ...\n");
    return asked ? 0 : 2;
  }
  ExitWhenStdinCloses();
  if (mode == "serve") {
    return Serve(argv[2], argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 0);
  }
  if (mode == "fetch-add") return FetchAdd(argv[2], std::atoi(argv[3]));
  if (mode == "cas-lock") {
    return CasLock(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  }
  return RpcServe(argv[2]);
}
