// What the cluster test tools (pdkvs_cluster_mput, pdkvs_cluster_exec)
// share: their start and key lists.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/test_client_process.h"
#include "pdkvs/cluster/cluster_kv_store.h"

namespace pdpm::pdkvs {

// client::ParseTestClientFlags, then a store on that cluster: nullopt with
// *out set, or the exit code (2 when `required` — a flag add_flags binds —
// is left empty, 1 when the store cannot open; printed to stderr).
inline std::optional<int> StartTestKvStore(const char* program, int argc, char** argv,
                                           const std::function<void(FlagParser*)>& add_flags,
                                           const char* required, const std::string& value,
                                           std::unique_ptr<ClusterKvStore>* out) {
  client::ClientOptions options;
  if (auto code = client::ParseTestClientFlags(program, argc, argv, add_flags, &options)) {
    return code;
  }
  if (value.empty()) {
    std::fprintf(stderr, "--%s is needed\n", required);
    return 2;
  }
  Status s = ClusterKvStore::Open(options, out);
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.ToString().c_str());
    return 1;
  }
  return std::nullopt;
}

// "a,b,c" -> {"a", "b", "c"}.
inline std::vector<std::string> SplitKeyList(const std::string& list) {
  std::vector<std::string> names;
  for (size_t at = 0; at <= list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    names.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return names;
}

}  // namespace pdpm::pdkvs
