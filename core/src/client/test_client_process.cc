#include "client/test_client_process.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "client/cluster_harness.h"

namespace pdpm::client {

std::optional<int> StartTestClient(const char* program, int argc, char** argv,
                                   const std::function<void(FlagParser*)>& add_flags,
                                   std::unique_ptr<Client>* out) {
  std::string monitor, secret_file;
  FlagParser p(program);
  p.AddString("monitor", &monitor, "monitor host:port");
  p.AddString("secret-file", &secret_file, "cluster secret file");
  add_flags(&p);
  Status s = p.Parse(argc, argv);
  if (s.ok() && p.PrintUsageIfAsked()) return 0;
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n%s", s.ToString().c_str(), p.Usage().c_str());
    return 2;
  }
  std::ifstream sf(secret_file);
  std::string secret;
  sf >> secret;
  s = Client::Open(TestClientOptions(monitor, secret), out);
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.ToString().c_str());
    return 1;
  }
  return std::nullopt;
}

}  // namespace pdpm::client
