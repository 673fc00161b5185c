// pDFSLib against a real cluster: a pdpm-monitor and pdpm-server processes
// (client/cluster_harness.h). Every operation and its errors, a random
// model check of the data path, fsck. (Crashes: file_system_crash_test.cc.)
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/xattr.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "common/test_scale.h"
#include "pdfs/client/acl.h"
#include "pdfs/client/fs_test_fixture.h"
#include "pdfs/client/test_seed.h"

namespace pdpm::pdfs {
namespace {

TEST_F(FsTest, NamespaceOperationsAndErrors) {
  Attr root;
  ASSERT_EQ(fs_->Stat("/", &root), 0);
  EXPECT_EQ(root.ino, kRootIno);
  EXPECT_TRUE(S_ISDIR(root.mode));
  EXPECT_EQ(root.nlink, 2u);

  ASSERT_EQ(Mkdir("/a"), 0);
  ASSERT_EQ(Mkdir("/a/b", 0700, {1000, 100}), 0);
  EXPECT_EQ(Mkdir("/a"), EEXIST);
  EXPECT_EQ(Mkdir("/"), EEXIST);
  EXPECT_EQ(Mkdir("/nope/x"), ENOENT);
  EXPECT_EQ(Mkdir("/a/" + std::string(256, 'n')), ENAMETOOLONG);
  ASSERT_EQ(Mkdir("/a/" + std::string(255, 'n')), 0);
  Attr b = StatOf("/a/b");
  EXPECT_EQ(b.mode, S_IFDIR | 0700u);
  EXPECT_EQ(b.uid, 1000u);
  EXPECT_EQ(b.gid, 100u);
  EXPECT_EQ(StatOf("/a").nlink, 4u);  // ., .. and two subdirectories
  EXPECT_EQ(StatOf("/").nlink, 3u);

  // Files: create, exclusive create, through a file, trailing slash.
  ASSERT_EQ(WriteFile("/a/f", "hello"), 0);
  EXPECT_EQ(ReadFile("/a/f"), "hello");
  std::unique_ptr<File> f;
  EXPECT_EQ(fs_->OpenPath("/a/f", O_CREAT | O_EXCL | O_RDWR, 0644, {}, &f), EEXIST);
  EXPECT_EQ(fs_->OpenPath("/a/missing", O_RDONLY, 0, {}, &f), ENOENT);
  EXPECT_EQ(fs_->OpenPath("/a/f/x", O_RDONLY, 0, {}, &f), ENOTDIR);
  EXPECT_EQ(fs_->OpenPath("/a/f/x", O_CREAT | O_RDWR, 0644, {}, &f), ENOTDIR);
  EXPECT_EQ(fs_->OpenPath("/a/f/", O_RDONLY, 0, {}, &f), ENOTDIR);
  EXPECT_EQ(fs_->OpenPath("/a", O_RDWR, 0, {}, &f), EISDIR);
  EXPECT_EQ(fs_->OpenPath("/a/f", O_RDONLY | O_DIRECTORY, 0, {}, &f), ENOTDIR);
  EXPECT_EQ(fs_->OpenPath("/a/" + std::string(256, 'x'), O_CREAT | O_RDWR, 0644, {}, &f),
            ENAMETOOLONG);
  EXPECT_EQ(Mkdir("/a/f/x"), ENOTDIR);
  ASSERT_EQ(fs_->OpenPath("/a", O_RDONLY | O_DIRECTORY, 0, {}, &f), 0);
  std::string data;
  EXPECT_EQ(f->Pread(0, 10, &data), EISDIR);

  // O_TRUNC, O_APPEND, access modes.
  ASSERT_EQ(fs_->OpenPath("/a/f", O_WRONLY | O_APPEND, 0, {}, &f), 0);
  uint64_t at = 0;
  ASSERT_EQ(f->Pwrite(0, " world", &at), 0);
  EXPECT_EQ(at, 5u);
  EXPECT_EQ(f->Pread(0, 5, &data), EBADF);
  EXPECT_EQ(ReadFile("/a/f"), "hello world");
  ASSERT_EQ(fs_->OpenPath("/a/f", O_RDONLY, 0, {}, &f), 0);
  EXPECT_EQ(f->Pwrite(0, "x"), EBADF);
  EXPECT_EQ(f->Truncate(0), EINVAL);
  ASSERT_EQ(fs_->OpenPath("/a/f", O_RDWR | O_TRUNC, 0, {}, &f), 0);
  EXPECT_EQ(StatOf("/a/f").size, 0u);

  // Unlink and rmdir.
  EXPECT_EQ(Unlink("/a/b"), EISDIR);
  EXPECT_EQ(Rmdir("/a/f"), ENOTDIR);
  EXPECT_EQ(Rmdir("/a"), ENOTEMPTY);
  EXPECT_EQ(Rmdir("/a/b/."), EINVAL);
  EXPECT_EQ(Rmdir("/a/missing"), ENOENT);
  EXPECT_EQ(Unlink("/a/missing"), ENOENT);
  ASSERT_EQ(Rmdir("/a/b"), 0);
  EXPECT_EQ(StatOf("/a").nlink, 3u);
  EXPECT_EQ(List("/a"), (std::set<std::string>{"f", std::string(255, 'n')}));
  ASSERT_EQ(Unlink("/a/f"), 0);
  EXPECT_EQ(fs_->Stat("/a/f", &root), ENOENT);

  // Symbolic links: relative and absolute targets, loops, lstat.
  ASSERT_EQ(Mkdir("/d"), 0);
  ASSERT_EQ(WriteFile("/d/target", "T"), 0);
  ASSERT_EQ(Symlink("target", "/d/rel"), 0);
  ASSERT_EQ(Symlink("/d", "/abs"), 0);
  ASSERT_EQ(Symlink("/loop2", "/loop1"), 0);
  ASSERT_EQ(Symlink("/loop1", "/loop2"), 0);
  EXPECT_EQ(ReadFile("/d/rel"), "T");
  EXPECT_EQ(ReadFile("/abs/rel"), "T");
  EXPECT_EQ(ReadFile("/abs/../d/./target"), "T");
  EXPECT_EQ(ReadFile("/loop1"), "<" + std::string(strerror(ELOOP)) + ">");
  EXPECT_EQ(Symlink("x", "/d/rel"), EEXIST);
  Attr l = StatOf("/d/rel");
  EXPECT_TRUE(S_ISLNK(l.mode));
  EXPECT_EQ(l.size, 6u);
  std::string target;
  ASSERT_EQ(fs_->Readlink(l.ino, &target), 0);
  EXPECT_EQ(target, "target");
  EXPECT_EQ(fs_->Readlink(StatOf("/d").ino, &target), EINVAL);
  EXPECT_EQ(fs_->OpenPath("/d/rel", O_RDONLY | O_NOFOLLOW, 0, {}, &f), ELOOP);
  Attr through;
  ASSERT_EQ(fs_->Stat("/d/rel", &through), 0);
  EXPECT_TRUE(S_ISREG(through.mode));

  // Hard links.
  ASSERT_EQ(Link("/d/target", "/d/hard"), 0);
  EXPECT_EQ(StatOf("/d/target").nlink, 2u);
  EXPECT_EQ(StatOf("/d/hard").ino, StatOf("/d/target").ino);
  EXPECT_EQ(Link("/d", "/d2"), EPERM);
  EXPECT_EQ(Link("/d/target", "/d/hard"), EEXIST);
  ASSERT_EQ(Unlink("/d/target"), 0);
  EXPECT_EQ(StatOf("/d/hard").nlink, 1u);
  EXPECT_EQ(ReadFile("/d/hard"), "T");

  // FIFOs and sockets; devices are not served.
  Attr n;
  const uint64_t d = StatOf("/d").ino;
  ASSERT_EQ(fs_->Mknod(d, "fifo", S_IFIFO | 0600, 0, {}, &n), 0);
  EXPECT_TRUE(S_ISFIFO(StatOf("/d/fifo").mode));
  ASSERT_EQ(fs_->Mknod(d, "sock", S_IFSOCK | 0600, 0, {}, &n), 0);
  EXPECT_TRUE(S_ISSOCK(StatOf("/d/sock").mode));
  EXPECT_EQ(fs_->Mknod(d, "dev", S_IFCHR | 0600, 0x0101, {}, &n), EPERM);
  EXPECT_EQ(fs_->Mknod(d, "fifo", S_IFIFO | 0600, 0, {}, &n), EEXIST);

  // Set-group-ID directories hand their group down.
  ASSERT_EQ(Mkdir("/sg", 02775, {0, 50}), 0);
  ASSERT_EQ(Mkdir("/sg/sub", 0755, {1000, 1000}), 0);
  EXPECT_EQ(StatOf("/sg/sub").gid, 50u);
  EXPECT_NE(StatOf("/sg/sub").mode & S_ISGID, 0u);
  ASSERT_EQ(fs_->Mknod(StatOf("/sg").ino, "file", S_IFREG | 0644, 0, {1000, 1000}, &n), 0);
  EXPECT_EQ(n.gid, 50u);
  EXPECT_EQ(n.mode & S_ISGID, 0u);
  // The last handle of /a/f (unlinked) closes: its orphan is freed.
  f.reset();
  Fsck();
}

TEST_F(FsTest, RenameRules) {
  ASSERT_EQ(Mkdir("/p"), 0);
  ASSERT_EQ(Mkdir("/p/q"), 0);
  ASSERT_EQ(Mkdir("/p/q/r"), 0);
  ASSERT_EQ(WriteFile("/p/q/r/file", "deep"), 0);
  ASSERT_EQ(WriteFile("/x", "x"), 0);
  ASSERT_EQ(WriteFile("/y", "y"), 0);
  ASSERT_EQ(Mkdir("/e"), 0);

  // A directory into itself or below itself.
  EXPECT_EQ(Rename("/p", "/p/q/r/p"), EINVAL);
  EXPECT_EQ(Rename("/p/q", "/p/q/new"), EINVAL);
  EXPECT_EQ(Rename("/missing", "/z"), ENOENT);
  EXPECT_EQ(Rename("/x", "/nodir/z"), ENOENT);
  EXPECT_EQ(Rename("/x", "/p/."), EINVAL);
  EXPECT_EQ(Rename("/x", "/e"), EISDIR);
  EXPECT_EQ(Rename("/e", "/x"), ENOTDIR);
  EXPECT_EQ(Rename("/e", "/p"), ENOTEMPTY);
  EXPECT_EQ(Rename("/x", "/y", RENAME_NOREPLACE), EEXIST);
  EXPECT_EQ(Rename("/x", "/none", RENAME_EXCHANGE), ENOENT);
  EXPECT_EQ(Rename("/x", "/y", RENAME_EXCHANGE | RENAME_NOREPLACE), EINVAL);

  // Directory rename keeps everything below it (one entry moves).
  const uint64_t q = StatOf("/p/q").ino;
  ASSERT_EQ(Rename("/p/q", "/e/moved"), 0);
  EXPECT_EQ(StatOf("/e/moved").ino, q);
  EXPECT_EQ(ReadFile("/e/moved/r/file"), "deep");
  EXPECT_EQ(StatOf("/p").nlink, 2u);
  EXPECT_EQ(StatOf("/e").nlink, 3u);
  Attr dotdot;
  ASSERT_EQ(fs_->Lookup(q, "..", &dotdot), 0);
  EXPECT_EQ(dotdot.ino, StatOf("/e").ino);
  // Now /p may go below /e/moved (no longer its ancestor's child).
  ASSERT_EQ(Rename("/p", "/e/moved/r/p"), 0);

  // Replace a file, replace an empty directory, exchange.
  const uint64_t x = StatOf("/x").ino;
  ASSERT_EQ(Rename("/x", "/y"), 0);
  EXPECT_EQ(StatOf("/y").ino, x);
  EXPECT_EQ(ReadFile("/y"), "x");
  Attr gone;
  EXPECT_EQ(fs_->Stat("/x", &gone), ENOENT);
  ASSERT_EQ(Mkdir("/empty"), 0);
  ASSERT_EQ(Mkdir("/e2"), 0);
  ASSERT_EQ(Rename("/e2", "/empty"), 0);
  EXPECT_EQ(StatOf("/").nlink, 4u);  // ., .., e and empty
  ASSERT_EQ(WriteFile("/z", "z"), 0);
  ASSERT_EQ(Rename("/y", "/e/moved", RENAME_EXCHANGE), 0);
  EXPECT_EQ(ReadFile("/e/moved"), "x");
  EXPECT_EQ(ReadFile("/y/r/file"), "deep");
  EXPECT_EQ(StatOf("/").nlink, 5u);  // y is a directory now
  EXPECT_EQ(StatOf("/e").nlink, 2u);
  // A hard link onto its own other name: nothing happens.
  ASSERT_EQ(Link("/z", "/z2"), 0);
  ASSERT_EQ(Rename("/z", "/z2"), 0);
  EXPECT_EQ(StatOf("/z").nlink, 2u);
  EXPECT_EQ(List("/"), (std::set<std::string>{"e", "empty", "y", "z", "z2"}));
  Fsck();
}

TEST_F(FsTest, AttributesAndXattrs) {
  ASSERT_EQ(WriteFile("/f", "abc"), 0);
  const uint64_t ino = StatOf("/f").ino;
  Attr a;
  SetAttrArgs args;
  args.set_mode = true;
  args.mode = 04751;
  args.set_uid = true;
  args.uid = 7;
  args.set_gid = true;
  args.gid = 8;
  args.set_atime = true;
  args.atime = {1000, 5};
  args.set_mtime = true;
  args.mtime = {2000, 6};
  ASSERT_EQ(fs_->SetAttr(ino, args, &a), 0);
  a = StatOf("/f");
  EXPECT_EQ(a.mode, S_IFREG | 04751u);
  EXPECT_EQ(a.uid, 7u);
  EXPECT_EQ(a.gid, 8u);
  EXPECT_EQ(a.atime, (Time{1000, 5}));
  EXPECT_EQ(a.mtime, (Time{2000, 6}));
  EXPECT_GT(a.ctime.sec, 2000);
  SetAttrArgs grow;
  grow.set_size = true;
  grow.size = 10;
  ASSERT_EQ(fs_->SetAttr(ino, grow, &a), 0);
  EXPECT_EQ(ReadFile("/f"), std::string("abc") + std::string(7, '\0'));
  EXPECT_EQ(fs_->SetAttr(StatOf("/").ino, grow, &a), EISDIR);
  grow.size = kMaxFileSize + 1;
  EXPECT_EQ(fs_->SetAttr(ino, grow, &a), EFBIG);
  EXPECT_EQ(fs_->GetAttr(123456789, &a), ENOENT);

  ASSERT_EQ(fs_->SetXattr(ino, "user.one", "1", 0), 0);
  ASSERT_EQ(fs_->SetXattr(ino, "security.two", std::string(1000, '2'), XATTR_CREATE), 0);
  EXPECT_EQ(fs_->SetXattr(ino, "user.one", "x", XATTR_CREATE), EEXIST);
  EXPECT_EQ(fs_->SetXattr(ino, "user.three", "x", XATTR_REPLACE), ENODATA);
  EXPECT_EQ(fs_->SetXattr(ino, "nonamespace", "x", 0), EOPNOTSUPP);
  EXPECT_EQ(fs_->SetXattr(ino, "user." + std::string(251, 'n'), "x", 0), ERANGE);
  EXPECT_EQ(fs_->SetXattr(ino, "user.big", std::string(kMaxXattrValue + 1, 'b'), 0), E2BIG);
  ASSERT_EQ(fs_->SetXattr(ino, "user.one", "uno", XATTR_REPLACE), 0);
  std::string v;
  ASSERT_EQ(fs_->GetXattr(ino, "user.one", &v), 0);
  EXPECT_EQ(v, "uno");
  EXPECT_EQ(fs_->GetXattr(ino, "user.none", &v), ENODATA);
  std::vector<std::string> names;
  ASSERT_EQ(fs_->ListXattr(ino, &names), 0);
  EXPECT_EQ(names, (std::vector<std::string>{"security.two", "user.one"}));
  ASSERT_EQ(fs_->RemoveXattr(ino, "user.one"), 0);
  EXPECT_EQ(fs_->RemoveXattr(ino, "user.one"), ENODATA);
  ASSERT_EQ(fs_->SetXattr(ino, "user.a", std::string(kMaxXattrValue, 'a'), 0), 0);
  EXPECT_EQ(fs_->SetXattr(ino, "user.b", std::string(kMaxXattrValue, 'b'), 0), ENOSPC);
  EXPECT_EQ(fs_->Fsync(ino), 0);
}

TEST_F(FsTest, DataHolesTruncateAndLargeSparseFiles) {
  std::unique_ptr<File> f;
  ASSERT_EQ(fs_->OpenPath("/big", O_CREAT | O_RDWR, 0644, {}, &f), 0);
  // Past 4 GiB, across a chunk boundary.
  const uint64_t far = (5ull << 30) + kChunkSize - 3;
  ASSERT_EQ(f->Pwrite(far, "0123456789"), 0);
  Attr a;
  ASSERT_EQ(f->Fstat(&a), 0);
  EXPECT_EQ(a.size, far + 10);
  std::string out;
  ASSERT_EQ(f->Pread(far - 5, 20, &out), 0);
  EXPECT_EQ(out, std::string(5, '\0') + "0123456789");
  ASSERT_EQ(f->Pread(4096, 4096, &out), 0);
  EXPECT_EQ(out, std::string(4096, '\0'));
  ASSERT_EQ(f->Pread(far + 10, 4096, &out), 0);
  EXPECT_TRUE(out.empty());

  // Truncate inside the written bytes, then grow again: zeros, not the old
  // bytes.
  ASSERT_EQ(f->Truncate(far + 4), 0);
  ASSERT_EQ(f->Truncate(far + 10), 0);
  ASSERT_EQ(f->Pread(far, 10, &out), 0);
  EXPECT_EQ(out, std::string("0123") + std::string(6, '\0'));
  ASSERT_EQ(f->Truncate(0), 0);
  ASSERT_EQ(f->Pwrite(far, "z"), 0);
  ASSERT_EQ(f->Pread(far - 1, 2, &out), 0);
  EXPECT_EQ(out, std::string("\0z", 2));
  ASSERT_EQ(f->Pwrite(kMaxFileSize, "z"), EFBIG);

  // A file unlinked while open stays readable until released.
  ASSERT_EQ(f->Pwrite(0, "still here"), 0);
  ASSERT_EQ(Unlink("/big"), 0);
  ASSERT_EQ(f->Pread(0, 10, &out), 0);
  EXPECT_EQ(out, "still here");
  const uint64_t ino = f->ino();
  f.reset();
  EXPECT_EQ(fs_->GetAttr(ino, &a), ENOENT);
  uint64_t size = 0;
  EXPECT_EQ(client_->ObjSize(DataId(ino, 0), &size).code(), StatusCode::kNotFound);
  Fsck();
}

// Directories large enough to split their buckets; cookies keep their
// place while other entries come and go.
// POSIX ACLs (docs/pdfs.md "POSIX ACLs"): the access ACL and the mode in
// step both ways, default ACLs inherited instead of the umask, bad ACLs
// refused.
TEST_F(FsTest, PosixAclsKeepTheModeInStep) {
  ASSERT_EQ(WriteFile("/f", "abc"), 0);
  const uint64_t ino = StatOf("/f").ino;
  // user::rw- user:1000:r-x group::r-- mask::rwx other::---
  Acl acl;
  acl.entries = {{kAclUserObj, 6, kAclUndefinedId},
                 {kAclUser, 5, 1000},
                 {kAclGroupObj, 4, kAclUndefinedId},
                 {kAclMask, 7, kAclUndefinedId},
                 {kAclOther, 0, kAclUndefinedId}};
  ASSERT_EQ(fs_->SetXattr(ino, kAccessAclXattr, EncodeAcl(acl), 0), 0);
  EXPECT_EQ(StatOf("/f").mode, S_IFREG | 0670u);  // group bits: the mask's
  // chmod changes the owner, mask and other entries.
  SetAttrArgs chmod;
  chmod.set_mode = true;
  chmod.mode = 0640;
  Attr a;
  ASSERT_EQ(fs_->SetAttr(ino, chmod, &a), 0);
  std::string v;
  ASSERT_EQ(fs_->GetXattr(ino, kAccessAclXattr, &v), 0);
  Acl now;
  ASSERT_TRUE(DecodeAcl(v, &now).ok());
  EXPECT_EQ(AclPermissionBits(now), 0640u);
  EXPECT_EQ(now.entries[1].perm, 5);  // the named entry stays
  EXPECT_EQ(now.entries[2].perm, 4);
  // An ACL with no more than the mode is the mode alone.
  ASSERT_EQ(fs_->SetXattr(ino, kAccessAclXattr, EncodeAcl(AclFromMode(0751)), 0), 0);
  EXPECT_EQ(StatOf("/f").mode, S_IFREG | 0751u);
  EXPECT_EQ(fs_->GetXattr(ino, kAccessAclXattr, &v), ENODATA);
  EXPECT_EQ(fs_->RemoveXattr(ino, kAccessAclXattr), 0);  // none to remove: no error
  // Bad ACLs, and a default ACL on a file.
  EXPECT_EQ(fs_->SetXattr(ino, kAccessAclXattr, "junk", 0), EINVAL);
  acl.entries.erase(acl.entries.begin() + 3);  // a named entry without a mask
  EXPECT_EQ(fs_->SetXattr(ino, kAccessAclXattr, EncodeAcl(acl), 0), EINVAL);
  EXPECT_EQ(fs_->SetXattr(ino, kDefaultAclXattr, EncodeAcl(AclFromMode(0700)), 0), EACCES);

  // Without a default ACL the umask applies; with one it does not, and the
  // default decides (limited by the mode asked), directories taking it on.
  ASSERT_EQ(Mkdir("/d", 0777, {0, 0, 022}), 0);
  EXPECT_EQ(StatOf("/d").mode, S_IFDIR | 0755u);
  const uint64_t d = StatOf("/d").ino;
  Acl dflt;
  dflt.entries = {{kAclUserObj, 7, kAclUndefinedId},
                  {kAclUser, 7, 1000},
                  {kAclGroupObj, 5, kAclUndefinedId},
                  {kAclMask, 7, kAclUndefinedId},
                  {kAclOther, 0, kAclUndefinedId}};
  ASSERT_EQ(fs_->SetXattr(d, kDefaultAclXattr, EncodeAcl(dflt), 0), 0);
  ASSERT_EQ(fs_->Mknod(d, "file", S_IFREG | 0644, 0, {0, 0, 077}, &a), 0);
  EXPECT_EQ(a.mode, S_IFREG | 0640u);  // user rw-, mask r--, other ---
  ASSERT_EQ(fs_->GetXattr(a.ino, kAccessAclXattr, &v), 0);
  ASSERT_TRUE(DecodeAcl(v, &now).ok());
  ASSERT_EQ(now.entries.size(), 5u);
  EXPECT_EQ(now.entries[1].id, 1000u);
  EXPECT_EQ(now.entries[1].perm, 7);
  EXPECT_EQ(fs_->GetXattr(a.ino, kDefaultAclXattr, &v), ENODATA);  // files take none
  ASSERT_EQ(fs_->Mkdir(d, "sub", 0777, {0, 0, 077}, &a), 0);
  EXPECT_EQ(a.mode, S_IFDIR | 0770u);
  ASSERT_EQ(fs_->GetXattr(a.ino, kDefaultAclXattr, &v), 0);
  EXPECT_EQ(v, EncodeAcl(dflt));
  ASSERT_EQ(fs_->Symlink(d, "link", "file", {0, 0, 077}, &a), 0);
  EXPECT_EQ(a.mode, S_IFLNK | 0777u);  // links have no permissions of their own
  EXPECT_EQ(fs_->GetXattr(a.ino, kAccessAclXattr, &v), ENODATA);
  ASSERT_EQ(fs_->RemoveXattr(d, kDefaultAclXattr), 0);
  ASSERT_EQ(fs_->Mknod(d, "later", S_IFREG | 0666, 0, {0, 0, 027}, &a), 0);
  EXPECT_EQ(a.mode, S_IFREG | 0640u);
  EXPECT_EQ(fs_->GetXattr(a.ino, kAccessAclXattr, &v), ENODATA);
  Fsck();
}

TEST_F(FsTest, LargeDirectoriesAndStableCookies) {
  ASSERT_EQ(Mkdir("/big"), 0);
  const uint64_t dir = StatOf("/big").ino;
  std::set<std::string> want;
  // Many pages of 50 under the churn below, at any scale.
  const long entries = ScaledForTest(3000, 500);
  for (long i = 0; i < entries; ++i) {
    const std::string name = "entry-with-a-longish-name-" + std::to_string(i);
    Attr a;
    ASSERT_EQ(fs_->Mknod(dir, name, S_IFREG | 0644, 0, {}, &a), 0);
    want.insert(name);
  }
  EXPECT_EQ(List("/big"), want);
  EXPECT_EQ(StatOf("/big").size, static_cast<uint64_t>(entries));

  // List in pages while another thread removes and adds other names: every
  // name present throughout is listed exactly once.
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; !stop; ++i) {
      const std::string name = "churn-" + std::to_string(i);
      Attr a;
      if (fs_->Mknod(dir, name, S_IFREG | 0644, 0, {}, &a) != 0) break;
      if (i % 2 == 0 && fs_->Unlink(dir, name) != 0) break;
    }
  });
  std::set<std::string> seen;
  uint64_t cookie = 0;
  for (bool eof = false; !eof;) {
    std::vector<ReaddirEntry> page;
    ASSERT_EQ(fs_->Readdir(dir, cookie, 50, &page, &eof), 0);
    for (const ReaddirEntry& e : page) {
      EXPECT_TRUE(seen.insert(e.name).second) << e.name;
      cookie = e.next_cookie;
    }
  }
  // Lookups (by reads outside transactions when they can tell) under the
  // same churn, whose creates split buckets: every name present throughout
  // is found, names never made are not.
  long lookups = 0;
  for (const std::string& name : want) {
    if (lookups++ % 7 != 0) continue;
    Attr a;
    EXPECT_EQ(fs_->Lookup(dir, name, &a), 0) << name;
    EXPECT_TRUE(S_ISREG(a.mode)) << name;
    EXPECT_EQ(fs_->Lookup(dir, "never-" + name, &a), ENOENT) << name;
  }
  stop = true;
  churn.join();
  for (const std::string& name : want) EXPECT_EQ(seen.count(name), 1u) << name;

  for (const std::string& name : want) ASSERT_EQ(fs_->Unlink(dir, name), 0);
  std::set<std::string> rest = List("/big");
  for (const std::string& name : rest) ASSERT_EQ(fs_->Unlink(dir, name), 0) << name;
  EXPECT_EQ(StatOf("/big").size, 0u);
  ASSERT_EQ(Rmdir("/big"), 0);
  Fsck();
}

