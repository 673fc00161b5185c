#include "pdkvs/gateway/local_kv_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <set>

#include "pdkvs/gateway/commands.h"
#include "pdkvs/gateway/tx_kv_store.h"
#include "pdkvs/tx_overlay.h"
#include "pdkvs/vnode_ops.h"

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
  ASSERT_TRUE(store_->SetExpiry("t", 0, ExpiryCondition::kAlways, &changed).ok());
  EXPECT_TRUE(changed);
  ASSERT_TRUE(store_->SetExpiry("t", now_ms_ + 50, ExpiryCondition::kAlways, &changed).ok());
  now_ms_ += 60;
  EXPECT_EQ(Get("t"), "<not_found>");
  ASSERT_TRUE(store_->SetExpiry("t", now_ms_ + 50, ExpiryCondition::kAlways, &changed).ok());
  EXPECT_FALSE(changed);
}

// EXPIRE's NX XX GT LT, on a string and on a hash alike (one step each).
TEST_F(LocalKvStoreTest, ConditionalExpiry) {
  SetOptions o;
  SetResult r;
  ASSERT_TRUE(store_->Set("s", "v", o, &r).ok());
  uint64_t n = 0;
  const std::pair<std::string_view, std::string_view> field{"f", "v"};
  ASSERT_TRUE(store_->HashSet("h", {&field, 1}, false, &n).ok());
  for (std::string_view key : {"s", "h"}) {
    SCOPED_TRACE(key);
    auto set = [&](uint64_t at, ExpiryCondition condition) {
      bool changed = false;
      Status s = store_->SetExpiry(key, at, condition, &changed);
      EXPECT_TRUE(s.ok()) << s.ToString();
      return changed;
    };
    auto expiry = [&] {
      uint64_t at = 0;
      EXPECT_TRUE(store_->GetExpiry(key, &at).ok());
      return at;
    };
    const uint64_t t = now_ms_ + 1000;
    // No expiry: XX, GT and XX LT refuse; LT (none is infinite) and NX set.
    EXPECT_FALSE(set(t, ExpiryCondition::kIfSome));
    EXPECT_FALSE(set(t, ExpiryCondition::kIfLater));
    EXPECT_FALSE(set(t, ExpiryCondition::kIfSomeEarlier));
    EXPECT_EQ(expiry(), 0u);
    EXPECT_TRUE(set(t, ExpiryCondition::kIfEarlier));
    EXPECT_EQ(expiry(), t);
    ASSERT_TRUE(set(0, ExpiryCondition::kAlways));
    EXPECT_TRUE(set(t, ExpiryCondition::kIfNone));
    EXPECT_EQ(expiry(), t);
    // An expiry: NX refuses, GT wants later, LT and XX LT earlier, XX any.
    EXPECT_FALSE(set(t + 5, ExpiryCondition::kIfNone));
    EXPECT_FALSE(set(t, ExpiryCondition::kIfLater));
    EXPECT_TRUE(set(t + 5, ExpiryCondition::kIfLater));
    EXPECT_FALSE(set(t + 5, ExpiryCondition::kIfEarlier));
    EXPECT_FALSE(set(t + 6, ExpiryCondition::kIfSomeEarlier));
    EXPECT_TRUE(set(t + 4, ExpiryCondition::kIfSomeEarlier));
    EXPECT_TRUE(set(t + 3, ExpiryCondition::kIfEarlier));
    EXPECT_TRUE(set(t + 9, ExpiryCondition::kIfSome));
    EXPECT_EQ(expiry(), t + 9);
    // A time in the past that the condition lets through deletes the key.
    EXPECT_FALSE(set(1, ExpiryCondition::kIfLater));
    EXPECT_TRUE(set(1, ExpiryCondition::kIfEarlier));
    KvType type = KvType::kString;
    ASSERT_TRUE(store_->Type(key, &type).ok());
    EXPECT_EQ(type, KvType::kNone);
    EXPECT_FALSE(set(t, ExpiryCondition::kAlways));  // absent
  }
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
  KvCounts n{1, 1};
  ASSERT_TRUE(store_->Count(&n).ok());
  EXPECT_EQ(n.keys, 0u);
  EXPECT_EQ(n.expires, 0u);
  EXPECT_EQ(store_->BackupCount(), 0u);
}

