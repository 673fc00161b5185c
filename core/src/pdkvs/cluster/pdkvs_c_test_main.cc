// Runs the pDKVS C ABI test (pdkvs_c_test.c) against a real local cluster.
#include <gtest/gtest.h>

#include "client/cluster_harness.h"

extern "C" int pdkvs_c_abi_test(const char* monitor, const char* secret, const char* transport,
                                char* err, size_t errlen);

namespace pdpm::pdkvs {
namespace {

TEST(PdkvsCAbiTest, EveryCallAndErrorCodes) {
  client::LocalClusterOptions o;
  o.servers = 3;
  o.replicas = 2;
  o.segment_size = 64ull << 20;
  o.pm_size = 8 * o.segment_size;  // tables and their copies, the transaction log
  client::LocalCluster cluster(o);
  Status s = cluster.Start();
  ASSERT_TRUE(s.ok()) << s.ToString();
  char err[512] = {};
  const char* transport =
      net::testing::TestBackend() == net::BackendKind::kVerbs ? "verbs" : nullptr;
  EXPECT_EQ(pdkvs_c_abi_test(cluster.monitor_address().c_str(), cluster.secret().c_str(), transport,
                             err, sizeof(err)),
            0)
      << err;
}

}  // namespace
}  // namespace pdpm::pdkvs
