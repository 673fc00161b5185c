// pDFS record encodings: round trips, and every damage refused.
#include "pdfs/client/records.h"

#include <gtest/gtest.h>

#include <set>

namespace pdpm::pdfs {
namespace {

Inode SampleInode() {
  Inode n;
  n.ino = 0x123456789abcdefull;
  n.mode = 0100644;
  n.uid = 1000;
  n.gid = 100;
  n.nlink = 3;
  n.size = 5ull << 32;
  n.data_end = 6ull << 32;
  n.rdev = 7;
  n.atime = {1, 2};
  n.mtime = {-3, 999999999};
  n.ctime = {5, 6};
  n.parent = 42;
  n.volume = 43;
  n.target = "../x/y";
  n.xattrs["user.a"] = "1";
  n.xattrs["security.selinux"] = std::string(300, 'z');
  return n;
}

DirBucket SampleBucket() {
  DirBucket b;
  for (const char* name : {"a", "bb", "ccc", "a name with spaces"}) {
    b.entries.push_back({NameHash(name) << kKeySeqBits, 7, 8, name});
  }
  std::sort(b.entries.begin(), b.entries.end(),
            [](const DirEntry& x, const DirEntry& y) { return x.key < y.key; });
  return b;
}

LockTable SampleLocks() {
  LockTable t;
  t.entries = {{7, 1, 0, 9, 100, LockKind::kPosix, LockType::kRead},
               {7, 1, 10, kLockEnd, 100, LockKind::kPosix, LockType::kWrite},
               {8, 1, 5, 5, 200, LockKind::kPosix, LockType::kRead},
               {7, 3, 0, kLockEnd, 300, LockKind::kFlock, LockType::kWrite}};
  return t;
}

TEST(PdfsRecords, RoundTrips) {
  Inode n = SampleInode(), n2;
  ASSERT_TRUE(DecodeInode(EncodeInode(n), &n2).ok());
  EXPECT_EQ(n, n2);

  DirIndex index{5, {{0, 0}, {100, 3}, {1ull << 40, 4}}}, index2;
  ASSERT_TRUE(DecodeDirIndex(EncodeDirIndex(index), &index2).ok());
  EXPECT_EQ(index, index2);

  DirBucket b = SampleBucket(), b2;
  ASSERT_TRUE(DecodeDirBucket(EncodeDirBucket(b), &b2).ok());
  EXPECT_EQ(b, b2);
  DirBucket empty;
  ASSERT_TRUE(DecodeDirBucket(EncodeDirBucket(empty), &b2).ok());
  EXPECT_TRUE(b2.entries.empty());

  OrphanList o{{1, 2, 3}}, o2;
  ASSERT_TRUE(DecodeOrphanList(EncodeOrphanList(o), &o2).ok());
  EXPECT_EQ(o, o2);

  VolumeQuota q{1, 2, 3, 4}, q2;
  ASSERT_TRUE(DecodeVolumeQuota(EncodeVolumeQuota(q), &q2).ok());
  EXPECT_EQ(q, q2);

  LockTable l = SampleLocks(), l2;
  ASSERT_TRUE(DecodeLockTable(EncodeLockTable(l), &l2).ok());
  EXPECT_EQ(l, l2);

  LockSession s{12, 1700000000, 4242, "node-a"}, s2;
  ASSERT_TRUE(DecodeLockSession(EncodeLockSession(s), &s2).ok());
  EXPECT_EQ(s, s2);

  SessionList sl{{3, 9, 1ull << 62}}, sl2;
  ASSERT_TRUE(DecodeSessionList(EncodeSessionList(sl), &sl2).ok());
  EXPECT_EQ(sl, sl2);
}

// Every flipped byte and every truncation is refused as corruption.
TEST(PdfsRecords, DamageIsRefused) {
  const std::string encodings[] = {
      EncodeInode(SampleInode()),        EncodeDirIndex({2, {{0, 0}, {9, 1}}}),
      EncodeDirBucket(SampleBucket()),   EncodeOrphanList({{4, 5}}),
      EncodeVolumeQuota({5, 6, 7, 8}),   EncodeLockTable(SampleLocks()),
      EncodeLockSession({1, 2, 3, "h"}), EncodeSessionList({{4, 5}})};
  constexpr size_t kKinds = 8;
  for (size_t kind = 0; kind < kKinds; ++kind) {
    const std::string& good = encodings[kind];
    auto decode = [&](const std::string& d) {
      Inode n;
      DirIndex i;
      DirBucket b;
      OrphanList o;
      VolumeQuota q;
      LockTable l;
      LockSession s;
      SessionList sl;
      switch (kind) {
        case 0: return DecodeInode(d, &n);
        case 1: return DecodeDirIndex(d, &i);
        case 2: return DecodeDirBucket(d, &b);
        case 3: return DecodeOrphanList(d, &o);
        case 4: return DecodeVolumeQuota(d, &q);
        case 5: return DecodeLockTable(d, &l);
        case 6: return DecodeLockSession(d, &s);
        default: return DecodeSessionList(d, &sl);
      }
    };
    ASSERT_TRUE(decode(good).ok());
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0x40);
      EXPECT_EQ(decode(bad).code(), StatusCode::kCorruption) << "kind " << kind << " byte " << i;
      EXPECT_EQ(decode(good.substr(0, i)).code(), StatusCode::kCorruption);
    }
    // A record of another kind is not taken for this one.
    EXPECT_EQ(decode(encodings[(kind + 1) % kKinds]).code(), StatusCode::kCorruption);
  }
}