// Random writes, truncates, fallocates and reads against an in-memory
// model, byte for byte, over chunk boundaries (small chunks are not
// configurable: offsets straddle the 64 MiB boundary instead) and holes
// (offsets gigabytes apart; the model is sparse). Seeded (test_seed.h).
TEST_F(FsTest, RandomDataOperationsMatchAModel) {
  std::mt19937_64 rng(TestSeed());
  std::unique_ptr<File> f;
  ASSERT_EQ(fs_->OpenPath("/model", O_CREAT | O_RDWR, 0644, {}, &f), 0);
  // The model holds the file sparsely: offset -> byte.
  std::map<uint64_t, char> bytes;
  uint64_t size = 0;
  const uint64_t bases[] = {0, kChunkSize - 3000, 2 * kChunkSize - 100, uint64_t{5} << 30};
  auto offset = [&] { return bases[rng() % 4] + rng() % 6000; };
  int counts[4] = {};
  constexpr int kOps = 600;
  for (int op = 0; op < kOps; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    counts[kind < 4 ? 0 : kind < 6 ? 1 : kind < 7 ? 2 : 3]++;
    if (kind < 4) {
      const uint64_t at = offset();
      std::string data(1 + rng() % 5000, '\0');
      for (char& c : data) c = static_cast<char>('a' + rng() % 26);
      ASSERT_EQ(f->Pwrite(at, data), 0);
      for (size_t i = 0; i < data.size(); ++i) bytes[at + i] = data[i];
      size = std::max(size, at + data.size());
    } else if (kind < 6) {
      const uint64_t to = rng() % 4 == 0 ? 0 : offset();
      ASSERT_EQ(f->Truncate(to), 0);
      bytes.erase(bytes.lower_bound(to), bytes.end());
      size = to;
    } else if (kind < 7) {
      // fallocate: mode 0 grows the size (zeros), KEEP_SIZE changes nothing
      // visible; neither touches a byte.
      const uint64_t at = offset(), len = 1 + rng() % 8000;
      const bool keep = rng() % 2 == 0;
      ASSERT_EQ(f->Fallocate(keep ? FALLOC_FL_KEEP_SIZE : 0, at, len), 0);
      if (!keep) size = std::max(size, at + len);
    } else {
      const uint64_t at = offset();
      const uint64_t len = rng() % 9000;
      std::string out;
      ASSERT_EQ(f->Pread(at, len, &out), 0);
      std::string want;
      for (uint64_t i = at; i < std::min(size, at + len); ++i) {
        auto it = bytes.find(i);
        want.push_back(it == bytes.end() ? '\0' : it->second);
      }
      ASSERT_EQ(out, want) << "op " << op << " read at " << at << " len " << len;
    }
    Attr a;
    ASSERT_EQ(f->Fstat(&a), 0);
    ASSERT_EQ(a.size, size) << "op " << op;
  }
  std::printf("%d operations: %d writes, %d truncates, %d fallocates, %d reads\n", kOps, counts[0],
              counts[1], counts[2], counts[3]);
  // The whole file at the end, through a fresh client.
  f.reset();
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_EQ(fs_->OpenPath("/model", O_RDONLY, 0, {}, &f), 0);
  for (const uint64_t base : bases) {
    std::string out;
    ASSERT_EQ(f->Pread(base, 9000, &out), 0);
    std::string want;
    for (uint64_t i = base; i < std::min(size, base + 9000); ++i) {
      auto it = bytes.find(i);
      want.push_back(it == bytes.end() ? '\0' : it->second);
    }
    EXPECT_EQ(out, want) << "at " << base;
  }
  Fsck();
}

