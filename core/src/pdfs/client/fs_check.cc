#include "pdfs/client/fs_check.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <set>
#include <string_view>

namespace pdpm::pdfs {
namespace {

constexpr uint32_t kListPage = 2048;

uint8_t KindOf(const dsm::ObjectId& id) {
  return static_cast<uint8_t>(id.hi >> 24);
}

uint32_t Low24(const dsm::ObjectId& id) {
  return static_cast<uint32_t>(id.hi & 0xffffff);
}

std::string InoText(uint64_t ino) {
  return "inode " + std::to_string(ino);
}

// Every pDFS record of the cluster, by kind.
struct Records {
  std::set<uint64_t> inodes;
  std::set<uint64_t> indexes;                      // directories with an index object
  std::map<uint64_t, std::set<uint32_t>> buckets;  // dir -> bucket objects
  std::map<uint64_t, std::set<uint64_t>> chunks;   // ino -> chunk objects
  std::set<uint32_t> orphan_shards;
  std::set<uint64_t> quotas;
  std::set<uint64_t> lock_tables;  // inos
  std::set<uint64_t> sessions;
  bool session_list = false;
  std::vector<dsm::ObjectId> foreign;  // a kind no version-1 record has
};

Status ListRecords(client::Client* client, Records* out, uint64_t* count) {
  const uint32_t tables = client->table_count();
  const uint32_t tag = static_cast<uint32_t>(kRecordTag >> 32);
  for (uint32_t table = 1; table <= tables; ++table) {
    dsm::ObjectId start{kRecordTag, 0};
    std::vector<dsm::ObjectId> page;
    do {
      PDPM_RETURN_IF_ERROR(
          client->ListObj(table, tag, start, kListPage, &page)
              .WithContext("list the pDFS records of table " + std::to_string(table)));
      for (const dsm::ObjectId& id : page) {
        ++*count;
        // A record kind keyed by id.lo alone (low 24 bits 0).
        auto keyed = [&](std::set<uint64_t>* into) {
          if (Low24(id) == 0) {
            into->insert(id.lo);
          } else {
            out->foreign.push_back(id);
          }
        };
        switch (static_cast<RecordKind>(KindOf(id))) {
          case RecordKind::kInode: keyed(&out->inodes); break;
          case RecordKind::kDirIndex: keyed(&out->indexes); break;
          case RecordKind::kDirBucket: out->buckets[id.lo].insert(Low24(id)); break;
          case RecordKind::kData: out->chunks[id.lo].insert(Low24(id)); break;
          case RecordKind::kOrphans:
            if (Low24(id) == 0 && id.lo < kOrphanShards) {
              out->orphan_shards.insert(static_cast<uint32_t>(id.lo));
            } else {
              out->foreign.push_back(id);
            }
            break;
          case RecordKind::kVolume: keyed(&out->quotas); break;
          case RecordKind::kLocks: keyed(&out->lock_tables); break;
          case RecordKind::kSession: keyed(&out->sessions); break;
          case RecordKind::kSessionList:
            if (Low24(id) == 0 && id.lo == 0) {
              out->session_list = true;
            } else {
              out->foreign.push_back(id);
            }
            break;
          default: out->foreign.push_back(id);
        }
      }
      if (!page.empty()) {
        start = page.back();
        if (++start.lo == 0) ++start.hi;
      }
    } while (page.size() == kListPage);
  }
  return Status::OK();
}

// Reads and decodes one record; *present false when it is gone.
template <typename T>
Status ReadRecord(client::Client* client, const dsm::ObjectId& id,
                  Status (*decode)(std::string_view, T*), T* out, bool* present) {
  std::string data;
  Status s = client->GetObj(id, &data);
  *present = s.code() != StatusCode::kNotFound;
  if (!*present) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  return decode(data, out);
}

class Checker {
 public:
  Checker(client::Client* client, FsCheckReport* report) : client_(client), r_(report) {}

