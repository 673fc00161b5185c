#include "client/test_client_process.h"

#include <cstdio>
#include <string>

#include "client/cluster_harness.h"
#include "common/file_util.h"

namespace pdpm::client {

std::optional<int> ParseTestClientFlags(const char* program, int argc, char** argv,
                                        const std::function<void(FlagParser*)>& add_flags,
                                        ClientOptions* options) {
  std::string monitor, secret_file, secret;
  FlagParser p(program);
  p.AddString("monitor", &monitor, "monitor host:port");
  p.AddString("secret-file", &secret_file, "cluster secret file");
  add_flags(&p);
  Status s = p.Parse(argc, argv);
  if (s.ok() && p.PrintUsageIfAsked()) return 0;
  if (s.ok() && monitor.empty()) s = Status::InvalidArgument("--monitor is needed");
  if (s.ok()) s = ReadSecretFile(secret_file, &secret).WithContext("--secret-file");
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n%s", s.ToString().c_str(), p.Usage().c_str());
    return 2;
  }
  *options = TestClientOptions(monitor, secret);
  return std::nullopt;
}

std::optional<int> StartTestClient(const char* program, int argc, char** argv,
                                   const std::function<void(FlagParser*)>& add_flags,
                                   std::unique_ptr<Client>* out) {
  ClientOptions options;
  if (auto code = ParseTestClientFlags(program, argc, argv, add_flags, &options)) return code;
  Status s = Client::Open(options, out);
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.ToString().c_str());
    return 1;
  }
  return std::nullopt;
}

}  // namespace pdpm::client
