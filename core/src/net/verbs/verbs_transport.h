// The verbs backend of iRDMA: libibverbs + librdmacm, one RC queue pair per
// Connection, connection setup through rdma_cm (the connect blob travels as
// private data).
//
// What it adds to the contract of net/transport.h:
//   * Registered ranges are addressed from offset 0 (the MR's I/O virtual
//     address is 0), so Op::remote_offset is the remote address the NIC
//     checks against the key's bounds.
//   * A remote access failure (wrong key, out of bounds, missing right)
//     fails its op with kPermissionDenied and, as on any RC queue pair,
//     breaks the connection: every later op fails until Reconnect().
//   * `persist` is one round trip on the same queue pair: a transport
//     control message follows the WRITE and the peer answers once its
//     PersistFn ran (docs/net-verbs.md has the format).
//   * The device is chosen by name or as the first with an active port;
//     rdma_cm picks the GID that carries the IP address of the connection.
#pragma once

#include <memory>

#include "common/status.h"
#include "net/transport.h"

namespace pdpm::net::verbs {

// kNotSupported ("no RDMA device") when the machine has no usable device.
Status CreateVerbsTransport(const TransportOptions& options, std::unique_ptr<Transport>* out);

}  // namespace pdpm::net::verbs
