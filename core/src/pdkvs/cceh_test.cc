#include "pdkvs/cceh.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dsm/dsm_test_region.h"

namespace pdpm::pdkvs {
namespace {

using dsm::PAllocator;

PutOptions WithMode(PutMode mode) {
  PutOptions o;
  o.mode = mode;
  return o;
}

// An index in a fresh region, and its reopening from the region alone.
class CcehTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(255, 4); }

  void Make(uint32_t buckets, uint32_t probe, uint64_t chunks = 24) {
    index_.reset();
    alloc_.reset();
    region_ = std::make_unique<dsm::TestRegion>(chunks * dsm::kChunkSize);
    ASSERT_TRUE(PAllocator::Format(region_->range()).ok());
    ASSERT_TRUE(PAllocator::Open(region_->range(), {}, &alloc_).ok());
    CcehOptions o = Options();
    o.buckets_per_segment = buckets;
    o.probe_buckets = probe;
    ASSERT_TRUE(CcehIndex::Create(alloc_.get(), o, &header_, &index_).ok());
  }

  CcehOptions Options() {
    CcehOptions o;
    o.clock_ms = [this] { return now_ms_.load(); };
    return o;
  }

  // Drops every DRAM structure and recovers from the region.
  void Reopen() {
    index_.reset();
    alloc_.reset();
    ASSERT_TRUE(PAllocator::Open(region_->range(), {}, &alloc_).ok());
    Status s = CcehIndex::Open(alloc_.get(), header_, Options(), &index_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  void ExpectClean() {
    CcehCheckReport r = CcehIndex::Check(alloc_.get(), header_);
    EXPECT_TRUE(r.clean()) << r.ToString();
    EXPECT_EQ(r.items, index_->Count());
    // Nothing else of the owner is allocated: no leak either.
    EXPECT_EQ(alloc_->Stats().blocks_allocated, r.reachable.size());
  }

  std::string Get(std::string_view key) {
    std::string v;
    Status s = index_->Get(key, &v);
    return s.ok() ? v : "<" + std::string(StatusCodeName(s.code())) + ">";
  }

  std::set<std::string> ScanAll(size_t count) {
    std::set<std::string> keys;
    ScanPage page;
    uint64_t cursor = 0;
    do {
      EXPECT_TRUE(index_->Scan(cursor, count, &page).ok());
      for (const std::string& k : page.keys) EXPECT_TRUE(keys.insert(k).second) << k;
      cursor = page.next_cursor;
    } while (!page.done);
    return keys;
  }

  std::atomic<uint64_t> now_ms_{1000};
  std::unique_ptr<dsm::TestRegion> region_;
  std::unique_ptr<PAllocator> alloc_;
  std::unique_ptr<CcehIndex> index_;
  uint64_t header_ = 0;
};

TEST_F(CcehTest, PutGetDeleteExists) {
  EXPECT_EQ(Get("a"), "<not_found>");
  ASSERT_TRUE(index_->Put("a", "1").ok());
  ASSERT_TRUE(index_->Put("", "empty key").ok());
  ASSERT_TRUE(index_->Put("b", "").ok());
  EXPECT_EQ(Get("a"), "1");
  EXPECT_EQ(Get(""), "empty key");
  EXPECT_EQ(Get("b"), "");
  ASSERT_TRUE(index_->Put("a", "2").ok());
  EXPECT_EQ(Get("a"), "2");
  EXPECT_EQ(index_->Count(), 3u);
  bool exists = false;
  ASSERT_TRUE(index_->Exists("a", &exists).ok());
  EXPECT_TRUE(exists);
  ASSERT_TRUE(index_->Delete("a").ok());
  ASSERT_TRUE(index_->Exists("a", &exists).ok());
  EXPECT_FALSE(exists);
  EXPECT_EQ(index_->Delete("a").code(), StatusCode::kNotFound);
  EXPECT_EQ(Get("a"), "<not_found>");
  EXPECT_EQ(index_->Count(), 2u);
  ExpectClean();
  Reopen();
  EXPECT_EQ(Get(""), "empty key");
  EXPECT_EQ(index_->Count(), 2u);
  ExpectClean();
}

TEST_F(CcehTest, PutModes) {
  PutOptions absent = WithMode(PutMode::kIfAbsent);
  PutOptions present = WithMode(PutMode::kIfPresent);
  EXPECT_EQ(index_->Put("k", "x", present).code(), StatusCode::kNotFound);
  EXPECT_EQ(Get("k"), "<not_found>");
  ASSERT_TRUE(index_->Put("k", "first", absent).ok());
  EXPECT_EQ(index_->Put("k", "second", absent).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Get("k"), "first");
  ASSERT_TRUE(index_->Put("k", "third", present).ok());
  EXPECT_EQ(Get("k"), "third");
  ExpectClean();
}

TEST_F(CcehTest, Errors) {
  std::string big_key(kMaxKeySize + 1, 'k');
  std::string v;
  EXPECT_EQ(index_->Put(big_key, "v").code(), StatusCode::kTooLarge);
  EXPECT_EQ(index_->Get(big_key, &v).code(), StatusCode::kTooLarge);
  EXPECT_EQ(index_->Delete(big_key).code(), StatusCode::kTooLarge);
  // Only the length is looked at before the value is refused.
  char byte = 0;
  std::string_view huge(&byte, kMaxValueSize + 1);
  EXPECT_EQ(index_->Put("k", huge).code(), StatusCode::kTooLarge);
  ScanPage page;
  EXPECT_EQ(index_->Scan(0, 0, &page).code(), StatusCode::kInvalidArgument);

  CcehOptions bad;
  bad.buckets_per_segment = 4;
  bad.probe_buckets = 5;
  uint64_t h;
  std::unique_ptr<CcehIndex> other;
  EXPECT_EQ(CcehIndex::Create(alloc_.get(), bad, &h, &other).code(), StatusCode::kInvalidArgument);
  bad.buckets_per_segment = 0;
  EXPECT_EQ(CcehIndex::Create(alloc_.get(), bad, &h, &other).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CcehIndex::Open(alloc_.get(), header_ + 64, {}, &other).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(CcehIndex::Open(alloc_.get(), 0, {}, &other).code(), StatusCode::kCorruption);
  EXPECT_FALSE(CcehIndex::Check(alloc_.get(), 8).ok());
  ExpectClean();
}

TEST_F(CcehTest, ReadsAndDeletesOfAbsentKeysNeverSplit) {
  Make(1, 1);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(index_->Put("k" + std::to_string(i), "v").ok());
  const uint64_t splits = index_->Stats().splits;
  for (int i = 0; i < 200; ++i) {
    std::string key = "absent" + std::to_string(i);
    EXPECT_EQ(index_->Delete(key).code(), StatusCode::kNotFound);
    EXPECT_EQ(Get(key), "<not_found>");
  }
  EXPECT_EQ(index_->Stats().splits, splits);
  ExpectClean();
}

TEST_F(CcehTest, RegionFull) {
  Make(255, 4, 4);
  std::string value(200000, 'v');
  Status s;
  int i = 0;
  while ((s = index_->Put("k" + std::to_string(i), value)).ok()) ++i;
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_GT(i, 0);
  // What was stored before stays readable, and a delete makes room.
  EXPECT_EQ(Get("k0"), value);
  ASSERT_TRUE(index_->Delete("k0").ok());
  ASSERT_TRUE(index_->Put("again", value).ok());
  ExpectClean();
}

TEST_F(CcehTest, LargeKeysAndValues) {
  std::string key(kMaxKeySize, 'K');
  std::string value(8 << 20, '\0');
  for (size_t i = 0; i < value.size(); i += 4096) value[i] = static_cast<char>(i >> 12);
  ASSERT_TRUE(index_->Put(key, value).ok());
  ASSERT_TRUE(index_->Put("small", value.substr(0, 100000)).ok());
  EXPECT_EQ(Get(key), value);
  ExpectClean();
  Reopen();
  EXPECT_EQ(Get(key), value);
  EXPECT_EQ(Get("small"), value.substr(0, 100000));
  ASSERT_TRUE(index_->Put(key, "now small").ok());
  EXPECT_EQ(Get(key), "now small");
  ExpectClean();
}

TEST_F(CcehTest, Ttl) {
  PutOptions o;
  o.meta.expire_at_ms = 2000;
  o.meta.flags = 42;
  ASSERT_TRUE(index_->Put("t", "v", o).ok());
  ASSERT_TRUE(index_->Put("forever", "v").ok());
  std::string v;
  ItemMeta meta;
  ASSERT_TRUE(index_->Get("t", &v, &meta).ok());
  EXPECT_EQ(meta.expire_at_ms, 2000u);
  EXPECT_EQ(meta.flags, 42u);
  // keep_ttl carries the expiry over to the new item.
  PutOptions keep;
  keep.keep_ttl = true;
  ASSERT_TRUE(index_->Put("t", "v2", keep).ok());
  ASSERT_TRUE(index_->Get("t", &v, &meta).ok());
  EXPECT_EQ(meta.expire_at_ms, 2000u);
  EXPECT_EQ(v, "v2");

  // Peek reads without writing: a live item as Get does, an expired one
  // left in place and answered kFailedPrecondition.
  v.clear();
  ASSERT_TRUE(index_->Peek("t", &v, &meta).ok());
  EXPECT_EQ(v, "v2");
  EXPECT_EQ(meta.expire_at_ms, 2000u);
  EXPECT_EQ(index_->Peek("absent", &v).code(), StatusCode::kNotFound);
  now_ms_ = 2000;
  Status peeked = index_->Peek("t", &v, &meta);
  EXPECT_EQ(peeked.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(peeked.message(), kExpiredMessage);
  EXPECT_EQ(index_->Count(), 2u);  // still stored
  EXPECT_EQ(Get("t"), "<not_found>");
  EXPECT_EQ(index_->Count(), 1u);  // the read freed it
  EXPECT_EQ(index_->Peek("t", nullptr).code(), StatusCode::kNotFound);
  ExpectClean();
  ASSERT_TRUE(index_->Put("t", "v", o).ok());
  now_ms_ = 3000;
  bool exists = true;
  ASSERT_TRUE(index_->Exists("t", &exists).ok());
  EXPECT_FALSE(exists);
  ASSERT_TRUE(index_->Put("t", "v", o).ok());
  EXPECT_EQ(index_->Put("t", "v", WithMode(PutMode::kIfPresent)).code(), StatusCode::kNotFound);
  EXPECT_EQ(index_->Delete("t").code(), StatusCode::kNotFound);
  ASSERT_TRUE(index_->Put("t", "v", o).ok());
  EXPECT_EQ(ScanAll(10), std::set<std::string>{"forever"});
  ExpectClean();
  // A TTL change in place: the item (and its checksum) stays.
  auto set_expiry = [](uint64_t at) {
    return [at](const std::string_view*, const ItemMeta&, Mutation* m) {
      m->kind = Mutation::kSetExpiry;
      m->meta.expire_at_ms = at;
      return Status::OK();
    };
  };
  ASSERT_TRUE(index_->Update("forever", set_expiry(5000)).ok());
  ASSERT_TRUE(index_->Get("forever", &v, &meta).ok());
  EXPECT_EQ(meta.expire_at_ms, 5000u);
  ASSERT_TRUE(index_->Update("forever", set_expiry(0)).ok());  // persist
  ASSERT_TRUE(index_->Get("forever", &v, &meta).ok());
  EXPECT_EQ(meta.expire_at_ms, 0u);
  EXPECT_EQ(index_->Update("absent", set_expiry(5000)).code(), StatusCode::kNotFound);
  ASSERT_TRUE(index_->Update("forever", set_expiry(10)).ok());  // in the past
  EXPECT_EQ(Get("forever"), "<not_found>");
  ASSERT_TRUE(index_->Put("t", "fresh", WithMode(PutMode::kIfAbsent)).ok());
  EXPECT_EQ(Get("t"), "fresh");
  ExpectClean();
}

// CountExpiring follows every way an item gets, changes or loses its
// expiry time and is rebuilt by Open; ReclaimExpired sweeps the index a
// segment at a time (small segments: many splits) and frees exactly the
// expired items.
TEST_F(CcehTest, ActiveExpiryFreesExpiredItemsAndCountsExpiring) {
  Make(4, 2, 48);  // the clock stands at 1000
  auto expiring = [](uint64_t at) {
    PutOptions o;
    o.meta.expire_at_ms = at;
    return o;
  };
  constexpr int kKeys = 2000;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "k" + std::to_string(i);
    // Thirds: no expiry, expiring at 2000, expiring at 6000.
    const uint64_t at = i % 3 == 0 ? 0 : i % 3 == 1 ? 2000 : 6000;
    ASSERT_TRUE(index_->Put(key, "v", expiring(at)).ok()) << key;
  }
  const uint64_t with_ttl = kKeys - (kKeys + 2) / 3;
  EXPECT_EQ(index_->CountExpiring(), with_ttl);
  ASSERT_GT(index_->Stats().segments, 16u);
  // Replacing keeps the count right both ways; a TTL change in place too.
  ASSERT_TRUE(index_->Put("k0", "v", expiring(6000)).ok());
  ASSERT_TRUE(index_->Put("k1", "v").ok());
  EXPECT_EQ(index_->CountExpiring(), with_ttl);
  ASSERT_TRUE(index_
                  ->Update("k3",
                           [](const std::string_view*, const ItemMeta&, Mutation* m) {
                             m->kind = Mutation::kSetExpiry;
                             m->meta.expire_at_ms = 2000;
                             return Status::OK();
                           })
                  .ok());
  EXPECT_EQ(index_->CountExpiring(), with_ttl + 1);
  ASSERT_TRUE(index_->Delete("k4").ok());  // expiring at 2000
  EXPECT_EQ(index_->CountExpiring(), with_ttl);
  Reopen();
  EXPECT_EQ(index_->CountExpiring(), with_ttl);
  // Nothing expired yet: a sweep frees nothing.
  auto sweep = [&] {
    uint64_t position = 0, reclaimed = 0, steps = 0;
    do {
      uint64_t next = 0;
      EXPECT_TRUE(index_->ReclaimExpired(position, &next, &reclaimed).ok());
      EXPECT_TRUE(next == 0 || next > position);
      position = next;
      ++steps;
    } while (position != 0);
    EXPECT_GE(steps, index_->Stats().segments);
    return reclaimed;
  };
  EXPECT_EQ(sweep(), 0u);
  EXPECT_EQ(index_->Count(), uint64_t{kKeys} - 1);
  now_ms_ = 2000;
  // The keys expiring at 2000: every i % 3 == 1 but k1 (made permanent)
  // and k4 (deleted), plus k3.
  uint64_t due = 0;
  for (int i = 0; i < kKeys; ++i) due += i % 3 == 1 ? 1 : 0;
  due = due - 2 + 1;
  EXPECT_EQ(sweep(), due);
  EXPECT_EQ(index_->Count(), uint64_t{kKeys} - 1 - due);
  EXPECT_EQ(index_->CountExpiring(), with_ttl - due);
  EXPECT_EQ(Get("k1"), "v");
  EXPECT_EQ(Get("k2"), "v");
  EXPECT_EQ(Get("k3"), "<not_found>");
  ExpectClean();
  now_ms_ = 6000;
  EXPECT_EQ(sweep(), with_ttl - due);
  EXPECT_EQ(index_->CountExpiring(), 0u);
  EXPECT_EQ(index_->Count(), uint64_t{kKeys} - 1 - with_ttl);
  ExpectClean();
  Reopen();
  EXPECT_EQ(index_->CountExpiring(), 0u);
}

TEST_F(CcehTest, UpdateBuildsIncrementAndAppend) {
  auto incr = [](const std::string_view* old, const ItemMeta& meta, Mutation* m) {
    int64_t n = old == nullptr ? 0 : std::stoll(std::string(*old));
    m->kind = Mutation::kPut;
    m->value = std::to_string(n + 1);
    m->meta = meta;
    return Status::OK();
  };
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(index_->Update("n", incr).ok());
  EXPECT_EQ(Get("n"), "5");
  auto append = [](const std::string_view* old, const ItemMeta& meta, Mutation* m) {
    m->kind = Mutation::kPut;
    m->value = (old == nullptr ? "" : std::string(*old)) + "ab";
    m->meta = meta;  // an append keeps the TTL
    return Status::OK();
  };
  ASSERT_TRUE(index_->Update("s", append).ok());
  ASSERT_TRUE(index_->Update("s", append).ok());
  EXPECT_EQ(Get("s"), "abab");
  // A failing callback changes nothing.
  Status s = index_->Update("s", [](const std::string_view*, const ItemMeta&, Mutation* m) {
    m->kind = Mutation::kDelete;
    return Status::InvalidArgument("not an integer");
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Get("s"), "abab");
  ASSERT_TRUE(index_
                  ->Update("s",
                           [](const std::string_view* old, const ItemMeta&, Mutation* m) {
                             EXPECT_NE(old, nullptr);
                             m->kind = Mutation::kDelete;
                             return Status::OK();
                           })
                  .ok());
  EXPECT_EQ(Get("s"), "<not_found>");
  ASSERT_TRUE(index_
                  ->Update("absent",
                           [](const std::string_view* old, const ItemMeta&, Mutation*) {
                             EXPECT_EQ(old, nullptr);
                             return Status::OK();
                           })
                  .ok());
  EXPECT_EQ(index_->Count(), 1u);
  std::string big(kMaxKeySize + 1, 'k');
  EXPECT_EQ(index_->Update(big, incr).code(), StatusCode::kTooLarge);
  ExpectClean();
}

// Random operations against an in-DRAM model on a tiny geometry: many
// splits and doublings; checked, reopened and reclaimed along the way.
TEST_F(CcehTest, RandomAgainstModel) {
  Make(2, 1);
  std::mt19937_64 rng(7);
  std::map<std::string, std::string> model;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 1500; ++i) {
      std::string key = "key" + std::to_string(rng() % 1200);
      int choice = rng() % 10;
      if (choice < 6) {
        std::string value(rng() % 300, static_cast<char>('a' + rng() % 26));
        ASSERT_TRUE(index_->Put(key, value).ok());
        model[key] = value;
      } else if (choice < 8) {
        Status s = index_->Delete(key);
        ASSERT_EQ(s.ok(), model.erase(key) == 1) << s.ToString();
      } else {
        auto it = model.find(key);
        ASSERT_EQ(Get(key), it == model.end() ? "<not_found>" : it->second);
      }
    }
    ASSERT_EQ(index_->Count(), model.size());
    ExpectClean();
    Reopen();
    uint64_t reclaimed = 1;
    CcehIndex* all[] = {index_.get()};
    ASSERT_TRUE(CcehIndex::ReclaimUnreachable(alloc_.get(), all, &reclaimed).ok());
    EXPECT_EQ(reclaimed, 0u);
    for (const auto& [k, v] : model) ASSERT_EQ(Get(k), v) << k;
    std::set<std::string> keys;
    for (const auto& [k, v] : model) keys.insert(k);
    ASSERT_EQ(ScanAll(1 + round * 7), keys);
  }
  CcehStats st = index_->Stats();
  EXPECT_GT(st.global_depth, 6u);
  EXPECT_GT(st.segments, 64u);
}

// A key present for the whole scan comes back exactly once although the
// index splits and doubles between the pages.
TEST_F(CcehTest, ScanCursorSurvivesSplits) {
  Make(2, 1);
  std::set<std::string> stable;
  for (int i = 0; i < 100; ++i) {
    stable.insert("stable" + std::to_string(i));
    ASSERT_TRUE(index_->Put("stable" + std::to_string(i), "v").ok());
  }
  uint32_t depth_before = index_->Stats().global_depth;
  std::multiset<std::string> seen;
  ScanPage page;
  uint64_t cursor = 0;
  int added = 0;
  do {
    ASSERT_TRUE(index_->Scan(cursor, 3, &page).ok());
    seen.insert(page.keys.begin(), page.keys.end());
    cursor = page.next_cursor;
    for (int j = 0; j < 20; ++j, ++added) {
      ASSERT_TRUE(index_->Put("added" + std::to_string(added), "v").ok());
    }
  } while (!page.done);
  EXPECT_GT(index_->Stats().global_depth, depth_before + 2);
  for (const std::string& k : stable) EXPECT_EQ(seen.count(k), 1u) << k;
  for (const std::string& k : seen) EXPECT_EQ(seen.count(k), 1u) << k;
}

TEST_F(CcehTest, ReclaimFreesLeaksOnly) {
  ASSERT_TRUE(index_->Put("kept", "v").ok());
  uint64_t leak;  // an item written but never published, as a crash leaves it
  ASSERT_TRUE(WriteItem(alloc_.get(), "lost", "v", {}, HashKey("lost"), &leak).ok());
  Reopen();
  uint64_t reclaimed = 0;
  CcehIndex* all[] = {index_.get()};
  ASSERT_TRUE(CcehIndex::ReclaimUnreachable(alloc_.get(), all, &reclaimed).ok());
  EXPECT_EQ(reclaimed, 1u);
  EXPECT_EQ(Get("kept"), "v");
  ExpectClean();
}

TEST_F(CcehTest, CheckFindsDamage) {
  Make(2, 1);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(index_->Put("k" + std::to_string(i), "value").ok());
  ExpectClean();
  // A freed item that a slot still reaches.
  std::unordered_set<uint64_t> reachable;
  index_->AddReachable(&reachable);
  uint64_t item;
  ASSERT_TRUE(WriteItem(alloc_.get(), "x", "y", {}, 1, &item).ok());
  ASSERT_TRUE(alloc_->Free(item, dsm::BlockOwner::kKvStore).ok());
  CcehCheckReport r = CcehIndex::Check(alloc_.get(), header_);
  ASSERT_TRUE(r.ok());
  // Flip a value byte of a reachable item: its checksum fails.
  uint64_t some_item = 0;
  for (uint64_t off : r.reachable) {
    ItemView view;
    if (ItemView::Open(*alloc_, off, &view).ok()) some_item = off;
  }
  ASSERT_NE(some_item, 0u);
  region_->base()[some_item + sizeof(ItemHeader) + 3] ^= 0x10;
  r = CcehIndex::Check(alloc_.get(), header_);
  EXPECT_FALSE(r.ok());
  std::string v;
  bool any_corrupt = false;
  for (int i = 0; i < 50; ++i) {
    any_corrupt |= index_->Get("k" + std::to_string(i), &v).code() == StatusCode::kCorruption;
  }
  EXPECT_TRUE(any_corrupt);
  region_->base()[some_item + sizeof(ItemHeader) + 3] ^= 0x10;
  ASSERT_TRUE(CcehIndex::Check(alloc_.get(), header_).clean());
  // Free a reachable item behind the index's back.
  ASSERT_TRUE(alloc_->Free(some_item, dsm::BlockOwner::kKvStore).ok());
  r = CcehIndex::Check(alloc_.get(), header_);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.ToString().find("not an allocated index block"), std::string::npos) << r.ToString();
}

// A plain overwrite does not read the item it replaces (nor verify its
// checksum); a change that reads the old value does.
TEST_F(CcehTest, OverwriteDoesNotReadTheItemItReplaces) {
  ASSERT_TRUE(index_->Put("a", "old value").ok());
  ASSERT_TRUE(index_->Put("b", "old value").ok());
  CcehCheckReport r = CcehIndex::Check(alloc_.get(), header_);
  ASSERT_TRUE(r.clean()) << r.ToString();
  for (uint64_t off : r.reachable) {
    ItemView view;
    if (ItemView::Open(*alloc_, off, &view).ok()) {
      region_->base()[off + sizeof(ItemHeader) + view.header().key_len] ^= 0x10;
    }
  }
  EXPECT_EQ(Get("a"), "<" + std::string(StatusCodeName(StatusCode::kCorruption)) + ">");
  auto append = [](const std::string_view* old, const ItemMeta&, Mutation* m) {
    m->kind = Mutation::kPut;
    m->value = std::string(old != nullptr ? *old : "") + "!";
    return Status::OK();
  };
  EXPECT_EQ(index_->Update("b", append).code(), StatusCode::kCorruption);
  ASSERT_TRUE(index_->Put("a", "new value").ok());
  EXPECT_EQ(Get("a"), "new value");
  ASSERT_TRUE(index_->Delete("b").ok());
  ExpectClean();
}

// A directory entry moved to another segment: the checker names it, Open
// refuses the index.
TEST_F(CcehTest, DamagedDirectoryIsCorruption) {
  Make(2, 1);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(index_->Put("k" + std::to_string(i), "v").ok());
  ASSERT_GT(index_->Stats().global_depth, 2u);
  CcehCheckReport r = CcehIndex::Check(alloc_.get(), header_);
  ASSERT_TRUE(r.clean()) << r.ToString();
  const uint64_t dir = *reinterpret_cast<uint64_t*>(region_->base() + header_ + 24);
  auto* entries = reinterpret_cast<uint64_t*>(region_->base() + dir + 64);
  const uint32_t depth = *reinterpret_cast<uint32_t*>(region_->base() + dir + 8);
  const uint64_t last = (uint64_t{1} << depth) - 1;
  const uint64_t saved = entries[0];
  entries[0] = entries[last];
  r = CcehIndex::Check(alloc_.get(), header_);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.ToString().find("directory entry 0"), std::string::npos) << r.ToString();
  index_.reset();
  std::unique_ptr<CcehIndex> reopened;
  EXPECT_EQ(CcehIndex::Open(alloc_.get(), header_, Options(), &reopened).code(),
            StatusCode::kCorruption);
  entries[0] = saved;
  ASSERT_TRUE(CcehIndex::Open(alloc_.get(), header_, Options(), &index_).ok());
  EXPECT_EQ(Get("k7"), "v");
}

