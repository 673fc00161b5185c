// The C ABI of pDFSLib (pdfs.h) over pdfs::FileSystem.
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/client_flags.h"
#include "common/log.h"
#include "pdfs/client/file_system.h"
#include "pdfs/client/pdfs.h"

struct pdfs_fs {
  std::unique_ptr<pdpm::client::Client> client;
  std::unique_ptr<pdpm::pdfs::FileSystem> fs;
  pdpm::pdfs::Owner owner;
};

struct pdfs_file {
  std::unique_ptr<pdpm::pdfs::File> file;
};

namespace {

using pdpm::Status;
using pdpm::StatusCode;
using pdpm::pdfs::Attr;
using pdpm::pdfs::FileSystem;

void ToStat(const Attr& a, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = a.ino;
  st->st_mode = a.mode;
  st->st_nlink = a.nlink;
  st->st_uid = a.uid;
  st->st_gid = a.gid;
  st->st_size = static_cast<off_t>(a.size);
  st->st_rdev = a.rdev;
  st->st_blksize = 4096;
  st->st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  st->st_atim = {a.atime.sec, a.atime.nsec};
  st->st_mtim = {a.mtime.sec, a.mtime.nsec};
  st->st_ctim = {a.ctime.sec, a.ctime.nsec};
}

// Runs `op(parent, name)` on the directory holding the last component.
template <typename Op>
int OnParent(pdfs_fs* fs, const char* path, Op op) {
  if (fs == nullptr || path == nullptr) return EINVAL;
  uint64_t parent = 0;
  std::string name;
  int err = fs->fs->ResolveParent(path, &parent, &name);
  return err != 0 ? err : op(parent, name);
}

int SetAttrOf(pdfs_fs* fs, const char* path, const pdpm::pdfs::SetAttrArgs& args) {
  if (fs == nullptr || path == nullptr) return EINVAL;
  uint64_t ino = 0;
  int err = fs->fs->ResolvePath(path, true, &ino);
  Attr a;
  return err != 0 ? err : fs->fs->SetAttr(ino, args, &a);
}

}  // namespace

