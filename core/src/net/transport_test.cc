// The transport between real processes: the peer (net_test_peer) runs in
// its own process. The backend and host come from PDPM_TEST_TRANSPORT and
// PDPM_TEST_HOST, so the same suite runs on tcp and on verbs.
#include "net/transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "net/tcp/wire.h"
#include "net/test_peer.h"

namespace pdpm::net {
namespace {

using namespace testing;
using Clock = std::chrono::steady_clock;

std::string ListenSpec() {
  return TestHost() + ":0";
}

// A transport with a local registered buffer and a connection to a peer.
class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Transport::Create(TestOptions(), &transport_).ok());
    local_.assign(4 << 20, 0);
    ASSERT_TRUE(
        transport_->RegisterMemory(local_.data(), local_.size(), kRemoteWrite, {}, &region_).ok());
  }

  void StartPeer(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"serve", ListenSpec()};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_TRUE(peer_.Start(args, true).ok());
  }

  std::unique_ptr<Connection> ConnectToPeer(uint32_t core = 0) {
    std::unique_ptr<Connection> conn;
    std::string inbox(4, '\0');
    uint32_t key = region_->key();
    std::memcpy(inbox.data(), &key, 4);
    Status s = transport_->Connect(peer_.address(), core, inbox, &conn);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (conn) {
      EXPECT_TRUE(DecodeKeys(conn->peer_blob(), &keys_).ok());
    }
    return conn;
  }

  Op Rw(Opcode opcode, uint64_t local_offset, uint32_t length, uint64_t remote_offset,
        uint32_t key = 0) {
    Op op;
    op.opcode = opcode;
    op.id = ++next_id_;
    op.local = {region_.get(), local_offset, length};
    op.remote_key = key != 0 ? key : keys_.rw;
    op.remote_offset = remote_offset;
    return op;
  }

  // A key the peer did not register.
  uint32_t BogusKey() const { return keys_.rw ^ keys_.ro ^ keys_.meta ^ 0x5a5a5a5a; }

  // Polls until `count` completions arrived (bounded by the op timeout).
  std::vector<Completion> Collect(Connection& conn, size_t count) {
    std::vector<Completion> out;
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (out.size() < count && Clock::now() < deadline) {
      Completion c[32];
      size_t n = conn.PollCompletions(c);
      for (size_t i = 0; i < n; i++) out.push_back(c[i]);
      if (n == 0) std::this_thread::yield();
    }
    return out;
  }

  std::unique_ptr<Transport> transport_;
  std::vector<char> local_;
  std::unique_ptr<MemoryRegion> region_;
  PeerProcess peer_;
  PeerKeys keys_;
  uint64_t next_id_ = 0;
};

TEST_F(TransportTest, WriteThenReadBackEverySize) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  std::mt19937 rng(7);
  for (uint32_t size : {1u, 8u, 100u, 4096u, 65536u, 1u << 20}) {
    for (uint32_t i = 0; i < size; i++) local_[i] = static_cast<char>(rng());
    ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kWrite, 0, size, 12345)).ok());
    ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kRead, 2 << 20, size, 12345)).ok());
    ASSERT_EQ(0, std::memcmp(local_.data(), local_.data() + (2 << 20), size)) << size;
  }
}

TEST_F(TransportTest, ReadsReadOnlyRangeButCannotWriteIt) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kRead, 0, kRoSize, 0, keys_.ro)).ok());
  for (size_t i = 0; i < kRoSize; i++) ASSERT_EQ(local_[i], static_cast<char>(i * 7));
  Status s = ExecuteSync(*conn, Rw(Opcode::kWrite, 0, 16, 0, keys_.ro));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_TRUE(conn->healthy());
}

TEST_F(TransportTest, WrongKeyAndOutOfBoundsFailOnlyThatOp) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  uint32_t bogus = BogusKey();
  Status s = ExecuteSync(*conn, Rw(Opcode::kRead, 0, 64, 0, bogus));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  s = ExecuteSync(*conn, Rw(Opcode::kWrite, 0, 64, kRwSize - 32));
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  s = ExecuteSync(*conn, Rw(Opcode::kRead, 0, 8, ~uint64_t{0} - 3));
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  Op cas = Rw(Opcode::kCompareSwap, 0, 8, 0, bogus);
  s = ExecuteSync(*conn, cas);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_TRUE(conn->healthy());
  EXPECT_TRUE(ExecuteSync(*conn, Rw(Opcode::kWrite, 0, 64, 0)).ok());
}