// Volumes: quotas on bytes and inodes enforced (EDQUOT, nothing changed),
// usage following every create, write, truncate and unlink, EXDEV across
// volumes.
TEST_F(FsTest, VolumesEnforceTheirQuotas) {
  VolumeInfo v;
  ASSERT_EQ(fs_->CreateVolume("v", 10000, 5, {1000, 1000}, &v), 0);
  EXPECT_TRUE(v.has_quota);
  EXPECT_EQ(v.quota, (VolumeQuota{10000, 5, 0, 0}));
  EXPECT_EQ(fs_->CreateVolume("v", 1, 1, {}, &v), EEXIST);
  ASSERT_EQ(fs_->CreateVolume("w", 0, 0, {}, &v), 0);
  auto usage = [&](const char* name) {
    VolumeInfo info;
    EXPECT_EQ(fs_->StatVolume(name, &info), 0);
    return std::make_pair(info.quota.bytes_used, info.quota.inodes_used);
  };

  std::unique_ptr<File> f;
  ASSERT_EQ(fs_->OpenPath("/v/f", O_CREAT | O_RDWR, 0644, {}, &f), 0);
  ASSERT_EQ(f->Pwrite(0, std::string(8000, 'a')), 0);
  EXPECT_EQ(usage("v"), std::make_pair(uint64_t{8000}, uint64_t{1}));
  // A write passing the byte quota fails whole: nothing written.
  EXPECT_EQ(f->Pwrite(7000, std::string(5000, 'b')), EDQUOT);
  std::string out;
  ASSERT_EQ(f->Pread(0, 20000, &out), 0);
  EXPECT_EQ(out, std::string(8000, 'a'));
  EXPECT_EQ(f->Truncate(20000), EDQUOT);
  ASSERT_EQ(f->Pwrite(0, std::string(2000, 'c')), 0);  // inside the size: free
  ASSERT_EQ(f->Truncate(100), 0);
  EXPECT_EQ(usage("v"), std::make_pair(uint64_t{100}, uint64_t{1}));
  // Inodes: four more fit (a directory counts), the fifth does not.
  ASSERT_EQ(Mkdir("/v/d"), 0);
  ASSERT_EQ(Symlink("f", "/v/link"), 0);
  ASSERT_EQ(WriteFile("/v/d/g", "gg"), 0);
  ASSERT_EQ(WriteFile("/v/h", ""), 0);
  EXPECT_EQ(WriteFile("/v/i", ""), EDQUOT);
  EXPECT_EQ(Mkdir("/v/e"), EDQUOT);
  Attr a;
  EXPECT_EQ(fs_->Lstat("/v/i", &a), ENOENT);
  EXPECT_EQ(usage("v"), std::make_pair(uint64_t{100 + 1 + 2}, uint64_t{5}));
  // Across volumes and to the root: EXDEV; inside a volume: fine.
  EXPECT_EQ(Rename("/v/h", "/w/h"), EXDEV);
  EXPECT_EQ(Rename("/v/d", "/d"), EXDEV);
  EXPECT_EQ(Link("/v/f", "/w/f"), EXDEV);
  ASSERT_EQ(Rename("/v/h", "/v/d/h"), 0);
  ASSERT_EQ(Rename("/v", "/v2"), 0);  // a volume renamed keeps its quota
  EXPECT_EQ(usage("v2"), std::make_pair(uint64_t{103}, uint64_t{5}));
  // Unlink gives back; an open file's bytes go back at the unlink.
  ASSERT_EQ(Unlink("/v2/d/h"), 0);
  f.reset();
  ASSERT_EQ(Unlink("/v2/f"), 0);
  EXPECT_EQ(usage("v2"), std::make_pair(uint64_t{3}, uint64_t{3}));
  // Resize: room again.
  ASSERT_EQ(fs_->ResizeVolume("v2", 1 << 20, 100, &v), 0);
  ASSERT_EQ(WriteFile("/v2/big", std::string(500000, 'x')), 0);
  EXPECT_EQ(usage("v2"), std::make_pair(uint64_t{500003}, uint64_t{4}));
  EXPECT_EQ(fs_->ResizeVolume("none", 1, 1, &v), ENOENT);
  // Never below the use: refused, nothing changed.
  EXPECT_EQ(fs_->ResizeVolume("v2", 500002, 100, &v), EDQUOT);
  EXPECT_EQ(fs_->ResizeVolume("v2", 1 << 20, 3, &v), EDQUOT);
  ASSERT_EQ(fs_->StatVolume("v2", &v), 0);
  EXPECT_EQ(v.quota.byte_limit, uint64_t{1} << 20);
  EXPECT_EQ(v.quota.inode_limit, 100u);
  std::vector<VolumeInfo> all;
  ASSERT_EQ(fs_->ListVolumes(&all), 0);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name == "v2" ? all[0].quota.bytes_used : all[1].quota.bytes_used, 500003u);
  // Delete: everything in it goes.
  ASSERT_EQ(fs_->DeleteVolume("v2"), 0);
  EXPECT_EQ(fs_->StatVolume("v2", &v), ENOENT);
  EXPECT_EQ(List("/"), (std::set<std::string>{"w"}));
  Fsck();
}

