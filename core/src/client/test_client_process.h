// The start every test client process (pdpm_client_load, pdpm_tx_bank,
// pdkvs_cluster_mput) shares: the cluster's flags, then a client on it.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "client/client.h"
#include "common/flags.h"

namespace pdpm::client {

// Parses argv with --monitor and --secret-file (listed first) and the
// flags `add_flags` binds, into TestClientOptions (cluster_harness.h: the
// test transport and scaled timeouts). Returns nullopt with *options set,
// or the exit code: 0 after printing the usage for --help; 2 after printing
// a bad command line (or an unreadable secret file) and the usage.
std::optional<int> ParseTestClientFlags(const char* program, int argc, char** argv,
                                        const std::function<void(FlagParser*)>& add_flags,
                                        ClientOptions* options);

// ParseTestClientFlags, then a Client on that cluster: nullopt with *out
// set, or the exit code (1 when the client cannot open, printed to stderr).
std::optional<int> StartTestClient(const char* program, int argc, char** argv,
                                   const std::function<void(FlagParser*)>& add_flags,
                                   std::unique_ptr<Client>* out);

}  // namespace pdpm::client
