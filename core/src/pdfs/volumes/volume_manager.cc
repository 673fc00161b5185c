#include "pdfs/volumes/volume_manager.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <utility>

namespace pdpm::pdfs {
namespace {

// Names of the root that are not volumes users made: a clone in progress.
constexpr std::string_view kReservedPrefix = ".pdpm-";
constexpr std::string_view kClonePrefix = ".pdpm-clone-";
// Page tokens: this prefix, then the last name listed.
constexpr std::string_view kPageTokenPrefix = "after:";
// Bytes copied per read/write of a clone.
constexpr uint64_t kCopyBlock = 1 << 20;

bool IsReserved(std::string_view name) {
  return name.substr(0, kReservedPrefix.size()) == kReservedPrefix;
}

// The errno of a FileSystem call as a Status about `what`.
Status FsStatus(const std::string& what, int err) {
  switch (err) {
    case 0: return Status::OK();
    case ENOENT: return Status::NotFound(what + ": no such volume");
    case EEXIST: return Status::AlreadyExists(what + ": it exists");
    case ENOTDIR: return Status::FailedPrecondition(what + ": not a volume (not a directory)");
    case ENODATA: return Status::FailedPrecondition(what + ": not a volume (no quota)");
    case EDQUOT: return Status::ResourceExhausted(what + ": the volume's quota is full");
    case ENOSPC: return Status::ResourceExhausted(what + ": the cluster is full");
    case EINVAL: return Status::InvalidArgument(what + ": invalid argument");
    case ENAMETOOLONG: return Status::InvalidArgument(what + ": name too long");
    default: return Status::FromErrno(what, err);
  }
}

std::string Describe(const VolumeQuota& q) {
  return "byte quota " + std::to_string(q.byte_limit) + ", inode quota " +
         std::to_string(q.inode_limit);
}

// A fixed-width hex digest of `name` (FNV-1a 64): the hidden name of its
// clone in progress fits the 255-byte limit whatever the name's length.
std::string NameDigest(std::string_view name) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

Status CheckVolumeName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos || name.size() > kMaxNameLength) {
    return Status::InvalidArgument("bad volume name \"" + std::string(name) +
                                   "\": one path component of at most 255 bytes");
  }
  if (IsReserved(name)) {
    return Status::InvalidArgument("bad volume name \"" + std::string(name) +
                                   "\": names starting " + std::string(kReservedPrefix) +
                                   " are reserved");
  }
  return Status::OK();
}

Status VolumeManager::Open(const client::ClientOptions& options,
                           std::unique_ptr<VolumeManager>* out) {
  std::unique_ptr<client::Client> client;
  PDPM_RETURN_IF_ERROR(
      client::Client::Open(options, &client).WithContext("cannot connect to the cluster"));
  std::unique_ptr<FileSystem> fs;
  PDPM_RETURN_IF_ERROR(FileSystem::Open(client.get(), {}, &fs));
  auto monitor = std::make_unique<monitor::MonitorClient>(
      options.monitor,
      monitor::MonitorClientOptions{options.cluster_secret,
                                    std::chrono::milliseconds(options.monitor_timeout_ms)});
  out->reset(new VolumeManager(std::move(client), std::move(fs), std::move(monitor)));
  return Status::OK();
}

VolumeManager::VolumeManager(std::unique_ptr<client::Client> client, std::unique_ptr<FileSystem> fs,
                             std::unique_ptr<monitor::MonitorClient> monitor)
    : client_(std::move(client)), fs_(std::move(fs)), monitor_(std::move(monitor)) {}

// The file system goes before the client it uses.
VolumeManager::~VolumeManager() {
  fs_.reset();
}

Status VolumeManager::Stat(std::string_view name, VolumeInfo* out) {
  PDPM_RETURN_IF_ERROR(CheckVolumeName(name));
  const std::string what = "volume " + std::string(name);
  PDPM_RETURN_IF_ERROR(FsStatus(what, fs_->StatVolume(name, out)));
  if (!out->has_quota) return FsStatus(what, ENODATA);
  return Status::OK();
}

