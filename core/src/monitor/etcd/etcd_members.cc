#include "monitor/etcd/etcd_members.h"

#include <memory>
#include <thread>

#include "monitor/etcd/etcd_client.h"

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

Status WaitEtcdServing(const std::string& endpoints, std::chrono::milliseconds timeout,
                       const std::function<Status()>& check) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    // A fresh channel each time: one connected while etcd was still
    // starting can stall for many seconds.
    std::unique_ptr<EtcdClient> client;
    PDPM_RETURN_IF_ERROR(EtcdClient::Create(endpoints, std::chrono::milliseconds(1000), &client));
    etcdserverpb::KeyValue kv;
    bool found = false;
    last = client->Get("/pdpm/ready-probe", &kv, &found);
    if (last.ok()) return last;
    PDPM_RETURN_IF_ERROR(check());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last.WithContext("etcd at " + endpoints + " is not serving");
}

}  // namespace pdpm::monitor