// The active expiry: a sweep of every vnode (ReclaimExpired) frees the
// expired keys, and only those, without any other access to them; Count
// reports keys and keys with an expiry time before and after. The
// gateway's sweeper does the same in the background.
TEST_F(LocalKvStoreTest, ActiveExpiryFreesExpiredKeysOnly) {
  SetResult r;
  SetOptions expiring;
  expiring.expiry = SetOptions::Expiry::kSet;
  expiring.expire_at_ms = now_ms_ + 1000;
  for (int i = 0; i < 300; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(store_->Set(key, "v", i % 2 == 0 ? expiring : SetOptions{}, &r).ok());
  }
  KvCounts n;
  ASSERT_TRUE(store_->Count(&n).ok());
  EXPECT_EQ(n.keys, 300u);
  EXPECT_EQ(n.expires, 150u);
  auto sweep = [&] {
    uint64_t reclaimed = 0;
    uint32_t vnode = 0;
    uint64_t position = 0, next = 0;
    for (;;) {
      Status s = store_->ReclaimExpired(vnode, position, &next, &reclaimed);
      if (s.code() == StatusCode::kOutOfRange) break;
      EXPECT_TRUE(s.ok()) << s.ToString();
      position = next;
      if (position == 0) ++vnode;
    }
    EXPECT_EQ(vnode, store_->vnodes());
    return reclaimed;
  };
  EXPECT_EQ(sweep(), 0u);
  now_ms_ += 1000;
  EXPECT_EQ(sweep(), 150u);
  ASSERT_TRUE(store_->Count(&n).ok());
  EXPECT_EQ(n.keys, 150u);
  EXPECT_EQ(n.expires, 0u);
  EXPECT_EQ(Get("k1"), "v");
  EXPECT_EQ(Get("k0"), "<not_found>");
  uint64_t next = 0, reclaimed = 0;
  EXPECT_EQ(store_->ReclaimExpired(store_->vnodes(), 0, &next, &reclaimed).code(),
            StatusCode::kOutOfRange);
  // Reopened, the counts are rebuilt from PM.
  Open();
  ASSERT_TRUE(store_->Count(&n).ok());
  EXPECT_EQ(n.keys, 150u);
  EXPECT_EQ(n.expires, 0u);
}

TEST_F(LocalKvStoreTest, TransactionsCheckVersions) {
  SetOptions o;
  SetResult r;
  ASSERT_TRUE(store_->Set("a", "1", o, &r).ok());
  std::vector<KvTxRead> reads;
  ASSERT_TRUE(store_->TxRead({"a", "b"}, &reads).ok());
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[0].value, "1");
  EXPECT_FALSE(reads[1].value.has_value());
  // Unchanged: the writes apply, a put with its expiry and a delete.
  const KvVersion read_a = reads[0].version;
  ASSERT_TRUE(store_
                  ->TxCommit({{"a", read_a}, {"b", reads[1].version}},
                             {{"a", std::nullopt, 0}, {"b", "2", now_ms_ + 100}})
                  .ok());
  EXPECT_EQ(Get("a"), "<not_found>");
  uint64_t at = 0;
  ASSERT_TRUE(store_->GetExpiry("b", &at).ok());
  EXPECT_EQ(at, now_ms_ + 100);
  // Any write since the read — even of the same value — is a conflict,
  // and nothing of the transaction applies.
  ASSERT_TRUE(store_->TxRead({"b"}, &reads).ok());
  ASSERT_TRUE(store_->Set("b", "2", o, &r).ok());
  EXPECT_EQ(store_->TxCommit({{"b", reads[0].version}}, {{"c", "x", 0}}).code(),
            StatusCode::kAborted);
  EXPECT_EQ(Get("c"), "<not_found>");
  // A flush changes every version.
  ASSERT_TRUE(store_->TxRead({"c"}, &reads).ok());
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(store_->TxCommit({{"c", reads[0].version}}, {}).code(), StatusCode::kAborted);
}

