// ClientFlags: the command-line flags every program that joins a cluster
// as a client takes (--monitor, --secret-file, --transport), and the
// ClientOptions they stand for. One definition, so every daemon and tool
// names, documents and checks them the same way.
#pragma once

#include <string>

#include "client/client.h"
#include "common/flags.h"
#include "common/status.h"

namespace pdpm::client {

struct ClientFlags {
  std::string monitor;      // host:port, or every HA monitor's: a,b,c
  std::string secret_file;  // a file holding the cluster secret
  std::string transport = "tcp";

  // Binds --monitor, --secret-file and --transport to the fields above.
  // `context` starts each help text ("pDFSLib: ", "with --monitor: ") for
  // programs where these flags are one choice of several.
  void Register(FlagParser* parser, const std::string& context = "");

  // Whether --monitor was given (a program with another store to choose).
  bool given() const { return !monitor.empty(); }

  // The options they stand for. Every error names its flag:
  // kInvalidArgument when --monitor or --secret-file is missing, the secret
  // file is empty or the transport is neither tcp nor verbs; the read's
  // error (kNotFound, …) when the secret file cannot be read. Other fields
  // of *options (timeouts) keep what the caller set.
  Status ToOptions(ClientOptions* options) const;
};

// The same for the C ABIs, which take the three as strings (the secret
// itself, not a file): a null monitor or an unknown transport is
// kInvalidArgument; a null transport is tcp; a null secret is none (the
// monitor then refuses the client with kPermissionDenied).
Status ClientOptionsFromStrings(const char* monitor, const char* secret, const char* transport,
                                ClientOptions* options);

}  // namespace pdpm::client
