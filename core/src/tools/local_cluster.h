// LocalCluster: a PDPM cluster of one monitor and N servers on file-backed
// PM, all on this machine, kept in one directory — what `pdpm up`, `pdpm
// down` and the client subcommands of the CLI work on (docs/cli.md).
//
// The directory holds everything: cluster.conf (the parameters chosen when
// the cluster was created), cluster.secret (generated once, mode 0600),
// monitor/ (the view), monitor.addr, server-<i>.pm (PM files), and a .pid
// and .log per daemon. A highly available cluster (`--ha`) has instead
// three etcd members (etcd-<i>/ their data) and three monitors sharing the
// view in etcd (monitor-<i>.addr). The pDKVS gateway (pdkvs-gateway, the
// Redis protocol) starts once the cluster is healthy (gateway.addr). Up() on a directory whose
// daemons were stopped or killed brings the same cluster back with its data: PM files are formatted
// only when they do not exist yet.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "pdpm/v1/monitor.pb.h"
#include "tools/daemon.h"

namespace pdpm::tools {

// The parameters of a local cluster, fixed when it is created. The names
// of the keys in cluster.conf are those of the `pdpm up` flags.
struct LocalClusterConfig {
  uint32_t servers = 3;
  uint64_t pm_size = 1ULL << 30;  // per server
  uint64_t segment_size = 64ULL << 20;
  std::string host = "127.0.0.1";  // every daemon listens here
  uint32_t monitor_port = 7400;
  uint32_t server_port = 7401;  // server i listens on server_port + i - 1
  std::string transport = "tcp";
  // High availability: three etcd members and three monitors. Monitor i
  // (1..3) listens on monitor_port + i - 1; etcd member i serves clients on
  // etcd_port + 2(i - 1) and its peers on the port after.
  bool ha = false;
  uint32_t etcd_port = 2379;

  static constexpr uint32_t kHaMembers = 3;
  uint32_t monitors() const { return ha ? kHaMembers : 1; }
  // Copies of every segment. A cluster.conf written before replication
  // existed has no key: those clusters keep 1.
  uint32_t replicas = 2;
  // Object-store tables, which are also the pDKVS vnodes: each fills a
  // segment (and its copies) once used, so a small local cluster wants few.
  // 0 (a cluster.conf written before the key existed): the monitor's own.
  uint32_t tables = 16;
  // The pDKVS gateway's Redis-protocol port; 0: no gateway.
  uint32_t gateway_port = 7379;

  Status Validate() const;
  std::string Serialize() const;  // key=value lines
  static Status Parse(const std::string& text, LocalClusterConfig* out);
  // Names of the keys whose values differ.
  std::vector<std::string> Differences(const LocalClusterConfig& other) const;
};

struct UpOptions {
  std::chrono::milliseconds timeout{30000};  // until healthy
};

class LocalCluster {
 public:
  // `dir` is the cluster directory; the daemons' binaries are looked up
  // beside the running executable first, then at their build-tree paths.
  explicit LocalCluster(std::string dir);

  const std::string& dir() const { return dir_; }

  // The stored configuration; kNotFound when no cluster was created here.
  Status LoadConfig(LocalClusterConfig* config) const;

  // Creates (first time, with `config`) or restarts the cluster and waits
  // until the monitor reports every server UP and health OK. Refuses with
  // kAlreadyExists while any of its daemons runs. On failure it stops
  // what it started and the message names the daemon that failed, followed
  // by the tail of its log.
  Status Up(const LocalClusterConfig& config, const UpOptions& options, std::ostream& progress);

  // Unmounts the file-system mounts (FsMounts), then stops servers then the
  // monitor: SIGTERM, then SIGKILL after `grace`.
  // OK when nothing was running.
  Status Down(std::chrono::milliseconds grace, std::ostream& progress);

  // For clients: the monitor's address — every monitor's, comma-separated,
  // in an HA cluster — (kFailedPrecondition when no monitor of this
  // directory is running) and the cluster secret.
  Status MonitorAddress(std::string* address) const;
  Status Secret(std::string* secret) const;

