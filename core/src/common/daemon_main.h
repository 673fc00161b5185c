// The start-up the daemons' mains share (pdpm-monitor, pdpm-server): the
// command line, the logger it configures, the stop signals, and how a
// failure to start ends the process.
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <string_view>

#include "common/flags.h"
#include "common/log.h"
#include "common/status.h"

namespace pdpm {

// Parses argv with `parser`, then `log_level` (a variable the parser binds,
// "debug", "info", "warn" or "error"). On success *log becomes the
// daemon's logger (its component kept, stderr, that level) and nullopt is
// returned: the daemon goes on. With --help the usage is printed on stdout
// and 0 returned. Otherwise the mistake is logged as "bad command line"
// through *log as it was, and the exit code returned: 2 for the command
// line (the usage follows on stderr), 1 for the level.
std::optional<int> ParseDaemonFlags(FlagParser& parser, int argc, const char* const* argv,
                                    const std::string& log_level, Logger* log);

// Logs `what` with `s` as an error and returns 1, the exit code of a daemon
// that cannot start or keep serving.
int FailStart(const Logger& log, std::string_view what, const Status& s);

// Blocks SIGINT and SIGTERM in the calling thread, and so in every thread
// it starts afterwards: call before starting any. Returns the set, for
// sigwait/sigtimedwait on the thread that handles them.
sigset_t BlockStopSignals();

}  // namespace pdpm
