// The distributed pDKVS against a real cluster: a pdpm-monitor and three
// pdpm-server processes (client/cluster_harness.h), two copies of every
// segment.
#include "pdkvs/cluster/cluster_kv_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "client/cluster_harness.h"
#include "common/crc32c.h"
#include "monitor/monitor_client.h"
#include "pdkvs/item.h"
#include "server/fsck.h"
#include "server/kv_protocol.h"

namespace pdpm::pdkvs {
namespace {

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
  return colon != std::string::npos && v.substr(0, colon) == std::to_string(Crc32c(v.substr(colon + 1)));
}

LocalClusterOptions KvClusterOptions() {
  LocalClusterOptions o;
  o.replicas = 2;
  o.tables = 4;
  o.pm_size = (8 * 128 + 2) * (1ull << 20);  // backups and re-replication
  o.heartbeat_ms = 50;
  o.suspect_ms = 250;
  o.down_ms = 500;
  return o;
}

class KvClusterTest : public ::testing::Test {
 protected:
  KvClusterTest() : cluster_(KvClusterOptions()) {}

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

  void StopAndCheckAll() {
    for (int i = 0; i < 3; i++) {
      if (cluster_.server(i).running()) {
        Status s = cluster_.StopServer(i);
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
      server::PmCheckReport report;
      Status s = server::CheckServerPm(cluster_.pm_path(i), &report);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(report.clean()) << report.ToString();
    }
  }

  // Every key of `want` reads back its value.
  void ExpectAll(KvStore* kv, const std::map<std::string, std::string>& want) {
    std::vector<std::string_view> keys;
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

  LocalCluster cluster_;
  std::unique_ptr<ClusterKvStore> kv_;
};

TEST_F(KvClusterTest, EveryOperationAndItsErrors) {
  KvStore* kv = kv_.get();
  std::string v;
  SetResult r;
  EXPECT_EQ(kv->Get("absent", &v).code(), StatusCode::kNotFound);
  ASSERT_TRUE(kv->Set("a", "1", {}, &r).ok());
  EXPECT_TRUE(r.applied);
  ASSERT_TRUE(kv->Get("a", &v).ok());
  EXPECT_EQ(v, "1");
  // Conditions and the old value.
  SetOptions nx{.condition = SetOptions::Condition::kIfAbsent, .want_old = true};
  ASSERT_TRUE(kv->Set("a", "2", nx, &r).ok());
  EXPECT_FALSE(r.applied);
  EXPECT_EQ(r.old_value, "1");
  SetOptions xx{.condition = SetOptions::Condition::kIfPresent};
  ASSERT_TRUE(kv->Set("b", "2", xx, &r).ok());
  EXPECT_FALSE(r.applied);
  SetOptions get{.want_old = true};
  ASSERT_TRUE(kv->Set("a", "3", get, &r).ok());
  EXPECT_TRUE(r.applied);
  EXPECT_EQ(r.old_value, "1");
  // Empty key and value are keys and values.
  ASSERT_TRUE(kv->Set("", "", {}, &r).ok());
  ASSERT_TRUE(kv->Get("", &v).ok());
  EXPECT_EQ(v, "");
  // Delete, GetDelete, Exists.
  bool exists = false;
  ASSERT_TRUE(kv->Exists("a", &exists).ok());
  EXPECT_TRUE(exists);
  ASSERT_TRUE(kv->GetDelete("a", &v).ok());
  EXPECT_EQ(v, "3");
  EXPECT_EQ(kv->GetDelete("a", &v).code(), StatusCode::kNotFound);
  ASSERT_TRUE(kv->Exists("a", &exists).ok());
  EXPECT_FALSE(exists);
  EXPECT_EQ(kv->Delete("a").code(), StatusCode::kNotFound);
  ASSERT_TRUE(kv->Delete("").ok());
  // Integers.
  int64_t n = 0;
  ASSERT_TRUE(kv->IncrBy("n", 5, &n).ok());
  EXPECT_EQ(n, 5);
  ASSERT_TRUE(kv->IncrBy("n", -7, &n).ok());
  EXPECT_EQ(n, -2);
  ASSERT_TRUE(kv->Set("s", "x1", {}, &r).ok());
  EXPECT_EQ(kv->IncrBy("s", 1, &n).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(kv->Set("big", std::to_string(INT64_MAX), {}, &r).ok());
  EXPECT_EQ(kv->IncrBy("big", 1, &n).code(), StatusCode::kOutOfRange);
  // Strings.
  uint64_t len = 0;
  ASSERT_TRUE(kv->Append("s", "yz", &len).ok());
  EXPECT_EQ(len, 4u);
  ASSERT_TRUE(kv->GetRange("s", 1, -2, &v).ok());
  EXPECT_EQ(v, "1y");
  ASSERT_TRUE(kv->GetRange("absent", 0, -1, &v).ok());
  EXPECT_EQ(v, "");
  ASSERT_TRUE(kv->SetRange("p", 3, "ab", &len).ok());
  EXPECT_EQ(len, 5u);
  ASSERT_TRUE(kv->Get("p", &v).ok());
  EXPECT_EQ(v, std::string("\0\0\0ab", 5));
  // Limits: nothing changes.
  const std::string long_key(kMaxKeySize + 1, 'k');
  EXPECT_EQ(kv->Set(long_key, "v", {}, &r).code(), StatusCode::kTooLarge);
  EXPECT_EQ(kv->Get(long_key, &v).code(), StatusCode::kTooLarge);
  const std::string huge(server::kKvMaxValueSize + 1, 'v');
  EXPECT_EQ(kv->Set("p", huge, {}, &r).code(), StatusCode::kTooLarge);
  EXPECT_EQ(kv->SetRange("p", server::kKvMaxValueSize, "x", &len).code(),
            StatusCode::kOutOfRange);
  ASSERT_TRUE(kv->Get("p", &v).ok());
  EXPECT_EQ(v.size(), 5u);
  // Expiry.
  uint64_t at = 0;
  bool changed = false;
  SetOptions ex{.expiry = SetOptions::Expiry::kSet, .expire_at_ms = NowMs() + 400};
  ASSERT_TRUE(kv->Set("e", "1", ex, &r).ok());
  ASSERT_TRUE(kv->GetExpiry("e", &at).ok());
  EXPECT_EQ(at, ex.expire_at_ms);
  SetOptions keep{.expiry = SetOptions::Expiry::kKeep};
  ASSERT_TRUE(kv->Set("e", "2", keep, &r).ok());
  ASSERT_TRUE(kv->GetExpiry("e", &at).ok());
  EXPECT_EQ(at, ex.expire_at_ms);
  ASSERT_TRUE(kv->SetExpiry("p", NowMs() + 60000, &changed).ok());
  EXPECT_TRUE(changed);
  ASSERT_TRUE(kv->SetExpiry("p", 0, &changed).ok());
  EXPECT_TRUE(changed);
  ASSERT_TRUE(kv->GetExpiry("p", &at).ok());
  EXPECT_EQ(at, 0u);
  ASSERT_TRUE(kv->SetExpiry("absent", NowMs() + 1000, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(kv->GetExpiry("absent", &at).code(), StatusCode::kNotFound);
  ASSERT_TRUE(kv->SetExpiry("s", NowMs() - 1, &changed).ok());  // the past deletes
  EXPECT_TRUE(changed);
  EXPECT_EQ(kv->Get("s", &v).code(), StatusCode::kNotFound);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(kv->Get("e", &v).code(), StatusCode::kNotFound);
  ASSERT_TRUE(kv->Exists("e", &exists).ok());
  EXPECT_FALSE(exists);
}

TEST_F(KvClusterTest, MultiKeyOperationsScanCountAndFlushSpanVnodes) {
  KvStore* kv = kv_.get();
  std::map<std::string, std::string> want;
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  for (int i = 0; i < 300; i++) want["key" + std::to_string(i)] = "value" + std::to_string(i);
  for (const auto& [k, v] : want) pairs.emplace_back(k, v);
  bool applied = false;
  ASSERT_TRUE(kv->MultiPut(pairs, /*if_none_exist=*/false, &applied).ok());
  EXPECT_TRUE(applied);
  ExpectAll(kv, want);
  // MSETNX: one existing key stops all.
  std::vector<std::pair<std::string_view, std::string_view>> nx = {{"new1", "x"}, {"key7", "y"}};
  ASSERT_TRUE(kv->MultiPut(nx, /*if_none_exist=*/true, &applied).ok());
  EXPECT_FALSE(applied);
  std::string v;
  EXPECT_EQ(kv->Get("new1", &v).code(), StatusCode::kNotFound);
  std::vector<std::optional<std::string>> got;
  ASSERT_TRUE(kv->MultiGet({"key1", "nope", "key2"}, &got).ok());
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
  uint64_t n = 0;
  ASSERT_TRUE(kv->Count(&n).ok());
  EXPECT_EQ(n, want.size());
  ASSERT_TRUE(kv->Flush().ok());
  ASSERT_TRUE(kv->Count(&n).ok());
  EXPECT_EQ(n, 0u);
  KvScanPage page;
  ASSERT_TRUE(kv->Scan(0, 100, &page).ok());
  EXPECT_TRUE(page.keys.empty());
  EXPECT_EQ(page.next_cursor, 0u);
}

// Several clients write at once: each key reads back its last acknowledged
// value, and increments of a shared counter are never lost.
TEST_F(KvClusterTest, ConcurrentWritersKeepTheirLastValues) {
  constexpr int kThreads = 4, kOps = 300;
  std::vector<std::map<std::string, std::string>> last(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::unique_ptr<ClusterKvStore> kv;
      if (!OpenStore(&kv).ok()) {
        failures++;
        return;
      }
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
  ASSERT_TRUE(kv_->Get("shared-counter", &v).ok());
  EXPECT_EQ(v, std::to_string(kThreads * ((kOps + 2) / 3)));
}

// kill -9 of a server under a write load: writes to its vnodes wait for the
// promotion of their backups and succeed there; no acknowledged write is
// lost; after its restart every PM checks clean.
TEST_F(KvClusterTest, KillDuringWritesLosesNothing) {
  constexpr int kThreads = 3, kOps = 500;
  std::vector<std::map<std::string, std::string>> last(kThreads);
  std::atomic<int> done_ops{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::unique_ptr<ClusterKvStore> kv;
      if (!OpenStore(&kv).ok()) {
        failures++;
        return;
      }
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
    ASSERT_TRUE(kv_->Scan(cursor, 100, &page).ok());
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
  ASSERT_TRUE(cluster_.StartServer(1).ok());
  WaitReplicated();
  for (int t = 0; t < kThreads; t++) ExpectAll(kv_.get(), last[t]);
  kv_.reset();
  StopAndCheckAll();
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
      o.expire_at_ms = NowMs() + 3600 * 1000;
    }
    ASSERT_TRUE(kv_->Set(key, want[key], o, &r).ok());
  }
  int64_t n = 0;
  ASSERT_TRUE(kv_->IncrBy("r0-counter", 41, &n).ok());
  want["r0-counter"] = "41";
  WaitReplicated();
  for (int i = 0; i < 3; i++) ASSERT_TRUE(cluster_.StopServer(i).ok());
  for (int i = 0; i < 3; i++) ASSERT_TRUE(cluster_.StartServer(i).ok());
  ExpectAll(kv_.get(), want);
  uint64_t at = 0;
  ASSERT_TRUE(kv_->GetExpiry("r10", &at).ok());
  EXPECT_GT(at, NowMs());
  WaitReplicated();
  for (int i = 0; i < 3; i++) cluster_.KillServer(i);
  for (int i = 0; i < 3; i++) ASSERT_TRUE(cluster_.StartServer(i).ok());
  ExpectAll(kv_.get(), want);
  uint64_t count = 0;
  ASSERT_TRUE(kv_->Count(&count).ok());
  EXPECT_EQ(count, want.size());
  kv_.reset();
  StopAndCheckAll();
}

}  // namespace
}  // namespace pdpm::pdkvs
