// The verbs backend against a real device: a forked server process and the
// test process talk over RC queue pairs (soft-RoCE in the hardware guest).
// Without a device only the wire format and the clean refusal are checked.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "net/test_peer.h"
#include "net/verbs/peer_process.h"
#include "net/verbs/verbs_transport.h"
#include "net/verbs/verbs_wire.h"

namespace pdpm::net::verbs {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ScaledMs;

#define EXPECT_OK(expr)                                     \
  do {                                                      \
    Status s_ = (expr);                                     \
    EXPECT_TRUE(s_.ok()) << #expr << ": " << s_.ToString(); \
  } while (0)
#define ASSERT_OK(expr)                                     \
  do {                                                      \
    Status s_ = (expr);                                     \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.ToString(); \
  } while (0)

bool MachineHasRdmaDevice() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

TEST(VerbsWire, ConnectDataRoundTrip) {
  uint8_t buffer[kConnectDataSize];
  std::string blob(kMaxConnectBlob, 'x');
  size_t length = EncodeConnectData(7, blob, buffer);
  ASSERT_EQ(length, kConnectDataSize);
  uint32_t core;
  std::string decoded;
  ASSERT_TRUE(DecodeConnectData({buffer, length}, &core, &decoded).ok());
  EXPECT_EQ(core, 7u);
  EXPECT_EQ(decoded, blob);
}

TEST(VerbsWire, ConnectDataRejectsGarbage) {
  uint8_t buffer[kConnectDataSize] = {};
  uint32_t core;
  std::string blob;
  EXPECT_EQ(DecodeConnectData({buffer, 4}, &core, &blob).code(), StatusCode::kCorruption);
  EncodeConnectData(1, "abc", buffer);
  buffer[0] = 9;  // version
  EXPECT_EQ(DecodeConnectData({buffer, kConnectDataSize}, &core, &blob).code(),
            StatusCode::kCorruption);
  EncodeConnectData(1, "abc", buffer);
  buffer[1] = 49;  // blob longer than allowed
  EXPECT_EQ(DecodeConnectData({buffer, kConnectDataSize}, &core, &blob).code(),
            StatusCode::kCorruption);
}

TEST(VerbsWire, RejectDataCarriesTheStatus) {
  uint8_t buffer[kRejectDataSize];
  size_t length = EncodeRejectData(Status::PermissionDenied("bad secret"), buffer);
  Status s = DecodeRejectData({buffer, length});
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("bad secret"), std::string_view::npos);
  EXPECT_EQ(DecodeRejectData({}).code(), StatusCode::kUnavailable);
}

TEST(VerbsWire, ControlMessageValidation) {
  ControlMessage message{};
  message.version = kWireVersion;
  message.type = static_cast<uint8_t>(ControlType::kPersistReply);
  auto bytes = reinterpret_cast<const uint8_t*>(&message);
  ControlMessage decoded;
  EXPECT_TRUE(DecodeControl({bytes, sizeof(message)}, &decoded).ok());
  EXPECT_EQ(DecodeControl({bytes, sizeof(message) - 1}, &decoded).code(), StatusCode::kCorruption);
  message.type = 9;
  EXPECT_EQ(DecodeControl({bytes, sizeof(message)}, &decoded).code(), StatusCode::kCorruption);
  message.type = static_cast<uint8_t>(ControlType::kPersistReply);
  message.status = 999;
  EXPECT_EQ(DecodeControl({bytes, sizeof(message)}, &decoded).code(), StatusCode::kCorruption);
}

TEST(VerbsTransport, CreateMatchesTheMachine) {
  std::unique_ptr<Transport> transport;
  TransportOptions options;
  options.backend = BackendKind::kVerbs;
  Status s = CreateVerbsTransport(options, &transport);
  if (MachineHasRdmaDevice()) {
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(transport->kind(), BackendKind::kVerbs);
  } else {
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.ToString();
    EXPECT_NE(s.message().find("no RDMA device"), std::string_view::npos) << s.ToString();
  }
}

TEST(VerbsTransport, UnknownDeviceNameIsNotSupported) {
  std::unique_ptr<Transport> transport;
  TransportOptions options;
  options.device = "no-such-device";
  EXPECT_EQ(CreateVerbsTransport(options, &transport).code(), StatusCode::kNotSupported);
}

// --- two processes ---------------------------------------------------------

