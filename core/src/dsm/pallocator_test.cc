#include "dsm/pallocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "dsm/dsm_test_region.h"

namespace pdpm::dsm {
namespace {

class PAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(PAllocator::Format(region_.range()).ok()); }

  std::unique_ptr<PAllocator> Open(int cores = 1) {
    std::unique_ptr<PAllocator> a;
    Status s = PAllocator::Open(region_.range(), PAllocatorOptions{cores}, &a);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return a;
  }

  TestRegion region_{32 * kChunkSize};
};

TEST_F(PAllocatorTest, FreshRegionIsAllFree) {
  auto a = Open();
  PAllocatorStats st = a->Stats();
  EXPECT_EQ(st.chunks_total, 32u);
  EXPECT_EQ(st.chunks_free, 32u);
  EXPECT_EQ(st.blocks_allocated, 0u);
  for (int slot = 0; slot < kNumRoots; ++slot) EXPECT_EQ(a->GetRoot(slot), 0u);
}

TEST_F(PAllocatorTest, AllocatesEveryClassAndLargeRuns) {
  auto a = Open();
  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // offset, requested size
  for (uint64_t size : std::vector<uint64_t>{1, 64, 65, 1000, 4096, 4097, 65536, 300000,
                                             kMaxClassSize, kMaxClassSize + 1, 2 * kChunkSize}) {
    uint64_t off;
    Status s = a->Allocate(size, BlockOwner::kHeap, 0, &off);
    ASSERT_TRUE(s.ok()) << size << ": " << s.ToString();
    uint64_t bs;
    ASSERT_TRUE(a->BlockSize(off, BlockOwner::kHeap, &bs).ok());
    EXPECT_GE(bs, size);
    if (size <= kMaxClassSize) {
      EXPECT_LT(bs, 2 * size + kMinBlockSize);
    }
    EXPECT_EQ(off % std::min<uint64_t>(bs, kPageSize), 0u) << size;
    // The whole block is usable and does not overlap another one.
    memset(a->At<char>(off), 0xab, size);
    blocks.push_back({off, bs});
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    EXPECT_LE(blocks[i - 1].first + blocks[i - 1].second, blocks[i].first);
  }
  for (auto [off, size] : blocks) EXPECT_TRUE(a->Free(off, BlockOwner::kHeap).ok());
  EXPECT_EQ(a->Stats().blocks_allocated, 0u);
}

