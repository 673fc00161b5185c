// The tcp backend of iRDMA (see net/transport.h and docs/net.md).
#pragma once

#include <memory>

#include "common/status.h"
#include "net/transport.h"

namespace pdpm::net::tcp {

// A transport that emulates the verbs model over TCP: a few progress
// threads (min(cores, 4)) multiplex every connection through epoll and act
// as the NIC for the emulated one-sided operations.
Status CreateTcpTransport(const TransportOptions& options, std::unique_ptr<Transport>* out);

}  // namespace pdpm::net::tcp
