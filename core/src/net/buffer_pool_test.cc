#include "net/buffer_pool.h"

#include <gtest/gtest.h>

#include <set>

#include "net/test_peer.h"

namespace pdpm::net {
namespace {

TEST(BufferPoolTest, LendsEveryBufferOnceAndTakesThemBack) {
  std::unique_ptr<Transport> t;
  ASSERT_TRUE(Transport::Create(testing::TestOptions(), &t).ok());
  std::unique_ptr<BufferPool> pool;
  ASSERT_TRUE(BufferPool::Create(t.get(), 1000, 4, kRemoteRead, &pool).ok());
  EXPECT_EQ(pool->buffer_size(), 4096u);
  std::vector<BufferPool::Buffer> held(4);
  std::set<char*> buffers;
  for (auto& b : held) {
    ASSERT_TRUE(pool->Acquire(&b).ok());
    buffers.insert(b.data());
    LocalBuffer l = b.local(100);
    EXPECT_EQ(l.region->data() + l.offset, b.data());
    EXPECT_EQ(l.region->key(), b.key());
    EXPECT_EQ(b.data()[0], 0);  // fresh buffers read as zeros
  }
  EXPECT_EQ(buffers.size(), 4u);
  BufferPool::Buffer extra;
  EXPECT_EQ(pool->Acquire(&extra).code(), StatusCode::kResourceExhausted);
  held[2].Release();
  EXPECT_EQ(pool->available(), 1u);
  ASSERT_TRUE(pool->Acquire(&extra).ok());
  BufferPool::Buffer moved = std::move(extra);
  EXPECT_FALSE(extra.valid());  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_TRUE(moved.valid());
  held.clear();
  moved.Release();
  EXPECT_EQ(pool->available(), 4u);
}

// A buffer is registered on its first loan only, and loans are last-in
// first-out: one caller at a time keeps reusing one registered buffer.
TEST(BufferPoolTest, RegistersOnFirstLoanOnly) {
  std::unique_ptr<Transport> t;
  ASSERT_TRUE(Transport::Create(testing::TestOptions(), &t).ok());
  std::unique_ptr<BufferPool> pool;
  ASSERT_TRUE(BufferPool::Create(t.get(), 1 << 20, 8, kRemoteWrite, &pool).ok());
  EXPECT_EQ(pool->registered(), 0u);
  char* first = nullptr;
  for (int i = 0; i < 5; i++) {
    BufferPool::Buffer b;
    ASSERT_TRUE(pool->Acquire(&b).ok());
    if (first == nullptr) first = b.data();
    EXPECT_EQ(b.data(), first);
  }
  EXPECT_EQ(pool->registered(), 1u);
  BufferPool::Buffer a, b;
  ASSERT_TRUE(pool->Acquire(&a).ok());
  ASSERT_TRUE(pool->Acquire(&b).ok());
  EXPECT_EQ(pool->registered(), 2u);
  EXPECT_NE(a.key(), b.key());
}

}  // namespace
}  // namespace pdpm::net
