// pDFSLib: the pDFS client (docs/pdfs.md). A POSIX file system whose
// metadata and data live in pDSM objects of one cluster.
//
//   std::unique_ptr<client::Client> c;   Client::Open(options, &c);
//   std::unique_ptr<FileSystem> fs;      FileSystem::Open(c.get(), {}, &fs);
//   std::unique_ptr<File> f;
//   int err = fs->OpenPath("/a/b", O_CREAT | O_RDWR, 0644, {0, 0}, &f);
//   err = f->Pwrite(0, "hello");
//
// Contract:
//   * Every call returns 0 or a POSIX errno value (as the FUSE low-level
//     API replies): ENOENT, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY, EINVAL,
//     ENAMETOOLONG, ELOOP, EPERM, EBADF, ENODATA, ERANGE, E2BIG, EFBIG,
//     EOPNOTSUPP, ENOSPC. EIO when the cluster failed the operation (its
//     cause is logged); an operation whose commit outcome the cluster
//     could not tell (a server died after the decision) is EIO too and may
//     have taken effect.
//   * Every metadata operation is one pDSM transaction (FaRM OCC, retried
//     on conflicts, and across a failover for up to the client's
//     failover_wait_ms): atomic, serializable, durable on every copy when it
//     returns. Directory rename moves one entry; the files below keep their
//     records (a directory's inode number is its immutable GUID).
//   * Data: Pwrite returns when the bytes and then the new size/mtime are
//     durable on every copy, so Fsync has nothing left to wait for. A write
//     is atomic per 4 KiB page of one 64 MiB chunk, not as a whole.
//   * Permission checks are the caller's (the FUSE mount lets the kernel
//     check mode bits: default_permissions); `Owner` is whom a new inode
//     belongs to. New inodes in a set-group-ID directory take its group
//     (and directories its set-group-ID bit).
//   * Thread-safe.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/log.h"
#include "pdfs/client/records.h"

namespace pdpm::pdfs {

struct FsOptions {
  // Symbolic links followed in one path walk before ELOOP (Linux's 40).
  int max_symlinks = 40;
  // How long a transaction is run again after conflicts or a failover
  // (longer than the client's failover_wait_ms) before EIO.
  uint32_t retry_ms = 60000;
  // Advisory locks (docs/pdfs.md "Advisory locks"): once it takes a lock,
  // a FileSystem beats its lock session every lock_beat_ms; a session whose
  // beats stayed the same while an observer beat lock_lease_beats times is
  // lapsed, and the observer frees its locks.
  uint32_t lock_beat_ms = 1000;
  uint32_t lock_lease_beats = 10;
};

// Who creates an inode: its owner, and the creating process's umask, which
// clears permission bits of the new inode unless its directory has a
// default ACL (which decides them instead: docs/pdfs.md "POSIX ACLs").
struct Owner {
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t umask = 0;
};

struct Attr {
  uint64_t ino = 0;
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t nlink = 0;
  uint64_t size = 0;
  uint64_t rdev = 0;
  Time atime, mtime, ctime;
};

// What SetAttr changes (the rest is kept).
struct SetAttrArgs {
  bool set_mode = false;
  uint32_t mode = 0;  // permission bits (07777)
  bool set_uid = false;
  uint32_t uid = 0;
  bool set_gid = false;
  uint32_t gid = 0;
  bool set_size = false;
  uint64_t size = 0;
  bool set_atime = false;
  Time atime;  // set_atime with atime_now: the current time
  bool atime_now = false;
  bool set_mtime = false;
  Time mtime;
  bool mtime_now = false;
};

struct ReaddirEntry {
  uint64_t ino = 0;
  uint8_t type = 0;  // DT_*
  std::string name;
  uint64_t next_cookie = 0;  // the cookie that continues after this entry
};

// A volume: a directory of the root, with a quota when it was made by
// CreateVolume.
struct VolumeInfo {
  std::string name;
  uint64_t ino = 0;
  bool has_quota = false;
  VolumeQuota quota;
};

// An advisory lock request of fcntl (F_SETLK, F_OFD_SETLK, F_GETLK...) or
// flock. `owner` tells holders apart within this FileSystem (the kernel's
// lock owner); holders of different FileSystems are always different.
struct LockRequest {
  LockKind kind = LockKind::kPosix;
  LockType type = LockType::kRead;  // kUnlock releases
  uint64_t owner = 0;
  uint32_t pid = 0;
  uint64_t start = 0;
  uint64_t end = kLockEnd;  // inclusive; flock: [0, kLockEnd]
};

class File;

class FileSystem {
 public:
  // Opens the file system of the cluster `client` talks to, creating its
  // root directory (mode 0755, owned by root) when absent. `client` must
  // outlive the FileSystem.
  static Status Open(client::Client* client, const FsOptions& options,
                     std::unique_ptr<FileSystem>* out);
  ~FileSystem();
  FileSystem(const FileSystem&) = delete;
  FileSystem& operator=(const FileSystem&) = delete;

