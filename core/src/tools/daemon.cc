#include "tools/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <thread>

#include "common/file_util.h"

namespace pdpm::tools {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Alive and not a zombie (a zombie still answers kill(pid, 0); one can
// linger where nothing reaps orphans).
bool ProcessAlive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  std::string stat;
  if (!ReadWholeFile("/proc/" + std::to_string(pid) + "/stat", &stat).ok()) return false;
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

bool CommandLineHas(pid_t pid, const std::string& identity) {
  std::string cmdline;
  if (!ReadWholeFile("/proc/" + std::to_string(pid) + "/cmdline", &cmdline).ok()) return false;
  size_t start = 0;
  while (start < cmdline.size()) {
    size_t end = cmdline.find('\0', start);
    if (end == std::string::npos) end = cmdline.size();
    if (cmdline.compare(start, end - start, identity) == 0) return true;
    start = end + 1;
  }
  return false;
}

pid_t ReadPidFile(const std::string& path) {
  std::string text;
  if (!ReadWholeFile(path, &text).ok()) return 0;
  pid_t pid = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (ec != std::errc() || pid <= 0) return 0;
  return pid;
}

// Waits until `pid` is gone; false when `limit` passed first.
bool WaitGone(pid_t pid, milliseconds limit) {
  auto deadline = steady_clock::now() + limit;
  while (ProcessAlive(pid)) {
    if (steady_clock::now() >= deadline) return false;
    // A child of ours (the same pdpm invocation started it) must be reaped.
    ::waitpid(pid, nullptr, WNOHANG);
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

}  // namespace

Status StartDaemon(const DaemonSpec& spec, pid_t* pid) {
  int log_fd = ::open(spec.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::FromErrno("open " + spec.log_file, errno);
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // posix_spawn, never fork: the caller may run gRPC threads.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own session: a terminal's Ctrl-C or hang-up does not reach it.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  int rc = ::posix_spawn(pid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(log_fd);
  if (rc != 0) return Status::FromErrno("start " + spec.name + " (" + spec.argv[0] + ")", rc);
  Status s = WriteFileAtomically(spec.pid_file, std::to_string(*pid) + "\n", 0644);
  if (!s.ok()) {
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
    return s;
  }
  return Status::OK();
}

bool ChildExited(pid_t pid, std::string* how) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) != pid) return false;
  if (WIFEXITED(status)) {
    *how = "exited with status " + std::to_string(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    *how = "was killed by SIG" + std::string(::sigabbrev_np(WTERMSIG(status)));
  } else {
    *how = "stopped";
  }
  return true;
}

pid_t RunningPid(const DaemonSpec& spec) {
  pid_t pid = ReadPidFile(spec.pid_file);
  if (pid == 0 || !ProcessAlive(pid) || !CommandLineHas(pid, spec.identity)) return 0;
  return pid;
}

Status StopDaemon(const DaemonSpec& spec, milliseconds grace, bool* killed) {
  *killed = false;
  pid_t pid = RunningPid(spec);
  if (pid != 0) {
    ::kill(pid, SIGTERM);
    if (!WaitGone(pid, grace)) {
      *killed = true;
      ::kill(pid, SIGKILL);
      if (!WaitGone(pid, milliseconds(5000))) {
        return Status::Timeout(spec.name + " (pid " + std::to_string(pid) +
                               ") is still alive 5s after SIGKILL");
      }
    }
  }
  if (::unlink(spec.pid_file.c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno("remove " + spec.pid_file, errno);
  }
  return Status::OK();
}

std::string LogTail(const std::string& path, int lines) {
  std::string text;
  if (!ReadWholeFile(path, &text).ok()) return "";
  // Start after the lines+1'th newline from the end (the last one ends the
  // final line).
  size_t start = text.size();
  int newlines = 0;
  while (start > 0) {
    if (text[start - 1] == '\n' && start != text.size() && ++newlines == lines) break;
    --start;
  }
  return text.substr(start);
}

}  // namespace pdpm::tools
