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
  EXPECT_EQ(pool->buffer_size(), 1024u);
  std::vector<BufferPool::Buffer> held(4);
  std::set<uint64_t> offsets;
  for (auto& b : held) {
    ASSERT_TRUE(pool->Acquire(&b).ok());
    offsets.insert(b.offset());
    LocalBuffer l = b.local(100);
    EXPECT_EQ(l.region, pool->region());
    EXPECT_EQ(l.region->data() + l.offset, b.data());
  }
  EXPECT_EQ(offsets.size(), 4u);
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

}  // namespace
}  // namespace pdpm::net
