// The verbs backend of iRDMA: libibverbs + librdmacm, one RC queue pair per
// Connection, connection setup through rdma_cm (the connect blob travels as
// private data).
//
// What it adds to the contract of net/transport.h:
//   * A range registers at any address; its I/O address keeps the page
//     offset. The first use of a key on a connection asks the peer for the
//     range's I/O base, size and rights (one round trip inside Post);
//     wrong keys, bounds and rights then fail only their op, before it is
//     sent, while the peer's device still enforces them.
//   * `persist` is one round trip on the same queue pair: a transport
//     control message follows the WRITE and the peer answers once its
//     PersistFn ran (docs/net-verbs.md has the formats).
//   * The device is chosen by name or as the first with an active port;
//     rdma_cm picks the GID that carries the IP address of the connection.
//   * Only the connecting side can Reconnect (kFailedPrecondition else).
#pragma once

#include <memory>

#include "common/status.h"
#include "net/transport.h"

namespace pdpm::net::verbs {

// kNotSupported ("no RDMA device") when the machine has no usable device.
Status CreateVerbsTransport(const TransportOptions& options, std::unique_ptr<Transport>* out);

}  // namespace pdpm::net::verbs