// The commands of a transaction run on a TxOverlay exactly as on a vnode;
// what they leave is what the commit writes.
TEST_F(LocalKvStoreTest, OverlayRunsTheVnodeOperations) {
  SetOptions o;
  o.expiry = SetOptions::Expiry::kSet;
  o.expire_at_ms = now_ms_ + 1000;
  SetResult r;
  ASSERT_TRUE(store_->Set("n", "41", o, &r).ok());
  int reads = 0;
  TxOverlay overlay(
      [&](std::string_view key, KvTxRead* out) {
        ++reads;
        std::vector<KvTxRead> one;
        PDPM_RETURN_IF_ERROR(store_->TxRead({key}, &one));
        *out = one.front();
        return Status::OK();
      },
      now_ms_);
  TxKvStore tx(&overlay, store_.get(), now_ms_);
  int64_t v = 0;
  ASSERT_TRUE(tx.IncrBy("n", 1, &v).ok());
  EXPECT_EQ(v, 42);
  EXPECT_EQ(tx.IncrBy("n", INT64_MAX, &v).code(), StatusCode::kOutOfRange);
  uint64_t at = 0;
  ASSERT_TRUE(tx.GetExpiry("n", &at).ok());
  EXPECT_EQ(at, now_ms_ + 1000);  // an increment keeps the expiry
  uint64_t len = 0;
  ASSERT_TRUE(tx.Append("s", "ab", &len).ok());
  ASSERT_TRUE(tx.SetRange("s", 4, "z", &len).ok());
  std::string value;
  ASSERT_TRUE(tx.Get("s", &value).ok());
  EXPECT_EQ(value, std::string("ab\0\0z", 5));
  bool changed = false;
  ASSERT_TRUE(tx.SetExpiry("s", now_ms_ - 1, ExpiryCondition::kAlways, &changed)
                  .ok());  // in the past: gone
  EXPECT_TRUE(changed);
  EXPECT_EQ(tx.Get("s", &value).code(), StatusCode::kNotFound);
  EXPECT_EQ(tx.Flush().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(reads, 2);        // each key read once
  EXPECT_EQ(Get("n"), "41");  // nothing reached the store
  const auto& entries = overlay.entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries.at("n").value, "42");
  EXPECT_EQ(entries.at("n").expire_at_ms, now_ms_ + 1000);
  EXPECT_TRUE(entries.at("s").written);
  EXPECT_FALSE(entries.at("s").value.has_value());
}

