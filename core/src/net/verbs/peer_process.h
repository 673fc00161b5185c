// Starting the peer process of a two-process test or benchmark. Verbs
// contexts do not survive fork(), so the child re-executes this binary
// with one extra environment variable telling it to act as the peer.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace pdpm::net::verbs {

// In the forked child: becomes a fresh image of this binary whose
// environment carries `name=value`. Never returns.
[[noreturn]] inline void ExecSelfAsPeer(const char* name, const std::string& value) {
  std::string variable = std::string(name) + "=" + value;
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; e++) env.push_back(*e);
  env.push_back(variable.data());
  env.push_back(nullptr);
  char arg0[] = "pdpm-verbs-peer";
  char* argv[] = {arg0, nullptr};
  execve("/proc/self/exe", argv, env.data());
  _exit(127);
}

// The value of `name` (empty when unset). Call before starting threads.
inline std::string PeerEnv(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): single-threaded
  return value == nullptr ? "" : value;
}

}  // namespace pdpm::net::verbs