// Unsignaled ops complete only with a later signaled one; an op refused
// before it is sent (wrong key) must still complete, not wait behind them
// for a signaled op that may never come (the RPC layer sends unsignaled).
TEST_F(TransportTest, RefusedOpAfterUnsignaledOpsCompletes) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  Op quiet = Rw(Opcode::kWrite, 0, 64, 0);
  quiet.signaled = false;
  ASSERT_TRUE(conn->Post({&quiet, 1}).ok());
  uint32_t bogus = BogusKey();
  Op refused = Rw(Opcode::kWrite, 0, 64, 0, bogus);
  ASSERT_TRUE(conn->Post({&refused, 1}).ok());
  std::vector<Completion> got = Collect(*conn, 1);
  ASSERT_EQ(got.size(), 1u) << "the refused op never completed";
  EXPECT_EQ(got[0].id, refused.id);
  EXPECT_EQ(got[0].status.code(), StatusCode::kPermissionDenied) << got[0].status.ToString();
  EXPECT_TRUE(conn->healthy());
  EXPECT_TRUE(ExecuteSync(*conn, Rw(Opcode::kRead, 4096, 64, 0)).ok());
  EXPECT_EQ(0, std::memcmp(local_.data(), local_.data() + 4096, 64));
}

TEST_F(TransportTest, MalformedLocalOpsAreRefusedAtPost) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  Op outside = Rw(Opcode::kWrite, local_.size() - 4, 8, 0);
  EXPECT_EQ(conn->Post({&outside, 1}).code(), StatusCode::kInvalidArgument);
  Op misaligned = Rw(Opcode::kFetchAdd, 0, 8, 12);
  EXPECT_EQ(conn->Post({&misaligned, 1}).code(), StatusCode::kInvalidArgument);
  Op short_atomic = Rw(Opcode::kCompareSwap, 0, 4, 0);
  EXPECT_EQ(conn->Post({&short_atomic, 1}).code(), StatusCode::kInvalidArgument);
  Op no_region = Rw(Opcode::kRead, 0, 8, 0);
  no_region.local.region = nullptr;
  EXPECT_EQ(conn->Post({&no_region, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(conn->outstanding(), 0u);
  EXPECT_TRUE(conn->healthy());
}

TEST_F(TransportTest, OversizeTransferIsRefused) {
  StartPeer({std::to_string(64 << 10)});  // the peer accepts at most 64 KiB
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  Op big = Rw(Opcode::kWrite, 0, (64 << 10) + 1, 0);
  EXPECT_EQ(conn->Post({&big, 1}).code(), StatusCode::kTooLarge);
  Op read = Rw(Opcode::kRead, 0, (64 << 10) + 1, 0);
  EXPECT_EQ(conn->Post({&read, 1}).code(), StatusCode::kTooLarge);
  EXPECT_TRUE(ExecuteSync(*conn, Rw(Opcode::kWrite, 0, 64 << 10, 0)).ok());
}

TEST_F(TransportTest, AtomicsReturnTheOldValue) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  auto word = [&] {
    uint64_t v;
    std::memcpy(&v, local_.data(), 8);
    return v;
  };
  std::memset(local_.data() + 64, 0, 8);
  ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kWrite, 64, 8, 4096)).ok());
  Op add = Rw(Opcode::kFetchAdd, 0, 8, 4096);
  add.compare_or_add = 5;
  ASSERT_TRUE(ExecuteSync(*conn, add).ok());
  EXPECT_EQ(word(), 0u);
  ASSERT_TRUE(ExecuteSync(*conn, add).ok());
  EXPECT_EQ(word(), 5u);
  Op cas = Rw(Opcode::kCompareSwap, 0, 8, 4096);
  cas.compare_or_add = 3;  // wrong expectation: no swap
  cas.swap = 100;
  ASSERT_TRUE(ExecuteSync(*conn, cas).ok());
  EXPECT_EQ(word(), 10u);
  cas.compare_or_add = 10;
  ASSERT_TRUE(ExecuteSync(*conn, cas).ok());
  EXPECT_EQ(word(), 10u);
  ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kRead, 0, 8, 4096)).ok());
  EXPECT_EQ(word(), 100u);
}

TEST_F(TransportTest, PersistRunsBeforeTheWriteCompletes) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  Op w = Rw(Opcode::kWrite, 0, 3000, 100);
  w.persist = true;
  ASSERT_TRUE(ExecuteSync(*conn, w).ok());
  ASSERT_TRUE(ExecuteSync(*conn, w).ok());
  ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kRead, 0, 16, 0, keys_.meta)).ok());
  uint64_t calls, bytes;
  std::memcpy(&calls, local_.data() + kMetaPersistCalls, 8);
  std::memcpy(&bytes, local_.data() + kMetaPersistBytes, 8);
  EXPECT_EQ(calls, 2u);
  EXPECT_EQ(bytes, 6000u);
}