  Status Run() {
    PDPM_RETURN_IF_ERROR(ListRecords(client_, &records_, &r_->records));
    for (const dsm::ObjectId& id : records_.foreign) {
      Violation("object " + std::to_string(id.hi) + ":" + std::to_string(id.lo) +
                " has the pDFS tag but no pDFS record kind");
    }
    PDPM_RETURN_IF_ERROR(LoadInodes());
    PDPM_RETURN_IF_ERROR(LoadOrphans());
    PDPM_RETURN_IF_ERROR(LoadDirectories());
    WalkTree();
    CheckInodes();
    CheckLeakedRecords();
    PDPM_RETURN_IF_ERROR(CheckLocks());
    PDPM_RETURN_IF_ERROR(CheckQuotas());
    r_->inodes = inodes_.size();
    r_->chunks = 0;
    for (const auto& [ino, chunks] : records_.chunks) r_->chunks += chunks.size();
    return Status::OK();
  }

 private:
  void Violation(std::string text) { r_->violations.push_back(std::move(text)); }
  void Repairable(std::string text) { r_->repairable.push_back(std::move(text)); }

  Status LoadInodes() {
    for (uint64_t ino : records_.inodes) {
      Inode n;
      bool present = false;
      Status s = ReadRecord(client_, InodeId(ino), DecodeInode, &n, &present);
      if (s.code() == StatusCode::kCorruption) {
        Violation(InoText(ino) + ": damaged record (" + s.ToString() + ")");
        continue;
      }
      PDPM_RETURN_IF_ERROR(s.WithContext("read " + InoText(ino)));
      if (!present) continue;  // removed since the listing
      if (n.ino != ino) {
        Violation(InoText(ino) + ": the record says inode " + std::to_string(n.ino));
        continue;
      }
      inodes_.emplace(ino, std::move(n));
    }
    return Status::OK();
  }

  Status LoadOrphans() {
    for (uint32_t shard : records_.orphan_shards) {
      OrphanList list;
      bool present = false;
      Status s = ReadRecord(client_, OrphanShardId(shard), DecodeOrphanList, &list, &present);
      if (s.code() == StatusCode::kCorruption) {
        Violation("orphan list " + std::to_string(shard) + ": damaged (" + s.ToString() + ")");
        continue;
      }
      PDPM_RETURN_IF_ERROR(s.WithContext("read orphan list " + std::to_string(shard)));
      for (uint64_t ino : list.inos) {
        if (ino % kOrphanShards != shard) {
          Violation("orphan list " + std::to_string(shard) + " names " + InoText(ino) +
                    " of another shard");
        }
        orphans_.insert(ino);
      }
    }
    return Status::OK();
  }

  // Every directory's entries, from its index and buckets.
  Status LoadDirectories() {
    for (const auto& [ino, n] : inodes_) {
      if (!S_ISDIR(n.mode)) continue;
      ++r_->directories;
      DirIndex index;
      bool present = false;
      if (records_.indexes.count(ino) != 0) {
        Status s = ReadRecord(client_, DirIndexId(ino), DecodeDirIndex, &index, &present);
        if (s.code() == StatusCode::kCorruption) {
          Violation("directory " + std::to_string(ino) + ": damaged index (" + s.ToString() + ")");
          damaged_dirs_.insert(ino);
          continue;
        }
        PDPM_RETURN_IF_ERROR(s.WithContext("read the index of directory " + std::to_string(ino)));
      }
      if (!present) index.ranges = {{0, 0}};  // no object: one empty bucket 0
      std::vector<DirEntry>& entries = entries_[ino];
      std::set<std::string_view> names;
      std::set<uint32_t> used;
      for (size_t i = 0; i < index.ranges.size(); ++i) {
        const BucketRange& range = index.ranges[i];
        used.insert(range.bucket);
        const uint64_t high = i + 1 < index.ranges.size() ? index.ranges[i + 1].low : ~0ull;
        DirBucket bucket;
        bool exists = false;
        Status s =
            ReadRecord(client_, DirBucketId(ino, range.bucket), DecodeDirBucket, &bucket, &exists);
        if (s.code() == StatusCode::kCorruption) {
          Violation("directory " + std::to_string(ino) + ": damaged bucket " +
                    std::to_string(range.bucket) + " (" + s.ToString() + ")");
          damaged_dirs_.insert(ino);
          continue;
        }
        PDPM_RETURN_IF_ERROR(s.WithContext("read a bucket of directory " + std::to_string(ino)));
        for (DirEntry& e : bucket.entries) {
          const std::string where =
              "directory " + std::to_string(ino) + " entry \"" + e.name + "\"";
          if ((e.key >> kKeySeqBits) != NameHash(e.name)) {
            Violation(where + ": its key does not hash its name");
          }
          if (e.key < range.low || e.key >= high) {
            Violation(where + ": outside its bucket's key range");
          }
          entries.push_back(std::move(e));
        }
      }
      for (const DirEntry& e : entries) {
        if (!names.insert(e.name).second) {
          Violation("directory " + std::to_string(ino) + ": two entries \"" + e.name + "\"");
        }
      }
      for (uint32_t b : records_.buckets[ino]) {
        if (used.count(b) == 0) {
          Repairable("directory " + std::to_string(ino) + ": bucket " + std::to_string(b) +
                     " is not in its index (leaked)");
          r_->objects_to_delete.push_back(DirBucketId(ino, b));
        }
      }
    }
    return Status::OK();
  }

