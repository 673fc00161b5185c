// Daemon supervision for the local cluster of the `pdpm` CLI: each daemon is
// one process started detached from the caller (own session, stdin from
// /dev/null, stdout and stderr appended to its log file) and known by a pid
// file. A pid file alone is not trusted: a daemon counts as running only
// while that pid is alive, not a zombie, and its command line still carries
// the daemon's identity argument, so a pid reused after a crash or a reboot
// is never signalled.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace pdpm::tools {

struct DaemonSpec {
  std::string name;               // for messages: "monitor", "server 2"
  std::vector<std::string> argv;  // argv[0] is the binary's path
  std::string identity;           // an argument only this daemon is given
  std::string pid_file;
  std::string log_file;
};

// Starts the daemon and writes its pid file. The process is a child of the
// caller until the caller exits; ChildExited tells whether it died early.
Status StartDaemon(const DaemonSpec& spec, pid_t* pid);

// For a child started by StartDaemon: true (and its wait status described
// in `how`) when it has exited. Reaps it.
bool ChildExited(pid_t pid, std::string* how);

// The pid of the running daemon `spec` describes, 0 when none (no pid file,
// a dead or zombie process, or a pid now used by another program).
pid_t RunningPid(const DaemonSpec& spec);

// Stops the daemon if it runs: SIGTERM, up to `grace` for it to exit, then
// SIGKILL. Removes the pid file. `killed` says whether SIGKILL was needed.
// kTimeout when the process survives even SIGKILL for some seconds.
Status StopDaemon(const DaemonSpec& spec, std::chrono::milliseconds grace, bool* killed);

// The last `lines` lines of a log file ("" when it cannot be read).
std::string LogTail(const std::string& path, int lines);

}  // namespace pdpm::tools
