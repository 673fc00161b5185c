// Runs the C ABI test (c_abi_test.c) against a real local cluster.
#include <gtest/gtest.h>

#include "client/cluster_harness.h"

extern "C" int pdpm_c_abi_test(const char* monitor, const char* secret, const char* transport,
                               char* err, size_t errlen);

namespace pdpm::client {
namespace {

TEST(CAbiTest, RoundTripAndErrorCodes) {
  LocalClusterOptions o;
  o.servers = 1;
  o.pm_size = (3 * 128 + 2) * (1ull << 20);  // a table, the heap, the transaction log
  LocalCluster cluster(o);
  Status s = cluster.Start();
  ASSERT_TRUE(s.ok()) << s.ToString();
  char err[512] = {};
  // NULL: the default transport, tcp.
  const char* transport =
      net::testing::TestBackend() == net::BackendKind::kVerbs ? "verbs" : nullptr;
  EXPECT_EQ(pdpm_c_abi_test(cluster.monitor_address().c_str(), cluster.secret().c_str(), transport,
                            err, sizeof(err)),
            0)
      << err;
}

}  // namespace
}  // namespace pdpm::client
