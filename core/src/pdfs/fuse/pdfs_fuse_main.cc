// pdfs-fuse: mounts the pDFS of a PDPM cluster on a directory through the
// libfuse3 low-level API (docs/pdfs.md "FUSE mount"). Runs in the
// foreground until unmounted or SIGINT/SIGTERM (which unmount); `pdpm fs
// mount` starts it as a daemon with a pid file and a log.
//
// Consistency: no attribute, entry or negative-entry caching in the kernel
// (timeouts 0) and the page cache dropped at every open, so what a client
// wrote and closed (every write reaches pDFS before it returns: no
// write-back cache) is what any client sees at its next open:
// close-to-open, across mounts.
//
// With --fuse-fd the connection is one a mount holder (the CSI node plugin)
// mounted and keeps open, so it outlives this process: a pdfs-fuse started
// after one died resumes it (HeldConnection below; docs/csi.md).
#define FUSE_USE_VERSION 312

#include <dirent.h>
#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <linux/fs.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "client/client_flags.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/log.h"
#include "pdfs/client/file_system.h"
#include "pdfs/fuse/lock_waiter.h"
#include "pdfs/fuse/mount_watch.h"

namespace pdpm::pdfs {
namespace {

// The largest write the kernel sends in one request.
constexpr unsigned kMaxWrite = 1u << 20;

class HeldConnection;

// The POSIX lock owners that took locks through each open file. The kernel
// releases a process's POSIX locks on a file through FUSE's flush (at every
// close, with that process's owner), but an OFD lock's owner is the open
// file itself, which is never flushed: whatever owner took a lock through
// a file and was not flushed on that inode since is released with the file.
class OfdOwners {
 public:
  void Took(uint64_t fh, uint64_t ino, uint64_t owner) {
    std::lock_guard<std::mutex> l(mu_);
    Handle& h = handles_[fh];
    h.ino = ino;
    h.owners.insert(owner);
  }
  void Flushed(uint64_t ino, uint64_t owner) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [fh, h] : handles_) {
      if (h.ino == ino) h.owners.erase(owner);
    }
  }
  // The owners whose locks go with the file `fh`.
  std::set<uint64_t> Released(uint64_t fh) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return {};
    std::set<uint64_t> owners = std::move(it->second.owners);
    handles_.erase(it);
    return owners;
  }

 private:
  struct Handle {
    uint64_t ino = 0;
    std::set<uint64_t> owners;
  };
  std::mutex mu_;
  std::map<uint64_t, Handle> handles_;
};

// What the mount serves: the file system, and the directory that is the
// mount's root (a volume, or the file system's root). FUSE's root inode
// number (1) is pDFS's root's too; with a volume they are mapped.
struct Served {
  client::Client* client;
  FileSystem* fs;
  uint64_t root;
  Logger* log;
  HeldConnection* held = nullptr;  // set with --fuse-fd
  LockWaiter* waiter = nullptr;
  OfdOwners* ofd = nullptr;
  fuse_session* session = nullptr;
  // File handles are the open flags (a restarted pdfs-fuse serves the open
  // files of a held connection from them alone) in the low 32 bits and a
  // number of this file in the high ones (OFD locks go with it).
  std::atomic<uint64_t> next_handle{0};
};

// A FUSE connection that a mount holder opened (/dev/fuse), mounted (mount
// option fd=N) and keeps a copy of, served here through libfuse's custom
// I/O on the inherited descriptor. The kernel keeps a connection while any
// copy of its descriptor is open, so when this process dies the mount
// stays, its requests waiting, and the holder starts another pdfs-fuse on
// the same descriptor. The kernel sends FUSE_INIT once per connection: the
// first pdfs-fuse records that request in the init file; a later one finds
// the record, replays it to its own libfuse session (whose reply is dropped:
// the kernel has had its answer) and then asks the kernel to resend the
// requests the dead process had read but not answered (FUSE_NOTIFY_RESEND,
// Linux 6.9). Requests are served statelessly (node ids are pDFS inode
// numbers, file handles the open flags), so the new process serves every
// open file as the old one did.
class HeldConnection {
 public:
  HeldConnection(int fd, std::string init_file, Logger* log)
      : fd_(fd), init_file_(std::move(init_file)), log_(log) {}

  // Serves the connection in `se` (whose user data is a Served pointing
  // here). The session owns the descriptor from then on.
  Status Attach(fuse_session* se) {
    static const fuse_custom_io io = {Writev, Read, nullptr, nullptr};
    int rc = fuse_session_custom_io(se, &io, fd_);
    if (rc != 0) return Status::IOError("fuse_session_custom_io: " + std::string(strerror(-rc)));
    return Status::OK();
  }

