#include "pdfs/client/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "pdfs/client/acl.h"
#include "pdfs/client/locks.h"

namespace pdpm::pdfs {
namespace {

Time Now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return {ts.tv_sec, static_cast<uint32_t>(ts.tv_nsec)};
}

// ENAMETOOLONG, or EINVAL for a name no directory may hold.
int CheckName(std::string_view name) {
  if (name.size() > kMaxNameLength) return ENAMETOOLONG;
  if (name.empty() || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return EINVAL;
  }
  return 0;
}

bool IsDotName(std::string_view name) {
  return name == "." || name == "..";
}

// The volume `child` would count against as an entry of `parent`.
uint64_t VolumeBelow(const Inode& parent, const Inode& child) {
  if (parent.ino != kRootIno) return parent.volume;
  return S_ISDIR(child.mode) ? child.ino : 0;
}

// A new inode `n` of directory `dir`: with a default ACL there, the access
// ACL and permission bits it gives (and, for a directory, the same default
// ACL); without one, the umask clears bits.
int InheritAcls(const Inode& dir, uint32_t umask, Inode* n) {
  auto dflt = dir.xattrs.find(std::string(kDefaultAclXattr));
  if (dflt == dir.xattrs.end()) {
    n->mode &= ~(umask & 0777);
    return 0;
  }
  Acl from, access;
  if (!DecodeAcl(dflt->second, &from).ok()) return EIO;  // validated when set
  AclInherit(from, &n->mode, &access);
  if (!AclIsMinimal(access)) n->xattrs[std::string(kAccessAclXattr)] = EncodeAcl(access);
  if (S_ISDIR(n->mode)) n->xattrs[std::string(kDefaultAclXattr)] = dflt->second;
  // The xattrs must fit the inode's record (a default ACL near the size
  // limit, taken twice by a new directory, would not).
  size_t total = 0;
  for (const auto& [k, v] : n->xattrs) total += k.size() + v.size();
  return total > kMaxXattrTotal ? ENOSPC : 0;
}

// chmod of `n`: its access ACL, if it has one, takes the new permission
// bits (the owner, mask or group, and other entries).
int ChmodAccessAcl(Inode* n) {
  auto it = n->xattrs.find(std::string(kAccessAclXattr));
  if (it == n->xattrs.end()) return 0;
  Acl acl;
  if (!DecodeAcl(it->second, &acl).ok()) return EIO;  // validated when set
  AclSetPermissionBits(&acl, n->mode);
  it->second = EncodeAcl(acl);
  return 0;
}

Attr ToAttr(const Inode& n) {
  Attr a;
  a.ino = n.ino;
  a.mode = n.mode;
  a.uid = n.uid;
  a.gid = n.gid;
  a.nlink = n.nlink;
  a.size = n.size;
  a.rdev = n.rdev;
  a.atime = n.atime;
  a.mtime = n.mtime;
  a.ctime = n.ctime;
  return a;
}

}  // namespace

// One attempt of a metadata transaction: the records it read (decoded,
// cached) and changed. Changes reach the transaction at Commit, one put or
// delete per record. Every cluster failure is kept in status() and turns
// the call into EIO; RunTx looks at status() first.
class FileSystem::Txn {
 public:
  explicit Txn(client::Transaction* tx) : tx_(tx) {}
  const Status& status() const { return status_; }

  int LoadInode(uint64_t ino, Inode** out) {
    Cached<Inode>* c = nullptr;
    int err = LoadKeyed(&inodes_, ino, InodeId(ino), DecodeInode, &c);
    if (err != 0) return err;
    if (!c->present) return ENOENT;
    *out = &c->value;
    return 0;
  }
  void SaveInode(const Inode& n) {
    Cached<Inode>& c = inodes_[n.ino];
    c.value = n;
    c.present = c.dirty = true;
  }
  void DeleteInode(uint64_t ino) { Drop(&inodes_[ino]); }

  // Directory `parent` (ENOTDIR when it is none), its entry `name` and
  // the inode that entry names.
  int LoadChild(uint64_t parent, std::string_view name, Inode** dir, DirEntry* entry,
                Inode** child) {
    int e = LoadInode(parent, dir);
    if (e != 0) return e;
    if (!S_ISDIR((*dir)->mode)) return ENOTDIR;
    e = Find(parent, name, entry);
    if (e != 0) return e;
    e = LoadInode(entry->ino, child);
    return e == ENOENT ? EIO : e;  // an entry without its inode
  }

  // Finds `name` in directory `dir` (ENOENT when absent).
  int Find(uint64_t dir, std::string_view name, DirEntry* out) {
    const uint64_t hash = NameHash(name);
    DirBucket* b = nullptr;
    int err = BucketFor(dir, hash << kKeySeqBits, nullptr, &b);
    if (err != 0) return err;
    for (const DirEntry& e : b->entries) {
      if ((e.key >> kKeySeqBits) == hash && e.name == name) {
        *out = e;
        return 0;
      }
    }
    return ENOENT;
  }

  // Adds an entry for a name not in the directory.
  int Insert(uint64_t dir, std::string_view name, uint64_t ino, uint8_t type) {
    const uint64_t hash = NameHash(name);
    size_t pos = 0;
    DirBucket* b = nullptr;
    int err = BucketFor(dir, hash << kKeySeqBits, &pos, &b);
    if (err != 0) return err;
    // The smallest sequence number of this hash not taken.
    uint64_t key = hash << kKeySeqBits;
    auto at = std::lower_bound(b->entries.begin(), b->entries.end(), key,
                               [](const DirEntry& e, uint64_t k) { return e.key < k; });
    while (at != b->entries.end() && at->key == key) {
      ++key;
      ++at;
      if ((key >> kKeySeqBits) != hash) return ENOSPC;  // 65536 names of one hash
    }
    DirEntry e{key, ino, type, std::string(name)};
    b->entries.insert(at, std::move(e));
    MarkBucket(dir, pos);
    return MaybeSplit(dir, pos);
  }

  int SetEntry(uint64_t dir, std::string_view name, uint64_t ino, uint8_t type) {
    return Edit(dir, name, [&](std::vector<DirEntry>* v, std::vector<DirEntry>::iterator it) {
      it->ino = ino;
      it->type = type;
    });
  }

  int Remove(uint64_t dir, std::string_view name) {
    return Edit(dir, name,
                [](std::vector<DirEntry>* v, std::vector<DirEntry>::iterator it) { v->erase(it); });
  }

  // Entries of `dir` with key >= cookie, at most `max`.
  int List(uint64_t dir, uint64_t cookie, size_t max, std::vector<ReaddirEntry>* out, bool* eof) {
    DirIndex* index = nullptr;
    int err = LoadIndex(dir, &index);
    if (err != 0) return err;
    auto it = std::upper_bound(index->ranges.begin(), index->ranges.end(), cookie,
                               [](uint64_t k, const BucketRange& r) { return k < r.low; });
    size_t pos = static_cast<size_t>(it - index->ranges.begin()) - 1;
    *eof = false;
    for (; pos < index->ranges.size(); ++pos) {
      DirBucket* b = nullptr;
      err = LoadBucket(dir, index->ranges[pos].bucket, &b);
      if (err != 0) return err;
      for (const DirEntry& e : b->entries) {
        if (e.key < cookie) continue;
        if (out->size() == max) return 0;
        out->push_back({e.ino, e.type, e.name, e.key + 1});
      }
    }
    *eof = true;
    return 0;
  }

  // Deletes the records of an empty directory.
  int DeleteDirRecords(uint64_t dir) {
    DirIndex* index = nullptr;
    int err = LoadIndex(dir, &index);
    if (err != 0) return err;
    for (const BucketRange& r : index->ranges) {
      // Loaded first: only a record known to exist is deleted at commit
      // (an emptied bucket 0 stays as an object; fsck found them leaked).
      DirBucket* b = nullptr;
      err = LoadBucket(dir, r.bucket, &b);
      if (err != 0) return err;
      Drop(&BucketSlot(dir, r.bucket));
    }
    Drop(&indexes_[dir]);
    return 0;
  }

  int AddOrphan(uint64_t ino) {
    Cached<OrphanList>* c = nullptr;
    int err = LoadOrphans(ino, &c);
    if (err != 0) return err;
    c->value.inos.push_back(ino);
    c->present = c->dirty = true;
    return 0;
  }
  int RemoveOrphan(uint64_t ino) {
    Cached<OrphanList>* c = nullptr;
    int err = LoadOrphans(ino, &c);
    if (err != 0) return err;
    auto& v = c->value.inos;
    auto it = std::find(v.begin(), v.end(), ino);
    if (it == v.end()) return 0;
    v.erase(it);
    c->dirty = true;
    c->present = !v.empty();
    return 0;
  }

  // The quota record of `volume` (nullptr: none; no accounting then).
  int LoadQuota(uint64_t volume, VolumeQuota** out) {
    *out = nullptr;
    if (volume == 0) return 0;
    Cached<VolumeQuota>* c = nullptr;
    int err = LoadKeyed(&quotas_, volume, VolumeId(volume), DecodeVolumeQuota, &c);
    if (err != 0) return err;
    if (c->present) *out = &c->value;
    return 0;
  }
  void SaveQuota(uint64_t volume, const VolumeQuota& q) {
    Cached<VolumeQuota>& c = quotas_[volume];
    c.value = q;
    c.present = c.dirty = true;
  }
  int DeleteQuota(uint64_t volume) {
    VolumeQuota* q = nullptr;
    int err = LoadQuota(volume, &q);  // loaded first, as in DeleteDirRecords
    if (err == 0) Drop(&quotas_[volume]);
    return err;
  }