  // From the root: every name, the volume each inode belongs to, the
  // directories reached.
  void WalkTree() {
    auto root = inodes_.find(kRootIno);
    if (root == inodes_.end() || !S_ISDIR(root->second.mode)) {
      Violation("the root directory (inode 1) is missing or not a directory");
      return;
    }
    if (root->second.parent != kRootIno) Violation("the root's parent is not the root");
    if (root->second.volume != 0) Violation("the root counts against a volume");
    reached_dirs_.insert(kRootIno);
    std::deque<uint64_t> queue{kRootIno};
    while (!queue.empty()) {
      const uint64_t dir = queue.front();
      queue.pop_front();
      const Inode& d = inodes_.at(dir);
      uint64_t subdirs = 0;
      const std::vector<DirEntry>& entries = entries_[dir];
      for (const DirEntry& e : entries) {
        const std::string where = "directory " + std::to_string(dir) + " entry \"" + e.name + "\"";
        auto it = inodes_.find(e.ino);
        if (it == inodes_.end()) {
          Violation(where + " names " + InoText(e.ino) + ", which does not exist");
          dangling_.insert(e.ino);
          continue;
        }
        const Inode& child = it->second;
        if (e.type != DirentType(child.mode))
          Violation(where + ": its type differs from the inode's");
        // The volume field matters where a quota counts it: directories of
        // the root without one exchange entries freely, keeping theirs.
        const uint64_t volume = dir != kRootIno ? d.volume : S_ISDIR(child.mode) ? child.ino : 0;
        if (child.volume != volume &&
            (records_.quotas.count(volume) != 0 || records_.quotas.count(child.volume) != 0)) {
          Violation(InoText(child.ino) + " counts against volume " + std::to_string(child.volume) +
                    ", its place in the tree says " + std::to_string(volume));
        }
        ++names_[child.ino];
        if (!S_ISDIR(child.mode)) continue;
        ++subdirs;
        if (!reached_dirs_.insert(child.ino).second) {
          Violation("directory " + std::to_string(child.ino) + " has more than one name (" + where +
                    ")");
          continue;
        }
        if (child.parent != dir) {
          Violation("directory " + std::to_string(child.ino) + ": its parent pointer says " +
                    std::to_string(child.parent) + ", its entry is in " + std::to_string(dir));
        }
        queue.push_back(child.ino);
      }
      if (damaged_dirs_.count(dir) != 0) continue;  // its counts cannot be known
      if (d.size != entries.size()) {
        Violation("directory " + std::to_string(dir) + ": size " + std::to_string(d.size) +
                  ", entries " + std::to_string(entries.size()));
      }
      if (d.nlink != 2 + subdirs) {
        Violation("directory " + std::to_string(dir) + ": nlink " + std::to_string(d.nlink) +
                  ", 2 + " + std::to_string(subdirs) + " subdirectories");
      }
    }
  }

