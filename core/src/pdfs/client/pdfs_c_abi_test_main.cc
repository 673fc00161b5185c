// Runs the pDFS C ABI test (pdfs_c_abi_test.c) against a real local cluster.
#include <gtest/gtest.h>

#include "client/cluster_harness.h"

extern "C" int pdfs_c_abi_test(const char* monitor, const char* secret, char* err, size_t errlen);

namespace pdpm::pdfs {
namespace {

TEST(PdfsCAbiTest, EveryCallAndItsErrors) {
  client::LocalClusterOptions o;
  o.segment_size = 64ull << 20;
  o.pm_size = (4 * 64 + 2) * (1ull << 20);
  client::LocalCluster cluster(o);
  Status s = cluster.Start();
  ASSERT_TRUE(s.ok()) << s.ToString();
  char err[512] = {};
  EXPECT_EQ(pdfs_c_abi_test(cluster.monitor_address().c_str(), cluster.secret().c_str(), err,
                            sizeof(err)),
            0)
      << err;
}

}  // namespace
}  // namespace pdpm::pdfs
