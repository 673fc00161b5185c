#include "pdkvs/hash.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/test_scale.h"
#include "dsm/dsm_test_region.h"

namespace pdpm::pdkvs {
namespace {

using dsm::PAllocator;
using Fields = std::vector<std::pair<std::string_view, std::string_view>>;

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    const ::pdpm::Status _s = (expr);                       \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

// A vnode index with its hashes in a fresh region, reopened from the
// region alone as a server or the local store does.
class HashTest : public ::testing::Test {
 protected:
  void SetUp() { Make(24); }

  void Make(uint64_t chunks) {
    hashes_.reset();
    index_.reset();
    alloc_.reset();
    region_ = std::make_unique<dsm::TestRegion>(chunks * dsm::kChunkSize);
    ASSERT_OK(PAllocator::Format(region_->range()));
    ASSERT_OK(PAllocator::Open(region_->range(), {}, &alloc_));
    ASSERT_OK(CcehIndex::Create(alloc_.get(), {}, &header_, &index_));
    ASSERT_OK(VnodeHashes::Open(alloc_.get(), index_.get(), {}, &hashes_));
  }

  // Drops every DRAM structure; opens the index, its hashes, and frees
  // what none of them reaches. *reclaimed: the blocks freed.
  void Reopen(uint64_t* reclaimed = nullptr) {
    hashes_.reset();
    index_.reset();
    alloc_.reset();
    ASSERT_OK(PAllocator::Open(region_->range(), {}, &alloc_));
    ASSERT_OK(CcehIndex::Open(alloc_.get(), header_, {}, &index_));
    ASSERT_OK(VnodeHashes::Open(alloc_.get(), index_.get(), {}, &hashes_));
    std::vector<CcehIndex*> all = hashes_->indexes();
    all.push_back(index_.get());
    uint64_t freed = 0;
    ASSERT_OK(CcehIndex::ReclaimUnreachable(alloc_.get(), all, &freed));
    if (reclaimed != nullptr) *reclaimed = freed;
  }

  // The offline check of the vnode and its hashes: clean, and every
  // allocated block reached (no leak).
  void ExpectClean() {
    CcehCheckReport r = CcehIndex::Check(alloc_.get(), header_);
    VnodeHashes::Check(alloc_.get(), &r);
    EXPECT_TRUE(r.clean()) << r.ToString();
    EXPECT_EQ(alloc_->Stats().blocks_allocated, r.reachable.size());
  }

  std::string HGet(std::string_view key, std::string_view field) {
    std::string v;
    Status s = hashes_->Get(key, field, &v);
    return s.ok() ? v : "<" + std::string(StatusCodeName(s.code())) + ">";
  }

  std::map<std::string, std::string> All(std::string_view key, size_t count) {
    std::map<std::string, std::string> out;
    VnodeHashes::FieldPage page;
    uint64_t cursor = 0;
    do {
      EXPECT_TRUE(hashes_->Scan(key, cursor, count, &page).ok());
      for (auto& [f, v] : page.fields) EXPECT_TRUE(out.emplace(f, v).second) << f;
      cursor = page.next_cursor;
    } while (!page.done);
    return out;
  }