  void CheckInodes() {
    for (const auto& [ino, n] : inodes_) {
      const bool orphan_listed = orphans_.count(ino) != 0;
      auto named = names_.find(ino);
      if (S_ISDIR(n.mode)) {
        if (reached_dirs_.count(ino) == 0) {
          Violation("directory " + std::to_string(ino) + " is not reachable from the root");
        }
        if (orphan_listed) Violation("directory " + std::to_string(ino) + " is on an orphan list");
      } else if (named != names_.end()) {
        if (n.nlink != named->second) {
          Violation(InoText(ino) + ": nlink " + std::to_string(n.nlink) + ", names " +
                    std::to_string(named->second));
        }
        if (orphan_listed) Violation(InoText(ino) + " has a name and is on an orphan list");
      } else if (n.nlink != 0) {
        Violation(InoText(ino) + ": nlink " + std::to_string(n.nlink) +
                  " but no directory names it");
      } else {
        Repairable(InoText(ino) + ": an orphan (no name, " +
                   (orphan_listed ? "on its orphan list" : "not even on an orphan list") +
                   "); its data and inode are to be freed");
        r_->inodes_to_purge.push_back(ino);
      }
      if (n.volume != 0) used_[n.volume].inodes += (n.nlink != 0 && n.ino != n.volume) ? 1 : 0;
      if (n.volume != 0 && n.nlink != 0 && (S_ISREG(n.mode) || S_ISLNK(n.mode))) {
        used_[n.volume].bytes += n.size;
      }
    }
    for (uint64_t ino : orphans_) {
      if (inodes_.count(ino) == 0) {
        Repairable("an orphan list names " + InoText(ino) + ", which is gone");
        r_->inodes_to_purge.push_back(ino);
      }
    }
  }

  void CheckLeakedRecords() {
    for (const auto& [ino, chunks] : records_.chunks) {
      auto it = inodes_.find(ino);
      const Inode* n = it == inodes_.end() ? nullptr : &it->second;
      if (n == nullptr && dangling_.count(ino) != 0) continue;  // kept for a manual repair
      // A file's chunks below data_end are its (an orphan's purge frees
      // those); any other is leaked.
      const uint64_t end_chunk =
          n != nullptr && S_ISREG(n->mode) ? (n->data_end + kChunkSize - 1) / kChunkSize : 0;
      for (uint32_t chunk : chunks) {
        if (chunk < end_chunk) continue;
        Repairable("data chunk " + std::to_string(chunk) + " of " + InoText(ino) +
                   (n == nullptr        ? ", which does not exist"
                    : !S_ISREG(n->mode) ? ", which is not a regular file"
                                        : ", past its data_end") +
                   " (leaked)");
        r_->objects_to_delete.push_back(DataId(ino, chunk));
      }
    }
    auto leaked_dir_record = [&](uint64_t dir) {
      auto it = inodes_.find(dir);
      return it == inodes_.end() || !S_ISDIR(it->second.mode);
    };
    for (uint64_t dir : records_.indexes) {
      if (!leaked_dir_record(dir)) continue;
      Repairable("the directory index of " + InoText(dir) + ", not a directory (leaked)");
      r_->objects_to_delete.push_back(DirIndexId(dir));
    }
    for (const auto& [dir, buckets] : records_.buckets) {
      if (!leaked_dir_record(dir)) continue;
      for (uint32_t b : buckets) {
        Repairable("directory bucket " + std::to_string(b) + " of " + InoText(dir) +
                   ", not a directory (leaked)");
        r_->objects_to_delete.push_back(DirBucketId(dir, b));
      }
    }
  }

  // Lock tables and sessions decode; a lock table belongs to an inode (a
  // file removed by another client while a dead client's lock stayed in
  // its table leaves one: leaked). Sessions are not judged: whether one is
  // alive only its beats tell, and a live client reaps a lapsed one.
  Status CheckLocks() {
    for (uint64_t ino : records_.lock_tables) {
      LockTable t;
      bool present = false;
      Status s = ReadRecord(client_, LocksId(ino), DecodeLockTable, &t, &present);
      if (s.code() == StatusCode::kCorruption) {
        Violation("the lock table of " + InoText(ino) + " is damaged (" + s.ToString() + ")");
        continue;
      }
      PDPM_RETURN_IF_ERROR(s.WithContext("read the lock table of " + InoText(ino)));
      if (present && inodes_.count(ino) == 0) {
        Repairable("the lock table of " + InoText(ino) + ", which does not exist (leaked)");
        r_->objects_to_delete.push_back(LocksId(ino));
      }
    }
    for (uint64_t id : records_.sessions) {
      LockSession session;
      bool present = false;
      Status s = ReadRecord(client_, SessionId(id), DecodeLockSession, &session, &present);
      if (s.code() == StatusCode::kCorruption) {
        Violation("lock session " + std::to_string(id) + " is damaged (" + s.ToString() + ")");
        continue;
      }
      PDPM_RETURN_IF_ERROR(s.WithContext("read lock session " + std::to_string(id)));
    }
    if (records_.session_list) {
      SessionList list;
      bool present = false;
      Status s = ReadRecord(client_, SessionListId(), DecodeSessionList, &list, &present);
      if (s.code() == StatusCode::kCorruption) {
        Violation("the lock session list is damaged (" + s.ToString() + ")");
      } else {
        PDPM_RETURN_IF_ERROR(s.WithContext("read the lock session list"));
      }
    }
    return Status::OK();
  }

