// Whether a server process is gone: a TCP connection to its address is
// refused. Used to confirm a report that a server is unreachable
// (ViewManager::ReportUnreachable) without waiting for its heartbeats to
// time out. A probe that gets no answer proves nothing (a slow or
// partitioned host) and leaves the decision to the heartbeat timeouts.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace pdpm::monitor {

// Connects to "host:port" within `timeout`. *refused is true only when the
// host answered that nothing listens there (ECONNREFUSED). A bad address
// is kInvalidArgument.
Status ProbeRefused(const std::string& address, std::chrono::milliseconds timeout, bool* refused);

}  // namespace pdpm::monitor
