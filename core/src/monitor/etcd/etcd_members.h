// A static etcd cluster on one machine: the command lines of its members,
// for `pdpm up --ha` and the tests, which start Debian's `etcd` binary.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace pdpm::monitor {

struct EtcdMember {
  std::string name;  // unique in the cluster: "etcd-1"
  std::string host;  // listens here (plain http)
  uint32_t client_port = 0;
  uint32_t peer_port = 0;
};

// The arguments (after the binary) of member `index` of `members`, keeping
// its data in `data_dir`. The cluster forms from the full member list on
// first start; a restart on an existing data directory rejoins it.
std::vector<std::string> EtcdMemberArgs(const std::vector<EtcdMember>& members, size_t index,
                                        const std::string& data_dir, const std::string& token);

// "host:port,host:port,...": the client endpoints, as `pdpm-monitor --etcd`
// takes them.
std::string EtcdClientEndpoints(const std::vector<EtcdMember>& members);

// Waits until the etcd cluster at `endpoints` answers a linearizable read
// (it has a Raft leader), at most `timeout`. `check` runs between tries; an
// error from it (a member exited) ends the wait with that error.
Status WaitEtcdServing(const std::string& endpoints, std::chrono::milliseconds timeout,
                       const std::function<Status()>& check);

}  // namespace pdpm::monitor