Status VolumeManager::Create(std::string_view name, uint64_t byte_limit, uint64_t inode_limit,
                             const Owner& owner, std::string_view source, VolumeInfo* out) {
  PDPM_RETURN_IF_ERROR(CheckVolumeName(name));
  const std::string what = "create volume " + std::string(name);
  VolumeInfo source_info;
  if (!source.empty()) {
    PDPM_RETURN_IF_ERROR(Stat(source, &source_info).WithContext("clone source"));
    if ((byte_limit != 0 && source_info.quota.bytes_used > byte_limit) ||
        (inode_limit != 0 && source_info.quota.inodes_used > inode_limit)) {
      return Status::ResourceExhausted(
          what + ": the source volume " + std::string(source) + " uses " +
          std::to_string(source_info.quota.bytes_used) + " bytes and " +
          std::to_string(source_info.quota.inodes_used) + " inodes, more than the new quotas");
    }
  }
  const std::string made_as =
      source.empty() ? std::string(name) : std::string(kClonePrefix) + NameDigest(name);
  if (!source.empty()) {
    // A clone a crashed or failed call left half made starts again.
    int err = fs_->DeleteVolume(made_as);
    if (err != 0 && err != ENOENT) return FsStatus(what + ": remove an unfinished clone", err);
  }
  int err = fs_->CreateVolume(made_as, byte_limit, inode_limit, owner, out);
  if (err == 0 && !source.empty()) {
    std::map<uint64_t, uint64_t> copied;
    Status s = CopyTree(source_info.ino, out->ino, &copied);
    if (s.ok()) {
      err = fs_->Rename(kRootIno, made_as, kRootIno, name, RENAME_NOREPLACE);
      if (err == 0) err = fs_->StatVolume(name, out);
      s = FsStatus(what, err);
    }
    if (!s.ok()) {
      fs_->DeleteVolume(made_as);  // best effort; the next try removes it too
      if (s.code() != StatusCode::kAlreadyExists)
        return s.WithContext(what + " from " + std::string(source));
      err = EEXIST;
    }
  }
  if (err == EEXIST) {
    // Idempotent: the same volume asked for again.
    VolumeInfo existing;
    Status s = Stat(name, &existing);
    if (s.code() == StatusCode::kFailedPrecondition) {
      return Status::AlreadyExists(what + ": the name is taken by something that is not a volume");
    }
    PDPM_RETURN_IF_ERROR(s);
    if (existing.quota.byte_limit != byte_limit || existing.quota.inode_limit != inode_limit) {
      return Status::AlreadyExists(what + ": it exists with " + Describe(existing.quota) +
                                   ", not " + Describe({byte_limit, inode_limit, 0, 0}));
    }
    *out = existing;
    return Status::OK();
  }
  PDPM_RETURN_IF_ERROR(FsStatus(what, err));
  out->name = std::string(name);
  return Status::OK();
}

Status VolumeManager::Delete(std::string_view name) {
  VolumeInfo v;
  Status s = Stat(name, &v);
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  const int err = fs_->DeleteVolume(name);
  return err == ENOENT ? Status::OK() : FsStatus("delete volume " + std::string(name), err);
}

Status VolumeManager::Resize(std::string_view name, uint64_t byte_limit, uint64_t inode_limit,
                             VolumeInfo* out) {
  PDPM_RETURN_IF_ERROR(CheckVolumeName(name));
  const std::string what = "resize volume " + std::string(name);
  const int err = fs_->ResizeVolume(name, byte_limit, inode_limit, out);
  if (err == EDQUOT) {
    VolumeInfo now;
    PDPM_RETURN_IF_ERROR(Stat(name, &now));
    return Status::FailedPrecondition(what + ": it uses " + std::to_string(now.quota.bytes_used) +
                                      " bytes and " + std::to_string(now.quota.inodes_used) +
                                      " inodes, more than " +
                                      Describe({byte_limit, inode_limit, 0, 0}) +
                                      " allows (a quota cannot shrink below the use)");
  }
  return FsStatus(what, err);
}

Status VolumeManager::List(std::string_view page_token, size_t max, std::vector<VolumeInfo>* out,
                           std::string* next_page_token) {
  out->clear();
  next_page_token->clear();
  std::string after;
  if (!page_token.empty()) {
    if (page_token.substr(0, kPageTokenPrefix.size()) != kPageTokenPrefix ||
        !CheckVolumeName(page_token.substr(kPageTokenPrefix.size())).ok()) {
      return Status::InvalidArgument("bad page token \"" + std::string(page_token) +
                                     "\": not one this service made");
    }
    after = std::string(page_token.substr(kPageTokenPrefix.size()));
  }
  std::vector<VolumeInfo> all;
  PDPM_RETURN_IF_ERROR(FsStatus("list the volumes", fs_->ListVolumes(&all)));
  std::erase_if(all, [&](const VolumeInfo& v) {
    return !v.has_quota || IsReserved(v.name) || (!after.empty() && v.name <= after);
  });
  std::sort(all.begin(), all.end(),
            [](const VolumeInfo& a, const VolumeInfo& b) { return a.name < b.name; });
  if (max != 0 && all.size() > max) {
    all.resize(max);
    *next_page_token = std::string(kPageTokenPrefix) + all.back().name;
  }
  *out = std::move(all);
  return Status::OK();
}

