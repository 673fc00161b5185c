#include "monitor/reconfigure.h"

#include <gtest/gtest.h>

#include <utility>

namespace pdpm::monitor {
namespace {

// Servers 1..n, each with 8 local segments; table t (1..3) owned by server t.
v1::ClusterView View(uint32_t servers, uint32_t replicas) {
  v1::ClusterView v;
  v.set_epoch(10);
  v.set_replica_count(replicas);
  v.set_table_count(3);
  for (uint32_t id = 1; id <= servers; id++) {
    v1::ServerInfo* s = v.add_servers();
    s->set_id(id);
    s->set_segment_count(8);
    s->set_state(v1::SERVER_STATE_UP);
  }
  for (uint32_t t = 1; t <= 3; t++) {
    v1::TableAssignment* a = v.add_tables();
    a->set_table(t);
    a->set_server_id(t);
    a->set_assigned_epoch(2);
  }
  return v;
}

v1::SegmentMapping* AddSegment(v1::ClusterView* v, uint64_t number, uint32_t primary,
                               uint32_t table) {
  v1::SegmentMapping* m = v->add_segments();
  m->set_segment(number);
  m->mutable_primary()->set_server_id(primary);
  m->mutable_primary()->set_local_index(0);
  m->set_table(table);
  m->set_access_key(100 + primary);
  m->set_placement_epoch(3);
  return m;
}

v1::SegmentReplica* AddBackup(v1::SegmentMapping* m, uint32_t server, v1::ReplicaState state) {
  v1::SegmentReplica* b = m->add_backups();
  b->set_server_id(server);
  b->set_local_index(7);
  b->set_access_key(200 + server);
  b->set_state(state);
  return b;
}

ReconfigureInput Input(const v1::ClusterView& v, std::set<uint32_t> dead,
                       std::set<uint32_t> leaving = {}) {
  ReconfigureInput in;
  in.epoch = v.epoch() + 1;
  in.dead = std::move(dead);
  in.leaving = std::move(leaving);
  for (const auto& s : v.servers()) {
    if (!in.dead.count(s.id()) && !in.leaving.count(s.id())) {
      in.candidates.push_back({s.id(), s.segment_count(), 0, {}});
    }
  }
  return in;
}

TEST(ReconfigureTest, DeadPrimaryIsReplacedByItsInSyncBackupAndTheTableFollows) {
  v1::ClusterView v = View(3, 2);
  v1::SegmentMapping* m = AddSegment(&v, 0xffffffff, 1, 1);
  AddBackup(m, 2, v1::REPLICA_STATE_IN_SYNC);
  auto changes = Reconfigure(Input(v, {1}), &v);
  EXPECT_FALSE(changes.empty());
  const v1::SegmentMapping& r = v.segments(0);
  EXPECT_EQ(r.primary().server_id(), 2u);
  EXPECT_EQ(r.primary().local_index(), 7u);
  EXPECT_EQ(r.access_key(), 202u);  // the backup's own key
  EXPECT_EQ(r.placement_epoch(), 11u);
  // A new backup on the one live server left, syncing, on its highest
  // free local segment.
  ASSERT_EQ(r.backups_size(), 1);
  EXPECT_EQ(r.backups(0).server_id(), 3u);
  EXPECT_EQ(r.backups(0).local_index(), 7u);
  EXPECT_EQ(r.backups(0).state(), v1::REPLICA_STATE_SYNCING);
  EXPECT_EQ(v.tables(0).server_id(), 2u);
  EXPECT_EQ(v.tables(0).assigned_epoch(), 11u);
  // Applying it again changes nothing.
  EXPECT_TRUE(Reconfigure(Input(v, {1}), &v).empty());
}

TEST(ReconfigureTest, SyncingBackupIsNeverPromoted) {
  v1::ClusterView v = View(3, 2);
  v1::SegmentMapping* m = AddSegment(&v, 1, 1, 0);
  AddBackup(m, 2, v1::REPLICA_STATE_SYNCING);
  Reconfigure(Input(v, {1}), &v);
  EXPECT_EQ(v.segments(0).primary().server_id(), 1u);
  EXPECT_EQ(v.segments(0).placement_epoch(), 3u);
  ASSERT_EQ(v.segments(0).backups_size(), 1);
  EXPECT_EQ(v.segments(0).backups(0).server_id(), 2u);
}

TEST(ReconfigureTest, DeadBackupIsDroppedAndReplaced) {
  v1::ClusterView v = View(3, 2);
  v1::SegmentMapping* m = AddSegment(&v, 1, 1, 0);
  AddBackup(m, 2, v1::REPLICA_STATE_IN_SYNC);
  Reconfigure(Input(v, {2}), &v);
  EXPECT_EQ(v.segments(0).primary().server_id(), 1u);
  EXPECT_EQ(v.segments(0).placement_epoch(), 3u);  // clients need not be refused
  ASSERT_EQ(v.segments(0).backups_size(), 1);
  EXPECT_EQ(v.segments(0).backups(0).server_id(), 3u);
  EXPECT_EQ(v.segments(0).backups(0).state(), v1::REPLICA_STATE_SYNCING);
}

TEST(ReconfigureTest, NoCandidateLeavesTheSegmentUnderReplicated) {
  v1::ClusterView v = View(2, 2);
  v1::SegmentMapping* m = AddSegment(&v, 1, 1, 0);
  AddBackup(m, 2, v1::REPLICA_STATE_IN_SYNC);
  Reconfigure(Input(v, {1}), &v);
  EXPECT_EQ(v.segments(0).primary().server_id(), 2u);
  EXPECT_EQ(v.segments(0).backups_size(), 0);
}

TEST(ReconfigureTest, DrainMovesAPrimaryThroughANewBackupEvenWithoutReplication) {
  v1::ClusterView v = View(2, 1);
  AddSegment(&v, 0xfffffffe, 1, 1);
  Reconfigure(Input(v, {}, {1}), &v);
  // First a backup to move to; the primary stays until it is in sync.
  EXPECT_EQ(v.segments(0).primary().server_id(), 1u);
  ASSERT_EQ(v.segments(0).backups_size(), 1);
  EXPECT_EQ(v.segments(0).backups(0).server_id(), 2u);
  EXPECT_TRUE(HoldsData(v, 1));
  v.mutable_segments(0)->mutable_backups(0)->set_state(v1::REPLICA_STATE_IN_SYNC);
  v.set_epoch(v.epoch() + 1);
  Reconfigure(Input(v, {}, {1}), &v);
  EXPECT_EQ(v.segments(0).primary().server_id(), 2u);
  EXPECT_EQ(v.segments(0).backups_size(), 0);
  EXPECT_EQ(v.tables(0).server_id(), 2u);
  EXPECT_FALSE(HoldsData(v, 1));
}

// The e2e failure "segments under-replicated" for good: a server's
// transaction log is server-local (not in the mapping); a failover placed a
// backup on it and its server refused the fill for ever.
TEST(ReconfigureTest, FailoverNeverPlacesABackupOnAServerLocalSegment) {
  v1::ClusterView v = View(3, 2);
  v.mutable_servers(2)->add_server_local_segments(7);
  v1::SegmentMapping* m = AddSegment(&v, 1, 1, 0);
  AddBackup(m, 2, v1::REPLICA_STATE_IN_SYNC);
  Reconfigure(Input(v, {1}), &v);
  ASSERT_EQ(v.segments(0).backups_size(), 1);
  EXPECT_EQ(v.segments(0).backups(0).server_id(), 3u);
  EXPECT_EQ(v.segments(0).backups(0).local_index(), 6u);
}

TEST(ReconfigureTest, AServerFullWithItsServerLocalSegmentTakesNoBackup) {
  v1::ClusterView v = View(3, 2);
  // Server 3: its log in local 0 (the lowest hole), primaries in 1..7.
  v.mutable_servers(2)->add_server_local_segments(0);
  for (uint32_t local = 1; local < 8; ++local) {
    v1::SegmentMapping* full = AddSegment(&v, 100 + local, 3, 0);
    full->mutable_primary()->set_local_index(local);
    AddBackup(full, 2, v1::REPLICA_STATE_IN_SYNC)->set_local_index(local);
  }
  v1::SegmentMapping* m = AddSegment(&v, 1, 1, 0);
  AddBackup(m, 2, v1::REPLICA_STATE_IN_SYNC)->set_local_index(0);
  Reconfigure(Input(v, {1}), &v);
  const v1::SegmentMapping& moved = v.segments(v.segments_size() - 1);
  EXPECT_EQ(moved.primary().server_id(), 2u);
  // Under-replicated (health says so) rather than a backup that never fills.
  EXPECT_EQ(moved.backups_size(), 0);
}

TEST(ReconfigureTest, BackupOnAServerLocalSegmentIsPlacedAnew) {
  v1::ClusterView v = View(3, 2);
  v.mutable_servers(2)->add_server_local_segments(7);
  v1::SegmentMapping* m = AddSegment(&v, 1, 1, 0);
  AddBackup(m, 3, v1::REPLICA_STATE_SYNCING);  // local 7: the log
  auto changes = Reconfigure(Input(v, {}), &v);
  ASSERT_EQ(v.segments(0).backups_size(), 1);
  EXPECT_EQ(v.segments(0).backups(0).server_id(), 2u);  // server 3 uses 1 of 8
  EXPECT_EQ(v.segments(0).backups(0).local_index(), 7u);
  EXPECT_EQ(v.segments(0).backups(0).state(), v1::REPLICA_STATE_SYNCING);
  bool said = false;
  for (const auto& c : changes) said |= c.find("server-local") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(ReconfigureTest, TakenLocalSegmentsCountCopiesAndServerLocalData) {
  v1::ClusterView v = View(2, 2);
  v.mutable_servers(1)->add_server_local_segments(3);
  AddBackup(AddSegment(&v, 1, 1, 0), 2, v1::REPLICA_STATE_IN_SYNC);
  auto taken = TakenLocalSegments(v);
  EXPECT_EQ(taken[1], (std::set<uint32_t>{0}));
  EXPECT_EQ(taken[2], (std::set<uint32_t>{3, 7}));
  uint32_t index = 0;
  ASSERT_TRUE(BackupLocalIndex(v.servers(1), taken[2], &index));
  EXPECT_EQ(index, 6u);  // the highest free
  std::set<uint32_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_FALSE(BackupLocalIndex(v.servers(1), all, &index));
}

// Table 1 in segment 100 (range 0/0, server 1) splitting into segment 99
// on server `target`; the split's new segment is announced when `child`.
v1::ClusterView SplittingView(uint32_t target, bool child) {
  v1::ClusterView v = View(3, 1);
  AddSegment(&v, 100, 1, 1);
  v1::PendingSplit* sp = v.add_splits();
  sp->set_table(1);
  sp->set_parent(100);
  sp->set_child_range_depth(1);
  sp->set_child_range_prefix(1);
  sp->set_target_server(target);
  if (child) {
    v1::SegmentMapping* c = AddSegment(&v, 99, target, 1);
    c->set_range_depth(1);
    c->set_range_prefix(1);
    c->set_split_parent(100);
    sp->set_child(99);
  }
  return v;
}

TEST(ReconfigureTest, ASplitThatLostAPartyIsAbandonedWithItsNewSegment) {
  // The parent's primary, the new segment's primary, the target before it
  // created the segment: each gone gives the split up.
  struct Case {
    uint32_t gone;
    bool child;
  };
  for (Case c : {Case{1, true}, Case{2, true}, Case{2, false}, Case{1, false}}) {
    v1::ClusterView v = SplittingView(2, c.child);
    auto changes = Reconfigure(Input(v, {c.gone}), &v);
    EXPECT_EQ(v.splits_size(), 0) << c.gone << " " << c.child;
    bool said = false;
    for (const auto& line : changes) said |= line.find("abandoned") != std::string::npos;
    EXPECT_TRUE(said);
    for (const auto& m : v.segments()) EXPECT_NE(m.segment(), 99u) << "the new segment stays";
  }
  // A bystander leaving changes nothing.
  v1::ClusterView v = SplittingView(2, true);
  Reconfigure(Input(v, {}, {3}), &v);
  ASSERT_EQ(v.splits_size(), 1);
  EXPECT_EQ(v.segments_size(), 2);
  // Nor is the split touched when the parent's primary is alive.
  EXPECT_EQ(FindSplit(v, 100), 0);
  EXPECT_EQ(FindSplit(v, 99), -1);
}

TEST(ReconfigureTest, ATableFollowsThePrimaryOfItsFirstSegmentOnly) {
  v1::ClusterView v = View(3, 1);
  AddSegment(&v, 100, 1, 1)->set_range_depth(1);  // 1/0: the first segment
  v1::SegmentMapping* upper = AddSegment(&v, 99, 3, 1);
  upper->set_range_depth(1);
  upper->set_range_prefix(1);
  auto changes = Reconfigure(Input(v, {}), &v);
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(v.tables(0).server_id(), 1u);
  // The new segment of a split never takes its table either.
  v = SplittingView(3, true);
  changes = Reconfigure(Input(v, {}), &v);
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(v.tables(0).server_id(), 1u);
}

}  // namespace
}  // namespace pdpm::monitor
