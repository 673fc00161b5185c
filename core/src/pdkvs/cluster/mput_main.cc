// pdkvs_cluster_mput: one multi-put on a cluster, for the tests that kill
// a coordinator in the middle of its commit (PDPM_TX_CRASH_AT, docs/tx.md).
//
//   pdkvs_cluster_mput --monitor H:P --secret-file F --keys a,b,c --value V [--nx]
//
// Sets every key to V (if none exists, with --nx) and prints "applied" or
// "not applied". Exit 0 on success, 1 on an error, 2 on a bad command line.
#include <cstdio>
#include <string>
#include <vector>

#include "client/test_client_process.h"
#include "pdkvs/cluster/cluster_kv_store.h"
#include "pdkvs/cluster/test_tool.h"

int main(int argc, char** argv) {
  std::string keys, value;
  bool nx = false;
  std::unique_ptr<pdpm::pdkvs::ClusterKvStore> kv;
  auto code = pdpm::pdkvs::StartTestKvStore(
      "pdkvs_cluster_mput", argc, argv,
      [&](pdpm::FlagParser* p) {
        p->AddString("keys", &keys, "comma-separated keys");
        p->AddString("value", &value, "the value of every key");
        p->AddBool("nx", &nx, "only if none of the keys exists");
      },
      "keys", keys, &kv);
  if (code) return *code;
  const std::vector<std::string> names = pdpm::pdkvs::SplitKeyList(keys);
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(names.size());
  for (const auto& k : names) pairs.emplace_back(k, value);
  bool applied = false;
  pdpm::Status s = kv->MultiPut(pairs, nx, &applied);
  if (!s.ok()) {
    std::fprintf(stderr, "multi-put: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", applied ? "applied" : "not applied");
  return 0;
}