  // When the connection was initialised by an earlier pdfs-fuse (its INIT
  // recorded), initialises `se` from the record and has the kernel resend
  // what is unanswered; *resumed tells which. Before the session's loop.
  Status ResumeIfInitialised(fuse_session* se, bool* resumed) {
    *resumed = false;
    if (!FileExists(init_file_)) return Status::OK();
    std::string init;
    Status s = ReadWholeFile(init_file_, &init);
    if (!s.ok()) return s.WithContext("the recorded FUSE_INIT");
    fuse_in_header h{};
    if (init.size() < sizeof(h) + sizeof(fuse_init_in)) {
      return Status::Corruption("the recorded FUSE_INIT is too short");
    }
    memcpy(&h, init.data(), sizeof(h));
    if (h.opcode != FUSE_INIT || h.len != init.size()) {
      return Status::Corruption("the init file holds no FUSE_INIT request");
    }
    drop_reply_to_.store(h.unique);
    fuse_buf buf{};
    buf.size = init.size();
    buf.mem = init.data();
    fuse_session_process_buf(se, &buf);
    if (drop_reply_to_.load() != 0) {
      return Status::IOError("libfuse did not answer the recorded FUSE_INIT");
    }
    // Requests the dead process read and never answered go back to the
    // queue this process reads.
    fuse_out_header resend{sizeof(fuse_out_header), kNotifyResend, 0};
    if (write(fd_, &resend, sizeof(resend)) != static_cast<ssize_t>(sizeof(resend))) {
      return Status::FromErrno("FUSE_NOTIFY_RESEND", errno);
    }
    *resumed = true;
    return Status::OK();
  }

 private:
  // FUSE_NOTIFY_RESEND's code (linux/fuse.h from 7.40; older headers lack it).
  static constexpr int32_t kNotifyResend = 7;
  // The bit the kernel sets in a resent request's unique (FUSE_UNIQUE_RESEND).
  static constexpr uint64_t kUniqueResend = 1ULL << 63;

  static HeldConnection* Of(void* userdata) { return static_cast<Served*>(userdata)->held; }

  // read(2), recording the kernel's FUSE_INIT request before libfuse sees
  // it, and making a resent append idempotent: a write the dead process
  // may have done already is done again at the offset the kernel gave (the
  // file's size as this node saw it) rather than at the end of the file,
  // which would append it twice. Keeps read's errno for libfuse.
  static ssize_t Read(int fd, void* buf, size_t len, void* userdata) {
    ssize_t n = read(fd, buf, len);
    auto* h = static_cast<fuse_in_header*>(buf);
    if (n >= static_cast<ssize_t>(sizeof(fuse_in_header) + sizeof(fuse_write_in)) &&
        h->opcode == FUSE_WRITE && (h->unique & kUniqueResend) != 0) {
      auto* w = reinterpret_cast<fuse_write_in*>(h + 1);
      w->fh &= ~static_cast<uint64_t>(O_APPEND);  // the handle is the open flags
    }
    if (n >= static_cast<ssize_t>(sizeof(fuse_in_header)) && h->opcode == FUSE_INIT) {
      int saved = errno;
      HeldConnection* self = Of(userdata);
      Status s = WriteFileAtomically(
          self->init_file_, std::string(static_cast<const char*>(buf), static_cast<size_t>(n)),
          0600);
      if (!s.ok()) {
        self->log_->Error("cannot record FUSE_INIT: a restarted pdfs-fuse cannot resume",
                          {{"status", s}});
      }
      errno = saved;
    }
    return n;
  }

  // writev(2), but the reply to the replayed FUSE_INIT goes nowhere.
  static ssize_t Writev(int fd, iovec* iov, int count, void* userdata) {
    HeldConnection* self = Of(userdata);
    uint64_t drop = self->drop_reply_to_.load();
    if (drop != 0 && count > 0 && iov[0].iov_len >= sizeof(fuse_out_header) &&
        static_cast<const fuse_out_header*>(iov[0].iov_base)->unique == drop) {
      self->drop_reply_to_.store(0);
      ssize_t total = 0;
      for (int i = 0; i < count; i++) total += static_cast<ssize_t>(iov[i].iov_len);
      return total;
    }
    return writev(fd, iov, count);
  }

  int fd_;
  std::string init_file_;
  Logger* log_;
  std::atomic<uint64_t> drop_reply_to_{0};  // unique of the replayed INIT
};

