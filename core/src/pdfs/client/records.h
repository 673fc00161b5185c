// pDFS records (docs/pdfs.md "Format"): the objects a pDFS file system keeps
// in the pDSM object store, their object ids and their encoding (version 1,
// little-endian, each record ends with a crc32c of everything before it).
//
//   inode      id {tag | 1 << 24, ino}            one per file, directory, link
//   dir index  id {tag | 2 << 24, dir ino}        the bucket map of a directory
//   dir bucket id {tag | 3 << 24 | bucket, dir ino}  entries of a key range
//   data chunk id {tag | 4 << 24 | chunk, ino}    bytes [chunk * 64 MiB, +64 MiB)
//   orphans    id {tag | 5 << 24, shard}          inodes unlinked, data not freed
//   volume     id {tag | 6 << 24, volume dir ino} a volume's quota and usage
//   locks      id {tag | 7 << 24, ino}            advisory locks held on a file
//   session    id {tag | 8 << 24, session}        a lock holder's lease
//   sessions   id {tag | 9 << 24, 0}              every lock session
//
// `tag` is "PDFS" in the upper 32 bits of ObjectId::hi: pDFS records share
// the object store with `pdpm obj` users but never its pDKVS key space.
//
// Decoding validates everything (magic, version, lengths, crc) and fails
// with kCorruption, so a damaged or foreign object is never taken for a
// record. Pure functions: no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "dsm/hash_index.h"