  std::unique_ptr<dsm::TestRegion> region_;
  std::unique_ptr<PAllocator> alloc_;
  uint64_t header_ = 0;
  std::unique_ptr<CcehIndex> index_;
  std::unique_ptr<VnodeHashes> hashes_;
};

TEST_F(HashTest, FieldsSetReadCountedAndRemoved) {
  uint64_t n = 0;
  ASSERT_OK(hashes_->Set("h", Fields{{"a", "1"}, {"b", "2"}, {"a", "3"}}, false, &n));
  EXPECT_EQ(n, 2u);  // a is new once
  EXPECT_EQ(HGet("h", "a"), "3");
  EXPECT_EQ(HGet("h", "b"), "2");
  EXPECT_EQ(HGet("h", "c"), "<not_found>");
  EXPECT_EQ(HGet("nohash", "a"), "<not_found>");
  ASSERT_OK(hashes_->Set("h", Fields{{"b", "x"}}, true, &n));  // HSETNX of a present field
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(HGet("h", "b"), "2");
  ASSERT_OK(hashes_->Set("h", Fields{{"c", ""}}, true, &n));
  EXPECT_EQ(n, 1u);
  ASSERT_OK(hashes_->Length("h", &n));
  EXPECT_EQ(n, 3u);
  ASSERT_OK(hashes_->Length("nohash", &n));
  EXPECT_EQ(n, 0u);
  int64_t r = 0;
  ASSERT_OK(hashes_->IncrBy("h", "b", 40, &r));
  EXPECT_EQ(r, 42);
  ASSERT_OK(hashes_->IncrBy("h", "new", -5, &r));
  EXPECT_EQ(r, -5);
  ASSERT_OK(hashes_->IncrBy("fresh", "f", 7, &r));  // creates the hash
  EXPECT_EQ(r, 7);
  EXPECT_EQ(hashes_->IncrBy("h", "c", 1, &r).code(), StatusCode::kInvalidArgument);
  ASSERT_OK(hashes_->Set("h", Fields{{"max", "9223372036854775807"}}, false, &n));
  EXPECT_EQ(hashes_->IncrBy("h", "max", 1, &r).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(
      All("h", 2),
      (std::map<std::string, std::string>{
          {"a", "3"}, {"b", "42"}, {"c", ""}, {"new", "-5"}, {"max", "9223372036854775807"}}));
  EXPECT_TRUE(All("nohash", 10).empty());
  // The hash is one item of the vnode, flagged; its fields are not there.
  ItemMeta meta;
  std::string header;
  ASSERT_OK(index_->Get("h", &header, &meta));
  EXPECT_EQ(meta.flags, kItemFlagHash);
  EXPECT_EQ(index_->Count(), 2u);  // h and fresh
  ExpectClean();
  // HDEL: the count of fields that existed; the last one takes the hash.
  const std::vector<std::string_view> some{"a", "zz", "b"};
  ASSERT_OK(hashes_->Delete("h", some, &n));
  EXPECT_EQ(n, 2u);
  const std::vector<std::string_view> rest{"c", "new", "max"};
  ASSERT_OK(hashes_->Delete("h", rest, &n));
  EXPECT_EQ(n, 3u);
  bool exists = true;
  ASSERT_OK(index_->Exists("h", &exists));
  EXPECT_FALSE(exists);
  ASSERT_OK(hashes_->Delete("h", rest, &n));
  EXPECT_EQ(n, 0u);
  ASSERT_OK(hashes_->Remove("fresh"));
  EXPECT_EQ(hashes_->Remove("fresh").code(), StatusCode::kNotFound);
  // Every block of both hashes is free again.
  EXPECT_TRUE(hashes_->indexes().empty());
  ExpectClean();
}

TEST_F(HashTest, WrongTypeBetweenStringsAndHashes) {
  ASSERT_OK(index_->Put("s", "string"));
  uint64_t n = 0;
  int64_t r = 0;
  std::string v;
  auto wrong = [](const Status& s) {
    return s.code() == StatusCode::kFailedPrecondition && s.message() == kWrongTypeMessage;
  };
  EXPECT_TRUE(wrong(hashes_->Set("s", Fields{{"a", "1"}}, false, &n)));
  EXPECT_TRUE(wrong(hashes_->Get("s", "a", &v)));
  EXPECT_TRUE(wrong(hashes_->Length("s", &n)));
  EXPECT_TRUE(wrong(hashes_->IncrBy("s", "a", 1, &r)));
  const std::vector<std::string_view> a{"a"};
  EXPECT_TRUE(wrong(hashes_->Delete("s", a, &n)));
  VnodeHashes::FieldPage page;
  EXPECT_TRUE(wrong(hashes_->Scan("s", 0, 10, &page)));
  EXPECT_EQ(hashes_->Remove("s").code(), StatusCode::kNotFound);
  ASSERT_OK(index_->Get("s", &v));
  EXPECT_EQ(v, "string");
  ExpectClean();
}

TEST_F(HashTest, HashesSurviveReopenAndLeftoversAreFreed) {
  uint64_t n = 0;
  for (int h = 0; h < 20; h++) {
    Fields f;
    std::vector<std::string> names;
    for (int i = 0; i < 50 * h + 1; i++) names.push_back("f" + std::to_string(i));
    for (const auto& name : names) f.emplace_back(name, name);
    ASSERT_OK(hashes_->Set("h" + std::to_string(h), f, false, &n));
  }
  // A field index never published (a crash before its header item) and a
  // hash whose last field was removed just before a crash.
  uint64_t orphan = 0, empty = 0;
  std::unique_ptr<CcehIndex> index;
  ASSERT_OK(CcehIndex::Create(alloc_.get(), FieldIndexOptions({}), &orphan, &index));
  ASSERT_OK(index->Put("lost", "field"));
  ASSERT_OK(CcehIndex::Create(alloc_.get(), FieldIndexOptions({}), &empty, &index));
  PutOptions flagged;
  flagged.meta.flags = kItemFlagHash;
  ASSERT_OK(index_->Put("empty", EncodeHashHeader(empty), flagged));
  index.reset();
  {
    CcehCheckReport r = CcehIndex::Check(alloc_.get(), header_);
    VnodeHashes::Check(alloc_.get(), &r);
    EXPECT_TRUE(r.ok()) << r.ToString();
    EXPECT_EQ(r.empty_hashes, 1u);
    EXPECT_LT(r.reachable.size(), alloc_->Stats().blocks_allocated);  // the orphan
  }
  uint64_t reclaimed = 0;
  Reopen(&reclaimed);
  EXPECT_GT(reclaimed, 0u);  // the orphan, and the empty hash's blocks
  bool exists = true;
  ASSERT_OK(index_->Exists("empty", &exists));
  EXPECT_FALSE(exists);
  for (int h = 0; h < 20; h++) {
    const std::string key = "h" + std::to_string(h);
    ASSERT_OK(hashes_->Length(key, &n));
    EXPECT_EQ(n, 50u * h + 1) << key;
    EXPECT_EQ(HGet(key, "f0"), "f0");
  }
  ExpectClean();
}

TEST_F(HashTest, CheckFindsADamagedHeader) {
  PutOptions flagged;
  flagged.meta.flags = kItemFlagHash;
  ASSERT_OK(index_->Put("bad", "not a header", flagged));
  ASSERT_OK(index_->Put("elsewhere", EncodeHashHeader(header_), flagged));  // the vnode's own index
  CcehCheckReport r = CcehIndex::Check(alloc_.get(), header_);
  VnodeHashes::Check(alloc_.get(), &r);
  ASSERT_EQ(r.violations.size(), 2u) << r.ToString();
  EXPECT_NE(r.violations[0].find("hash"), std::string::npos);
  hashes_.reset();
  EXPECT_EQ(VnodeHashes::Open(alloc_.get(), index_.get(), {}, &hashes_).code(),
            StatusCode::kCorruption);
}

// A header item the vnode's index drops itself (a string set over the
// hash, a plain delete, an expiry) detaches the field index, and
// FreeDetached frees every block of it; rewriting the same header item
// (a transaction's commit of an unchanged hash) detaches nothing.
TEST_F(HashTest, HeaderDroppedByTheIndexFreesTheFields) {
  std::vector<std::string> names;
  for (int i = 0; i < 200; i++) names.push_back("f" + std::to_string(i));
  auto make = [&](std::string_view key) {
    Fields fields;
    for (const std::string& f : names) fields.emplace_back(f, f);
    uint64_t added = 0;
    ASSERT_OK(hashes_->Set(key, fields, false, &added));
    ASSERT_EQ(added, names.size());
  };
  const uint64_t empty_vnode = alloc_->Stats().blocks_allocated;
  make("h");
  ASSERT_OK(index_->Put("h", "a string now"));
  ASSERT_OK(hashes_->FreeDetached());
  EXPECT_EQ(alloc_->Stats().blocks_allocated, empty_vnode + 1);  // the string's item
  EXPECT_EQ(HGet("h", "f1"), "<failed_precondition>");
  ExpectClean();

  make("g");
  ASSERT_OK(index_->Delete("g"));
  ASSERT_OK(hashes_->FreeDetached());
  EXPECT_EQ(alloc_->Stats().blocks_allocated, empty_vnode + 1);
  ExpectClean();

  make("e");
  std::string header;
  ItemMeta meta;
  ASSERT_OK(index_->Get("e", &header, &meta));
  PutOptions same;
  same.meta = meta;
  ASSERT_OK(index_->Put("e", header, same));  // the same hash: nothing detached
  ASSERT_OK(hashes_->FreeDetached());
  EXPECT_EQ(HGet("e", "f7"), "f7");
  ASSERT_OK(index_->Update("e", [](const std::string_view*, const ItemMeta&, Mutation* m) {
    m->kind = Mutation::kSetExpiry;
    m->meta.expire_at_ms = 1;  // long past
    return Status::OK();
  }));
  uint64_t next = 0, freed = 0;
  for (uint64_t pos = 0;; pos = next) {
    ASSERT_OK(index_->ReclaimExpired(pos, &next, &freed));
    if (next == 0) break;
  }
  EXPECT_EQ(freed, 1u);
  ASSERT_OK(hashes_->FreeDetached());
  EXPECT_EQ(alloc_->Stats().blocks_allocated, empty_vnode + 1);
  ExpectClean();
  uint64_t reclaimed = 0;
  Reopen(&reclaimed);
  EXPECT_EQ(reclaimed, 0u);  // nothing was left behind
}

// A hash of a million fields: set in batches, counted, enumerated once
// each by a scan, one field's update costing one item (not a rewrite of
// the hash), removed whole. It prints its wall and CPU time: 65 s of wall
// time under a load of 18 on this 2-core machine, 10.6 s of CPU.
TEST_F(HashTest, AMillionFields) {
  Make(64);
  // 100 batches of 10,000; a sanitizer pass (PDPM_TEST_SCALE) runs fewer,
  // never under 20: the same code over fewer fields.
  const int fields = 10000 * static_cast<int>(ScaledForTest(100, 20));
  const auto started = std::chrono::steady_clock::now();
  const std::clock_t cpu_started = std::clock();
  std::vector<std::string> names(fields);
  for (int i = 0; i < fields; i++) names[i] = "field:" + std::to_string(i);
  uint64_t n = 0, added = 0;
  for (int at = 0; at < fields; at += 10000) {
    Fields batch;
    for (int i = at; i < at + 10000; i++) batch.emplace_back(names[i], names[i]);
    ASSERT_OK(hashes_->Set("big", batch, false, &n));
    added += n;
  }
  EXPECT_EQ(added, static_cast<uint64_t>(fields));
  ASSERT_OK(hashes_->Length("big", &n));
  EXPECT_EQ(n, static_cast<uint64_t>(fields));
  const dsm::PAllocatorStats before = alloc_->Stats();
  ASSERT_OK(hashes_->Set("big", Fields{{names[123456], "changed"}}, false, &n));
  EXPECT_EQ(n, 0u);
  const dsm::PAllocatorStats after = alloc_->Stats();
  EXPECT_EQ(after.blocks_allocated, before.blocks_allocated);  // one item replaced
  EXPECT_LE(after.bytes_allocated, before.bytes_allocated + 256);
  EXPECT_EQ(HGet("big", names[123456]), "changed");
  std::set<std::string> seen;
  VnodeHashes::FieldPage page;
  uint64_t cursor = 0;
  do {
    ASSERT_OK(hashes_->Scan("big", cursor, 1000, &page));
    for (const auto& [f, v] : page.fields) ASSERT_TRUE(seen.insert(f).second) << f;
    cursor = page.next_cursor;
  } while (!page.done);
  EXPECT_EQ(seen.size(), static_cast<size_t>(fields));
  Reopen();
  ASSERT_OK(hashes_->Length("big", &n));
  EXPECT_EQ(n, static_cast<uint64_t>(fields));
  ExpectClean();
  ASSERT_OK(hashes_->Remove("big"));
  EXPECT_EQ(alloc_->Stats().blocks_allocated, 3u);  // the vnode's header, directory, segment
  std::printf("%d fields: %.1f s, %.1f s of CPU\n", fields,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
              static_cast<double>(std::clock() - cpu_started) / CLOCKS_PER_SEC);
}

}  // namespace
}  // namespace pdpm::pdkvs
