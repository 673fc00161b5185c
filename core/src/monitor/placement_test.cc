#include "monitor/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

namespace pdpm::monitor {
namespace {

PlacementCandidate Server(uint32_t id, uint32_t used, uint32_t total = 10,
                          std::map<std::string, std::string> labels = {}) {
  return PlacementCandidate{id, total, used, std::move(labels)};
}

TEST(ChooseBackups, DistinctServersNeverThePrimary) {
  PlacementCandidate primary = Server(1, 0);
  std::vector<PlacementCandidate> others = {Server(2, 0), Server(3, 0), Server(4, 0)};
  auto chosen = ChooseBackups(others, primary, 2);
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_NE(chosen[0], chosen[1]);
  for (uint32_t id : chosen) EXPECT_NE(id, 1u);
  // Asking for more than exist gives what exists, each once.
  auto all = ChooseBackups(others, primary, 5);
  EXPECT_EQ(std::set<uint32_t>(all.begin(), all.end()), (std::set<uint32_t>{2, 3, 4}));
  EXPECT_TRUE(ChooseBackups(others, primary, 0).empty());
  EXPECT_TRUE(ChooseBackups({}, primary, 2).empty());
}

TEST(ChooseBackups, PrefersLeastUsedAndSkipsFullServers) {
  PlacementCandidate primary = Server(1, 0);
  // Server 2: 5 of 10 used; server 3: 1 of 4 (25 %); server 4: full.
  std::vector<PlacementCandidate> others = {Server(2, 5), Server(3, 1, 4), Server(4, 10)};
  auto chosen = ChooseBackups(others, primary, 1);
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_EQ(chosen[0], 3u);
  auto two = ChooseBackups(others, primary, 3);
  EXPECT_EQ(two, (std::vector<uint32_t>{3, 2}));  // never the full server 4
}

TEST(ChooseBackups, SpreadsOverFailureDomains) {
  PlacementCandidate primary = Server(1, 0, 10, {{"zone", "a"}, {"rack", "r1"}});
  std::vector<PlacementCandidate> others = {
      Server(2, 0, 10, {{"zone", "a"}, {"rack", "r1"}}),  // same rack as primary
      Server(3, 3, 10, {{"zone", "a"}, {"rack", "r2"}}),  // other rack, busier
      Server(4, 5, 10, {{"zone", "b"}, {"rack", "r1"}}),  // other zone, busiest
  };
  // Another zone beats another rack beats the least used.
  EXPECT_EQ(ChooseBackups(others, primary, 1), (std::vector<uint32_t>{4}));
  EXPECT_EQ(ChooseBackups(others, primary, 2), (std::vector<uint32_t>{4, 3}));
  EXPECT_EQ(ChooseBackups(others, primary, 3), (std::vector<uint32_t>{4, 3, 2}));
}

std::vector<TableSlot> Tables(uint32_t n) {
  std::vector<TableSlot> t;
  for (uint32_t i = 1; i <= n; ++i) t.push_back({i, 0, 0});
  return t;
}

std::map<uint32_t, int> Owners(const std::vector<TableSlot>& tables) {
  std::map<uint32_t, int> count;
  for (const auto& t : tables) ++count[t.owner];
  return count;
}

TEST(ChooseSegmentServer, MostFreeSegmentsThenLowestIdNeverAFullServer) {
  uint32_t chosen = 0;
  EXPECT_FALSE(ChooseSegmentServer({}, &chosen));
  EXPECT_FALSE(ChooseSegmentServer({Server(1, 10), Server(2, 12)}, &chosen));
  ASSERT_TRUE(ChooseSegmentServer({Server(1, 3), Server(2, 1), Server(3, 2)}, &chosen));
  EXPECT_EQ(chosen, 2u);
  // Free PM, not the used fraction: 30 free of 40 beats 8 free of 10.
  ASSERT_TRUE(ChooseSegmentServer({Server(1, 2, 10), Server(2, 10, 40)}, &chosen));
  EXPECT_EQ(chosen, 2u);
  ASSERT_TRUE(ChooseSegmentServer({Server(5, 4), Server(4, 4), Server(6, 10)}, &chosen));
  EXPECT_EQ(chosen, 4u);
}

TEST(BalanceTables, FirstServerTakesAllThenNewServersShare) {
  auto tables = Tables(64);
  EXPECT_FALSE(BalanceTables(&tables, {}));
  ASSERT_TRUE(BalanceTables(&tables, {1}));
  EXPECT_EQ(Owners(tables), (std::map<uint32_t, int>{{1, 64}}));
  ASSERT_TRUE(BalanceTables(&tables, {1, 2}));
  EXPECT_EQ(Owners(tables), (std::map<uint32_t, int>{{1, 32}, {2, 32}}));
  ASSERT_TRUE(BalanceTables(&tables, {1, 2, 3}));
  auto owners = Owners(tables);
  EXPECT_EQ(owners.size(), 3u);
  for (auto [server, n] : owners) EXPECT_TRUE(n == 21 || n == 22) << server << " owns " << n;
  EXPECT_FALSE(BalanceTables(&tables, {1, 2, 3}));  // already balanced: no change
}

TEST(BalanceTables, TablesWithSegmentsNeverMove) {
  auto tables = Tables(8);
  ASSERT_TRUE(BalanceTables(&tables, {1}));
  for (auto& t : tables) t.segments = 1;  // every table holds data on server 1
  tables[7].segments = 0;                 // except table 8
  ASSERT_TRUE(BalanceTables(&tables, {1, 2}));
  for (const auto& t : tables) {
    EXPECT_EQ(t.owner, t.table == 8 ? 2u : 1u) << "table " << t.table;
  }
  // A table whose owner left and which is empty goes to a live server; one
  // holding data stays with its (absent) owner: that is migration.
  auto orphan = Tables(4);
  for (auto& t : orphan) t.owner = 9;
  orphan[0].segments = 3;
  ASSERT_TRUE(BalanceTables(&orphan, {1, 2}));
  EXPECT_EQ(orphan[0].owner, 9u);
  for (int i = 1; i < 4; ++i) EXPECT_NE(orphan[i].owner, 9u);
}

TEST(BalanceTables, OnlyADownOrDrainedServerLosesItsTables) {
  auto tables = Tables(6);
  ASSERT_TRUE(BalanceTables(&tables, {1, 2, 3}));
  auto before = tables;
  // Server 3 missed heartbeats (SUSPECT): neither a taker nor a loser.
  EXPECT_FALSE(BalanceTables(&tables, {1, 2}, {3}));
  for (size_t i = 0; i < tables.size(); ++i) EXPECT_EQ(tables[i].owner, before[i].owner);
  // Unbalanced between the servers that are UP: only their tables move.
  for (auto& t : tables) {
    if (t.owner == 2) t.owner = 1;
  }
  ASSERT_TRUE(BalanceTables(&tables, {1, 2}, {3}));
  EXPECT_EQ(Owners(tables), (std::map<uint32_t, int>{{1, 2}, {2, 2}, {3, 2}}));
  // DOWN (in neither list): its empty tables go to the others.
  ASSERT_TRUE(BalanceTables(&tables, {1, 2}));
  EXPECT_EQ(Owners(tables), (std::map<uint32_t, int>{{1, 3}, {2, 3}}));
}

TEST(TableForObject, StableInRangeAndConsistent) {
  constexpr uint32_t kTables = 64;
  std::map<uint32_t, int> hits;
  int moved = 0;
  constexpr int kObjects = 20000;
  for (int i = 0; i < kObjects; ++i) {
    uint64_t hi = 0x1234567800000000ULL + static_cast<uint64_t>(i);
    uint64_t lo = static_cast<uint64_t>(i) * 7919;
    uint32_t t = TableForObject(hi, lo, kTables);
    ASSERT_GE(t, 1u);
    ASSERT_LE(t, kTables);
    EXPECT_EQ(t, TableForObject(hi, lo, kTables));
    ++hits[t];
    uint32_t grown = TableForObject(hi, lo, kTables + 1);
    if (grown != t) {
      EXPECT_EQ(grown, kTables + 1);  // objects only move to the new table
      ++moved;
    }
  }
  EXPECT_EQ(hits.size(), kTables);
  for (auto [t, n] : hits) {
    EXPECT_GT(n, kObjects / static_cast<int>(kTables) / 2) << "table " << t;
  }
  EXPECT_LT(moved, kObjects / static_cast<int>(kTables) * 2);
  EXPECT_EQ(TableForObject(5, 6, 1), 1u);
}

// The objects of one table, pDFS-like ids (a tag in the top of hi, small
// counters below), spread evenly over the table's ranges: with 2^3 ranges
// every range holds an eighth of them, within a fifth.
TEST(ObjectPosition, ObjectsOfOneTableSpreadOverItsRanges) {
  constexpr uint32_t kTables = 16;
  constexpr uint32_t kRanges = 8;
  std::vector<int> per_range(kRanges);
  int in_table = 0;
  for (uint64_t inode = 1; in_table < 16000; ++inode) {
    for (uint64_t block = 0; block < 4; ++block) {
      uint64_t hi = (uint64_t{0x70646673} << 32) | inode;
      if (TableForObject(hi, block, kTables) != 3) continue;
      uint64_t position = ObjectPosition(hi, block);
      EXPECT_EQ(position, ObjectPosition(hi, block));
      ++per_range[position >> 61];
      ++in_table;
    }
  }
  for (uint32_t r = 0; r < kRanges; ++r) {
    EXPECT_GT(per_range[r], in_table / static_cast<int>(kRanges) * 4 / 5) << "range " << r;
    EXPECT_LT(per_range[r], in_table / static_cast<int>(kRanges) * 6 / 5) << "range " << r;
  }
  EXPECT_NE(ObjectPosition(1, 2), ObjectPosition(2, 1));
}

}  // namespace
}  // namespace pdpm::monitor
