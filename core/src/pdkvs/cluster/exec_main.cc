// pdkvs_cluster_exec: one transaction of the store as the gateway's EXEC
// runs it (TxRead, then TxCommit checking what it read), for the tests that
// stop its coordinator between the two (PDPM_TX_STOP_AT, docs/tx.md).
//
//   pdkvs_cluster_exec --monitor H:P --secret-file F --read a,b
//
// Reads the keys, prints "<key>=<value>" (or "<key> absent") for each, then
// commits a transaction that only checks them (an EXEC of reads) and prints
// "committed" or "aborted" (a read key changed, or its vnode moved). Exit 0
// for either outcome, 1 on another error, 2 on a bad command line.
#include <cstdio>
#include <string>
#include <vector>

#include "client/test_client_process.h"
#include "pdkvs/cluster/cluster_kv_store.h"
#include "pdkvs/cluster/test_tool.h"

int main(int argc, char** argv) {
  std::string read;
  std::unique_ptr<pdpm::pdkvs::ClusterKvStore> kv;
  auto code = pdpm::pdkvs::StartTestKvStore(
      "pdkvs_cluster_exec", argc, argv,
      [&](pdpm::FlagParser* p) {
        p->AddString("read", &read, "comma-separated keys to read and check");
      },
      "read", read, &kv);
  if (code) return *code;
  const std::vector<std::string> names = pdpm::pdkvs::SplitKeyList(read);
  const std::vector<std::string_view> keys(names.begin(), names.end());
  std::vector<pdpm::pdkvs::KvTxRead> got;
  pdpm::Status s = kv->TxRead(keys, &got);
  if (!s.ok()) {
    std::fprintf(stderr, "read: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<pdpm::pdkvs::KvTxCheck> checks;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i].value) {
      std::printf("%s=%s\n", names[i].c_str(), got[i].value->c_str());
    } else {
      std::printf("%s absent\n", names[i].c_str());
    }
    checks.push_back({keys[i], got[i].version});
  }
  std::fflush(stdout);
  s = kv->TxCommit(checks, {});
  if (s.code() == pdpm::StatusCode::kAborted) {
    std::printf("aborted\n");
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "commit: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("committed\n");
  return 0;
}