Served* Srv(fuse_req_t req) {
  return static_cast<Served*>(fuse_req_userdata(req));
}

FileSystem* Fs(fuse_req_t req) {
  return Srv(req)->fs;
}

uint64_t NewHandle(fuse_req_t req, int flags) {
  return static_cast<uint32_t>(flags) | (Srv(req)->next_handle.fetch_add(1) << 32);
}

// The pDFS inode of a FUSE inode number, and back.
uint64_t In(fuse_req_t req, fuse_ino_t ino) {
  return ino == FUSE_ROOT_ID ? static_cast<Served*>(fuse_req_userdata(req))->root : ino;
}
uint64_t Out(fuse_req_t req, uint64_t ino) {
  return ino == static_cast<Served*>(fuse_req_userdata(req))->root ? FUSE_ROOT_ID : ino;
}

Owner OwnerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  // umask: of the creating process (mknod, mkdir, create; FUSE_CAP_DONT_MASK
  // leaves it to pDFS, which applies it where no default ACL does).
  return {ctx->uid, ctx->gid, ctx->umask};
}

struct stat ToStat(const Attr& a) {
  struct stat st {};
  st.st_ino = a.ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_rdev = a.rdev;
  st.st_blksize = 4096;
  st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  st.st_atim = {a.atime.sec, a.atime.nsec};
  st.st_mtim = {a.mtime.sec, a.mtime.nsec};
  st.st_ctim = {a.ctime.sec, a.ctime.nsec};
  return st;
}

fuse_entry_param ToEntry(const Attr& a) {
  fuse_entry_param e{};
  e.ino = a.ino;
  e.generation = 1;
  e.attr = ToStat(a);
  e.attr_timeout = 0;
  e.entry_timeout = 0;
  return e;
}

void ReplyEntry(fuse_req_t req, int err, Attr a) {
  if (err != 0) {
    fuse_reply_err(req, err);
    return;
  }
  a.ino = Out(req, a.ino);
  fuse_entry_param e = ToEntry(a);
  fuse_reply_entry(req, &e);
}

void ReplyAttr(fuse_req_t req, int err, Attr a) {
  if (err != 0) {
    fuse_reply_err(req, err);
    return;
  }
  a.ino = Out(req, a.ino);
  struct stat st = ToStat(a);
  fuse_reply_attr(req, &st, 0);
}

void Init(void* userdata, fuse_conn_info* conn) {
  conn->max_write = kMaxWrite;
  if ((conn->capable & FUSE_CAP_READDIRPLUS) != 0) conn->want |= FUSE_CAP_READDIRPLUS;
  // Every readdir is a readdirplus: lookups of the listed names cost nothing.
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Data cached while a file is open is dropped at the next open.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  // Advisory locks are pDFS's, across mounts, not the kernel's local ones.
  conn->want |= conn->capable & (FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
  // POSIX ACLs: the kernel enforces them (as default_permissions does the
  // mode) from the system.posix_acl_* xattrs pDFS keeps in step with the
  // mode, and leaves the umask to pDFS: a directory's default ACL replaces
  // it (docs/pdfs.md "POSIX ACLs").
  if ((conn->capable & FUSE_CAP_POSIX_ACL) != 0 && (conn->capable & FUSE_CAP_DONT_MASK) != 0) {
    conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
  }
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Attr a;
  int err = Fs(req)->Lookup(In(req, parent), name, &a);
  if (err == ENOENT) {  // a negative entry, not cached either
    fuse_entry_param e{};
    fuse_reply_entry(req, &e);
    return;
  }
  ReplyEntry(req, err, a);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Attr a;
  ReplyAttr(req, Fs(req)->GetAttr(In(req, ino), &a), a);
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* st, int to_set, fuse_file_info*) {
  SetAttrArgs args;
  args.set_mode = (to_set & FUSE_SET_ATTR_MODE) != 0;
  args.mode = st->st_mode;
  args.set_uid = (to_set & FUSE_SET_ATTR_UID) != 0;
  args.uid = st->st_uid;
  args.set_gid = (to_set & FUSE_SET_ATTR_GID) != 0;
  args.gid = st->st_gid;
  args.set_size = (to_set & FUSE_SET_ATTR_SIZE) != 0;
  args.size = static_cast<uint64_t>(st->st_size);
  args.set_atime = (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) != 0;
  args.atime_now = (to_set & FUSE_SET_ATTR_ATIME_NOW) != 0;
  args.atime = {st->st_atim.tv_sec, static_cast<uint32_t>(st->st_atim.tv_nsec)};
  args.set_mtime = (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) != 0;
  args.mtime_now = (to_set & FUSE_SET_ATTR_MTIME_NOW) != 0;
  args.mtime = {st->st_mtim.tv_sec, static_cast<uint32_t>(st->st_mtim.tv_nsec)};
  Attr a;
  ReplyAttr(req, Fs(req)->SetAttr(In(req, ino), args, &a), a);
}

void Readlink(fuse_req_t req, fuse_ino_t ino) {
  std::string target;
  int err = Fs(req)->Readlink(In(req, ino), &target);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_readlink(req, target.c_str());
  }
}

