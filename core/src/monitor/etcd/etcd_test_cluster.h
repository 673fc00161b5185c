// EtcdTestCluster (tests): real etcd members (Debian's `etcd`) on loopback,
// free ports, data in a fresh temporary directory removed on destruction
// (kept with PDPM_KEEP_TEST_DIR). Members are killed when it is destroyed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "client/cluster_harness.h"
#include "common/status.h"
#include "monitor/etcd/etcd_members.h"

namespace pdpm::monitor {

// A loopback port no one listens on right now (bind to port 0).
Status FreeLoopbackPort(uint32_t* port);

class EtcdTestCluster {
 public:
  EtcdTestCluster();
  ~EtcdTestCluster();

  // Starts `members` members and waits until the cluster serves a
  // linearizable read (it has elected a Raft leader).
  Status Start(int members);
  void Kill(int i);       // SIGKILL, reaped
  Status Restart(int i);  // after Kill: same data, same ports

  // "127.0.0.1:p1,127.0.0.1:p2,..."
  std::string endpoints() const { return EtcdClientEndpoints(members_); }
  std::string endpoint(int i) const { return EtcdClientEndpoints({members_[i]}); }
  const std::string& dir() const { return dir_; }
  std::string log(int i) const { return dir_ + "/" + members_[i].name + ".log"; }

 private:
  Status StartMember(int i);
  Status WaitServing(const std::string& endpoints);

  std::string dir_;
  std::vector<EtcdMember> members_;
  std::vector<std::unique_ptr<client::ChildProcess>> procs_;
};

}  // namespace pdpm::monitor
