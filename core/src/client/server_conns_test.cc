// ServerConns against a real RPC server in this process: which connection
// a thread gets, and that a busy connection does not hold up another thread.
#include "client/server_conns.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <span>
#include <string>
#include <vector>

namespace pdpm::client {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kEcho = 1;
constexpr uint32_t kStagingSize = 4096;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

class ServerConnsTest : public ::testing::Test {
 protected:
  // An echo server with `cores` cores (one thread each) on loopback.
  void StartServer(uint32_t cores) {
    net::TransportOptions to;
    to.cores = cores;
    ASSERT_TRUE(net::Transport::Create(to, &server_transport_).ok());
    net::RpcOptions ro;
    ro.server_threads = cores;
    ASSERT_TRUE(net::RpcServer::Create(server_transport_.get(), ro, &server_).ok());
    server_->Register(kEcho, [](std::span<const uint8_t> request, std::string* reply) {
      reply->assign(reinterpret_cast<const char*>(request.data()), request.size());
      return Status::OK();
    });
    Status s = server_->Listen("127.0.0.1:0");
    ASSERT_TRUE(s.ok()) << s.ToString();
    address_ = server_transport_->listen_address();
    ASSERT_TRUE(net::Transport::Create({}, &transport_).ok());
  }

  // What a thread of the client does: takes a connection (preferring
  // `preferred`) and makes one call on it.
  struct Outcome {
    Status status;
    ServerConns::Conn* conn = nullptr;
    std::string reply;
  };
  Outcome CallOn(ServerConns* conns, size_t preferred, const std::string& request) {
    Outcome o;
    std::unique_lock<std::mutex> lock;
    o.status = conns->Acquire(transport_.get(), rpc_options_, preferred, &o.conn, &lock);
    if (o.status.ok()) o.status = o.conn->rpc->Call(kEcho, Bytes(request), &o.reply);
    return o;
  }

  // Takes a connection (preferring the first) and keeps it locked in `*lock`.
  ServerConns::Conn* Hold(ServerConns* conns, std::unique_lock<std::mutex>* lock) {
    ServerConns::Conn* c = nullptr;
    Status s = conns->Acquire(transport_.get(), rpc_options_, 0, &c, lock);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok() ? c : nullptr;
  }

  std::unique_ptr<net::Transport> server_transport_;
  std::unique_ptr<net::RpcServer> server_;  // destroyed before its transport
  std::unique_ptr<net::Transport> transport_;
  std::string address_;
  net::RpcOptions rpc_options_;
};

// The gateway's case: two threads call the same one-core server at once.
// One has a call in flight (started, not finished) on its connection; the
// other, preferring that same connection, takes the second one and
// completes a whole call meanwhile.
TEST_F(ServerConnsTest, SecondThreadTakesAFreeConnectionToAOneCoreServer) {
  StartServer(1);
  ServerConns conns(address_, /*cores=*/1, /*connections=*/2, kStagingSize);
  ASSERT_EQ(conns.size(), 2u);
  std::unique_lock<std::mutex> held_lock;
  ServerConns::Conn* held = Hold(&conns, &held_lock);
  ASSERT_NE(held, nullptr);
  ASSERT_TRUE(held->rpc->Start(kEcho, Bytes("first")).ok());

  auto other = std::async(std::launch::async, [&] { return CallOn(&conns, 0, "second"); });
  const bool completed = other.wait_for(10s) == std::future_status::ready;
  std::string first;
  Status s = held->rpc->Finish(&first);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(first, "first");
  held_lock.unlock();  // lets a waiting second thread go, so that get() returns
  EXPECT_TRUE(completed) << "the second thread waited for the busy connection";
  Outcome o = other.get();
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.reply, "second");
  EXPECT_NE(o.conn, held);
  EXPECT_EQ(o.conn->core, 0u);
  EXPECT_EQ(held->core, 0u);
}

// With every connection busy a thread waits for its preferred one, and
// gets it once it is free.
TEST_F(ServerConnsTest, AllBusyWaitsForThePreferredConnection) {
  StartServer(1);
  ServerConns conns(address_, /*cores=*/1, /*connections=*/1, kStagingSize);
  std::unique_lock<std::mutex> held_lock;
  ServerConns::Conn* held = Hold(&conns, &held_lock);
  ASSERT_NE(held, nullptr);
  auto other = std::async(std::launch::async, [&] { return CallOn(&conns, 0, "waited"); });
  EXPECT_EQ(other.wait_for(100ms), std::future_status::timeout);
  held_lock.unlock();
  Outcome o = other.get();
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.reply, "waited");
  EXPECT_EQ(o.conn, held);
}

// At least one connection per core; connection i is bound to core i % cores,
// and a thread holding some takes the next free ones in order.
TEST_F(ServerConnsTest, ConnectionsAreBoundToCoresInTurn) {
  StartServer(3);
  EXPECT_EQ(ServerConns(address_, 3, 1, kStagingSize).size(), 3u);
  EXPECT_EQ(ServerConns(address_, 0, 0, kStagingSize).size(), 1u);
  ServerConns conns(address_, /*cores=*/3, /*connections=*/5, kStagingSize);
  ASSERT_EQ(conns.size(), 5u);
  std::vector<std::unique_lock<std::mutex>> locks(5);
  std::vector<uint32_t> cores;
  for (auto& lock : locks) {
    ServerConns::Conn* c = nullptr;
    Status s = conns.Acquire(transport_.get(), rpc_options_, 3, &c, &lock);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::string reply;
    ASSERT_TRUE(c->rpc->Call(kEcho, Bytes("x"), &reply).ok());
    EXPECT_EQ(c->rpc->connection().core(), c->core);
    cores.push_back(c->core);
  }
  EXPECT_EQ(cores, (std::vector<uint32_t>{0, 1, 0, 1, 2}));  // from connection 3 on
}

// A server that cannot be reached: kUnavailable naming its address, and
// the connection stays unconnected (the next use tries again).
TEST_F(ServerConnsTest, UnreachableServerIsUnavailableNamingIt) {
  StartServer(1);
  server_.reset();
  server_transport_.reset();
  ServerConns conns(address_, 1, 1, kStagingSize);
  Outcome o = CallOn(&conns, 0, "x");
  EXPECT_EQ(o.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(o.status.message().find(address_), std::string::npos) << o.status.ToString();
  EXPECT_EQ(o.conn->rpc, nullptr);
}

}  // namespace
}  // namespace pdpm::client
