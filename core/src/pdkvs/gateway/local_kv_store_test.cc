#include "pdkvs/gateway/local_kv_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <set>

#include "pdkvs/gateway/commands.h"

namespace pdpm::pdkvs {
namespace {

class LocalKvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Real PM where the environment has some (the hardware guest), else a
    // file in memory: on a disk every persist is an msync.
    const char* fsdax = getenv("PDPM_TEST_FSDAX_DIR");  // NOLINT(concurrency-mt-unsafe)
    const std::string dir = fsdax != nullptr && *fsdax != '\0' ? fsdax
                            : access("/dev/shm", W_OK) == 0    ? "/dev/shm"
                                                               : ::testing::TempDir();
    path_ = dir + "/local_kv_store_" + std::to_string(getpid()) + ".pm";
    unlink(path_.c_str());
    Open();
  }
  void TearDown() override {
    store_.reset();
    unlink(path_.c_str());
  }
  void Open() {
    store_.reset();
    LocalKvStoreOptions o;
    o.create_size = 64ull << 20;
    o.vnodes = 4;
    o.clock_ms = [this] { return now_ms_.load(); };
    Status s = LocalKvStore::Open(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::string Get(std::string_view key) {
    std::string v;
    Status s = store_->Get(key, &v);
    return s.ok() ? v : "<" + std::string(StatusCodeName(s.code())) + ">";
  }
  std::string path_;
  std::atomic<uint64_t> now_ms_{1000000};
  std::unique_ptr<LocalKvStore> store_;
};

TEST_F(LocalKvStoreTest, SetConditionsAndOldValue) {
  SetOptions o;
  SetResult r;
  ASSERT_TRUE(store_->Set("k", "v1", o, &r).ok());
  EXPECT_TRUE(r.applied);
  o.condition = SetOptions::Condition::kIfAbsent;
  ASSERT_TRUE(store_->Set("k", "v2", o, &r).ok());
  EXPECT_FALSE(r.applied);
  o.condition = SetOptions::Condition::kIfPresent;
  o.want_old = true;
  ASSERT_TRUE(store_->Set("k", "v3", o, &r).ok());
  EXPECT_TRUE(r.applied);
  EXPECT_EQ(r.old_value, "v1");
  ASSERT_TRUE(store_->Set("absent", "x", o, &r).ok());
  EXPECT_FALSE(r.applied);
  EXPECT_EQ(Get("absent"), "<not_found>");
  EXPECT_EQ(Get("k"), "v3");
}

TEST_F(LocalKvStoreTest, IncrAppendRanges) {
  int64_t v = 0;
  ASSERT_TRUE(store_->IncrBy("n", 5, &v).ok());
  ASSERT_TRUE(store_->IncrBy("n", -7, &v).ok());
  EXPECT_EQ(v, -2);
  EXPECT_EQ(Get("n"), "-2");
  SetOptions o;
  SetResult r;
  ASSERT_TRUE(store_->Set("big", "9223372036854775807", o, &r).ok());
  EXPECT_EQ(store_->IncrBy("big", 1, &v).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(store_->Set("s", "abc", o, &r).ok());
  EXPECT_EQ(store_->IncrBy("s", 1, &v).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->Set("s", "01", o, &r).ok());
  EXPECT_EQ(store_->IncrBy("s", 1, &v).code(), StatusCode::kInvalidArgument);
  uint64_t len = 0;
  ASSERT_TRUE(store_->Append("a", "hello", &len).ok());
  ASSERT_TRUE(store_->Append("a", " world", &len).ok());
  EXPECT_EQ(len, 11u);
  std::string out;
  ASSERT_TRUE(store_->GetRange("a", -5, -1, &out).ok());
  EXPECT_EQ(out, "world");
  ASSERT_TRUE(store_->GetRange("a", 5, 2, &out).ok());
  EXPECT_EQ(out, "");
  ASSERT_TRUE(store_->SetRange("p", 3, "xy", &len).ok());
  EXPECT_EQ(Get("p"), std::string("\0\0\0xy", 5));
  EXPECT_EQ(store_->SetRange("p", kMaxValueSize, "x", &len).code(), StatusCode::kOutOfRange);
}

TEST_F(LocalKvStoreTest, ExpiryFollowsTheClock) {
  SetOptions o;
  o.expiry = SetOptions::Expiry::kSet;
  o.expire_at_ms = now_ms_ + 100;
  SetResult r;
  ASSERT_TRUE(store_->Set("t", "v", o, &r).ok());
  uint64_t at = 0;
  ASSERT_TRUE(store_->GetExpiry("t", &at).ok());
  EXPECT_EQ(at, now_ms_ + 100);
  // Replacing with kKeep keeps it; a plain set clears it.
  o.expiry = SetOptions::Expiry::kKeep;
  ASSERT_TRUE(store_->Set("t", "w", o, &r).ok());
  ASSERT_TRUE(store_->GetExpiry("t", &at).ok());
  EXPECT_EQ(at, now_ms_ + 100);
  bool changed = false;
  ASSERT_TRUE(store_->SetExpiry("t", 0, &changed).ok());
  EXPECT_TRUE(changed);
  ASSERT_TRUE(store_->SetExpiry("t", now_ms_ + 50, &changed).ok());
  now_ms_ += 60;
  EXPECT_EQ(Get("t"), "<not_found>");
  ASSERT_TRUE(store_->SetExpiry("t", now_ms_ + 50, &changed).ok());
  EXPECT_FALSE(changed);
}

TEST_F(LocalKvStoreTest, MultiPutScanFlushAndReopen) {
  bool applied = false;
  std::vector<std::string> keys;
  keys.reserve(3000);
  for (int i = 0; i < 3000; ++i) keys.push_back("key:" + std::to_string(i));
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(keys.size());
  for (const auto& k : keys) pairs.emplace_back(k, k);
  ASSERT_TRUE(store_->MultiPut(pairs, false, &applied).ok());
  EXPECT_TRUE(applied);
  ASSERT_TRUE(store_->MultiPut({{"new", "1"}, {"key:1", "x"}}, true, &applied).ok());
  EXPECT_FALSE(applied);
  EXPECT_EQ(Get("new"), "<not_found>");
  Open();  // everything acknowledged survives a reopen
  std::set<std::string> seen;
  uint64_t cursor = 0;
  do {
    KvScanPage page;
    ASSERT_TRUE(store_->Scan(cursor, 100, &page).ok());
    for (auto& k : page.keys) EXPECT_TRUE(seen.insert(k).second) << k;
    cursor = page.next_cursor;
  } while (cursor != 0);
  EXPECT_EQ(seen, std::set<std::string>(keys.begin(), keys.end()));
  std::vector<std::optional<std::string>> values;
  ASSERT_TRUE(store_->MultiGet({"key:7", "nope"}, &values).ok());
  EXPECT_EQ(values[0], "key:7");
  EXPECT_FALSE(values[1].has_value());
  ASSERT_TRUE(store_->Flush().ok());
  uint64_t n = 1;
  ASSERT_TRUE(store_->Count(&n).ok());
  EXPECT_EQ(n, 0u);
}

TEST(GlobMatch, RedisPatterns) {
  EXPECT_TRUE(GlobMatch("key:*", "key:12"));
  EXPECT_TRUE(GlobMatch("h?llo", "hello"));
  EXPECT_TRUE(GlobMatch("h[ae]llo", "hallo"));
  EXPECT_FALSE(GlobMatch("h[^e]llo", "hello"));
  EXPECT_TRUE(GlobMatch("h[a-b]llo", "hbllo"));
  EXPECT_TRUE(GlobMatch("a\\*", "a*"));
  EXPECT_FALSE(GlobMatch("a\\*", "ab"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("MAX*", "maxmemory", true));
}

}  // namespace
}  // namespace pdpm::pdkvs
