#include "pm/superblock.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/crc32c.h"

namespace pdpm::pm {
namespace {

Superblock Sample() {
  Superblock sb;
  sb.generation = 42;
  EXPECT_TRUE(Uuid::Parse("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0", &sb.cluster_uuid).ok());
  sb.server_id = 7;
  sb.segment_size = 4ull << 20;
  sb.segment_count = 3;
  return sb;
}

// A slot as on PM: the record, then zeros to the slot's end.
std::vector<char> EncodeSlot(const Superblock& sb) {
  std::vector<char> slot(kSuperblockSlotStride, 0);
  EncodeSuperblock(sb, slot.data());
  return slot;
}

TEST(SuperblockTest, RoundTrips) {
  const Superblock sb = Sample();
  std::vector<char> slot = EncodeSlot(sb);
  Superblock decoded;
  ASSERT_TRUE(DecodeSuperblock(slot.data(), slot.size(), &decoded).ok());
  EXPECT_EQ(decoded, sb);
  EXPECT_EQ(decoded.segments_offset, kSuperblockAreaSize);
}

// The byte layout docs/pm.md promises.
TEST(SuperblockTest, ByteLayoutIsTheDocumentedOne) {
  std::vector<char> slot = EncodeSlot(Sample());
  const char* p = slot.data();
  EXPECT_EQ(std::string(p, 8), "PDPMSBLK");
  auto u32 = [&](size_t off) {
    uint32_t v;
    std::memcpy(&v, p + off, 4);
    return v;
  };
  auto u64 = [&](size_t off) {
    uint64_t v;
    std::memcpy(&v, p + off, 8);
    return v;
  };
  EXPECT_EQ(u32(8), 1u);                         // layout version
  EXPECT_EQ(u32(12), 128u);                      // record size
  EXPECT_EQ(u64(16), 42u);                       // generation
  EXPECT_EQ(static_cast<uint8_t>(p[24]), 0x0f);  // cluster UUID, RFC 4122 byte order
  EXPECT_EQ(static_cast<uint8_t>(p[39]), 0xf0);
  EXPECT_EQ(u32(40), 7u);  // server ID
  EXPECT_EQ(u32(44), 0u);  // reserved
  EXPECT_EQ(u64(48), 4ull << 20);
  EXPECT_EQ(u64(56), 3u);
  EXPECT_EQ(u64(64), kSuperblockAreaSize);
  for (size_t i = 72; i < 124; ++i) EXPECT_EQ(p[i], 0) << "reserved byte " << i;
  EXPECT_EQ(u32(124), Crc32c(p, 124));
}

TEST(SuperblockTest, BlankSlotIsNotFound) {
  std::vector<char> slot(kSuperblockSlotStride, 0);
  Superblock sb;
  EXPECT_EQ(DecodeSuperblock(slot.data(), slot.size(), &sb).code(), StatusCode::kNotFound);
}

TEST(SuperblockTest, OtherDataIsCorruption) {
  std::vector<char> slot(kSuperblockSlotStride, 0);
  slot[3000] = 1;  // no magic, but not blank either
  Superblock sb;
  EXPECT_EQ(DecodeSuperblock(slot.data(), slot.size(), &sb).code(), StatusCode::kCorruption);
}

TEST(SuperblockTest, EveryFlippedBitIsCorruption) {
  const std::vector<char> good = EncodeSlot(Sample());
  for (size_t byte = 0; byte < kSuperblockEncodedSize; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<char> slot = good;
      slot[byte] = static_cast<char>(slot[byte] ^ (1 << bit));
      Superblock sb;
      Status s = DecodeSuperblock(slot.data(), slot.size(), &sb);
      ASSERT_EQ(s.code(), StatusCode::kCorruption) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(SuperblockTest, RecordSizeOutOfRangeIsCorruption) {
  std::vector<char> slot = EncodeSlot(Sample());
  for (uint32_t bad : {0u, 27u, static_cast<uint32_t>(kSuperblockSlotStride + 1), 0xFFFFFFFFu}) {
    std::memcpy(slot.data() + 12, &bad, 4);
    Superblock sb;
    EXPECT_EQ(DecodeSuperblock(slot.data(), slot.size(), &sb).code(), StatusCode::kCorruption)
        << bad;
  }
}

TEST(SuperblockTest, IntactRecordOfAnotherVersionIsNotSupported) {
  std::vector<char> slot = EncodeSlot(Sample());
  const uint32_t version = 2;
  std::memcpy(slot.data() + 8, &version, 4);
  const uint32_t crc = Crc32c(slot.data(), 124);
  std::memcpy(slot.data() + 124, &crc, 4);
  Superblock sb;
  Status s = DecodeSuperblock(slot.data(), slot.size(), &sb);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.ToString();
  EXPECT_NE(s.ToString().find("layout version 2"), std::string::npos) << s.ToString();
  EXPECT_EQ(sb.layout_version, 2u);
  EXPECT_EQ(sb.generation, 42u);
}

}  // namespace
}  // namespace pdpm::pm