TEST_F(TransportTest, WriteWithImmRaisesIncomingAtThePeer) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  for (uint32_t i = 0; i < 100; i++) local_[(1 << 20) + i] = static_cast<char>(i + 1);
  Op w = Rw(Opcode::kWriteWithImm, 1 << 20, 100, 0);
  w.imm = 41;
  ASSERT_TRUE(ExecuteSync(*conn, w).ok());
  // The peer echoes the same bytes into our region at offset 0 with imm+1.
  Incoming in;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  size_t n = 0;
  while ((n = conn->PollIncoming({&in, 1})) == 0 && Clock::now() < deadline) {
    ASSERT_TRUE(conn->ArmNotify().ok());
    if ((n = conn->PollIncoming({&in, 1})) != 0) break;
    pollfd p{conn->notify_fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    conn->AckNotify();
  }
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(in.imm, 42u);
  EXPECT_EQ(in.length, 100u);
  for (uint32_t i = 0; i < 100; i++) ASSERT_EQ(local_[i], static_cast<char>(i + 1));
}

TEST_F(TransportTest, ManyOutstandingWithSelectiveSignaling) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  std::vector<Op> ops;
  for (int i = 0; i < 200; i++) {
    ops.push_back(Rw(Opcode::kWrite, i * 4096ull, 4096, i * 4096ull));
    ops.back().signaled = i == 199;
  }
  for (int i = 0; i < 200 * 4096; i++) local_[i] = static_cast<char>(i / 4096);
  ASSERT_TRUE(conn->Post(ops).ok());
  EXPECT_EQ(conn->outstanding(), 1u);
  auto done = Collect(*conn, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, ops.back().id);
  EXPECT_TRUE(done[0].status.ok());
  EXPECT_EQ(conn->outstanding(), 0u);
  ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kRead, 2 << 20, 200 * 4096, 0)).ok());
  EXPECT_EQ(0, std::memcmp(local_.data(), local_.data() + (2 << 20), size_t{200} * 4096));
  // A full send queue is refused as a whole.
  std::vector<Op> too_many(TestOptions().max_outstanding + 1, Rw(Opcode::kRead, 0, 8, 0));
  EXPECT_EQ(conn->Post(too_many).code(), StatusCode::kResourceExhausted);
}

TEST_F(TransportTest, ManyConnectionsAcrossCores) {
  StartPeer();
  std::vector<std::unique_ptr<Connection>> conns;
  for (uint32_t i = 0; i < 16; i++) {
    conns.push_back(ConnectToPeer(i));
    ASSERT_TRUE(conns.back());
    EXPECT_EQ(conns.back()->core(), i);
  }
  for (uint32_t round = 0; round < 3; round++) {
    for (uint32_t i = 0; i < conns.size(); i++) {
      std::memset(local_.data() + size_t{i} * 512, static_cast<int>(i + round), 512);
      Op w = Rw(Opcode::kWrite, uint64_t{i} * 512, 512, uint64_t{i} * 512);
      w.id = i;
      ASSERT_TRUE(conns[i]->Post({&w, 1}).ok());
    }
    for (uint32_t i = 0; i < conns.size(); i++) {
      auto c = Collect(*conns[i], 1);
      ASSERT_EQ(c.size(), 1u);
      ASSERT_TRUE(c[0].status.ok()) << c[0].status.ToString();
    }
  }
  ASSERT_TRUE(ExecuteSync(*conns[3], Rw(Opcode::kRead, 1 << 20, 16 * 512, 0)).ok());
  for (uint32_t i = 0; i < 16; i++) EXPECT_EQ(local_[(1 << 20) + i * 512], char(i + 2));
}