void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Attr a;
  ReplyEntry(req, Fs(req)->Mknod(In(req, parent), name, mode, rdev, OwnerOf(req), &a), a);
}

void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Attr a;
  ReplyEntry(req, Fs(req)->Mkdir(In(req, parent), name, mode, OwnerOf(req), &a), a);
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_reply_err(req, Fs(req)->Unlink(In(req, parent), name));
}

void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_reply_err(req, Fs(req)->Rmdir(In(req, parent), name));
}

void Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  Attr a;
  ReplyEntry(req, Fs(req)->Symlink(In(req, parent), name, target, OwnerOf(req), &a), a);
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
            const char* new_name, unsigned flags) {
  fuse_reply_err(req, Fs(req)->Rename(In(req, parent), name, In(req, new_parent), new_name, flags));
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) {
  Attr a;
  ReplyEntry(req, Fs(req)->Link(In(req, ino), In(req, new_parent), new_name, &a), a);
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Attr a;
  int err = Fs(req)->GetAttr(In(req, ino), &a);
  if (err == 0 && (fi->flags & O_TRUNC) != 0 && (fi->flags & O_ACCMODE) != O_RDONLY &&
      a.size != 0) {
    SetAttrArgs args;
    args.set_size = true;
    err = Fs(req)->SetAttr(In(req, ino), args, &a);
  }
  if (err != 0) {
    fuse_reply_err(req, err);
    return;
  }
  Fs(req)->Acquire(In(req, ino));
  fi->keep_cache = 0;  // close-to-open: what others wrote is read afresh
  fi->fh = NewHandle(req, fi->flags);
  if (fuse_reply_open(req, fi) == -ENOENT) Fs(req)->Release(In(req, ino));  // interrupted
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  Attr a;
  int err = Fs(req)->Mknod(In(req, parent), name, S_IFREG | (mode & 07777), 0, OwnerOf(req), &a);
  if (err != 0) {
    fuse_reply_err(req, err);
    return;
  }
  Fs(req)->Acquire(a.ino);
  fi->keep_cache = 0;
  fi->fh = NewHandle(req, fi->flags);
  fuse_entry_param e = ToEntry(a);
  if (fuse_reply_create(req, &e, fi) == -ENOENT) Fs(req)->Release(a.ino);
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  std::string data;
  int err = Fs(req)->Read(In(req, ino), static_cast<uint64_t>(off), size, &data);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_buf(req, data.data(), data.size());
  }
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
           fuse_file_info* fi) {
  uint64_t at = static_cast<uint64_t>(off);
  const bool append = (fi->fh & O_APPEND) != 0;
  int err = Fs(req)->Write(In(req, ino), &at, std::string_view(buf, size), append);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_write(req, size);
  }
}

// A POSIX lock request of the kernel (struct flock as libfuse gives it:
// l_len 0 reaches the end of any file).
LockRequest PosixLock(const fuse_file_info* fi, const struct flock* lock) {
  LockRequest r;
  r.kind = LockKind::kPosix;
  r.type = lock->l_type == F_WRLCK   ? LockType::kWrite
           : lock->l_type == F_RDLCK ? LockType::kRead
                                     : LockType::kUnlock;
  r.owner = fi->lock_owner;
  r.pid = static_cast<uint32_t>(lock->l_pid);
  r.start = static_cast<uint64_t>(lock->l_start);
  r.end = lock->l_len == 0 ? kLockEnd : r.start + static_cast<uint64_t>(lock->l_len) - 1;
  return r;
}

// Every owner's POSIX lock on `ino` released.
int Unlock(fuse_req_t req, uint64_t ino, LockKind kind, uint64_t owner) {
  LockRequest r;
  r.kind = kind;
  r.type = LockType::kUnlock;
  r.owner = owner;
  return Fs(req)->SetLock(ino, r);
}

// close(2) of a descriptor: the closing process's POSIX locks on the file
// go (POSIX: any close of the file releases them). Writes are durable
// already.
void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Srv(req)->ofd->Flushed(In(req, ino), fi->lock_owner);
  fuse_reply_err(req, Unlock(req, In(req, ino), LockKind::kPosix, fi->lock_owner));
}

