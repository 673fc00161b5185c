// pdpm-server: one PM node of a PDPM cluster (docs/server.md).
//
//   pdpm-server --pm PATH [--pm-size SIZE] [--format] [--segment-size SIZE]
//               --monitor HOST:PORT[,...] --secret-file F [--listen HOST:PORT]
//               [--transport tcp|verbs] [--cores N] [--label k=v,...]
//               [--labels-file PATH]
//   pdpm-server --config=/etc/pdpm/pdpm.conf        (Kubernetes)
//   pdpm-server --wipe-pm=DEVICE                    (zero a device, exit)
//
// Exits 2 on bad flags, 1 with one error line when it cannot start; SIGINT
// and SIGTERM stop it cleanly.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "common/cluster_config.h"
#include "common/daemon_main.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/log.h"
#include "pm/pm_device.h"
#include "server/address_space_holder.h"
#include "server/data_server.h"
#include "server/labels.h"

namespace pdpm::server {
namespace {

struct Flags {
  std::string config;
  std::string pm;
  uint64_t pm_size = 0;
  uint64_t resync_rate = 256ull << 20;
  bool format = false;
  uint64_t segment_size = 0;
  std::string monitor;
  std::string secret_file;
  std::string listen = "127.0.0.1:7500";
  std::string advertise;
  std::string transport = "tcp";
  uint32_t cores = 1;
  std::string labels;
  std::string labels_file;
  std::string port_file;
  std::string wipe_pm;
  std::string log_level = "info";
};

// PDPM never modifies its environment, so reading it is safe.
const char* Env(const char* name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) b++;
  return s.substr(b);
}

// The operator's cluster configuration (common/cluster_config.h). Flags
// given on the command line win over it.
Status ApplyConfig(const FlagParser& parser, Flags* f) {
  ClusterConfig config;
  PDPM_RETURN_IF_ERROR(ClusterConfig::Load(f->config, &config));
  auto take = [&](const char* key, const char* flag, std::string* out) {
    if (config.Has(key) && !parser.IsSet(flag)) *out = config.Get(key);
  };
  take("pm_path", "pm", &f->pm);
  take("transport", "transport", &f->transport);
  take("cluster_key_file", "secret-file", &f->secret_file);
  // Every monitor: the monitor client follows the leader among them.
  take("monitor_endpoints", "monitor", &f->monitor);
  if (config.Has("pm_size") && !parser.IsSet("pm-size")) {
    PDPM_RETURN_IF_ERROR(ParseSize(config.Get("pm_size"), &f->pm_size).WithContext("pm_size"));
  }
  if (config.Has("segment_size") && !parser.IsSet("segment-size")) {
    PDPM_RETURN_IF_ERROR(
        ParseSize(config.Get("segment_size"), &f->segment_size).WithContext("segment_size"));
  }
  if (config.Has("server_port") && !parser.IsSet("listen")) {
    f->listen = "0.0.0.0:" + config.Get("server_port");
    const char* ip = Env("POD_IP");
    if (ip != nullptr && *ip != '\0' && !parser.IsSet("advertise")) {
      f->advertise = std::string(ip) + ":" + config.Get("server_port");
    }
  }
  // The operator gives each server PM of its own: a blank one is formatted.
  if (!parser.IsSet("format")) f->format = true;
  return Status::OK();
}

// Zeroes a whole PM device (what the operator runs before giving a
// device-DAX device back), persisting as it goes.
Status WipePm(const std::string& path, const Logger& log) {
  std::unique_ptr<pm::PmDevice> device;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(path, pm::PmOptions{}, &device));
  constexpr uint64_t kStep = 64ull << 20;
  for (uint64_t off = 0; off < device->capacity(); off += kStep) {
    uint64_t n = std::min(kStep, device->capacity() - off);
    std::memset(device->base() + off, 0, n);
    device->Persist(device->base() + off, n);
  }
  log.Info("pm wiped", {{"path", path}, {"bytes", device->capacity()}});
  return Status::OK();
}

