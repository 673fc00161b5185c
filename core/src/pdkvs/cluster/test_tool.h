// What the cluster test tools (pdkvs_cluster_mput, pdkvs_cluster_exec)
// share: opening the store the test's cluster serves, and key lists.
#pragma once

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "client/cluster_harness.h"
#include "pdkvs/cluster/cluster_kv_store.h"

namespace pdpm::pdkvs {

// Opens the store of the cluster whose monitor is `monitor`, its secret in
// `secret_file`; prints the error on stderr otherwise.
inline Status OpenTestToolStore(const std::string& monitor, const std::string& secret_file,
                                std::unique_ptr<ClusterKvStore>* kv) {
  std::ifstream sf(secret_file);
  std::string secret;
  sf >> secret;
  Status s = ClusterKvStore::Open(client::TestClientOptions(monitor, secret), kv);
  if (!s.ok()) std::fprintf(stderr, "open: %s\n", s.ToString().c_str());
  return s;
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