// The last descriptor of an open file closed: its flock lock and OFD
// locks go.
void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  int err = 0;
  if (fi->flock_release) err = Unlock(req, In(req, ino), LockKind::kFlock, fi->fh);
  for (uint64_t owner : Srv(req)->ofd->Released(fi->fh)) {
    int e = Unlock(req, In(req, ino), LockKind::kPosix, owner);
    if (err == 0) err = e;
  }
  Fs(req)->Release(In(req, ino));
  fuse_reply_err(req, err);
}

void GetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  LockEntry c;
  int err = Fs(req)->TestLock(In(req, ino), PosixLock(fi, lock), &c);
  if (err != 0) return (void)fuse_reply_err(req, err);
  struct flock out = *lock;
  out.l_type = c.type == LockType::kWrite ? F_WRLCK : c.type == LockType::kRead ? F_RDLCK : F_UNLCK;
  if (c.type != LockType::kUnlock) {
    out.l_whence = SEEK_SET;
    out.l_start = static_cast<off_t>(c.start);
    out.l_len =
        c.end >= static_cast<uint64_t>(INT64_MAX) ? 0 : static_cast<off_t>(c.end - c.start + 1);
    out.l_pid = static_cast<pid_t>(c.pid);
  }
  fuse_reply_lock(req, &out);
}

// Sets `lock`; with `sleep`, a conflict waits (LockWaiter) instead of EAGAIN.
// A lock granted drops the file's page cache on this node, as an open does:
// what the lock's previous holder wrote on another mount is read afresh, so
// data guarded by locks is coherent across mounts.
void SetLock(fuse_req_t req, fuse_ino_t fuse_ino, const LockRequest& lock, uint64_t fh,
             bool sleep) {
  Served* served = Srv(req);
  const uint64_t ino = In(req, fuse_ino);
  auto granted = [served, fh, fuse_ino, ino, lock] {
    if (lock.type == LockType::kUnlock) return;
    if (lock.kind == LockKind::kPosix) served->ofd->Took(fh, ino, lock.owner);
    int rc = fuse_lowlevel_notify_inval_inode(served->session, fuse_ino, 0, 0);
    if (rc != 0 && rc != -ENOENT) {
      served->log->Error("cannot drop a locked file's cached pages",
                         {{"ino", ino}, {"error", strerror(-rc)}});
    }
  };
  int err = served->fs->SetLock(ino, lock);
  if (err == EAGAIN && sleep) return served->waiter->Wait(req, ino, lock, granted);
  if (err == 0) granted();
  fuse_reply_err(req, err);
}

void SetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
  SetLock(req, ino, PosixLock(fi, lock), fi->fh, sleep != 0);
}

void Flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  LockRequest r;
  r.kind = LockKind::kFlock;
  r.type = (op & LOCK_EX) != 0   ? LockType::kWrite
           : (op & LOCK_SH) != 0 ? LockType::kRead
                                 : LockType::kUnlock;
  // A flock belongs to the open file description: its handle, never
  // reused. The kernel's lock owner for it is the description's address,
  // which a new open may get while the old one's release (sent after
  // close returns) is still on its way — that release then freed the new
  // description's lock.
  r.owner = fi->fh;
  r.pid = static_cast<uint32_t>(fuse_req_ctx(req)->pid);
  SetLock(req, ino, r, fi->fh, (op & LOCK_NB) == 0);
}

void Fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  fuse_reply_err(req, Fs(req)->Fsync(In(req, ino)));
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Attr a;
  int err = Fs(req)->GetAttr(In(req, ino), &a);
  if (err == 0 && !S_ISDIR(a.mode)) err = ENOTDIR;
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_open(req, fi);
  }
}

