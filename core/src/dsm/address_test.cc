#include "dsm/address.h"

#include <gtest/gtest.h>

namespace pdpm::dsm {
namespace {

constexpr uint64_t kSeg = 8ULL << 20;

TEST(Descriptor, BitsAndValidation) {
  Descriptor d = Descriptor::Make(kPermRead | kPermWrite, 3);
  EXPECT_EQ(d.bits, 0x33u);
  EXPECT_TRUE(d.can_read());
  EXPECT_TRUE(d.can_write());
  EXPECT_EQ(d.replicas(), 3u);
  EXPECT_TRUE(d.Validate().ok());
  EXPECT_EQ(d.ToString(), "rw r3");
  EXPECT_EQ(Descriptor::Make(kPermRead, 1).ToString(), "r- r1");
  EXPECT_EQ(Descriptor{0x100 | 0x10}.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Descriptor{kPermRead}.Validate().code(), StatusCode::kInvalidArgument);  // 0 replicas
  EXPECT_EQ(Descriptor::Make(kPermRead, kMaxReplicas).replicas(), kMaxReplicas);
}

TEST(GlobalAddress, EncodeDecodeRoundTrip) {
  GlobalAddress a{Descriptor::Make(kPermRead | kPermWrite, 2), 12, 0x1000};
  auto bytes = a.Encode();
  // Little-endian words: segment in the low half of word 0, descriptor above.
  EXPECT_EQ(bytes[0], 12);
  EXPECT_EQ(bytes[4], 0x23);
  EXPECT_EQ(bytes[9], 0x10);
  GlobalAddress b;
  ASSERT_TRUE(GlobalAddress::Decode(bytes.data(), bytes.size(), &b).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(GlobalAddress::FromWords(a.hi(), a.lo()), a);

  GlobalAddress top{Descriptor::Make(kPermRead, 15), kLastSegment, ~0ULL};
  auto tb = top.Encode();
  ASSERT_TRUE(GlobalAddress::Decode(tb.data(), tb.size(), &b).ok());
  EXPECT_EQ(b, top);
}

TEST(GlobalAddress, DecodeRejectsBadInput) {
  GlobalAddress out;
  uint8_t short_buf[15] = {};
  EXPECT_EQ(GlobalAddress::Decode(short_buf, sizeof(short_buf), &out).code(),
            StatusCode::kInvalidArgument);
  auto bytes = GlobalAddress{Descriptor::Make(kPermRead, 1), 5, 0}.Encode();
  bytes[7] = 0x80;  // a reserved descriptor bit
  EXPECT_EQ(GlobalAddress::Decode(bytes.data(), bytes.size(), &out).code(),
            StatusCode::kInvalidArgument);
}

TEST(GlobalAddress, SpaceKinds) {
  EXPECT_EQ(SegmentKind(kNullSegment), SpaceKind::kNull);
  EXPECT_EQ(SegmentKind(kFirstHeapSegment), SpaceKind::kHeap);
  EXPECT_EQ(SegmentKind(kHeapSegmentLimit - 1), SpaceKind::kHeap);
  EXPECT_EQ(SegmentKind(kHeapSegmentLimit), SpaceKind::kObject);
  EXPECT_EQ(SegmentKind(kLastSegment), SpaceKind::kObject);
  EXPECT_TRUE(GlobalAddress{}.is_null());
}

TEST(GlobalAddress, RangesStayInsideTheSegment) {
  Descriptor d = Descriptor::Make(kPermRead | kPermWrite, 1);
  GlobalAddress a{d, 7, kSeg - 4096};
  EXPECT_TRUE(a.CheckRange(4096, kSeg).ok());
  EXPECT_EQ(a.CheckRange(4097, kSeg).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(a.CheckRange(~0ULL, kSeg).code(), StatusCode::kOutOfRange);  // no wrap-around
  EXPECT_EQ((GlobalAddress{d, 7, kSeg}).CheckRange(0, kSeg).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(GlobalAddress{}.CheckRange(1, kSeg).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((GlobalAddress{Descriptor{}, 7, 0}).CheckRange(1, kSeg).code(),
            StatusCode::kInvalidArgument);

  GlobalAddress b;
  ASSERT_TRUE(a.Advance(4095, kSeg, &b).ok());
  EXPECT_EQ(b.offset, kSeg - 1);
  EXPECT_EQ(b.segment, 7u);
  EXPECT_EQ(a.Advance(4096, kSeg, &b).code(), StatusCode::kOutOfRange);
}

TEST(GlobalAddress, Formatting) {
  GlobalAddress a{Descriptor::Make(kPermRead, 1), 12, 0x1000};
  EXPECT_EQ(a.ToString(), "seg 12 + 0x1000");
  EXPECT_EQ(GlobalAddress{}.ToString(), "null");
}

TEST(SegmentSize, Validation) {
  EXPECT_TRUE(ValidateSegmentSize(kDefaultSegmentSize).ok());
  EXPECT_TRUE(ValidateSegmentSize(4ULL << 20).ok());
  EXPECT_FALSE(ValidateSegmentSize(1ULL << 20).ok());
  EXPECT_FALSE(ValidateSegmentSize((4ULL << 20) + 4096).ok());
  EXPECT_FALSE(ValidateSegmentSize(2ULL << 40).ok());
}

}  // namespace
}  // namespace pdpm::dsm