// fallocate: mode 0 grows the size (zeros, charged to the volume),
// KEEP_SIZE keeps it, other modes are refused; its errors.
TEST_F(FsTest, FallocateModesAndErrors) {
  VolumeInfo v;
  ASSERT_EQ(fs_->CreateVolume("v", 100000, 0, {}, &v), 0);
  std::unique_ptr<File> f;
  ASSERT_EQ(fs_->OpenPath("/v/f", O_CREAT | O_RDWR, 0644, {}, &f), 0);
  ASSERT_EQ(f->Pwrite(0, "abc"), 0);
  const Attr before = StatOf("/v/f");
  ASSERT_EQ(f->Fallocate(0, 1000, 9000), 0);
  Attr a;
  ASSERT_EQ(f->Fstat(&a), 0);
  EXPECT_EQ(a.size, 10000u);
  EXPECT_TRUE(a.mtime.sec > before.mtime.sec ||
              (a.mtime.sec == before.mtime.sec && a.mtime.nsec >= before.mtime.nsec));
  std::string out;
  ASSERT_EQ(f->Pread(0, 20000, &out), 0);
  EXPECT_EQ(out, "abc" + std::string(9997, '\0'));
  ASSERT_EQ(fs_->StatVolume("v", &v), 0);
  EXPECT_EQ(v.quota.bytes_used, 10000u);
  // Inside the size, or KEEP_SIZE past it: the size stays.
  ASSERT_EQ(f->Fallocate(0, 0, 5000), 0);
  ASSERT_EQ(f->Fallocate(FALLOC_FL_KEEP_SIZE, 0, 50000), 0);
  ASSERT_EQ(f->Fstat(&a), 0);
  EXPECT_EQ(a.size, 10000u);
  // Past the quota: EDQUOT, nothing changed.
  EXPECT_EQ(f->Fallocate(0, 0, 200000), EDQUOT);
  ASSERT_EQ(f->Fstat(&a), 0);
  EXPECT_EQ(a.size, 10000u);
  EXPECT_EQ(f->Fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 10), EOPNOTSUPP);
  EXPECT_EQ(f->Fallocate(FALLOC_FL_ZERO_RANGE, 0, 10), EOPNOTSUPP);
  EXPECT_EQ(f->Fallocate(0, 0, 0), EINVAL);
  EXPECT_EQ(f->Fallocate(0, kMaxFileSize, 1), EFBIG);
  EXPECT_EQ(fs_->Fallocate(StatOf("/v").ino, 0, 0, 1), EISDIR);
  ASSERT_EQ(Symlink("f", "/v/l"), 0);
  EXPECT_EQ(fs_->Fallocate(StatOf("/v/l").ino, 0, 0, 1), ENODEV);
  std::unique_ptr<File> ro;
  ASSERT_EQ(fs_->OpenPath("/v/f", O_RDONLY, 0, {}, &ro), 0);
  EXPECT_EQ(ro->Fallocate(0, 0, 1), EBADF);
  Fsck();
}

