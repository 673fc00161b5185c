// The distributed pDKVS against a real cluster: a pdpm-monitor and three
// pdpm-server processes (client/cluster_harness.h), two copies of every
// segment.
#include "pdkvs/cluster/cluster_kv_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "client/cluster_harness.h"
#include "client/cluster_pm_check.h"
#include "common/crc32c.h"
#include "monitor/monitor_client.h"
#include "monitor/placement.h"
#include "pdkvs/gateway/commands.h"
#include "pdkvs/item.h"
#include "pdkvs/vnode_ops.h"
#include "server/fsck.h"
#include "server/kv_protocol.h"

namespace pdpm::pdkvs {
namespace {

#define ASSERT_OK(expr)                              \
  do {                                               \
    const Status& status_ = (expr);                  \
    ASSERT_TRUE(status_.ok()) << status_.ToString(); \
  } while (0)

using client::LocalCluster;
using client::LocalClusterOptions;

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// A value that carries its own checksum: "<crc32c of body>:<body>".
std::string Checked(const std::string& body) {
  return std::to_string(Crc32c(body)) + ":" + body;
}

bool ChecksumOk(const std::string& v) {
  const size_t colon = v.find(':');
  return colon != std::string::npos &&
         v.substr(0, colon) == std::to_string(Crc32c(v.substr(colon + 1)));
}

LocalClusterOptions KvClusterOptions() {
  LocalClusterOptions o;
  o.replicas = 2;
  // Four segments a server, what the hardware guest's devdax namespaces
  // hold (docs/hw.md): a table's copy each, the transaction log, and room
  // for re-replication after a server dies.
  o.segment_size = 64ull << 20;
  o.pm_size = (4 * 64 + 2) * (1ull << 20);
  // Quick failover, yet no false one on a loaded machine.
  o.heartbeat_ms = 100;
  o.suspect_ms = 1000;
  o.down_ms = 2000;
  return o;
}

class KvClusterTest : public ::testing::Test {
 protected:
  KvClusterTest() : cluster_(KvClusterOptions()) {}
  explicit KvClusterTest(const LocalClusterOptions& options) : cluster_(options) {}

