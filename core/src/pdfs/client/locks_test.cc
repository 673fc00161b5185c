// The lock table rules (locks.h): conflicts, splitting, merging, flock
// conversions and a lapsed session's locks dropped.
#include "pdfs/client/locks.h"

#include <gtest/gtest.h>

#include <random>

namespace pdpm::pdfs {
namespace {

LockEntry Posix(uint64_t session, uint64_t owner, uint64_t start, uint64_t end, LockType type) {
  return {session, owner, start, end, static_cast<uint32_t>(owner), LockKind::kPosix, type};
}

LockEntry Flock(uint64_t session, uint64_t owner, LockType type) {
  return {session, owner, 0, kLockEnd, 1, LockKind::kFlock, type};
}

// A table of the rules' making must be one a decoder accepts (canonical).
void ExpectCanonical(const LockTable& t) {
  if (t.entries.empty()) return;
  LockTable back;
  Status s = DecodeLockTable(EncodeLockTable(t), &back);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(PdfsLocks, ConflictRules) {
  LockTable t;
  ApplyLock(&t, Posix(1, 1, 0, 99, LockType::kRead));
  // Readers share; a writer of another owner (of this session or another)
  // conflicts; the holder itself never does.
  EXPECT_EQ(FindConflict(t, Posix(2, 1, 50, 60, LockType::kRead)), nullptr);
  EXPECT_NE(FindConflict(t, Posix(2, 1, 50, 60, LockType::kWrite)), nullptr);
  EXPECT_NE(FindConflict(t, Posix(1, 2, 99, 200, LockType::kWrite)), nullptr);
  EXPECT_EQ(FindConflict(t, Posix(1, 1, 0, 200, LockType::kWrite)), nullptr);
  EXPECT_EQ(FindConflict(t, Posix(2, 1, 100, kLockEnd, LockType::kWrite)), nullptr);
  // flock and POSIX locks never meet.
  EXPECT_EQ(FindConflict(t, Flock(2, 1, LockType::kWrite)), nullptr);
  ApplyLock(&t, Flock(2, 7, LockType::kRead));
  EXPECT_EQ(FindConflict(t, Flock(3, 1, LockType::kRead)), nullptr);
  const LockEntry* c = FindConflict(t, Flock(3, 1, LockType::kWrite));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->owner, 7u);
  EXPECT_EQ(FindConflict(t, Posix(2, 1, 0, 0, LockType::kUnlock)), nullptr);
  ExpectCanonical(t);
}

TEST(PdfsLocks, RangesSplitAndMerge) {
  LockTable t;
  ApplyLock(&t, Posix(1, 1, 0, 99, LockType::kRead));
  // A write lock in the middle splits the read lock in three.
  ApplyLock(&t, Posix(1, 1, 40, 59, LockType::kWrite));
  ASSERT_EQ(t.entries.size(), 3u);
  EXPECT_EQ(t.entries[0], Posix(1, 1, 0, 39, LockType::kRead));
  EXPECT_EQ(t.entries[1], Posix(1, 1, 40, 59, LockType::kWrite));
  EXPECT_EQ(t.entries[2], Posix(1, 1, 60, 99, LockType::kRead));
  ExpectCanonical(t);
  // Back to read: one range again.
  ApplyLock(&t, Posix(1, 1, 40, 59, LockType::kRead));
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0], Posix(1, 1, 0, 99, LockType::kRead));
  // Touching ranges merge; an unlock punches a hole; to the end of file.
  ApplyLock(&t, Posix(1, 1, 100, kLockEnd, LockType::kRead));
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].end, kLockEnd);
  ApplyLock(&t, Posix(1, 1, 10, 19, LockType::kUnlock));
  ASSERT_EQ(t.entries.size(), 2u);
  EXPECT_EQ(t.entries[0], Posix(1, 1, 0, 9, LockType::kRead));
  EXPECT_EQ(t.entries[1], Posix(1, 1, 20, kLockEnd, LockType::kRead));
  // Another holder's ranges are untouched by this one's changes.
  ApplyLock(&t, Posix(2, 1, 10, 19, LockType::kWrite));
  ApplyLock(&t, Posix(1, 1, 0, kLockEnd, LockType::kUnlock));
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0], Posix(2, 1, 10, 19, LockType::kWrite));
  ExpectCanonical(t);
}

