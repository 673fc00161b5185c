// EtcdClient and EtcdViewStore against a real etcd member started here.
#include "monitor/etcd/etcd_view_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/crc32c.h"
#include "monitor/etcd/etcd_test_cluster.h"

namespace pdpm::monitor {
namespace {

using std::chrono::milliseconds;

v1::ClusterView ViewWithEpoch(uint64_t epoch) {
  v1::ClusterView v;
  v.set_epoch(epoch);
  v.set_segment_size(64ULL << 20);
  v.set_cluster_uuid("c0ffee");
  v.add_servers()->set_address("127.0.0.1:" + std::to_string(7000 + epoch));
  return v;
}

class EtcdViewStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    etcd_ = new EtcdTestCluster();
    Status s = etcd_->Start(1);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(EtcdClient::Create(etcd_->endpoints(), milliseconds(3000), &client_).ok());
    // A prefix per test: the suite shares one etcd.
    keys_ = EtcdKeys::ForPrefix(
        "/pdpm-test/" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    lease_ = TakeLeadership();
  }

  // Grants a lease and attaches the leader key to it, as a winning
  // campaign does.
  int64_t TakeLeadership() {
    int64_t lease = 0, granted = 0;
    Status s = client_->LeaseGrant(30, &lease, &granted);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_GE(granted, 30);
    Put(keys_.leader, "me", lease);
    return lease;
  }

  // An unconditional put, as another writer of the key would do.
  void Put(const std::string& key, const std::string& value, int64_t lease = 0) {
    etcdserverpb::TxnRequest txn;
    etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value(value);
    put->set_lease(lease);
    etcdserverpb::TxnResponse resp;
    Status s = client_->Txn(txn, &resp);
    ASSERT_TRUE(s.ok() && resp.succeeded()) << s.ToString();
  }

  std::string Stored() {
    etcdserverpb::KeyValue kv;
    bool found = false;
    EXPECT_TRUE(client_->Get(keys_.view, &kv, &found).ok());
    return found ? kv.value() : "";
  }

  static EtcdTestCluster* etcd_;
  std::unique_ptr<EtcdClient> client_;
  EtcdKeys keys_;
  int64_t lease_ = 0;
};

EtcdTestCluster* EtcdViewStoreTest::etcd_ = nullptr;

TEST_F(EtcdViewStoreTest, EmptyThenPutThenLoad) {
  EtcdViewStore store(client_.get(), keys_, lease_);
  v1::ClusterView view;
  uint64_t rev = 99;
  Status s = store.Load(&view, &rev);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_EQ(rev, 0u);

  uint64_t r1 = 0, r2 = 0;
  ASSERT_TRUE(store.CompareAndPut(0, ViewWithEpoch(1), &r1).ok());
  EXPECT_GT(r1, 0u);
  ASSERT_TRUE(store.CompareAndPut(r1, ViewWithEpoch(2), &r2).ok());
  EXPECT_GT(r2, r1);

  // The revision is the key's mod_revision, as a fresh store sees it.
  EtcdViewStore again(client_.get(), keys_, lease_);
  ASSERT_TRUE(again.Load(&view, &rev).ok());
  EXPECT_EQ(rev, r2);
  EXPECT_EQ(view.epoch(), 2u);
  EXPECT_EQ(view.servers(0).address(), "127.0.0.1:7002");
  EXPECT_FALSE(store.broken());
  EXPECT_NE(store.Describe().find(keys_.view), std::string::npos);
}

TEST_F(EtcdViewStoreTest, StaleRevisionIsAbortedAndChangesNothing) {
  EtcdViewStore store(client_.get(), keys_, lease_);
  uint64_t r1 = 0, r2 = 0, r = 0;
  ASSERT_TRUE(store.CompareAndPut(0, ViewWithEpoch(1), &r1).ok());
  ASSERT_TRUE(store.CompareAndPut(r1, ViewWithEpoch(2), &r2).ok());
  std::string before = Stored();

  Status s = store.CompareAndPut(r1, ViewWithEpoch(3), &r);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_TRUE(store.broken());
  // "Nothing stored yet" when something is: also a lost race.
  EtcdViewStore other(client_.get(), keys_, lease_);
  s = other.CompareAndPut(0, ViewWithEpoch(4), &r);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_EQ(Stored(), before);
}

TEST_F(EtcdViewStoreTest, ConcurrentWritersExactlyOneWins) {
  EtcdViewStore seed(client_.get(), keys_, lease_);
  uint64_t base = 0;
  ASSERT_TRUE(seed.CompareAndPut(0, ViewWithEpoch(1), &base).ok());
  constexpr int kWriters = 4;
  std::atomic<int> wins{0}, aborted{0};
  std::vector<std::thread> threads;
  threads.reserve(kWriters);
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      EtcdViewStore store(client_.get(), keys_, lease_);
      uint64_t r = 0;
      Status s = store.CompareAndPut(base, ViewWithEpoch(10 + static_cast<uint64_t>(i)), &r);
      if (s.ok()) ++wins;
      if (s.code() == StatusCode::kAborted) ++aborted;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins.load(), 1);
  EXPECT_EQ(aborted.load(), kWriters - 1);
}

