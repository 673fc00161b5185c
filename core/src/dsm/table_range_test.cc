#include "dsm/table_range.h"

#include <gtest/gtest.h>

#include <random>

namespace pdpm::dsm {
namespace {

TEST(TableRange, IntervalsOfDepthsAndPrefixes) {
  TableRange whole;
  EXPECT_TRUE(whole.Valid());
  EXPECT_EQ(whole.first(), 0u);
  EXPECT_EQ(whole.last(), ~uint64_t{0});
  EXPECT_TRUE(whole.Covers(0));
  EXPECT_TRUE(whole.Covers(~uint64_t{0}));

  TableRange top_quarter{2, 3};
  EXPECT_EQ(top_quarter.first(), 0xc000'0000'0000'0000ull);
  EXPECT_EQ(top_quarter.last(), ~uint64_t{0});
  EXPECT_FALSE(top_quarter.Covers(0xbfff'ffff'ffff'ffffull));
  EXPECT_EQ(top_quarter.ToString(), "2/3");

  TableRange deepest{kMaxRangeDepth, 0xffff'fffe};
  EXPECT_TRUE(deepest.Valid());
  EXPECT_EQ(deepest.first(), 0xffff'fffe'0000'0000ull);
  EXPECT_EQ(deepest.last(), 0xffff'fffe'ffff'ffffull);

  EXPECT_FALSE((TableRange{2, 4}.Valid()));
  EXPECT_FALSE((TableRange{kMaxRangeDepth + 1, 0}.Valid()));
}

TEST(TableRange, SplitHalvesAndMergeAreInverse) {
  TableRange r{3, 5};
  EXPECT_EQ(r.Lower(), (TableRange{4, 10}));
  EXPECT_EQ(r.Upper(), (TableRange{4, 11}));
  EXPECT_EQ(r.Lower().first(), r.first());
  EXPECT_EQ(r.Upper().last(), r.last());
  EXPECT_EQ(r.Lower().last() + 1, r.Upper().first());
  EXPECT_EQ(r.Lower().Buddy(), r.Upper());
  EXPECT_EQ(r.Upper().Buddy(), r.Lower());
  EXPECT_EQ(r.Upper().Parent(), r);
  EXPECT_EQ(r.Lower().Parent(), r);
  TableRange before_deepest{kMaxRangeDepth - 1, 0x7fff'ffff};
  EXPECT_TRUE(before_deepest.Upper().Valid());
  EXPECT_EQ(before_deepest.Upper().last(), ~uint64_t{0});
}

TEST(TableRange, PartitionCheckNamesOverlapsAndGaps) {
  std::vector<TableRange> empty;
  EXPECT_EQ(SortAndCheckPartition(&empty).code(), StatusCode::kInvalidArgument);

  std::vector<TableRange> whole{{0, 0}};
  EXPECT_TRUE(SortAndCheckPartition(&whole).ok());

  std::vector<TableRange> shuffled{{2, 3}, {1, 0}, {2, 2}};
  ASSERT_TRUE(SortAndCheckPartition(&shuffled).ok());
  EXPECT_EQ(shuffled, (std::vector<TableRange>{{1, 0}, {2, 2}, {2, 3}}));

  std::vector<TableRange> gap_at_start{{1, 1}, {2, 1}};
  Status s = SortAndCheckPartition(&gap_at_start);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("before range 2/1"), std::string::npos) << s.ToString();

  std::vector<TableRange> gap_at_end{{1, 0}, {2, 2}};
  s = SortAndCheckPartition(&gap_at_end);
  EXPECT_NE(s.message().find("after range 2/2"), std::string::npos) << s.ToString();

  std::vector<TableRange> overlap{{1, 0}, {2, 1}, {1, 1}};
  s = SortAndCheckPartition(&overlap);
  EXPECT_NE(s.message().find("overlaps"), std::string::npos) << s.ToString();

  std::vector<TableRange> overlap_at_top{{1, 0}, {1, 1}, {2, 3}};
  s = SortAndCheckPartition(&overlap_at_top);
  EXPECT_NE(s.message().find("overlaps"), std::string::npos) << s.ToString();

  std::vector<TableRange> twice{{0, 0}, {0, 0}};
  EXPECT_EQ(SortAndCheckPartition(&twice).code(), StatusCode::kInvalidArgument);

  std::vector<TableRange> invalid{{1, 0}, {1, 2}};
  s = SortAndCheckPartition(&invalid);
  EXPECT_NE(s.message().find("1/2 is not valid"), std::string::npos) << s.ToString();
}

// Random splits and merges, as a table's life makes them, keep a partition;
// routing by binary search finds the one range a linear scan finds.
TEST(TableRange, RandomSplitsAndMergesKeepAPartitionAndRoute) {
  std::mt19937_64 rng(20261127);
  std::vector<TableRange> ranges{{0, 0}};
  for (int step = 0; step < 3000; ++step) {
    size_t i = rng() % ranges.size();
    TableRange r = ranges[i];
    auto buddy = std::find(ranges.begin(), ranges.end(), r.depth > 0 ? r.Buddy() : r);
    if (r.depth > 0 && buddy != ranges.end() && rng() % 3 == 0) {
      ranges.erase(buddy);
      ranges.erase(std::find(ranges.begin(), ranges.end(), r));
      ranges.push_back(r.Parent());
    } else if (r.depth < 12) {
      ranges[i] = r.Lower();
      ranges.push_back(r.Upper());
    }
    ASSERT_TRUE(SortAndCheckPartition(&ranges).ok()) << "step " << step;
    for (int probe = 0; probe < 8; ++probe) {
      uint64_t position = rng();
      if (probe == 0) position = 0;
      if (probe == 1) position = ~uint64_t{0};
      if (probe == 2) position = ranges[rng() % ranges.size()].first();
      size_t covering = 0;
      for (size_t k = 0; k < ranges.size(); ++k) {
        if (ranges[k].Covers(position)) ++covering;
      }
      ASSERT_EQ(covering, 1u);
      size_t routed = RouteRange(ranges, position);
      ASSERT_LT(routed, ranges.size());
      ASSERT_TRUE(ranges[routed].Covers(position)) << position;
    }
  }
}

TEST(RangeWord, RoundTripsEveryDepthAndState) {
  std::mt19937_64 rng(7);
  for (uint32_t depth = 0; depth <= kMaxRangeDepth; ++depth) {
    for (RangeState state : {RangeState::kActive, RangeState::kFilling}) {
      uint64_t limit = uint64_t{1} << depth;
      TableRange r{depth, static_cast<uint32_t>(rng() % limit)};
      uint64_t word = EncodeRangeWord(r, state);
      EXPECT_NE(word, 0u);
      TableRange back;
      RangeState back_state;
      ASSERT_TRUE(DecodeRangeWord(word, &back, &back_state).ok()) << r.ToString();
      EXPECT_EQ(back, r);
      EXPECT_EQ(back_state, state);
    }
  }
  // Version 1's layout, byte by byte: depth 3, prefix 5, filling.
  EXPECT_EQ(EncodeRangeWord({3, 5}, RangeState::kFilling), 0x01a2'0301'0000'0005ull);
}

TEST(RangeWord, ZeroIsTheWholeTableOfTheFormatBeforeRanges) {
  TableRange r{4, 4};
  RangeState state = RangeState::kFilling;
  ASSERT_TRUE(DecodeRangeWord(0, &r, &state).ok());
  EXPECT_EQ(r, TableRange{});
  EXPECT_EQ(state, RangeState::kActive);
}

TEST(RangeWord, EveryBitFlipAndBadFieldIsCorruption) {
  const uint64_t word = EncodeRangeWord({7, 100}, RangeState::kActive);
  for (int bit = 0; bit < 64; ++bit) {
    TableRange r;
    RangeState state;
    Status s = DecodeRangeWord(word ^ (uint64_t{1} << bit), &r, &state);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << "bit " << bit;
  }
  auto with_check = [](uint64_t w) {
    uint8_t check = 0xa5;
    for (int byte = 0; byte < 6; ++byte) check ^= static_cast<uint8_t>(w >> (8 * byte));
    return w | (uint64_t{check} << 48);
  };
  TableRange r;
  RangeState state;
  Status s = DecodeRangeWord(with_check((uint64_t{2} << 56) | (uint64_t{1} << 40)), &r, &state);
  EXPECT_NE(s.message().find("version 2"), std::string::npos) << s.ToString();
  s = DecodeRangeWord(with_check((uint64_t{1} << 56) | (uint64_t{33} << 40)), &r, &state);
  EXPECT_NE(s.message().find("33/0 not valid"), std::string::npos) << s.ToString();
  s = DecodeRangeWord(with_check((uint64_t{1} << 56) | (uint64_t{2} << 40) | 4), &r, &state);
  EXPECT_NE(s.message().find("2/4 not valid"), std::string::npos) << s.ToString();
  s = DecodeRangeWord(with_check((uint64_t{1} << 56) | (uint64_t{2} << 32)), &r, &state);
  EXPECT_NE(s.message().find("state 2"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace pdpm::dsm