TEST(PdfsLocks, FlockConvertsAndUnlocks) {
  LockTable t;
  ApplyLock(&t, Flock(1, 5, LockType::kRead));
  ApplyLock(&t, Flock(1, 5, LockType::kWrite));
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].type, LockType::kWrite);
  ApplyLock(&t, Flock(1, 5, LockType::kUnlock));
  EXPECT_TRUE(t.entries.empty());
}

TEST(PdfsLocks, DropSessionFreesItsLocks) {
  LockTable t;
  ApplyLock(&t, Posix(1, 1, 0, 9, LockType::kWrite));
  ApplyLock(&t, Flock(1, 2, LockType::kWrite));
  ApplyLock(&t, Posix(2, 1, 20, 29, LockType::kWrite));
  EXPECT_TRUE(HoldsAny(t, 1));
  EXPECT_NE(FindConflict(t, Posix(3, 1, 0, 0, LockType::kRead)), nullptr);
  EXPECT_TRUE(DropSession(&t, 1));
  EXPECT_FALSE(DropSession(&t, 1));
  EXPECT_FALSE(HoldsAny(t, 1));
  EXPECT_TRUE(HoldsAny(t, 2));
  EXPECT_EQ(FindConflict(t, Posix(3, 1, 0, 0, LockType::kWrite)), nullptr);
  EXPECT_EQ(FindConflict(t, Flock(3, 1, LockType::kWrite)), nullptr);
}

// Random lock and unlock calls of a few owners over a small file compared
// with a byte-by-byte model: every byte's lock per owner, and the table
// canonical after each call.
TEST(PdfsLocks, RandomCallsMatchAByteModel) {
  constexpr uint64_t kBytes = 64;
  std::mt19937_64 rng(20261127);
  LockTable t;
  // model[owner][byte]: 0 none, 1 read, 2 write.
  std::vector<std::vector<int>> model(3, std::vector<int>(kBytes + 1, 0));
  for (int step = 0; step < 3000; ++step) {
    const uint64_t owner = rng() % 3;
    uint64_t a = rng() % kBytes, b = rng() % kBytes;
    if (a > b) std::swap(a, b);
    const bool to_end = rng() % 8 == 0;
    const uint64_t end = to_end ? kLockEnd : b;
    const auto type = static_cast<LockType>(rng() % 3);
    const LockEntry want = Posix(1, owner, a, end, type);
    bool model_conflict = false;
    for (uint64_t o = 0; o < 3; ++o) {
      if (o == owner) continue;
      for (uint64_t x = a; x <= (to_end ? kBytes : b); ++x) {
        if (model[o][x] != 0 && (model[o][x] == 2 || type == LockType::kWrite) &&
            type != LockType::kUnlock) {
          model_conflict = true;
        }
      }
    }
    ASSERT_EQ(FindConflict(t, want) != nullptr, model_conflict) << "step " << step;
    if (model_conflict) continue;
    ApplyLock(&t, want);
    for (uint64_t x = a; x <= (to_end ? kBytes : b); ++x) model[owner][x] = static_cast<int>(type);
    ExpectCanonical(t);
    // The table says what the model says, byte by byte (kBytes stands for
    // everything past the model's bytes).
    std::vector<std::vector<int>> seen(3, std::vector<int>(kBytes + 1, 0));
    for (const LockEntry& e : t.entries) {
      for (uint64_t x = e.start; x <= std::min<uint64_t>(e.end, kBytes); ++x) {
        seen[e.owner][x] = static_cast<int>(e.type);
      }
    }
    ASSERT_EQ(seen, model) << "step " << step;
  }
}

}  // namespace
}  // namespace pdpm::pdfs