bool Found(const std::vector<std::string>& findings, const std::string& text) {
  for (const std::string& f : findings) {
    if (f.find(text) != std::string::npos) return true;
  }
  return false;
}

// Each kind of inconsistency, made by writing records by hand: fsck reports
// it; repair frees leaks and orphans and sets quotas right; violations it
// cannot repair stay reported until set right.
TEST_F(FsTest, FsckFindsAndRepairsEveryInconsistency) {
  VolumeInfo v;
  ASSERT_EQ(fs_->CreateVolume("vol", 1 << 20, 100, {}, &v), 0);
  ASSERT_EQ(Mkdir("/vol/d"), 0);
  ASSERT_EQ(WriteFile("/vol/d/f", std::string(10000, 'f')), 0);
  ASSERT_EQ(Link("/vol/d/f", "/vol/f2"), 0);
  ASSERT_EQ(Symlink("d/f", "/vol/link"), 0);
  ASSERT_EQ(Mkdir("/plain"), 0);
  ASSERT_EQ(WriteFile("/plain/g", "gg"), 0);
  // Unlinked while open: an orphan until the handle closes.
  std::unique_ptr<File> open_file;
  ASSERT_EQ(fs_->OpenPath("/plain/open", O_CREAT | O_RDWR, 0644, {}, &open_file), 0);
  ASSERT_EQ(open_file->Pwrite(0, "open"), 0);
  ASSERT_EQ(Unlink("/plain/open"), 0);
  const uint64_t open_ino = open_file->ino();

  // The listing under the checker refuses a table out of range and an
  // overlong page.
  std::vector<dsm::ObjectId> ids;
  const uint32_t tag = static_cast<uint32_t>(kRecordTag >> 32);
  EXPECT_EQ(client_->ListObj(0, tag, {}, 10, &ids).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ListObj(client_->table_count() + 1, tag, {}, 10, &ids).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ListObj(1, tag, {}, 4096, &ids).code(), StatusCode::kInvalidArgument);

  FsCheckReport r = Fsck(false);
  EXPECT_EQ(r.volumes, 1u);
  EXPECT_EQ(r.directories, 4u);  // the root, vol, vol/d, plain
  EXPECT_EQ(r.inodes, 4u + 4u);  // and f, link, g, the open orphan
  EXPECT_EQ(r.repairable.size(), 1u) << r.ToString();
  EXPECT_TRUE(Found(r.repairable, "inode " + std::to_string(open_ino) + ": an orphan"));

  const uint64_t f = StatOf("/vol/d/f").ino;
  const uint64_t g = StatOf("/plain/g").ino;
  const uint64_t plain = StatOf("/plain").ino;
  const uint64_t vol = StatOf("/vol").ino;
  // Repairable: a chunk past data_end, a chunk of no inode, an orphan not
  // on any list, a bucket outside its index, a quota record of a directory
  // that is no volume (not in the root); and the quota's usage wrong.
  ASSERT_TRUE(client_->PutObj(DataId(f, 3), "stale").ok());
  ASSERT_TRUE(client_->PutObj(DataId(424242, 0), "lost").ok());
  Inode lost;
  lost.ino = 777777;
  lost.mode = S_IFREG | 0644;
  lost.data_end = lost.size = 4;
  ASSERT_TRUE(client_->PutObj(InodeId(lost.ino), EncodeInode(lost)).ok());
  ASSERT_TRUE(client_->PutObj(DataId(lost.ino, 0), "data").ok());
  ASSERT_TRUE(client_->PutObj(DirBucketId(plain, 9), EncodeDirBucket({})).ok());
  const uint64_t d = StatOf("/vol/d").ino;
  ASSERT_TRUE(client_->PutObj(VolumeId(d), EncodeVolumeQuota({1, 1, 0, 0})).ok());
  // And a lock table of no inode (a dead client's lock on a removed file).
  LockTable stale_locks;
  stale_locks.entries = {{9, 1, 0, kLockEnd, 1, LockKind::kFlock, LockType::kWrite}};
  ASSERT_TRUE(client_->PutObj(LocksId(424243), EncodeLockTable(stale_locks)).ok());
  std::string data;
  VolumeQuota q;
  ASSERT_TRUE(client_->GetObj(VolumeId(vol), &data).ok());
  ASSERT_TRUE(DecodeVolumeQuota(data, &q).ok());
  const VolumeQuota right = q;
  q.bytes_used += 5;
  ASSERT_TRUE(client_->PutObj(VolumeId(vol), EncodeVolumeQuota(q)).ok());

  r = FsCheckReport{};
  ASSERT_TRUE(CheckFileSystem(client_.get(), &r).ok());
  EXPECT_TRUE(Found(r.repairable, "data chunk 3 of inode " + std::to_string(f) + ", past"))
      << r.ToString();
  EXPECT_TRUE(Found(r.repairable, "data chunk 0 of inode 424242, which does not exist"));
  EXPECT_TRUE(Found(r.repairable, "inode 777777: an orphan (no name, not even on"));
  EXPECT_TRUE(Found(r.repairable, "bucket 9 is not in its index"));
  EXPECT_TRUE(Found(r.repairable, "the quota record of inode " + std::to_string(d)));
  EXPECT_TRUE(Found(r.repairable, "the lock table of inode 424243, which does not exist"));
  ASSERT_EQ(r.violations.size(), 1u) << r.ToString();
  EXPECT_TRUE(Found(r.violations, "volume " + std::to_string(vol) + ": the quota says"));
  EXPECT_EQ(r.repairable.size(), 7u) << r.ToString();

  // The open file is repaired too (its handle is gone: fsck repairs only
  // files no client holds open).
  open_file.reset();
  ASSERT_TRUE(RepairFileSystem(client_.get(), fs_.get(), r).ok());
  Fsck();
  ASSERT_TRUE(client_->GetObj(VolumeId(vol), &data).ok());
  ASSERT_TRUE(DecodeVolumeQuota(data, &q).ok());
  EXPECT_EQ(q, right);
  uint64_t size = 0;
  EXPECT_EQ(client_->ObjSize(DataId(lost.ino, 0), &size).code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadFile("/vol/d/f"), std::string(10000, 'f'));  // nothing of value went

  // Violations: a wrong nlink, an unreachable directory, an entry whose
  // inode is gone, a directory whose parent pointer is wrong.
  Inode n;
  ASSERT_TRUE(client_->GetObj(InodeId(f), &data).ok());
  ASSERT_TRUE(DecodeInode(data, &n).ok());
  const Inode f_right = n;
  n.nlink = 5;
  ASSERT_TRUE(client_->PutObj(InodeId(f), EncodeInode(n)).ok());
  Inode stray;
  stray.ino = 888888;
  stray.mode = S_IFDIR | 0755;
  stray.nlink = 2;
  stray.parent = plain;
  ASSERT_TRUE(client_->PutObj(InodeId(stray.ino), EncodeInode(stray)).ok());
  ASSERT_TRUE(client_->GetObj(InodeId(g), &data).ok());
  ASSERT_TRUE(client_->DelObj(InodeId(g)).ok());
  const std::string g_record = data;
  ASSERT_TRUE(client_->GetObj(InodeId(d), &data).ok());
  const std::string d_record = data;
  ASSERT_TRUE(DecodeInode(data, &n).ok());
  n.parent = plain;
  ASSERT_TRUE(client_->PutObj(InodeId(d), EncodeInode(n)).ok());

  r = FsCheckReport{};
  ASSERT_TRUE(CheckFileSystem(client_.get(), &r).ok());
  EXPECT_TRUE(Found(r.violations, "inode " + std::to_string(f) + ": nlink 5, names 2"))
      << r.ToString();
  EXPECT_TRUE(Found(r.violations, "directory 888888 is not reachable from the root"));
  EXPECT_TRUE(Found(r.violations,
                    "entry \"g\" names inode " + std::to_string(g) + ", which does not exist"));
  EXPECT_TRUE(Found(r.violations, "directory " + std::to_string(d) + ": its parent pointer"));
  EXPECT_EQ(r.violations.size(), 4u) << r.ToString();
  // Repair leaves them (nothing it could do is known to be right).
  ASSERT_TRUE(RepairFileSystem(client_.get(), fs_.get(), r).ok());
  r = FsCheckReport{};
  ASSERT_TRUE(CheckFileSystem(client_.get(), &r).ok());
  EXPECT_EQ(r.violations.size(), 4u) << r.ToString();
  ASSERT_TRUE(client_->PutObj(InodeId(f), EncodeInode(f_right)).ok());
  ASSERT_TRUE(client_->DelObj(InodeId(stray.ino)).ok());
  ASSERT_TRUE(client_->PutObj(InodeId(g), g_record).ok());
  ASSERT_TRUE(client_->PutObj(InodeId(d), d_record).ok());
  Fsck();
  EXPECT_EQ(ReadFile("/plain/g"), "gg");  // its data was kept while its inode was gone
}