// Hashes through the store: every operation, WRONGTYPE both ways, a hash
// as a key (TYPE, DEL, expiry, SET over it, a transaction's read), and
// everything found again after a reopen.
TEST_F(LocalKvStoreTest, Hashes) {
  using Fields = std::vector<std::pair<std::string_view, std::string_view>>;
  uint64_t n = 0;
  ASSERT_TRUE(store_->HashSet("h", Fields{{"a", "1"}, {"b", "2"}, {"a", "3"}}, false, &n).ok());
  EXPECT_EQ(n, 2u);  // a given twice: the last value, counted once
  ASSERT_TRUE(store_->HashSet("h", Fields{{"b", "x"}}, true, &n).ok());
  EXPECT_EQ(n, 0u);
  std::vector<std::optional<std::string>> values;
  std::vector<std::string_view> names = {"a", "b", "zz"};
  ASSERT_TRUE(store_->HashGet("h", names, &values).ok());
  EXPECT_EQ(values, (std::vector<std::optional<std::string>>{"3", "2", std::nullopt}));
  ASSERT_TRUE(store_->HashGet("absent", names, &values).ok());
  EXPECT_EQ(values, (std::vector<std::optional<std::string>>(3)));
  int64_t i = 0;
  ASSERT_TRUE(store_->HashIncrBy("h", "a", 4, &i).ok());
  EXPECT_EQ(i, 7);
  EXPECT_EQ(store_->HashIncrBy("h", "a", INT64_MAX, &i).code(), StatusCode::kOutOfRange);
  std::string f;
  ASSERT_TRUE(store_->HashIncrByFloat("h", "fl", "1.5", &f).ok());
  ASSERT_TRUE(store_->HashIncrByFloat("h", "fl", "1e1", &f).ok());
  EXPECT_EQ(f, "11.5");
  ASSERT_TRUE(store_->HashSet("h", Fields{{"b", "text"}}, false, &n).ok());
  EXPECT_EQ(store_->HashIncrByFloat("h", "b", "1", &f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->HashIncrByFloat("h", "fl", "x", &f).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->HashLength("h", &n).ok());
  EXPECT_EQ(n, 3u);
  KvType type = KvType::kNone;
  ASSERT_TRUE(store_->Type("h", &type).ok());
  EXPECT_EQ(type, KvType::kHash);

  // WRONGTYPE both ways, nothing changed.
  SetOptions o;
  SetResult r;
  ASSERT_TRUE(store_->Set("s", "v", o, &r).ok());
  EXPECT_TRUE(IsWrongType(store_->HashSet("s", Fields{{"a", "1"}}, false, &n)));
  EXPECT_TRUE(IsWrongType(store_->HashLength("s", &n)));
  EXPECT_TRUE(IsWrongType(store_->Get("h", &f)));
  EXPECT_TRUE(IsWrongType(store_->IncrBy("h", 1, &i)));
  EXPECT_TRUE(IsWrongType(store_->Append("h", "x", &n)));
  o.want_old = true;
  EXPECT_TRUE(IsWrongType(store_->Set("h", "v", o, &r)));
  o.want_old = false;
  std::vector<std::optional<std::string>> mget;
  ASSERT_TRUE(store_->MultiGet({"h", "s"}, &mget).ok());
  EXPECT_EQ(mget, (std::vector<std::optional<std::string>>{std::nullopt, "v"}));

  // A transaction sees the hash as a hash.
  std::vector<KvTxRead> reads;
  ASSERT_TRUE(store_->TxRead({"h"}, &reads).ok());
  EXPECT_TRUE(reads[0].hash);

  // Pages of a larger hash: every field once.
  Fields many;
  std::vector<std::string> keep;
  for (int k = 0; k < 3000; ++k) keep.push_back("field:" + std::to_string(k));
  for (const std::string& k : keep) many.emplace_back(k, k);
  ASSERT_TRUE(store_->HashSet("big", many, false, &n).ok());
  EXPECT_EQ(n, 3000u);
  std::set<std::string> seen;
  uint64_t cursor = 0;
  do {
    KvHashPage page;
    ASSERT_TRUE(store_->HashScan("big", cursor, 100, &page).ok());
    for (const auto& [field, value] : page.fields) {
      EXPECT_EQ(field, value);
      EXPECT_TRUE(seen.insert(field).second) << field;
    }
    cursor = page.next_cursor;
  } while (cursor != 0);
  EXPECT_EQ(seen.size(), 3000u);

  // HDEL of the last field removes the hash; DEL and SET over one do too.
  names = {"a", "b", "fl", "nope"};
  ASSERT_TRUE(store_->HashDelete("h", names, &n).ok());
  EXPECT_EQ(n, 3u);
  bool exists = true;
  ASSERT_TRUE(store_->Exists("h", &exists).ok());
  EXPECT_FALSE(exists);
  ASSERT_TRUE(store_->HashSet("h2", Fields{{"a", "1"}}, false, &n).ok());
  ASSERT_TRUE(store_->Delete("h2").ok());
  ASSERT_TRUE(store_->Type("h2", &type).ok());
  EXPECT_EQ(type, KvType::kNone);
  ASSERT_TRUE(store_->HashSet("h3", Fields{{"a", "1"}}, false, &n).ok());
  ASSERT_TRUE(store_->Set("h3", "now a string", o, &r).ok());
  EXPECT_EQ(Get("h3"), "now a string");
  // An expired hash is absent, and a new one takes its place.
  ASSERT_TRUE(store_->HashSet("h4", Fields{{"a", "1"}}, false, &n).ok());
  bool changed = false;
  ASSERT_TRUE(store_->SetExpiry("h4", now_ms_ + 10, ExpiryCondition::kAlways, &changed).ok());
  EXPECT_TRUE(changed);
  now_ms_ += 20;
  ASSERT_TRUE(store_->HashLength("h4", &n).ok());
  EXPECT_EQ(n, 0u);
  ASSERT_TRUE(store_->HashSet("h4", Fields{{"b", "2"}}, false, &n).ok());
  EXPECT_EQ(n, 1u);

  Open();
  ASSERT_TRUE(store_->HashLength("big", &n).ok());
  EXPECT_EQ(n, 3000u);
  ASSERT_TRUE(store_->HashGet("h4", std::vector<std::string_view>{"a", "b"}, &values).ok());
  EXPECT_EQ(values, (std::vector<std::optional<std::string>>{std::nullopt, "2"}));
  KvCounts counts;
  ASSERT_TRUE(store_->Count(&counts).ok());
  EXPECT_EQ(counts.keys, 4u);  // s, big, h3, h4
}

// Hashes in a transaction: every hash call on the overlay (fields read
// from the store once, changed in the transaction), WRONGTYPE both ways,
// the commit writing the changed fields and the expiry; a hash made again
// after a delete drops the old fields; a write of the hash meanwhile fails
// the commit; emptying a hash removes it.
TEST_F(LocalKvStoreTest, HashInATransaction) {
  using Fields = std::vector<std::pair<std::string_view, std::string_view>>;
  using Names = std::vector<std::string_view>;
  using Values = std::vector<std::optional<std::string>>;
  uint64_t n = 0;
  ASSERT_TRUE(store_->HashSet("h", Fields{{"f", "v"}, {"e", "w"}}, false, &n).ok());
  SetOptions o;
  SetResult r;
  ASSERT_TRUE(store_->Set("s", "string", o, &r).ok());
  // Runs `body` on a transaction of the store, then commits it.
  auto transaction = [&](const std::function<void(TxKvStore*)>& body) {
    TxOverlay overlay(
        [&](std::string_view key, KvTxRead* out) {
          std::vector<KvTxRead> one;
          PDPM_RETURN_IF_ERROR(store_->TxRead({key}, &one));
          *out = one.front();
          return Status::OK();
        },
        now_ms_);
    TxKvStore tx(&overlay, store_.get(), now_ms_);
    body(&tx);
    EXPECT_TRUE(tx.read_error().ok()) << tx.read_error().ToString();
    std::vector<KvTxCheck> checks;
    std::vector<KvTxWrite> writes;
    overlay.Commit(&checks, &writes);
    return store_->TxCommit(checks, writes);
  };
  Status s = transaction([&](TxKvStore* tx) {
    KvType type = KvType::kNone;
    ASSERT_TRUE(tx->Type("h", &type).ok());
    EXPECT_EQ(type, KvType::kHash);
    std::string value;
    EXPECT_TRUE(IsWrongType(tx->Get("h", &value)));
    int64_t i = 0;
    EXPECT_TRUE(IsWrongType(tx->IncrBy("h", 1, &i)));
    EXPECT_TRUE(IsWrongType(tx->HashSet("s", Fields{{"a", "b"}}, false, &n)));
    ASSERT_TRUE(tx->HashLength("h", &n).ok());
    EXPECT_EQ(n, 2u);
    ASSERT_TRUE(tx->HashSet("h", Fields{{"g", "1"}, {"f", "v2"}}, false, &n).ok());
    EXPECT_EQ(n, 1u);
    ASSERT_TRUE(tx->HashSet("h", Fields{{"g", "x"}}, /*if_absent=*/true, &n).ok());
    EXPECT_EQ(n, 0u);
    Values values;
    ASSERT_TRUE(tx->HashGet("h", Names{"f", "g", "x", "e"}, &values).ok());
    EXPECT_EQ(values, (Values{"v2", "1", std::nullopt, "w"}));
    ASSERT_TRUE(tx->HashIncrBy("h", "g", 5, &i).ok());
    EXPECT_EQ(i, 6);
    EXPECT_EQ(tx->HashIncrBy("h", "f", 1, &i).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(tx->HashDelete("h", Names{"f", "nope"}, &n).ok());
    EXPECT_EQ(n, 1u);
    ASSERT_TRUE(tx->HashLength("h", &n).ok());
    EXPECT_EQ(n, 2u);
    bool changed = false;
    ASSERT_TRUE(tx->SetExpiry("h", now_ms_ + 1000, ExpiryCondition::kAlways, &changed).ok());
    EXPECT_TRUE(changed);
    KvHashPage page;
    ASSERT_TRUE(tx->HashScan("h", 0, 1, &page).ok());  // one page of the two
    ASSERT_EQ(page.fields.size(), 1u);
    KvHashPage rest;
    ASSERT_TRUE(tx->HashScan("h", page.next_cursor, 10, &rest).ok());
    ASSERT_EQ(rest.fields.size(), 1u);
    EXPECT_EQ(rest.next_cursor, 0u);
    std::set<std::string> seen = {page.fields[0].first + "=" + page.fields[0].second,
                                  rest.fields[0].first + "=" + rest.fields[0].second};
    EXPECT_EQ(seen, (std::set<std::string>{"e=w", "g=6"}));
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  Values values;
  ASSERT_TRUE(store_->HashGet("h", Names{"f", "g", "e"}, &values).ok());
  EXPECT_EQ(values, (Values{std::nullopt, "6", "w"}));
  uint64_t at = 0;
  ASSERT_TRUE(store_->GetExpiry("h", &at).ok());
  EXPECT_EQ(at, now_ms_ + 1000);

  // Removed and made again: none of the old fields, no expiry.
  s = transaction([&](TxKvStore* tx) {
    ASSERT_TRUE(tx->Delete("h").ok());
    ASSERT_TRUE(tx->HashSet("h", Fields{{"a", "1"}}, false, &n).ok());
    ASSERT_TRUE(tx->HashLength("h", &n).ok());
    EXPECT_EQ(n, 1u);
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(store_->HashGet("h", Names{"a", "g", "e"}, &values).ok());
  EXPECT_EQ(values, (Values{"1", std::nullopt, std::nullopt}));
  ASSERT_TRUE(store_->GetExpiry("h", &at).ok());
  EXPECT_EQ(at, 0u);

  // A write of the hash between the transaction's reads and its commit.
  s = transaction([&](TxKvStore* tx) {
    ASSERT_TRUE(tx->HashSet("h", Fields{{"b", "2"}}, false, &n).ok());
    ASSERT_TRUE(store_->HashSet("h", Fields{{"c", "3"}}, false, &n).ok());
  });
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  ASSERT_TRUE(store_->HashGet("h", Names{"b", "c"}, &values).ok());
  EXPECT_EQ(values, (Values{std::nullopt, "3"}));

  // Every field removed: the hash is gone, and a string may take the key
  // in the same transaction.
  s = transaction([&](TxKvStore* tx) {
    ASSERT_TRUE(tx->HashDelete("h", Names{"a", "c"}, &n).ok());
    EXPECT_EQ(n, 2u);
    bool exists = true;
    ASSERT_TRUE(tx->Exists("h", &exists).ok());
    EXPECT_FALSE(exists);
    EXPECT_TRUE(IsWrongType(tx->HashDelete("s", Names{"x"}, &n)));
    ASSERT_TRUE(tx->Delete("s").ok());
    int64_t i = 0;
    ASSERT_TRUE(tx->HashIncrBy("s", "n", 2, &i).ok());
    EXPECT_EQ(i, 2);
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  KvType type = KvType::kString;
  ASSERT_TRUE(store_->Type("h", &type).ok());
  EXPECT_EQ(type, KvType::kNone);
  ASSERT_TRUE(store_->HashGet("s", Names{"n"}, &values).ok());
  EXPECT_EQ(values, (Values{"2"}));
  KvCounts counts;
  ASSERT_TRUE(store_->Count(&counts).ok());
  EXPECT_EQ(counts.keys, 1u);  // s, a hash now
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