int Run(int argc, char** argv) {
  Flags f;
  FlagParser parser("pdpm-server");
  parser.AddString("config", &f.config, "cluster configuration file (key = value lines)");
  parser.AddString("pm", &f.pm, "PM device or file (required)");
  parser.AddSize("pm-size", &f.pm_size, "create or extend a PM file to this size, e.g. 1GiB");
  parser.AddBool("format", &f.format, "format the PM if it is blank (never a formatted one)");
  parser.AddSize("segment-size", &f.segment_size,
                 "segment size when formatting (default: the cluster's)");
  parser.AddString("monitor", &f.monitor,
                   "monitor host:port, or every monitor of an HA cluster: a,b,c (required)");
  parser.AddString("secret-file", &f.secret_file, "file holding the cluster secret (required)");
  parser.AddString("listen", &f.listen, "data-plane address host:port (port 0: any free port)");
  parser.AddString("advertise", &f.advertise,
                   "address announced to clients (default: the bound listen address)");
  parser.AddString("transport", &f.transport, "tcp or verbs");
  parser.AddUint32("cores", &f.cores, "serving threads and per-core connections");
  parser.AddString("label", &f.labels, "topology labels key=value,... (zone, rack, host)");
  parser.AddString("labels-file", &f.labels_file,
                   "file of key = value labels (--label wins for the same key)");
  parser.AddString("port-file", &f.port_file,
                   "write the data address here once serving (removed first at start)");
  parser.AddSize("resync-rate", &f.resync_rate,
                 "bytes per second a primary copies to a new backup, e.g. 256MiB (default)");
  parser.AddString("wipe-pm", &f.wipe_pm, "zero this PM device and exit");
  parser.AddString("log-level", &f.log_level, "debug, info, warn or error");

  Logger log("server");
  if (std::optional<int> rc = ParseDaemonFlags(parser, argc, argv, f.log_level, &log)) return *rc;
  Status s;
  if (!f.wipe_pm.empty()) {
    s = WipePm(f.wipe_pm, log);
    return s.ok() ? 0 : FailStart(log, "cannot wipe the PM", s);
  }
  if (!f.config.empty()) {
    s = ApplyConfig(parser, &f);
    if (!s.ok()) return FailStart(log, "bad configuration", s);
  }
  ServerOptions o;
  o.pm_path = f.pm;
  o.pm_size = f.pm_size;
  o.format = f.format;
  o.segment_size = f.segment_size;
  o.monitor = f.monitor;
  o.listen = f.listen;
  o.advertise = f.advertise;
  o.cores = f.cores;
  o.resync_bytes_per_sec = f.resync_rate;
  s = net::ParseBackendKind(f.transport, &o.transport);
  if (s.ok()) s = ParseLabelList(f.labels, &o.labels);
  if (s.ok() && !f.labels_file.empty()) s = LoadLabelsFile(f.labels_file, &o.labels);
  if (s.ok() && (o.pm_path.empty() || o.monitor.empty() || f.secret_file.empty())) {
    s = Status::InvalidArgument("--pm, --monitor and --secret-file are required");
  }
  if (!s.ok()) return FailStart(log, "bad command line", s);
  // The operator matches monitor state to pods by these (what the command
  // line or the labels file say wins).
  if (const char* pod = Env("POD_NAME"); pod != nullptr && *pod != '\0') {
    o.labels.emplace("pod", pod);
  }
  if (const char* node = Env("NODE_NAME"); node != nullptr && *node != '\0') {
    o.labels.emplace("host", node);
  }
  s = ReadWholeFile(f.secret_file, &o.cluster_secret);
  o.cluster_secret = Trim(o.cluster_secret);
  if (s.ok() && o.cluster_secret.empty()) s = Status::InvalidArgument("the secret file is empty");
  if (!s.ok()) return FailStart(log, "cannot read the cluster secret", s);

  // First, while no socket or PM exists: a killed server's connections then
  // close before its PM is unmapped (server/address_space_holder.h).
  std::unique_ptr<AddressSpaceHolder> holder;
  s = AddressSpaceHolder::Start(&holder);
  if (!s.ok()) log.Warn("peers will see a crash of this server late", {{"status", s}});

  sigset_t stop_signals = BlockStopSignals();
  // A signal during start (e.g. while waiting for the monitor) ends it.
  std::atomic<bool> stop{false};
  int sig = 0;
  std::thread waiter([&] {
    sigwait(&stop_signals, &sig);
    stop = true;
  });

  // The port file says this run serves (Kubernetes probes it): one left
  // by an earlier run must not.
  if (!f.port_file.empty() && ::unlink(f.port_file.c_str()) != 0 && errno != ENOENT) {
    s = Status::IOError(f.port_file + ": " + std::strerror(errno));
    ::kill(::getpid(), SIGTERM);  // release the waiter
    waiter.join();
    return FailStart(log, "cannot remove the old port file", s);
  }
  std::unique_ptr<DataServer> server;
  s = DataServer::Start(o, log, &stop, &server);
  if (!s.ok()) {
    if (!stop) {
      ::kill(::getpid(), SIGTERM);  // release the waiter
    }
    waiter.join();
    return FailStart(log, "cannot start", s);
  }
  if (!f.port_file.empty()) {
    s = WriteFileAtomically(f.port_file, server->address() + "\n", 0644);
    if (!s.ok()) {
      server.reset();
      ::kill(::getpid(), SIGTERM);  // release the waiter
      waiter.join();
      return FailStart(log, "cannot write the port file", s);
    }
  }
  waiter.join();
  log.Info("stopping", {{"signal", sig}});
  server.reset();
  log.Info("stopped");
  return 0;
}

}  // namespace
}  // namespace pdpm::server

int main(int argc, char** argv) {
  return pdpm::server::Run(argc, argv);
}