  // Charges `bytes` and `inodes` (negative: gives them back) to the quota
  // of `volume`; with `enforce`, EDQUOT (and nothing charged) when a
  // growth would pass a limit.
  int Charge(uint64_t volume, int64_t bytes, int64_t inodes, bool enforce = true) {
    VolumeQuota* q = nullptr;
    int err = LoadQuota(volume, &q);
    if (err != 0 || q == nullptr) return err;
    auto apply = [](uint64_t used, int64_t delta) {
      return delta >= 0 ? used + static_cast<uint64_t>(delta)
                        : used - std::min(used, static_cast<uint64_t>(-delta));
    };
    const uint64_t bytes_after = apply(q->bytes_used, bytes);
    const uint64_t inodes_after = apply(q->inodes_used, inodes);
    if (enforce && ((bytes > 0 && q->byte_limit != 0 && bytes_after > q->byte_limit) ||
                    (inodes > 0 && q->inode_limit != 0 && inodes_after > q->inode_limit))) {
      return EDQUOT;
    }
    q->bytes_used = bytes_after;
    q->inodes_used = inodes_after;
    SaveQuota(volume, *q);
    return 0;
  }

  // The lock table of `ino` (empty when it has none).
  int LoadLocks(uint64_t ino, LockTable** out) {
    Cached<LockTable>* c = nullptr;
    int err = LoadKeyed(&locks_, ino, LocksId(ino), DecodeLockTable, &c);
    if (err == 0) *out = &c->value;
    return err;
  }
  // The table of `ino` changed (an empty one is deleted).
  void MarkLocks(uint64_t ino) {
    Cached<LockTable>& c = locks_[ino];
    c.present = !c.value.entries.empty();
    c.dirty = true;
  }

  // A lock session (ENOENT: none, or lapsed and reaped).
  int LoadSession(uint64_t id, LockSession** out) {
    Cached<LockSession>* c = nullptr;
    int err = LoadKeyed(&sessions_, id, SessionId(id), DecodeLockSession, &c);
    if (err != 0) return err;
    if (!c->present) return ENOENT;
    *out = &c->value;
    return 0;
  }
  void SaveSession(uint64_t id, const LockSession& s) {
    Cached<LockSession>& c = sessions_[id];
    c.value = s;
    c.present = c.dirty = true;
  }
  void DeleteSession(uint64_t id) { Drop(&sessions_[id]); }

  int LoadSessionList(SessionList** out) {
    if (!session_list_.has_value()) {
      Cached<SessionList> c;
      int err = Load(SessionListId(), &c, DecodeSessionList);
      if (err != 0) return err;
      session_list_ = std::move(c);
    }
    *out = &session_list_->value;
    return 0;
  }
  void MarkSessionList() {
    session_list_->present = !session_list_->value.sessions.empty();
    session_list_->dirty = true;
  }

  // Creates data chunk `id` (empty) unless it exists.
  int EnsureObject(const dsm::ObjectId& id) {
    std::string data;
    Status s = tx_->GetObj(id, &data);
    if (s.ok()) return 0;
    if (s.code() != StatusCode::kNotFound) return Fail(s);
    s = tx_->PutObj(id, "");
    return s.ok() ? 0 : Fail(s);
  }

  // Puts every changed record into the transaction (when `write`) and
  // commits; a transaction that failed only validates what it read.
  Status Commit(bool write) {
    if (write) {
      for (auto& [ino, c] : inodes_) Flush(InodeId(ino), c, EncodeInode);
      for (auto& [dir, c] : indexes_) Flush(DirIndexId(dir), c, EncodeDirIndex);
      for (auto& [key, c] : buckets_) Flush(DirBucketId(key.first, key.second), c, EncodeDirBucket);
      for (auto& [shard, c] : orphans_) Flush(OrphanShardId(shard), c, EncodeOrphanList);
      for (auto& [volume, c] : quotas_) Flush(VolumeId(volume), c, EncodeVolumeQuota);
      for (auto& [ino, c] : locks_) Flush(LocksId(ino), c, EncodeLockTable);
      for (auto& [id, c] : sessions_) Flush(SessionId(id), c, EncodeLockSession);
      if (session_list_.has_value()) Flush(SessionListId(), *session_list_, EncodeSessionList);
      if (!status_.ok()) {
        tx_->Abort();
        return status_;
      }
    }
    return tx_->Commit();
  }

 private:
  template <typename T>
  struct Cached {
    T value{};
    bool present = false;  // the object exists (or will, at commit)
    bool existed = false;  // it existed when read
    bool dirty = false;
  };

  int Fail(const Status& s) {
    if (status_.ok()) status_ = s;
    return EIO;
  }

  template <typename T>
  int Load(const dsm::ObjectId& id, Cached<T>* c, Status (*decode)(std::string_view, T*)) {
    std::string data;
    Status s = tx_->GetObj(id, &data);
    if (s.code() == StatusCode::kNotFound) return 0;
    if (s.ok()) s = decode(data, &c->value);
    if (!s.ok()) return Fail(s);
    c->present = c->existed = true;
    return 0;
  }

  // The record of `key` in `cache`, read once per transaction.
  template <typename T>
  int LoadKeyed(std::map<uint64_t, Cached<T>>* cache, uint64_t key, const dsm::ObjectId& id,
                Status (*decode)(std::string_view, T*), Cached<T>** out) {
    auto it = cache->find(key);
    if (it == cache->end()) {
      Cached<T> c;
      int err = Load(id, &c, decode);
      if (err != 0) return err;
      it = cache->emplace(key, std::move(c)).first;
    }
    *out = &it->second;
    return 0;
  }

  template <typename T>
  void Flush(const dsm::ObjectId& id, const Cached<T>& c, std::string (*encode)(const T&)) {
    if (!c.dirty || !status_.ok()) return;
    Status s;
    if (c.present) {
      s = tx_->PutObj(id, encode(c.value));
    } else if (c.existed) {
      s = tx_->DelObj(id);
    }
    if (!s.ok()) Fail(s);
  }

  template <typename T>
  void Drop(Cached<T>* c) {
    c->present = false;
    c->dirty = true;
  }

  int LoadIndex(uint64_t dir, DirIndex** out) {
    auto it = indexes_.find(dir);
    if (it == indexes_.end()) {
      Cached<DirIndex> c;
      int err = Load(DirIndexId(dir), &c, DecodeDirIndex);
      if (err != 0) return err;
      if (!c.present) c.value.ranges = {{0, 0}};  // no object: one empty bucket
      it = indexes_.emplace(dir, std::move(c)).first;
    }
    *out = &it->second.value;
    return 0;
  }

  Cached<DirBucket>& BucketSlot(uint64_t dir, uint32_t bucket) { return buckets_[{dir, bucket}]; }

  int LoadBucket(uint64_t dir, uint32_t bucket, DirBucket** out) {
    auto key = std::make_pair(dir, bucket);
    auto it = buckets_.find(key);
    if (it == buckets_.end()) {
      Cached<DirBucket> c;
      int err = Load(DirBucketId(dir, bucket), &c, DecodeDirBucket);
      if (err != 0) return err;
      it = buckets_.emplace(key, std::move(c)).first;
    }
    *out = &it->second.value;
    return 0;
  }

  // The bucket covering `key` and its position in the index.
  int BucketFor(uint64_t dir, uint64_t key, size_t* pos, DirBucket** out) {
    DirIndex* index = nullptr;
    int err = LoadIndex(dir, &index);
    if (err != 0) return err;
    auto it = std::upper_bound(index->ranges.begin(), index->ranges.end(), key,
                               [](uint64_t k, const BucketRange& r) { return k < r.low; });
    const size_t p = static_cast<size_t>(it - index->ranges.begin()) - 1;
    if (pos != nullptr) *pos = p;
    return LoadBucket(dir, index->ranges[p].bucket, out);
  }

  void MarkBucket(uint64_t dir, size_t pos) {
    Cached<DirBucket>& c = BucketSlot(dir, indexes_[dir].value.ranges[pos].bucket);
    c.present = c.dirty = true;
  }

  void MarkIndex(uint64_t dir) {
    Cached<DirIndex>& c = indexes_[dir];
    c.present = c.dirty = true;
  }

  template <typename Fn>
  int Edit(uint64_t dir, std::string_view name, Fn fn) {
    const uint64_t hash = NameHash(name);
    size_t pos = 0;
    DirBucket* b = nullptr;
    int err = BucketFor(dir, hash << kKeySeqBits, &pos, &b);
    if (err != 0) return err;
    for (auto it = b->entries.begin(); it != b->entries.end(); ++it) {
      if ((it->key >> kKeySeqBits) != hash || it->name != name) continue;
      fn(&b->entries, it);
      MarkBucket(dir, pos);
      DirIndex& index = indexes_[dir].value;
      if (b->entries.empty() && pos > 0) {  // an empty bucket other than the first goes
        Drop(&BucketSlot(dir, index.ranges[pos].bucket));
        index.ranges.erase(index.ranges.begin() + static_cast<ptrdiff_t>(pos));
        MarkIndex(dir);
      }
      return 0;
    }
    return ENOENT;
  }

