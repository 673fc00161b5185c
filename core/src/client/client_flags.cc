#include "client/client_flags.h"

#include "common/file_util.h"
#include "net/transport.h"

namespace pdpm::client {

void ClientFlags::Register(FlagParser* parser, const std::string& context) {
  parser->AddString("monitor", &monitor,
                    context + "the cluster's monitor host:port (every monitor's, comma-separated)");
  parser->AddString("secret-file", &secret_file, context + "file holding the cluster secret");
  parser->AddString("transport", &transport, context + "data transport: tcp or verbs");
}

Status ClientFlags::ToOptions(ClientOptions* options) const {
  if (monitor.empty()) return Status::InvalidArgument("--monitor is needed");
  if (secret_file.empty()) return Status::InvalidArgument("--secret-file is needed");
  options->monitor = monitor;
  PDPM_RETURN_IF_ERROR(
      ReadSecretFile(secret_file, &options->cluster_secret).WithContext("--secret-file"));
  return net::ParseBackendKind(transport, &options->transport).WithContext("--transport");
}

Status ClientOptionsFromStrings(const char* monitor, const char* secret, const char* transport,
                                ClientOptions* options) {
  if (monitor == nullptr || *monitor == '\0') {
    return Status::InvalidArgument("no monitor address given");
  }
  options->monitor = monitor;
  options->cluster_secret = secret == nullptr ? "" : secret;
  if (transport == nullptr) {
    options->transport = net::BackendKind::kTcp;
    return Status::OK();
  }
  return net::ParseBackendKind(transport, &options->transport);
}

}  // namespace pdpm::client
