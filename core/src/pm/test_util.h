// Test helpers of the PM layer: a scratch directory and direct file I/O
// that bypasses the mapping (to see or damage what is durable).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace pdpm::pm {

// The value of an environment variable, "" when unset. Tests change their
// environment only while single-threaded.
inline std::string TestEnv(const char* name) {
  const char* v = getenv(name);  // NOLINT(concurrency-mt-unsafe)
  return v == nullptr ? "" : v;
}

// Stores the bytes of `s` (no terminator) at dst.
inline void Store(char* dst, std::string_view s) {
  std::memcpy(dst, s.data(), s.size());
}

// A fresh directory, removed with its contents on destruction. Under
// `root` when given (e.g. a DAX mount), else on tmpfs when the system has
// one (/dev/shm), where msync is cheap.
class TempDir {
 public:
  explicit TempDir(const std::string& root_dir = "") {
    struct stat st {};
    const std::string tmpdir = TestEnv("TMPDIR");
    std::string root = !root_dir.empty()                                   ? root_dir
                       : stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm"
                       : !tmpdir.empty()                                   ? tmpdir
                                                                           : "/tmp";
    std::string pattern = root + "/pdpm-pm-test-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The bytes [offset, offset+len) of the file, as the file holds them.
inline std::string ReadFileAt(const std::string& path, uint64_t offset, size_t len) {
  std::string out(len, '\0');
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return out;
  EXPECT_EQ(pread(fd, out.data(), len, static_cast<off_t>(offset)), static_cast<ssize_t>(len));
  close(fd);
  return out;
}

inline void WriteFileAt(const std::string& path, uint64_t offset, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  EXPECT_EQ(pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(data.size()));
  close(fd);
}

// A child process running body(report_fd) and then exiting; the parent
// reads what the child writes to report_fd from read_fd.
struct Child {
  pid_t pid = -1;
  int read_fd = -1;
};

template <typename Body>
Child ForkChild(Body body) {
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe";
    return {};
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    body(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  EXPECT_GT(pid, 0) << "fork";
  return {pid, fds[0]};
}

// Reads one 32-bit report; false at end of file (the child is gone).
inline bool ReadReport(int fd, uint32_t* value) {
  size_t got = 0;
  auto* p = reinterpret_cast<char*>(value);
  while (got < sizeof(*value)) {
    ssize_t n = read(fd, p + got, sizeof(*value) - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

inline void WriteReport(int fd, uint32_t value) {
  if (write(fd, &value, sizeof(value)) != sizeof(value)) _exit(3);
}

// Reads the child's reports until it ends, then reaps it: *killed tells
// whether it died of SIGKILL; any other end than that or exit status 0 is a
// test failure.
inline std::vector<uint32_t> CollectReports(const Child& child, bool* killed) {
  std::vector<uint32_t> reports;
  uint32_t v;
  while (ReadReport(child.read_fd, &v)) reports.push_back(v);
  close(child.read_fd);
  int status = 0;
  EXPECT_EQ(waitpid(child.pid, &status, 0), child.pid);
  *killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  EXPECT_TRUE(*killed || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
      << "child failed with status " << status;
  return reports;
}

// Reaps the child; expects it died of SIGKILL.
inline void ReapKilled(const Child& child) {
  int status = 0;
  ASSERT_EQ(waitpid(child.pid, &status, 0), child.pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "child ended otherwise, with status " << status;
}

// Kills the child with SIGKILL and reaps it.
inline void KillAndReap(const Child& child) {
  kill(child.pid, SIGKILL);
  ReapKilled(child);
}

}  // namespace pdpm::pm