namespace pdpm::pdfs {

inline constexpr uint64_t kRecordTag = 0x50444653ull << 32;  // "PDFS"
inline constexpr uint16_t kRecordVersion = 1;

enum class RecordKind : uint8_t {
  kInode = 1,
  kDirIndex = 2,
  kDirBucket = 3,
  kData = 4,
  kOrphans = 5,
  kVolume = 6,
  kLocks = 7,
  kSession = 8,
  kSessionList = 9,
};

// Bytes of one data chunk (an object of the store is at most 64 MiB).
inline constexpr uint64_t kChunkSize = 64ull << 20;
// Chunk numbers take 24 bits of the id: files up to 1 PiB.
inline constexpr uint64_t kMaxChunks = 1ull << 24;
inline constexpr uint64_t kMaxFileSize = kMaxChunks * kChunkSize;
inline constexpr uint32_t kMaxBuckets = 1u << 24;
inline constexpr uint32_t kOrphanShards = 64;
inline constexpr uint64_t kRootIno = 1;
inline constexpr size_t kMaxNameLength = 255;
inline constexpr size_t kMaxSymlinkLength = 4095;
inline constexpr size_t kMaxXattrName = 255;
inline constexpr size_t kMaxXattrValue = size_t{64} * 1024;
// All xattrs of one inode together (names and values).
inline constexpr size_t kMaxXattrTotal = size_t{128} * 1024;

dsm::ObjectId InodeId(uint64_t ino);
dsm::ObjectId DirIndexId(uint64_t dir);
dsm::ObjectId DirBucketId(uint64_t dir, uint32_t bucket);
dsm::ObjectId DataId(uint64_t ino, uint64_t chunk);
dsm::ObjectId OrphanShardId(uint32_t shard);
dsm::ObjectId VolumeId(uint64_t volume);
dsm::ObjectId LocksId(uint64_t ino);
dsm::ObjectId SessionId(uint64_t session);
dsm::ObjectId SessionListId();

struct Time {
  int64_t sec = 0;
  uint32_t nsec = 0;
  bool operator==(const Time&) const = default;
};

struct Inode {
  uint64_t ino = 0;
  uint32_t mode = 0;  // S_IFMT type and permission bits
  uint32_t uid = 0;
  uint32_t gid = 0;
  // Directories: 2 + subdirectories. Others: the names linking to it; 0 on
  // an orphan (unlinked, its data not freed yet).
  uint64_t nlink = 0;
  // Regular files: bytes. Directories: entries (without . and ..).
  uint64_t size = 0;
  // Regular files: every byte at or past data_end reads as zero in the
  // chunk objects (they may hold garbage in [size, data_end) after an
  // interrupted truncate, which is cleared before the size grows again).
  uint64_t data_end = 0;
  uint64_t rdev = 0;
  Time atime, mtime, ctime;
  uint64_t parent = 0;  // directories: the directory holding its entry
  // The volume (a directory of the root: its inode number) whose quota
  // this inode counts against; 0: none (the root and its other entries).
  uint64_t volume = 0;
  std::string target;  // symbolic links
  std::map<std::string, std::string> xattrs;
  bool operator==(const Inode&) const = default;
};

std::string EncodeInode(const Inode& inode);
Status DecodeInode(std::string_view data, Inode* out);

// A directory's entries are ordered by key: (46-bit hash of the name) << 16
// | a sequence number telling apart names of one hash. Keys never change
// while their entry exists: readdir cookies are keys.
uint64_t NameHash(std::string_view name);  // 46 bits
inline constexpr uint64_t kKeySeqBits = 16;

// The d_type (DT_*) an entry records for an inode of `mode`.
uint8_t DirentType(uint32_t mode);

struct DirEntry {
  uint64_t key = 0;
  uint64_t ino = 0;
  uint8_t type = 0;  // DT_* of the child
  std::string name;
  bool operator==(const DirEntry&) const = default;
};

// Bucket `bucket` holds the keys in [low, next bucket's low).
struct BucketRange {
  uint64_t low = 0;
  uint32_t bucket = 0;
  bool operator==(const BucketRange&) const = default;
};

// Absent (no object) = one empty bucket 0 covering every key.
struct DirIndex {
  uint32_t next_bucket = 1;
  std::vector<BucketRange> ranges;  // sorted by low; ranges[0].low == 0
  bool operator==(const DirIndex&) const = default;
};

std::string EncodeDirIndex(const DirIndex& index);
Status DecodeDirIndex(std::string_view data, DirIndex* out);

struct DirBucket {
  std::vector<DirEntry> entries;  // sorted by key
  bool operator==(const DirBucket&) const = default;
};

// A bucket is split once its encoding passes this.
inline constexpr size_t kBucketSplitBytes = size_t{32} * 1024;

std::string EncodeDirBucket(const DirBucket& bucket);
Status DecodeDirBucket(std::string_view data, DirBucket* out);
size_t EncodedEntrySize(const DirEntry& e);

// Inode numbers of one orphan shard.
struct OrphanList {
  std::vector<uint64_t> inos;
  bool operator==(const OrphanList&) const = default;
};

std::string EncodeOrphanList(const OrphanList& list);
Status DecodeOrphanList(std::string_view data, OrphanList* out);

// A volume's quota (limits 0: none) and what its inodes use: the sum of
// their sizes (regular files and symbolic links) and their number (the
// volume's own directory not counted).
struct VolumeQuota {
  uint64_t byte_limit = 0;
  uint64_t inode_limit = 0;
  uint64_t bytes_used = 0;
  uint64_t inodes_used = 0;
  bool operator==(const VolumeQuota&) const = default;
};

std::string EncodeVolumeQuota(const VolumeQuota& quota);
Status DecodeVolumeQuota(std::string_view data, VolumeQuota* out);

// --- advisory locks (docs/pdfs.md "Advisory locks") ---

// POSIX byte-range locks (fcntl, OFD) and flock locks live side by side
// and never conflict with each other, as in Linux.
enum class LockKind : uint8_t { kPosix = 1, kFlock = 2 };
enum class LockType : uint8_t { kUnlock = 0, kRead = 1, kWrite = 2 };
inline constexpr uint64_t kLockEnd = UINT64_MAX;  // a range to the end of any file

// One lock: held by `owner` (the kernel's lock owner: a process's files
// for POSIX locks, an open file for OFD and flock locks) of the mount
// whose lock session is `session`, on bytes [start, end] (inclusive;
// flock locks: [0, kLockEnd]).
struct LockEntry {
  uint64_t session = 0;
  uint64_t owner = 0;
  uint64_t start = 0;
  uint64_t end = kLockEnd;
  uint32_t pid = 0;  // the holder's process (F_GETLK reports it)
  LockKind kind = LockKind::kPosix;
  LockType type = LockType::kRead;  // never kUnlock in a table
  bool operator==(const LockEntry&) const = default;
};

// The locks on one file: sorted by (kind, session, owner, start); the
// ranges of one holder and kind neither overlap nor touch with one type
// (they are merged), so a table has one encoding. Absent = no locks.
struct LockTable {
  std::vector<LockEntry> entries;
  bool operator==(const LockTable&) const = default;
};

std::string EncodeLockTable(const LockTable& table);
Status DecodeLockTable(std::string_view data, LockTable* out);

// A mount's lock session: the holder beats it (beats + 1) while alive; a
// session whose beats stop is lapsed and its locks are free.
struct LockSession {
  uint64_t beats = 0;
  int64_t started_sec = 0;  // wall clock, for people reading it
  uint32_t pid = 0;
  std::string host;  // at most 255 bytes
  bool operator==(const LockSession&) const = default;
};

std::string EncodeLockSession(const LockSession& session);
Status DecodeLockSession(std::string_view data, LockSession* out);

// Every live (or not yet reaped) lock session, sorted, each once.
struct SessionList {
  std::vector<uint64_t> sessions;
  bool operator==(const SessionList&) const = default;
};

std::string EncodeSessionList(const SessionList& list);
Status DecodeSessionList(std::string_view data, SessionList* out);

}  // namespace pdpm::pdfs