// Well-formed checksums over bad content are refused too: the decoder does
// not trust the writer.
TEST(PdfsRecords, InvalidContentIsRefused) {
  DirIndex unsorted{3, {{0, 0}, {9, 1}, {5, 2}}}, i;
  EXPECT_EQ(DecodeDirIndex(EncodeDirIndex(unsorted), &i).code(), StatusCode::kCorruption);
  DirIndex no_zero{3, {{1, 0}}};
  EXPECT_EQ(DecodeDirIndex(EncodeDirIndex(no_zero), &i).code(), StatusCode::kCorruption);
  DirIndex bad_bucket{1, {{0, 1}}};
  EXPECT_EQ(DecodeDirIndex(EncodeDirIndex(bad_bucket), &i).code(), StatusCode::kCorruption);

  DirBucket b, out;
  b.entries.push_back({12345, 1, 1, "x"});  // key not of the name's hash
  EXPECT_EQ(DecodeDirBucket(EncodeDirBucket(b), &out).code(), StatusCode::kCorruption);
  b.entries = {{NameHash("a/b") << kKeySeqBits, 1, 1, "a/b"}};
  EXPECT_EQ(DecodeDirBucket(EncodeDirBucket(b), &out).code(), StatusCode::kCorruption);

  Inode n = SampleInode(), n2;
  n.atime.nsec = 1000000000;
  EXPECT_EQ(DecodeInode(EncodeInode(n), &n2).code(), StatusCode::kCorruption);

  // Lock tables: one encoding only, and only what a table may hold.
  auto refused = [](const LockTable& t) {
    LockTable out;
    return DecodeLockTable(EncodeLockTable(t), &out).code() == StatusCode::kCorruption;
  };
  EXPECT_TRUE(refused(LockTable{}));  // an empty table is no object
  LockTable t = SampleLocks();
  std::swap(t.entries[0], t.entries[1]);
  EXPECT_TRUE(refused(t)) << "unsorted";
  t = SampleLocks();
  t.entries[0].end = 10;
  EXPECT_TRUE(refused(t)) << "overlapping ranges of one holder";
  t = SampleLocks();
  t.entries[1].type = LockType::kRead;
  EXPECT_TRUE(refused(t)) << "touching ranges of one type";
  t = SampleLocks();
  t.entries[3].start = 1;
  EXPECT_TRUE(refused(t)) << "a flock lock on a range";
  t = SampleLocks();
  t.entries[2].type = LockType::kUnlock;
  EXPECT_TRUE(refused(t)) << "an unlock entry";
  t = SampleLocks();
  t.entries[2].session = 0;
  EXPECT_TRUE(refused(t)) << "no session";
  t = SampleLocks();
  t.entries[2].start = 6;
  EXPECT_TRUE(refused(t)) << "start past end";
  SessionList unsorted_sessions{{5, 4}}, sl;
  EXPECT_EQ(DecodeSessionList(EncodeSessionList(unsorted_sessions), &sl).code(),
            StatusCode::kCorruption);
}

TEST(PdfsRecords, IdsAreDistinctAndTagged) {
  std::set<std::pair<uint64_t, uint64_t>> ids;
  for (uint64_t x : {1ull, 2ull, 77ull}) {
    for (const dsm::ObjectId& id :
         {InodeId(x), DirIndexId(x), DirBucketId(x, 0), DirBucketId(x, 1), DataId(x, 0),
          DataId(x, kMaxChunks - 1), VolumeId(x), LocksId(x), SessionId(x)}) {
      EXPECT_EQ(id.hi >> 32, kRecordTag >> 32);
      EXPECT_TRUE(ids.insert({id.hi, id.lo}).second);
    }
  }
  EXPECT_TRUE(ids.insert({SessionListId().hi, SessionListId().lo}).second);
  EXPECT_LT(NameHash("anything"), 1ull << 46);
  EXPECT_NE(NameHash("a"), NameHash("b"));
}

}  // namespace
}  // namespace pdpm::pdfs