  void SetUp() override {
    Status s = cluster_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = OpenStore(&kv_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  Status OpenStore(std::unique_ptr<ClusterKvStore>* out) {
    return ClusterKvStore::Open(
        client::TestClientOptions(cluster_.monitor_address(), cluster_.secret()), out);
  }

  // Drains server `id` and waits (bounded) until it holds nothing.
  void Drain(uint32_t id) {
    monitor::MonitorClient mc(cluster_.monitor_address(), {cluster_.secret()});
    v1::DrainServerRequest req;
    req.set_server_id(id);
    v1::DrainServerResponse resp;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    do {
      ASSERT_OK(mc.DrainServer(req, &resp));
      if (resp.state() == v1::SERVER_STATE_DRAINED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < deadline);
    ASSERT_EQ(resp.state(), v1::SERVER_STATE_DRAINED) << resp.message();
  }

  v1::GetMappingResponse Mapping() {
    monitor::MonitorClient mc(cluster_.monitor_address(), {cluster_.secret()});
    v1::GetMappingResponse m;
    Status s = mc.GetMapping(0, &m);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return m;
  }

  // Waits (bounded) until every segment has an in-sync backup, none on a
  // server of `gone`.
  void WaitReplicated(const std::set<uint32_t>& gone = {}) {
    v1::GetMappingResponse m;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(50);
    while (std::chrono::steady_clock::now() < deadline) {
      m = Mapping();
      bool done = true;
      for (const auto& seg : m.segments()) {
        done &= gone.count(seg.primary().server_id()) == 0 && seg.backups_size() == 1;
        for (const auto& b : seg.backups()) {
          done &= gone.count(b.server_id()) == 0 && b.state() == v1::REPLICA_STATE_IN_SYNC;
        }
      }
      if (done) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "not replicated:\n" << m.DebugString();
  }

  uint32_t IdOf(int i) {
    const v1::GetMappingResponse m = Mapping();
    for (const auto& s : m.servers()) {
      if (s.address() == cluster_.server_address(i)) return s.id();
    }
    ADD_FAILURE() << "server " << i << " is not a member";
    return 0;
  }

  // Every key of `want` reads back its value.
  void ExpectAll(KvStore* kv, const std::map<std::string, std::string>& want) {
    std::vector<std::string_view> keys;
    keys.reserve(want.size());
    for (const auto& [k, v] : want) keys.push_back(k);
    std::vector<std::optional<std::string>> got;
    Status s = kv->MultiGet(keys, &got);
    ASSERT_TRUE(s.ok()) << s.ToString();
    size_t i = 0;
    for (const auto& [k, v] : want) {
      ASSERT_TRUE(got[i].has_value()) << k;
      EXPECT_EQ(*got[i], v) << k;
      ++i;
    }
  }

  // `per_table` keys "<prefix><n>" in each table (vnode) of the cluster.
  std::vector<std::string> KeysOnEveryVnode(const std::string& prefix, int per_table) {
    const uint32_t tables = kv_->client()->table_count();
    std::map<uint32_t, int> have;
    std::vector<std::string> keys;
    for (int n = 0; keys.size() < size_t{tables} * per_table; n++) {
      std::string key = prefix + std::to_string(n);
      uint32_t t = monitor::TableForKey(HashKey(key), tables);
      if (have[t]++ < per_table) keys.push_back(key);
    }
    return keys;
  }

  // Sets every key of `keys` to `value`; kOk or the store's error.
  static Status PutAll(KvStore* kv, const std::vector<std::string>& keys, const std::string& value,
                       bool if_none_exist, bool* applied) {
    std::vector<std::pair<std::string_view, std::string_view>> pairs;
    pairs.reserve(keys.size());
    for (const auto& k : keys) pairs.emplace_back(k, value);
    return kv->MultiPut(pairs, if_none_exist, applied);
  }

  // The values of `keys` (absent: "").
  static Status GetAll(KvStore* kv, const std::vector<std::string>& keys,
                       std::vector<std::string>* values) {
    std::vector<std::string_view> names(keys.begin(), keys.end());
    std::vector<std::optional<std::string>> got;
    PDPM_RETURN_IF_ERROR(kv->MultiGet(names, &got));
    values->clear();
    for (const auto& v : got) values->push_back(v.value_or(""));
    return Status::OK();
  }

  LocalCluster cluster_;
  std::unique_ptr<ClusterKvStore> kv_;
};

// Lets `threads` run until `a` and `b` both reach `n` (at most 60 s), then
// sets `stop`, joins them and expects both counts reached.
void RunUntilBoth(const std::atomic<int>& a, const std::atomic<int>& b, int n,
                  std::atomic<bool>* stop, std::vector<std::thread>* threads) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((a < n || b < n) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  *stop = true;
  for (auto& th : *threads) th.join();
  EXPECT_GE(a.load(), n);
  EXPECT_GE(b.load(), n);
}

// Whether every value is the same.
bool OneGeneration(const std::vector<std::string>& values) {
  for (const auto& v : values) {
    if (v != values.front()) return false;
  }
  return true;
}

// Counts one read of `values` in *reads, and in *torn (a failure) unless
// they are all one generation.
void CountRead(const std::vector<std::string>& values, std::atomic<int>* torn,
               std::atomic<int>* reads) {
  if (!OneGeneration(values)) {
    ++*torn;
    ADD_FAILURE() << "torn read: " << values.front() << " / " << values.back();
  }
  ++*reads;
}

TEST_F(KvClusterTest, EveryOperationAndItsErrors) {
  KvStore* kv = kv_.get();
  std::string v;
  SetResult r;
  EXPECT_EQ(kv->Get("absent", &v).code(), StatusCode::kNotFound);
  ASSERT_OK(kv->Set("a", "1", {}, &r));
  EXPECT_TRUE(r.applied);
  ASSERT_OK(kv->Get("a", &v));
  EXPECT_EQ(v, "1");
  // Conditions and the old value.
  SetOptions nx{.condition = SetOptions::Condition::kIfAbsent, .want_old = true};
  ASSERT_OK(kv->Set("a", "2", nx, &r));
  EXPECT_FALSE(r.applied);
  EXPECT_EQ(r.old_value, "1");
  SetOptions xx{.condition = SetOptions::Condition::kIfPresent};
  ASSERT_OK(kv->Set("b", "2", xx, &r));
  EXPECT_FALSE(r.applied);
  SetOptions get{.want_old = true};
  ASSERT_OK(kv->Set("a", "3", get, &r));
  EXPECT_TRUE(r.applied);
  EXPECT_EQ(r.old_value, "1");
  // Empty key and value are keys and values.
  ASSERT_OK(kv->Set("", "", {}, &r));
  ASSERT_OK(kv->Get("", &v));
  EXPECT_EQ(v, "");
  // Delete, GetDelete, Exists.
  bool exists = false;
  ASSERT_OK(kv->Exists("a", &exists));
  EXPECT_TRUE(exists);
  ASSERT_OK(kv->GetDelete("a", &v));
  EXPECT_EQ(v, "3");
  EXPECT_EQ(kv->GetDelete("a", &v).code(), StatusCode::kNotFound);
  ASSERT_OK(kv->Exists("a", &exists));
  EXPECT_FALSE(exists);
  EXPECT_EQ(kv->Delete("a").code(), StatusCode::kNotFound);
  ASSERT_OK(kv->Delete(""));
  // Integers.
  int64_t n = 0;
  ASSERT_OK(kv->IncrBy("n", 5, &n));
  EXPECT_EQ(n, 5);
  ASSERT_OK(kv->IncrBy("n", -7, &n));
  EXPECT_EQ(n, -2);
  ASSERT_OK(kv->Set("s", "x1", {}, &r));
  EXPECT_EQ(kv->IncrBy("s", 1, &n).code(), StatusCode::kInvalidArgument);
  ASSERT_OK(kv->Set("big", std::to_string(INT64_MAX), {}, &r));
  EXPECT_EQ(kv->IncrBy("big", 1, &n).code(), StatusCode::kOutOfRange);
  // Strings.
  uint64_t len = 0;
  ASSERT_OK(kv->Append("s", "yz", &len));
  EXPECT_EQ(len, 4u);
  ASSERT_OK(kv->GetRange("s", 1, -2, &v));
  EXPECT_EQ(v, "1y");
  ASSERT_OK(kv->GetRange("absent", 0, -1, &v));
  EXPECT_EQ(v, "");
  ASSERT_OK(kv->SetRange("p", 3, "ab", &len));
  EXPECT_EQ(len, 5u);
  ASSERT_OK(kv->Get("p", &v));
  EXPECT_EQ(v, std::string("\0\0\0ab", 5));
  // Limits: nothing changes.
  const std::string long_key(kMaxKeySize + 1, 'k');
  EXPECT_EQ(kv->Set(long_key, "v", {}, &r).code(), StatusCode::kTooLarge);
  EXPECT_EQ(kv->Get(long_key, &v).code(), StatusCode::kTooLarge);
  const std::string huge(server::kKvMaxValueSize + 1, 'v');
  EXPECT_EQ(kv->Set("p", huge, {}, &r).code(), StatusCode::kTooLarge);
  EXPECT_EQ(kv->SetRange("p", server::kKvMaxValueSize, "x", &len).code(), StatusCode::kOutOfRange);
  ASSERT_OK(kv->Get("p", &v));
  EXPECT_EQ(v.size(), 5u);
  // Expiry.
  uint64_t at = 0;
  bool changed = false;
  SetOptions ex{.expiry = SetOptions::Expiry::kSet, .expire_at_ms = NowMs() + 400};
  ASSERT_OK(kv->Set("e", "1", ex, &r));
  ASSERT_OK(kv->GetExpiry("e", &at));
  EXPECT_EQ(at, ex.expire_at_ms);
  SetOptions keep{.expiry = SetOptions::Expiry::kKeep};
  ASSERT_OK(kv->Set("e", "2", keep, &r));
  ASSERT_OK(kv->GetExpiry("e", &at));
  EXPECT_EQ(at, ex.expire_at_ms);
  ASSERT_OK(kv->SetExpiry("p", NowMs() + 60000, ExpiryCondition::kAlways, &changed));
  EXPECT_TRUE(changed);
  ASSERT_OK(kv->SetExpiry("p", 0, ExpiryCondition::kAlways, &changed));
  EXPECT_TRUE(changed);
  ASSERT_OK(kv->GetExpiry("p", &at));
  EXPECT_EQ(at, 0u);
  // EXPIRE's conditions (kKvSetExpiryIf), checked by the server, on a
  // string and on a hash.
  uint64_t added = 0;
  const std::pair<std::string_view, std::string_view> field{"f", "v"};
  ASSERT_OK(kv->HashSet("ph", {&field, 1}, false, &added));
  for (std::string_view key : {"p", "ph"}) {
    SCOPED_TRACE(key);
    const uint64_t later = NowMs() + 60000;
    ASSERT_OK(kv->SetExpiry(key, later, ExpiryCondition::kIfSome, &changed));
    EXPECT_FALSE(changed);  // none yet
    ASSERT_OK(kv->SetExpiry(key, later, ExpiryCondition::kIfNone, &changed));
    EXPECT_TRUE(changed);
    ASSERT_OK(kv->SetExpiry(key, later - 1, ExpiryCondition::kIfLater, &changed));
    EXPECT_FALSE(changed);
    ASSERT_OK(kv->SetExpiry(key, later - 1, ExpiryCondition::kIfSomeEarlier, &changed));
    EXPECT_TRUE(changed);
    ASSERT_OK(kv->SetExpiry(key, later + 1, ExpiryCondition::kIfEarlier, &changed));
    EXPECT_FALSE(changed);
    ASSERT_OK(kv->GetExpiry(key, &at));
    EXPECT_EQ(at, later - 1);
    ASSERT_OK(kv->SetExpiry(key, 0, ExpiryCondition::kAlways, &changed));
    EXPECT_TRUE(changed);
  }
  ASSERT_OK(kv->SetExpiry("absent", NowMs() + 1000, ExpiryCondition::kIfNone, &changed));
  EXPECT_FALSE(changed);
  ASSERT_OK(kv->SetExpiry("absent", NowMs() + 1000, ExpiryCondition::kAlways, &changed));
  EXPECT_FALSE(changed);
  EXPECT_EQ(kv->GetExpiry("absent", &at).code(), StatusCode::kNotFound);
  ASSERT_OK(
      kv->SetExpiry("s", NowMs() - 1, ExpiryCondition::kAlways, &changed));  // the past deletes
  EXPECT_TRUE(changed);
  EXPECT_EQ(kv->Get("s", &v).code(), StatusCode::kNotFound);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(kv->Get("e", &v).code(), StatusCode::kNotFound);
  ASSERT_OK(kv->Exists("e", &exists));
  EXPECT_FALSE(exists);
}

TEST_F(KvClusterTest, MultiKeyOperationsScanCountAndFlushSpanVnodes) {
  KvStore* kv = kv_.get();
  std::map<std::string, std::string> want;
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  for (int i = 0; i < 300; i++) want["key" + std::to_string(i)] = "value" + std::to_string(i);
  pairs.reserve(want.size());
  for (const auto& [k, v] : want) pairs.emplace_back(k, v);
  bool applied = false;
  ASSERT_OK(kv->MultiPut(pairs, /*if_none_exist=*/false, &applied));
  EXPECT_TRUE(applied);
  ExpectAll(kv, want);
  // MSETNX: one existing key stops all.
  std::vector<std::pair<std::string_view, std::string_view>> nx = {{"new1", "x"}, {"key7", "y"}};
  ASSERT_OK(kv->MultiPut(nx, /*if_none_exist=*/true, &applied));
  EXPECT_FALSE(applied);
  std::string v;
  EXPECT_EQ(kv->Get("new1", &v).code(), StatusCode::kNotFound);
  std::vector<std::optional<std::string>> got;
  ASSERT_OK(kv->MultiGet({"key1", "nope", "key2"}, &got));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], "value1");
  EXPECT_FALSE(got[1].has_value());
  EXPECT_EQ(got[2], "value2");
  // Every key exactly once, whatever the page size.
  for (size_t count : {1, 17, 1000}) {
    std::multiset<std::string> seen;
    uint64_t cursor = 0;
    int pages = 0;
    do {
      KvScanPage page;
      Status s = kv->Scan(cursor, count, &page);
      ASSERT_TRUE(s.ok()) << s.ToString();
      seen.insert(page.keys.begin(), page.keys.end());
      cursor = page.next_cursor;
      ASSERT_LT(++pages, 2000);
    } while (cursor != 0);
    EXPECT_EQ(seen.size(), want.size()) << "count " << count;
    for (const auto& [k, unused] : want) EXPECT_EQ(seen.count(k), 1u) << k;
  }
  KvCounts n;
  ASSERT_OK(kv->Count(&n));
  EXPECT_EQ(n.keys, want.size());
  ASSERT_OK(kv->Flush());
  ASSERT_OK(kv->Count(&n));
  EXPECT_EQ(n.keys, 0u);
  KvScanPage page;
  ASSERT_OK(kv->Scan(0, 100, &page));
  EXPECT_TRUE(page.keys.empty());
  EXPECT_EQ(page.next_cursor, 0u);
}

// Several clients write at once: each key reads back its last acknowledged
// value, and increments of a shared counter are never lost.
TEST_F(KvClusterTest, ConcurrentWritersKeepTheirLastValues) {
  constexpr int kThreads = 4, kOps = 300;
  std::vector<std::map<std::string, std::string>> last(kThreads);
  std::atomic<int> failures{0};
  // Two clients (each with its own connections), two threads on each.
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      KvStore* kv = t % 2 == 0 ? kv_.get() : second.get();
      for (int i = 0; i < kOps; i++) {
        const std::string key = "t" + std::to_string(t) + "-" + std::to_string(i % 37);
        const std::string value = Checked(key + "@" + std::to_string(i));
        SetResult r;
        int64_t n = 0;
        if (kv->Set(key, value, {}, &r).ok() && r.applied) {
          last[t][key] = value;
        } else {
          failures++;
        }
        if (i % 3 == 0 && !kv->IncrBy("shared-counter", 1, &n).ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; t++) ExpectAll(kv_.get(), last[t]);
  std::string v;
  ASSERT_OK(kv_->Get("shared-counter", &v));
  EXPECT_EQ(v, std::to_string(kThreads * ((kOps + 2) / 3)));
}

// kill -9 of a server under a write load: writes to its vnodes wait for the
// promotion of their backups and succeed there; no acknowledged write is
// lost; after its restart every PM checks clean.
TEST_F(KvClusterTest, KillDuringWritesLosesNothing) {
  constexpr int kThreads = 3, kOps = 500;
  std::vector<std::map<std::string, std::string>> last(kThreads);
  std::atomic<int> done_ops{0}, failures{0};
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      KvStore* kv = t == 0 ? kv_.get() : second.get();
      for (int i = 0; i < kOps; i++) {
        const std::string key = "w" + std::to_string(t) + "-" + std::to_string(i % 64);
        const std::string value = Checked(std::string(100 + i % 400, 'a' + t) + std::to_string(i));
        SetResult r;
        Status s = kv->Set(key, value, {}, &r);
        if (s.ok()) {
          last[t][key] = value;
        } else {
          failures++;
          ADD_FAILURE() << key << ": " << s.ToString();
        }
        done_ops++;
      }
    });
  }
  while (done_ops.load() < 150) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  WaitReplicated();
  const uint32_t victim = IdOf(1);
  cluster_.KillServer(1);
  const int at_kill = done_ops.load();
  for (auto& th : threads) th.join();
  EXPECT_LT(at_kill, kThreads * kOps) << "the load ended before the kill";
  EXPECT_EQ(failures.load(), 0);
  // The victim's tables moved to the servers left.
  const v1::GetMappingResponse after = Mapping();
  for (const auto& t : after.tables()) EXPECT_NE(t.server_id(), victim);
  for (int t = 0; t < kThreads; t++) ExpectAll(kv_.get(), last[t]);
  KvScanPage page;
  uint64_t cursor = 0, keys = 0;
  do {
    ASSERT_OK(kv_->Scan(cursor, 100, &page));
    for (const std::string& k : page.keys) {
      std::string v;
      ASSERT_TRUE(kv_->Get(k, &v).ok()) << k;
      EXPECT_TRUE(ChecksumOk(v)) << k;
    }
    keys += page.keys.size();
    cursor = page.next_cursor;
  } while (cursor != 0);
  EXPECT_EQ(keys, uint64_t{kThreads} * 64);
  // Back as a fresh backup; then everything checks clean.
  ASSERT_OK(cluster_.StartServer(1));
  WaitReplicated();
  for (int t = 0; t < kThreads; t++) ExpectAll(kv_.get(), last[t]);
  kv_.reset();
  second.reset();
  StopServersAndExpectCleanPm(cluster_);
}

// Hashes through a kill -9 of a server under load: three writers set
// fields (one or three a call) and increment a counter field of their own
// hashes, spread over every vnode, while server 1 is killed. Every
// acknowledged field holds its last acknowledged value (one whose call
// failed — its outcome unknown — may hold that call's value instead), each
// hash has exactly the fields written, HSCAN returns each once, the
// counters hold at least their acknowledged increments and at most those
// plus the unknown ones; after the victim returns the PM of every server
// checks clean (fsck checks the hashes' field indexes too).
TEST_F(KvClusterTest, KillDuringHashWritesLosesNothing) {
  constexpr int kThreads = 3, kOps = 400, kFields = 150;
  const std::vector<std::string> hashes = KeysOnEveryVnode("hash", 1);
  struct Writer {
    // Per hash and field: the values it may hold, and whether one was
    // acknowledged (then it must be present).
    struct Field {
      std::set<std::string> allowed;
      bool acked = false;
    };
    std::map<std::string, std::map<std::string, Field>> fields;
    int64_t acked_incr = 0, unknown_incr = 0;
  };
  std::vector<Writer> writers(kThreads);
  std::atomic<int> done_ops{0};
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      KvStore* kv = t == 0 ? kv_.get() : second.get();
      Writer& w = writers[t];
      for (int i = 0; i < kOps; i++) {
        const std::string& hash = hashes[static_cast<size_t>(i) % hashes.size()];
        if (i % 7 == 0) {
          int64_t v = 0;
          Status s = kv->HashIncrBy(hash, "count" + std::to_string(t), 1, &v);
          (s.ok() ? w.acked_incr : w.unknown_incr)++;
          done_ops++;
          continue;
        }
        const int n = i % 5 == 0 ? 3 : 1;
        std::vector<std::string> names, values;
        for (int k = 0; k < n; k++) {
          names.push_back("t" + std::to_string(t) + "-f" + std::to_string((i * 7 + k) % kFields));
          values.push_back(Checked(std::string(50 + i % 200, 'a' + t) + std::to_string(i)));
        }
        std::vector<std::pair<std::string_view, std::string_view>> pairs;
        for (int k = 0; k < n; k++) pairs.emplace_back(names[k], values[k]);
        uint64_t added = 0;
        Status s = kv->HashSet(hash, pairs, false, &added);
        for (int k = 0; k < n; k++) {
          Writer::Field& f = w.fields[hash][names[k]];
          if (s.ok()) f.allowed.clear();  // from now on only this value
          f.allowed.insert(values[k]);
          f.acked = f.acked || s.ok();
        }
        if (!s.ok()) {
          // Only a call in flight at the kill may fail, its outcome unknown.
          EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout)
              << s.ToString();
        }
        done_ops++;
      }
    });
  }
  while (done_ops.load() < 150) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  WaitReplicated();
  cluster_.KillServer(1);
  const int at_kill = done_ops.load();
  for (auto& th : threads) th.join();
  EXPECT_LT(at_kill, kThreads * kOps) << "the load ended before the kill";
  auto expect_hashes = [&] {
    std::map<std::string, std::map<std::string, Writer::Field>> want;
    for (const Writer& w : writers) {
      for (const auto& [hash, fields] : w.fields) {
        for (const auto& [field, state] : fields) want[hash][field] = state;
      }
    }
    for (const std::string& hash : hashes) {
      std::map<std::string, std::string> got;
      uint64_t cursor = 0;
      do {
        KvHashPage page;
        ASSERT_OK(kv_->HashScan(hash, cursor, 64, &page));
        for (auto& [f, v] : page.fields) {
          EXPECT_TRUE(got.emplace(f, v).second) << hash << " " << f << " returned twice";
        }
        cursor = page.next_cursor;
      } while (cursor != 0);
      uint64_t length = 0;
      ASSERT_OK(kv_->HashLength(hash, &length));
      EXPECT_EQ(length, got.size()) << hash;
      for (const auto& [f, v] : got) {
        if (f.rfind("count", 0) == 0) continue;  // the counters: below
        EXPECT_TRUE(ChecksumOk(v)) << hash << " " << f;
        auto it = want[hash].find(f);
        ASSERT_NE(it, want[hash].end()) << hash << " " << f << " was never written";
        EXPECT_EQ(it->second.allowed.count(v), 1u)
            << hash << " " << f << " holds a value not acknowledged";
      }
      for (const auto& [f, state] : want[hash]) {
        // A field never acknowledged may be absent (its calls failed).
        if (got.count(f) == 0) EXPECT_FALSE(state.acked) << hash << " " << f << " lost";
      }
    }
    int64_t counters = 0, acked = 0, unknown = 0;
    for (int t = 0; t < kThreads; t++) {
      acked += writers[t].acked_incr;
      unknown += writers[t].unknown_incr;
      for (const std::string& hash : hashes) {
        std::vector<std::optional<std::string>> v;
        const std::string field = "count" + std::to_string(t);
        ASSERT_OK(kv_->HashGet(hash, std::vector<std::string_view>{field}, &v));
        int64_t c = 0;
        if (v[0]) ASSERT_TRUE(ParseDecimalInt64(*v[0], &c));
        counters += c;
      }
    }
    EXPECT_GE(counters, acked);
    EXPECT_LE(counters, acked + unknown);
  };
  expect_hashes();
  // Back as a fresh backup; then everything checks clean.
  ASSERT_OK(cluster_.StartServer(1));
  WaitReplicated();
  expect_hashes();
  kv_.reset();
  second.reset();
  StopServersAndExpectCleanPm(cluster_);
}