  // Splits the bucket at `pos` in two when it grew past the split size, at
  // a hash boundary (the keys of one name hash stay in one bucket).
  int MaybeSplit(uint64_t dir, size_t pos) {
    DirIndex& index = indexes_[dir].value;
    DirBucket& b = BucketSlot(dir, index.ranges[pos].bucket).value;
    size_t bytes = 0;
    for (const DirEntry& e : b.entries) bytes += EncodedEntrySize(e);
    if (bytes <= kBucketSplitBytes || index.next_bucket >= kMaxBuckets) return 0;
    const size_t n = b.entries.size();
    auto boundary = [&](size_t m) {
      return (b.entries[m].key >> kKeySeqBits) != (b.entries[m - 1].key >> kKeySeqBits);
    };
    size_t m = n / 2;
    while (m < n && !boundary(m)) ++m;
    if (m == n) {
      for (m = n / 2; m > 0 && !boundary(m); --m) {
      }
      if (m == 0) return 0;  // one hash only: the bucket grows
    }
    const uint32_t fresh = index.next_bucket++;
    const uint64_t low = (b.entries[m].key >> kKeySeqBits) << kKeySeqBits;
    Cached<DirBucket>& nb = BucketSlot(dir, fresh);
    nb.value.entries.assign(std::make_move_iterator(b.entries.begin() + static_cast<ptrdiff_t>(m)),
                            std::make_move_iterator(b.entries.end()));
    nb.present = nb.dirty = true;
    b.entries.resize(m);
    index.ranges.insert(index.ranges.begin() + static_cast<ptrdiff_t>(pos) + 1, {low, fresh});
    MarkIndex(dir);
    return 0;
  }

  int LoadOrphans(uint64_t ino, Cached<OrphanList>** out) {
    const uint32_t shard = static_cast<uint32_t>(ino % kOrphanShards);
    auto it = orphans_.find(shard);
    if (it == orphans_.end()) {
      Cached<OrphanList> c;
      int err = Load(OrphanShardId(shard), &c, DecodeOrphanList);
      if (err != 0) return err;
      it = orphans_.emplace(shard, std::move(c)).first;
    }
    *out = &it->second;
    return 0;
  }

  client::Transaction* tx_;
  Status status_;
  std::map<uint64_t, Cached<Inode>> inodes_;
  std::map<uint64_t, Cached<DirIndex>> indexes_;
  std::map<std::pair<uint64_t, uint32_t>, Cached<DirBucket>> buckets_;
  std::map<uint32_t, Cached<OrphanList>> orphans_;
  std::map<uint64_t, Cached<VolumeQuota>> quotas_;
  std::map<uint64_t, Cached<LockTable>> locks_;
  std::map<uint64_t, Cached<LockSession>> sessions_;
  std::optional<Cached<SessionList>> session_list_;
};

FileSystem::FileSystem(client::Client* client, const FsOptions& options)
    : client_(client), options_(options), log_("pdfs"), rng_state_(std::random_device{}()) {
  rng_state_ = (rng_state_ << 32) ^ std::random_device{}() ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

FileSystem::~FileSystem() {
  EndSession();
}

Status FileSystem::Open(client::Client* client, const FsOptions& options,
                        std::unique_ptr<FileSystem>* out) {
  std::unique_ptr<FileSystem> fs(new FileSystem(client, options));
  Status failure;
  int err = fs->RunTx([&](Txn& t) {
    Inode* root = nullptr;
    int e = t.LoadInode(kRootIno, &root);
    if (e != ENOENT) return e;
    Inode n;
    n.ino = kRootIno;
    n.mode = S_IFDIR | 0755;
    n.nlink = 2;
    n.parent = kRootIno;
    n.atime = n.mtime = n.ctime = Now();
    t.SaveInode(n);
    return 0;
  });
  if (err != 0) {
    return Status::Unavailable("pDFS: the root directory could not be read or created (" +
                               std::string(strerror(err)) + ")");
  }
  *out = std::move(fs);
  return Status::OK();
}

int FileSystem::Io(const char* what, const Status& s) {
  log_.Error("cluster operation failed", {{"op", what}, {"status", s}});
  return EIO;
}

uint64_t FileSystem::RandomIno() {
  std::lock_guard<std::mutex> lock(rng_mu_);
  // splitmix64; inode numbers are 63-bit (off_t-safe) and above the root.
  for (;;) {
    uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z = (z ^ (z >> 31)) >> 1;
    if (z > kRootIno) return z;
  }
}

int FileSystem::RunTx(const std::function<int(Txn&)>& fn) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_ms);
  uint32_t backoff_us = 100;
  std::minstd_rand jitter(static_cast<uint32_t>(RandomIno()));
  for (;;) {
    std::unique_ptr<client::Transaction> tx;
    Status s = client_->TxBegin(&tx);
    int err = 0;
    if (s.ok()) {
      Txn t(tx.get());
      err = fn(t);
      s = t.status();
      if (s.ok()) s = t.Commit(err == 0);
    }
    if (s.ok()) return err;
    const bool unknown = tx != nullptr && tx->outcome_unknown();
    const bool retry = s.code() == StatusCode::kAborted || ((s.code() == StatusCode::kUnavailable ||
                                                             s.code() == StatusCode::kStaleEpoch ||
                                                             s.code() == StatusCode::kNotFound) &&
                                                            !unknown);
    if (!retry || std::chrono::steady_clock::now() > deadline) return Io("transaction", s);
    if (s.code() != StatusCode::kAborted) (void)client_->RefreshMapping();
    std::this_thread::sleep_for(std::chrono::microseconds(jitter() % backoff_us + 1));
    backoff_us = std::min<uint32_t>(backoff_us * 2, 50000);
  }
}

int FileSystem::ReadInode(uint64_t ino, Inode* out) {
  std::string data;
  Status s = client_->GetObj(InodeId(ino), &data);
  if (s.code() == StatusCode::kNotFound) return ENOENT;
  if (s.ok()) s = DecodeInode(data, out);
  if (!s.ok()) return Io("read inode", s);
  return 0;
}

int FileSystem::GetAttr(uint64_t ino, Attr* out) {
  Inode n;
  int err = ReadInode(ino, &n);
  if (err == 0) *out = ToAttr(n);
  return err;
}

int FileSystem::LookupByReads(uint64_t parent, std::string_view name, Attr* out) {
  // Any failed read (a server down, a record a crashed client left...) is
  // left to the transaction, which retries and reports it.
  const uint64_t hash = NameHash(name);
  std::string bytes;
  // Reads bucket `b` of `parent` into `bucket`: false when undecided,
  // *present when it exists.
  DirBucket bucket;
  auto read_bucket = [&](uint32_t b, bool* present) {
    Status s = client_->GetObj(DirBucketId(parent, b), &bytes);
    *present = s.ok();
    return (s.ok() && DecodeDirBucket(bytes, &bucket).ok()) || s.code() == StatusCode::kNotFound;
  };
  // `name`'s entry in `bucket`, or nullptr.
  auto found = [&]() -> const DirEntry* {
    for (const DirEntry& e : bucket.entries) {
      if ((e.key >> kKeySeqBits) == hash && e.name == name) return &e;
    }
    return nullptr;
  };
  // The entry's inode: the name was in the directory when its bucket was
  // read; the inode gone or without links since (an unlink or rename in
  // between): undecided.
  auto answer = [&](const DirEntry& e) {
    Inode n;
    Status s = client_->GetObj(InodeId(e.ino), &bytes);
    if (!s.ok() || !DecodeInode(bytes, &n).ok() || n.nlink == 0) return kUndecided;
    *out = ToAttr(n);
    return 0;
  };
  // Bucket 0 first: a directory that never split has no other.
  bool has_bucket0 = false;
  if (!read_bucket(0, &has_bucket0)) return kUndecided;
  if (const DirEntry* e = has_bucket0 ? found() : nullptr) return answer(*e);
  std::string index_bytes;
  Status s = client_->GetObj(DirIndexId(parent), &index_bytes);
  if (s.code() == StatusCode::kNotFound) {
    // No index now: the directory has not split (an index, once made, goes
    // only with the directory), so bucket 0 held every name when it was
    // read. No bucket at all: an empty directory, or no directory (ENOTDIR,
    // ENOENT): the transaction tells.
    return has_bucket0 ? ENOENT : kUndecided;
  }
  DirIndex index;
  if (!s.ok() || !DecodeDirIndex(index_bytes, &index).ok()) return kUndecided;
  auto range = std::upper_bound(index.ranges.begin(), index.ranges.end(), hash << kKeySeqBits,
                                [](uint64_t k, const BucketRange& r) { return k < r.low; });
  bool present = false;
  if (!read_bucket(std::prev(range)->bucket, &present) || !present) return kUndecided;
  if (const DirEntry* e = found()) return answer(*e);
  // Absent from the bucket that covered its hash — if it still does. Every
  // change of the index is a split (next_bucket grows) or the removal of an
  // emptied bucket's range (ranges shrink), so the index read again with
  // the same bytes has not changed in between.
  s = client_->GetObj(DirIndexId(parent), &bytes);
  return s.ok() && bytes == index_bytes ? ENOENT : kUndecided;
}

int FileSystem::Lookup(uint64_t parent, std::string_view name, Attr* out) {
  if (name.size() > kMaxNameLength) return ENAMETOOLONG;
  if (!IsDotName(name) && CheckName(name) == 0) {
    int err = LookupByReads(parent, name, out);
    if (err != kUndecided) return err;
  }
  return RunTx([&](Txn& t) {
    Inode* p = nullptr;
    int err = t.LoadInode(parent, &p);
    if (err != 0) return err;
    if (!S_ISDIR(p->mode)) return ENOTDIR;
    uint64_t child = 0;
    if (name == ".") {
      child = parent;
    } else if (name == "..") {
      child = p->parent;
    } else {
      DirEntry e;
      err = t.Find(parent, name, &e);
      if (err != 0) return err;
      child = e.ino;
    }
    Inode* c = nullptr;
    err = t.LoadInode(child, &c);
    if (err != 0) return err == ENOENT ? EIO : err;  // an entry without its inode
    *out = ToAttr(*c);
    return 0;
  });
}