TEST_F(EtcdViewStoreTest, RepeatOfALandedPutSucceeds) {
  // What the client's retry of a timed-out transaction meets: the compare
  // fails, but the stored value is exactly the one being put.
  EtcdViewStore first(client_.get(), keys_, lease_);
  uint64_t r1 = 0, r2 = 0, again = 0;
  ASSERT_TRUE(first.CompareAndPut(0, ViewWithEpoch(1), &r1).ok());
  ASSERT_TRUE(first.CompareAndPut(r1, ViewWithEpoch(2), &r2).ok());
  EtcdViewStore repeat(client_.get(), keys_, lease_);
  Status s = repeat.CompareAndPut(r1, ViewWithEpoch(2), &again);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(again, r2);
  EXPECT_FALSE(repeat.broken());
}

TEST_F(EtcdViewStoreTest, DeposedLeaderCannotWrite) {
  EtcdViewStore store(client_.get(), keys_, lease_);
  uint64_t r1 = 0, r = 0;
  ASSERT_TRUE(store.CompareAndPut(0, ViewWithEpoch(1), &r1).ok());
  std::string before = Stored();

  // The lease ends (as when it expires): the leader key goes with it.
  ASSERT_TRUE(client_->LeaseRevoke(lease_).ok());
  Status s = store.CompareAndPut(r1, ViewWithEpoch(2), &r);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.ToString().find("no longer holds"), std::string::npos) << s.ToString();
  EXPECT_TRUE(store.broken());

  // Another monitor won meanwhile: the old lease still cannot write, the
  // new one can.
  int64_t next = TakeLeadership();
  s = store.CompareAndPut(r1, ViewWithEpoch(2), &r);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_EQ(Stored(), before);
  EtcdViewStore successor(client_.get(), keys_, next);
  ASSERT_TRUE(successor.CompareAndPut(r1, ViewWithEpoch(2), &r).ok());
  // Revoking a lease that is gone is not an error.
  EXPECT_TRUE(client_->LeaseRevoke(lease_).ok());
}

TEST_F(EtcdViewStoreTest, CorruptValuesAreReportedNeverOverwritten) {
  EtcdViewStore store(client_.get(), keys_, lease_);
  std::string good = EtcdViewStore::Encode(ViewWithEpoch(5));
  std::string bad_crc = good;
  bad_crc.back() ^= 0x40;
  std::string bad_version = good;
  bad_version[8] = 9;
  std::string bad_payload = good.substr(0, EtcdViewStore::kHeaderSize) + "\xff\xff\xff";
  // A payload that is not a ClusterView, with a correct checksum.
  std::string garbage = "\x0a\xff\xff\xff\xff\x0f";
  std::string not_view = EtcdViewStore::Encode(v1::ClusterView()).substr(0, 12);
  {
    uint32_t crc = Crc32c(garbage);
    for (int i = 0; i < 4; ++i) not_view.push_back(static_cast<char>(crc >> (8 * i)));
    not_view += garbage;
  }
  struct Case {
    std::string value;
    std::string expect;
  } cases[] = {{"short", "shorter than"},          {"XXXXXXXXXXXXXXXXXXXXXXXX", "bad magic"},
               {bad_version, "format version 9"},  {bad_crc, "checksum mismatch"},
               {bad_payload, "checksum mismatch"}, {not_view, "not a valid ClusterView"}};
  for (const Case& c : cases) {
    Put(keys_.view, c.value);
    v1::ClusterView view;
    uint64_t rev = 0;
    Status s = store.Load(&view, &rev);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << c.expect;
    EXPECT_NE(s.ToString().find(c.expect), std::string::npos) << s.ToString();
    EXPECT_NE(s.ToString().find(keys_.view), std::string::npos) << s.ToString();
    // A put on top of it only with the right revision, which Load never
    // handed out: the corrupt value stays for the operator.
    uint64_t r = 0;
    EXPECT_EQ(store.CompareAndPut(0, ViewWithEpoch(6), &r).code(), StatusCode::kAborted);
    EXPECT_EQ(Stored(), c.value);
  }
}

TEST(EtcdClientTest, BadEndpointListsAreRefused) {
  std::unique_ptr<EtcdClient> c;
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:2379,", ":2379", "http://h:1/path"}) {
    Status s = EtcdClient::Create(bad, milliseconds(1000), &c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  ASSERT_TRUE(
      EtcdClient::Create("http://127.0.0.1:2379,localhost:2380", milliseconds(1000), &c).ok());
  EXPECT_EQ(c->endpoints(), "http://127.0.0.1:2379,localhost:2380");
}

TEST_F(EtcdViewStoreTest, DeadMembersInTheListAreSkipped) {
  uint32_t dead = 0;
  ASSERT_TRUE(FreeLoopbackPort(&dead).ok());
  std::unique_ptr<EtcdClient> c;
  ASSERT_TRUE(EtcdClient::Create("127.0.0.1:" + std::to_string(dead) + "," + etcd_->endpoints(),
                                 milliseconds(3000), &c)
                  .ok());
  etcdserverpb::KeyValue kv;
  bool found = true;
  Status s = c->Get(keys_.view, &kv, &found);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(found);

  // Only dead members: kUnavailable (or kTimeout) naming the endpoints.
  ASSERT_TRUE(EtcdClient::Create("127.0.0.1:" + std::to_string(dead), milliseconds(500), &c).ok());
  s = c->Get(keys_.view, &kv, &found);
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout)
      << s.ToString();
  EXPECT_NE(s.ToString().find(std::to_string(dead)), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace pdpm::monitor