constexpr size_t kRegionSize = 1 << 20;
// Server region layout: persist counters first, then free space.
constexpr uint64_t kPersistCount = 0, kPersistOffset = 8, kPersistLength = 16;
constexpr uint32_t kEchoBelow = 1000;  // server answers WRITE_WITH_IMM imm < this
constexpr uint64_t kEchoSource = 256;  // ... with its 8 bytes at this offset
constexpr uint64_t kEchoTarget = 512;  // ... written here in the client's region
constexpr uint32_t kServerCores = 2;
constexpr uint32_t kUnpolledCore = 1;

struct Blob {
  uint32_t key;
  uint32_t read_only_key;  // the second mapping, remote read only
  uint32_t core;
  uint32_t unaligned_key;  // the second mapping from byte kUnalignedStart on
};
constexpr uint64_t kUnalignedStart = 5;

char* MapRegion() {
  void* p = mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) abort();
  return static_cast<char*>(p);
}

std::string TestHost() {
  return PeerEnv("PDPM_TEST_HOST");
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    fprintf(stderr, "server: %s: %s\n", what, s.ToString().c_str());
    _exit(2);
  }
}

// The server process: exposes a region with a PersistFn that records its
// calls in the region itself, echoes WRITE_WITH_IMM, runs until its
// control pipe closes.
[[noreturn]] void RunServer(int address_fd, int control_fd) {
  TransportOptions options;
  options.backend = BackendKind::kVerbs;
  options.cores = kServerCores;
  std::unique_ptr<Transport> transport;
  Check(CreateVerbsTransport(options, &transport), "create");
  char* base = MapRegion();
  char* read_only = MapRegion();
  std::unique_ptr<MemoryRegion> region, read_only_region;
  Check(transport->RegisterMemory(
            base, kRegionSize, kRemoteAll,
            [base](const void* addr, size_t len) {
              auto* words = reinterpret_cast<uint64_t*>(base);
              words[kPersistCount / 8]++;
              words[kPersistOffset / 8] = static_cast<const char*>(addr) - base;
              words[kPersistLength / 8] = len;
            },
            &region),
        "register");
  Check(transport->RegisterMemory(read_only, kRegionSize, kRemoteRead, nullptr, &read_only_region),
        "register read-only");
  std::unique_ptr<MemoryRegion> unaligned_region;
  Check(transport->RegisterMemory(read_only + kUnalignedStart, 4096, kRemoteAll, nullptr,
                                  &unaligned_region),
        "register unaligned");
  std::mutex mu;
  std::vector<std::unique_ptr<Connection>> connections;
  AcceptHandler handler;
  handler.on_request = [&](uint32_t core, std::span<const uint8_t> peer,
                           std::string* reply) -> Status {
    if (std::string_view(reinterpret_cast<const char*>(peer.data()), peer.size()) == "refuse") {
      return Status::PermissionDenied("refused on request");
    }
    Blob blob{region->key(), read_only_region->key(), core, unaligned_region->key()};
    reply->assign(reinterpret_cast<const char*>(&blob), sizeof(blob));
    return Status::OK();
  };
  handler.on_connected = [&](std::unique_ptr<Connection> conn) {
    std::lock_guard lock(mu);
    connections.push_back(std::move(conn));
  };
  Check(transport->Listen(TestHost() + ":0", handler), "listen");
  std::string address = transport->listen_address() + "\n";
  if (write(address_fd, address.data(), address.size()) != static_cast<ssize_t>(address.size())) {
    _exit(3);
  }
  for (;;) {
    pollfd pfd{control_fd, POLLIN, 0};
    if (poll(&pfd, 1, 1) > 0) break;  // EOF: the test is done
    std::lock_guard lock(mu);
    for (auto& conn : connections) {
      // Connections on core 1 are never polled by their owner: the
      // transport's service thread has to answer persist requests there.
      if (conn->core() == kUnpolledCore) continue;
      Incoming incoming[16];
      Completion completions[16];
      conn->PollCompletions(completions);
      size_t n = conn->PollIncoming(incoming);
      for (size_t i = 0; i < n && conn->healthy(); i++) {
        if (incoming[i].imm >= kEchoBelow) continue;
        Blob peer;
        std::memcpy(&peer, conn->peer_blob().data(), sizeof(peer));
        Op echo;
        echo.opcode = Opcode::kWriteWithImm;
        echo.local = {region.get(), kEchoSource, 8};
        echo.remote_key = peer.key;
        echo.remote_offset = kEchoTarget;
        echo.imm = incoming[i].imm + 1;
        echo.signaled = false;
        (void)conn->Post({&echo, 1});
      }
    }
  }
  _exit(0);
}