  // The gateway's address (kFailedPrecondition when it does not run).
  Status GatewayAddress(std::string* address) const;
  // The pDFS volume API's address (pdfs-volume-api; kFailedPrecondition
  // when it does not run).
  Status VolumeApiAddress(std::string* address) const;

  // The etcd members (HA only), the monitors, the servers of `config`, then
  // the gateway and the volume API: the order they start in.
  std::vector<DaemonSpec> Daemons(const LocalClusterConfig& config) const;
  std::vector<DaemonSpec> EtcdDaemons(const LocalClusterConfig& config) const;
  std::vector<DaemonSpec> MonitorDaemons(const LocalClusterConfig& config) const;
  DaemonSpec ServerDaemon(const LocalClusterConfig& config, uint32_t index) const;  // from 1
  // Only for a config with a gateway port.
  DaemonSpec GatewayDaemon(const LocalClusterConfig& config) const;
  // pdfs-volume-api on the cluster's host, any free port (volume-api.addr).
  DaemonSpec VolumeApiDaemon(const LocalClusterConfig& config) const;
  // pdfs-fuse mounting `volume` ("": the whole file system) on `mountpoint`
  // (absolute), its pid, log and record in fs/ of the directory.
  DaemonSpec FsMountDaemon(const LocalClusterConfig& config, const std::string& mountpoint,
                           const std::string& volume) const;
  // The mounts started here and not unmounted: mountpoint -> volume.
  std::vector<std::pair<std::string, std::string>> FsMounts() const;
  // Starts a mount (kAlreadyExists when one runs on `mountpoint`) and
  // waits until it serves; records it for FsMounts.
  Status FsMount(const std::string& mountpoint, const std::string& volume,
                 std::chrono::milliseconds timeout);
  // Stops the mount on `mountpoint` (unmounting it); kNotFound when none
  // of this cluster runs there.
  Status FsUnmount(const std::string& mountpoint, std::chrono::milliseconds grace);
  std::string ServerPmFile(uint32_t index) const;  // index from 1
  std::string ServerAddress(const LocalClusterConfig& config, uint32_t index) const;

 private:
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // Written by server `index` once it serves (--port-file).
  std::string ServerAddressFile(uint32_t index) const;
  // Written by monitor `index` (from 1) once it serves.
  std::string MonitorAddressFile(const LocalClusterConfig& config, uint32_t index) const;
  // Present from a server's first start until the cluster was healthy.
  std::string FormatPendingMarker(uint32_t index) const;
  Status EnsureSecret() const;
  Status RefuseIfRunning(const std::vector<DaemonSpec>& daemons) const;
  // Starts the daemons and waits for health; fills `started`.
  Status StartAll(const LocalClusterConfig& config, const UpOptions& options,
                  std::ostream& progress, std::vector<std::pair<DaemonSpec, pid_t>>* started);
  // Starts a daemon clients reach once the cluster is healthy (the
  // gateway, the volume API) and waits until it has written its address
  // (its identity file): *address.
  Status StartFrontEnd(const DaemonSpec& spec, std::chrono::steady_clock::time_point deadline,
                       std::vector<std::pair<DaemonSpec, pid_t>>* started, std::string* address);
  // The address a running front end wrote; kFailedPrecondition otherwise.
  Status ServingAddress(const DaemonSpec& spec, std::string* address) const;
  // Starts the etcd members and waits until they serve.
  Status StartEtcd(const LocalClusterConfig& config, std::chrono::steady_clock::time_point deadline,
                   std::ostream& progress, std::vector<std::pair<DaemonSpec, pid_t>>* started);

  std::string dir_;
  std::string monitor_binary_;
  std::string server_binary_;
  std::string gateway_binary_;
  std::string fuse_binary_;
  std::string volume_api_binary_;
  std::string etcd_binary_;  // "" when no etcd is installed
};

// The default cluster directory: $XDG_DATA_HOME/pdpm, else
// $HOME/.local/share/pdpm.
Status DefaultClusterDir(std::string* dir);

// "512 MiB" style.
std::string HumanBytes(uint64_t bytes);

}  // namespace pdpm::tools
