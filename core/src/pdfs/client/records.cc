#include "pdfs/client/records.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstring>
#include <tuple>

#include "common/crc32c.h"

namespace pdpm::pdfs {
namespace {

constexpr uint32_t kInodeMagic = 0x49464450;        // "PDFI"
constexpr uint32_t kIndexMagic = 0x58464450;        // "PDFX"
constexpr uint32_t kBucketMagic = 0x42464450;       // "PDFB"
constexpr uint32_t kOrphanMagic = 0x4f464450;       // "PDFO"
constexpr uint32_t kVolumeMagic = 0x56464450;       // "PDFV"
constexpr uint32_t kLocksMagic = 0x4c464450;        // "PDFL"
constexpr uint32_t kSessionMagic = 0x4d464450;      // "PDFM"
constexpr uint32_t kSessionListMagic = 0x52464450;  // "PDFR"
constexpr size_t kLockEntryBytes = 8 * 4 + 4 + 1 + 1;

dsm::ObjectId MakeId(RecordKind kind, uint32_t low24, uint64_t lo) {
  return {kRecordTag | (uint64_t{static_cast<uint8_t>(kind)} << 24) | (low24 & 0xffffff), lo};
}

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(std::string_view b) { out_.append(b); }
  void Header(uint32_t magic) {
    U32(magic);
    U16(kRecordVersion);
    U16(0);
  }
  std::string Finish() {
    U32(Crc32c(out_));
    return std::move(out_);
  }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; i++) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  // Checks the trailing crc and the header; the crc is not read again.
  Status Open(uint32_t magic, const char* what) {
    what_ = what;
    if (in_.size() < 12) return Bad("too short");
    uint32_t crc = 0;
    for (int i = 0; i < 4; i++) crc |= uint32_t{uint8_t(in_[in_.size() - 4 + i])} << (8 * i);
    in_.remove_suffix(4);
    if (Crc32c(in_) != crc) return Bad("checksum mismatch");
    uint32_t m = 0;
    uint16_t version = 0, reserved = 0;
    if (!U32(&m) || !U16(&version) || !U16(&reserved)) return Bad("too short");
    if (m != magic) return Bad("bad magic");
    if (reserved != 0) return Bad("reserved bits set");
    if (version != kRecordVersion) return Bad("unknown version " + std::to_string(version));
    return Status::OK();
  }
  bool U8(uint8_t* v) { return Le(v, 1); }
  bool U16(uint16_t* v) { return Le(v, 2); }
  bool U32(uint32_t* v) { return Le(v, 4); }
  bool U64(uint64_t* v) { return Le(v, 8); }
  bool Bytes(size_t n, std::string* out) {
    if (in_.size() - pos_ < n) return false;
    out->assign(in_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  Status Done() { return pos_ == in_.size() ? Status::OK() : Bad("trailing bytes"); }
  Status Bad(const std::string& why) const {
    return Status::Corruption(std::string("pDFS ") + what_ + " record: " + why);
  }

 private:
  template <typename T>
  bool Le(T* v, size_t n) {
    if (in_.size() - pos_ < n) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) x |= uint64_t{uint8_t(in_[pos_ + i])} << (8 * i);
    pos_ += n;
    *v = static_cast<T>(x);
    return true;
  }
  std::string_view in_;
  size_t pos_ = 0;
  const char* what_ = "";
};

void PutTime(Writer* w, const Time& t) {
  w->U64(static_cast<uint64_t>(t.sec));
  w->U32(t.nsec);
}

bool GetTime(Reader* r, Time* t) {
  uint64_t sec = 0;
  if (!r->U64(&sec) || !r->U32(&t->nsec)) return false;
  t->sec = static_cast<int64_t>(sec);
  return t->nsec < 1000000000u;
}

// A record that is a list of u64: count u32, the values.
std::string EncodeU64List(uint32_t magic, const std::vector<uint64_t>& values) {
  Writer w;
  w.Header(magic);
  w.U32(static_cast<uint32_t>(values.size()));
  for (uint64_t v : values) w.U64(v);
  return w.Finish();
}

// With `sorted_ids`: nonzero values, strictly ascending.
Status DecodeU64List(std::string_view data, uint32_t magic, const char* what, bool sorted_ids,
                     std::vector<uint64_t>* out) {
  Reader r(data);
  PDPM_RETURN_IF_ERROR(r.Open(magic, what));
  uint32_t count = 0;
  if (!r.U32(&count) || count > data.size() / 8) return r.Bad("bad count");
  std::vector<uint64_t> values(count);
  for (uint32_t i = 0; i < count; i++) {
    if (!r.U64(&values[i])) return r.Bad("truncated");
    if (sorted_ids && (values[i] == 0 || (i > 0 && values[i] <= values[i - 1]))) {
      return r.Bad("not sorted");
    }
  }
  PDPM_RETURN_IF_ERROR(r.Done());
  *out = std::move(values);
  return Status::OK();
}

}  // namespace