  Status CheckQuotas() {
    for (uint64_t volume : records_.quotas) {
      auto it = inodes_.find(volume);
      if (it == inodes_.end() || !S_ISDIR(it->second.mode) || it->second.parent != kRootIno ||
          it->second.volume != volume) {
        Repairable("the quota record of " + InoText(volume) +
                   ", not a volume of the root (leaked)");
        r_->objects_to_delete.push_back(VolumeId(volume));
        continue;
      }
      VolumeQuota q;
      bool present = false;
      Status s = ReadRecord(client_, VolumeId(volume), DecodeVolumeQuota, &q, &present);
      if (s.code() == StatusCode::kCorruption) {
        Violation("volume " + std::to_string(volume) + ": damaged quota (" + s.ToString() + ")");
        continue;
      }
      PDPM_RETURN_IF_ERROR(s.WithContext("read the quota of volume " + std::to_string(volume)));
      if (!present) continue;
      ++r_->volumes;
      const Usage& u = used_[volume];
      if (q.bytes_used != u.bytes || q.inodes_used != u.inodes) {
        Violation("volume " + std::to_string(volume) + ": the quota says " +
                  std::to_string(q.bytes_used) + " bytes and " + std::to_string(q.inodes_used) +
                  " inodes used, its inodes use " + std::to_string(u.bytes) + " bytes and " +
                  std::to_string(u.inodes));
        q.bytes_used = u.bytes;
        q.inodes_used = u.inodes;
        r_->quotas_to_set[volume] = q;
      }
    }
    return Status::OK();
  }

  struct Usage {
    uint64_t bytes = 0;
    uint64_t inodes = 0;
  };

  client::Client* const client_;
  FsCheckReport* const r_;
  Records records_;
  std::map<uint64_t, Inode> inodes_;
  std::set<uint64_t> orphans_;
  std::map<uint64_t, std::vector<DirEntry>> entries_;
  std::set<uint64_t> damaged_dirs_;
  std::set<uint64_t> reached_dirs_;
  std::set<uint64_t> dangling_;         // named by an entry, absent
  std::map<uint64_t, uint64_t> names_;  // non-directory ino -> entries naming it
  std::map<uint64_t, Usage> used_;      // volume -> what its inodes use
};

}  // namespace

std::string FsCheckReport::ToString() const {
  std::string out = "pdfs: " + std::to_string(records) + " records, " + std::to_string(inodes) +
                    " inodes, " + std::to_string(directories) + " directories, " +
                    std::to_string(chunks) + " data chunks, " + std::to_string(volumes) +
                    " volumes with quotas\n";
  for (const std::string& v : violations) out += "  violation: " + v + "\n";
  for (const std::string& r : repairable) out += "  repairable: " + r + "\n";
  return out;
}

Status CheckFileSystem(client::Client* client, FsCheckReport* report) {
  *report = FsCheckReport{};
  return Checker(client, report).Run();
}

Status RepairFileSystem(client::Client* client, FileSystem* fs, const FsCheckReport& report) {
  for (uint64_t ino : report.inodes_to_purge) {
    if (int err = fs->Purge(ino); err != 0) {
      return Status::FromErrno("purge " + InoText(ino), err);
    }
  }
  for (const dsm::ObjectId& id : report.objects_to_delete) {
    Status s = client->DelObj(id);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s.WithContext("free a leaked object");
  }
  for (const auto& [volume, quota] : report.quotas_to_set) {
    if (int err = fs->SetVolumeUsage(volume, quota.bytes_used, quota.inodes_used); err != 0) {
      return Status::FromErrno("set the usage of volume " + std::to_string(volume), err);
    }
  }
  return Status::OK();
}

}  // namespace pdpm::pdfs
