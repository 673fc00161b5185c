// pdfs-fuse through a real FUSE mount on a real cluster: POSIX calls as
// root and as an unprivileged user, real programs with their own checks,
// and two mounts of one file system (close-to-open).
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/cluster_harness.h"
#include "common/test_scale.h"
#include "pdfs/client/file_system.h"
#include "pdfs/client/fs_check.h"
#include "pdfs/client/test_seed.h"

namespace pdpm::pdfs {
namespace {

using client::ChildProcess;
using client::LocalCluster;
using client::LocalClusterOptions;

constexpr long kFuseSuperMagic = 0x65735546;

LocalClusterOptions MountClusterOptions() {
  LocalClusterOptions o;
  o.segment_size = 64ull << 20;
  o.pm_size = (4 * 64 + 2) * (1ull << 20);
  return o;
}

// A pdfs-fuse process mounted on `dir`; unmounted on destruction.
class Mount {
 public:
  Mount(const LocalCluster& cluster, std::string dir, const std::string& volume = "")
      : dir_(std::move(dir)) {
    ::mkdir(dir_.c_str(), 0755);
    log_ = dir_ + ".log";
    std::vector<std::string> argv = {PDFS_FUSE_BINARY, "--monitor", cluster.monitor_address(),
                                     "--secret-file", cluster.secret_file(), "--mountpoint", dir_,
                                     // Lock sessions beat every 100 ms and
                                     // lapse after 30 beats unseen (3 s).
                                     "--lock-beat-ms", "100", "--lock-lease-beats", "30"};
    if (!volume.empty()) argv.insert(argv.end(), {"--volume", volume});
    Status s = proc_.Start(argv, {}, log_);
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (int i = 0; i < 400; ++i) {
      struct statfs st {};
      if (::statfs(dir_.c_str(), &st) == 0 && st.f_type == kFuseSuperMagic) {
        mounted_ = true;
        return;
      }
      int status = 0;
      if (proc_.Exited(&status)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "pdfs-fuse did not mount " << dir_ << ": " << client::FileTail(log_);
  }
  ~Mount() {
    if (stopped_) return;
    if (killed_) {
      // The dead connection's mount goes (lazily: the test may still hold
      // descriptors of it).
      const std::string cmd = "fusermount3 -u -z " + dir_;
      if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << cmd;  // NOLINT(cert-env33-c)
      return;
    }
    if (mounted_) {
      const std::string cmd = "fusermount3 -u " + dir_;
      if (std::system(cmd.c_str()) != 0) proc_.Signal(SIGTERM);  // NOLINT(cert-env33-c)
    }
    int status = 0;
    if (!proc_.WaitFor(20000, &status)) {
      ADD_FAILURE() << "pdfs-fuse did not exit: " << client::FileTail(log_) << "\n"
                    << client::ProcessStacks(proc_.pid());
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << client::FileTail(log_);
    }
  }
  const std::string& dir() const { return dir_; }
  bool mounted() const { return mounted_; }
  const std::string& log() const { return log_; }
  // Sends pdfs-fuse a stop signal; its exit status once it is gone (128 +
  // the signal if it is still running after 20 s: then it is killed).
  int Stop(int sig) {
    proc_.Signal(sig);
    int status = 0;
    if (!proc_.WaitFor(20000, &status)) {
      ADD_FAILURE() << "pdfs-fuse did not exit on signal " << sig << ": " << client::FileTail(log_)
                    << "\n"
                    << client::ProcessStacks(proc_.pid());
      Kill();
      return 128 + sig;
    }
    stopped_ = true;
    return status;
  }
  // kill -9 of pdfs-fuse: its mount answers ENOTCONN from then on.
  void Kill() {
    proc_.Signal(SIGKILL);
    int status = 0;
    proc_.WaitFor(20000, &status);
    killed_ = true;
  }

 private:
  std::string dir_, log_;
  ChildProcess proc_;
  bool mounted_ = false;
  bool killed_ = false;
  bool stopped_ = false;
};

class FuseMountTest : public ::testing::Test {
 protected:
  FuseMountTest() : cluster_(MountClusterOptions()) {}
  void SetUp() override {
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no usable /dev/fuse here";
    Status s = cluster_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    mount_ = std::make_unique<Mount>(cluster_, cluster_.dir() + "/mnt");
    ASSERT_TRUE(mount_->mounted());
    root_ = mount_->dir();
  }
  void TearDown() override { mount_.reset(); }

  std::string P(const std::string& rel) const { return root_ + "/" + rel; }

  // A cluster client of the test's own (for fsck).
  void OpenClient(std::unique_ptr<client::Client>* out) {
    Status s = client::Client::Open(
        client::TestClientOptions(cluster_.monitor_address(), cluster_.secret()), out);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  static bool WriteAll(const std::string& path, const std::string& data, int flags = O_TRUNC) {
    int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | flags, 0644);
    if (fd < 0) return false;
    bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
    return ::close(fd) == 0 && ok;
  }
  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Runs a bash script (with -e); its output is in the failure message.
  int Sh(const std::string& script) {
    const std::string file = cluster_.dir() + "/script.sh", out = cluster_.dir() + "/script.out";
    std::ofstream(file) << "set -e\n" << script << "\n";
    const std::string cmd = "bash " + file + " > " + out + " 2>&1";
    const auto start = std::chrono::steady_clock::now();
    int status = std::system(cmd.c_str());  // NOLINT(cert-env33-c)
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::printf("%.1f s: %.60s...\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                script.c_str());
    if (rc != 0) ADD_FAILURE() << script << "\nfailed:\n" << client::FileTail(out, 4000);
    return rc;
  }

  LocalCluster cluster_;
  std::unique_ptr<Mount> mount_;
  std::string root_;
};

#define EXPECT_ERRNO(call, err)               \
  do {                                        \
    errno = 0;                                \
    EXPECT_EQ((call), -1) << #call;           \
    EXPECT_EQ(errno, err) << strerror(errno); \
  } while (0)

TEST_F(FuseMountTest, PosixCallsAsRoot) {
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  EXPECT_ERRNO(::mkdir(P("d").c_str(), 0755), EEXIST);
  EXPECT_ERRNO(::mkdir(P(std::string(256, 'n')).c_str(), 0755), ENAMETOOLONG);
  EXPECT_ERRNO(::open(P("d/missing").c_str(), O_RDONLY), ENOENT);
  // Writes of 1 MiB and more, read back.
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 4096);
  int fd = ::open(P("d/f").c_str(), O_CREAT | O_EXCL | O_RDWR, 0640);
  ASSERT_GE(fd, 0);
  EXPECT_ERRNO(::open(P("d/f").c_str(), O_CREAT | O_EXCL | O_RDWR, 0640), EEXIST);
  ASSERT_EQ(::pwrite(fd, big.data(), big.size(), 0), static_cast<ssize_t>(big.size()));
  std::string back(big.size(), 'x');
  ASSERT_EQ(::pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
  EXPECT_TRUE(back == big);
  ASSERT_EQ(::fsync(fd), 0);
  ASSERT_EQ(::ftruncate(fd, 10), 0);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 10);
  EXPECT_EQ(st.st_mode, S_IFREG | 0640u);
  ASSERT_EQ(::close(fd), 0);
  // O_APPEND.
  ASSERT_TRUE(WriteAll(P("d/f"), "tail", O_APPEND));
  EXPECT_EQ(ReadAll(P("d/f")), big.substr(0, 10) + "tail");
  // Links, renames, errors.
  ASSERT_EQ(::symlink("f", P("d/sym").c_str()), 0);
  char target[64] = {};
  ASSERT_EQ(::readlink(P("d/sym").c_str(), target, sizeof(target)), 1);
  EXPECT_STREQ(target, "f");
  ASSERT_EQ(::link(P("d/f").c_str(), P("d/hard").c_str()), 0);
  ASSERT_EQ(::stat(P("d/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_EQ(::mkdir(P("d/sub").c_str(), 0755), 0);
  EXPECT_ERRNO(::rename(P("d").c_str(), P("d/sub/x").c_str()), EINVAL);
  EXPECT_ERRNO(::rmdir(P("d").c_str()), ENOTEMPTY);
  EXPECT_ERRNO(::rmdir(P("d/f").c_str()), ENOTDIR);
  EXPECT_ERRNO(::unlink(P("d/sub").c_str()), EISDIR);
  EXPECT_ERRNO(::open(P("d/f/x").c_str(), O_RDONLY), ENOTDIR);
  ASSERT_EQ(::rename(P("d/hard").c_str(), P("d/sub/hard").c_str()), 0);
  ASSERT_EQ(::chmod(P("d/sub/hard").c_str(), 0600), 0);
  ASSERT_EQ(::chown(P("d/sub/hard").c_str(), 123, 456), 0);
  ASSERT_EQ(::stat(P("d/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode, S_IFREG | 0600u);
  EXPECT_EQ(st.st_uid, 123u);
  EXPECT_EQ(st.st_gid, 456u);
  ASSERT_EQ(::mkfifo(P("d/fifo").c_str(), 0600), 0);
  ASSERT_EQ(::lstat(P("d/fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  // xattrs.
  ASSERT_EQ(::setxattr(P("d/f").c_str(), "user.k", "v1", 2, XATTR_CREATE), 0);
  EXPECT_ERRNO(::setxattr(P("d/f").c_str(), "user.k", "v1", 2, XATTR_CREATE), EEXIST);
  char value[16] = {};
  ASSERT_EQ(::getxattr(P("d/f").c_str(), "user.k", value, sizeof(value)), 2);
  EXPECT_STREQ(value, "v1");
  EXPECT_ERRNO(::getxattr(P("d/f").c_str(), "user.none", value, sizeof(value)), ENODATA);
  // Readdir (readdirplus) with . and ..
  std::set<std::string> names;
  DIR* dir = ::opendir(P("d").c_str());
  ASSERT_NE(dir, nullptr);
  while (dirent* e = ::readdir(dir)) names.insert(e->d_name);
  ::closedir(dir);
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "f", "sym", "sub", "fifo"}));
  // An unlinked file stays readable while open.
  fd = ::open(P("d/f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::unlink(P("d/f").c_str()), 0);
  ASSERT_EQ(::unlink(P("d/sub/hard").c_str()), 0);
  char buf[4];
  EXPECT_EQ(::pread(fd, buf, 4, 10), 4);
  EXPECT_EQ(std::string(buf, 4), "tail");
  ::close(fd);
  // fallocate: mode 0 grows the size, KEEP_SIZE keeps it, other modes are
  // not supported.
  fd = ::open(P("falloc").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::fallocate(fd, 0, 4096, 8192), 0) << strerror(errno);
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 100000), 0) << strerror(errno);
  EXPECT_ERRNO(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 10), EOPNOTSUPP);
  struct stat fst {};
  ASSERT_EQ(::fstat(fd, &fst), 0);
  EXPECT_EQ(fst.st_size, 12288);
  ::close(fd);
  // df of the whole file system: the cluster's room for data.
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(root_.c_str(), &vfs), 0);
  EXPECT_GT(vfs.f_blocks, 0u);
  EXPECT_LE(vfs.f_bfree, vfs.f_blocks);
  EXPECT_EQ(vfs.f_namemax, 255u);
}

// An unprivileged user (nobody): mode bits of files and directories (read,
// write, search), ownership (chmod, chown, chgrp, times, xattrs), sticky
// and set-group-ID directories, as the kernel checks them on pDFS's
// attributes: every refusal with its errno (EACCES, EPERM).
TEST_F(FuseMountTest, PermissionsOfAnUnprivilegedUser) {
  ASSERT_EQ(::mkdir(P("private").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(P("tmp").c_str(), 01777), 0);
  ASSERT_EQ(::chmod(P("tmp").c_str(), 01777), 0);
  ASSERT_TRUE(WriteAll(P("tmp/roots"), "r"));
  ASSERT_EQ(::mkdir(P("group").c_str(), 0777), 0);
  ASSERT_EQ(::chown(P("group").c_str(), 0, 4242), 0);
  ASSERT_EQ(::chmod(P("group").c_str(), 02777), 0);
  ASSERT_TRUE(WriteAll(P("readonly"), "ro"));
  ASSERT_EQ(::chmod(P("readonly").c_str(), 0644), 0);
  ASSERT_EQ(::mkdir(P("shut").c_str(), 0755), 0);
  ASSERT_TRUE(WriteAll(P("shut/inside"), "i"));
  ASSERT_EQ(::mkdir(P("tmp/rootdir").c_str(), 0777), 0);
  ASSERT_EQ(::mkdir(P("noexec").c_str(), 0766), 0);
  ASSERT_EQ(::chmod(P("noexec").c_str(), 0766), 0);
  ASSERT_TRUE(WriteAll(P("noexec/f"), "f"));
  // The cluster's directory is private (mkdtemp): let others through to
  // the mount.
  ASSERT_EQ(::chmod(cluster_.dir().c_str(), 0711), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child reports a failed check by its exit code (the line number).
    auto fail = [](int line) {
      fprintf(stderr, "unprivileged check at line %d failed: %s\n", line, strerror(errno));
      _exit(line % 250 + 1);
    };
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) fail(__LINE__);
    errno = 0;
    if (::open(P("private/x").c_str(), O_CREAT | O_WRONLY, 0644) >= 0 || errno != EACCES) {
      fail(__LINE__);
    }
    if (::open(P("readonly").c_str(), O_WRONLY) >= 0 || errno != EACCES) fail(__LINE__);
    if (::chmod(P("readonly").c_str(), 0777) == 0 || errno != EPERM) fail(__LINE__);
    if (::chown(P("tmp/roots").c_str(), 65534, 65534) == 0 || errno != EPERM) fail(__LINE__);
    // No read on a directory: no listing; no search: nothing inside.
    if (::opendir(P("private").c_str()) != nullptr || errno != EACCES) fail(__LINE__);
    struct stat st {};
    if (::stat(P("noexec/f").c_str(), &st) == 0 || errno != EACCES) fail(__LINE__);
    // No write on a directory: no create, mkdir, unlink, rename out of it,
    // link or symlink into it.
    if (::mkdir(P("shut/d").c_str(), 0755) == 0 || errno != EACCES) fail(__LINE__);
    if (::unlink(P("shut/inside").c_str()) == 0 || errno != EACCES) fail(__LINE__);
    if (::rename(P("shut/inside").c_str(), P("tmp/inside").c_str()) == 0 || errno != EACCES) {
      fail(__LINE__);
    }
    if (::symlink("x", P("shut/link").c_str()) == 0 || errno != EACCES) fail(__LINE__);
    if (::mkfifo(P("shut/fifo").c_str(), 0644) == 0 || errno != EACCES) fail(__LINE__);
    // Another's file without write permission: no truncate, no times of
    // one's choosing (EPERM) nor the current time (EACCES), no user xattr.
    if (::truncate(P("readonly").c_str(), 0) == 0 || errno != EACCES) fail(__LINE__);
    const struct timespec times[2] = {{1, 0}, {2, 0}};
    if (::utimensat(AT_FDCWD, P("readonly").c_str(), times, 0) == 0 || errno != EPERM) {
      fail(__LINE__);
    }
    if (::utimensat(AT_FDCWD, P("readonly").c_str(), nullptr, 0) == 0 || errno != EACCES) {
      fail(__LINE__);
    }
    if (::setxattr(P("readonly").c_str(), "user.k", "v", 1, 0) == 0 || errno != EACCES) {
      fail(__LINE__);
    }
    // Its own file: chmod and times fine; giving it away or to a group it
    // is not in is EPERM.
    if (!WriteAll(P("tmp/own"), "o")) fail(__LINE__);
    if (::chmod(P("tmp/own").c_str(), 0600) != 0) fail(__LINE__);
    if (::utimensat(AT_FDCWD, P("tmp/own").c_str(), times, 0) != 0) fail(__LINE__);
    if (::stat(P("tmp/own").c_str(), &st) != 0 || st.st_mtime != 2 ||
        st.st_mode != (S_IFREG | 0600)) {
      fail(__LINE__);
    }
    if (::chown(P("tmp/own").c_str(), 0, static_cast<gid_t>(-1)) == 0 || errno != EPERM)
      fail(__LINE__);
    if (::chown(P("tmp/own").c_str(), static_cast<uid_t>(-1), 4242) == 0 || errno != EPERM) {
      fail(__LINE__);
    }
    if (::setxattr(P("tmp/own").c_str(), "user.k", "v", 1, 0) != 0) fail(__LINE__);
    // Sticky directory: another's empty directory cannot be removed.
    if (::rmdir(P("tmp/rootdir").c_str()) == 0 || errno != EPERM) fail(__LINE__);
    if (::unlink(P("tmp/own").c_str()) != 0) fail(__LINE__);
    // Sticky: may create and remove its own, not root's.
    if (!WriteAll(P("tmp/mine"), "m")) fail(__LINE__);
    if (::unlink(P("tmp/roots").c_str()) == 0 || errno != EPERM) fail(__LINE__);
    if (::rename(P("tmp/roots").c_str(), P("tmp/stolen").c_str()) == 0 || errno != EPERM) {
      fail(__LINE__);
    }
    if (::unlink(P("tmp/mine").c_str()) != 0) fail(__LINE__);
    // Set-group-ID directory: new files take its group.
    if (!WriteAll(P("group/file"), "g")) fail(__LINE__);
    if (::stat(P("group/file").c_str(), &st) != 0 || st.st_gid != 4242 || st.st_uid != 65534) {
      fail(__LINE__);
    }
    if (::mkdir(P("group/sub").c_str(), 0755) != 0) fail(__LINE__);
    if (::stat(P("group/sub").c_str(), &st) != 0 || (st.st_mode & S_ISGID) == 0) fail(__LINE__);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "the check failing near line " << WEXITSTATUS(status) - 1 << " (mod 250) of this file";
  EXPECT_EQ(ReadAll(P("tmp/roots")), "r");
  EXPECT_EQ(ReadAll(P("shut/inside")), "i");
  EXPECT_EQ(ReadAll(P("readonly")), "ro");
  struct stat st {};
  EXPECT_EQ(::stat(P("tmp/rootdir").c_str(), &st), 0);
  EXPECT_EQ(::stat(P("shut/d").c_str(), &st), -1);
}

// Runs `body` as the unprivileged user 65534 (no groups) in a child
// process; its exit code: 0, or the line of the first failed check (mod 250,
// + 1) that `body` passes to `fail`.
template <typename Body>
int AsNobody(Body body) {
  pid_t pid = fork();
  if (pid < 0) return 255;
  if (pid == 0) {
    auto fail = [](int line) {
      fprintf(stderr, "unprivileged check at line %d failed: %s\n", line, strerror(errno));
      _exit(line % 250 + 1);
    };
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) fail(__LINE__);
    body(fail);
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 255;
  return WEXITSTATUS(status);
}

// POSIX ACLs through the mount (docs/pdfs.md "POSIX ACLs"): setfacl and
// getfacl as root, the kernel enforcing them for an unprivileged user, the
// mode and the ACL in step, default ACLs inherited instead of the umask.
TEST_F(FuseMountTest, PosixAclsAsRootAndAnUnprivilegedUser) {
  ASSERT_EQ(::chmod(cluster_.dir().c_str(), 0711), 0);  // others reach the mount
  EXPECT_EQ(Sh("cd " + P("") +
               " && umask 022 && mkdir acl && cd acl"
               // A named user's entry; the group bits show the mask.
               " && echo data > f && chmod 600 f && setfacl -m u:65534:rw f"
               " && getfacl -n f | grep -qx user:65534:rw- && test $(stat -c %a f) = 660"
               // chmod changes the mask, and the entry's effective rights.
               " && chmod 640 f && getfacl -n f | grep -qx mask::r--"
               " && getfacl -n f | grep -q '^user:65534:rw-.*#effective:r--$'"
               " && setfacl -m m::rw f && test $(stat -c %a f) = 660"
               " && echo data > only_read && chmod 600 only_read && setfacl -m u:65534:r only_read"
               " && echo data > masked && chmod 600 masked && setfacl -m u:65534:rw,m::r masked"
               " && echo data > none && chmod 600 none"
               // A default ACL: inherited, and the umask does not apply.
               " && mkdir d && setfacl -m u:65534:rwx d && setfacl -d -m u:65534:rwx,o::- d"
               " && getfacl -n -d d | grep -qx user:65534:rwx"
               " && (umask 077 && touch d/new && mkdir d/sub)"
               " && test $(stat -c %a d/new) = 660"
               " && getfacl -n d/new | grep -q '^user:65534:rwx.*#effective:rw-$'"
               " && test $(stat -c %a d/sub) = 770 && getfacl -n -d d/sub | grep -qx user:65534:rwx"
               // Without one, the umask does.
               " && (umask 027 && touch plain) && test $(stat -c %a plain) = 640"
               " && getfacl -n plain | (! grep -q user:65534)"),
            0);
  const std::string dir = P("acl");
  EXPECT_EQ(
      AsNobody([&](auto fail) {
        int fd = ::open((dir + "/f").c_str(), O_RDWR);
        if (fd < 0 || ::write(fd, "x", 1) != 1 || ::close(fd) != 0) fail(__LINE__);
        if (::open((dir + "/only_read").c_str(), O_WRONLY) >= 0 || errno != EACCES) {
          fail(__LINE__);
        }
        fd = ::open((dir + "/only_read").c_str(), O_RDONLY);
        if (fd < 0 || ::close(fd) != 0) fail(__LINE__);
        // The mask limits the named entry.
        if (::open((dir + "/masked").c_str(), O_WRONLY) >= 0 || errno != EACCES) {
          fail(__LINE__);
        }
        if (::open((dir + "/none").c_str(), O_RDONLY) >= 0 || errno != EACCES) fail(__LINE__);
        // Created in the directory its ACL lets it write to, under the
        // default ACL (the umask does not apply).
        ::umask(077);
        fd = ::open((dir + "/d/mine").c_str(), O_CREAT | O_WRONLY, 0666);
        struct stat st {};
        if (fd < 0 || ::fstat(fd, &st) != 0 || ::close(fd) != 0) fail(__LINE__);
        if (st.st_uid != 65534 || (st.st_mode & 07777) != 0660) fail(__LINE__);
        fd = ::open((dir + "/d/new").c_str(), O_WRONLY);
        if (fd < 0 || ::close(fd) != 0) fail(__LINE__);
        // Its own file: setfacl and getfacl as this user (the mask,
        // recomputed, is the group entry's r-x with the entries' rwx).
        const std::string own = dir + "/d/mine";
        const std::string cmd = "setfacl -m u:4242:r " + own + " && getfacl -n " + own +
                                " | grep -qx user:4242:r-- && test $(stat -c %a " + own + ") = 670";
        if (std::system(cmd.c_str()) != 0) fail(__LINE__);  // NOLINT(cert-env33-c)
        // Not the owner: no ACL changes.
        if (::removexattr((dir + "/f").c_str(), "system.posix_acl_access") == 0 || errno != EPERM) {
          fail(__LINE__);
        }
      }),
      0);
  // Root takes the named entry away: refused at once.
  EXPECT_EQ(Sh("cd " + dir + " && setfacl -b only_read && test $(stat -c %a only_read) = 600" +
               " && getfacl -n only_read | (! grep -q user:65534)"),
            0);
  EXPECT_EQ(AsNobody([&](auto fail) {
              if (::open((dir + "/only_read").c_str(), O_RDONLY) >= 0 || errno != EACCES) {
                fail(__LINE__);
              }
            }),
            0);
  char value[64];
  errno = 0;
  EXPECT_EQ(
      ::getxattr((dir + "/only_read").c_str(), "system.posix_acl_access", value, sizeof(value)),
      -1);
  EXPECT_EQ(errno, ENODATA);  // a minimal ACL is the mode alone
}

// Real programs with their own checks.
TEST_F(FuseMountTest, RealPrograms) {
  const std::string src = PDPM_SOURCE_DIR;
  // tar round trip, compared with diff -r.
  EXPECT_EQ(Sh("mkdir " + P("tar") + " && tar -C " + src + "/src -cf - common dsm | tar -C " +
               P("tar") + " -xf - && diff -r " + src + "/src/common " + P("tar/common") +
               " && diff -r " + src + "/src/dsm " + P("tar/dsm")),
            0);
  // git: a repository with history, then git fsck.
  EXPECT_EQ(Sh("cd " + P("") + " && git init -q repo && cd repo && cp -r " + P("tar/common") +
               " . && git add -A && git -c user.name=t -c user.email=t@t commit -qm one && "
               "echo more >> common/log.h && git -c user.name=t -c user.email=t@t commit -qam two"
               " && git fsck --full --strict && git gc -q && git fsck --full && test "
               "$(git rev-list --count HEAD) = 2"),
            0);
  // git clone of a local repository onto the mount (objects copied by the
  // pack protocol, not hard-linked), git fsck there, and a clone back off
  // the mount checked the same way and compared.
  const std::string origin = cluster_.dir() + "/origin", back = cluster_.dir() + "/back";
  EXPECT_EQ(Sh("git init -q " + origin + " && cp -r " + src + "/src/pdfs " + src + "/src/common " +
               origin + " && cd " + origin +
               " && git add -A && git -c user.name=t -c user.email=t@t commit -qm one && "
               "rm -r common/status.h && echo change >> pdfs/CMakeLists.txt && git add -A && "
               "git -c user.name=t -c user.email=t@t commit -qm two && git clone -q --no-local " +
               origin + " " + P("clone") + " && cd " + P("clone") +
               " && git fsck --full --strict && test $(git rev-list --count HEAD) = 2 && "
               "git status --porcelain | (! grep .) && git clone -q --no-local " +
               P("clone") + " " + back + " && git -C " + back +
               " fsck --full --strict && diff -r -x .git " + origin + " " + back +
               " && diff -r -x .git " + origin + " " + P("clone")),
            0);
  // rsync -a (with hard links) onto the mount, then a checksumming dry run
  // finds nothing to change: contents, modes, times, links all arrived.
  const std::string tree = cluster_.dir() + "/tree";
  EXPECT_EQ(
      Sh("mkdir -p " + tree + "/sub/deeper && cp -r " + src + "/src/pdfs " + tree +
         " && echo data > " + tree + "/sub/file && ln " + tree + "/sub/file " + tree +
         "/hardlink && ln -s sub/file " + tree + "/symlink && ln -s missing " + tree +
         "/dangling && chmod 0640 " + tree + "/sub/file && chmod 0711 " + tree +
         "/sub/deeper && touch -d 2001-02-03T04:05:06 " + tree + "/sub/file && rsync -aH " + tree +
         "/ " + P("rsync") +
         "/ && test -z \"$(rsync -aHc --dry-run "
         "--itemize-changes " +
         tree + "/ " + P("rsync") + "/)\" && diff -r --no-dereference " + tree + " " + P("rsync") +
         " && test $(stat -c %h " + P("rsync/hardlink") + ") = 2 && test $(stat -c %Y " +
         P("rsync/sub/file") + ") = $(stat -c %Y " + tree + "/sub/file)"),
      0);
  // make: a small C project, built, run, rebuilt after a change.
  EXPECT_EQ(Sh("mkdir " + P("cproj") + " && cd " + P("cproj") +
               " && printf \"int twice(int x);\\n\" > lib.h"
               " && printf \"#include \\\"lib.h\\\"\\nint twice(int x) { return 2 * x; }\\n\" > "
               "lib.c && printf \"#include \\\"lib.h\\\"\\nint main(void) { return twice(21) "
               "== 42 ? 0 : 1; }\\n\" > main.c && printf "
               "\"app: main.o lib.o\\n\\tcc -o app main.o lib.o\\n%%.o: %%.c lib.h\\n\\tcc -c "
               "$<\\n\" > Makefile && make -s && ./app && touch lib.h && make -s && ./app"),
            0);
  // SQLite: three concurrent writers, then its integrity check.
  const std::string inserts = std::to_string(ScaledForTest(40, 10));
  EXPECT_EQ(Sh("cd " + P("") +
               " && sqlite3 db.sqlite \"create table t(k integer primary key, "
               "v text);\" && for w in 1 2 3; do (for i in $(seq 1 " +
               inserts +
               "); do "
               "sqlite3 -cmd \".timeout 20000\" db.sqlite \"insert into t(v) "
               "values(\\\"w$w-$i\\\");\"; done) & done; wait; test $(sqlite3 "
               "db.sqlite \"select count(*) from t;\") = $((3 * " +
               inserts +
               ")) && test $(sqlite3 "
               "db.sqlite \"pragma integrity_check;\") = ok"),
            0);
}

// --- advisory locks across mounts (docs/pdfs.md "Advisory locks") ---

struct flock Range(short type, off_t start, off_t len) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = start;
  l.l_len = len;
  return l;
}

int SetLk(int fd, short type, off_t start, off_t len, int cmd = F_SETLK) {
  struct flock l = Range(type, start, len);
  return ::fcntl(fd, cmd, &l);
}

// A forked child running `body` (async-signal-safe calls only: the test
// process has threads); its exit status.
template <typename Fn>
pid_t Fork(Fn body) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  return pid;
}

int ExitCode(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ExitCode, or -2 (and the child killed) when it runs longer than `seconds`.
int ExitCodeWithin(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ExitCode(pid);
  return -2;
}

// Two mounts (two clients) contend for flock and fcntl locks of one file:
// conflicts, F_GETLK, ranges, OFD locks released with their file, POSIX
// locks released by any close of the process, waits granted when the lock
// goes and ended by signals.
TEST_F(FuseMountTest, LocksAcrossTwoMounts) {
  Mount other(cluster_, cluster_.dir() + "/mnt2");
  ASSERT_TRUE(other.mounted());
  ASSERT_TRUE(WriteAll(P("locked"), std::string(200, 'x')));
  const std::string b_path = other.dir() + "/locked";
  int a = ::open(P("locked").c_str(), O_RDWR);
  int b = ::open(b_path.c_str(), O_RDWR);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);

  // flock.
  ASSERT_EQ(::flock(a, LOCK_EX | LOCK_NB), 0);
  EXPECT_ERRNO(::flock(b, LOCK_SH | LOCK_NB), EWOULDBLOCK);
  ASSERT_EQ(::flock(a, LOCK_SH), 0);  // a conversion
  ASSERT_EQ(::flock(b, LOCK_SH | LOCK_NB), 0);
  EXPECT_ERRNO(::flock(a, LOCK_EX | LOCK_NB), EWOULDBLOCK);  // and lost its lock, as Linux
  ASSERT_EQ(::flock(b, LOCK_UN), 0);
  ASSERT_EQ(::flock(a, LOCK_EX | LOCK_NB), 0);
  // flock and fcntl locks do not meet.
  ASSERT_EQ(SetLk(b, F_WRLCK, 0, 0), 0);
  ASSERT_EQ(SetLk(b, F_UNLCK, 0, 0), 0);
  ASSERT_EQ(::flock(a, LOCK_UN), 0);

  // fcntl byte ranges and F_GETLK across mounts.
  ASSERT_EQ(SetLk(a, F_WRLCK, 0, 10), 0);
  EXPECT_ERRNO(SetLk(b, F_RDLCK, 5, 1), EAGAIN);
  struct flock probe = Range(F_RDLCK, 5, 100);
  ASSERT_EQ(::fcntl(b, F_GETLK, &probe), 0);
  EXPECT_EQ(probe.l_type, F_WRLCK);
  EXPECT_EQ(probe.l_start, 0);
  EXPECT_EQ(probe.l_len, 10);
  ASSERT_EQ(SetLk(b, F_WRLCK, 10, 10), 0);
  probe = Range(F_WRLCK, 20, 0);
  ASSERT_EQ(::fcntl(a, F_GETLK, &probe), 0);
  EXPECT_EQ(probe.l_type, F_UNLCK);
  // An unlock in the middle splits the lock.
  ASSERT_EQ(SetLk(a, F_UNLCK, 3, 2), 0);
  ASSERT_EQ(SetLk(b, F_WRLCK, 3, 2), 0);
  EXPECT_ERRNO(SetLk(b, F_WRLCK, 2, 1), EAGAIN);
  EXPECT_ERRNO(SetLk(b, F_WRLCK, 5, 1), EAGAIN);
  ASSERT_EQ(SetLk(b, F_UNLCK, 0, 0), 0);

  // POSIX: any close of the file by the process releases its locks.
  int a2 = ::open(P("locked").c_str(), O_RDONLY);
  ASSERT_GE(a2, 0);
  ASSERT_EQ(::close(a2), 0);
  ASSERT_EQ(SetLk(b, F_WRLCK, 0, 10), 0);
  ASSERT_EQ(SetLk(b, F_UNLCK, 0, 0), 0);

  // OFD locks belong to the open file: a second open of the same process
  // conflicts, and the lock goes when that file is closed.
  int ofd = ::open(P("locked").c_str(), O_RDWR);
  ASSERT_GE(ofd, 0);
  struct flock o = Range(F_WRLCK, 100, 10);
  ASSERT_EQ(::fcntl(ofd, F_OFD_SETLK, &o), 0);
  int ofd2 = ::open(P("locked").c_str(), O_RDWR);
  ASSERT_GE(ofd2, 0);
  o = Range(F_RDLCK, 105, 1);
  EXPECT_ERRNO(::fcntl(ofd2, F_OFD_SETLK, &o), EAGAIN);
  EXPECT_ERRNO(SetLk(b, F_RDLCK, 105, 1), EAGAIN);
  ASSERT_EQ(::close(ofd2), 0);  // not the locking file: the lock stays
  EXPECT_ERRNO(SetLk(b, F_RDLCK, 105, 1), EAGAIN);
  ASSERT_EQ(::close(ofd), 0);
  // The kernel sends FUSE's release after close(2) returned (asynchronously):
  // the lock goes then.
  int err = EAGAIN;
  for (int i = 0; i < 600 && err == EAGAIN; ++i) {
    err = SetLk(b, F_RDLCK, 105, 1) == 0 ? 0 : errno;
    if (err == EAGAIN) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(err, 0) << strerror(err);
  ASSERT_EQ(SetLk(b, F_UNLCK, 0, 0), 0);

  // A wait (F_SETLKW from another process on the other mount) is granted
  // when the holder unlocks, not before.
  ASSERT_EQ(SetLk(a, F_WRLCK, 0, 0), 0);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t waiter = Fork([&] {
    int fd = ::open(b_path.c_str(), O_RDWR);
    if (fd < 0 || SetLk(fd, F_WRLCK, 0, 0, F_SETLKW) != 0) return 1;
    char c = 'g';
    return ::write(pipefd[1], &c, 1) == 1 ? 0 : 2;
  });
  ::close(pipefd[1]);
  pollfd pfd{pipefd[0], POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 500), 0) << "granted while the lock was held";
  ASSERT_EQ(SetLk(a, F_UNLCK, 0, 0), 0);
  EXPECT_EQ(::poll(&pfd, 1, 60000), 1) << "not granted after the unlock";
  EXPECT_EQ(ExitCode(waiter), 0);
  ::close(pipefd[0]);

  // A wait is ended by a signal (EINTR; the timer repeats, so it ends the
  // wait however late the child reaches it) and by SIGKILL.
  ASSERT_EQ(SetLk(a, F_WRLCK, 0, 0), 0);
  pid_t alarmed = Fork([&] {
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    ::sigaction(SIGALRM, &sa, nullptr);  // no SA_RESTART
    itimerval every{{0, 200000}, {0, 200000}};
    ::setitimer(ITIMER_REAL, &every, nullptr);
    int fd = ::open(b_path.c_str(), O_RDWR);
    if (fd < 0) return 1;
    return SetLk(fd, F_WRLCK, 0, 0, F_SETLKW) == -1 && errno == EINTR ? 0 : 2;
  });
  EXPECT_EQ(ExitCodeWithin(alarmed, 60), 0);
  pid_t blocked = Fork([&] {
    int fd = ::open(b_path.c_str(), O_RDWR);
    if (fd < 0) return 1;
    SetLk(fd, F_WRLCK, 0, 0, F_SETLKW);
    return 2;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(blocked, SIGKILL);
  EXPECT_EQ(ExitCodeWithin(blocked, 60), 128 + SIGKILL);
  ASSERT_EQ(SetLk(a, F_UNLCK, 0, 0), 0);
  // Nothing of the dead waiter's is left: b locks everything.
  ASSERT_EQ(SetLk(b, F_WRLCK, 0, 0), 0);
  ::close(a);
  ::close(b);
}

// kill -9 of a mount's pdfs-fuse: its lock session stops beating, and the
// other mount frees its locks once it saw no beat for 30 of its own (3 s
// here): a waiter there is granted the lock.
TEST_F(FuseMountTest, KilledMountsLocksAreFreed) {
  ASSERT_TRUE(WriteAll(P("f"), "data"));
  auto other = std::make_unique<Mount>(cluster_, cluster_.dir() + "/mnt2");
  ASSERT_TRUE(other->mounted());
  int held = ::open((other->dir() + "/f").c_str(), O_RDWR);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  ASSERT_EQ(SetLk(held, F_WRLCK, 0, 0), 0);
  int fd = ::open(P("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_ERRNO(::flock(fd, LOCK_EX | LOCK_NB), EWOULDBLOCK);
  EXPECT_ERRNO(SetLk(fd, F_RDLCK, 0, 1), EAGAIN);
  other->Kill();
  const auto start = std::chrono::steady_clock::now();
  int err = EWOULDBLOCK;
  while (err == EWOULDBLOCK &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    err = ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
  }
  ASSERT_EQ(err, 0) << strerror(err);
  const double flock_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(SetLk(fd, F_WRLCK, 0, 0, F_SETLKW), 0);
  std::printf("the killed mount's locks were freed after %.1f s (lease 3 s)\n", flock_s);
  ::close(held);  // ENOTCONN: the connection is dead
  ::close(fd);
  other.reset();
}

// A stop signal is how init systems and Kubernetes end pdfs-fuse: it
// unmounts, keeps what was written, and exits 0 (not a failure).
TEST_F(FuseMountTest, StopSignalsUnmountAndExitZero) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const std::string name = "stopped-by-" + std::to_string(sig);
    Mount other(cluster_, cluster_.dir() + "/mnt2");
    ASSERT_TRUE(other.mounted());
    ASSERT_TRUE(WriteAll(other.dir() + "/" + name, name));
    const int status = other.Stop(sig);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "signal " << sig << ": status " << status << "\n"
        << client::FileTail(other.log());
    struct statfs st {};
    ASSERT_EQ(::statfs(other.dir().c_str(), &st), 0);
    EXPECT_NE(st.f_type, kFuseSuperMagic) << "still mounted after signal " << sig;
    EXPECT_EQ(ReadAll(P(name)), name);
  }
}

// Processes on two mounts increment counters in one file, each under a
// lock (fcntl for one counter, flock for the other): no increment is lost.
TEST_F(FuseMountTest, LockedCountersAcrossTwoMountsLoseNothing) {
  Mount other(cluster_, cluster_.dir() + "/mnt2");
  ASSERT_TRUE(other.mounted());
  ASSERT_TRUE(WriteAll(P("counters"), std::string(16, '\0')));
  constexpr int kPerMount = 2, kIncrements = 40;
  std::vector<pid_t> children;
  for (const std::string& dir : {root_, other.dir()}) {
    const std::string path = dir + "/counters";
    for (int i = 0; i < kPerMount; ++i) {
      for (const bool use_flock : {false, true}) {
        children.push_back(Fork([path, use_flock] {
          for (int n = 0; n < kIncrements; ++n) {
            int fd = ::open(path.c_str(), O_RDWR);
            if (fd < 0) return 1;
            const off_t at = use_flock ? 8 : 0;
            if ((use_flock ? ::flock(fd, LOCK_EX) : SetLk(fd, F_WRLCK, 0, 8, F_SETLKW)) != 0) {
              return 2;
            }
            uint64_t v = 0;
            if (::pread(fd, &v, 8, at) != 8) return 3;
            ++v;
            if (::pwrite(fd, &v, 8, at) != 8) return 4;
            // close releases either lock.
            if (::close(fd) != 0) return 5;
          }
          return 0;
        }));
      }
    }
  }
  for (pid_t pid : children) EXPECT_EQ(ExitCode(pid), 0);
  std::string data = ReadAll(other.dir() + "/counters");
  ASSERT_EQ(data.size(), 16u);
  uint64_t counters[2];
  memcpy(counters, data.data(), 16);
  EXPECT_EQ(counters[0], 2u * kPerMount * kIncrements);
  EXPECT_EQ(counters[1], 2u * kPerMount * kIncrements);
}

// kill -9 of pdfs-fuse in the middle of a workload (a shell creating and
// fsyncing files, making directories, renaming and unlinking, each on
// names of its own, logging each operation that returned): every logged
// operation survives as a new mount sees it, the operation in flight is
// whole or absent (a renamed file under one name, never both or neither
// with its content cut), no other name appears, and fsck finds no
// violation — only what a client crash may leave (chunks of a write not
// published, orphans), which its repair frees.
TEST_F(FuseMountTest, KilledPdfsFuseLosesNoCompletedOperation) {
  const std::string src = cluster_.dir() + "/src.bin", log = cluster_.dir() + "/done.log";
  std::string bytes(256 << 10, '\0');
  std::mt19937_64 rng(17);
  for (char& c : bytes) c = static_cast<char>(rng());
  { std::ofstream(src, std::ios::binary) << bytes; }
  ASSERT_EQ(::mkdir(P("w").c_str(), 0755), 0);
  auto size_of = [](int k) { return static_cast<size_t>((k * 7919) % (200 << 10) + 1); };
  const std::string script = cluster_.dir() + "/workload.sh";
  std::ofstream(script) << "cd " << P("w") << " || exit 1\n"
                        << "k=0\n"
                        << "while :; do\n"
                        << "  n=$(( (k * 7919) % (200 << 10) + 1 ))\n"
                        << "  case $((k % 4)) in\n"
                        << "    0) head -c $n " << src
                        << " | dd of=f$k conv=fsync status=none || exit 0 ;;\n"
                        << "    1) mkdir d$k || exit 0 ;;\n"
                        << "    2) head -c $n " << src
                        << " | dd of=r$k conv=fsync status=none || exit 0\n"
                        << "       mv r$k s$k || exit 0 ;;\n"
                        << "    3) echo gone > u$k || exit 0; rm u$k || exit 0 ;;\n"
                        << "  esac\n"
                        << "  echo $k >> " << log << "\n"
                        << "  k=$((k + 1))\n"
                        << "done\n";
  ChildProcess workload;
  ASSERT_TRUE(workload.Start({"/bin/bash", script}, {}, cluster_.dir() + "/workload.out").ok());
  auto logged = [&] {
    std::ifstream in(log);
    int last = -1;
    for (int k; in >> k;) last = k;
    return last;
  };
  for (int i = 0; i < 1200 && logged() < 24; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(logged(), 24) << client::FileTail(cluster_.dir() + "/workload.out");
  mount_->Kill();
  int status = 0;
  ASSERT_TRUE(workload.WaitFor(60000, &status)) << "the workload did not stop";
  const int last = logged();
  std::printf("killed after %d completed operations\n", last + 1);
  mount_.reset();
  Mount after(cluster_, cluster_.dir() + "/after");
  ASSERT_TRUE(after.mounted());
  const std::string w = after.dir() + "/w/";
  auto content = [&](const std::string& name) { return ReadAll(w + name); };
  auto exists = [&](const std::string& name) { return ::access((w + name).c_str(), F_OK) == 0; };
  std::set<std::string> expected;
  for (int k = 0; k <= last; ++k) {
    const std::string n = std::to_string(k), want = bytes.substr(0, size_of(k));
    switch (k % 4) {
      case 0:
        EXPECT_EQ(content("f" + n), want) << "f" << n;
        expected.insert("f" + n);
        break;
      case 1: {
        struct stat st {};
        EXPECT_TRUE(::stat((w + "d" + n).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) << "d" << n;
        expected.insert("d" + n);
        break;
      }
      case 2:
        EXPECT_EQ(content("s" + n), want) << "s" << n;
        EXPECT_FALSE(exists("r" + n)) << "r" << n;
        expected.insert("s" + n);
        break;
      default: EXPECT_FALSE(exists("u" + n)) << "u" << n;
    }
  }
  // The operation in flight: whole or absent (a file's content may be cut:
  // its write had not returned).
  const int k = last + 1;
  const std::string n = std::to_string(k);
  std::set<std::string> in_flight = {"f" + n, "d" + n, "r" + n, "s" + n, "u" + n};
  if (k % 4 == 2 && exists("s" + n)) {
    EXPECT_FALSE(exists("r" + n)) << "renamed and not";
    EXPECT_EQ(content("s" + n), bytes.substr(0, size_of(k))) << "a rename of a file whose write "
                                                                "had returned";
  }
  DIR* dir = ::opendir(w.c_str());
  ASSERT_NE(dir, nullptr);
  for (dirent* e; (e = ::readdir(dir)) != nullptr;) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    EXPECT_TRUE(expected.count(name) != 0 || in_flight.count(name) != 0)
        << name << " made by no operation";
  }
  ::closedir(dir);
  for (const std::string& name : expected) EXPECT_TRUE(exists(name)) << name;

  std::unique_ptr<client::Client> c;
  ASSERT_NO_FATAL_FAILURE(OpenClient(&c));
  FsCheckReport report;
  ASSERT_TRUE(CheckFileSystem(c.get(), &report).ok());
  EXPECT_TRUE(report.ok()) << report.ToString();
  std::printf("fsck after the crash: %zu repairable\n%s", report.repairable.size(),
              report.ToString().c_str());
  std::unique_ptr<FileSystem> fs;
  ASSERT_TRUE(FileSystem::Open(c.get(), {}, &fs).ok());
  ASSERT_TRUE(RepairFileSystem(c.get(), fs.get(), report).ok());
  ASSERT_TRUE(CheckFileSystem(c.get(), &report).ok());
  EXPECT_TRUE(report.clean()) << report.ToString();
}

// fusermount3 -u while another mount namespace holds a copy of the mount
// (a process that unshared its mounts meanwhile: container runtimes, `ip
// netns exec`, `unshare -m` do): the umount succeeds here but the kernel
// keeps the connection for the other copy, so no request ever tells
// pdfs-fuse. It must still exit (it watches its own mount table), which
// closes the connection for the other copy too. (The unmount hang that
// ~2 of 30 runs met on a machine running containers.)
TEST_F(FuseMountTest, UnmountWhileAnotherNamespaceHoldsTheMount) {
  if (::geteuid() != 0) GTEST_SKIP() << "unshare -m needs root";
  ChildProcess holder;
  const std::string ready = cluster_.dir() + "/ns-ready";
  ASSERT_TRUE(holder
                  .Start({"/usr/bin/unshare", "-m", "--propagation", "private", "sh", "-c",
                          "touch " + ready + " && exec sleep 120"},
                         {}, cluster_.dir() + "/ns.out")
                  .ok());
  for (int i = 0; i < 400 && ::access(ready.c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(::access(ready.c_str(), F_OK), 0) << client::FileTail(cluster_.dir() + "/ns.out");
  const auto start = std::chrono::steady_clock::now();
  mount_.reset();  // fusermount3 -u; fails the test if pdfs-fuse does not exit in 20 s
  std::printf("pdfs-fuse exited %.1f s after the unmount\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// Two mounts of one file system (two client processes): what one wrote and
// closed, the other reads at its next open; names appear at once.
TEST_F(FuseMountTest, TwoMountsSeeEachOtherCloseToOpen) {
  Mount other(cluster_, cluster_.dir() + "/mnt2");
  ASSERT_TRUE(other.mounted());
  const std::string a = P("shared"), b = other.dir() + "/shared";
  ASSERT_TRUE(WriteAll(a, "first"));
  EXPECT_EQ(ReadAll(b), "first");
  ASSERT_TRUE(WriteAll(b, "second, longer"));
  EXPECT_EQ(ReadAll(a), "second, longer");
  // A reader holding the file open across the other's write sees it at its
  // next open.
  int fd = ::open(a.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(WriteAll(b, "third"));
  ::close(fd);
  EXPECT_EQ(ReadAll(a), "third");
  ASSERT_EQ(::mkdir((other.dir() + "/dir").c_str(), 0755), 0);
  struct stat st {};
  EXPECT_EQ(::stat(P("dir").c_str(), &st), 0);
  ASSERT_EQ(::rename(P("dir").c_str(), P("moved").c_str()), 0);
  EXPECT_ERRNO(::stat((other.dir() + "/dir").c_str(), &st), ENOENT);
  EXPECT_EQ(::stat((other.dir() + "/moved").c_str(), &st), 0);
}

// Two mounts (two pdfs-fuse processes: two clients) changing one directory
// at once: creates of distinct names all land, an exclusive create of one
// name succeeds on exactly one mount, a rename of one file to two places
// happens once, and crossing directory renames (x into y on one mount, y
// into x on the other) never make a cycle: at most one succeeds. Both
// mounts then list the same, and fsck finds the file system clean.
TEST_F(FuseMountTest, TwoMountsChangeOneDirectoryAtOnce) {
  Mount other(cluster_, cluster_.dir() + "/mnt2");
  ASSERT_TRUE(other.mounted());
  const std::string roots[2] = {P("d"), other.dir() + "/d"};
  ASSERT_EQ(::mkdir(roots[0].c_str(), 0755), 0);
  constexpr int kFiles = 60, kCrossing = 20;
  for (int i = 0; i < kFiles; ++i) ASSERT_TRUE(WriteAll(P("d/r" + std::to_string(i)), "r"));
  std::atomic<int> exclusive_wins{0}, rename_wins{0}, cross_wins{0};
  std::vector<std::string> errors[2];
  auto run = [&](int side) {
    const std::string& root = roots[side];
    const std::string me = side == 0 ? "a" : "b";
    for (int i = 0; i < kFiles; ++i) {
      const std::string n = std::to_string(i);
      if (!WriteAll(root + "/" + me + n, me + n)) errors[side].push_back("create " + me + n);
      int fd = ::open((root + "/x" + n).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
      if (fd >= 0) {
        exclusive_wins++;
        const std::string mine = "won by " + me;
        if (::write(fd, mine.data(), mine.size()) != static_cast<ssize_t>(mine.size())) {
          errors[side].push_back("write x" + n);
        }
        ::close(fd);
      } else if (errno != EEXIST) {
        errors[side].push_back("exclusive create x" + n + ": " + strerror(errno));
      }
      if (::rename((root + "/r" + n).c_str(), (root + "/moved-" + me + n).c_str()) == 0) {
        rename_wins++;
      } else if (errno != ENOENT) {
        errors[side].push_back("rename r" + n + ": " + strerror(errno));
      }
    }
    // Crossing directory renames, one pair at a time on both mounts.
    for (int i = 0; i < kCrossing; ++i) {
      const std::string n = std::to_string(i);
      const std::string from = root + (side == 0 ? "/cx" : "/cy") + n;
      const std::string into = root + (side == 0 ? "/cy" : "/cx") + n + "/in";
      if (::rename(from.c_str(), into.c_str()) == 0) {
        cross_wins++;
      } else if (errno != ENOENT && errno != EINVAL) {
        errors[side].push_back("crossing rename " + n + ": " + strerror(errno));
      }
    }
  };
  for (int i = 0; i < kCrossing; ++i) {
    ASSERT_EQ(::mkdir(P("d/cx" + std::to_string(i)).c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(P("d/cy" + std::to_string(i)).c_str(), 0755), 0);
  }
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  for (const auto& side : errors) {
    for (const std::string& e : side) ADD_FAILURE() << e;
  }
  EXPECT_EQ(exclusive_wins.load(), kFiles);
  EXPECT_EQ(rename_wins.load(), kFiles);
  EXPECT_EQ(cross_wins.load(), kCrossing);  // each pair: the first one in wins, the other fails
  // Both mounts list the same names; every name is there once.
  std::set<std::string> listed[2];
  for (int side = 0; side < 2; ++side) {
    DIR* dir = ::opendir(roots[side].c_str());
    ASSERT_NE(dir, nullptr);
    while (dirent* e = ::readdir(dir)) listed[side].insert(e->d_name);
    ::closedir(dir);
  }
  EXPECT_EQ(listed[0], listed[1]);
  for (int i = 0; i < kFiles; ++i) {
    const std::string n = std::to_string(i);
    EXPECT_EQ(ReadAll(P("d/a" + n)), "a" + n);
    EXPECT_EQ(ReadAll(P("d/b" + n)), "b" + n);
    const std::string x = ReadAll(other.dir() + "/d/x" + n);
    EXPECT_TRUE(x == "won by a" || x == "won by b") << x;
    EXPECT_EQ(listed[0].count("r" + n), 0u);
    EXPECT_EQ(listed[0].count("moved-a" + n) + listed[0].count("moved-b" + n), 1u) << n;
  }
  for (int i = 0; i < kCrossing; ++i) {
    // The crossed pair: one inside the other, never a cycle (both gone).
    const std::string n = std::to_string(i);
    EXPECT_EQ(listed[0].count("cx" + n) + listed[0].count("cy" + n), 1u) << n;
    EXPECT_EQ(::access(P("d/cy" + n + "/in").c_str(), F_OK) == 0,
              ::access(P("d/cx" + n + "/in").c_str(), F_OK) != 0)
        << n;
  }
  struct stat st {};
  ASSERT_EQ(::stat(roots[1].c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(listed[0].size() - 2));  // . and .. not counted
  std::unique_ptr<client::Client> c;
  ASSERT_NO_FATAL_FAILURE(OpenClient(&c));
  FsCheckReport report;
  ASSERT_TRUE(CheckFileSystem(c.get(), &report).ok());
  EXPECT_TRUE(report.clean()) << report.ToString();
}

// The same random sequence of system calls on the mount and on a local file
// system (the reference: tmpfs when the test directory is under /dev/shm,
// as by default): every call's result and errno must match, and so must
// both trees (names, types, modes, sizes, link counts, hard-link
// identity, contents, link targets) every 100 calls and at the end. Few
// names over few levels, so calls meet existing names, full directories,
// directories into themselves, exchanges of a file with a directory.
// Seeded (PDPM_TEST_SEED, printed); one thread, so a seed repeats a run.
class CallModel {
 public:
  CallModel(std::string mount, std::string reference, uint64_t seed)
      : roots_{std::move(mount), std::move(reference)}, rng_(seed) {}

  // One random call on both roots; false (and why in *what) when they
  // disagree.
  bool Step(std::string* what) {
    const std::string a = RandomPath(), b = RandomPath();
    const int kind = static_cast<int>(rng_() % 17);
    const uint64_t off = Offset(), len = 1 + rng_() % 6000;
    const std::string data = Bytes(len);
    const unsigned mode = 0600 | static_cast<unsigned>(rng_() % 0200);
    const unsigned rename_flags[] = {0, RENAME_NOREPLACE, RENAME_EXCHANGE};
    const unsigned rename_flag = rename_flags[rng_() % 3];
    const int falloc_mode = rng_() % 2 == 0 ? 0 : FALLOC_FL_KEEP_SIZE;
    std::string result[2];
    for (int side = 0; side < 2; ++side) {
      const std::string pa = roots_[side] + "/" + a, pb = roots_[side] + "/" + b;
      errno = 0;
      long rc = 0;
      std::string out;
      switch (kind) {
        case 0:
        case 1: {
          rc = ::open(pa.c_str(), O_CREAT | O_WRONLY | (kind == 0 ? O_EXCL : O_TRUNC), 0644);
          if (rc >= 0) rc = ::close(static_cast<int>(rc));
          break;
        }
        case 2: rc = ::mkdir(pa.c_str(), 0755); break;
        case 3: rc = ::rmdir(pa.c_str()); break;
        case 4: rc = ::unlink(pa.c_str()); break;
        case 5:
        case 6: rc = ::renameat2(AT_FDCWD, pa.c_str(), AT_FDCWD, pb.c_str(), rename_flag); break;
        case 7: rc = ::link(pa.c_str(), pb.c_str()); break;
        case 8: rc = ::symlink(b.c_str(), pa.c_str()); break;
        case 9: rc = ::truncate(pa.c_str(), static_cast<off_t>(off)); break;
        case 10:
        case 11: {
          const int fd = ::open(pa.c_str(), O_WRONLY | (kind == 11 ? O_APPEND : 0));
          rc = fd;
          if (fd >= 0) {
            rc = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off));
            ::close(fd);
          }
          break;
        }
        case 12: {
          const int fd = ::open(pa.c_str(), O_RDONLY);
          rc = fd;
          if (fd >= 0) {
            out.resize(len);
            rc = ::pread(fd, out.data(), len, static_cast<off_t>(off));
            out.resize(rc > 0 ? static_cast<size_t>(rc) : 0);
            ::close(fd);
          }
          break;
        }
        case 13: {
          const int fd = ::open(pa.c_str(), O_WRONLY);
          rc = fd;
          if (fd >= 0) {
            rc = ::fallocate(fd, falloc_mode, static_cast<off_t>(off), static_cast<off_t>(len));
            ::close(fd);
          }
          break;
        }
        case 14: rc = ::chmod(pa.c_str(), mode); break;
        case 15: {
          char target[256];
          rc = ::readlink(pa.c_str(), target, sizeof(target));
          if (rc > 0) out.assign(target, static_cast<size_t>(rc));
          break;
        }
        default: {
          struct stat st {};
          rc = ::stat(pa.c_str(), &st);
          if (rc == 0) out = Describe(st);
          break;
        }
      }
      result[side] = std::to_string(rc) + (rc < 0 ? std::string(" ") + strerror(errno) : "") +
                     (out.empty() ? "" : " [" + out.substr(0, 64) + "]");
    }
    trace_.push_back("call " + std::to_string(calls_) + ": kind " + std::to_string(kind) + " " + a +
                     " " + b + " off " + std::to_string(off) + " len " + std::to_string(len) +
                     " -> " + result[0]);
    if (trace_.size() > 12) trace_.erase(trace_.begin());
    ++calls_;
    if (result[0] != result[1]) {
      *what = "the mount answered " + result[0] + ", the reference " + result[1];
      return false;
    }
    return true;
  }

  // Both trees alike; false (and the difference in *what) otherwise.
  bool SameTrees(std::string* what) {
    std::string trees[2];
    for (int side = 0; side < 2; ++side) {
      std::map<ino_t, int> inos;  // inode -> first number in walk order
      Walk(roots_[side], "", &inos, &trees[side]);
    }
    if (trees[0] == trees[1]) return true;
    size_t at = 0;
    while (at < trees[0].size() && at < trees[1].size() && trees[0][at] == trees[1][at]) ++at;
    const size_t from =
        trees[0].rfind('\n', at) == std::string::npos ? 0 : trees[0].rfind('\n', at);
    *what = "trees differ; the mount:\n" + trees[0].substr(from, 300) + "\nthe reference:\n" +
            trees[1].substr(from, 300);
    return false;
  }

  std::string Trace() const {
    std::string out;
    for (const std::string& t : trace_) out += t + "\n";
    return out;
  }

 private:
  std::string RandomPath() {
    static const char* const kNames[] = {"a", "b", "c", "dir"};
    std::string path = kNames[rng_() % 4];
    for (int depth = static_cast<int>(rng_() % 3); depth > 0; --depth) {
      path += std::string("/") + kNames[rng_() % 4];
    }
    return path;
  }
  uint64_t Offset() {
    const uint64_t bases[] = {0, 4096, 1 << 20, (1 << 20) + 3000};
    return bases[rng_() % 4] + rng_() % 5000;
  }
  std::string Bytes(uint64_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>('a' + rng_() % 26);
    return s;
  }
  static std::string Describe(const struct stat& st) {
    const char type = S_ISDIR(st.st_mode) ? 'd' : S_ISLNK(st.st_mode) ? 'l' : 'f';
    std::string out = std::string(1, type) + " mode " + std::to_string(st.st_mode & 07777) +
                      " nlink " + std::to_string(st.st_nlink);
    if (!S_ISDIR(st.st_mode)) out += " size " + std::to_string(st.st_size);
    return out;
  }
  // Appends one line per entry below `rel`, in name order: its path,
  // attributes, hard-link identity, content or target.
  static void Walk(const std::string& root, const std::string& rel, std::map<ino_t, int>* inos,
                   std::string* out) {
    DIR* dir = ::opendir((root + "/" + rel).c_str());
    if (dir == nullptr) {
      *out += rel + ": opendir " + strerror(errno) + "\n";
      return;
    }
    std::set<std::string> names;
    while (dirent* e = ::readdir(dir)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        names.insert(e->d_name);
      }
    }
    ::closedir(dir);
    for (const std::string& name : names) {
      const std::string path = rel.empty() ? name : rel + "/" + name;
      struct stat st {};
      if (::lstat((root + "/" + path).c_str(), &st) != 0) {
        *out += path + ": lstat " + strerror(errno) + "\n";
        continue;
      }
      const int id = inos->emplace(st.st_ino, static_cast<int>(inos->size())).first->second;
      *out += path + ": " + Describe(st) + " inode#" + std::to_string(id);
      if (S_ISLNK(st.st_mode)) {
        char target[256];
        const ssize_t n = ::readlink((root + "/" + path).c_str(), target, sizeof(target));
        *out += " -> " + std::string(target, n > 0 ? static_cast<size_t>(n) : 0);
      } else if (S_ISREG(st.st_mode)) {
        std::ifstream in(root + "/" + path, std::ios::binary);
        const std::string content(std::istreambuf_iterator<char>(in), {});
        *out += " content " + std::to_string(std::hash<std::string>()(content));
      }
      *out += "\n";
      if (S_ISDIR(st.st_mode)) Walk(root, path, inos, out);
    }
  }

  std::string roots_[2];
  std::mt19937_64 rng_;
  uint64_t calls_ = 0;
  std::vector<std::string> trace_;
};

TEST_F(FuseMountTest, RandomCallsMatchALocalFileSystem) {
  const uint64_t seed = TestSeed();
  const int calls = static_cast<int>(ScaledForTest(1500, 300));
  const auto start = std::chrono::steady_clock::now();
  const std::string reference = cluster_.dir() + "/reference";
  ASSERT_EQ(::mkdir(reference.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(P("model").c_str(), 0755), 0);
  CallModel model(P("model"), reference, seed);
  std::string what;
  for (int call = 1; call <= calls; ++call) {
    ASSERT_TRUE(model.Step(&what)) << what << "\nthe last calls:\n" << model.Trace();
    if (call % 100 == 0 || call == calls) {
      ASSERT_TRUE(model.SameTrees(&what))
          << "after call " << call << ": " << what << "\nthe last calls:\n"
          << model.Trace();
    }
  }
  std::printf("%d calls alike, took %.1f s\n", calls,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// A volume mounted alone: its quota is the mount's size (statfs), a write
// passing it fails whole with EDQUOT (no short write), and the volume's
// root is the mount's root.
TEST_F(FuseMountTest, VolumeMountEnforcesItsQuota) {
  std::unique_ptr<client::Client> c;
  ASSERT_NO_FATAL_FAILURE(OpenClient(&c));
  std::unique_ptr<FileSystem> fs;
  ASSERT_TRUE(FileSystem::Open(c.get(), {}, &fs).ok());
  VolumeInfo v;
  ASSERT_EQ(fs->CreateVolume("vol", 1 << 20, 10, {}, &v), 0);
  Mount vol(cluster_, cluster_.dir() + "/vol", "vol");
  ASSERT_TRUE(vol.mounted());
  struct statvfs st {};
  ASSERT_EQ(::statvfs(vol.dir().c_str(), &st), 0);
  EXPECT_EQ(st.f_blocks * st.f_frsize, 1u << 20);
  EXPECT_EQ(st.f_files, 10u);
  const std::string file = vol.dir() + "/f";
  int fd = ::open(file.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  std::string data(700 << 10, 'q');
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  EXPECT_ERRNO(::write(fd, data.data(), data.size()), EDQUOT);
  ::close(fd);
  struct stat sb {};
  ASSERT_EQ(::stat(file.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_size, static_cast<off_t>(data.size()));
  ASSERT_EQ(::statvfs(vol.dir().c_str(), &st), 0);
  EXPECT_EQ(st.f_files - st.f_ffree, 1u);
  // The volume is the mount's root; through the whole-file-system mount it
  // is a directory.
  EXPECT_EQ(ReadAll(P("vol/f")), data);
  EXPECT_ERRNO(::rename(P("vol/f").c_str(), P("elsewhere").c_str()), EXDEV);
}

}  // namespace
}  // namespace pdpm::pdfs