dsm::ObjectId InodeId(uint64_t ino) {
  return MakeId(RecordKind::kInode, 0, ino);
}
dsm::ObjectId DirIndexId(uint64_t dir) {
  return MakeId(RecordKind::kDirIndex, 0, dir);
}
dsm::ObjectId DirBucketId(uint64_t dir, uint32_t bucket) {
  return MakeId(RecordKind::kDirBucket, bucket, dir);
}
dsm::ObjectId DataId(uint64_t ino, uint64_t chunk) {
  return MakeId(RecordKind::kData, static_cast<uint32_t>(chunk), ino);
}
dsm::ObjectId OrphanShardId(uint32_t shard) {
  return MakeId(RecordKind::kOrphans, 0, shard);
}
dsm::ObjectId VolumeId(uint64_t volume) {
  return MakeId(RecordKind::kVolume, 0, volume);
}
dsm::ObjectId LocksId(uint64_t ino) {
  return MakeId(RecordKind::kLocks, 0, ino);
}
dsm::ObjectId SessionId(uint64_t session) {
  return MakeId(RecordKind::kSession, 0, session);
}
dsm::ObjectId SessionListId() {
  return MakeId(RecordKind::kSessionList, 0, 0);
}

std::string EncodeInode(const Inode& n) {
  Writer w;
  w.Header(kInodeMagic);
  w.U64(n.ino);
  w.U32(n.mode);
  w.U32(n.uid);
  w.U32(n.gid);
  w.U64(n.nlink);
  w.U64(n.size);
  w.U64(n.data_end);
  w.U64(n.rdev);
  PutTime(&w, n.atime);
  PutTime(&w, n.mtime);
  PutTime(&w, n.ctime);
  w.U64(n.parent);
  w.U64(n.volume);
  w.U32(static_cast<uint32_t>(n.target.size()));
  w.Bytes(n.target);
  w.U32(static_cast<uint32_t>(n.xattrs.size()));
  for (const auto& [name, value] : n.xattrs) {
    w.U16(static_cast<uint16_t>(name.size()));
    w.U32(static_cast<uint32_t>(value.size()));
    w.Bytes(name);
    w.Bytes(value);
  }
  return w.Finish();
}

Status DecodeInode(std::string_view data, Inode* out) {
  Reader r(data);
  PDPM_RETURN_IF_ERROR(r.Open(kInodeMagic, "inode"));
  Inode n;
  uint32_t target_len = 0, xattr_count = 0;
  if (!r.U64(&n.ino) || !r.U32(&n.mode) || !r.U32(&n.uid) || !r.U32(&n.gid) || !r.U64(&n.nlink) ||
      !r.U64(&n.size) || !r.U64(&n.data_end) || !r.U64(&n.rdev) || !GetTime(&r, &n.atime) ||
      !GetTime(&r, &n.mtime) || !GetTime(&r, &n.ctime) || !r.U64(&n.parent) || !r.U64(&n.volume) ||
      !r.U32(&target_len)) {
    return r.Bad("truncated or bad field");
  }
  if (target_len > kMaxSymlinkLength || !r.Bytes(target_len, &n.target) || !r.U32(&xattr_count)) {
    return r.Bad("bad link target");
  }
  size_t total = 0;
  for (uint32_t i = 0; i < xattr_count; i++) {
    uint16_t name_len = 0;
    uint32_t value_len = 0;
    std::string name, value;
    if (!r.U16(&name_len) || !r.U32(&value_len) || name_len == 0 || name_len > kMaxXattrName ||
        value_len > kMaxXattrValue || !r.Bytes(name_len, &name) || !r.Bytes(value_len, &value)) {
      return r.Bad("bad xattr");
    }
    total += name_len + value_len;
    // Sorted by name, each once: a record has one encoding.
    if (total > kMaxXattrTotal || (!n.xattrs.empty() && n.xattrs.rbegin()->first >= name)) {
      return r.Bad("bad xattr set");
    }
    n.xattrs.emplace_hint(n.xattrs.end(), std::move(name), std::move(value));
  }
  PDPM_RETURN_IF_ERROR(r.Done());
  *out = std::move(n);
  return Status::OK();
}