// The test process is the passive side; client processes hammer one word.
class ServingTest : public TransportTest {
 protected:
  void Listen() {
    alignas(8) static uint64_t words[512];
    std::memset(words, 0, sizeof(words));
    words_ = words;
    ASSERT_TRUE(transport_->RegisterMemory(words, sizeof(words), kRemoteAll, {}, &served_).ok());
    AcceptHandler h;
    h.on_request = [this](uint32_t, std::span<const uint8_t>, std::string* reply) {
      *reply = EncodeKeys({served_->key(), 0, 0});
      return Status::OK();
    };
    h.on_connected = [this](std::unique_ptr<Connection> c) {
      std::lock_guard lock(mu_);
      accepted_.push_back(std::move(c));
    };
    ASSERT_TRUE(transport_->Listen(ListenSpec(), h).ok());
  }
  // Accepted connections were handed over on the transport's thread, under
  // mu_: release them under it too.
  void TearDown() override {
    std::lock_guard lock(mu_);
    accepted_.clear();
  }
  uint64_t Word(size_t i) { return std::atomic_ref<uint64_t>(words_[i]).load(); }
  void RunClients(const std::vector<std::vector<std::string>>& argvs) {
    std::vector<std::unique_ptr<PeerProcess>> clients;
    for (auto& a : argvs) {
      clients.push_back(std::make_unique<PeerProcess>());
      ASSERT_TRUE(clients.back()->Start(a, false).ok());
    }
    for (auto& c : clients) EXPECT_EQ(c->Wait(), 0);
  }

  std::unique_ptr<MemoryRegion> served_;
  uint64_t* words_ = nullptr;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> accepted_;
};

TEST_F(ServingTest, ConcurrentFetchAddFromProcessesTotalsExactly) {
  Listen();
  // A local thread adds too: remote and local atomics must compose.
  std::atomic<bool> stop{false};
  uint64_t local_adds = 0;
  std::thread local([&] {
    while (!stop.load() && local_adds < 100000) {
      std::atomic_ref<uint64_t>(words_[0]).fetch_add(1);
      local_adds++;
      if (local_adds % 64 == 0) std::this_thread::yield();
    }
  });
  std::vector<std::vector<std::string>> argvs;
  argvs.reserve(4);
  for (int i = 0; i < 4; i++) {
    argvs.push_back({"fetch-add", transport_->listen_address(), "500"});
  }
  RunClients(argvs);
  stop.store(true);
  local.join();
  EXPECT_EQ(Word(0), uint64_t{4} * 500 + local_adds);
}

TEST_F(ServingTest, CasLockFromProcessesSerializesIncrements) {
  Listen();
  std::vector<std::vector<std::string>> argvs;
  argvs.reserve(3);
  for (int i = 0; i < 3; i++) {
    argvs.push_back({"cas-lock", transport_->listen_address(), "150", std::to_string(i + 1)});
  }
  RunClients(argvs);
  EXPECT_EQ(Word(0), 0u);  // unlocked
  EXPECT_EQ(Word(1), 3u * 150);
}

TEST_F(TransportTest, PeerKilledMidTransferFailsEveryOpInTime) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  std::vector<Op> ops;
  ops.reserve(64);
  for (int i = 0; i < 64; i++) {
    ops.push_back(i % 2 ? Rw(Opcode::kWrite, 0, 1 << 20, 0)
                        : Rw(Opcode::kRead, 1 << 20, 1 << 20, 0));
  }
  ASSERT_TRUE(conn->Post(ops).ok());
  peer_.Signal(SIGKILL);
  auto start = Clock::now();
  auto done = Collect(*conn, ops.size());
  auto elapsed = Clock::now() - start;
  EXPECT_EQ(done.size(), ops.size());
  EXPECT_LT(elapsed, std::chrono::milliseconds(TestOptions().op_timeout_ms + ScaledMs(5000)));
  EXPECT_FALSE(conn->healthy());
  EXPECT_FALSE(done.back().status.ok());
  EXPECT_EQ(conn->Post({&ops[0], 1}).code(), StatusCode::kUnavailable);
}

TEST_F(TransportTest, HungPeerTimesOut) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  peer_.Freeze();
  auto start = Clock::now();
  std::vector<Op> ops{Rw(Opcode::kRead, 0, 4096, 0), Rw(Opcode::kWrite, 0, 4096, 0)};
  ASSERT_TRUE(conn->Post(ops).ok());
  auto done = Collect(*conn, 2);
  auto elapsed = Clock::now() - start;
  peer_.Signal(SIGCONT);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status.code(), StatusCode::kTimeout) << done[0].status.ToString();
  EXPECT_FALSE(done[1].status.ok());
  EXPECT_GE(elapsed, std::chrono::milliseconds(TestOptions().op_timeout_ms));
  EXPECT_LT(elapsed, std::chrono::milliseconds(TestOptions().op_timeout_ms + ScaledMs(5000)));
  EXPECT_FALSE(conn->healthy());
}