// The test binary re-executed as the server process (see VerbsPair::SetUp).
constexpr char kServerEnv[] = "PDPM_VERBS_TEST_SERVER";

__attribute__((constructor)) void MaybeRunAsServer() {
  std::string fds = PeerEnv(kServerEnv);
  int address_fd, control_fd;
  if (sscanf(fds.c_str(), "%d,%d", &address_fd, &control_fd) == 2) {
    RunServer(address_fd, control_fd);
  }
}

class VerbsPair : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!MachineHasRdmaDevice()) GTEST_SKIP() << "no RDMA device on this machine";
    if (TestHost().empty()) GTEST_SKIP() << "PDPM_TEST_HOST names no RDMA-capable address";
    int address_pipe[2], control_pipe[2];
    ASSERT_EQ(pipe(address_pipe), 0);
    ASSERT_EQ(pipe(control_pipe), 0);
    server_ = fork();
    ASSERT_GE(server_, 0);
    if (server_ == 0) {
      // A fresh image: verbs contexts must not be shared across fork.
      close(address_pipe[0]);
      close(control_pipe[1]);
      std::string fds = std::to_string(address_pipe[1]) + "," + std::to_string(control_pipe[0]);
      ExecSelfAsPeer(kServerEnv, fds);
    }
    close(address_pipe[1]);
    close(control_pipe[0]);
    control_fd_ = control_pipe[1];
    char buffer[256];
    size_t got = 0;
    while (got == 0 || buffer[got - 1] != '\n') {
      ssize_t n = read(address_pipe[0], buffer + got, sizeof(buffer) - got);
      ASSERT_GT(n, 0) << "server died before listening";
      got += n;
    }
    close(address_pipe[0]);
    address_.assign(buffer, got - 1);

    TransportOptions options;
    options.backend = BackendKind::kVerbs;
    options.op_timeout_ms = ScaledMs(1000);
    options.connect_timeout_ms = ScaledMs(options.connect_timeout_ms);
    options.max_outstanding = 64;
    Status s = CreateVerbsTransport(options, &transport_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    local_ = MapRegion();
    ASSERT_TRUE(
        transport_->RegisterMemory(local_, kRegionSize, kRemoteAll, nullptr, &region_).ok());
    Connect(0);
  }

  void TearDown() override {
    conn_.reset();
    transport_.reset();
    if (control_fd_ >= 0) close(control_fd_);
    if (server_ > 0) {
      kill(server_, SIGCONT);
      int status = 0;
      waitpid(server_, &status, 0);
      if (!killed_) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
      }
    }
    if (local_ != nullptr) munmap(local_, kRegionSize);
  }

  void Connect(uint32_t core) {
    Blob mine{region_->key(), 0, core, 0};
    Status s = transport_->Connect(
        address_, core, std::string_view(reinterpret_cast<char*>(&mine), sizeof(mine)), &conn_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(conn_->peer_blob().size(), sizeof(Blob));
    std::memcpy(&peer_, conn_->peer_blob().data(), sizeof(peer_));
  }

  // Posts one signaled op and waits for its completion.
  Status Execute(Op op) {
    op.signaled = true;
    PDPM_RETURN_IF_ERROR(conn_->Post({&op, 1}));
    return WaitFor(op.id);
  }

  Status WaitFor(uint64_t id) {
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      Completion c[8];
      size_t n = conn_->PollCompletions(c);
      for (size_t i = 0; i < n; i++) {
        if (c[i].id == id) return c[i].status;
      }
    }
    return Status::Internal("test: no completion within 20 s");
  }

  Op Read(uint64_t local_offset, uint64_t remote_offset, uint32_t length) {
    Op op;
    op.opcode = Opcode::kRead;
    op.id = ++next_id_;
    op.local = {region_.get(), local_offset, length};
    op.remote_key = peer_.key;
    op.remote_offset = remote_offset;
    return op;
  }

  Op Write(uint64_t local_offset, uint64_t remote_offset, uint32_t length) {
    Op op = Read(local_offset, remote_offset, length);
    op.opcode = Opcode::kWrite;
    return op;
  }

  uint64_t RemoteWord(uint64_t offset) {
    EXPECT_OK(Execute(Read(kRegionSize - 8, offset, 8)));
    uint64_t value;
    std::memcpy(&value, local_ + kRegionSize - 8, 8);
    return value;
  }

  Incoming WaitIncoming() {
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      Incoming in;
      if (conn_->PollIncoming({&in, 1}) == 1) return in;
    }
    ADD_FAILURE() << "no incoming event within 20 s";
    return {};
  }

  pid_t server_ = -1;
  bool killed_ = false;
  int control_fd_ = -1;
  std::string address_;
  std::unique_ptr<Transport> transport_;
  char* local_ = nullptr;
  std::unique_ptr<MemoryRegion> region_;
  std::unique_ptr<Connection> conn_;
  Blob peer_{};
  uint64_t next_id_ = 0;
};