// Issue 20, defect 3: while a server that stopped answering (SIGSTOP) has
// not yet been declared down, the gateway's commands on its tables fail
// with the errors Redis clients know to retry (-CLUSTERDOWN, -TRYAGAIN),
// never another kind (a client whose reply timeout and failover wait are
// shorter than the monitor's down timeout meets them for sure); once the
// backups serve, the same commands succeed through a gateway of the usual
// failover wait.
TEST_F(KvClusterTest, GatewayAnswersAFailoverWithRetryableRedisErrors) {
  client::ClientOptions o =
      client::TestClientOptions(cluster_.monitor_address(), cluster_.secret());
  o.op_timeout_ms = 200;
  o.failover_wait_ms = 200;
  std::unique_ptr<ClusterKvStore> impatient_store;
  ASSERT_OK(ClusterKvStore::Open(o, &impatient_store));
  GatewayConfig config;
  ClientRegistry clients;
  GatewayStats stats;
  CommandExecutor impatient(impatient_store.get(), &config, &clients, &stats);
  CommandExecutor patient(kv_.get(), &config, &clients, &stats);
  ClientState client;
  client.authenticated = true;
  auto run_on = [&](CommandExecutor* gateway, std::vector<std::string_view> args) {
    std::string out;
    gateway->Execute(&client, args, &out);
    return out;
  };
  auto run = [&](std::vector<std::string_view> args) { return run_on(&impatient, args); };
  const std::vector<std::string> keys = KeysOnEveryVnode("failover", 1);
  for (const std::string& k : keys) {
    ASSERT_EQ(run_on(&patient, {"SET", k, "before"}), "+OK\r\n") << k;
  }
  WaitReplicated();
  const uint32_t victim = IdOf(1);
  std::set<uint32_t> victim_tables;
  const v1::GetMappingResponse before = Mapping();
  for (const auto& t : before.tables()) {
    if (t.server_id() == victim) victim_tables.insert(t.table());
  }
  const uint32_t tables = kv_->client()->table_count();
  std::vector<std::string_view> mset{"MSET"};
  std::vector<std::string> on_victim;
  for (const std::string& k : keys) {
    mset.push_back(k);
    mset.push_back("mset");
    if (victim_tables.count(monitor::TableForKey(HashKey(k), tables)) != 0) on_victim.push_back(k);
  }
  ASSERT_FALSE(on_victim.empty());
  ASSERT_EQ(::kill(cluster_.server(1).pid(), SIGSTOP), 0);
  int errors = 0;
  auto expect_retryable = [&](const std::string& reply) {
    if (reply.empty() || reply[0] != '-') return;
    ++errors;
    EXPECT_TRUE(reply.starts_with("-CLUSTERDOWN ") || reply.starts_with("-TRYAGAIN ")) << reply;
  };
  for (const std::string& k : on_victim) {
    expect_retryable(run({"SET", k, "during"}));
    expect_retryable(run({"GET", k}));
  }
  expect_retryable(run(mset));
  EXPECT_GT(errors, 0) << "no command met the failover";
  cluster_.KillServer(1);
  // The backups serve the victim's tables (the patient store waits for
  // them).
  for (const std::string& k : keys) {
    EXPECT_EQ(run_on(&patient, {"SET", k, "after"}), "+OK\r\n") << k;
    EXPECT_EQ(run_on(&patient, {"GET", k}), "$5\r\nafter\r\n") << k;
  }
  EXPECT_EQ(run_on(&patient, mset), "+OK\r\n");
}

// Every key survives a restart of every server, clean or by kill -9.
TEST_F(KvClusterTest, WholeClusterRestartKeepsEveryKey) {
  std::map<std::string, std::string> want;
  for (int i = 0; i < 400; i++) {
    const std::string key = "r" + std::to_string(i);
    want[key] = Checked(std::string(i % 50, 'z') + key);
    SetResult r;
    SetOptions o;
    if (i % 10 == 0) {
      o.expiry = SetOptions::Expiry::kSet;
      o.expire_at_ms = NowMs() + uint64_t{3600} * 1000;
    }
    ASSERT_OK(kv_->Set(key, want[key], o, &r));
  }
  int64_t n = 0;
  ASSERT_OK(kv_->IncrBy("r0-counter", 41, &n));
  want["r0-counter"] = "41";
  WaitReplicated();
  for (int i = 0; i < 3; i++) ASSERT_OK(cluster_.StopServer(i));
  for (int i = 0; i < 3; i++) ASSERT_OK(cluster_.StartServer(i));
  ExpectAll(kv_.get(), want);
  uint64_t at = 0;
  ASSERT_OK(kv_->GetExpiry("r10", &at));
  EXPECT_GT(at, NowMs());
  WaitReplicated();
  for (int i = 0; i < 3; i++) cluster_.KillServer(i);
  for (int i = 0; i < 3; i++) ASSERT_OK(cluster_.StartServer(i));
  ExpectAll(kv_.get(), want);
  KvCounts count;
  ASSERT_OK(kv_->Count(&count));
  EXPECT_EQ(count.keys, want.size());
  kv_.reset();
  StopServersAndExpectCleanPm(cluster_);
}