// --- advisory locks (docs/pdfs.md "Advisory locks") ---

// A FileSystem of its own client, beating its lock session every 100 ms
// and taking another session as lapsed after 30 of its beats unseen.
struct LockClient {
  std::unique_ptr<client::Client> client;
  std::unique_ptr<FileSystem> fs;
};

LockClient OpenLockClient(const LocalCluster& cluster) {
  LockClient c;
  Status s = client::Client::Open(
      client::TestClientOptions(cluster.monitor_address(), cluster.secret()), &c.client);
  EXPECT_TRUE(s.ok()) << s.ToString();
  FsOptions o;
  o.lock_beat_ms = 100;
  o.lock_lease_beats = 30;
  if (s.ok()) s = FileSystem::Open(c.client.get(), o, &c.fs);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

LockRequest Posix(uint64_t owner, uint64_t start, uint64_t end, LockType type) {
  LockRequest r;
  r.kind = LockKind::kPosix;
  r.type = type;
  r.owner = owner;
  r.pid = static_cast<uint32_t>(owner);
  r.start = start;
  r.end = end;
  return r;
}

LockRequest Flock(uint64_t owner, LockType type) {
  LockRequest r;
  r.kind = LockKind::kFlock;
  r.type = type;
  r.owner = owner;
  return r;
}

TEST_F(FsTest, LocksAcrossClients) {
  ASSERT_EQ(WriteFile("/f", "data"), 0);
  const uint64_t ino = StatOf("/f").ino;
  LockClient a = OpenLockClient(cluster_), b = OpenLockClient(cluster_);
  ASSERT_TRUE(a.fs && b.fs);
  // Byte ranges: a write lock of A keeps B's readers and writers out of
  // its range only; F_GETLK names it.
  ASSERT_EQ(a.fs->SetLock(ino, Posix(1, 0, 99, LockType::kWrite)), 0);
  LockEntry c;
  EXPECT_EQ(b.fs->SetLock(ino, Posix(1, 50, 60, LockType::kRead), &c), EAGAIN);
  EXPECT_EQ(c.start, 0u);
  EXPECT_EQ(c.end, 99u);
  EXPECT_EQ(c.pid, 1u);
  EXPECT_EQ(c.type, LockType::kWrite);
  ASSERT_EQ(b.fs->TestLock(ino, Posix(1, 99, kLockEnd, LockType::kRead), &c), 0);
  EXPECT_EQ(c.type, LockType::kWrite);
  ASSERT_EQ(b.fs->TestLock(ino, Posix(1, 100, kLockEnd, LockType::kWrite), &c), 0);
  EXPECT_EQ(c.type, LockType::kUnlock);
  ASSERT_EQ(b.fs->SetLock(ino, Posix(1, 100, kLockEnd, LockType::kWrite)), 0);
  // A's unlock of the middle splits its lock; B takes the hole.
  ASSERT_EQ(a.fs->SetLock(ino, Posix(1, 40, 59, LockType::kUnlock)), 0);
  ASSERT_EQ(b.fs->SetLock(ino, Posix(1, 40, 59, LockType::kWrite)), 0);
  EXPECT_EQ(b.fs->SetLock(ino, Posix(1, 39, 39, LockType::kRead)), EAGAIN);
  EXPECT_EQ(b.fs->SetLock(ino, Posix(1, 60, 60, LockType::kRead)), EAGAIN);
  // Two owners of one client conflict like owners of two.
  EXPECT_EQ(b.fs->SetLock(ino, Posix(2, 45, 45, LockType::kRead)), EAGAIN);
  // Readers share.
  ASSERT_EQ(a.fs->SetLock(ino, Posix(1, 0, 99, LockType::kUnlock)), 0);
  ASSERT_EQ(a.fs->SetLock(ino, Posix(1, 0, 9, LockType::kRead)), 0);
  ASSERT_EQ(b.fs->SetLock(ino, Posix(1, 0, 9, LockType::kRead)), 0);
  EXPECT_EQ(b.fs->SetLock(ino, Posix(1, 0, 9, LockType::kWrite)), EAGAIN);

  // flock: apart from POSIX locks; a refused conversion drops the lock
  // held, as in Linux.
  ASSERT_EQ(a.fs->SetLock(ino, Flock(7, LockType::kRead)), 0);
  ASSERT_EQ(b.fs->SetLock(ino, Flock(7, LockType::kRead)), 0);
  EXPECT_EQ(b.fs->SetLock(ino, Flock(7, LockType::kWrite)), EAGAIN);
  EXPECT_EQ(a.fs->SetLock(ino, Flock(7, LockType::kWrite)), 0);  // B's shared lock is gone
  EXPECT_EQ(b.fs->SetLock(ino, Flock(7, LockType::kRead)), EAGAIN);
  ASSERT_EQ(a.fs->SetLock(ino, Flock(7, LockType::kUnlock)), 0);
  ASSERT_EQ(b.fs->SetLock(ino, Flock(7, LockType::kRead)), 0);

  // Bad requests.
  EXPECT_EQ(a.fs->SetLock(ino, Posix(1, 10, 9, LockType::kRead)), EINVAL);
  LockRequest ranged_flock = Flock(1, LockType::kRead);
  ranged_flock.end = 5;
  EXPECT_EQ(a.fs->SetLock(ino, ranged_flock), EINVAL);
  EXPECT_EQ(a.fs->TestLock(ino, Posix(1, 0, 9, LockType::kUnlock), &c), EINVAL);

  // A client that ends frees its locks at once.
  b.fs.reset();
  EXPECT_EQ(a.fs->SetLock(ino, Posix(1, 0, kLockEnd, LockType::kWrite)), 0);
  EXPECT_EQ(a.fs->SetLock(ino, Flock(7, LockType::kWrite)), 0);
  a.fs.reset();
  Fsck();
}

// Lock calls of one client on one file racing: a lock granted while
// another owner's unlock runs is still released by its own unlock (the
// client's record of the files it holds locks on follows the commits'
// order; it once did not, and a closed file's flock stayed forever).
TEST_F(FsTest, ConcurrentLockCallsOfOneClientLeaveNoLockBehind) {
  ASSERT_EQ(WriteFile("/f", "data"), 0);
  const uint64_t ino = StatOf("/f").ino;
  LockClient a = OpenLockClient(cluster_), b = OpenLockClient(cluster_);
  ASSERT_TRUE(a.fs && b.fs);
  constexpr uint64_t kRounds = 200;
  std::atomic<int> failed{0};
  // Two processes lock and unlock bytes of their own, a new owner each
  // round (an owner gone, its leftover lock would stay).
  auto worker = [&](uint64_t byte) {
    for (uint64_t round = 1; round <= kRounds; ++round) {
      const uint64_t owner = round * 2 + byte;
      if (a.fs->SetLock(ino, Posix(owner, byte, byte, LockType::kWrite)) != 0 ||
          a.fs->SetLock(ino, Posix(owner, byte, byte, LockType::kUnlock)) != 0) {
        ++failed;
      }
    }
  };
  std::thread first(worker, 0), second(worker, 1);
  first.join();
  second.join();
  EXPECT_EQ(failed.load(), 0);
  LockEntry c;
  EXPECT_EQ(b.fs->SetLock(ino, Posix(1, 0, kLockEnd, LockType::kWrite), &c), 0)
      << "a lock of owner " << c.owner << " on byte " << c.start << " was left behind";
}

// A session nobody beats (its client died) lapses: a waiter frees its
// locks once it saw no beat for its lease, and drops the session.
TEST_F(FsTest, LapsedSessionsLocksAreFreed) {
  ASSERT_EQ(WriteFile("/f", "data"), 0);
  const uint64_t ino = StatOf("/f").ino;
  constexpr uint64_t kDead = 0x5eed;
  ASSERT_TRUE(client_->PutObj(SessionId(kDead), EncodeLockSession({3, 1, 99, "gone"})).ok());
  ASSERT_TRUE(client_->PutObj(SessionListId(), EncodeSessionList({{kDead}})).ok());
  LockTable t;
  t.entries = {{kDead, 1, 0, kLockEnd, 99, LockKind::kPosix, LockType::kWrite}};
  ASSERT_TRUE(client_->PutObj(LocksId(ino), EncodeLockTable(t)).ok());

  LockClient w = OpenLockClient(cluster_);
  ASSERT_TRUE(w.fs);
  LockEntry c;
  ASSERT_EQ(w.fs->SetLock(ino, Posix(1, 5, 5, LockType::kRead), &c), EAGAIN);
  EXPECT_EQ(c.pid, 99u);
  // Granted once the waiter's 30 beats (3 s) saw none of the dead one.
  const auto start = std::chrono::steady_clock::now();
  int err = EAGAIN;
  while (err == EAGAIN && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    err = w.fs->SetLock(ino, Posix(1, 5, 5, LockType::kRead));
  }
  ASSERT_EQ(err, 0);
  std::printf("the lapsed session's lock was freed after %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::string data;
  EXPECT_EQ(client_->GetObj(SessionId(kDead), &data).code(), StatusCode::kNotFound);
  ASSERT_TRUE(client_->GetObj(SessionListId(), &data).ok());
  SessionList list;
  ASSERT_TRUE(DecodeSessionList(data, &list).ok());
  EXPECT_EQ(list.sessions.size(), 1u);  // the waiter's own
  EXPECT_TRUE(std::find(list.sessions.begin(), list.sessions.end(), kDead) == list.sessions.end());
  Fsck();
}

}  // namespace
}  // namespace pdpm::pdfs