int FileSystem::SetAttr(uint64_t ino, const SetAttrArgs& args, Attr* out) {
  Inode before;
  int err = ReadInode(ino, &before);
  if (err != 0) return err;
  if (args.set_size) {
    if (S_ISDIR(before.mode)) return EISDIR;
    if (!S_ISREG(before.mode)) return EINVAL;
    if (args.size > kMaxFileSize) return EFBIG;
    if (args.size > before.size) {
      err = ClearTail(ino);
      if (err != 0) return err;
    }
  }
  uint64_t old_size = 0, data_end = 0;
  err = RunTx([&](Txn& t) {
    Inode* n = nullptr;
    int e = t.LoadInode(ino, &n);
    if (e != 0) return e;
    const Time now = Now();
    if (args.set_mode) {
      n->mode = (n->mode & S_IFMT) | (args.mode & 07777);
      e = ChmodAccessAcl(n);
      if (e != 0) return e;
    }
    if (args.set_uid) n->uid = args.uid;
    if (args.set_gid) n->gid = args.gid;
    if (args.set_atime) n->atime = args.atime_now ? now : args.atime;
    if (args.set_mtime) n->mtime = args.mtime_now ? now : args.mtime;
    old_size = n->size;
    data_end = n->data_end;
    if (args.set_size) {
      if (!S_ISREG(n->mode)) return EINVAL;
      if (n->nlink > 0) {  // an orphan's bytes were given back already
        e = t.Charge(n->volume, static_cast<int64_t>(args.size) - static_cast<int64_t>(n->size), 0);
        if (e != 0) return e;
      }
      n->size = args.size;
      n->mtime = now;
    }
    n->ctime = now;
    t.SaveInode(*n);
    *out = ToAttr(*n);
    return 0;
  });
  if (err != 0 || !args.set_size || args.size >= old_size) return err;
  // The bytes past the new end: garbage until cleared (data_end says so).
  return ClearTail(ino);
}

int FileSystem::ClearTail(uint64_t ino) {
  Inode n;
  int err = ReadInode(ino, &n);
  if (err != 0 || n.data_end <= n.size) return err;
  err = ClearData(ino, n.size, n.data_end);
  if (err != 0) return err;
  return RunTx([&](Txn& t) {
    Inode* m = nullptr;
    int e = t.LoadInode(ino, &m);
    if (e != 0) return e == ENOENT ? 0 : e;
    if (m->data_end == n.data_end && m->size <= n.size) {
      m->data_end = m->size;
      t.SaveInode(*m);
    }
    return 0;
  });
}

int FileSystem::ClearData(uint64_t ino, uint64_t from, uint64_t to) {
  for (uint64_t chunk = from / kChunkSize; chunk * kChunkSize < to; ++chunk) {
    const dsm::ObjectId id = DataId(ino, chunk);
    const uint64_t start = chunk * kChunkSize;
    Status s = from <= start ? client_->DelObj(id) : client_->TruncateObj(id, from - start);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return Io("clear file data", s);
  }
  return 0;
}

int FileSystem::CreateNode(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                           std::string_view target, const Owner& owner, Attr* out,
                           const std::function<int(Txn&, const Inode&)>& also) {
  if (name.empty() || IsDotName(name)) return EEXIST;  // "/", "." or ".."
  int err = CheckName(name);
  if (err != 0) return err;
  return RunTx([&](Txn& t) {
    Inode* p = nullptr;
    int e = t.LoadInode(parent, &p);
    if (e != 0) return e;
    if (!S_ISDIR(p->mode)) return ENOTDIR;
    if (p->nlink == 0) return ENOENT;  // a removed directory
    DirEntry existing;
    e = t.Find(parent, name, &existing);
    if (e != ENOENT) return e == 0 ? EEXIST : e;
    Inode n;
    Inode* clash = nullptr;
    do {
      n.ino = RandomIno();
      e = t.LoadInode(n.ino, &clash);
    } while (e == 0);
    if (e != ENOENT) return e;
    const bool dir = S_ISDIR(mode);
    n.mode = mode;
    n.uid = owner.uid;
    n.gid = owner.gid;
    if ((p->mode & S_ISGID) != 0) {
      n.gid = p->gid;
      if (dir) n.mode |= S_ISGID;
    }
    if (!S_ISLNK(mode)) {
      e = InheritAcls(*p, owner.umask, &n);
      if (e != 0) return e;
    }
    n.nlink = dir ? 2 : 1;
    n.rdev = rdev;
    n.atime = n.mtime = n.ctime = Now();
    n.parent = dir ? parent : 0;
    n.target = std::string(target);
    n.size = target.size();
    // A directory of the root is a volume of its own; below, the parent's.
    n.volume = parent == kRootIno ? (dir ? n.ino : 0) : p->volume;
    if (n.volume != n.ino) {
      e = t.Charge(n.volume, static_cast<int64_t>(n.size), 1);
      if (e != 0) return e;
    }
    if (also) {
      e = also(t, n);
      if (e != 0) return e;
    }
    e = t.Insert(parent, name, n.ino, DirentType(mode));
    if (e != 0) return e;
    p->size++;
    if (dir) p->nlink++;
    p->mtime = p->ctime = n.ctime;
    t.SaveInode(*p);
    t.SaveInode(n);
    *out = ToAttr(n);
    return 0;
  });
}

int FileSystem::Mkdir(uint64_t parent, std::string_view name, uint32_t mode, const Owner& owner,
                      Attr* out) {
  return CreateNode(parent, name, S_IFDIR | (mode & 07777), 0, "", owner, out);
}

int FileSystem::Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                      const Owner& owner, Attr* out) {
  switch (mode & S_IFMT) {
    case 0: mode |= S_IFREG; break;
    case S_IFREG:
    case S_IFIFO:
    case S_IFSOCK: break;
    case S_IFCHR:
    case S_IFBLK: return EPERM;  // device nodes are not served
    default: return EINVAL;
  }
  return CreateNode(parent, name, mode & (S_IFMT | 07777), 0, "", owner, out);
}

int FileSystem::Symlink(uint64_t parent, std::string_view name, std::string_view target,
                        const Owner& owner, Attr* out) {
  if (target.empty()) return ENOENT;
  if (target.size() > kMaxSymlinkLength) return ENAMETOOLONG;
  return CreateNode(parent, name, S_IFLNK | 0777, 0, target, owner, out);
}

int FileSystem::Readlink(uint64_t ino, std::string* target) {
  Inode n;
  int err = ReadInode(ino, &n);
  if (err != 0) return err;
  if (!S_ISLNK(n.mode)) return EINVAL;
  *target = n.target;
  return 0;
}

int FileSystem::Unlink(uint64_t parent, std::string_view name) {
  if (name.empty() || IsDotName(name)) return EISDIR;
  int err = CheckName(name);
  if (err != 0) return err;
  uint64_t orphan = 0;
  err = RunTx([&](Txn& t) {
    orphan = 0;
    Inode *p = nullptr, *c = nullptr;
    DirEntry entry;
    int e = t.LoadChild(parent, name, &p, &entry, &c);
    if (e != 0) return e;
    if (S_ISDIR(c->mode)) return EISDIR;
    e = t.Remove(parent, name);
    if (e != 0) return e;
    const Time now = Now();
    p->size--;
    p->mtime = p->ctime = now;
    t.SaveInode(*p);
    return DropLink(t, c, now, &orphan);
  });
  if (err != 0 || orphan == 0) return err;
  return PurgeUnlessOpen(orphan);
}

int FileSystem::CheckSameVolume(Txn& t, uint64_t from, uint64_t to) {
  if (from == to) return 0;
  for (uint64_t volume : {from, to}) {
    VolumeQuota* q = nullptr;
    int err = t.LoadQuota(volume, &q);
    if (err != 0) return err;
    if (q != nullptr) return EXDEV;
  }
  return 0;
}

int FileSystem::DropDirectory(Txn& t, const Inode* dir) {
  int err = t.DeleteDirRecords(dir->ino);
  if (err != 0) return err;
  t.DeleteInode(dir->ino);
  if (dir->ino == dir->volume) {
    return t.DeleteQuota(dir->ino);
  }
  return t.Charge(dir->volume, 0, -1);
}

int FileSystem::DropLink(Txn& t, Inode* n, const Time& now, uint64_t* orphan) {
  n->nlink--;
  n->ctime = now;
  if (n->nlink > 0) {
    t.SaveInode(*n);
    return 0;
  }
  int err = t.Charge(n->volume, -static_cast<int64_t>(n->size), -1);
  if (err != 0) return err;
  if (n->data_end == 0 && !IsOpen(n->ino)) {  // nothing to free later
    t.DeleteInode(n->ino);
    return 0;
  }
  *orphan = n->ino;
  t.SaveInode(*n);
  return t.AddOrphan(n->ino);
}

int FileSystem::PurgeUnlessOpen(uint64_t ino) {
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    if (open_.count(ino) != 0) return 0;  // its last Release purges it
  }
  return Purge(ino);
}