// Writers set keys of every vnode to one generation at a time while
// readers read them all: a multi-get never sees two generations, and a
// single get after a multi-get never sees an older one.
TEST_F(KvClusterTest, MultiPutAcrossVnodesIsAtomicForReaders) {
  const std::vector<std::string> keys = KeysOnEveryVnode("gen", 2);
  bool applied = false;
  ASSERT_OK(PutAll(kv_.get(), keys, "w0:0", false, &applied));
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  std::atomic<bool> stop{false};
  std::atomic<int> puts{0}, reads{0}, torn{0}, errors{0};
  std::vector<std::thread> threads;
  threads.reserve(2);
  for (int w = 0; w < 2; w++) {
    threads.emplace_back([&, w] {
      KvStore* kv = w == 0 ? kv_.get() : second.get();
      for (int g = 1; !stop; g++) {
        bool ok = false;
        Status s = PutAll(kv, keys, "w" + std::to_string(w) + ":" + std::to_string(g), false, &ok);
        if (!s.ok() || !ok) {
          errors++;
          ADD_FAILURE() << s.ToString();
        }
        puts++;
      }
    });
  }
  for (int r = 0; r < 2; r++) {
    threads.emplace_back([&, r] {
      KvStore* kv = r == 0 ? kv_.get() : second.get();
      while (!stop) {
        std::vector<std::string> values;
        Status s = GetAll(kv, keys, &values);
        if (!s.ok()) {
          errors++;
          ADD_FAILURE() << s.ToString();
          continue;
        }
        CountRead(values, &torn, &reads);
      }
    });
  }
  RunUntilBoth(puts, reads, 300, &stop, &threads);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  std::vector<std::string> values;
  ASSERT_OK(GetAll(kv_.get(), keys, &values));
  EXPECT_TRUE(OneGeneration(values));
  kv_.reset();
  second.reset();
  StopServersAndExpectCleanPm(cluster_);
}