TEST_F(VerbsPair, WriteThenReadBackLargeAndInline) {
  for (size_t i = 0; i < 65536; i++) local_[i] = static_cast<char>(i * 7 + 3);
  ASSERT_OK(Execute(Write(0, 4096, 65536)));
  ASSERT_OK(Execute(Write(100, 200000, 16)));  // small: inline
  ASSERT_OK(Execute(Read(131072, 4096, 65536)));
  EXPECT_EQ(std::memcmp(local_, local_ + 131072, 65536), 0);
  ASSERT_OK(Execute(Read(300000, 200000, 16)));
  EXPECT_EQ(std::memcmp(local_ + 100, local_ + 300000, 16), 0);
  EXPECT_EQ(conn_->outstanding(), 0u);
  EXPECT_TRUE(conn_->healthy());
}

TEST_F(VerbsPair, RangesThatDoNotStartAPageAreAddressedFromTheirStart) {
  std::memcpy(local_ + 3, "unaligned range!", 16);  // unaligned local side too
  Op write = Write(3, 0, 16);
  write.remote_key = peer_.unaligned_key;
  ASSERT_OK(Execute(write));
  Op read = Read(1000, kUnalignedStart, 16);
  read.remote_key = peer_.read_only_key;
  ASSERT_OK(Execute(read));
  EXPECT_EQ(std::memcmp(local_ + 1000, "unaligned range!", 16), 0);
  // The range ends where it was registered.
  Op beyond = Write(3, 4096 - 8, 16);
  beyond.remote_key = peer_.unaligned_key;
  EXPECT_EQ(Execute(beyond).code(), StatusCode::kOutOfRange);
}

TEST_F(VerbsPair, AtomicsReturnTheOldValue) {
  uint64_t five = 5;
  std::memcpy(local_ + 64, &five, 8);
  ASSERT_OK(Execute(Write(64, 1024, 8)));
  Op cas;
  cas.opcode = Opcode::kCompareSwap;
  cas.id = 1;
  cas.local = {region_.get(), 128, 8};
  cas.remote_key = peer_.key;
  cas.remote_offset = 1024;
  cas.compare_or_add = 5;
  cas.swap = 9;
  ASSERT_OK(Execute(cas));
  uint64_t old;
  std::memcpy(&old, local_ + 128, 8);
  EXPECT_EQ(old, 5u);
  cas.id = 2;
  cas.swap = 11;  // expected 5 no longer holds
  ASSERT_OK(Execute(cas));
  std::memcpy(&old, local_ + 128, 8);
  EXPECT_EQ(old, 9u);
  Op add = cas;
  add.opcode = Opcode::kFetchAdd;
  add.id = 3;
  add.compare_or_add = 3;
  ASSERT_OK(Execute(add));
  std::memcpy(&old, local_ + 128, 8);
  EXPECT_EQ(old, 9u);
  EXPECT_EQ(RemoteWord(1024), 12u);
}

TEST_F(VerbsPair, PersistRunsThePeersPersistFnBeforeCompleting) {
  std::memset(local_, 0x5a, 100);
  Op op = Write(0, 8192, 100);
  op.persist = true;
  ASSERT_OK(Execute(op));
  EXPECT_EQ(RemoteWord(kPersistCount), 1u);
  EXPECT_EQ(RemoteWord(kPersistOffset), 8192u);
  EXPECT_EQ(RemoteWord(kPersistLength), 100u);
  // An unsignaled persisted write, then a signaled read: the read's
  // completion waits for the persist reply (the read itself may run at the
  // peer's NIC before the PersistFn), so a second read sees the count.
  op = Write(0, 16384, 64);
  op.persist = true;
  op.signaled = false;
  ASSERT_OK(conn_->Post({&op, 1}));
  RemoteWord(kPersistCount);
  EXPECT_EQ(RemoteWord(kPersistCount), 2u);
}