// Several indexes (vnodes) share a region: the reclaim keeps what any of
// them reaches.
TEST_F(CcehTest, ReclaimWithSeveralIndexes) {
  uint64_t second_header;
  std::unique_ptr<CcehIndex> second;
  CcehOptions o = Options();
  o.buckets_per_segment = 2;
  o.probe_buckets = 1;
  ASSERT_TRUE(CcehIndex::Create(alloc_.get(), o, &second_header, &second).ok());
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(index_->Put("a" + std::to_string(i), "first").ok());
    ASSERT_TRUE(second->Put("b" + std::to_string(i), "second").ok());
  }
  uint64_t leak;
  ASSERT_TRUE(WriteItem(alloc_.get(), "lost", "v", {}, HashKey("lost"), &leak).ok());
  second.reset();
  Reopen();
  ASSERT_TRUE(CcehIndex::Open(alloc_.get(), second_header, Options(), &second).ok());
  uint64_t reclaimed = 0;
  CcehIndex* all[] = {index_.get(), second.get()};
  ASSERT_TRUE(CcehIndex::ReclaimUnreachable(alloc_.get(), all, &reclaimed).ok());
  EXPECT_EQ(reclaimed, 1u);
  std::string v;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(Get("a" + std::to_string(i)), "first");
    ASSERT_TRUE(second->Get("b" + std::to_string(i), &v).ok());
    ASSERT_EQ(v, "second");
  }
  CcehCheckReport a = CcehIndex::Check(alloc_.get(), header_);
  CcehCheckReport b = CcehIndex::Check(alloc_.get(), second_header);
  ASSERT_TRUE(a.clean() && b.clean());
  EXPECT_EQ(alloc_->Stats().blocks_allocated, a.reachable.size() + b.reachable.size());
}

