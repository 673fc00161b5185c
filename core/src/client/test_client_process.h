// The start every test client process (pdpm_client_load, pdpm_tx_bank)
// shares: the cluster's flags, then a Client on it.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "client/client.h"
#include "common/flags.h"

namespace pdpm::client {

// Parses argv with --monitor and --secret-file (listed first) and the
// flags `add_flags` binds, then opens a Client on that cluster with
// TestClientOptions (cluster_harness.h). Returns nullopt with *out set, or
// the exit code: 0 after printing the usage for --help; after printing the
// problem to stderr, 2 for a bad command line (with the usage), 1 when the
// client cannot open.
std::optional<int> StartTestClient(const char* program, int argc, char** argv,
                                   const std::function<void(FlagParser*)>& add_flags,
                                   std::unique_ptr<Client>* out);

}  // namespace pdpm::client