TEST_F(VerbsPair, PersistIsAnsweredByAPeerThatNeverPolls) {
  Connect(kUnpolledCore);
  ASSERT_EQ(peer_.core, kUnpolledCore);
  for (int i = 1; i <= 3; i++) {
    Op op = Write(0, 8192, 256);
    op.persist = true;
    op.id = 100 + i;
    ASSERT_OK(Execute(op));
    EXPECT_EQ(RemoteWord(kPersistCount), static_cast<uint64_t>(i));
  }
}

TEST_F(VerbsPair, WriteWithImmRaisesIncomingAtThePeer) {
  uint64_t token = 0x1122334455667788;
  std::memcpy(local_ + 32, &token, 8);
  Op op = Write(32, kEchoSource, 8);
  op.opcode = Opcode::kWriteWithImm;
  op.imm = 41;
  ASSERT_OK(Execute(op));
  // The server saw imm 41 and echoed its 8 bytes back with imm 42.
  Incoming in = WaitIncoming();
  EXPECT_EQ(in.imm, 42u);
  EXPECT_EQ(in.length, 8u);
  EXPECT_EQ(std::memcmp(local_ + kEchoTarget, &token, 8), 0);
  // Persisted: the event at the server follows the PersistFn.
  op.persist = true;
  op.imm = 100;
  op.id = 77;
  ASSERT_OK(Execute(op));
  in = WaitIncoming();
  EXPECT_EQ(in.imm, 101u);
  EXPECT_EQ(RemoteWord(kPersistCount), 1u);
}

TEST_F(VerbsPair, ReceiveRingsRefillThroughBursts) {
  // Waves of WRITE_WITH_IMMs, each echoed: together several times the
  // receive ring of either side (2 * max_outstanding + 64 = 576), so both
  // must keep re-posting what they consumed; nothing lost, nothing reordered.
  constexpr int kWave = 400, kWaves = 5;
  uint32_t next_imm = 0, expected_imm = 0;
  for (int wave = 0; wave < kWaves; wave++) {
    for (int sent = 0; sent < kWave;) {
      Op batch[25];
      for (Op& op : batch) {
        op = Write(0, kEchoSource, 8);
        op.opcode = Opcode::kWriteWithImm;
        op.imm = next_imm++ % kEchoBelow;
        op.signaled = false;
      }
      Status s = conn_->Post(batch);
      if (s.ok()) {
        sent += 25;
        continue;
      }
      next_imm -= 25;
      ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
      Completion c[16];
      conn_->PollCompletions(c);
    }
    for (int received = 0; received < kWave; received++) {
      Incoming in = WaitIncoming();
      ASSERT_EQ(in.imm, expected_imm++ % kEchoBelow + 1)
          << "echo " << received << " of wave " << wave;
    }
  }
  EXPECT_TRUE(conn_->healthy());
}

TEST_F(VerbsPair, SelectiveSignalingRecyclesTheSendQueue) {
  // Far more requests than the send queue holds; one in 100 signaled.
  constexpr int kOps = 3000;
  int completions = 0;
  for (int i = 0; i < kOps;) {
    Op batch[25];
    for (Op& op : batch) {
      op =
          Write(static_cast<uint64_t>(i % 64) * 64, 65536 + static_cast<uint64_t>(i % 64) * 64, 64);
      op.signaled = (i + 1) % 100 == 0;
      i++;
    }
    Status s;
    while (!(s = conn_->Post(batch)).ok()) {
      ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
      Completion c[16];
      completions += static_cast<int>(conn_->PollCompletions(c));
    }
  }
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (completions < kOps / 100 && Clock::now() < deadline) {
    Completion c[16];
    size_t n = conn_->PollCompletions(c);
    for (size_t i = 0; i < n; i++) ASSERT_TRUE(c[i].status.ok()) << c[i].status.ToString();
    completions += static_cast<int>(n);
  }
  EXPECT_EQ(completions, kOps / 100);
  EXPECT_EQ(conn_->outstanding(), 0u);
}