// Many threads on one index: own keys each, and one shared counter updated
// by all; small segments so that splits and doublings race with everything.
TEST_F(CcehTest, ConcurrentThreads) {
  Make(2, 2);
  constexpr int kThreads = 4;
  constexpr int kKeys = 300;
  auto incr = [](const std::string_view* old, const ItemMeta&, Mutation* m) {
    m->kind = Mutation::kPut;
    m->value = std::to_string((old == nullptr ? 0 : std::stoll(std::string(*old))) + 1);
    return Status::OK();
  };
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < kKeys; ++i) {
        std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        EXPECT_TRUE(index_->Put(key, key).ok());
        EXPECT_TRUE(index_->Update("counter", incr).ok());
        std::string other = "t" + std::to_string(rng() % kThreads) + "/" + std::to_string(i / 2);
        std::string v;
        Status s = index_->Get(other, &v);
        EXPECT_TRUE(s.ok() ? v == other : s.code() == StatusCode::kNotFound) << s.ToString();
        if (i % 3 == 0) {
          EXPECT_TRUE(index_->Delete(key).ok());
        }
        if (i % 50 == 0) {
          ScanPage page;
          EXPECT_TRUE(index_->Scan(rng(), 5, &page).ok());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(Get("counter"), std::to_string(kThreads * kKeys));
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kKeys; ++i) {
      std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
      ASSERT_EQ(Get(key), i % 3 == 0 ? "<not_found>" : key);
    }
  }
  EXPECT_EQ(index_->Count(), 1u + kThreads * (kKeys - kKeys / 3));
  ExpectClean();
}

}  // namespace
}  // namespace pdpm::pdkvs
