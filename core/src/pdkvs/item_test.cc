#include "pdkvs/item.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "dsm/dsm_test_region.h"

namespace pdpm::pdkvs {
namespace {

TEST(HashKey, StableAndSpread) {
  // Part of the on-PM format: these values must never change.
  EXPECT_EQ(HashKey("a"), HashKey(std::string("a")));
  EXPECT_NE(HashKey(""), HashKey(std::string(1, '\0')));
  EXPECT_NE(HashKey("abcdefgh"), HashKey(std::string("abcdefgh\0", 9)));
  std::set<uint64_t> tops;
  // 4096 keys into 1024 bins by their top bits (the directory index): a
  // uniform hash leaves about 19 bins empty.
  for (int i = 0; i < 4096; ++i) tops.insert(HashKey("key" + std::to_string(i)) >> 54);
  EXPECT_GT(tops.size(), 980u);
}

TEST(Item, WriteOpenVerify) {
  dsm::TestRegion region(4 * dsm::kChunkSize);
  ASSERT_TRUE(dsm::PAllocator::Format(region.range()).ok());
  std::unique_ptr<dsm::PAllocator> alloc;
  ASSERT_TRUE(dsm::PAllocator::Open(region.range(), {}, &alloc).ok());
  uint64_t off;
  ASSERT_TRUE(WriteItem(alloc.get(), "key", "value", {1234, 7}, HashKey("key"), &off).ok());
  ItemView view;
  ASSERT_TRUE(ItemView::Open(*alloc, off, &view).ok());
  EXPECT_EQ(view.key(), "key");
  EXPECT_EQ(view.value(), "value");
  EXPECT_EQ(view.meta().expire_at_ms, 1234u);
  EXPECT_EQ(view.meta().flags, 7u);
  EXPECT_TRUE(view.ExpiredAt(1234));
  EXPECT_FALSE(view.ExpiredAt(1233));
  EXPECT_TRUE(view.VerifyChecksum().ok());
  // The expiry time changes in place, outside the checksum.
  alloc->StoreAndPersist(&alloc->At<ItemHeader>(off)->expire_at_ms, 99);
  EXPECT_EQ(view.meta().expire_at_ms, 99u);
  EXPECT_TRUE(view.VerifyChecksum().ok());
  region.base()[off + 12] ^= 1;  // a bit flip in the flags
  EXPECT_EQ(view.VerifyChecksum().code(), StatusCode::kCorruption);
  region.base()[off + 12] ^= 1;
  region.base()[off + sizeof(ItemHeader) + 4] ^= 1;  // a bit flip in the value
  EXPECT_EQ(view.VerifyChecksum().code(), StatusCode::kCorruption);
  region.base()[off] ^= 1;  // the magic
  EXPECT_EQ(ItemView::Open(*alloc, off, &view).code(), StatusCode::kCorruption);
  EXPECT_EQ(ItemView::Open(*alloc, region.size() - 8, &view).code(), StatusCode::kCorruption);
}

TEST(Item, SizeLimits) {
  EXPECT_TRUE(CheckItemSize(std::string(kMaxKeySize, 'k'), kMaxValueSize).ok());
  EXPECT_EQ(CheckItemSize(std::string(kMaxKeySize + 1, 'k'), 0).code(), StatusCode::kTooLarge);
  EXPECT_EQ(CheckItemSize("k", kMaxValueSize + 1).code(), StatusCode::kTooLarge);
}

}  // namespace
}  // namespace pdpm::pdkvs
