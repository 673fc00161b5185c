// RPC against a server in another process (net_test_peer rpc-serve).
#include "net/rpc.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>

#include "net/test_peer.h"

namespace pdpm::net {
namespace {

using namespace testing;
using Clock = std::chrono::steady_clock;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string U32(uint32_t v) {
  return std::string(reinterpret_cast<char*>(&v), 4);
}

class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Transport::Create(TestOptions(), &transport_).ok());
    ASSERT_TRUE(server_.Start({"rpc-serve", TestHost() + ":0"}, true).ok());
  }
  std::unique_ptr<RpcClient> Connect(uint32_t core = 0) {
    std::unique_ptr<RpcClient> c;
    RpcOptions o;
    o.timeout_ms = ScaledMs(o.timeout_ms);
    Status s = RpcClient::Connect(transport_.get(), server_.address(), core, o, &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }
  std::unique_ptr<Transport> transport_;
  PeerProcess server_;
};

TEST_F(RpcTest, InlineCallsRoundTrip) {
  auto c = Connect();
  ASSERT_TRUE(c);
  for (int i = 0; i < 200; i++) {
    std::string req = "hello " + std::to_string(i);
    std::string reply;
    ASSERT_TRUE(c->Call(kEcho, Bytes(req), &reply).ok());
    EXPECT_EQ(reply, req);
  }
  std::string empty;
  ASSERT_TRUE(c->Call(kEcho, {}, &empty).ok());
  EXPECT_TRUE(empty.empty());
}

TEST_F(RpcTest, LargePayloadsTravelOneSided) {
  auto c = Connect();
  ASSERT_TRUE(c);
  std::string big(700000, '\0');
  uint64_t sum = 0;
  for (size_t i = 0; i < big.size(); i++) {
    big[i] = static_cast<char>(i * 31);
    sum += static_cast<uint8_t>(big[i]);
  }
  std::string reply;
  ASSERT_TRUE(c->Call(kSum, Bytes(big), &reply).ok());
  ASSERT_EQ(reply.size(), 8u);
  uint64_t got;
  std::memcpy(&got, reply.data(), 8);
  EXPECT_EQ(got, sum);
  ASSERT_TRUE(c->Call(kEcho, Bytes(big), &reply).ok());
  EXPECT_EQ(reply, big);
  for (uint32_t n : {4000u, 5000u, 1u << 20}) {
    ASSERT_TRUE(c->Call(kMakeBytes, Bytes(U32(n)), &reply).ok()) << n;
    ASSERT_EQ(reply.size(), n);
    for (uint32_t i = 0; i < n; i += 997) ASSERT_EQ(reply[i], static_cast<char>(i * 13));
  }
  Status s = c->Call(kEcho, Bytes(std::string((1 << 20) + 1, 'x')), &reply);
  EXPECT_EQ(s.code(), StatusCode::kTooLarge);
}

TEST_F(RpcTest, ErrorsCarryTheirStatus) {
  auto c = Connect();
  ASSERT_TRUE(c);
  std::string reply;
  Status s = c->Call(kFail, {}, &reply);
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_NE(s.message().find("asked to fail"), std::string_view::npos);
  s = c->Call(999, {}, &reply);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  ASSERT_TRUE(c->Call(kEcho, Bytes("still fine"), &reply).ok());
}