uint8_t DirentType(uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return DT_REG;
    case S_IFDIR: return DT_DIR;
    case S_IFLNK: return DT_LNK;
    case S_IFIFO: return DT_FIFO;
    case S_IFSOCK: return DT_SOCK;
    case S_IFCHR: return DT_CHR;
    case S_IFBLK: return DT_BLK;
    default: return DT_UNKNOWN;
  }
}

uint64_t NameHash(std::string_view name) {
  // FNV-1a, then a finalizer spreading every bit; part of the format.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h >> 18;
}

std::string EncodeDirIndex(const DirIndex& index) {
  Writer w;
  w.Header(kIndexMagic);
  w.U32(index.next_bucket);
  w.U32(static_cast<uint32_t>(index.ranges.size()));
  for (const BucketRange& b : index.ranges) {
    w.U64(b.low);
    w.U32(b.bucket);
  }
  return w.Finish();
}

Status DecodeDirIndex(std::string_view data, DirIndex* out) {
  Reader r(data);
  PDPM_RETURN_IF_ERROR(r.Open(kIndexMagic, "directory index"));
  DirIndex index;
  uint32_t count = 0;
  if (!r.U32(&index.next_bucket) || !r.U32(&count) || count == 0 || count > kMaxBuckets ||
      index.next_bucket > kMaxBuckets) {
    return r.Bad("bad header");
  }
  index.ranges.resize(count);
  for (uint32_t i = 0; i < count; i++) {
    BucketRange& b = index.ranges[i];
    if (!r.U64(&b.low) || !r.U32(&b.bucket)) return r.Bad("truncated");
    if (b.bucket >= index.next_bucket) return r.Bad("bucket number out of range");
    if (i == 0 ? b.low != 0 : b.low <= index.ranges[i - 1].low) return r.Bad("ranges not sorted");
  }
  PDPM_RETURN_IF_ERROR(r.Done());
  *out = std::move(index);
  return Status::OK();
}

size_t EncodedEntrySize(const DirEntry& e) {
  return 8 + 8 + 1 + 1 + e.name.size();
}

std::string EncodeDirBucket(const DirBucket& bucket) {
  Writer w;
  w.Header(kBucketMagic);
  w.U32(static_cast<uint32_t>(bucket.entries.size()));
  for (const DirEntry& e : bucket.entries) {
    w.U64(e.key);
    w.U64(e.ino);
    w.U8(e.type);
    w.U8(static_cast<uint8_t>(e.name.size()));
    w.Bytes(e.name);
  }
  return w.Finish();
}

Status DecodeDirBucket(std::string_view data, DirBucket* out) {
  Reader r(data);
  PDPM_RETURN_IF_ERROR(r.Open(kBucketMagic, "directory bucket"));
  DirBucket bucket;
  uint32_t count = 0;
  if (!r.U32(&count) || count > data.size() / 18) return r.Bad("bad count");
  bucket.entries.resize(count);
  for (uint32_t i = 0; i < count; i++) {
    DirEntry& e = bucket.entries[i];
    uint8_t len = 0;
    if (!r.U64(&e.key) || !r.U64(&e.ino) || !r.U8(&e.type) || !r.U8(&len) || len == 0 ||
        !r.Bytes(len, &e.name)) {
      return r.Bad("truncated entry");
    }
    if (i > 0 && e.key <= bucket.entries[i - 1].key) return r.Bad("keys not sorted");
    if (e.name.find('/') != std::string::npos || e.name.find('\0') != std::string::npos ||
        (e.key >> kKeySeqBits) != NameHash(e.name)) {
      return r.Bad("bad name");
    }
  }
  PDPM_RETURN_IF_ERROR(r.Done());
  *out = std::move(bucket);
  return Status::OK();
}

std::string EncodeOrphanList(const OrphanList& list) {
  return EncodeU64List(kOrphanMagic, list.inos);
}

Status DecodeOrphanList(std::string_view data, OrphanList* out) {
  return DecodeU64List(data, kOrphanMagic, "orphan list", false, &out->inos);
}

std::string EncodeVolumeQuota(const VolumeQuota& q) {
  Writer w;
  w.Header(kVolumeMagic);
  w.U64(q.byte_limit);
  w.U64(q.inode_limit);
  w.U64(q.bytes_used);
  w.U64(q.inodes_used);
  return w.Finish();
}