int FileSystem::Purge(uint64_t ino) {
  Inode n;
  int err = ReadInode(ino, &n);
  if (err == 0 && n.nlink == 0) err = ClearData(ino, 0, n.data_end);
  if (err != 0 && err != ENOENT) return err;
  return RunTx([&](Txn& t) {
    Inode* m = nullptr;
    int e = t.LoadInode(ino, &m);
    if (e == 0 && m->nlink == 0) t.DeleteInode(ino);
    if (e != 0 && e != ENOENT) return e;
    return t.RemoveOrphan(ino);
  });
}

int FileSystem::PurgeOrphans() {
  for (uint32_t shard = 0; shard < kOrphanShards; ++shard) {
    std::string data;
    Status s = client_->GetObj(OrphanShardId(shard), &data);
    if (s.code() == StatusCode::kNotFound) continue;
    OrphanList list;
    if (s.ok()) s = DecodeOrphanList(data, &list);
    if (!s.ok()) return Io("read orphan list", s);
    for (uint64_t ino : list.inos) {
      int err = PurgeUnlessOpen(ino);
      if (err != 0) return err;
    }
  }
  return 0;
}

int FileSystem::SetVolumeUsage(uint64_t volume, uint64_t bytes, uint64_t inodes) {
  return RunTx([&](Txn& t) {
    VolumeQuota* q = nullptr;
    int e = t.LoadQuota(volume, &q);
    if (e != 0) return e;
    if (q == nullptr) return ENODATA;
    q->bytes_used = bytes;
    q->inodes_used = inodes;
    t.SaveQuota(volume, *q);
    return 0;
  });
}

int FileSystem::Rmdir(uint64_t parent, std::string_view name) {
  if (name.empty()) return EBUSY;  // the root
  if (name == ".") return EINVAL;
  if (name == "..") return ENOTEMPTY;
  int err = CheckName(name);
  if (err != 0) return err;
  return RunTx([&](Txn& t) {
    Inode *p = nullptr, *c = nullptr;
    DirEntry entry;
    int e = t.LoadChild(parent, name, &p, &entry, &c);
    if (e != 0) return e;
    if (!S_ISDIR(c->mode)) return ENOTDIR;
    if (c->size != 0) return ENOTEMPTY;
    e = t.Remove(parent, name);
    if (e == 0) e = DropDirectory(t, c);
    if (e != 0) return e;
    p->size--;
    p->nlink--;
    p->mtime = p->ctime = Now();
    t.SaveInode(*p);
    return 0;
  });
}

int FileSystem::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                       std::string_view new_name, unsigned flags) {
  if ((flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) != 0 ||
      flags == (RENAME_NOREPLACE | RENAME_EXCHANGE)) {
    return EINVAL;
  }
  for (std::string_view n : {name, new_name}) {
    if (n.empty()) return EBUSY;  // the root
    if (IsDotName(n)) return EINVAL;
    int err = CheckName(n);
    if (err != 0) return err;
  }
  uint64_t orphan = 0;
  int err = RunTx([&](Txn& t) {
    orphan = 0;
    Inode *sp = nullptr, *dp = nullptr;
    int e = t.LoadInode(parent, &sp);
    if (e == 0) e = t.LoadInode(new_parent, &dp);
    if (e != 0) return e;
    if (!S_ISDIR(sp->mode) || !S_ISDIR(dp->mode)) return ENOTDIR;
    DirEntry se, de;
    e = t.Find(parent, name, &se);
    if (e != 0) return e;
    e = t.Find(new_parent, new_name, &de);
    if (e != 0 && e != ENOENT) return e;
    const bool dst_exists = e == 0;
    if ((flags & RENAME_EXCHANGE) != 0 && !dst_exists) return ENOENT;
    if ((flags & RENAME_NOREPLACE) != 0 && dst_exists) return EEXIST;
    if (dst_exists && de.ino == se.ino) return 0;  // two names of one file: nothing to do
    Inode* src = nullptr;
    e = t.LoadInode(se.ino, &src);
    if (e != 0) return e == ENOENT ? EIO : e;
    const bool src_dir = S_ISDIR(src->mode);
    // A directory may not move below itself: walk up from the target.
    auto below = [&](uint64_t dir, uint64_t from) {
      for (uint64_t x = from;;) {
        if (x == dir) return EINVAL;
        if (x == kRootIno) return 0;
        Inode* n = nullptr;
        int r = t.LoadInode(x, &n);
        if (r != 0) return r == ENOENT ? EIO : r;
        x = n->parent;
      }
    };
    if (src_dir && parent != new_parent) {
      e = below(src->ino, new_parent);
      if (e != 0) return e;
    }
    e = CheckSameVolume(t, src->volume, VolumeBelow(*dp, *src));
    if (e != 0) return e;
    const Time now = Now();
    Inode* dst = nullptr;
    if (dst_exists) {
      e = t.LoadInode(de.ino, &dst);
      if (e != 0) return e == ENOENT ? EIO : e;
    }
    if ((flags & RENAME_EXCHANGE) != 0) {
      const bool dst_dir = S_ISDIR(dst->mode);
      if (dst_dir && parent != new_parent) {
        e = below(dst->ino, parent);
        if (e != 0) return e;
      }
      e = CheckSameVolume(t, dst->volume, VolumeBelow(*sp, *dst));
      if (e != 0) return e;
      e = t.SetEntry(parent, name, de.ino, de.type);
      if (e == 0) e = t.SetEntry(new_parent, new_name, se.ino, se.type);
      if (e != 0) return e;
      if (parent != new_parent) {
        if (src_dir) {
          src->parent = new_parent;
          sp->nlink--;
          dp->nlink++;
        }
        if (dst_dir) {
          dst->parent = parent;
          dp->nlink--;
          sp->nlink++;
        }
      }
      src->ctime = dst->ctime = now;
      sp->mtime = sp->ctime = dp->mtime = dp->ctime = now;
      t.SaveInode(*src);
      t.SaveInode(*dst);
      t.SaveInode(*sp);
      t.SaveInode(*dp);
      return 0;
    }
    if (dst_exists) {
      const bool dst_dir = S_ISDIR(dst->mode);
      if (src_dir && !dst_dir) return ENOTDIR;
      if (!src_dir && dst_dir) return EISDIR;
      if (dst_dir && dst->size != 0) return ENOTEMPTY;
      e = t.SetEntry(new_parent, new_name, se.ino, se.type);
      if (e != 0) return e;
      if (dst_dir) {
        e = DropDirectory(t, dst);
        if (e != 0) return e;
        dp->nlink--;
      } else {
        e = DropLink(t, dst, now, &orphan);
        if (e != 0) return e;
      }
    } else {
      e = t.Insert(new_parent, new_name, se.ino, se.type);
      if (e != 0) return e;
      dp->size++;
    }
    e = t.Remove(parent, name);
    if (e != 0) return e;
    sp->size--;
    if (src_dir && parent != new_parent) {
      src->parent = new_parent;
      sp->nlink--;
      dp->nlink++;
    }
    src->ctime = now;
    sp->mtime = sp->ctime = dp->mtime = dp->ctime = now;
    t.SaveInode(*src);
    t.SaveInode(*sp);
    t.SaveInode(*dp);
    return 0;
  });
  if (err != 0 || orphan == 0) return err;
  return PurgeUnlessOpen(orphan);
}

int FileSystem::Link(uint64_t ino, uint64_t new_parent, std::string_view new_name, Attr* out) {
  if (new_name.empty() || IsDotName(new_name)) return EEXIST;
  int err = CheckName(new_name);
  if (err != 0) return err;
  return RunTx([&](Txn& t) {
    Inode *n = nullptr, *p = nullptr;
    int e = t.LoadInode(ino, &n);
    if (e != 0) return e;
    if (S_ISDIR(n->mode)) return EPERM;
    if (n->nlink == 0) return ENOENT;
    e = t.LoadInode(new_parent, &p);
    if (e != 0) return e;
    if (!S_ISDIR(p->mode)) return ENOTDIR;
    if (p->nlink == 0) return ENOENT;
    e = CheckSameVolume(t, n->volume, VolumeBelow(*p, *n));
    if (e != 0) return e;
    DirEntry existing;
    e = t.Find(new_parent, new_name, &existing);
    if (e != ENOENT) return e == 0 ? EEXIST : e;
    e = t.Insert(new_parent, new_name, ino, DirentType(n->mode));
    if (e != 0) return e;
    const Time now = Now();
    n->nlink++;
    n->ctime = now;
    p->size++;
    p->mtime = p->ctime = now;
    t.SaveInode(*n);
    t.SaveInode(*p);
    *out = ToAttr(*n);
    return 0;
  });
}

int FileSystem::Readdir(uint64_t dir, uint64_t cookie, size_t max, std::vector<ReaddirEntry>* out,
                        bool* eof) {
  if (max == 0) return EINVAL;
  return RunTx([&](Txn& t) {
    out->clear();
    Inode* d = nullptr;
    int e = t.LoadInode(dir, &d);
    if (e != 0) return e;
    if (!S_ISDIR(d->mode)) return ENOTDIR;
    return t.List(dir, cookie, max, out, eof);
  });
}

int FileSystem::EnsureChunk(uint64_t ino, uint64_t chunk) {
  return RunTx([&](Txn& t) { return t.EnsureObject(DataId(ino, chunk)); });
}

