#include "server/replication.h"

#include <gtest/gtest.h>

namespace pdpm::server {
namespace {

std::vector<ApplyRange> DecodeAll(const std::string& msg, uint32_t* global) {
  Decoder d({reinterpret_cast<const uint8_t*>(msg.data()), msg.size()});
  RequestHeader h;
  EXPECT_TRUE(d.Header(&h).ok());
  EXPECT_EQ(h.epoch, 7u);
  std::vector<ApplyRange> ranges;
  Status s = DecodeApply(&d, global, &ranges);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ranges;
}

// What decoding the kReplicaApply message `msg` yields.
StatusCode DecodeCode(const std::string& msg) {
  Decoder d({reinterpret_cast<const uint8_t*>(msg.data()), msg.size()});
  RequestHeader h;
  EXPECT_TRUE(d.Header(&h).ok());
  uint32_t g;
  std::vector<ApplyRange> ranges;
  return DecodeApply(&d, &g, &ranges).code();
}

TEST(RedoBatchTest, RangesTravelInOrderAndLargeOnesAreSplit) {
  RedoBatch b;
  std::string big(3000, 'x');
  for (size_t i = 0; i < big.size(); i++) big[i] = static_cast<char>(i * 7);
  b.Add(64, "abcd", 4);
  b.Add(8192, big.data(), big.size());
  b.Add(64, "wxyz", 4);  // the same place again: order matters
  std::vector<std::string> msgs = b.Encode({7, 9}, 42, 1024);
  ASSERT_GT(msgs.size(), 3u);
  std::string rebuilt(16384, '\0');
  for (const auto& m : msgs) {
    EXPECT_LE(m.size(), 1024u + kRequestHeaderSize + 16 + 48);
    uint32_t g = 0;
    for (const ApplyRange& r : DecodeAll(m, &g)) {
      EXPECT_EQ(g, 42u);
      rebuilt.replace(r.offset, r.bytes.size(), r.bytes);
    }
  }
  EXPECT_EQ(rebuilt.substr(64, 4), "wxyz");
  EXPECT_EQ(rebuilt.substr(8192, big.size()), big);
}

TEST(RedoBatchTest, AdjacentRangesStayApart) {
  RedoBatch b;
  b.Add(64, "ab", 2);
  b.Add(66, "cd", 2);  // adjacent: persisted after the first, on the backup too
  ASSERT_EQ(b.ranges().size(), 2u);
  EXPECT_EQ(b.bytes(b.ranges()[0]), "ab");
  EXPECT_EQ(b.bytes(b.ranges()[1]), "cd");
  std::vector<std::string> msgs = b.Encode({7, 9}, 42, 1024);
  ASSERT_EQ(msgs.size(), 1u);
  uint32_t g = 0;
  std::vector<ApplyRange> ranges = DecodeAll(msgs[0], &g);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].offset, 64u);
  EXPECT_EQ(ranges[0].bytes, "ab");
  EXPECT_EQ(ranges[1].offset, 66u);
  EXPECT_EQ(ranges[1].bytes, "cd");
}

TEST(RedoBatchTest, DamagedMessagesAreRefused) {
  RedoBatch b;
  b.Add(0, "0123456789", 10);
  std::string msg = b.Encode({7, 9}, 5, 1 << 20).at(0);
  for (size_t cut : {msg.size() - 1, kRequestHeaderSize + 12, kRequestHeaderSize + 20}) {
    EXPECT_EQ(DecodeCode(msg.substr(0, cut)), StatusCode::kInvalidArgument) << cut;
  }
  EXPECT_EQ(DecodeCode(msg + "!"), StatusCode::kInvalidArgument);
}

TEST(RedoBatchTest, OnlyTheLastMessageCarriesTheTransaction) {
  RedoBatch b;
  std::string big(3000, 'y');
  b.Add(0, big.data(), big.size());
  std::vector<std::string> msgs =
      b.Encode({7, 9}, 3, 1024, TxTag{11, 12, TxTagKind::kAllocFreed, 4096});
  ASSERT_GT(msgs.size(), 1u);
  for (size_t i = 0; i < msgs.size(); i++) {
    Decoder d({reinterpret_cast<const uint8_t*>(msgs[i].data()), msgs[i].size()});
    RequestHeader h;
    ASSERT_TRUE(d.Header(&h).ok());
    uint32_t g = 0;
    std::vector<ApplyRange> ranges;
    TxTag tag;
    ASSERT_TRUE(DecodeApply(&d, &g, &ranges, &tag).ok());
    bool last = i + 1 == msgs.size();
    EXPECT_EQ(static_cast<bool>(tag), last);
    if (last) {
      EXPECT_EQ(tag.coordinator, 11u);
      EXPECT_EQ(tag.tx, 12u);
      EXPECT_EQ(tag.kind, TxTagKind::kAllocFreed);
      EXPECT_EQ(tag.block, 4096u);
    }
  }
  // A commit that persisted nothing still tells the backups; an untagged
  // empty batch is not sent.
  EXPECT_EQ(RedoBatch().Encode({7, 9}, 3, 1024, TxTag{11, 12}).size(), 1u);
  EXPECT_TRUE(RedoBatch().Encode({7, 9}, 3, 1024).empty());
}

TEST(RedoBatchTest, UnknownTagKindIsRefused) {
  std::string msg = RedoBatch().Encode({7, 9}, 5, 1 << 20, TxTag{11, 12}).at(0);
  msg[kRequestHeaderSize + 24] = 9;  // the tag kind word
  EXPECT_EQ(DecodeCode(msg), StatusCode::kInvalidArgument);
}

TEST(RedoBatchTest, UnknownFormatVersionIsRefused) {
  RedoBatch b;
  b.Add(0, "0123456789", 10);
  std::string msg = b.Encode({7, 9}, 5, 1 << 20).at(0);
  msg[kRequestHeaderSize + 4] = 9;  // version byte of the segment word
  EXPECT_EQ(DecodeCode(msg), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdpm::server