// FUSE offsets: 1 after ".", 2 after "..", then a pDFS cookie + 2.
void ReadDir(fuse_req_t req, fuse_ino_t fuse_ino, size_t size, off_t off, bool plus) {
  FileSystem* fs = Fs(req);
  const uint64_t ino = In(req, fuse_ino);
  std::vector<char> buf(size);
  size_t used = 0;
  auto add = [&](const char* name, Attr a, uint64_t next) {
    a.ino = Out(req, a.ino);
    const size_t room = size - used;
    size_t need = 0;
    if (plus) {
      fuse_entry_param e = ToEntry(a);
      need =
          fuse_add_direntry_plus(req, buf.data() + used, room, name, &e, static_cast<off_t>(next));
    } else {
      struct stat st = ToStat(a);
      need = fuse_add_direntry(req, buf.data() + used, room, name, &st, static_cast<off_t>(next));
    }
    if (need > room) return false;
    used += need;
    return true;
  };
  Attr self;
  int err = fs->GetAttr(ino, &self);
  if (err != 0) {
    fuse_reply_err(req, err);
    return;
  }
  if (off < 1 && !add(".", self, 1)) return (void)fuse_reply_buf(req, buf.data(), used);
  if (off < 2) {
    Attr parent;
    err = fs->Lookup(ino, "..", &parent);
    if (err != 0) return (void)fuse_reply_err(req, err);
    if (!add("..", parent, 2)) return (void)fuse_reply_buf(req, buf.data(), used);
  }
  uint64_t cookie = off < 2 ? 0 : static_cast<uint64_t>(off) - 2;
  for (bool eof = false; !eof;) {
    std::vector<ReaddirEntry> page;
    err = fs->Readdir(ino, cookie, 128, &page, &eof);
    if (err != 0) break;
    for (const ReaddirEntry& e : page) {
      Attr a;
      if (!plus || fs->GetAttr(e.ino, &a) != 0) {
        a = {};  // (removed meanwhile: listed without attributes)
        a.ino = e.ino;
        a.mode = static_cast<uint32_t>(DTTOIF(e.type));
      }
      if (!add(e.name.c_str(), a, e.next_cookie + 2)) {
        eof = true;
        break;
      }
      cookie = e.next_cookie;
    }
  }
  if (err != 0 && used == 0) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_buf(req, buf.data(), used);
  }
}

void ReadDirPlain(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  ReadDir(req, ino, size, off, false);
}

void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  ReadDir(req, ino, size, off, true);
}

void ReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void FsyncDir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  fuse_reply_err(req, Fs(req)->Fsync(In(req, ino)));
}

// The cluster's room for data and its use (Client::Space) as the file
// system's size; a volume with a quota shows its quota (and no more free
// room than the cluster has). Inode figures: a volume's inode quota, else
// none (pDFS has no inode table to fill).
void StatFs(fuse_req_t req, fuse_ino_t) {
  constexpr uint64_t kBlock = 4096;
  const Served* served = static_cast<Served*>(fuse_req_userdata(req));
  struct statvfs st {};
  st.f_bsize = kBlock;
  st.f_frsize = kBlock;
  st.f_namemax = kMaxNameLength;
  uint64_t capacity = 0, used = 0;
  Status s = served->client->Space(&capacity, &used);
  if (!s.ok()) {
    served->log->Error("statfs: cluster space", {{"status", s}});
    return (void)fuse_reply_err(req, EIO);
  }
  uint64_t total = capacity, free = capacity - used;
  VolumeInfo v;
  if (served->root != kRootIno) {
    int err = served->fs->StatVolume(served->root, &v);
    if (err != 0) return (void)fuse_reply_err(req, err);
  }
  const VolumeQuota& q = v.quota;
  if (q.byte_limit != 0) {
    total = q.byte_limit;
    free = std::min(free, q.byte_limit - std::min(q.byte_limit, q.bytes_used));
  }
  st.f_blocks = total / kBlock;
  st.f_bfree = st.f_bavail = free / kBlock;
  if (q.inode_limit != 0) {
    st.f_files = q.inode_limit;
    st.f_ffree = st.f_favail = q.inode_limit - std::min(q.inode_limit, q.inodes_used);
  }
  fuse_reply_statfs(req, &st);
}

// fallocate(2): FileSystem::Fallocate (the kernel checked the handle is
// open for writing).
void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
               fuse_file_info*) {
  if (offset < 0 || length <= 0) return (void)fuse_reply_err(req, EINVAL);
  fuse_reply_err(req, Fs(req)->Fallocate(In(req, ino), mode, static_cast<uint64_t>(offset),
                                         static_cast<uint64_t>(length)));
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
              int flags) {
  fuse_reply_err(req, Fs(req)->SetXattr(In(req, ino), name, std::string_view(value, size), flags));
}

// getxattr/listxattr: size 0 asks for the length only; too small is ERANGE.
void ReplySized(fuse_req_t req, const std::string& data, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, data.size());
  } else if (size < data.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, data.data(), data.size());
  }
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  std::string value;
  int err = Fs(req)->GetXattr(In(req, ino), name, &value);
  if (err != 0) return (void)fuse_reply_err(req, err);
  ReplySized(req, value, size);
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  std::vector<std::string> names;
  int err = Fs(req)->ListXattr(In(req, ino), &names);
  if (err != 0) return (void)fuse_reply_err(req, err);
  std::string list;
  for (const std::string& n : names) list.append(n).push_back('\0');
  ReplySized(req, list, size);
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  fuse_reply_err(req, Fs(req)->RemoveXattr(In(req, ino), name));
}

