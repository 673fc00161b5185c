#include "dsm/object_store.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dsm/dsm_test_region.h"
#include "dsm/segment_check.h"

namespace pdpm::dsm {
namespace {

std::string Bytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return s;
}

class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(PAllocator::Format(region_.range()).ok());
    ASSERT_TRUE(PAllocator::Open(region_.range(), {}, &alloc_).ok());
    Status s = ObjectStoreTable::Create(alloc_.get(), {}, &table_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Drops every DRAM structure and recovers from the region alone.
  ObjectStoreRecovery Reopen() {
    table_.reset();
    alloc_.reset();
    EXPECT_TRUE(PAllocator::Open(region_.range(), {}, &alloc_).ok());
    ObjectStoreRecovery rec;
    Status s = ObjectStoreTable::Open(alloc_.get(), {}, &table_, &rec);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return rec;
  }

  SegmentCheckReport Check() { return CheckSegment(region_.base(), region_.size(), 0); }

  std::string Get(const ObjectId& id) {
    std::string v;
    Status s = table_->Get(id, &v);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return v;
  }

  TestRegion region_{24 * kChunkSize};
  std::unique_ptr<PAllocator> alloc_;
  std::unique_ptr<ObjectStoreTable> table_;
};

TEST_F(ObjectStoreTest, PutGetRoundTripsEverySize) {
  uint64_t n = 0;
  for (size_t size : {0ul, 1ul, 4095ul, 4096ul, 4097ul, 100000ul, 1ul << 20, (3ul << 20) + 17}) {
    ObjectId id{7, n++};
    std::string v = Bytes(size, size);
    ASSERT_TRUE(table_->Put(id, v).ok());
    uint64_t got_size;
    ASSERT_TRUE(table_->Size(id, &got_size).ok());
    EXPECT_EQ(got_size, size);
    EXPECT_EQ(Get(id), v) << size;
  }
  SegmentCheckReport r = Check();
  EXPECT_TRUE(r.clean()) << r.ToString();
  EXPECT_EQ(r.objects, n);
  Reopen();
  n = 0;
  for (size_t size : {0ul, 1ul, 4095ul, 4096ul, 4097ul, 100000ul, 1ul << 20, (3ul << 20) + 17}) {
    EXPECT_EQ(Get(ObjectId{7, n++}), Bytes(size, size));
  }
}

TEST_F(ObjectStoreTest, PutReplacesAndFreesTheOldVersion) {
  ObjectId id{1, 2};
  ASSERT_TRUE(table_->Put(id, Bytes(200000, 1)).ok());
  uint64_t after_first = alloc_->Stats().bytes_allocated;
  ASSERT_TRUE(table_->Put(id, Bytes(10, 2)).ok());
  EXPECT_EQ(Get(id), Bytes(10, 2));
  EXPECT_LT(alloc_->Stats().bytes_allocated, after_first);
  ASSERT_TRUE(table_->Put(id, Bytes(200000, 1)).ok());
  EXPECT_EQ(alloc_->Stats().bytes_allocated, after_first);
  EXPECT_TRUE(Check().clean());
}

TEST_F(ObjectStoreTest, PartialWritesAtAnyOffset) {
  ObjectId id{3, 3};
  std::string model = Bytes(300000, 9);
  ASSERT_TRUE(table_->Put(id, model).ok());
  struct W {
    uint64_t off;
    size_t len;
  };
  // Inside one page, across page and extent boundaries, a whole extent, the
  // tail, past the end (extends) and far past the end (leaves a hole).
  for (W w : {W{10, 5}, W{4090, 20}, W{65530, 70000}, W{131072, 65536}, W{299990, 10},
              W{299995, 100}, W{500000, 3000}, W{1 << 20, 1}}) {
    std::string data = Bytes(w.len, w.off);
    ASSERT_TRUE(table_->Write(id, w.off, data).ok()) << w.off;
    if (model.size() < w.off + w.len) model.resize(w.off + w.len, '\0');
    model.replace(w.off, w.len, data);
    ASSERT_EQ(Get(id), model) << w.off;
  }
  uint64_t size;
  ASSERT_TRUE(table_->Size(id, &size).ok());
  EXPECT_EQ(size, (1u << 20) + 1);
  // Reads at any offset and length, holes as zeros.
  for (auto [off, len] : {std::pair<uint64_t, uint64_t>{0, 1},
                          {4095, 2},
                          {299000, 250000},
                          {600000, 1000},
                          {size - 1, 1},
                          {size, 0}}) {
    std::string buf(len, 'x');
    ASSERT_TRUE(table_->Read(id, off, len, buf.data()).ok());
    EXPECT_EQ(buf, model.substr(off, len)) << off;
  }
  EXPECT_TRUE(table_->Write(id, 5, "").ok());
  SegmentCheckReport r = Check();
  EXPECT_TRUE(r.clean()) << r.ToString();
  Reopen();
  EXPECT_EQ(Get(id), model);
}

TEST_F(ObjectStoreTest, ErrorsAreDistinctAndHarmless) {
  ObjectId id{5, 5}, missing{5, 6};
  ASSERT_TRUE(table_->Put(id, Bytes(5000, 5)).ok());
  std::string v;
  char buf[16];
  uint64_t size;
  EXPECT_EQ(table_->Get(missing, &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(table_->Size(missing, &size).code(), StatusCode::kNotFound);
  EXPECT_EQ(table_->Read(missing, 0, 1, buf).code(), StatusCode::kNotFound);
  EXPECT_EQ(table_->Write(missing, 0, "x").code(), StatusCode::kNotFound);
  EXPECT_EQ(table_->Delete(missing).code(), StatusCode::kNotFound);
  EXPECT_EQ(table_->Read(id, 4999, 2, buf).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(table_->Read(id, 5001, 0, buf).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(table_->Read(id, UINT64_MAX, 2, buf).code(), StatusCode::kOutOfRange);
  std::string too_big(kMaxObjectSize + 1, 'x');
  EXPECT_EQ(table_->Put(id, too_big).code(), StatusCode::kTooLarge);
  EXPECT_EQ(table_->Write(id, kMaxObjectSize - 3, "abcd").code(), StatusCode::kTooLarge);
  EXPECT_EQ(table_->Write(id, UINT64_MAX - 1, "abcd").code(), StatusCode::kTooLarge);
  EXPECT_EQ(Get(id), Bytes(5000, 5));
  // The very last bytes an object may hold.
  ASSERT_TRUE(table_->Write(id, kMaxObjectSize - 4, "abcd").ok());
  ASSERT_TRUE(table_->Size(id, &size).ok());
  EXPECT_EQ(size, kMaxObjectSize);
  ASSERT_TRUE(table_->Read(id, kMaxObjectSize - 4, 4, buf).ok());
  EXPECT_EQ(std::string(buf, 4), "abcd");

  std::unique_ptr<ObjectStoreTable> again;
  EXPECT_EQ(ObjectStoreTable::Create(alloc_.get(), {}, &again).code(), StatusCode::kAlreadyExists);
  ObjectStoreOptions other;
  other.root_slot = 1;
  EXPECT_EQ(ObjectStoreTable::Open(alloc_.get(), other, &again, nullptr).code(),
            StatusCode::kNotFound);
  other.root_slot = kNumRoots;
  EXPECT_EQ(ObjectStoreTable::Open(alloc_.get(), other, &again, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(Check().clean());
}

TEST_F(ObjectStoreTest, DeleteFreesEverything) {
  uint64_t empty = alloc_->Stats().bytes_allocated;
  for (uint64_t i = 0; i < 50; ++i) ASSERT_TRUE(table_->Put({0, i}, Bytes(i * 3000, i)).ok());
  ASSERT_TRUE(table_->Write({0, 3}, 100000, "tail").ok());
  for (uint64_t i = 0; i < 50; ++i) ASSERT_TRUE(table_->Delete({0, i}).ok());
  EXPECT_EQ(alloc_->Stats().bytes_allocated, empty);
  std::string v;
  EXPECT_EQ(table_->Get({0, 3}, &v).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Check().clean());
}

TEST_F(ObjectStoreTest, FullRegionLeavesObjectsIntactAndLeaksNothing) {
  ObjectId keep{9, 9};
  ASSERT_TRUE(table_->Put(keep, Bytes(70000, 1)).ok());
  Status s;
  uint64_t i = 0;
  while ((s = table_->Put({1, i}, Bytes(8 << 20, i))).ok()) ++i;
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_GT(i, 0u);
  EXPECT_EQ(table_->ObjectCount(), i + 1);  // a failed put adds nothing
  EXPECT_EQ(table_->Put(keep, Bytes(8 << 20, 2)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Get(keep), Bytes(70000, 1));
  SegmentCheckReport r = Check();
  EXPECT_TRUE(r.clean()) << r.ToString();
  ASSERT_TRUE(table_->Delete({1, 0}).ok());
  EXPECT_TRUE(table_->Put(keep, Bytes(8 << 20, 2)).ok());
}

TEST_F(ObjectStoreTest, TruncateDropsTheTailAndFreesItsPages) {
  ObjectId id{4, 4};
  std::string model = Bytes(700000, 4);
  ASSERT_TRUE(table_->Put(id, model).ok());
  ASSERT_TRUE(table_->Write(id, 3 << 20, "far").ok());  // a hole, then 3 bytes
  model.resize((3 << 20) + 3, '\0');
  model.replace(3 << 20, 3, "far");
  // Larger or equal: nothing changes. Inside the hole, inside a page,
  // on a page boundary, to zero.
  for (uint64_t size : {uint64_t{4} << 20, uint64_t{(3 << 20) + 3}, uint64_t{2} << 20,
                        uint64_t{600001}, uint64_t{409600}, uint64_t{1}, uint64_t{0}}) {
    ASSERT_TRUE(table_->Truncate(id, size).ok()) << size;
    if (size < model.size()) model.resize(size);
    ASSERT_EQ(Get(id), model) << size;
    uint64_t got = 0;
    ASSERT_TRUE(table_->Size(id, &got).ok());
    EXPECT_EQ(got, model.size());
    // Growing again reads zeros where the old bytes were.
    ASSERT_TRUE(table_->Write(id, size + 5000, "x").ok());
    model.resize(size + 5001, '\0');
    model[size + 5000] = 'x';
    ASSERT_EQ(Get(id), model) << size;
    SegmentCheckReport r = Check();
    ASSERT_TRUE(r.clean()) << r.ToString();
  }
  EXPECT_EQ(table_->Truncate({9, 9}, 0).code(), StatusCode::kNotFound);
  // Truncation gives the pages back: the 96 MiB region could not hold 120
  // MiB of them.
  for (int i = 0; i < 120; ++i) {
    ASSERT_TRUE(table_->Write(id, (60 << 20) + 1, Bytes(1 << 20, i)).ok()) << i;
    ASSERT_TRUE(table_->Truncate(id, 1).ok());
  }
  Reopen();
  EXPECT_EQ(Get(id), model.substr(0, 1));
}

TEST_F(ObjectStoreTest, RandomOperationsMatchAModel) {
  std::map<uint64_t, std::string> model;
  std::mt19937_64 rng(42);
  for (int step = 0; step < 1500; ++step) {
    uint64_t k = rng() % 24;
    ObjectId id{k * 7919, k};
    int op = rng() % 10;
    auto it = model.find(k);
    if (op < 3) {
      std::string v = Bytes(rng() % 150000, step);
      ASSERT_TRUE(table_->Put(id, v).ok());
      model[k] = v;
    } else if (op < 6) {
      uint64_t off = rng() % 200000;
      std::string d = Bytes(1 + rng() % 20000, step);
      Status s = table_->Write(id, off, d);
      if (it == model.end()) {
        ASSERT_EQ(s.code(), StatusCode::kNotFound);
        continue;
      }
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (it->second.size() < off + d.size()) it->second.resize(off + d.size(), '\0');
      it->second.replace(off, d.size(), d);
    } else if (op == 6 && step % 2 == 0) {
      uint64_t size = rng() % 200000;
      Status s = table_->Truncate(id, size);
      ASSERT_EQ(s.code(), it == model.end() ? StatusCode::kNotFound : StatusCode::kOk);
      if (it != model.end() && size < it->second.size()) it->second.resize(size);
    } else if (op < 7) {
      Status s = table_->Delete(id);
      ASSERT_EQ(s.code(), it == model.end() ? StatusCode::kNotFound : StatusCode::kOk);
      model.erase(k);
    } else {
      if (it == model.end()) continue;
      uint64_t off = rng() % (it->second.size() + 1);
      uint64_t len = rng() % (it->second.size() - off + 1);
      std::string buf(len, '\0');
      ASSERT_TRUE(table_->Read(id, off, len, buf.data()).ok());
      ASSERT_EQ(buf, it->second.substr(off, len)) << step;
    }
    ASSERT_EQ(table_->ObjectCount(), model.size()) << step;
    if (step % 250 == 249) {
      SegmentCheckReport r = Check();
      ASSERT_TRUE(r.clean()) << r.ToString();
      ObjectStoreRecovery rec = Reopen();
      EXPECT_EQ(rec.objects, model.size());
      EXPECT_EQ(table_->ObjectCount(), model.size());
      EXPECT_EQ(rec.reclaimed_blocks, 0u);
      EXPECT_EQ(rec.repaired_links, 0u);
      for (auto& [key, value] : model) ASSERT_EQ(Get({key * 7919, key}), value);
    }
  }
}

TEST_F(ObjectStoreTest, ListIdsPagesThroughOneTagInOrder) {
  // Ids of two tags, interleaved in the hash index.
  std::vector<ObjectId> tagged;
  for (uint64_t i = 0; i < 300; i++) {
    ObjectId mine{(uint64_t{7} << 32) | (i % 5), i * 0x9e3779b97f4a7c15ull};
    ASSERT_TRUE(table_->Put(mine, "x").ok());
    ASSERT_TRUE(table_->Put(ObjectId{(uint64_t{8} << 32) | i, i}, "y").ok());
    tagged.push_back(mine);
  }
  std::sort(tagged.begin(), tagged.end(), [](const ObjectId& a, const ObjectId& b) {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
  });
  std::vector<ObjectId> listed, page;
  ObjectId start{uint64_t{7} << 32, 0};
  do {
    table_->ListIds(7, start, 64, &page);
    ASSERT_LE(page.size(), 64u);
    listed.insert(listed.end(), page.begin(), page.end());
    if (!page.empty()) {
      start = page.back();
      if (++start.lo == 0) ++start.hi;
    }
  } while (page.size() == 64);
  EXPECT_EQ(listed, tagged);
  table_->ListIds(9, {}, 10, &page);
  EXPECT_TRUE(page.empty());
  table_->ListIds(7, {}, 0, &page);
  EXPECT_TRUE(page.empty());
}

// A split's copy and sweep of the upper half of a table segment
// (docs/dsm.md "Tables across segments"): the listing in pages returns the
// objects of the range in (position, id) order — ties of one position by
// id —, every object present for the whole listing exactly once while
// others come and go, and deleting what it lists empties the range and
// nothing else.
TEST_F(ObjectStoreTest, ListIdsByPositionPagesThroughARangeWhileObjectsComeAndGo) {
  // Positions with ties: four ids share each position.
  auto position_of = [](const ObjectId& id) { return (id.lo >> 2) * 0x9e3779b97f4a7c15ull; };
  const TableRange upper{1, 1};
  std::vector<PositionedId> stable_upper;
  for (uint64_t i = 0; i < 400; ++i) {
    ObjectId id{i % 3, i};
    ASSERT_TRUE(table_->Put(id, "s").ok());
    if (upper.Covers(position_of(id))) stable_upper.push_back({position_of(id), id});
  }
  std::sort(stable_upper.begin(), stable_upper.end(),
            [](const PositionedId& a, const PositionedId& b) {
              if (a.position != b.position) return a.position < b.position;
              return a.id.hi != b.id.hi ? a.id.hi < b.id.hi : a.id.lo < b.id.lo;
            });
  ASSERT_GT(stable_upper.size(), 150u);
  ASSERT_LT(stable_upper.size(), 250u);

  std::vector<PositionedId> listed, page;
  uint64_t churn = 1000;
  const PositionedId* after = nullptr;
  PositionedId last;
  do {
    table_->ListIdsByPosition(position_of, upper, after, 32, &page);
    ASSERT_LE(page.size(), 32u);
    listed.insert(listed.end(), page.begin(), page.end());
    // Objects that exist only between pages.
    ObjectId coming{7, churn++};
    ASSERT_TRUE(table_->Put(coming, "c").ok());
    if (churn % 2 == 0) {
      ASSERT_TRUE(table_->Delete(coming).ok());
    }
    if (!page.empty()) {
      last = page.back();
      after = &last;
    }
  } while (page.size() == 32);
  std::vector<PositionedId> listed_stable;
  for (const PositionedId& p : listed) {
    EXPECT_TRUE(upper.Covers(p.position));
    EXPECT_EQ(p.position, position_of(p.id));
    if (p.id.hi != 7) listed_stable.push_back(p);
  }
  EXPECT_EQ(listed_stable, stable_upper);
  for (size_t i = 1; i < listed.size(); ++i) {
    const PositionedId& a = listed[i - 1];
    const PositionedId& b = listed[i];
    ASSERT_TRUE(a.position < b.position ||
                (a.position == b.position &&
                 (a.id.hi < b.id.hi || (a.id.hi == b.id.hi && a.id.lo < b.id.lo))));
  }

  // The sweep after a split: delete the upper half page by page.
  do {
    table_->ListIdsByPosition(position_of, upper, nullptr, 64, &page);
    for (const PositionedId& p : page) ASSERT_TRUE(table_->Delete(p.id).ok());
  } while (!page.empty());
  table_->ListIdsByPosition(position_of, TableRange{}, nullptr, 1000, &page);
  for (const PositionedId& p : page) EXPECT_FALSE(upper.Covers(p.position));
  size_t lower_stable = 0;
  for (const PositionedId& p : page) lower_stable += p.id.hi != 7;
  EXPECT_EQ(lower_stable, 400 - stable_upper.size());
  table_->ListIdsByPosition(position_of, upper, nullptr, 0, &page);
  EXPECT_TRUE(page.empty());
}

TEST_F(ObjectStoreTest, TraceMatchesTheAllocatedObjectStoreBlocks) {
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(table_->Put({2, i}, Bytes(i * 40000, i)).ok());
  std::unordered_set<uint64_t> blocks;
  table_->Trace(&blocks);
  SegmentCheckReport r = Check();
  EXPECT_EQ(blocks.size(), r.allocated_blocks);
  EXPECT_EQ(r.allocated_bytes, alloc_->Stats().bytes_allocated);
  // Everything traced is allocated: freeing each works exactly once.
  for (uint64_t b : blocks) ASSERT_TRUE(alloc_->Free(b, BlockOwner::kObjectStore).ok());
  EXPECT_EQ(alloc_->Stats().blocks_allocated, 0u);
}

TEST_F(ObjectStoreTest, CheckerFindsDamageAndOpenRepairsCrashLeftovers) {
  ObjectId id{4, 4};
  ASSERT_TRUE(table_->Put(id, Bytes(200000, 4)).ok());
  uint64_t entry_obj = 0;
  std::unordered_set<uint64_t> blocks;
  table_->Trace(&blocks);

  // A leaked block and a stale tower: repairable, and Open repairs both.
  uint64_t leak;
  ASSERT_TRUE(alloc_->Allocate(4096, BlockOwner::kObjectStore, 0, &leak).ok());
  for (uint64_t b : blocks) {
    auto* h = alloc_->At<ObjectHeader>(b);
    if (h->magic == kObjectHeaderMagic) entry_obj = b;
  }
  ASSERT_NE(entry_obj, 0u);
  auto* h = alloc_->At<ObjectHeader>(entry_obj);
  uint64_t saved[kMaxLevel];
  memcpy(saved, h->head, sizeof(saved));
  // Level 1 now skips straight to the end, as after a crash right after a
  // level-0 switch.
  for (int l = 1; l < kMaxLevel; ++l) h->head[l] = 0;
  bool had_tower = false;
  for (int l = 1; l < kMaxLevel; ++l) had_tower |= saved[l] != 0;
  SegmentCheckReport r = Check();
  EXPECT_TRUE(r.ok()) << r.ToString();
  EXPECT_EQ(r.leaked_blocks, 1u);
  EXPECT_EQ(r.repairable.size(), had_tower ? 2u : 1u) << r.ToString();
  ObjectStoreRecovery rec = Reopen();
  EXPECT_EQ(rec.reclaimed_blocks, 1u);
  EXPECT_EQ(rec.repaired_links > 0, had_tower);
  r = Check();
  EXPECT_TRUE(r.clean()) << r.ToString();
  EXPECT_EQ(Get(id), Bytes(200000, 4));

  // A flipped data byte: checksum mismatch.
  auto* node = alloc_->At<ExtentNode>(h->head[0]);
  alloc_->At<char>(node->data)[100] ^= 0x40;
  r = Check();
  ASSERT_EQ(r.violations.size(), 1u) << r.ToString();
  EXPECT_NE(r.violations[0].find("checksum"), std::string::npos);
  alloc_->At<char>(node->data)[100] ^= 0x40;

  // A reachable block whose bit is clear: reachable and free.
  uint64_t data = node->data;
  uint32_t chunk = static_cast<uint32_t>(data / kChunkSize);
  ChunkState st;
  ASSERT_TRUE(ReadChunkHeader(region_.base(), 24, chunk, &st).ok());
  uint64_t b = (data % kChunkSize - ClassDataStart(st.size_class)) / ClassBlockSize(st.size_class);
  BitmapOf(region_.base(), chunk)[b / 64] &= ~(1ull << (b % 64));
  r = Check();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.ToString().find("reachable but not allocated"), std::string::npos) << r.ToString();
  table_.reset();
  std::unique_ptr<PAllocator> a;
  ASSERT_TRUE(PAllocator::Open(region_.range(), {}, &a).ok());
  EXPECT_EQ(ObjectStoreTable::Open(a.get(), {}, &table_, nullptr).code(), StatusCode::kCorruption);
  BitmapOf(region_.base(), chunk)[b / 64] |= 1ull << (b % 64);

  // A damaged extent node: Open refuses the table, the checker names it.
  node->offset += kPageSize;
  r = Check();
  EXPECT_NE(r.ToString().find("crc mismatch"), std::string::npos) << r.ToString();
  ASSERT_TRUE(PAllocator::Open(region_.range(), {}, &a).ok());
  EXPECT_EQ(ObjectStoreTable::Open(a.get(), {}, &table_, nullptr).code(), StatusCode::kCorruption);

  // A well-formed node whose extent overlaps its predecessor's.
  node->offset -= kPageSize;
  auto* second = alloc_->At<ExtentNode>(node->next[0]);
  ASSERT_NE(node->next[0], 0u);
  second->offset -= kPageSize;
  second->crc = Crc32c(second, offsetof(ExtentNode, crc));
  r = Check();
  EXPECT_NE(r.ToString().find("overlaps"), std::string::npos) << r.ToString();
  ASSERT_TRUE(PAllocator::Open(region_.range(), {}, &a).ok());
  EXPECT_EQ(ObjectStoreTable::Open(a.get(), {}, &table_, nullptr).code(), StatusCode::kCorruption);
}

TEST_F(ObjectStoreTest, DamagedImagesAreRefusedNotTrusted) {
  std::mt19937_64 rng(7);
  for (uint64_t i = 0; i < 12; ++i) {
    ASSERT_TRUE(table_->Put({6, i}, Bytes(rng() % 100000, i)).ok());
    ASSERT_TRUE(table_->Write({6, i}, rng() % 120000, Bytes(5000, i)).ok());
  }
  std::unordered_set<uint64_t> traced;
  table_->Trace(&traced);
  std::vector<uint64_t> targets(traced.begin(), traced.end());
  for (uint32_t c = 0; c < 24; ++c) targets.push_back(uint64_t{c} * kChunkSize);
  std::sort(targets.begin(), targets.end());
  table_.reset();
  alloc_.reset();
  // Each round damages a private copy-on-write view of the good image.
  int fd = memfd_create("pdpm-good-image", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, region_.base(), region_.size()), static_cast<ssize_t>(region_.size()));
  for (int round = 0; round < 150; ++round) {
    void* view = mmap(nullptr, region_.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ASSERT_NE(view, MAP_FAILED);
    PmRange damaged{static_cast<char*>(view), region_.size(), [](const void*, size_t) {}};
    std::unique_ptr<void, std::function<void(void*)>> unmap(
        view, [&](void* p) { munmap(p, region_.size()); });
    // One to three flipped bytes in the first 64 bytes of a chunk header or
    // a traced block (records and metadata live there).
    for (int k = 0; k < 1 + round % 3; ++k) {
      uint64_t at = targets[rng() % targets.size()] + rng() % 64;
      damaged.base[at] ^= static_cast<char>(1 + rng() % 255);
    }
    // Neither the checker nor recovery may crash or hand out a reachable
    // block; when recovery accepts the image, the checker agrees.
    SegmentCheckReport before = CheckSegment(damaged.base, damaged.size, 0);
    std::unique_ptr<PAllocator> a;
    std::unique_ptr<ObjectStoreTable> t;
    if (!PAllocator::Open(damaged, {}, &a).ok()) continue;
    if (!ObjectStoreTable::Open(a.get(), {}, &t, nullptr).ok()) continue;
    SegmentCheckReport after = CheckSegment(damaged.base, damaged.size, 0);
    EXPECT_EQ(after.violations.empty(), before.violations.empty()) << after.ToString();
    EXPECT_TRUE(after.repairable.empty()) << after.ToString();
    for (uint64_t i = 0; i < 12; ++i) {
      std::string v;
      Status s = t->Get({6, i}, &v);
      EXPECT_TRUE(s.ok() || s.code() == StatusCode::kNotFound) << s.ToString();
    }
  }
  close(fd);
}

TEST_F(ObjectStoreTest, CheckerRefusesAnUnformattedRegion) {
  TestRegion blank(4 * kChunkSize);
  SegmentCheckReport r = CheckSegment(blank.base(), blank.size(), 0);
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_NE(r.violations[0].find("region header"), std::string::npos);
  std::unique_ptr<PAllocator> a;
  EXPECT_EQ(PAllocator::Open(blank.range(), {}, &a).code(), StatusCode::kCorruption);
}

TEST_F(ObjectStoreTest, ReadersNeverSeeAHalfDoneUpdate) {
  // Every version of an object is one repeated byte; a reader must always
  // see a single version, whatever the writer is doing.
  const ObjectId id{8, 8};
  const size_t size = 150000;
  ASSERT_TRUE(table_->Put(id, std::string(size, 'a')).ok());
  std::atomic<bool> done{false};
  auto reader = [&] {
    std::string v;
    while (!done.load()) {
      ASSERT_TRUE(table_->Get(id, &v).ok());
      ASSERT_EQ(v.size(), size);
      ASSERT_EQ(v.find_first_not_of(v[0]), std::string::npos) << "torn read";
    }
  };
  std::thread r1(reader), r2(reader);
  for (int i = 0; i < 200; ++i) {
    char c = static_cast<char>('b' + i % 20);
    Status s =
        i % 2 ? table_->Put(id, std::string(size, c)) : table_->Write(id, 0, std::string(size, c));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  done = true;
  r1.join();
  r2.join();
  EXPECT_TRUE(Check().clean());
}

}  // namespace
}  // namespace pdpm::dsm