TEST_F(VerbsPair, TooManySignaledOpsAreRefusedWhole) {
  std::vector<Op> ops;
  ops.reserve(65);
  for (int i = 0; i < 65; i++) ops.push_back(Read(0, 0, 8));
  EXPECT_EQ(conn_->Post(ops).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(conn_->outstanding(), 0u);
  EXPECT_OK(Execute(Read(0, 0, 8)));
}

TEST_F(VerbsPair, MalformedOpsFailLocally) {
  Op outside = Read(kRegionSize - 4, 0, 8);
  EXPECT_EQ(conn_->Post({&outside, 1}).code(), StatusCode::kInvalidArgument);
  Op misaligned = Read(0, 4, 8);
  misaligned.opcode = Opcode::kFetchAdd;
  EXPECT_EQ(conn_->Post({&misaligned, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(conn_->healthy());
  std::unique_ptr<Connection> other;
  EXPECT_EQ(transport_->Connect(address_, 0, std::string(49, 'x'), &other).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(VerbsPair, WrongKeyBoundsAndRightsFailOnlyThatOp) {
  Op wrong_key = Read(0, 0, 64);
  wrong_key.remote_key = peer_.key ^ 0x5a5a00;
  EXPECT_EQ(Execute(wrong_key).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Execute(Read(0, kRegionSize - 8, 64)).code(), StatusCode::kOutOfRange);
  Op wrapping = Read(0, ~uint64_t{0} - 3, 8);
  EXPECT_EQ(Execute(wrapping).code(), StatusCode::kOutOfRange);
  Op no_right = Write(0, 0, 64);
  no_right.remote_key = peer_.read_only_key;
  EXPECT_EQ(Execute(no_right).code(), StatusCode::kPermissionDenied);
  Op allowed = Read(0, 0, 64);
  allowed.remote_key = peer_.read_only_key;
  EXPECT_OK(Execute(allowed));
  // A refused op in a batch completes in its place.
  Op batch[3] = {Read(0, 0, 8), wrong_key, Read(8, 8, 8)};
  for (Op& op : batch) op.signaled = true;
  batch[1].id = 999;
  ASSERT_OK(conn_->Post(batch));
  Completion c[3];
  size_t got = 0;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (got < 3 && Clock::now() < deadline) got += conn_->PollCompletions({c + got, 3 - got});
  ASSERT_EQ(got, 3u);
  EXPECT_EQ(c[0].id, batch[0].id);
  EXPECT_EQ(c[1].id, 999u);
  EXPECT_EQ(c[1].status.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c[2].id, batch[2].id);
  EXPECT_TRUE(conn_->healthy());
  // Reconnect replaces the queue pair; keys stay valid.
  ASSERT_OK(conn_->Reconnect());
  EXPECT_OK(Execute(Read(0, 0, 64)));
}

TEST_F(VerbsPair, CoreIsTakenModuloAndRefusalsCarryTheirStatus) {
  Connect(4);
  EXPECT_EQ(peer_.core, 4 % kServerCores);
  EXPECT_EQ(conn_->core(), 4u);
  std::unique_ptr<Connection> refused;
  Status s = transport_->Connect(address_, 0, "refuse", &refused);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("refused on request"), std::string_view::npos) << s.ToString();
}

TEST_F(VerbsPair, NotifyFdWakesASleepingCaller) {
  ASSERT_TRUE(conn_->ArmNotify().ok());
  Completion c[4];
  ASSERT_EQ(conn_->PollCompletions(c), 0u);
  Op op = Read(0, 0, 64);
  ASSERT_OK(conn_->Post({&op, 1}));
  pollfd pfd{conn_->notify_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 10000), 1);
  conn_->AckNotify();
  EXPECT_OK(WaitFor(op.id));
}

TEST_F(VerbsPair, HungPeerTimesOutAndDeadPeerFailsOps) {
  // A stopped server's NIC still places data but nobody answers persist.
  ASSERT_EQ(kill(server_, SIGSTOP), 0);
  // Reported once every thread of the server has stopped; until then a
  // thread running on another CPU may still answer.
  int status;
  ASSERT_EQ(waitpid(server_, &status, WUNTRACED), server_);
  ASSERT_TRUE(WIFSTOPPED(status));
  Op op = Write(0, 8192, 64);
  op.persist = true;
  auto start = Clock::now();
  EXPECT_EQ(Execute(op).code(), StatusCode::kTimeout);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(ScaledMs(5000)));
  EXPECT_FALSE(conn_->healthy());
  ASSERT_EQ(kill(server_, SIGCONT), 0);
  ASSERT_OK(conn_->Reconnect());
  EXPECT_OK(Execute(Read(0, 0, 64)));

  ASSERT_EQ(kill(server_, SIGKILL), 0);
  killed_ = true;
  ASSERT_EQ(waitpid(server_, &status, 0), server_);
  server_ = -1;
  start = Clock::now();
  Status s = conn_->Post({&op, 1});
  if (s.ok()) s = WaitFor(op.id);
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout)
      << s.ToString();
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(ScaledMs(5000)));
  EXPECT_FALSE(conn_->healthy());
}

}  // namespace
}  // namespace pdpm::net::verbs
