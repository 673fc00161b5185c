#include "monitor/etcd/etcd_members.h"

namespace pdpm::monitor {
namespace {

std::string Url(const std::string& host, uint32_t port) {
  return "http://" + host + ":" + std::to_string(port);
}

}  // namespace

std::vector<std::string> EtcdMemberArgs(const std::vector<EtcdMember>& members, size_t index,
                                        const std::string& data_dir, const std::string& token) {
  const EtcdMember& m = members[index];
  std::string initial;
  for (const EtcdMember& peer : members) {
    initial += (initial.empty() ? "" : ",") + peer.name + "=" + Url(peer.host, peer.peer_port);
  }
  return {"--name",
          m.name,
          "--data-dir",
          data_dir,
          "--listen-client-urls",
          Url(m.host, m.client_port),
          "--advertise-client-urls",
          Url(m.host, m.client_port),
          "--listen-peer-urls",
          Url(m.host, m.peer_port),
          "--initial-advertise-peer-urls",
          Url(m.host, m.peer_port),
          "--initial-cluster",
          initial,
          "--initial-cluster-token",
          token,
          "--initial-cluster-state",
          "new",
          "--logger",
          "zap",
          "--log-level",
          "warn"};
}

std::string EtcdClientEndpoints(const std::vector<EtcdMember>& members) {
  std::string out;
  for (const EtcdMember& m : members) {
    out += (out.empty() ? "" : ",") + m.host + ":" + std::to_string(m.client_port);
  }
  return out;
}

}  // namespace pdpm::monitor