fuse_lowlevel_ops Ops() {
  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.getattr = GetAttr;
  ops.setattr = SetAttr;
  ops.readlink = Readlink;
  ops.mknod = Mknod;
  ops.mkdir = Mkdir;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.symlink = Symlink;
  ops.rename = Rename;
  ops.link = Link;
  ops.open = Open;
  ops.read = Read;
  ops.write = Write;
  ops.flush = Flush;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.opendir = OpenDir;
  ops.readdir = ReadDirPlain;
  ops.readdirplus = ReadDirPlus;
  ops.releasedir = ReleaseDir;
  ops.fsyncdir = FsyncDir;
  ops.statfs = StatFs;
  ops.fallocate = Fallocate;
  ops.setxattr = SetXattr;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  ops.removexattr = RemoveXattr;
  ops.create = Create;
  ops.getlk = GetLk;
  ops.setlk = SetLk;
  ops.flock = Flock;
  return ops;
}

// SIGINT, SIGTERM and SIGHUP end the session through libfuse's handlers,
// which wake the session loop only when they run on the thread waiting in
// it: libfuse's workers block every signal, and a stop signal taken by
// another thread (the cluster client's, the lock threads) would set the
// exit flag and leave the loop asleep — pdfs-fuse would never exit. So
// every thread is started with them blocked, and only the loop's thread
// takes them.
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