int FileSystem::Read(uint64_t ino, uint64_t offset, uint64_t length, std::string* out) {
  out->clear();
  Inode n;
  int err = ReadInode(ino, &n);
  if (err != 0) return err;
  if (S_ISDIR(n.mode)) return EISDIR;
  if (!S_ISREG(n.mode)) return EINVAL;
  if (offset >= n.size) return 0;
  const uint64_t end = offset + std::min(length, n.size - offset);
  out->reserve(end - offset);
  for (uint64_t pos = offset; pos < end;) {
    const uint64_t chunk = pos / kChunkSize;
    const uint64_t off = pos - chunk * kChunkSize;
    const uint64_t len = std::min(end - pos, kChunkSize - off);
    std::string piece;
    Status s = client_->ReadObj(DataId(ino, chunk), off, len, &piece);
    if (s.code() == StatusCode::kOutOfRange) {  // the chunk ends inside the range
      uint64_t size = 0;
      s = client_->ObjSize(DataId(ino, chunk), &size);
      piece.clear();
      if (s.ok() && size > off) s = client_->ReadObj(DataId(ino, chunk), off, size - off, &piece);
    }
    if (s.code() == StatusCode::kNotFound) {  // a hole
      piece.clear();
      s = Status::OK();
    }
    if (!s.ok()) return Io("read file data", s);
    piece.resize(len, '\0');
    out->append(piece);
    pos += len;
  }
  return 0;
}

int FileSystem::Write(uint64_t ino, uint64_t* offset, std::string_view data, bool append) {
  std::unique_lock<std::mutex> append_lock(append_mu_, std::defer_lock);
  if (append) append_lock.lock();
  Inode n;
  int err = ReadInode(ino, &n);
  if (err != 0) return err;
  if (S_ISDIR(n.mode)) return EISDIR;
  if (!S_ISREG(n.mode)) return EINVAL;
  if (append) *offset = n.size;
  if (*offset > kMaxFileSize || data.size() > kMaxFileSize - *offset) return EFBIG;
  if (data.empty()) return 0;
  const uint64_t end = *offset + data.size();
  if (end > n.size && n.volume != 0) {
    // The quota is checked before any byte is written: EDQUOT changes
    // nothing. (Writers racing to grow one volume may pass it by their
    // in-flight writes: the charge after the write is not refused.)
    err = RunTx([&](Txn& t) {
      Inode* m = nullptr;
      int e = t.LoadInode(ino, &m);
      if (e != 0) return e;
      VolumeQuota* q = nullptr;
      e = t.LoadQuota(m->volume, &q);
      if (e != 0 || q == nullptr || end <= m->size) return e;
      return q->byte_limit != 0 && q->bytes_used + (end - m->size) > q->byte_limit ? EDQUOT : 0;
    });
    if (err != 0) return err;
  }
  if (n.data_end > n.size && end > n.size) {
    err = ClearTail(ino);
    if (err != 0) return err;
  }
  for (uint64_t pos = *offset; pos < end;) {
    const uint64_t chunk = pos / kChunkSize;
    const uint64_t off = pos - chunk * kChunkSize;
    const uint64_t len = std::min(end - pos, kChunkSize - off);
    const std::string_view piece = data.substr(pos - *offset, len);
    Status s = client_->WriteObj(DataId(ino, chunk), off, piece);
    if (s.code() == StatusCode::kNotFound) {
      err = EnsureChunk(ino, chunk);
      if (err != 0) return err;
      s = client_->WriteObj(DataId(ino, chunk), off, piece);
    }
    if (!s.ok()) return Io("write file data", s);
    pos += len;
  }
  // The bytes are durable on every copy: publish the size and times.
  return RunTx([&](Txn& t) {
    Inode* m = nullptr;
    int e = t.LoadInode(ino, &m);
    if (e != 0) return e;
    if (end > m->size && m->nlink > 0) {
      e = t.Charge(m->volume, static_cast<int64_t>(end - m->size), 0, false);
      if (e != 0) return e;
    }
    m->size = std::max(m->size, end);
    m->data_end = std::max(m->data_end, end);
    m->mtime = m->ctime = Now();
    t.SaveInode(*m);
    return 0;
  });
}

int FileSystem::Fallocate(uint64_t ino, int mode, uint64_t offset, uint64_t length) {
  if ((mode & ~FALLOC_FL_KEEP_SIZE) != 0) return EOPNOTSUPP;
  if (length == 0) return EINVAL;
  if (offset > kMaxFileSize || length > kMaxFileSize - offset) return EFBIG;
  Inode before;
  int err = ReadInode(ino, &before);
  if (err != 0) return err;
  if (S_ISDIR(before.mode)) return EISDIR;
  if (!S_ISREG(before.mode)) return ENODEV;
  const uint64_t end = offset + length;
  if ((mode & FALLOC_FL_KEEP_SIZE) != 0 || end <= before.size) return 0;
  if (before.data_end > before.size) {
    err = ClearTail(ino);
    if (err != 0) return err;
  }
  return RunTx([&](Txn& t) {
    Inode* n = nullptr;
    int e = t.LoadInode(ino, &n);
    if (e != 0 || end <= n->size) return e;
    if (n->nlink > 0) {  // an orphan's bytes were given back already
      e = t.Charge(n->volume, static_cast<int64_t>(end - n->size), 0);
      if (e != 0) return e;
    }
    n->size = end;
    n->mtime = n->ctime = Now();
    t.SaveInode(*n);
    return 0;
  });
}

int FileSystem::Fsync(uint64_t ino) {
  // Writes and metadata are durable on every copy when their calls
  // return (docs/pdfs.md "Durability"): nothing is left to flush.
  Inode n;
  return ReadInode(ino, &n);
}

namespace {

int CheckXattrName(std::string_view name) {
  if (name.empty()) return EINVAL;
  if (name.size() > kMaxXattrName) return ERANGE;
  for (std::string_view ns : {"user.", "security.", "trusted.", "system."}) {
    if (name.size() > ns.size() && name.substr(0, ns.size()) == ns) return 0;
  }
  return EOPNOTSUPP;
}

}  // namespace

int FileSystem::SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) {
  int err = CheckXattrName(name);
  if (err != 0) return err;
  if (value.size() > kMaxXattrValue) return E2BIG;
  if ((flags & ~(XATTR_CREATE | XATTR_REPLACE)) != 0) return EINVAL;
  const bool access_acl = name == kAccessAclXattr;
  const bool default_acl = name == kDefaultAclXattr;
  Acl acl;
  if ((access_acl || default_acl) && !DecodeAcl(value, &acl).ok()) return EINVAL;
  return RunTx([&](Txn& t) {
    Inode* n = nullptr;
    int e = t.LoadInode(ino, &n);
    if (e != 0) return e;
    if (default_acl && !S_ISDIR(n->mode)) return EACCES;  // as Linux answers
    auto it = n->xattrs.find(std::string(name));
    if ((flags & XATTR_CREATE) != 0 && it != n->xattrs.end()) return EEXIST;
    if ((flags & XATTR_REPLACE) != 0 && it == n->xattrs.end()) return ENODATA;
    size_t total = name.size() + value.size();
    for (const auto& [k, v] : n->xattrs) {
      if (k != name) total += k.size() + v.size();
    }
    if (total > kMaxXattrTotal) return ENOSPC;
    n->ctime = Now();
    if (access_acl) {
      // The mode says what the owner, group (mask) and other entries say;
      // an ACL with no more than those is the mode alone.
      n->mode = (n->mode & ~uint32_t{0777}) | AclPermissionBits(acl);
      if (AclIsMinimal(acl)) {
        n->xattrs.erase(std::string(name));
        t.SaveInode(*n);
        return 0;
      }
    }
    n->xattrs[std::string(name)] = std::string(value);
    t.SaveInode(*n);
    return 0;
  });
}

int FileSystem::GetXattr(uint64_t ino, std::string_view name, std::string* value) {
  int err = CheckXattrName(name);
  if (err != 0) return err;
  Inode n;
  err = ReadInode(ino, &n);
  if (err != 0) return err;
  auto it = n.xattrs.find(std::string(name));
  if (it == n.xattrs.end()) return ENODATA;
  *value = it->second;
  return 0;
}

int FileSystem::ListXattr(uint64_t ino, std::vector<std::string>* names) {
  Inode n;
  int err = ReadInode(ino, &n);
  if (err != 0) return err;
  names->clear();
  for (const auto& [k, v] : n.xattrs) names->push_back(k);
  return 0;
}

int FileSystem::RemoveXattr(uint64_t ino, std::string_view name) {
  int err = CheckXattrName(name);
  if (err != 0) return err;
  return RunTx([&](Txn& t) {
    Inode* n = nullptr;
    int e = t.LoadInode(ino, &n);
    if (e != 0) return e;
    if (n->xattrs.erase(std::string(name)) == 0) {
      // No ACL to remove is no error (as on Linux file systems: removing
      // an ACL sets none); the mode stays what it is.
      return name == kAccessAclXattr || name == kDefaultAclXattr ? 0 : ENODATA;
    }
    n->ctime = Now();
    t.SaveInode(*n);
    return 0;
  });
}

bool FileSystem::IsOpen(uint64_t ino) {
  std::lock_guard<std::mutex> lock(open_mu_);
  return open_.count(ino) != 0;
}

void FileSystem::Acquire(uint64_t ino) {
  std::lock_guard<std::mutex> lock(open_mu_);
  open_[ino]++;
}

void FileSystem::Release(uint64_t ino) {
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    auto it = open_.find(ino);
    if (it == open_.end() || --it->second > 0) return;
    open_.erase(it);
  }
  Inode n;
  if (ReadInode(ino, &n) == 0 && n.nlink == 0) (void)Purge(ino);
}