Status VolumeManager::Capacity(VolumeCapacity* out) {
  v1::ClusterStatus status;
  PDPM_RETURN_IF_ERROR(monitor_->GetClusterStatus(&status).WithContext("cluster capacity"));
  uint64_t capacity = 0, used = 0;
  for (const v1::ServerInfo& server : status.servers()) {
    if (server.state() != v1::SERVER_STATE_UP) continue;
    capacity += server.capacity_bytes();
    used += std::min(server.used_bytes(), server.capacity_bytes());
  }
  out->replica_count = std::max<uint32_t>(1, status.replica_count());
  out->total_bytes = capacity / out->replica_count;
  out->available_bytes = (capacity - used) / out->replica_count;
  return Status::OK();
}

Status VolumeManager::CopyTree(uint64_t from, uint64_t to, std::map<uint64_t, uint64_t>* copied) {
  uint64_t cookie = 0;
  for (bool eof = false; !eof;) {
    std::vector<ReaddirEntry> page;
    PDPM_RETURN_IF_ERROR(
        FsStatus("list a directory", fs_->Readdir(from, cookie, 256, &page, &eof)));
    for (const ReaddirEntry& entry : page) {
      cookie = entry.next_cookie;
      PDPM_RETURN_IF_ERROR(CopyNode(from, entry, to, copied));
    }
  }
  return Status::OK();
}

Status VolumeManager::CopyNode(uint64_t from_parent, const ReaddirEntry& entry, uint64_t to_parent,
                               std::map<uint64_t, uint64_t>* copied) {
  const std::string what = "copy " + entry.name;
  Attr a;
  int err = fs_->Lookup(from_parent, entry.name, &a);
  if (err == ENOENT) return Status::OK();  // removed while copying
  PDPM_RETURN_IF_ERROR(FsStatus(what, err));
  const Owner owner{a.uid, a.gid};
  Attr made;
  if (!S_ISDIR(a.mode) && a.nlink > 1) {
    auto it = copied->find(a.ino);
    if (it != copied->end())
      return FsStatus(what, fs_->Link(it->second, to_parent, entry.name, &made));
  }
  if (S_ISDIR(a.mode)) {
    err = fs_->Mkdir(to_parent, entry.name, a.mode & 07777, owner, &made);
  } else if (S_ISLNK(a.mode)) {
    std::string target;
    err = fs_->Readlink(a.ino, &target);
    if (err == 0) err = fs_->Symlink(to_parent, entry.name, target, owner, &made);
  } else {
    err = fs_->Mknod(to_parent, entry.name, a.mode, a.rdev, owner, &made);
  }
  PDPM_RETURN_IF_ERROR(FsStatus(what, err));
  if (!S_ISDIR(a.mode) && a.nlink > 1) (*copied)[a.ino] = made.ino;
  if (S_ISDIR(a.mode)) {
    PDPM_RETURN_IF_ERROR(CopyTree(a.ino, made.ino, copied));
  } else if (S_ISREG(a.mode)) {
    for (uint64_t offset = 0; offset < a.size;) {
      std::string block;
      PDPM_RETURN_IF_ERROR(FsStatus(what, fs_->Read(a.ino, offset, kCopyBlock, &block)));
      if (block.empty()) break;  // truncated while copying
      uint64_t at = offset;
      PDPM_RETURN_IF_ERROR(FsStatus(what, fs_->Write(made.ino, &at, block, false)));
      offset += block.size();
    }
  }
  std::vector<std::string> names;
  PDPM_RETURN_IF_ERROR(FsStatus(what, fs_->ListXattr(a.ino, &names)));
  for (const std::string& xattr : names) {
    std::string value;
    err = fs_->GetXattr(a.ino, xattr, &value);
    if (err == ENODATA) continue;
    if (err == 0) err = fs_->SetXattr(made.ino, xattr, value, 0);
    if (err != 0) return FsStatus(what, err).WithContext("xattr " + xattr);
  }
  // Mode bits past the umask-free create, and the times, last (writes and
  // creates below a directory change its mtime).
  SetAttrArgs args;
  args.set_mode = !S_ISLNK(a.mode);
  args.mode = a.mode & 07777;
  args.set_atime = true;
  args.atime = a.atime;
  args.set_mtime = true;
  args.mtime = a.mtime;
  Attr ignored;
  return FsStatus(what, fs_->SetAttr(made.ino, args, &ignored));
}

}  // namespace pdpm::pdfs