TEST_F(TransportTest, ReconnectAfterThePeerRestarts) {
  StartPeer();
  auto conn = ConnectToPeer();
  ASSERT_TRUE(conn);
  std::string address = peer_.address();
  peer_.Signal(SIGKILL);
  peer_.Wait();
  EXPECT_FALSE(conn->Reconnect().ok());  // nobody listens
  PeerProcess again;
  ASSERT_TRUE(again.Start({"serve", address}, true).ok());
  ASSERT_TRUE(conn->Reconnect().ok());
  EXPECT_TRUE(conn->healthy());
  ASSERT_TRUE(DecodeKeys(conn->peer_blob(), &keys_).ok());  // the new process's keys
  std::memset(local_.data(), 0x3c, 256);
  ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kWrite, 0, 256, 0)).ok());
  ASSERT_TRUE(ExecuteSync(*conn, Rw(Opcode::kRead, 4096, 256, 0)).ok());
  EXPECT_EQ(0, std::memcmp(local_.data(), local_.data() + 4096, 256));
}

// Raw TCP clients: only meaningful where the listener is a TCP socket.
int RawConnect(const std::string& address) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  size_t colon = address.rfind(':');
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  a.sin_port = htons(std::stoi(address.substr(colon + 1)));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True if the server closes `fd` within a few seconds.
bool ClosedByPeer(int fd) {
  auto deadline = Clock::now() + std::chrono::seconds(10);
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

TEST_F(TransportTest, GarbageOnTheListenerClosesOnlyThatConnection) {
  if (TestBackend() != BackendKind::kTcp) GTEST_SKIP() << "tcp wire only";
  StartPeer();
  auto good = ConnectToPeer();
  ASSERT_TRUE(good);
  std::mt19937 rng(99);
  // 1: random bytes instead of a hello.
  int fd = RawConnect(peer_.address());
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> junk(4096);
  for (auto& b : junk) b = static_cast<uint8_t>(rng());
  ASSERT_GT(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
  EXPECT_TRUE(ClosedByPeer(fd));
  ::close(fd);
  // 2: a valid hello, then a malformed frame; 3: then an oversize frame.
  for (int variant = 0; variant < 2; variant++) {
    fd = RawConnect(peer_.address());
    ASSERT_GE(fd, 0);
    tcp::Hello hello;
    hello.max_transfer = 1 << 20;
    uint8_t hb[tcp::kHelloSize];
    tcp::EncodeHello(hello, hb);
    ASSERT_EQ(::send(fd, hb, sizeof(hb), MSG_NOSIGNAL), ssize_t(sizeof(hb)));
    uint8_t reply[tcp::kHelloReplySize];
    ASSERT_EQ(::recv(fd, reply, sizeof(reply), MSG_WAITALL), ssize_t(sizeof(reply)));
    std::vector<uint8_t> blob(reply[5]);
    if (!blob.empty()) {
      ASSERT_EQ(::recv(fd, blob.data(), blob.size(), MSG_WAITALL), ssize_t(blob.size()));
    }
    uint8_t frame[tcp::kFrameHeaderSize];
    if (variant == 0) {
      for (auto& b : frame) b = static_cast<uint8_t>(rng());
    } else {
      tcp::FrameHeader h;
      h.type = tcp::FrameType::kWrite;
      h.key = keys_.rw;
      h.length = 64u << 20;  // over the peer's max_transfer
      tcp::EncodeFrameHeader(h, frame);
    }
    ASSERT_EQ(::send(fd, frame, sizeof(frame), MSG_NOSIGNAL), ssize_t(sizeof(frame)));
    EXPECT_TRUE(ClosedByPeer(fd)) << variant;
    ::close(fd);
  }
  // The established connection and new ones are unharmed.
  EXPECT_TRUE(good->healthy());
  EXPECT_TRUE(ExecuteSync(*good, Rw(Opcode::kRead, 0, 4096, 0)).ok());
  auto fresh = ConnectToPeer(1);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(ExecuteSync(*fresh, Rw(Opcode::kRead, 0, 4096, 0)).ok());
}

TEST_F(TransportTest, KeysAreNonZeroAndUnique) {
  std::vector<std::unique_ptr<MemoryRegion>> regions;
  std::set<uint32_t> keys;
  for (int i = 0; i < 200; i++) {
    regions.emplace_back();
    ASSERT_TRUE(
        transport_->RegisterMemory(local_.data() + i, 8, kRemoteRead, {}, &regions.back()).ok());
    uint32_t k = regions.back()->key();
    EXPECT_NE(k, 0u);
    EXPECT_TRUE(keys.insert(k).second);
  }
}

}  // namespace
}  // namespace pdpm::net