int FileSystem::Walk(uint64_t start, std::string_view path, bool follow_last, int* links_left,
                     Attr* out) {
  uint64_t cur = path.starts_with('/') ? kRootIno : start;
  const bool want_dir = path.ends_with('/');
  Attr a;  // of `cur`, once a lookup reached it
  bool reached = false;
  size_t pos = 0;
  for (;;) {
    while (pos < path.size() && path[pos] == '/') ++pos;
    if (pos == path.size()) break;
    size_t next = path.find('/', pos);
    if (next == std::string_view::npos) next = path.size();
    const std::string_view comp = path.substr(pos, next - pos);
    pos = next;
    size_t rest = pos;
    while (rest < path.size() && path[rest] == '/') ++rest;
    const bool last = rest == path.size();
    int err = Lookup(cur, comp, &a);
    if (err != 0) return err;
    if (S_ISLNK(a.mode) && (!last || follow_last || want_dir)) {
      if (--*links_left < 0) return ELOOP;
      std::string target;
      err = Readlink(a.ino, &target);
      if (err == 0) err = Walk(cur, target, true, links_left, &a);
      if (err != 0) return err;
    }
    cur = a.ino;
    reached = true;
  }
  if (!reached) {  // no component: the start itself
    int err = GetAttr(cur, &a);
    if (err != 0) return err;
  }
  if (want_dir && !S_ISDIR(a.mode)) return ENOTDIR;
  *out = a;
  return 0;
}

int FileSystem::Resolve(std::string_view path, bool follow_last, Attr* out) {
  if (path.empty()) return ENOENT;
  if (path.size() >= PATH_MAX) return ENAMETOOLONG;
  int links = options_.max_symlinks;
  return Walk(kRootIno, path, follow_last, &links, out);
}

int FileSystem::ResolvePath(std::string_view path, bool follow_last, uint64_t* ino) {
  Attr a;
  int err = Resolve(path, follow_last, &a);
  if (err == 0) *ino = a.ino;
  return err;
}

int FileSystem::ResolveParent(std::string_view path, uint64_t* parent, std::string* name) {
  if (path.empty()) return ENOENT;
  if (path.size() >= PATH_MAX) return ENAMETOOLONG;
  while (path.size() > 1 && path.ends_with('/')) path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  const std::string_view dir = slash == std::string_view::npos ? "" : path.substr(0, slash + 1);
  *name = std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
  if (name->size() > kMaxNameLength) return ENAMETOOLONG;
  if (dir.empty()) {
    *parent = kRootIno;
    return 0;
  }
  uint64_t d = 0;
  int err = ResolvePath(dir, true, &d);
  if (err != 0) return err;
  *parent = d;
  return 0;
}

int FileSystem::Stat(std::string_view path, Attr* out) {
  return Resolve(path, true, out);
}

int FileSystem::Lstat(std::string_view path, Attr* out) {
  return Resolve(path, false, out);
}

int FileSystem::OpenPath(std::string_view path, int flags, uint32_t mode, const Owner& owner,
                         std::unique_ptr<File>* out) {
  const int access = flags & O_ACCMODE;
  if (access != O_RDONLY && access != O_WRONLY && access != O_RDWR) return EINVAL;
  uint64_t ino = 0;
  bool created = false;
  if ((flags & O_CREAT) != 0) {
    if (path.ends_with('/')) return EISDIR;
    uint64_t parent = 0;
    std::string name;
    int err = ResolveParent(path, &parent, &name);
    if (err != 0) return err;
    if (name.empty() || name == "/") return EISDIR;
    for (;;) {
      Attr a;
      err = Lookup(parent, name, &a);
      if (err == ENOENT) {
        err = CreateNode(parent, name, S_IFREG | (mode & 07777), 0, "", owner, &a);
        if (err == EEXIST && (flags & O_EXCL) == 0) continue;  // created meanwhile
        if (err != 0) return err;
        ino = a.ino;
        created = true;
        break;
      }
      if (err != 0) return err;
      if ((flags & O_EXCL) != 0) return EEXIST;
      if (S_ISLNK(a.mode)) {
        if ((flags & O_NOFOLLOW) != 0) return ELOOP;
        err = ResolvePath(path, true, &ino);
        if (err != 0) return err;
      } else {
        ino = a.ino;
      }
      break;
    }
  } else {
    int err = ResolvePath(path, (flags & O_NOFOLLOW) == 0, &ino);
    if (err != 0) return err;
  }
  Attr a;
  int err = GetAttr(ino, &a);
  if (err != 0) return err;
  if (S_ISLNK(a.mode)) return ELOOP;  // O_NOFOLLOW met a link
  if ((flags & O_DIRECTORY) != 0 && !S_ISDIR(a.mode)) return ENOTDIR;
  if (S_ISDIR(a.mode) && access != O_RDONLY) return EISDIR;
  if ((flags & O_TRUNC) != 0 && !created && S_ISREG(a.mode) && access != O_RDONLY && a.size != 0) {
    SetAttrArgs args;
    args.set_size = true;
    err = SetAttr(ino, args, &a);
    if (err != 0) return err;
  }
  Acquire(ino);
  out->reset(new File(this, ino, flags));
  return 0;
}

int FileSystem::CreateVolume(std::string_view name, uint64_t byte_limit, uint64_t inode_limit,
                             const Owner& owner, VolumeInfo* out) {
  Attr a;
  int err =
      CreateNode(kRootIno, name, S_IFDIR | 0755, 0, "", owner, &a, [&](Txn& t, const Inode& n) {
        t.SaveQuota(n.ino, {byte_limit, inode_limit, 0, 0});
        return 0;
      });
  return err != 0 ? err : StatVolume(name, out);
}

int FileSystem::ResizeVolume(std::string_view name, uint64_t byte_limit, uint64_t inode_limit,
                             VolumeInfo* out) {
  Attr a;
  int err = Lookup(kRootIno, name, &a);
  if (err == 0 && !S_ISDIR(a.mode)) err = ENOTDIR;
  if (err == 0) {
    err = RunTx([&](Txn& t) {
      VolumeQuota* q = nullptr;
      int e = t.LoadQuota(a.ino, &q);
      if (e != 0) return e;
      if (q == nullptr) return ENODATA;  // a directory made without a quota
      if ((byte_limit != 0 && byte_limit < q->bytes_used) ||
          (inode_limit != 0 && inode_limit < q->inodes_used)) {
        return EDQUOT;
      }
      q->byte_limit = byte_limit;
      q->inode_limit = inode_limit;
      t.SaveQuota(a.ino, *q);
      return 0;
    });
  }
  return err != 0 ? err : StatVolume(name, out);
}

int FileSystem::StatVolume(uint64_t ino, VolumeInfo* out) {
  return RunTx([&](Txn& t) {
    Inode* n = nullptr;
    int e = t.LoadInode(ino, &n);
    if (e != 0) return e;
    if (!S_ISDIR(n->mode) || n->volume != n->ino) return ENOTDIR;
    VolumeQuota* q = nullptr;
    e = t.LoadQuota(ino, &q);
    if (e != 0) return e;
    out->ino = ino;
    out->has_quota = q != nullptr;
    out->quota = q != nullptr ? *q : VolumeQuota{};
    return 0;
  });
}

int FileSystem::StatVolume(std::string_view name, VolumeInfo* out) {
  Attr a;
  int err = Lookup(kRootIno, name, &a);
  if (err == 0) err = StatVolume(a.ino, out);
  if (err == 0) out->name = std::string(name);
  return err;
}

int FileSystem::ListVolumes(std::vector<VolumeInfo>* out) {
  out->clear();
  uint64_t cookie = 0;
  for (bool eof = false; !eof;) {
    std::vector<ReaddirEntry> page;
    int err = Readdir(kRootIno, cookie, 256, &page, &eof);
    if (err != 0) return err;
    for (const ReaddirEntry& e : page) {
      cookie = e.next_cookie;
      if (e.type != DT_DIR) continue;
      VolumeInfo v;
      err = StatVolume(e.ino, &v);
      if (err == ENOENT) continue;  // removed meanwhile
      if (err != 0) return err;
      v.name = e.name;
      out->push_back(std::move(v));
    }
  }
  return 0;
}

int FileSystem::RemoveTree(uint64_t dir) {
  for (;;) {
    std::vector<ReaddirEntry> page;
    bool eof = false;
    int err = Readdir(dir, 0, 256, &page, &eof);
    if (err != 0 || page.empty()) return err;
    for (const ReaddirEntry& e : page) {
      if (e.type == DT_DIR) {
        err = RemoveTree(e.ino);
        if (err == 0) err = Rmdir(dir, e.name);
      } else {
        err = Unlink(dir, e.name);
      }
      if (err != 0 && err != ENOENT) return err;
    }
  }
}

int FileSystem::DeleteVolume(std::string_view name) {
  Attr a;
  int err = Lookup(kRootIno, name, &a);
  if (err == 0 && !S_ISDIR(a.mode)) err = ENOTDIR;
  if (err == 0) err = RemoveTree(a.ino);
  return err != 0 ? err : Rmdir(kRootIno, name);
}

File::File(FileSystem* fs, uint64_t ino, int flags) : fs_(fs), ino_(ino), flags_(flags) {}

File::~File() {
  fs_->Release(ino_);
}

int File::Pread(uint64_t offset, uint64_t length, std::string* out) {
  if ((flags_ & O_ACCMODE) == O_WRONLY) return EBADF;
  return fs_->Read(ino_, offset, length, out);
}

// --- advisory locks ---

int FileSystem::SetLock(uint64_t ino, const LockRequest& req, LockEntry* conflict) {
  return LockTx(ino, req, true, conflict);
}

int FileSystem::TestLock(uint64_t ino, const LockRequest& req, LockEntry* conflict) {
  if (req.type == LockType::kUnlock) return EINVAL;
  return LockTx(ino, req, false, conflict);
}