Status DecodeVolumeQuota(std::string_view data, VolumeQuota* out) {
  Reader r(data);
  PDPM_RETURN_IF_ERROR(r.Open(kVolumeMagic, "volume"));
  VolumeQuota q;
  if (!r.U64(&q.byte_limit) || !r.U64(&q.inode_limit) || !r.U64(&q.bytes_used) ||
      !r.U64(&q.inodes_used)) {
    return r.Bad("truncated");
  }
  PDPM_RETURN_IF_ERROR(r.Done());
  *out = q;
  return Status::OK();
}

std::string EncodeLockTable(const LockTable& table) {
  Writer w;
  w.Header(kLocksMagic);
  w.U32(static_cast<uint32_t>(table.entries.size()));
  for (const LockEntry& e : table.entries) {
    w.U64(e.session);
    w.U64(e.owner);
    w.U64(e.start);
    w.U64(e.end);
    w.U32(e.pid);
    w.U8(static_cast<uint8_t>(e.kind));
    w.U8(static_cast<uint8_t>(e.type));
  }
  return w.Finish();
}

Status DecodeLockTable(std::string_view data, LockTable* out) {
  Reader r(data);
  PDPM_RETURN_IF_ERROR(r.Open(kLocksMagic, "lock table"));
  LockTable table;
  uint32_t count = 0;
  if (!r.U32(&count) || count == 0 || count > data.size() / kLockEntryBytes) {
    return r.Bad("bad count");  // an empty table is no object
  }
  table.entries.resize(count);
  for (uint32_t i = 0; i < count; i++) {
    LockEntry& e = table.entries[i];
    uint8_t kind = 0, type = 0;
    if (!r.U64(&e.session) || !r.U64(&e.owner) || !r.U64(&e.start) || !r.U64(&e.end) ||
        !r.U32(&e.pid) || !r.U8(&kind) || !r.U8(&type)) {
      return r.Bad("truncated entry");
    }
    e.kind = static_cast<LockKind>(kind);
    e.type = static_cast<LockType>(type);
    if ((e.kind != LockKind::kPosix && e.kind != LockKind::kFlock) ||
        (e.type != LockType::kRead && e.type != LockType::kWrite) || e.session == 0 ||
        e.start > e.end || (e.kind == LockKind::kFlock && (e.start != 0 || e.end != kLockEnd))) {
      return r.Bad("bad entry");
    }
    if (i == 0) continue;
    const LockEntry& p = table.entries[i - 1];
    auto holder = [](const LockEntry& x) { return std::tuple(x.kind, x.session, x.owner); };
    if (holder(p) > holder(e) || (holder(p) == holder(e) && p.end >= e.start)) {
      return r.Bad("entries not sorted or overlapping");
    }
    if (holder(p) == holder(e) && p.type == e.type && p.end + 1 == e.start) {
      return r.Bad("touching ranges of one type not merged");
    }
  }
  PDPM_RETURN_IF_ERROR(r.Done());
  *out = std::move(table);
  return Status::OK();
}

std::string EncodeLockSession(const LockSession& s) {
  Writer w;
  w.Header(kSessionMagic);
  w.U64(s.beats);
  w.U64(static_cast<uint64_t>(s.started_sec));
  w.U32(s.pid);
  w.U8(static_cast<uint8_t>(s.host.size()));
  w.Bytes(s.host);
  return w.Finish();
}

Status DecodeLockSession(std::string_view data, LockSession* out) {
  Reader r(data);
  PDPM_RETURN_IF_ERROR(r.Open(kSessionMagic, "lock session"));
  LockSession s;
  uint64_t started = 0;
  uint8_t host_len = 0;
  if (!r.U64(&s.beats) || !r.U64(&started) || !r.U32(&s.pid) || !r.U8(&host_len) ||
      !r.Bytes(host_len, &s.host)) {
    return r.Bad("truncated");
  }
  s.started_sec = static_cast<int64_t>(started);
  PDPM_RETURN_IF_ERROR(r.Done());
  *out = std::move(s);
  return Status::OK();
}

std::string EncodeSessionList(const SessionList& list) {
  return EncodeU64List(kSessionListMagic, list.sessions);
}

Status DecodeSessionList(std::string_view data, SessionList* out) {
  return DecodeU64List(data, kSessionListMagic, "session list", true, &out->sessions);
}

}  // namespace pdpm::pdfs
