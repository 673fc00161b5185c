// The tcp backend's hand-off between a thread that polls a connection and
// then sleeps on its notify fd, and the transport's own threads. Both ends
// live in this process (one transport listening and connecting to itself),
// so the test controls exactly when each side polls.
#include "net/tcp/tcp_transport.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "net/tcp/region_table.h"
#include "net/transport.h"

namespace pdpm::net::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// A transport whose progress threads tick far less often than the test's
// deadline: anything that only the tick would deliver shows as a failure,
// not as a slow pass.
class SleepingPollerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions options;
    options.progress_tick_ms = 600'000;
    options.op_timeout_ms = 600'000;
    ASSERT_TRUE(CreateTcpTransport(options, &transport_).ok());
    AcceptHandler accept;
    accept.on_request = [](uint32_t, std::span<const uint8_t>, std::string*) {
      return Status::OK();
    };
    accept.on_connected = [this](std::unique_ptr<Connection> conn) {
      std::lock_guard lock(mu_);
      accepted_ = std::move(conn);
      cv_.notify_all();
    };
    ASSERT_TRUE(transport_->Listen("127.0.0.1:0", std::move(accept)).ok());
    ASSERT_TRUE(transport_->Connect(transport_->listen_address(), 0, "", &dialed_).ok());
    std::unique_lock lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(10), [&] { return accepted_ != nullptr; }));
  }

  std::unique_ptr<Transport> transport_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Connection> accepted_;  // guarded by mu_ until SetUp returns
  std::unique_ptr<Connection> dialed_;
};

// The shape of an RPC with a bulk request: the client (dialed_) sleeps
// awaiting its reply while the server (accepted_) READs the request's data
// from the client's buffer. The client's last poll before sleeping takes
// the READ; its answer must leave then, not on the transport's next tick.
TEST_F(SleepingPollerTest, ReadAnsweredByAnArmedPollerLeavesAtOnce) {
  std::vector<char> source(4096);
  for (size_t i = 0; i < source.size(); i++) source[i] = static_cast<char>(i * 7 + 1);
  std::unique_ptr<MemoryRegion> source_region;
  ASSERT_TRUE(
      transport_->RegisterMemory(source.data(), source.size(), kRemoteRead, {}, &source_region)
          .ok());
  std::vector<char> dest(source.size(), 0);
  std::unique_ptr<MemoryRegion> dest_region;
  ASSERT_TRUE(transport_->RegisterMemory(dest.data(), dest.size(), 0, {}, &dest_region).ok());

  // The client arms and polls once more: it is now asleep.
  Incoming in[4];
  ASSERT_TRUE(dialed_->ArmNotify().ok());
  EXPECT_EQ(dialed_->PollIncoming(in), 0u);

  Op read;
  read.opcode = Opcode::kRead;
  read.id = 1;
  read.local = {dest_region.get(), 0, static_cast<uint32_t>(dest.size())};
  read.remote_key = source_region->key();
  read.remote_offset = 0;
  read.signaled = true;
  ASSERT_TRUE(accepted_->Post({&read, 1}).ok());

  // The READ's arrival wakes the client, which arms, polls once more (that
  // poll answers the READ) and goes back to sleep. A client that slept over
  // 100 ms (a loaded host) is no longer attended: the progress thread took
  // its socket back and answers the READ itself, without waking it.
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  Completion c[4];
  size_t n = 0;
  while (n == 0 && Clock::now() < deadline) {
    pollfd p{dialed_->notify_fd(), POLLIN, 0};
    if (::poll(&p, 1, 1) == 1) {
      dialed_->AckNotify();
      ASSERT_TRUE(dialed_->ArmNotify().ok());
      EXPECT_EQ(dialed_->PollIncoming(in), 0u);
    }
    n = accepted_->PollCompletions(c);
  }
  ASSERT_EQ(n, 1u) << "the READ's answer waited for the transport's tick";
  EXPECT_TRUE(c[0].status.ok()) << c[0].status.ToString();
  EXPECT_EQ(dest, source);
}

// A range registered with kAccessGated is reachable only while the gate
// allows it (a server past its lease); other ranges always.
TEST(RegionTableTest, GatedRangesFollowTheGate) {
  std::atomic<bool> open{true};
  RegionTable table([&] { return open.load(); });
  std::vector<char> mem(4096);
  auto gated = table.Add(mem.data(), mem.size(), kRemoteAll | kAccessGated, {});
  auto plain = table.Add(mem.data(), mem.size(), kRemoteAll, {});
  std::shared_ptr<RegionEntry> e;
  EXPECT_TRUE(table.Resolve(gated->key, 0, 64, kRemoteRead, &e).ok());
  open = false;
  EXPECT_EQ(table.Resolve(gated->key, 0, 64, kRemoteRead, &e).code(), StatusCode::kUnavailable);
  EXPECT_EQ(table.Allowed(*gated).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(table.Resolve(plain->key, 0, 64, kRemoteWrite, &e).ok());
  uint64_t old = 0;
  EXPECT_EQ(ExecuteAtomic(table, false, gated->key, 0, 1, 0, &old).code(),
            StatusCode::kUnavailable);
  open = true;
  EXPECT_TRUE(table.Allowed(*gated).ok());
}

TEST(TcpTransportOptionsTest, ZeroProgressTickIsRefused) {
  TransportOptions options;
  options.progress_tick_ms = 0;
  std::unique_ptr<Transport> transport;
  EXPECT_EQ(CreateTcpTransport(options, &transport).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdpm::net::tcp