int FileSystem::LockTx(uint64_t ino, const LockRequest& req, bool apply, LockEntry* conflict) {
  if ((req.kind != LockKind::kPosix && req.kind != LockKind::kFlock) || req.start > req.end ||
      (req.kind == LockKind::kFlock && (req.start != 0 || req.end != kLockEnd)) ||
      (req.type != LockType::kUnlock && req.type != LockType::kRead &&
       req.type != LockType::kWrite)) {
    return EINVAL;
  }
  const bool taking = apply && req.type != LockType::kUnlock;
  std::lock_guard<std::mutex> one_call(lock_call_mu_[ino % lock_call_mu_.size()]);
  uint64_t me = 0;
  if (taking) {
    int err = EnsureSession(&me);
    if (err != 0) return err;
  } else {
    std::lock_guard<std::mutex> l(lock_mu_);
    me = session_;
    // Nothing held here: nothing to release (no transaction on every close).
    if (apply && (me == 0 || locked_files_.count(ino) == 0)) return 0;
  }
  for (int attempt = 0;; ++attempt) {
    bool lost = false, holds = false;
    int verdict = 0;
    LockEntry found;
    int err = RunTx([&](Txn& t) {
      lost = holds = false;
      verdict = 0;
      found = {};
      found.type = LockType::kUnlock;
      LockTable* table = nullptr;
      int e = t.LoadLocks(ino, &table);
      if (e != 0) return e;
      const LockTable before = *table;
      if (taking) {
        // A session reaped as lapsed takes no lock under its old name: its
        // existence is validated at commit.
        LockSession* mine = nullptr;
        e = t.LoadSession(me, &mine);
        if (e == ENOENT) lost = true;
        if (e != 0) return e == ENOENT ? ENOLCK : e;
      }
      const LockEntry want{me, req.owner, req.start, req.end, req.pid, req.kind, req.type};
      for (const LockEntry* c; (c = FindConflict(*table, want)) != nullptr;) {
        if (c->session != me) {
          LockSession* holder = nullptr;
          e = t.LoadSession(c->session, &holder);
          if (e == ENOENT) {  // its session lapsed: the locks are free
            DropSession(table, c->session);
            continue;
          }
          if (e != 0) return e;
        }
        found = *c;
        break;
      }
      if (apply && found.type == LockType::kUnlock) {
        ApplyLock(table, want);
      } else if (apply && req.kind == LockKind::kFlock) {
        // As Linux: a refused flock conversion has dropped the lock held.
        LockEntry drop = want;
        drop.type = LockType::kUnlock;
        ApplyLock(table, drop);
      }
      if (table->entries != before.entries) t.MarkLocks(ino);
      holds = HoldsAny(*table, me);
      if (apply && found.type != LockType::kUnlock) verdict = EAGAIN;
      return 0;
    });
    if (lost) {
      LoseSession(me);
      if (attempt > 0) return ENOLCK;
      err = EnsureSession(&me);
      if (err != 0) return err;
      continue;
    }
    if (err != 0) return err;
    if (apply) {
      std::lock_guard<std::mutex> l(lock_mu_);
      if (session_ == me && holds) {
        locked_files_.insert(ino);
      } else if (session_ == me) {
        locked_files_.erase(ino);
      }
    }
    if (conflict != nullptr && (!apply || verdict != 0)) *conflict = found;
    return verdict;
  }
}

int FileSystem::EnsureSession(uint64_t* session) {
  std::lock_guard<std::mutex> g(session_mu_);
  {
    std::lock_guard<std::mutex> l(lock_mu_);
    if (session_ != 0) {
      *session = session_;
      return 0;
    }
  }
  const uint64_t id = RandomIno();
  LockSession record;
  record.started_sec = Now().sec;
  record.pid = static_cast<uint32_t>(getpid());
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) record.host = host;
  int err = RunTx([&](Txn& t) {
    SessionList* list = nullptr;
    int e = t.LoadSessionList(&list);
    if (e != 0) return e;
    auto at = std::lower_bound(list->sessions.begin(), list->sessions.end(), id);
    if (at == list->sessions.end() || *at != id) list->sessions.insert(at, id);
    t.MarkSessionList();
    t.SaveSession(id, record);
    return 0;
  });
  if (err != 0) return err;
  std::lock_guard<std::mutex> l(lock_mu_);
  session_ = id;
  if (!beat_thread_.joinable()) beat_thread_ = std::thread([this] { BeatLoop(); });
  log_.Info("lock session started", {{"session", id}});
  *session = id;
  return 0;
}

void FileSystem::LoseSession(uint64_t session) {
  std::lock_guard<std::mutex> l(lock_mu_);
  if (session_ != session) return;
  session_ = 0;
  locked_files_.clear();
  log_.Error(
      "lock session lapsed (no beat for the lease): another client freed its locks; processes "
      "holding locks here hold them no more",
      {{"session", session}});
}

void FileSystem::BeatLoop() {
  std::unique_lock<std::mutex> l(lock_mu_);
  while (!stopping_) {
    beat_cv_.wait_for(l, std::chrono::milliseconds(options_.lock_beat_ms),
                      [&] { return stopping_; });
    if (stopping_) break;
    const uint64_t me = session_;
    l.unlock();
    if (me != 0) {
      if (Beat(me)) {
        my_beats_++;
        WatchSessions(me);
      } else {
        LoseSession(me);
      }
    }
    l.lock();
  }
}

bool FileSystem::Beat(uint64_t session) {
  int err = RunTx([&](Txn& t) {
    LockSession* s = nullptr;
    int e = t.LoadSession(session, &s);
    if (e != 0) return e;
    s->beats++;
    t.SaveSession(session, *s);
    return 0;
  });
  // A cluster failure is not a lapse: the beat is tried again (and does
  // not count, so this client reaps nobody meanwhile).
  return err != ENOENT;
}

void FileSystem::WatchSessions(uint64_t me) {
  SessionList list;
  int err = RunTx([&](Txn& t) {
    SessionList* l = nullptr;
    int e = t.LoadSessionList(&l);
    if (e == 0) list = *l;
    return e;
  });
  if (err != 0) return;
  std::map<uint64_t, Watch> next;
  for (uint64_t id : list.sessions) {
    if (id == me) continue;
    std::string data;
    Status s = client_->GetObj(SessionId(id), &data);
    LockSession record;
    if (s.code() == StatusCode::kNotFound) {
      (void)Reap(id, std::nullopt);  // listed without a record: drop the name
      continue;
    }
    if (s.ok()) s = DecodeLockSession(data, &record);
    if (!s.ok()) {
      log_.Error("cannot read a lock session", {{"session", id}, {"status", s}});
      continue;
    }
    auto it = watched_.find(id);
    Watch w = it != watched_.end() && it->second.beats == record.beats
                  ? it->second
                  : Watch{record.beats, my_beats_};
    if (my_beats_ - w.seen_at >= options_.lock_lease_beats && Reap(id, record.beats) == 0) {
      log_.Info("lock session lapsed: its locks are free",
                {{"session", id}, {"host", record.host}, {"pid", record.pid}});
      continue;
    }
    next[id] = w;
  }
  watched_ = std::move(next);
}

int FileSystem::Reap(uint64_t session, std::optional<uint64_t> beats) {
  int verdict = 0;
  int err = RunTx([&](Txn& t) {
    verdict = 0;
    SessionList* list = nullptr;
    int e = t.LoadSessionList(&list);
    if (e != 0) return e;
    LockSession* s = nullptr;
    e = t.LoadSession(session, &s);
    if (e == 0 && beats.has_value() && s->beats != *beats) {
      verdict = EAGAIN;  // it beat meanwhile: alive
      return 0;
    }
    if (e != 0 && e != ENOENT) return e;
    if (e == 0) t.DeleteSession(session);
    std::erase(list->sessions, session);
    t.MarkSessionList();
    return 0;
  });
  return err != 0 ? err : verdict;
}

void FileSystem::EndSession() {
  {
    std::lock_guard<std::mutex> l(lock_mu_);
    stopping_ = true;
  }
  beat_cv_.notify_all();
  if (beat_thread_.joinable()) beat_thread_.join();
  const uint64_t me = session_;
  if (me == 0) return;
  // Every lock of the session goes with it (tables still naming it are
  // cleaned by the next lock call that meets them).
  if (Reap(me, std::nullopt) != 0)
    log_.Error("cannot end the lock session: it lapses", {{"session", me}});
}

int File::Pwrite(uint64_t offset, std::string_view data, uint64_t* written_at) {
  if ((flags_ & O_ACCMODE) == O_RDONLY) return EBADF;
  int err = fs_->Write(ino_, &offset, data, (flags_ & O_APPEND) != 0);
  if (err == 0 && written_at != nullptr) *written_at = offset;
  return err;
}

int File::Truncate(uint64_t size) {
  if ((flags_ & O_ACCMODE) == O_RDONLY) return EINVAL;
  SetAttrArgs args;
  args.set_size = true;
  args.size = size;
  Attr a;
  return fs_->SetAttr(ino_, args, &a);
}

int File::Fallocate(int mode, uint64_t offset, uint64_t length) {
  if ((flags_ & O_ACCMODE) == O_RDONLY) return EBADF;
  return fs_->Fallocate(ino_, mode, offset, length);
}

int File::Fstat(Attr* out) {
  return fs_->GetAttr(ino_, out);
}

int File::Fsync() {
  return fs_->Fsync(ino_);
}

}  // namespace pdpm::pdfs
