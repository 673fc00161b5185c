// The offline checker (pdpm fsck) on a LocalCluster's PM, for cluster tests
// after a crash or at their end. Header-only: only tests that link
// pdpm_fsck include it.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "client/cluster_harness.h"
#include "server/fsck.h"

namespace pdpm::client {

// Checks server i's PM (the server stopped or killed): no violation;
// `clean` also refuses repairable findings (what a kill -9 may leave).
inline void ExpectPmChecks(const LocalCluster& cluster, int i, bool clean,
                           server::PmCheckReport* out = nullptr) {
  server::PmCheckReport report;
  Status s = server::CheckServerPm(cluster.pm_path(i), &report);
  ASSERT_TRUE(s.ok()) << "server " << i << ": " << s.ToString();
  EXPECT_TRUE(report.ok()) << "server " << i << ":\n" << report.ToString();
  if (clean) {
    EXPECT_TRUE(report.clean()) << "server " << i << ":\n" << report.ToString();
  }
  if (out != nullptr) *out = std::move(report);
}

// Stops every running server cleanly and checks every server's PM clean;
// `reports` (if given) gets the reports in server order, for more checks.
inline void StopServersAndExpectCleanPm(LocalCluster& cluster,
                                        std::vector<server::PmCheckReport>* reports = nullptr) {
  if (reports != nullptr) reports->assign(static_cast<size_t>(cluster.server_count()), {});
  for (int i = 0; i < cluster.server_count(); i++) {
    if (cluster.server(i).running()) {
      Status s = cluster.StopServer(i);
      EXPECT_TRUE(s.ok()) << "stop server " << i << ": " << s.ToString();
    }
    ExpectPmChecks(cluster, i, /*clean=*/true,
                   reports != nullptr ? &(*reports)[static_cast<size_t>(i)] : nullptr);
  }
}

}  // namespace pdpm::client