// Reads skip the segment's mutation lock (docs/pdkvs.md "Server side"), yet
// a write applied on the primary and not yet on its backup is never read:
// with the backup stopped, the write waits for its shipment, and no read
// answers its value before the backup took it (the reads meanwhile wait or
// answer the old value). The servers serve on two threads, so a read runs
// while the write waits.
TEST_F(KvClusterTest, ReadsNeverAnswerAWriteNotYetOnTheBackup) {
  const std::string key = "pending";
  SetResult result;
  ASSERT_OK(kv_->Set(key, "old", SetOptions{}, &result));
  WaitReplicated();
  const uint32_t table = monitor::TableForKey(HashKey(key), kv_->client()->table_count());
  uint32_t backup_id = 0;
  const v1::GetMappingResponse mapping = Mapping();
  for (const auto& seg : mapping.segments()) {
    if (seg.table() == table && seg.backups_size() == 1) backup_id = seg.backups(0).server_id();
  }
  ASSERT_NE(backup_id, 0u);
  int backup = -1;
  for (int i = 0; i < 3; i++) {
    if (IdOf(i) == backup_id) backup = i;
  }
  ASSERT_GE(backup, 0);
  std::unique_ptr<ClusterKvStore> writer_kv, reader_kv;
  ASSERT_OK(OpenStore(&writer_kv));
  ASSERT_OK(OpenStore(&reader_kv));

  ASSERT_EQ(::kill(cluster_.server(backup).pid(), SIGSTOP), 0);
  std::atomic<bool> resumed{false};
  struct Resume {  // the backup runs again whatever the test asserts
    pid_t pid;
    std::atomic<bool>* resumed;
    ~Resume() {
      if (!resumed->exchange(true)) ::kill(pid, SIGCONT);
    }
  } resume{cluster_.server(backup).pid(), &resumed};
  std::atomic<bool> written{false};
  std::thread writer([&] {
    SetResult r;
    Status s = writer_kv->Set(key, "new", SetOptions{}, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    written = true;
  });
  // The write has reached the primary and waits for the stopped backup.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::atomic<bool> stop{false};
  std::atomic<int> stale_reads{0}, reads{0};
  std::thread reader([&] {
    while (!stop) {
      std::string v;
      Status s = reader_kv->Get(key, &v);
      const bool before_resume = !resumed;
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (before_resume && v != "old") stale_reads++;  // a write its backup did not have
      reads++;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(written.load()) << "the write did not wait for its backup";
  resumed = true;
  ASSERT_EQ(::kill(cluster_.server(backup).pid(), SIGCONT), 0);
  writer.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (reads < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  reader.join();
  EXPECT_GE(reads.load(), 10);
  EXPECT_EQ(stale_reads.load(), 0);
  std::string v;
  ASSERT_OK(reader_kv->Get(key, &v));
  EXPECT_EQ(v, "new");
}

// Reads of one vnode (a multi-get, a batch of gets) run without the
// mutation lock while multi-puts and batches of sets of the same vnode
// write its keys: every read sees one generation, never half a write.
TEST_F(KvClusterTest, ReadsOfOneVnodeNeverSeeHalfAWrite) {
  const std::vector<std::string> all = KeysOnEveryVnode("one", 6);
  const uint32_t tables = kv_->client()->table_count();
  std::vector<std::string> keys;
  for (const std::string& k : all) {
    if (monitor::TableForKey(HashKey(k), tables) == 1) keys.push_back(k);
  }
  ASSERT_EQ(keys.size(), 6u);
  bool applied = false;
  ASSERT_OK(PutAll(kv_.get(), keys, "w0:0", false, &applied));
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0}, reads{0}, torn{0};
  std::vector<std::thread> threads;
  threads.reserve(2);
  // Writer 0 multi-puts (0x40b), writer 1 sends batches of sets (0x413).
  for (int w = 0; w < 2; w++) {
    threads.emplace_back([&, w] {
      KvStore* kv = w == 0 ? kv_.get() : second.get();
      for (int g = 1; !stop; g++) {
        const std::string value = "w" + std::to_string(w) + ":" + std::to_string(g);
        if (w == 0) {
          bool ok = false;
          Status s = PutAll(kv, keys, value, false, &ok);
          EXPECT_TRUE(s.ok() && ok) << s.ToString();
        } else {
          std::vector<KvOp> ops(keys.size());
          for (size_t i = 0; i < keys.size(); i++) {
            ops[i].kind = KvOp::Kind::kSet;
            ops[i].key = keys[i];
            ops[i].value = value;
          }
          kv->RunBatch(ops);
          for (const KvOp& op : ops) EXPECT_TRUE(op.status.ok()) << op.status.ToString();
        }
        writes++;
      }
    });
  }
  // Reader 0 multi-gets (0x40a), reader 1 sends batches of gets (0x413).
  for (int r = 0; r < 2; r++) {
    threads.emplace_back([&, r] {
      KvStore* kv = r == 0 ? kv_.get() : second.get();
      while (!stop) {
        std::vector<std::string> values;
        if (r == 0) {
          Status s = GetAll(kv, keys, &values);
          EXPECT_TRUE(s.ok()) << s.ToString();
        } else {
          std::vector<KvOp> ops(keys.size());
          for (size_t i = 0; i < keys.size(); i++) {
            ops[i].kind = KvOp::Kind::kGet;
            ops[i].key = keys[i];
          }
          kv->RunBatch(ops);
          for (const KvOp& op : ops) {
            EXPECT_TRUE(op.status.ok()) << op.status.ToString();
            values.push_back(op.result);
          }
        }
        CountRead(values, &torn, &reads);
      }
    });
  }
  RunUntilBoth(writes, reads, 400, &stop, &threads);
  EXPECT_EQ(torn.load(), 0);
}

// kKvVnodeBatches (what RunBatch sends a server holding several vnodes):
// each kKvBatch runs on its own — those of vnodes the server does not hold
// are refused alone, nothing of theirs done — and a batch finding the
// reply full answers as many requests as fit (maybe none).
TEST_F(KvClusterTest, TableCallAllAnswersEachCallAsTableCallWould) {
  client::Client* c = kv_->client();
  const uint32_t tables = c->table_count();
  std::vector<std::string> keys = KeysOnEveryVnode("tca", 1);  // one per table
  for (const std::string& k : keys) {
    SetResult ignored;
    ASSERT_OK(kv_->Set(k, "v:" + k, SetOptions{}, &ignored));
  }
  // A kKvBatch GET of each key to its table's server (several calls per
  // server: the later ones go as TableCalls), then one whose route fails.
  std::vector<client::Client::TableCallArgs> calls(keys.size() + 1);
  std::set<uint32_t> servers;
  for (size_t i = 0; i < keys.size(); i++) {
    const uint32_t table = monitor::TableForKey(HashKey(keys[i]), tables);
    servers.insert(c->table_owner(table));
    calls[i].route = [table](uint32_t, uint32_t* t) {
      *t = table;
      return Status::OK();
    };
    calls[i].method = server::kKvBatch;
    calls[i].body = [&keys, i](uint32_t t, std::string* body) {
      server::KvRequest r;
      r.table = t;
      server::KvBatchEntry& get = r.batch.emplace_back();
      get.method = server::kKvGet;
      get.r.key = keys[i];
      server::Encoder e(body);
      server::EncodeKvRequest(server::kKvBatch, r, &e);
    };
  }
  ASSERT_GE(servers.size(), 2u);  // calls to several servers in flight
  calls.back().route = [](uint32_t, uint32_t*) { return Status::FailedPrecondition("no route"); };
  calls.back().method = server::kKvBatch;
  calls.back().body = [](uint32_t, std::string*) {};
  c->TableCallAll(calls);
  for (size_t i = 0; i < keys.size(); i++) {
    ASSERT_OK(calls[i].status);
    std::string alone;
    ASSERT_OK(c->TableCall(calls[i].route, calls[i].method, calls[i].body, true, &alone));
    EXPECT_EQ(calls[i].reply, alone) << keys[i];
    EXPECT_NE(calls[i].reply.find("v:" + keys[i]), std::string::npos) << keys[i];
  }
  EXPECT_EQ(calls.back().status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(calls.back().status.message(), "no route");
}

TEST_F(KvClusterTest, VnodeBatchesRunEachBatchOnItsOwn) {
  using server::Decoder;
  using server::Encoder;
  using server::KvRequest;
  client::Client* c = kv_->client();
  const uint32_t tables = c->table_count();
  auto table_of = [&](const std::string& k) { return monitor::TableForKey(HashKey(k), tables); };
  std::vector<std::string> keys = KeysOnEveryVnode("vb", 2);
  std::stable_sort(keys.begin(), keys.end(), [&](const std::string& a, const std::string& b) {
    return table_of(a) < table_of(b);
  });  // two keys of table 1, two of table 2, ...
  std::map<std::string, std::string> want;
  for (const std::string& k : keys) {
    SetResult ignored;
    ASSERT_OK(kv_->Set(k, "old:" + k, SetOptions{}, &ignored));
    want[k] = "old:" + k;
  }
  // Sends kKvVnodeBatches of `batches` (their tables set) to the server of
  // table 1; the status code and reply of each batch answered.
  auto send = [&](const std::vector<KvRequest>& batches,
                  std::vector<std::pair<StatusCode, std::string>>* answers) {
    std::string reply;
    ASSERT_OK(c->TableCall(
        [](uint32_t, uint32_t* table) {
          *table = 1;
          return Status::OK();
        },
        server::kKvVnodeBatches,
        [&](uint32_t, std::string* body) {
          Encoder e(body);
          e.U64(batches.size());
          for (const KvRequest& r : batches) {
            std::string one;
            Encoder o(&one);
            server::EncodeKvRequest(server::kKvBatch, r, &o);
            e.Str(one);
          }
        },
        true, &reply));
    Decoder d({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
    uint64_t n = 0;
    ASSERT_OK(d.U64(&n));
    answers->clear();
    for (uint64_t i = 0; i < n; i++) {
      uint64_t code = 0;
      std::string_view body;
      ASSERT_OK(d.U64(&code));
      ASSERT_OK(d.Str(&body));
      answers->emplace_back(static_cast<StatusCode>(code), std::string(body));
    }
    ASSERT_OK(d.Done());
  };
  // The entries of a kKvBatch reply: status code and bytes each.
  auto entries = [](const std::string& batch_reply) {
    std::vector<std::pair<StatusCode, std::string>> out;
    Decoder d({reinterpret_cast<const uint8_t*>(batch_reply.data()), batch_reply.size()});
    uint64_t n = 0;
    EXPECT_TRUE(d.U64(&n).ok());
    for (uint64_t i = 0; i < n; i++) {
      uint64_t code = 0;
      std::string_view body;
      EXPECT_TRUE(d.U64(&code).ok());
      EXPECT_TRUE(d.Str(&body).ok());
      out.emplace_back(static_cast<StatusCode>(code), std::string(body));
    }
    EXPECT_TRUE(d.Done().ok());
    return out;
  };

  // One batch per vnode (set its first key, read both), all sent to the
  // server of table 1.
  std::vector<KvRequest> batches;
  for (size_t i = 0; i < keys.size(); i += 2) {
    KvRequest& r = batches.emplace_back();
    r.table = table_of(keys[i]);
    server::KvBatchEntry& set = r.batch.emplace_back();
    set.method = server::kKvSet;
    set.r.key = keys[i];
    set.r.value = "new";
    for (size_t j = i; j < i + 2; j++) {
      server::KvBatchEntry& get = r.batch.emplace_back();
      get.method = server::kKvGet;
      get.r.key = keys[j];
    }
  }
  std::vector<std::pair<StatusCode, std::string>> answers;
  ASSERT_NO_FATAL_FAILURE(send(batches, &answers));
  ASSERT_EQ(answers.size(), batches.size());
  const uint32_t here = c->table_owner(1);
  int ran = 0, refused = 0;
  for (size_t b = 0; b < batches.size(); b++) {
    const std::string& first = keys[2 * b];
    const std::string& second = keys[2 * b + 1];
    if (c->table_owner(batches[b].table) == here) {
      ran++;
      ASSERT_EQ(answers[b].first, StatusCode::kOk) << answers[b].second;
      const auto e = entries(answers[b].second);
      ASSERT_EQ(e.size(), 3u);
      EXPECT_EQ(e[0].first, StatusCode::kOk);
      EXPECT_EQ(e[1], std::pair(StatusCode::kOk, std::string("new")));
      EXPECT_EQ(e[2], std::pair(StatusCode::kOk, "old:" + second));
      want[first] = "new";
    } else {
      refused++;
      EXPECT_EQ(answers[b].first, StatusCode::kStaleEpoch) << answers[b].second;
    }
  }
  EXPECT_GE(ran, 1);
  ExpectAll(kv_.get(), want);  // the refused batches set nothing

  // A full reply: reads get half a reply (32 MiB). 12 MiB values, three
  // reads in the first batch (two fit), two in the second (none fits).
  const std::string& big_key = keys.front();  // table 1's
  const std::string big(12u << 20, 'b');
  SetResult ignored;
  ASSERT_OK(kv_->Set(big_key, big, SetOptions{}, &ignored));
  std::vector<KvRequest> reads(2);
  for (size_t b = 0; b < 2; b++) {
    reads[b].table = 1;
    for (size_t i = 0; i < 3 - b; i++) {
      server::KvBatchEntry& get = reads[b].batch.emplace_back();
      get.method = server::kKvGet;
      get.r.key = big_key;
    }
  }
  ASSERT_NO_FATAL_FAILURE(send(reads, &answers));
  ASSERT_EQ(answers.size(), 2u);
  ASSERT_EQ(answers[0].first, StatusCode::kOk);
  ASSERT_EQ(answers[1].first, StatusCode::kOk);
  const auto full = entries(answers[0].second);
  ASSERT_EQ(full.size(), 2u);
  for (const auto& e : full) EXPECT_TRUE(e.first == StatusCode::kOk && e.second == big);
  EXPECT_TRUE(entries(answers[1].second).empty());
  // RunBatch reads what such a reply left out again on its own.
  std::vector<KvOp> ops(6);
  for (size_t i = 0; i < ops.size(); i++) {
    ops[i].kind = KvOp::Kind::kGet;
    ops[i].key = i < 5 ? big_key : keys.back();
  }
  kv_->RunBatch(ops);
  for (size_t i = 0; i < 5; i++) {
    ASSERT_OK(ops[i].status);
    EXPECT_TRUE(ops[i].result == big);
  }
  ASSERT_OK(ops[5].status);
  EXPECT_EQ(ops[5].result, want[keys.back()]);
}

// RunBatch: one kKvBatch per vnode; each key's ops take effect in their
// order; a bad op fails alone; ops meeting keys a multi-put holds locked
// run again and succeed.
TEST_F(KvClusterTest, RunBatchKeepsEachKeysOrderAndWaitsOutMultiPutLocks) {
  const std::vector<std::string> keys = KeysOnEveryVnode("batch", 3);
  const std::string too_long(kMaxKeySize + 1, 'k');
  std::vector<KvOp> ops;
  auto add = [&](KvOp::Kind kind, std::string_view key, std::string_view value) {
    KvOp& op = ops.emplace_back();
    op.kind = kind;
    op.key = key;
    op.value = value;
  };
  for (const std::string& k : keys) {
    add(KvOp::Kind::kGet, k, "");
    add(KvOp::Kind::kSet, k, "one");
    add(KvOp::Kind::kGet, k, "");
    add(KvOp::Kind::kSet, k, k);
  }
  add(KvOp::Kind::kSet, too_long, "x");
  kv_->RunBatch(ops);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(ops[4 * i].status.code(), StatusCode::kNotFound)
        << keys[i] << ops[4 * i].status.ToString();
    EXPECT_TRUE(ops[4 * i + 1].status.ok()) << ops[4 * i + 1].status.ToString();
    ASSERT_OK(ops[4 * i + 2].status);
    EXPECT_EQ(ops[4 * i + 2].result, "one");
    EXPECT_TRUE(ops[4 * i + 3].status.ok()) << ops[4 * i + 3].status.ToString();
  }
  EXPECT_EQ(ops.back().status.code(), StatusCode::kTooLarge);
  std::vector<std::string> values;
  ASSERT_OK(GetAll(kv_.get(), keys, &values));
  EXPECT_EQ(values, keys);

  // Hash ops (kKvHash in the batches): HGET of an absent hash, HSET new
  // and again, HGET, and WRONGTYPE both ways against the string keys.
  ops.clear();
  std::vector<std::string> hashes;
  for (const std::string& k : keys) hashes.push_back("h" + k);
  auto add_field = [&](KvOp::Kind kind, std::string_view key, std::string_view value) {
    KvOp& op = ops.emplace_back();
    op.kind = kind;
    op.key = key;
    op.field = "f";
    op.value = value;
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    add_field(KvOp::Kind::kHashGet, hashes[i], "");
    add_field(KvOp::Kind::kHashSet, hashes[i], "one");
    add_field(KvOp::Kind::kHashSet, hashes[i], keys[i]);
    add_field(KvOp::Kind::kHashGet, hashes[i], "");
    add_field(KvOp::Kind::kHashGet, keys[i], "");
    add_field(KvOp::Kind::kHashSet, keys[i], "x");
    add_field(KvOp::Kind::kGet, hashes[i], "");
  }
  kv_->RunBatch(ops);
  for (size_t i = 0; i < keys.size(); ++i) {
    const KvOp* o = &ops[7 * i];
    EXPECT_EQ(o[0].status.code(), StatusCode::kNotFound) << o[0].status.ToString();
    ASSERT_OK(o[1].status);
    EXPECT_EQ(o[1].added, 1u);
    ASSERT_OK(o[2].status);
    EXPECT_EQ(o[2].added, 0u);
    ASSERT_OK(o[3].status);
    EXPECT_EQ(o[3].result, keys[i]);
    for (int j : {4, 5, 6}) EXPECT_TRUE(IsWrongType(o[j].status)) << j << o[j].status.ToString();
  }
  ASSERT_OK(GetAll(kv_.get(), keys, &values));
  EXPECT_EQ(values, keys);

  // Batches of sets and gets while multi-puts lock the same keys.
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  std::atomic<bool> stop{false};
  std::atomic<int> puts{0}, errors{0};
  std::thread writer([&] {
    for (int g = 1; !stop; g++) {
      bool ok = false;
      Status s = PutAll(second.get(), keys, "mput:" + std::to_string(g), false, &ok);
      if (!s.ok() || !ok) {
        errors++;
        ADD_FAILURE() << s.ToString();
      }
      puts++;
    }
  });
  int batches = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((puts < 100 || batches < 100) && std::chrono::steady_clock::now() < deadline) {
    ops.clear();
    const std::string mine = "batch:" + std::to_string(batches++);
    for (const std::string& k : keys) {
      add(KvOp::Kind::kSet, k, mine);
      add(KvOp::Kind::kGet, k, "");
    }
    kv_->RunBatch(ops);
    for (const KvOp& op : ops) {
      ASSERT_TRUE(op.status.ok()) << op.key << ": " << op.status.ToString();
      if (op.kind == KvOp::Kind::kGet) {
        EXPECT_TRUE(op.result == mine || op.result.starts_with("mput:")) << op.result;
      }
    }
  }
  stop = true;
  writer.join();
  EXPECT_GE(puts.load(), 100);
  EXPECT_GE(batches, 100);
  EXPECT_EQ(errors.load(), 0);
}

// Multi-puts if none exist on overlapping key sets at once: in every round
// the keys each hold the value of one applied multi-put, which set all of
// its keys, and the applied ones share no key.
TEST_F(KvClusterTest, MultiPutIfNoneExistIsAllOrNothingUnderContention) {
  constexpr int kThreads = 4, kRounds = 25;
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  int contended = 0;
  for (int round = 0; round < kRounds; round++) {
    // Key i of the round is on vnode i % tables; thread t wants keys t and
    // t + 1, so each thread contends with both neighbours.
    const std::vector<std::string> ring = KeysOnEveryVnode("nx" + std::to_string(round) + "-", 2);
    std::vector<std::vector<std::string>> wants(kThreads);
    for (int t = 0; t < kThreads; t++) wants[t] = {ring[t], ring[(t + 1) % kThreads]};
    std::vector<int> applied(kThreads, 0);
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; t++) {
      threads.emplace_back([&, t] {
        KvStore* kv = t % 2 == 0 ? kv_.get() : second.get();
        bool ok = false;
        Status s = PutAll(kv, wants[t], "t" + std::to_string(t), true, &ok);
        EXPECT_TRUE(s.ok()) << s.ToString();
        applied[t] = ok ? 1 : 0;
      });
    }
    for (auto& th : threads) th.join();
    std::map<std::string, std::string> want;
    int winners = 0;
    for (int t = 0; t < kThreads; t++) {
      if (applied[t] == 0) continue;
      winners++;
      for (const auto& k : wants[t]) {
        EXPECT_TRUE(want.emplace(k, "t" + std::to_string(t)).second) << "two winners share " << k;
      }
    }
    EXPECT_GE(winners, 1);
    contended += kThreads - winners;
    for (int i = 0; i < kThreads; i++) {
      std::string v;
      Status s = kv_->Get(ring[i], &v);
      auto w = want.find(ring[i]);
      if (w == want.end()) {
        EXPECT_EQ(s.code(), StatusCode::kNotFound) << ring[i] << " = " << v;
      } else {
        ASSERT_OK(s);
        EXPECT_EQ(v, w->second) << ring[i];
      }
    }
  }
  EXPECT_GT(contended, 0) << "no multi-put was refused";
}

// Issue 20, defects 1 and 2: a multi-put naming a key many times (100,000
// pairs of one key and a key of another vnode, then of the same vnode)
// answers OK with each key's last value and leaves no key locked (a write
// of each succeeds; a lock left behind fails it after the failover wait);
// then the short multi-put with a repeated key that used to be refused
// after it, and a multi-put if none exist with a repeated absent key. (Each
// repetition used to be a put of its own: on PM behind slow persists the
// commit outlived its shipment's timeout and was retried forever, locked;
// here, with PM in memory, 100,000 of them overflow the transaction log.)
TEST_F(KvClusterTest, RepeatedKeysInAMultiPutTakeTheLastValueAndLeaveNoLock) {
  const uint32_t tables = kv_->client()->table_count();
  auto table_of = [&](const std::string& k) { return monitor::TableForKey(HashKey(k), tables); };
  const std::string a = "a";
  std::string other, same;
  for (int n = 0; other.empty() || same.empty(); n++) {
    std::string k = "k" + std::to_string(n);
    (table_of(k) == table_of(a) ? same : other) = k;
  }
  std::vector<std::string> values(100000);
  for (size_t i = 0; i < values.size(); i++) values[i] = "v" + std::to_string(i);
  for (const std::string& second : {other, same}) {
    SCOPED_TRACE(second == other ? "two vnodes" : "one vnode");
    std::vector<std::pair<std::string_view, std::string_view>> pairs;
    for (const std::string& v : values) pairs.emplace_back(a, v);
    pairs.emplace_back(second, "last");
    bool applied = false;
    ASSERT_OK(kv_->MultiPut(pairs, false, &applied));
    EXPECT_TRUE(applied);
    std::string got;
    ASSERT_OK(kv_->Get(a, &got));
    EXPECT_EQ(got, values.back());
    ASSERT_OK(kv_->Get(second, &got));
    EXPECT_EQ(got, "last");
    SetResult r;
    ASSERT_OK(kv_->Set(a, "set", {}, &r));
    ASSERT_OK(kv_->Set(second, "set", {}, &r));
    ASSERT_OK(kv_->MultiPut({{a, "1"}, {a, "2"}, {second, "3"}}, false, &applied));
    EXPECT_TRUE(applied);
    ASSERT_OK(kv_->Get(a, &got));
    EXPECT_EQ(got, "2");
    ASSERT_OK(kv_->Get(second, &got));
    EXPECT_EQ(got, "3");
    const std::string fresh = "fresh-" + second;
    ASSERT_OK(kv_->MultiPut({{fresh, "1"}, {fresh, "2"}, {second + "-nx", "3"}}, true, &applied));
    EXPECT_TRUE(applied);
    ASSERT_OK(kv_->Get(fresh, &got));
    EXPECT_EQ(got, "2");
  }
  // Distinct keys after all that, 600 a vnode: each vnode's commit is
  // applied in several mutations (shipments), all of them there after.
  const std::vector<std::string> keys = KeysOnEveryVnode("after", 600);
  bool applied = false;
  ASSERT_OK(PutAll(kv_.get(), keys, "x", false, &applied));
  EXPECT_TRUE(applied);
  std::vector<std::string> got;
  ASSERT_OK(GetAll(kv_.get(), keys, &got));
  for (size_t i = 0; i < keys.size(); i++) ASSERT_EQ(got[i], "x") << keys[i];
  SetResult r;
  ASSERT_OK(kv_->Set(keys.back(), "y", {}, &r));
}

// A transaction (the gateway's EXEC) checks the keys it read where their
// vnodes live at its commit: a vnode drained to another server between the
// reads and the commit, and written there, makes the commit fail (the
// gateway reads again) rather than pass validation at the old server, which
// no longer sees the key's writes. Read-only and written keys alike.
TEST_F(KvClusterTest, ATransactionWhoseReadVnodeMovedIsCheckedWhereItLivesNow) {
  const uint32_t tables = kv_->client()->table_count();
  const std::string moved = "moved";
  SetResult r;
  ASSERT_OK(kv_->Set(moved, "1", {}, &r));
  const uint32_t leaving = kv_->client()->table_owner(monitor::TableForKey(HashKey(moved), tables));
  ASSERT_NE(leaving, 0u);
  std::vector<KvTxRead> before;
  ASSERT_OK(kv_->TxRead({moved}, &before));
  ASSERT_EQ(before[0].version.server, leaving);
  WaitReplicated();
  Drain(leaving);
  if (HasFatalFailure()) return;
  // Another client writes the key at its new server; kv_'s mapping may
  // still name the old one.
  std::unique_ptr<ClusterKvStore> other;
  ASSERT_OK(OpenStore(&other));
  ASSERT_OK(other->Set(moved, "2", {}, &r));
  ASSERT_NE(other->client()->table_owner(monitor::TableForKey(HashKey(moved), tables)), leaving);
  const std::string side = "side";
  EXPECT_EQ(kv_->TxCommit({{moved, before[0].version}}, {{side, "x", 0}}).code(),
            StatusCode::kAborted);
  EXPECT_EQ(kv_->TxCommit({{moved, before[0].version}}, {{moved, "3", 0}}).code(),
            StatusCode::kAborted);
  std::string got;
  EXPECT_EQ(kv_->Get(side, &got).code(), StatusCode::kNotFound);
  ASSERT_OK(kv_->Get(moved, &got));
  EXPECT_EQ(got, "2");
  // Read again where the vnode is now: the commit goes through (run again
  // on a conflict, as the gateway does: the segment's new backup may still
  // be joining).
  Status committed;
  const auto retry_until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    std::vector<KvTxRead> after;
    ASSERT_OK(kv_->TxRead({moved}, &after));
    ASSERT_NE(after[0].version.server, leaving);
    committed = kv_->TxCommit({{moved, after[0].version}}, {{moved, "4", 0}});
  } while (committed.code() == StatusCode::kAborted &&
           std::chrono::steady_clock::now() < retry_until);
  ASSERT_OK(committed);
  ASSERT_OK(other->Get(moved, &got));
  EXPECT_EQ(got, "4");
}

// The instant between the check of the words and the commit: a
// transaction that only reads a key (its coordinator in its own process,
// stopped by PDPM_TX_STOP_AT just before it validates), whose vnode is
// drained to another server and written there meanwhile, must not commit:
// the read is stale, and the old server's word never changes again. The
// word is checked where the vnode lives at validation (it passed at the
// old server when checked before the commit).
TEST_F(KvClusterTest, AReadOnlyKeyWhoseVnodeMovesBeforeValidationFailsTheCommit) {
  const uint32_t tables = kv_->client()->table_count();
  const std::string moved = "moved";
  SetResult r;
  ASSERT_OK(kv_->Set(moved, "1", {}, &r));
  const uint32_t leaving = kv_->client()->table_owner(monitor::TableForKey(HashKey(moved), tables));
  ASSERT_NE(leaving, 0u);
  WaitReplicated();
  // A store that routes by the mapping of now, which names the leaving
  // server, until that server refuses: tells below when it knows the move.
  std::unique_ptr<ClusterKvStore> stale;
  ASSERT_OK(OpenStore(&stale));
  const std::string log = cluster_.dir() + "/exec.log";
  client::ChildProcess child;
  ASSERT_OK(child.Start({PDPM_EXEC_BINARY, "--monitor", cluster_.monitor_address(), "--secret-file",
                         cluster_.secret_file(), "--read", moved},
                        {"PDPM_TX_STOP_AT=validate:1"}, log));
  for (int i = 0; i < 2000 && !child.Stopped(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(child.Stopped()) << client::FileTail(log);
  Drain(leaving);
  if (HasFatalFailure()) return;
  std::unique_ptr<ClusterKvStore> other;
  ASSERT_OK(OpenStore(&other));
  ASSERT_OK(other->Set(moved, "2", {}, &r));
  // The leaving server has applied the new view once it refuses the old
  // mapping's requests (which then go to the new server).
  std::string got;
  for (int i = 0; i < 2000; i++) {
    ASSERT_OK(stale->Get(moved, &got));
    if (got == "2") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(got, "2");
  child.Signal(SIGCONT);
  int ws = 0;
  ASSERT_TRUE(child.WaitFor(60000, &ws)) << client::FileTail(log);
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << "status " << ws << ":\n"
                                                     << client::FileTail(log);
  const std::string out = client::FileTail(log);
  EXPECT_NE(out.find("moved=1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("aborted\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("committed\n"), std::string::npos) << "a stale read committed:\n" << out;
}

// The active expiry on a cluster: a sweep of every vnode frees exactly the
// expired keys at the vnodes' servers, their backups too (after a server
// is killed the promoted copies count the same), and Count reports the
// keys with an expiry time. WAIT's answer: one backup a segment.
TEST_F(KvClusterTest, ActiveExpiryFreesExpiredKeysOnEveryCopy) {
  EXPECT_EQ(kv_->BackupCount(), 1u);
  const std::vector<std::string> keys = KeysOnEveryVnode("exp", 20);
  SetOptions expiring;
  expiring.expiry = SetOptions::Expiry::kSet;
  // Far off first (a sweep must free none of them, however slow the
  // machine), then moved close.
  expiring.expire_at_ms = NowMs() + 3600 * 1000;
  SetResult r;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_OK(kv_->Set(keys[i], "v", i % 2 == 0 ? expiring : SetOptions{}, &r));
  }
  const uint64_t due = (keys.size() + 1) / 2;
  KvCounts n;
  ASSERT_OK(kv_->Count(&n));
  EXPECT_EQ(n.keys, keys.size());
  EXPECT_EQ(n.expires, due);
  auto sweep = [&] {
    uint64_t reclaimed = 0, position = 0, next = 0;
    uint32_t vnode = 0;
    for (;;) {
      Status s = kv_->ReclaimExpired(vnode, position, &next, &reclaimed);
      if (s.code() == StatusCode::kOutOfRange) break;
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) break;
      position = next;
      if (position == 0) ++vnode;
    }
    EXPECT_EQ(vnode, kv_->client()->table_count());
    return reclaimed;
  };
  EXPECT_EQ(sweep(), 0u);
  expiring.expire_at_ms = NowMs() + 100;
  for (size_t i = 0; i < keys.size(); i += 2) {
    bool changed = false;
    ASSERT_OK(kv_->SetExpiry(keys[i], expiring.expire_at_ms, ExpiryCondition::kAlways, &changed));
    EXPECT_TRUE(changed);
  }
  while (NowMs() <= expiring.expire_at_ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(sweep(), due);
  ASSERT_OK(kv_->Count(&n));
  EXPECT_EQ(n.keys, keys.size() - due);
  EXPECT_EQ(n.expires, 0u);
  WaitReplicated();
  cluster_.KillServer(0);
  ASSERT_OK(kv_->Count(&n));  // waits for the promotions
  EXPECT_EQ(n.keys, keys.size() - due);
  EXPECT_EQ(n.expires, 0u);
  std::string got;
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(kv_->Get(keys[i], &got).code(), i % 2 == 0 ? StatusCode::kNotFound : StatusCode::kOk)
        << keys[i];
  }
}

// A flush removes keys as writes do: a transaction (a WATCH) that read a
// key the flush removed fails its commit.
TEST_F(KvClusterTest, AFlushFailsATransactionThatReadARemovedKey) {
  const std::vector<std::string> keys = KeysOnEveryVnode("flushed", 1);
  bool applied = false;
  ASSERT_OK(PutAll(kv_.get(), keys, "v", false, &applied));
  for (const std::string& key : keys) {
    std::vector<KvTxRead> read;
    ASSERT_OK(kv_->TxRead({key}, &read));
    ASSERT_TRUE(read[0].value.has_value());
    ASSERT_OK(kv_->Flush());
    EXPECT_EQ(kv_->TxCommit({{key, read[0].version}}, {}).code(), StatusCode::kAborted) << key;
    ASSERT_OK(PutAll(kv_.get(), keys, "v", false, &applied));
  }
  // An absent key read before the flush stays absent: no conflict.
  std::vector<KvTxRead> read;
  ASSERT_OK(kv_->TxRead({"never-set"}, &read));
  ASSERT_OK(kv_->Flush());
  ASSERT_OK(kv_->TxCommit({{"never-set", read[0].version}}, {}));
}

// A transaction deleting keys whose tables got their segments after the
// deleting client loaded its mapping (another client's first writes
// there) deletes them. It used to skip such a delete as "no segment, so no
// key" and commit the rest: the Redis comparison's RENAME left its source
// key in place on a young cluster.
TEST_F(KvClusterTest, ATransactionDeletesKeysOfTablesMadeAfterItsMapping) {
  std::unique_ptr<ClusterKvStore> deleter;
  ASSERT_OK(OpenStore(&deleter));  // before any table has a segment
  const std::vector<std::string> keys = KeysOnEveryVnode("young", 1);
  bool applied = false;
  ASSERT_OK(PutAll(kv_.get(), keys, "v", false, &applied));
  for (const std::string& key : keys) {
    std::vector<KvTxRead> read;
    ASSERT_OK(deleter->TxRead({key}, &read));
    ASSERT_TRUE(read[0].value.has_value()) << key;
    ASSERT_OK(deleter->TxCommit({{key, read[0].version}}, {{key, std::nullopt, 0}}));
    bool exists = true;
    ASSERT_OK(kv_->Exists(key, &exists));
    EXPECT_FALSE(exists) << key;
  }
}

// The coordinator (its own process) dies (_exit) at each phase of a
// multi-put's commit: afterwards every key holds the old value (before the
// decision) or the new one (from it on), none stays locked, and no log
// record is left in doubt.
TEST_F(KvClusterTest, CoordinatorKilledAtEachPhaseLeavesAllOrNone) {
  const std::vector<std::string> keys = KeysOnEveryVnode("coord", 2);
  std::string joined;
  for (const auto& k : keys) joined += (joined.empty() ? "" : ",") + k;
  bool applied = false;
  ASSERT_OK(PutAll(kv_.get(), keys, "start", false, &applied));
  WaitReplicated();
  std::string current = "start";
  int n = 0;
  for (const char* phase :
       {"lock-holder", "lock", "validate", "backup", "decide", "commit-one", "commit"}) {
    SCOPED_TRACE(phase);
    const std::string value = std::string("after-") + phase;
    const std::string log = cluster_.dir() + "/mput-" + std::to_string(n++) + ".log";
    client::ChildProcess child;
    ASSERT_OK(
        child.Start({PDPM_MPUT_BINARY, "--monitor", cluster_.monitor_address(), "--secret-file",
                     cluster_.secret_file(), "--keys", joined, "--value", value},
                    {std::string("PDPM_TX_CRASH_AT=") + phase + ":1"}, log));
    const int ws = child.Wait();
    ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 86) << "status " << ws << ":\n"
                                                        << client::FileTail(log);
    const bool decided = std::string_view(phase) == "decide" ||
                         std::string_view(phase) == "commit-one" ||
                         std::string_view(phase) == "commit";
    if (decided) current = value;
    // The reads wait for the locks to be resolved (lock timeout).
    std::vector<std::string> values;
    ASSERT_OK(GetAll(kv_.get(), keys, &values));
    for (size_t i = 0; i < keys.size(); i++) EXPECT_EQ(values[i], current) << keys[i];
    // Nothing stays locked: a write of every key goes through at once.
    const auto started = std::chrono::steady_clock::now();
    for (const auto& k : keys) {
      SetResult r;
      ASSERT_OK(kv_->Set(k, current, {}, &r));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
  }
  // An interrupted multi-put if none exist on fresh keys: all or none too.
  const std::vector<std::string> fresh = KeysOnEveryVnode("fresh", 1);
  std::string fresh_joined;
  for (const auto& k : fresh) fresh_joined += (fresh_joined.empty() ? "" : ",") + k;
  client::ChildProcess child;
  const std::string log = cluster_.dir() + "/mput-nx.log";
  ASSERT_OK(child.Start({PDPM_MPUT_BINARY, "--monitor", cluster_.monitor_address(), "--secret-file",
                         cluster_.secret_file(), "--keys", fresh_joined, "--value", "nx", "--nx"},
                        {"PDPM_TX_CRASH_AT=commit-one:1"}, log));
  const int ws = child.Wait();
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 86) << client::FileTail(log);
  std::vector<std::string> values;
  ASSERT_OK(GetAll(kv_.get(), fresh, &values));
  for (const auto& v : values) EXPECT_EQ(v, "nx");
  ASSERT_OK(PutAll(kv_.get(), fresh, "again", true, &applied));
  EXPECT_FALSE(applied);
  kv_.reset();
  std::vector<server::PmCheckReport> reports;
  StopServersAndExpectCleanPm(cluster_, &reports);
  for (size_t i = 0; i < reports.size(); i++) {
    for (const auto& seg : reports[i].segments) EXPECT_EQ(seg.tx_log.in_doubt, 0u) << i;
  }
}

// kill -9 of a server while writers run multi-puts across vnodes (two
// copies): every multi-put acknowledged is there whole afterwards (each
// writer's keys hold one generation, its last acknowledged or a later
// attempt's), readers never see a torn one, and every PM checks clean
// after the server's return.
TEST_F(KvClusterTest, ServerKilledDuringMultiPutsLosesNoneAndTearsNone) {
  constexpr int kWriters = 3;
  std::vector<std::vector<std::string>> keys(kWriters);
  for (int w = 0; w < kWriters; w++) keys[w] = KeysOnEveryVnode("k" + std::to_string(w) + "-", 2);
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  std::vector<int> acked(kWriters, -1);
  std::atomic<bool> stop{false};
  std::atomic<int> puts{0}, torn{0}, failures{0};
  auto value = [](int w, int g) {
    return Checked("w" + std::to_string(w) + "@" + std::to_string(g));
  };
  std::vector<std::thread> threads;
  threads.reserve(kWriters);
  for (int w = 0; w < kWriters; w++) {
    threads.emplace_back([&, w] {
      KvStore* kv = w == 0 ? kv_.get() : second.get();
      for (int g = 0; !stop; g++) {
        bool ok = false;
        Status s = PutAll(kv, keys[w], value(w, g), false, &ok);
        if (s.ok() && ok) {
          acked[w] = g;
        } else {
          failures++;
          ADD_FAILURE() << "writer " << w << ": " << s.ToString();
        }
        puts++;
      }
    });
  }
  threads.emplace_back([&] {
    while (!stop) {
      for (int w = 0; w < kWriters; w++) {
        std::vector<std::string> values;
        Status s = GetAll(kv_.get(), keys[w], &values);
        if (s.ok() && !OneGeneration(values)) {
          torn++;
          ADD_FAILURE() << "torn: " << values.front() << " / " << values.back();
        }
      }
    }
  });
  while (puts < 60) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  WaitReplicated();
  cluster_.KillServer(1);
  const int at_kill = puts.load();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (puts < at_kill + 150 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_GE(puts.load(), at_kill + 150) << "the load stalled after the kill";
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  auto check = [&] {
    for (int w = 0; w < kWriters; w++) {
      std::vector<std::string> values;
      ASSERT_OK(GetAll(kv_.get(), keys[w], &values));
      EXPECT_TRUE(OneGeneration(values)) << "writer " << w;
      // Writers are sequential: the last acknowledged multi-put, or the one
      // after it whose reply was lost.
      EXPECT_TRUE(values.front() == value(w, acked[w]) || values.front() == value(w, acked[w] + 1))
          << "writer " << w << " acked " << acked[w] << ", holds " << values.front();
    }
  };
  check();
  ASSERT_OK(cluster_.StartServer(1));
  WaitReplicated();
  check();
  kv_.reset();
  second.reset();
  StopServersAndExpectCleanPm(cluster_);
}

// Six vnodes on three servers: some server holds two or more, so the
// gateway's batches of its vnodes go as one request (0x414) and ship to
// each backup together (kReplicaApplyMany).
LocalClusterOptions ManyVnodesOptions() {
  LocalClusterOptions o = KvClusterOptions();
  o.tables = 6;
  o.pm_size = (8 * 64 + 2) * (1ull << 20);
  return o;
}

class KvClusterManyVnodesTest : public KvClusterTest {
 protected:
  KvClusterManyVnodesTest() : KvClusterTest(ManyVnodesOptions()) {}
};

// Batches of sets of every vnode (RunBatch) while a server is killed:
// every batch succeeds (waiting out the failover) and every acknowledged
// value is there afterwards, on the servers left and once the victim is
// back; the PM checks clean.
TEST_F(KvClusterManyVnodesTest, BatchesShippedTogetherSurviveAServerKill) {
  constexpr int kThreads = 2, kRounds = 150;
  std::vector<std::map<std::string, std::string>> last(kThreads);
  std::atomic<int> rounds{0}, failures{0};
  std::unique_ptr<ClusterKvStore> second;
  ASSERT_OK(OpenStore(&second));
  std::vector<std::vector<std::string>> keys(kThreads);
  for (int t = 0; t < kThreads; t++) keys[t] = KeysOnEveryVnode("m" + std::to_string(t) + "-", 4);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      KvStore* kv = t == 0 ? kv_.get() : second.get();
      for (int round = 0; round < kRounds; round++) {
        std::vector<std::string> values;
        std::vector<KvOp> ops(keys[t].size());
        for (size_t i = 0; i < ops.size(); i++) {
          values.push_back(
              Checked(std::string(50 + (static_cast<size_t>(round) * 7 + i) % 300, 'a' + t) +
                      std::to_string(round)));
          ops[i].kind = KvOp::Kind::kSet;
          ops[i].key = keys[t][i];
          ops[i].value = values.back();
        }
        kv->RunBatch(ops);
        for (size_t i = 0; i < ops.size(); i++) {
          if (ops[i].status.ok()) {
            last[t][keys[t][i]] = values[i];
          } else {
            failures++;
            ADD_FAILURE() << ops[i].key << ": " << ops[i].status.ToString();
          }
        }
        rounds++;
      }
    });
  }
  while (rounds.load() < 60) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  WaitReplicated();
  cluster_.KillServer(1);
  const int at_kill = rounds.load();
  for (auto& th : threads) th.join();
  EXPECT_LT(at_kill, kThreads * kRounds) << "the load ended before the kill";
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; t++) ExpectAll(kv_.get(), last[t]);
  ASSERT_OK(cluster_.StartServer(1));
  WaitReplicated();
  for (int t = 0; t < kThreads; t++) ExpectAll(kv_.get(), last[t]);
  kv_.reset();
  second.reset();
  StopServersAndExpectCleanPm(cluster_);
}

// The options of KvClusterTest with a test hook ("NAME=value") set for
// every server.
LocalClusterOptions KvClusterSlowFillOptions() {
  LocalClusterOptions o = KvClusterOptions();
  // A segment's first fill copies its used chunks (a few 4 MiB ones): at
  // 2 MiB/s it takes several seconds, past the clients' reply timeout (as
  // pinning a segment with an emulated RDMA device does).
  o.server_args = {"--resync-rate=2MiB"};
  return o;
}

class KvClusterSlowFillTest : public KvClusterTest {
 protected:
  KvClusterSlowFillTest() : KvClusterTest(KvClusterSlowFillOptions()) {}
};

// The first writes of every vnode, at once, while their segments are
// created and first filled for longer than a reply timeout: the servers
// refuse them (nothing done) until the segments take writes, and they
// succeed, even those that must not run twice.
TEST_F(KvClusterSlowFillTest, FirstWritesWaitForTheirSegments) {
  const uint32_t tables = kv_->client()->table_count();
  std::vector<std::string> keys(tables);
  for (int i = 0; std::any_of(keys.begin(), keys.end(), [](auto& k) { return k.empty(); }); i++) {
    const std::string key = "first-" + std::to_string(i);
    std::string& slot = keys[monitor::TableForKey(HashKey(key), tables) - 1];
    if (slot.empty()) slot = key;
  }
  const auto started = std::chrono::steady_clock::now();
  std::vector<Status> incr(tables), set(tables);
  std::vector<int64_t> counts(tables, 0);
  std::vector<SetResult> sets(tables);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < tables; t++) {
    threads.emplace_back([&, t] {
      incr[t] = kv_->IncrBy(keys[t], 5, &counts[t]);
      SetOptions o;
      o.want_old = true;
      set[t] = kv_->Set(keys[t] + "-s", "v", o, &sets[t]);
    });
  }
  for (auto& th : threads) th.join();
  const auto took = std::chrono::steady_clock::now() - started;
  // The fills' rate makes them outlast a reply timeout: the slow path ran.
  EXPECT_GT(
      took,
      std::chrono::milliseconds(
          client::TestClientOptions(cluster_.monitor_address(), cluster_.secret()).op_timeout_ms));
  for (uint32_t t = 0; t < tables; t++) {
    ASSERT_TRUE(incr[t].ok()) << keys[t] << ": " << incr[t].ToString();
    EXPECT_EQ(counts[t], 5) << keys[t];
    ASSERT_TRUE(set[t].ok()) << keys[t] << ": " << set[t].ToString();
    EXPECT_TRUE(sets[t].applied);
    EXPECT_FALSE(sets[t].old_value.has_value());
  }
  WaitReplicated();
  std::string v;
  for (uint32_t t = 0; t < tables; t++) {
    ASSERT_OK(kv_->Get(keys[t], &v));
    EXPECT_EQ(v, "5");
  }
}

LocalClusterOptions KvClusterOptionsWithHook(const std::string& hook) {
  LocalClusterOptions o = KvClusterOptions();
  o.server_env = {hook};
  return o;
}

// Every server's promotions fail for a second and a half from its first,
// as one whose decision holder does not answer in time does; the view
// settles meanwhile.
class KvClusterFailedPromotionTest : public KvClusterTest {
 protected:
  KvClusterFailedPromotionTest()
      : KvClusterTest(KvClusterOptionsWithHook("PDPM_TEST_REFUSE_PROMOTIONS_MS=1500")) {}
};

// The killed server's segments are promoted at the others, whose attempts
// fail until the view no longer changes; yet every key is served again: a
// failed promotion is tried again at the next heartbeat.
TEST_F(KvClusterFailedPromotionTest, AFailedPromotionIsTriedAgainWithoutANewView) {
  const std::vector<std::string> keys = KeysOnEveryVnode("p", 2);
  for (const auto& key : keys) {
    SetResult r;
    ASSERT_OK(kv_->Set(key, Checked(key), {}, &r));
  }
  WaitReplicated();
  cluster_.KillServer(1);
  for (const auto& key : keys) {
    std::string value;
    Status s = kv_->Get(key, &value);
    ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
    EXPECT_EQ(value, Checked(key));
  }
  bool refused = false;
  for (int i : {0, 2}) {
    std::ifstream log(cluster_.server_log(i));
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    refused |= text.find("PDPM_TEST_REFUSE_PROMOTIONS_MS") != std::string::npos;
  }
  EXPECT_TRUE(refused) << "no promotion was refused: the test proves nothing";
  ASSERT_OK(cluster_.StartServer(1));
  WaitReplicated();
  kv_.reset();
  StopServersAndExpectCleanPm(cluster_);
}

// Every server dies once the first part of a table segment's commit, its
// vnode's, reached the segment's backup.
class KvClusterExitAfterPartTest : public KvClusterTest {
 protected:
  KvClusterExitAfterPartTest()
      : KvClusterTest(KvClusterOptionsWithHook("PDPM_TEST_TX_EXIT_AFTER_PART=1")) {}
};

// A transaction that sets a key and puts an object of the same table
// segment: its commit there is two mutations (the vnode's, then the object
// table's). The segment's primary, the decision holder, dies between their
// shipments: the backup's BACKUP record is then decided but not applied,
// and its promotion applies the whole of it — the key and the object.
TEST_F(KvClusterExitAfterPartTest, PrimaryDyingBetweenAKeyAndAnObjectOfOneSegmentLosesNeither) {
  client::Client* c = kv_->client();
  const std::string key = "both";
  bool applied = false;
  ASSERT_OK(kv_->MultiPut({{key, "old"}}, false, &applied));  // the table's segment and vnode
  const uint32_t table = monitor::TableForKey(HashKey(key), c->table_count());
  dsm::ObjectId id{7, 0};
  for (uint64_t lo = 1; monitor::TableForObject(id.hi, id.lo, c->table_count()) != table; lo++) {
    id.lo = lo;
  }
  ASSERT_OK(c->PutObj(id, "old"));
  WaitReplicated();
  auto owner_of_table = [&] {
    const v1::GetMappingResponse m = Mapping();
    for (const auto& t : m.tables()) {
      if (t.table() == table) return t.server_id();
    }
    return 0u;
  };
  const uint32_t owner = owner_of_table();
  int victim = -1;
  for (int i = 0; i < 3; i++) {
    if (IdOf(i) == owner) victim = i;
  }
  ASSERT_GE(victim, 0);
  ASSERT_OK(c->RefreshMapping());  // names the table's segment
  std::unique_ptr<client::Transaction> tx;
  ASSERT_OK(c->TxBegin(&tx));
  ASSERT_OK(tx->KvPut(table, HashKey(key), key, "new", false));
  ASSERT_OK(tx->PutObj(id, "new"));
  Status s = tx->Commit();
  EXPECT_FALSE(s.ok()) << "the holder died while committing";
  cluster_.KillServer(victim);  // reaps it
  // The table fails over to its backup.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (owner_of_table() == owner && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(owner_of_table(), owner) << "the table did not fail over";
  std::unique_ptr<ClusterKvStore> fresh;
  ASSERT_OK(OpenStore(&fresh));
  std::string value, object;
  ASSERT_OK(fresh->Get(key, &value));
  ASSERT_OK(fresh->client()->GetObj(id, &object));
  EXPECT_EQ(value, "new");
  EXPECT_EQ(object, "new") << "the promoted backup lost the object of a decided transaction";
  ASSERT_OK(cluster_.StartServer(victim));
  WaitReplicated();
  kv_.reset();
  fresh.reset();
  StopServersAndExpectCleanPm(cluster_);
}

}  // namespace
}  // namespace pdpm::pdkvs
