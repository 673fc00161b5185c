// What the cluster test tools (pdkvs_cluster_mput, pdkvs_cluster_exec)
// share besides their start (client/test_client_process.h): key lists.
#pragma once

#include <string>
#include <vector>

namespace pdpm::pdkvs {

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