// A server may answer with the codes a transport failure has (kUnavailable,
// kTimeout): replied() tells its answer from a broken connection, so a
// caller keeps a connection the server answered on.
TEST_F(RpcTest, AServersAnswerIsToldFromATransportFailure) {
  auto c = Connect();
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->replied());
  std::string reply;
  for (StatusCode code : {StatusCode::kUnavailable, StatusCode::kTimeout}) {
    uint16_t raw = static_cast<uint16_t>(code);
    Status s = c->Call(kFail, Bytes(std::string(reinterpret_cast<char*>(&raw), 2)), &reply);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_TRUE(c->replied());
    EXPECT_TRUE(c->connection().healthy());
  }
  ASSERT_TRUE(c->Call(kEcho, Bytes("x"), &reply).ok());
  EXPECT_TRUE(c->replied());
  server_.Signal(SIGKILL);
  server_.Wait();
  Status s = c->Call(kEcho, Bytes("y"), &reply, ScaledMs(10000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_FALSE(c->replied());
}

TEST_F(RpcTest, DeadlinePassesThenLateReplyIsIgnored) {
  auto c = Connect();
  ASSERT_TRUE(c);
  std::string reply;
  Status s = c->Call(kSleepMs, Bytes(U32(600)), &reply, 100);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  EXPECT_FALSE(c->replied());
  // The next calls use other slots and get their own replies.
  for (int i = 0; i < 20; i++) {
    std::string req = "after " + std::to_string(i);
    ASSERT_TRUE(c->Call(kEcho, Bytes(req), &reply).ok());
    EXPECT_EQ(reply, req);
  }
}

TEST_F(RpcTest, ManyClientsOnFewServerThreads) {
  std::vector<std::unique_ptr<RpcClient>> clients;
  for (uint32_t i = 0; i < 12; i++) {
    clients.push_back(Connect(i));
    ASSERT_TRUE(clients.back());
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t i = 0; i < clients.size(); i++) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; k++) {
        std::string req = std::to_string(i) + "/" + std::to_string(k), reply;
        if (!clients[i]->Call(kEcho, Bytes(req), &reply).ok() || reply != req) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(RpcTest, DeadServerFailsCallsInTime) {
  auto c = Connect();
  ASSERT_TRUE(c);
  std::string reply;
  ASSERT_TRUE(c->Call(kEcho, Bytes("x"), &reply).ok());
  server_.Signal(SIGKILL);
  server_.Wait();
  auto start = Clock::now();
  Status s = c->Call(kEcho, Bytes("y"), &reply, 10000);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(ScaledMs(8000)));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  s = c->Call(kEcho, Bytes("z"), &reply);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  std::unique_ptr<RpcClient> none;
  EXPECT_FALSE(
      RpcClient::Connect(transport_.get(), server_.address(), 0, RpcOptions(), &none).ok());
}

TEST_F(RpcTest, StartedCallsOnTwoServersOverlap) {
  PeerProcess other;
  ASSERT_TRUE(other.Start({"rpc-serve", TestHost() + ":0"}, true).ok());
  auto a = Connect();
  ASSERT_TRUE(a);
  std::unique_ptr<RpcClient> b;
  RpcOptions o;
  o.timeout_ms = ScaledMs(o.timeout_ms);
  ASSERT_TRUE(RpcClient::Connect(transport_.get(), other.address(), 0, o, &b).ok());
  std::string reply;
  EXPECT_EQ(a->Finish(&reply).code(), StatusCode::kFailedPrecondition);
  // Both servers sleep at once: b's call starts while a's is still in
  // flight, so their sleeps overlap (each server reports when it slept, on
  // the machine's steady clock).
  const uint32_t sleep_ms = 1000;
  ASSERT_TRUE(a->Start(kSleepMs, Bytes(U32(sleep_ms)), 10000).ok());
  EXPECT_EQ(a->Start(kEcho, Bytes("second")).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(b->Start(kSleepMs, Bytes(U32(sleep_ms)), 10000).ok());
  uint64_t slept_a[2], slept_b[2];
  ASSERT_TRUE(a->Finish(&reply).ok());
  ASSERT_EQ(reply.size(), sizeof(slept_a));
  std::memcpy(slept_a, reply.data(), sizeof(slept_a));
  ASSERT_TRUE(b->Finish(&reply).ok());
  ASSERT_EQ(reply.size(), sizeof(slept_b));
  std::memcpy(slept_b, reply.data(), sizeof(slept_b));
  EXPECT_LT(slept_b[0], slept_a[1]) << "b's call began only after a's ended";
  EXPECT_LT(slept_a[0], slept_b[1]);
  // Each client goes on with its own replies.
  ASSERT_TRUE(a->Call(kEcho, Bytes("to a"), &reply).ok());
  EXPECT_EQ(reply, "to a");
  ASSERT_TRUE(b->Start(kEcho, Bytes("to b")).ok());
  ASSERT_TRUE(b->Finish(&reply).ok());
  EXPECT_EQ(reply, "to b");
}

TEST_F(RpcTest, HungServerTimesOut) {
  auto c = Connect();
  ASSERT_TRUE(c);
  server_.Freeze();
  std::string reply;
  auto start = Clock::now();
  Status s = c->Call(kEcho, Bytes("y"), &reply, 500);
  server_.Signal(SIGCONT);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(ScaledMs(5000)));
}

}  // namespace
}  // namespace pdpm::net