TEST_F(PAllocatorTest, ClearErrors) {
  auto a = Open();
  uint64_t off, big;
  EXPECT_EQ(a->Allocate(0, BlockOwner::kHeap, 0, &off).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Allocate(64, BlockOwner::kHeap, 1, &off).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Allocate(64, BlockOwner::kHeap, -7, &off).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(a->Allocate(100, BlockOwner::kHeap, 0, &off).ok());
  ASSERT_TRUE(a->Allocate(2 * kChunkSize, BlockOwner::kHeap, 0, &big).ok());

  EXPECT_EQ(a->Free(0, BlockOwner::kHeap).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Free(off + 8, BlockOwner::kHeap).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Free(32 * kChunkSize + 64, BlockOwner::kHeap).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Free(off, BlockOwner::kObjectStore).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Free(big + 4096, BlockOwner::kHeap).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Free(big + kChunkSize, BlockOwner::kHeap).code(), StatusCode::kInvalidArgument);
  // A never-used chunk: a block could start there but none is allocated.
  EXPECT_EQ(a->Free(5 * kChunkSize + kLargeDataOffset, BlockOwner::kHeap).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Free(5 * kChunkSize + 100, BlockOwner::kHeap).code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(a->Free(off, BlockOwner::kHeap).ok());
  Status s = a->Free(off, BlockOwner::kHeap);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("already free"), std::string_view::npos);
  ASSERT_TRUE(a->Free(big, BlockOwner::kHeap).ok());
  EXPECT_EQ(a->Free(big, BlockOwner::kHeap).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Stats().blocks_allocated, 0u);
}

TEST_F(PAllocatorTest, FullRegionIsResourceExhaustedAndRecoversAfterFree) {
  auto a = Open();
  uint64_t off;
  EXPECT_EQ(a->Allocate(33 * kChunkSize, BlockOwner::kHeap, 0, &off).code(),
            StatusCode::kResourceExhausted);
  std::vector<uint64_t> blocks;
  Status s;
  while ((s = a->Allocate(kMaxClassSize, BlockOwner::kHeap, 0, &off)).ok()) blocks.push_back(off);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(blocks.size(), 32u * ClassBlockCount(kNumClasses - 1));
  EXPECT_EQ(a->Allocate(64, BlockOwner::kHeap, 0, &off).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(a->Free(blocks[5], BlockOwner::kHeap).ok());
  ASSERT_TRUE(a->Allocate(kMaxClassSize, BlockOwner::kHeap, 0, &off).ok());
  EXPECT_EQ(off, blocks[5]);
}

TEST_F(PAllocatorTest, EmptyChunksGoBackToTheRegion) {
  auto a = Open();
  const uint64_t bs = 64 << 10;
  const uint32_t per_chunk = ClassBlockCount(ClassForSize(bs));
  std::vector<uint64_t> blocks(size_t{3} * per_chunk);
  for (auto& b : blocks) ASSERT_TRUE(a->Allocate(bs, BlockOwner::kHeap, 0, &b).ok());
  EXPECT_EQ(a->Stats().chunks_free, 29u);
  for (auto b : blocks) ASSERT_TRUE(a->Free(b, BlockOwner::kHeap).ok());
  // The core keeps one chunk of the class; the others are free again and
  // can form a large run.
  EXPECT_EQ(a->Stats().chunks_free, 31u);
  uint64_t off;
  ASSERT_TRUE(a->Allocate(31 * kChunkSize - kLargeDataOffset, BlockOwner::kHeap, 0, &off).ok());
}

TEST_F(PAllocatorTest, HeapFromTheBottomObjectsFromTheTop) {
  auto a = Open();
  uint64_t heap, obj, heap_large, obj_large;
  ASSERT_TRUE(a->Allocate(64, BlockOwner::kHeap, 0, &heap).ok());
  ASSERT_TRUE(a->Allocate(4096, BlockOwner::kObjectStore, 0, &obj).ok());
  ASSERT_TRUE(a->Allocate(2 * kChunkSize, BlockOwner::kHeap, 0, &heap_large).ok());
  ASSERT_TRUE(a->Allocate(2 * kChunkSize, BlockOwner::kObjectStore, 0, &obj_large).ok());
  EXPECT_EQ(heap / kChunkSize, 0u);
  EXPECT_EQ(obj / kChunkSize, 31u);
  EXPECT_EQ(heap_large / kChunkSize, 1u);
  EXPECT_EQ(obj_large / kChunkSize, 28u);
}

TEST_F(PAllocatorTest, EachCoreAllocatesFromItsOwnChunks) {
  auto a = Open(2);
  uint64_t c0, c1, c0b;
  ASSERT_TRUE(a->Allocate(256, BlockOwner::kHeap, 0, &c0).ok());
  ASSERT_TRUE(a->Allocate(256, BlockOwner::kHeap, 1, &c1).ok());
  ASSERT_TRUE(a->Allocate(256, BlockOwner::kHeap, 0, &c0b).ok());
  EXPECT_NE(c0 / kChunkSize, c1 / kChunkSize);
  EXPECT_EQ(c0 / kChunkSize, c0b / kChunkSize);
  // Any core may free any block.
  EXPECT_TRUE(a->Free(c0, BlockOwner::kHeap).ok());
  uint64_t current;
  EXPECT_TRUE(a->Allocate(256, BlockOwner::kHeap, PAllocator::kCurrentCore, &current).ok());
}

TEST_F(PAllocatorTest, StateSurvivesReopen) {
  std::set<uint64_t> live;
  std::vector<uint64_t> freed;
  {
    auto a = Open();
    for (int i = 0; i < 200; ++i) {
      uint64_t off;
      ASSERT_TRUE(a->Allocate(64 << (i % 12), BlockOwner::kHeap, 0, &off).ok());
      live.insert(off);
    }
    uint64_t large;
    ASSERT_TRUE(a->Allocate(kChunkSize, BlockOwner::kObjectStore, 0, &large).ok());
    live.insert(large);
    for (int i = 0; i < 50; ++i) {
      uint64_t off = *std::next(live.begin(), static_cast<long>(i) * 3);
      ASSERT_TRUE(a->Free(off, BlockOwner::kHeap).ok());
      live.erase(off);
      freed.push_back(off);
    }
    ASSERT_TRUE(a->SetRoot(3, 0x1234).ok());
    EXPECT_EQ(a->SetRoot(kNumRoots, 1).code(), StatusCode::kInvalidArgument);
  }
  auto a = Open(2);
  EXPECT_EQ(a->GetRoot(3), 0x1234u);
  EXPECT_EQ(a->Stats().blocks_allocated, live.size());
  for (uint64_t off : freed) {
    EXPECT_EQ(a->Free(off, BlockOwner::kHeap).code(), StatusCode::kFailedPrecondition);
  }
  // New allocations never hand out a live block.
  for (int i = 0; i < 300; ++i) {
    uint64_t off;
    ASSERT_TRUE(a->Allocate(64 << (i % 12), BlockOwner::kHeap, i % 2, &off).ok());
    EXPECT_FALSE(live.count(off)) << off;
  }
}

TEST_F(PAllocatorTest, ReclaimUnreachableFreesOnlyTheOwnersLeaks) {
  auto a = Open();
  uint64_t keep, leak1, leak2, leak_large, heap;
  ASSERT_TRUE(a->Allocate(4096, BlockOwner::kObjectStore, 0, &keep).ok());
  ASSERT_TRUE(a->Allocate(4096, BlockOwner::kObjectStore, 0, &leak1).ok());
  ASSERT_TRUE(a->Allocate(128, BlockOwner::kObjectStore, 0, &leak2).ok());
  ASSERT_TRUE(a->Allocate(kChunkSize, BlockOwner::kObjectStore, 0, &leak_large).ok());
  ASSERT_TRUE(a->Allocate(4096, BlockOwner::kHeap, 0, &heap).ok());
  EXPECT_EQ(a->ReclaimUnreachable(BlockOwner::kObjectStore, {keep, heap}, nullptr).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(
      a->ReclaimUnreachable(BlockOwner::kObjectStore, {keep, keep + 3 * kPageSize}, nullptr).code(),
      StatusCode::kCorruption);
  uint64_t n;
  ASSERT_TRUE(a->ReclaimUnreachable(BlockOwner::kObjectStore, {keep}, &n).ok());
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(a->Free(leak1, BlockOwner::kObjectStore).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Free(leak2, BlockOwner::kObjectStore).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Free(leak_large, BlockOwner::kObjectStore).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(a->Free(keep, BlockOwner::kObjectStore).ok());
  EXPECT_TRUE(a->Free(heap, BlockOwner::kHeap).ok());
}

TEST_F(PAllocatorTest, OpenRejectsDamagedHeaders) {
  {
    auto a = Open();
    uint64_t off;
    ASSERT_TRUE(a->Allocate(64, BlockOwner::kHeap, 0, &off).ok());
  }
  std::unique_ptr<PAllocator> a;
  ChunkAt(region_.base(), 0)->state ^= 1ull << 17;  // class bit without fixing the check
  Status s = PAllocator::Open(region_.range(), {}, &a);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  ChunkAt(region_.base(), 0)->state ^= 1ull << 17;
  ASSERT_TRUE(PAllocator::Open(region_.range(), {}, &a).ok());
  BitmapOf(region_.base(), 0)[BitmapWords(0) - 1] |= 1ull << 63;  // past the last block
  EXPECT_EQ(PAllocator::Open(region_.range(), {}, &a).code(), StatusCode::kCorruption);
  region_.base()[kRegionHeaderOffset] ^= 1;
  EXPECT_EQ(PAllocator::Open(region_.range(), {}, &a).code(), StatusCode::kCorruption);
  TestRegion tiny(kChunkSize - 4096);
  EXPECT_EQ(PAllocator::Format(tiny.range()).code(), StatusCode::kInvalidArgument);
}

TEST_F(PAllocatorTest, ConcurrentCoresNeverShareABlock) {
  auto a = Open(2);
  std::mutex mu;
  std::set<uint64_t> live;
  std::vector<uint64_t> pool;  // blocks either thread may free
  auto worker = [&](int core) {
    std::mt19937_64 rng(core);
    for (int i = 0; i < 2000; ++i) {
      uint64_t off = 0;
      if (rng() % 3 == 0) {
        std::lock_guard<std::mutex> lock(mu);
        if (!pool.empty()) {
          size_t k = rng() % pool.size();
          off = pool[k];
          pool[k] = pool.back();
          pool.pop_back();
          live.erase(off);
        }
      }
      if (off != 0) {
        // Often a block of the other core's chunks.
        ASSERT_TRUE(a->Free(off, BlockOwner::kHeap).ok());
        continue;
      }
      ASSERT_TRUE(a->Allocate(64 << (rng() % 8), BlockOwner::kHeap, core, &off).ok());
      std::lock_guard<std::mutex> lock(mu);
      ASSERT_TRUE(live.insert(off).second) << "block handed out twice: " << off;
      pool.push_back(off);
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(a->Stats().blocks_allocated, live.size());
}

}  // namespace
}  // namespace pdpm::dsm
