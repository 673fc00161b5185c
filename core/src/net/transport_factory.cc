// Transport::Create: the one place that knows every backend.
#include "net/tcp/tcp_transport.h"
#include "net/transport.h"
#include "net/verbs/verbs_transport.h"

namespace pdpm::net {

Status Transport::Create(const TransportOptions& options, std::unique_ptr<Transport>* out) {
  switch (options.backend) {
    case BackendKind::kTcp: return tcp::CreateTcpTransport(options, out);
    case BackendKind::kVerbs: return verbs::CreateVerbsTransport(options, out);
  }
  return Status::InvalidArgument("unknown transport backend");
}

}  // namespace pdpm::net