  // --- inode operations (what a FUSE low-level file system calls) ---
  int GetAttr(uint64_t ino, Attr* out);
  int Lookup(uint64_t parent, std::string_view name, Attr* out);
  // chmod/chown/utimens/truncate; ctime follows every change.
  int SetAttr(uint64_t ino, const SetAttrArgs& args, Attr* out);
  int Mkdir(uint64_t parent, std::string_view name, uint32_t mode, const Owner& owner, Attr* out);
  // Regular files, FIFOs and sockets (character/block devices: EPERM);
  // EEXIST when the name exists.
  int Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
            const Owner& owner, Attr* out);
  int Symlink(uint64_t parent, std::string_view name, std::string_view target, const Owner& owner,
              Attr* out);
  int Readlink(uint64_t ino, std::string* target);
  int Unlink(uint64_t parent, std::string_view name);
  int Rmdir(uint64_t parent, std::string_view name);
  // flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE.
  int Rename(uint64_t parent, std::string_view name, uint64_t new_parent, std::string_view new_name,
             unsigned flags);
  int Link(uint64_t ino, uint64_t new_parent, std::string_view new_name, Attr* out);
  // Entries after `cookie` (0: from the start; "." and ".." are not
  // listed), at most `max` of them; *eof when the directory has no more.
  // An entry present for the whole listing is returned exactly once
  // whatever else changes in between; cookies stay valid forever.
  int Readdir(uint64_t dir, uint64_t cookie, size_t max, std::vector<ReaddirEntry>* out, bool* eof);
  // Reads [offset, offset+length) clipped to the size; holes read as zeros.
  int Read(uint64_t ino, uint64_t offset, uint64_t length, std::string* out);
  // Writes at `offset` (with `append`: at the end, *offset set to where).
  int Write(uint64_t ino, uint64_t* offset, std::string_view data, bool append);
  int Fsync(uint64_t ino);
  // fallocate(2) with mode 0: the size grows to offset + length when that
  // is larger (the new range reads as zeros; charged to the volume like a
  // truncate, EDQUOT past its quota); FALLOC_FL_KEEP_SIZE: the size stays.
  // Either way no space of the cluster is set aside: chunks are sparse
  // copy-on-write objects, so a later write allocates its pages anyway and
  // may fail ENOSPC/EIO on a full cluster (docs/pdfs.md). Other modes:
  // EOPNOTSUPP; length 0: EINVAL; past 1 PiB: EFBIG; a directory: EISDIR;
  // not a regular file: ENODEV.
  int Fallocate(uint64_t ino, int mode, uint64_t offset, uint64_t length);
  // flags: 0, XATTR_CREATE or XATTR_REPLACE.
  int SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags);
  int GetXattr(uint64_t ino, std::string_view name, std::string* value);
  int ListXattr(uint64_t ino, std::vector<std::string>* names);
  int RemoveXattr(uint64_t ino, std::string_view name);
  // --- advisory locks (docs/pdfs.md "Advisory locks") ---
  // Sets (kUnlock: releases) req.owner's lock on [start, end] of `ino`,
  // across every client of the cluster: 0, or EAGAIN when another holder's
  // lock conflicts (*conflict, when given, is that lock; nothing changed —
  // except that a flock conversion, as in Linux, has dropped the old lock),
  // EINVAL for a bad range or kind, EIO. Never waits for a conflicting lock
  // to go: a blocking caller polls. Locks of a holder whose FileSystem died
  // are freed once its lock session lapsed.
  int SetLock(uint64_t ino, const LockRequest& req, LockEntry* conflict = nullptr);
  // F_GETLK: 0 and *conflict the first lock of another holder that would
  // conflict with `req` (its type kUnlock when none).
  int TestLock(uint64_t ino, const LockRequest& req, LockEntry* conflict);

  // The file stays readable while opened here after its last name is gone:
  // its data is freed at the last Release (after a crash of this process:
  // by PurgeOrphans or `pdpm fsck --fs --repair`).
  void Acquire(uint64_t ino);
  void Release(uint64_t ino);

  // --- paths (absolute; "." and ".." resolved; symlinks followed) ---
  int ResolvePath(std::string_view path, bool follow_last, uint64_t* ino);
  // The directory holding the last component, and that component.
  int ResolveParent(std::string_view path, uint64_t* parent, std::string* name);
  int Stat(std::string_view path, Attr* out);
  int Lstat(std::string_view path, Attr* out);
  // open(2): O_RDONLY/O_WRONLY/O_RDWR with O_CREAT, O_EXCL, O_TRUNC,
  // O_APPEND, O_DIRECTORY, O_NOFOLLOW.
  int OpenPath(std::string_view path, int flags, uint32_t mode, const Owner& owner,
               std::unique_ptr<File>* out);

  // Frees the data and inodes of every orphan no client of this process
  // holds open (for recovery after crashes).
  int PurgeOrphans();
  // Frees the data and inode of `ino` when it has no name left (nlink 0),
  // and drops it from its orphan list (also when it is gone already).
  int Purge(uint64_t ino);
  // Sets what the quota of `volume` says is used (pdpm fsck's repair, on a
  // file system no client changes meanwhile). ENODATA: no quota.
  int SetVolumeUsage(uint64_t volume, uint64_t bytes, uint64_t inodes);

  // --- volumes (docs/pdfs.md "Volumes") ---
  // A directory of the root with a quota (limits 0: unlimited), made in one
  // transaction. Inodes below it count against it: their number and the
  // sum of their sizes; an operation that would pass a limit fails with
  // EDQUOT and changes nothing; moving or linking across volumes is EXDEV.
  int CreateVolume(std::string_view name, uint64_t byte_limit, uint64_t inode_limit,
                   const Owner& owner, VolumeInfo* out);
  // New limits; EDQUOT (and nothing changed) when one is below the use.
  int ResizeVolume(std::string_view name, uint64_t byte_limit, uint64_t inode_limit,
                   VolumeInfo* out);
  int StatVolume(std::string_view name, VolumeInfo* out);
  int StatVolume(uint64_t ino, VolumeInfo* out);
  int ListVolumes(std::vector<VolumeInfo>* out);
  // Removes the volume with everything in it.
  int DeleteVolume(std::string_view name);

 private:
  class Txn;
  FileSystem(client::Client* client, const FsOptions& options);
  // Runs `fn` in a transaction until it commits (retrying conflicts and
  // failovers); `fn` returns 0 or an errno (its reads are validated then).
  int RunTx(const std::function<int(Txn&)>& fn);
  // `also` runs in the creating transaction with the new inode.
  int CreateNode(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                 std::string_view target, const Owner& owner, Attr* out,
                 const std::function<int(Txn&, const Inode&)>& also = nullptr);
  // Removes everything below directory `dir`.
  int RemoveTree(uint64_t dir);
  // Deletes an empty directory's records in `t`, giving back its inode
  // (or, for a volume, deleting its quota).
  int DropDirectory(Txn& t, const Inode* dir);
  // EXDEV when an inode counting against volume `from` would count against
  // `to` and either has a quota (directories of the root made without one
  // exchange entries freely).
  int CheckSameVolume(Txn& t, uint64_t from, uint64_t to);
  // Frees the chunks of [from, to) of `ino` (zeroing the partial one).
  int ClearData(uint64_t ino, uint64_t from, uint64_t to);
  // Clears [size, data_end) when an interrupted truncate left garbage.
  int ClearTail(uint64_t ino);
  int PurgeUnlessOpen(uint64_t ino);
  // One name of `n` gone in `t`: with no name left it is deleted, or made
  // an orphan (*orphan) when it has data or is open here.
  int DropLink(Txn& t, Inode* n, const Time& now, uint64_t* orphan);
  bool IsOpen(uint64_t ino);
  // Follows `path` from `start` (an absolute one from the root); *out: the
  // attributes of where it ends, as its last lookup returned them.
  int Walk(uint64_t start, std::string_view path, bool follow_last, int* links_left, Attr* out);
  // Walk from the root, with ResolvePath's checks.
  int Resolve(std::string_view path, bool follow_last, Attr* out);
  int EnsureChunk(uint64_t ino, uint64_t chunk);
  // A failed cluster call: logged, EIO.
  int Io(const char* what, const Status& s);
  uint64_t RandomIno();
  // The inode outside a transaction (one atomic object read).
  int ReadInode(uint64_t ino, Inode* out);
  // Lookup by atomic object reads outside a transaction (docs/pdfs.md
  // "Guarantees", lookups): bucket 0, and when the name is not there the index, the
  // bucket it names and the index again; then the entry's inode. Two reads
  // in a directory that never split, four in one that did, instead of a
  // transaction reading four records and validating them (16 round trips).
  // An answer is one Lookup's answer at the moment the bucket was read,
  // with the inode's attributes as read just after. kUndecided when the
  // reads alone cannot tell (a directory without buckets, a concurrent
  // change, a failed read): the caller runs the transaction.
  static constexpr int kUndecided = -1;
  int LookupByReads(uint64_t parent, std::string_view name, Attr* out);

  // SetLock (apply) and TestLock (not).
  int LockTx(uint64_t ino, const LockRequest& req, bool apply, LockEntry* conflict);
  // This FileSystem's lock session, made (and the beat thread started) at
  // the first lock; 0 and EIO when it could not be made.
  int EnsureSession(uint64_t* session);
  // The session is gone (reaped by an observer): its locks are no more.
  void LoseSession(uint64_t session);
  void BeatLoop();
  // One beat of `session`: false when it is gone.
  bool Beat(uint64_t session);
  // Watches the other sessions' beats; frees the lapsed ones.
  void WatchSessions(uint64_t me);
  // Deletes `session` and its list entry: 0, or EAGAIN when its beats are
  // no longer `beats` (any beats: nullopt).
  int Reap(uint64_t session, std::optional<uint64_t> beats);
  // Deletes this FileSystem's own session (at the end: its locks go).
  void EndSession();

  client::Client* const client_;
  const FsOptions options_;
  Logger log_;
  std::mutex open_mu_;
  std::map<uint64_t, int> open_;  // ino -> handles held in this process
  // Appends of this process run one at a time (the end is read, then
  // written): O_APPEND is atomic among them, not across clients.
  std::mutex append_mu_;
  std::mutex rng_mu_;
  uint64_t rng_state_;

  // Advisory locks. lock_mu_ guards the session, the files it holds locks
  // on (unlocking elsewhere needs no transaction) and the beat thread's
  // stop flag; session_mu_ serialises making a session.
  std::mutex session_mu_;
  std::mutex lock_mu_;
  // Lock calls on one file run one at a time here (striped by inode), so
  // locked_files_ is updated in the order their transactions committed:
  // otherwise an unlock that committed before a lock but finished after it
  // would drop the file from locked_files_ while a lock is held, and the
  // unlock that should free it would be skipped (a lock held forever).
  std::array<std::mutex, 16> lock_call_mu_;
  std::condition_variable beat_cv_;
  uint64_t session_ = 0;
  std::set<uint64_t> locked_files_;
  bool stopping_ = false;
  std::thread beat_thread_;
  // Beat thread only: this session's completed beats, and per other
  // session the beats last seen and this session's count when they were.
  uint64_t my_beats_ = 0;
  struct Watch {
    uint64_t beats = 0;
    uint64_t seen_at = 0;
  };
  std::map<uint64_t, Watch> watched_;
};

// An open file: the handle of OpenPath.
class File {
 public:
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t ino() const { return ino_; }
  int Pread(uint64_t offset, uint64_t length, std::string* out);
  // pwrite(2); with O_APPEND the bytes go to the end (*written_at, when
  // given, says where).
  int Pwrite(uint64_t offset, std::string_view data, uint64_t* written_at = nullptr);
  int Truncate(uint64_t size);
  // FileSystem::Fallocate; EBADF on a handle not open for writing.
  int Fallocate(int mode, uint64_t offset, uint64_t length);
  int Fstat(Attr* out);
  int Fsync();

 private:
  friend class FileSystem;
  File(FileSystem* fs, uint64_t ino, int flags);
  FileSystem* fs_;
  uint64_t ino_;
  int flags_;
};

}  // namespace pdpm::pdfs