extern "C" {

int pdfs_mount(const char* monitor, const char* secret, const char* transport, uint32_t uid,
               uint32_t gid, pdfs_fs** out) {
  if (out == nullptr) return EINVAL;
  pdpm::client::ClientOptions o;
  Status s = pdpm::client::ClientOptionsFromStrings(monitor, secret, transport, &o);
  if (!s.ok()) return EINVAL;
  auto fs = std::make_unique<pdfs_fs>();
  fs->owner = {uid, gid};
  s = pdpm::client::Client::Open(o, &fs->client);
  if (s.ok()) s = FileSystem::Open(fs->client.get(), {}, &fs->fs);
  if (!s.ok()) {
    pdpm::Logger("pdfs").Error("pdfs_mount failed", {{"monitor", monitor}, {"status", s}});
    if (s.code() == StatusCode::kPermissionDenied) return EACCES;
    return s.code() == StatusCode::kInvalidArgument ? EINVAL : EIO;
  }
  *out = fs.release();
  return 0;
}

void pdfs_unmount(pdfs_fs* fs) {
  delete fs;
}

int pdfs_open(pdfs_fs* fs, const char* path, int flags, uint32_t mode, pdfs_file** out) {
  if (fs == nullptr || path == nullptr || out == nullptr) return EINVAL;
  auto f = std::make_unique<pdfs_file>();
  int err = fs->fs->OpenPath(path, flags, mode, fs->owner, &f->file);
  if (err == 0) *out = f.release();
  return err;
}

void pdfs_close(pdfs_file* f) {
  delete f;
}

int pdfs_pread(pdfs_file* f, void* buf, uint64_t len, uint64_t offset, uint64_t* got) {
  if (f == nullptr || (buf == nullptr && len != 0) || got == nullptr) return EINVAL;
  std::string data;
  int err = f->file->Pread(offset, len, &data);
  if (err != 0) return err;
  if (!data.empty()) std::memcpy(buf, data.data(), data.size());
  *got = data.size();
  return 0;
}

int pdfs_pwrite(pdfs_file* f, const void* buf, uint64_t len, uint64_t offset) {
  if (f == nullptr || (buf == nullptr && len != 0)) return EINVAL;
  return f->file->Pwrite(offset, std::string_view(static_cast<const char*>(buf), len));
}

int pdfs_ftruncate(pdfs_file* f, uint64_t size) {
  return f == nullptr ? EINVAL : f->file->Truncate(size);
}

int pdfs_fallocate(pdfs_file* f, int mode, uint64_t offset, uint64_t len) {
  return f == nullptr ? EINVAL : f->file->Fallocate(mode, offset, len);
}

int pdfs_fsync(pdfs_file* f) {
  return f == nullptr ? EINVAL : f->file->Fsync();
}

int pdfs_fstat(pdfs_file* f, struct stat* out) {
  if (f == nullptr || out == nullptr) return EINVAL;
  Attr a;
  int err = f->file->Fstat(&a);
  if (err == 0) ToStat(a, out);
  return err;
}

int pdfs_stat(pdfs_fs* fs, const char* path, struct stat* out) {
  if (fs == nullptr || path == nullptr || out == nullptr) return EINVAL;
  Attr a;
  int err = fs->fs->Stat(path, &a);
  if (err == 0) ToStat(a, out);
  return err;
}

int pdfs_lstat(pdfs_fs* fs, const char* path, struct stat* out) {
  if (fs == nullptr || path == nullptr || out == nullptr) return EINVAL;
  Attr a;
  int err = fs->fs->Lstat(path, &a);
  if (err == 0) ToStat(a, out);
  return err;
}

int pdfs_mkdir(pdfs_fs* fs, const char* path, uint32_t mode) {
  return OnParent(fs, path, [&](uint64_t parent, const std::string& name) {
    Attr a;
    return fs->fs->Mkdir(parent, name, mode, fs->owner, &a);
  });
}

int pdfs_rmdir(pdfs_fs* fs, const char* path) {
  return OnParent(fs, path, [&](uint64_t parent, const std::string& name) {
    return fs->fs->Rmdir(parent, name);
  });
}

int pdfs_unlink(pdfs_fs* fs, const char* path) {
  return OnParent(fs, path, [&](uint64_t parent, const std::string& name) {
    return fs->fs->Unlink(parent, name);
  });
}

int pdfs_rename(pdfs_fs* fs, const char* from, const char* to, unsigned flags) {
  if (to == nullptr) return EINVAL;
  return OnParent(fs, from, [&](uint64_t parent, const std::string& name) {
    return OnParent(fs, to, [&](uint64_t new_parent, const std::string& new_name) {
      return fs->fs->Rename(parent, name, new_parent, new_name, flags);
    });
  });
}

int pdfs_link(pdfs_fs* fs, const char* existing, const char* path) {
  if (fs == nullptr || existing == nullptr) return EINVAL;
  uint64_t ino = 0;
  int err = fs->fs->ResolvePath(existing, false, &ino);
  if (err != 0) return err;
  return OnParent(fs, path, [&](uint64_t parent, const std::string& name) {
    Attr a;
    return fs->fs->Link(ino, parent, name, &a);
  });
}

int pdfs_symlink(pdfs_fs* fs, const char* target, const char* path) {
  if (target == nullptr) return EINVAL;
  return OnParent(fs, path, [&](uint64_t parent, const std::string& name) {
    Attr a;
    return fs->fs->Symlink(parent, name, target, fs->owner, &a);
  });
}

int pdfs_readlink(pdfs_fs* fs, const char* path, char* buf, size_t cap, size_t* len) {
  if (fs == nullptr || path == nullptr || (buf == nullptr && cap != 0) || len == nullptr) {
    return EINVAL;
  }
  uint64_t ino = 0;
  int err = fs->fs->ResolvePath(path, false, &ino);
  std::string target;
  if (err == 0) err = fs->fs->Readlink(ino, &target);
  if (err != 0) return err;
  *len = target.size();
  if (cap < target.size()) return ERANGE;
  if (!target.empty()) std::memcpy(buf, target.data(), target.size());
  return 0;
}

int pdfs_chmod(pdfs_fs* fs, const char* path, uint32_t mode) {
  pdpm::pdfs::SetAttrArgs args;
  args.set_mode = true;
  args.mode = mode;
  return SetAttrOf(fs, path, args);
}

int pdfs_chown(pdfs_fs* fs, const char* path, uint32_t uid, uint32_t gid) {
  pdpm::pdfs::SetAttrArgs args;
  args.set_uid = args.set_gid = true;
  args.uid = uid;
  args.gid = gid;
  return SetAttrOf(fs, path, args);
}

int pdfs_readdir(pdfs_fs* fs, const char* path, uint64_t cookie, pdfs_dirent* out, size_t max,
                 size_t* count, int* eof) {
  if (fs == nullptr || path == nullptr || (out == nullptr && max != 0) || count == nullptr ||
      eof == nullptr) {
    return EINVAL;
  }
  uint64_t dir = 0;
  int err = fs->fs->ResolvePath(path, true, &dir);
  std::vector<pdpm::pdfs::ReaddirEntry> entries;
  bool end = false;
  if (err == 0) err = fs->fs->Readdir(dir, cookie, max, &entries, &end);
  if (err != 0) return err;
  for (size_t i = 0; i < entries.size(); ++i) {
    out[i].ino = entries[i].ino;
    out[i].type = entries[i].type;
    std::memcpy(out[i].name, entries[i].name.c_str(), entries[i].name.size() + 1);
    out[i].next_cookie = entries[i].next_cookie;
  }
  *count = entries.size();
  *eof = end ? 1 : 0;
  return 0;
}

}  // extern "C"
