#include "common/daemon_main.h"

#include <pthread.h>

#include <cstdio>

namespace pdpm {

std::optional<int> ParseDaemonFlags(FlagParser& parser, int argc, const char* const* argv,
                                    const std::string& log_level, Logger* log) {
  Status s = parser.Parse(argc, argv);
  if (s.ok() && parser.PrintUsageIfAsked()) return 0;
  if (!s.ok()) {
    log->Error("bad command line", {{"status", s}});
    std::fputs(parser.Usage().c_str(), stderr);
    return 2;
  }
  LogLevel level;
  s = ParseLogLevel(log_level, &level);
  if (!s.ok()) return FailStart(*log, "bad command line", s);
  *log = log->WithLevel(level);
  return std::nullopt;
}

int FailStart(const Logger& log, std::string_view what, const Status& s) {
  log.Error(what, {{"status", s}});
  return 1;
}

sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

}  // namespace pdpm