int Main(int argc, char** argv) {
  const sigset_t stop_signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  Logger log("pdfs-fuse");
  client::ClientFlags client_flags;
  std::string mountpoint, volume;
  uint32_t threads = 8;
  FsOptions fs_options;
  FlagParser flags("pdfs-fuse");
  client_flags.Register(&flags);
  flags.AddString("mountpoint", &mountpoint, "the directory to mount on");
  flags.AddString("volume", &volume,
                  "the volume (a directory of the file system's root) to mount; default: all");
  flags.AddUint32("threads", &threads, "most threads serving requests at once");
  flags.AddUint32("lock-beat-ms", &fs_options.lock_beat_ms,
                  "how often this mount's lock session beats while it holds locks");
  flags.AddUint32("lock-lease-beats", &fs_options.lock_lease_beats,
                  "beats of this mount after which another mount's silent lock session lapses "
                  "(its locks freed)");
  std::string fuse_fd, init_file;
  flags.AddString("fuse-fd", &fuse_fd,
                  "serve this inherited /dev/fuse descriptor, already mounted on --mountpoint by "
                  "the caller, who keeps a copy (a restarted pdfs-fuse resumes the connection)");
  flags.AddString("init-file", &init_file,
                  "with --fuse-fd: where the connection's FUSE_INIT is recorded (by the first "
                  "pdfs-fuse) and found (by a restarted one)");
  Status s = flags.Parse(argc, argv);
  if (s.ok() && flags.PrintUsageIfAsked()) return 0;
  client::ClientOptions options;
  options.connections_per_server = threads;
  if (s.ok()) s = client_flags.ToOptions(&options);
  if (s.ok() && mountpoint.empty()) s = Status::InvalidArgument("--mountpoint is needed");
  int held_fd = -1;
  if (s.ok() && !fuse_fd.empty()) {
    char* end = nullptr;
    long v = strtol(fuse_fd.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX || fcntl(static_cast<int>(v), F_GETFD) < 0) {
      s = Status::InvalidArgument("--fuse-fd " + fuse_fd + ": not an open descriptor");
    } else if (init_file.empty()) {
      s = Status::InvalidArgument("--fuse-fd needs --init-file");
    }
    held_fd = static_cast<int>(v);
  } else if (s.ok() && !init_file.empty()) {
    s = Status::InvalidArgument("--init-file is for --fuse-fd");
  }
  if (!s.ok()) {
    fprintf(stderr, "%s\n%s", s.ToString().c_str(), flags.Usage().c_str());
    return 2;
  }
  std::unique_ptr<client::Client> client;
  s = client::Client::Open(options, &client);
  std::unique_ptr<FileSystem> fs;
  if (s.ok() && (fs_options.lock_beat_ms == 0 || fs_options.lock_lease_beats < 2)) {
    s = Status::InvalidArgument(
        "--lock-beat-ms must be positive and --lock-lease-beats at least 2");
  }
  if (s.ok()) s = FileSystem::Open(client.get(), fs_options, &fs);
  if (!s.ok()) {
    log.Error("cannot open the file system", {{"status", s}});
    return 1;
  }
  // Answers its waits before the session goes (below).
  auto waiter = std::make_unique<LockWaiter>(fs.get());
  OfdOwners ofd;
  Served served{client.get(), fs.get(), kRootIno, &log, nullptr, waiter.get(), &ofd};
  // Handle numbers start at random: those of a dead pdfs-fuse whose held
  // connection this one resumes are not taken again.
  served.next_handle = std::random_device{}();
  if (!volume.empty()) {
    Attr a;
    int err = fs->Lookup(kRootIno, volume, &a);
    if (err == 0 && !S_ISDIR(a.mode)) err = ENOTDIR;
    if (err != 0) {
      log.Error("no such volume", {{"volume", volume}, {"error", strerror(err)}});
      return 1;
    }
    served.root = a.ino;
  }

  // Permission checks by the kernel on the attributes pDFS returns.
  std::vector<std::string> args = {"pdfs-fuse", "-o",
                                   "default_permissions,fsname=pdfs,subtype=pdfs"};
  if (geteuid() == 0) args.back() += ",allow_other";
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argp.size()), argp.data());
  const fuse_lowlevel_ops ops = Ops();
  fuse_session* se = fuse_session_new(&fargs, &ops, sizeof(ops), &served);
  if (se == nullptr) {
    log.Error("fuse_session_new failed");
    fuse_opt_free_args(&fargs);
    return 1;
  }
  served.session = se;
  std::unique_ptr<HeldConnection> held;
  if (held_fd >= 0) {
    held = std::make_unique<HeldConnection>(held_fd, init_file, &log);
    served.held = held.get();
  }
  int rc = 1;
  if (fuse_set_signal_handlers(se) == 0) {
    bool serving = false;
    if (held != nullptr) {
      // The holder mounted and unmounts: this process only serves.
      bool resumed = false;
      s = held->Attach(se);
      if (s.ok()) s = held->ResumeIfInitialised(se, &resumed);
      if (s.ok()) {
        log.Info(resumed ? "resumed the held connection" : "serving the held connection",
                 {{"mountpoint", mountpoint}, {"monitor", options.monitor}});
        serving = true;
      } else {
        log.Error("cannot serve the held connection", {{"status", s}});
      }
    } else if (fuse_session_mount(se, mountpoint.c_str()) == 0) {
      log.Info("mounted", {{"mountpoint", mountpoint}, {"monitor", options.monitor}});
      serving = true;
    } else {
      log.Error("mount failed", {{"mountpoint", mountpoint}});
    }
    if (serving) {
      // A mount of this process ends when it leaves the mount table, even
      // if the kernel keeps the connection for a copy in another mount
      // namespace (MountWatch); the stop signal wakes the loop.
      std::unique_ptr<MountWatch> watch;
      if (held == nullptr) {
        watch = std::make_unique<MountWatch>(mountpoint, "fuse.pdfs", &log,
                                             [] { kill(getpid(), SIGTERM); });
      }
      pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
      fuse_loop_config* config = fuse_loop_cfg_create();
      fuse_loop_cfg_set_max_threads(config, threads);
      fuse_loop_cfg_set_idle_threads(config, threads);
      rc = fuse_session_loop_mt(se, config);
      fuse_loop_cfg_destroy(config);
      // libfuse's handlers end the loop with the stop signal's number as its
      // result; being asked to stop is an orderly end, not a failure.
      if (sigismember(&stop_signals, rc) == 1) {
        log.Info("stopping on a signal", {{"signal", rc}});
        rc = 0;
      }
      if (held == nullptr) {
        const bool unmounted_elsewhere = watch->fired();
        watch.reset();
        if (unmounted_elsewhere) rc = 0;  // an unmount, as fusermount3 -u: the signal was ours
        fuse_session_unmount(se);
        log.Info("unmounted", {{"mountpoint", mountpoint}, {"rc", rc}});
      } else {
        log.Info("stopped serving", {{"mountpoint", mountpoint}, {"rc", rc}});
      }
    }
    fuse_remove_signal_handlers(se);
  }
  waiter.reset();
  fuse_session_destroy(se);
  fuse_opt_free_args(&fargs);  // what the session parsing added to them
  return rc == 0 ? 0 : 1;
}

}  // namespace
}  // namespace pdpm::pdfs

int main(int argc, char** argv) {
  return pdpm::pdfs::Main(argc, argv);
}
