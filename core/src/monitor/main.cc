// pdpm-monitor: the cluster view daemon (see docs/monitor.md).
//
//   pdpm-monitor --embedded --dir DIR [--listen 127.0.0.1:7400] ...
//   pdpm-monitor --etcd HOST:PORT,... --secret-file F [--etcd-prefix P]
//                [--lease-ttl 3s] [--listen 127.0.0.1:7400] ...
//
// With --etcd, several monitors share one view in etcd: one leads, the
// others answer UNAVAILABLE naming it and take over when its lease lapses
// (monitor/etcd/leadership.h).
//
// Exits non-zero with one error line on bad flags, an unusable or corrupt
// view directory, or a listen address it cannot bind. SIGINT/SIGTERM stop
// it cleanly; kill -9 loses nothing acknowledged (every view change is
// durable before its reply).
#include <fcntl.h>
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/cluster_config.h"
#include "common/daemon_main.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/log.h"
#include "monitor/etcd/etcd_client.h"
#include "monitor/etcd/leadership.h"
#include "monitor/file_view_store.h"
#include "monitor/monitor_client.h"
#include "monitor/monitor_service.h"
#include "monitor/view_manager.h"

namespace pdpm::monitor {
namespace {

struct Flags {
  std::string config;
  std::string listen = "127.0.0.1:7400";
  std::string dir;
  bool embedded = false;
  std::string etcd;
  LeadershipOptions ha;
  std::string secret_file;
  std::string port_file;
  std::string advertise;
  std::string log_level = "info";
  MonitorOptions options;
};

// The cluster secret: from --secret-file, else DIR/cluster.secret, which is
// generated (random, mode 0600) when this is a new directory.
Status LoadSecret(const Flags& flags, const Logger& log, std::string* secret) {
  std::string path = flags.secret_file;
  if (path.empty()) {
    path = flags.dir + "/cluster.secret";
    if (::access(path.c_str(), F_OK) != 0) {
      unsigned char raw[32];
      if (::getrandom(raw, sizeof(raw), 0) != static_cast<ssize_t>(sizeof(raw))) {
        return Status::FromErrno("getrandom", errno);
      }
      std::string hex;
      static constexpr char kHex[] = "0123456789abcdef";
      for (unsigned char c : raw) {
        hex.push_back(kHex[c >> 4]);
        hex.push_back(kHex[c & 0xf]);
      }
      PDPM_RETURN_IF_ERROR(WriteFileAtomically(path, hex + "\n", 0600));
      log.Info("generated a cluster secret", {{"file", path}});
    }
  }
  PDPM_RETURN_IF_ERROR(ReadWholeFile(path, secret).WithContext("cluster secret"));
  while (!secret->empty() && std::isspace(static_cast<unsigned char>(secret->back()))) {
    secret->pop_back();
  }
  if (secret->empty()) return Status::InvalidArgument("cluster secret file " + path + " is empty");
  return Status::OK();
}

Status CheckAddress(const std::string& flag, const std::string& listen) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument(flag + " " + listen + ": want host:port");
  }
  std::string_view port(listen.data() + colon + 1, listen.size() - colon - 1);
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value > 65535) {
    return Status::InvalidArgument(flag + " " + listen + ": bad port");
  }
  return Status::OK();
}

// PDPM never modifies its environment, so reading it is safe.
const char* Env(const char* name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
}

// "http://host:port,..." (the operator's etcd endpoints) as the etcd
// client's "host:port,...".
Status EtcdMembers(const ClusterConfig& config, std::string* out) {
  std::string list;
  PDPM_RETURN_IF_ERROR(config.Require("etcd_endpoints", &list));
  out->clear();
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string member =
        list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (member.rfind("https://", 0) == 0) {
      return Status::NotSupported(config.path() + ": etcd endpoint " + member +
                                  ": TLS to etcd is not supported; use http://");
    }
    if (member.rfind("http://", 0) == 0) member.erase(0, 7);
    while (!member.empty() && member.back() == '/') member.pop_back();
    PDPM_RETURN_IF_ERROR(CheckAddress("etcd endpoint", member).WithContext(config.path()));
    if (!out->empty()) out->push_back(',');
    out->append(member);
  }
  return Status::OK();
}

// The value of `key` in the configuration as a number.
Status ConfigNumber(const ClusterConfig& config, const char* key, uint32_t* out) {
  const std::string text = config.Get(key);
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return Status::InvalidArgument(config.path() + ": " + key + " \"" + text +
                                   "\" is not a number");
  }
  return Status::OK();
}

// The operator's cluster configuration (common/cluster_config.h): the view
// in etcd (embedded or external members), its prefix, the cluster key, the
// port and the cluster parameters. Flags given on the command line win.
Status ApplyConfig(const FlagParser& parser, Flags* f) {
  ClusterConfig config;
  PDPM_RETURN_IF_ERROR(ClusterConfig::Load(f->config, &config));
  MonitorOptions& o = f->options;
  if (!parser.IsSet("etcd") && !parser.IsSet("embedded")) {
    std::string mode = config.Get("etcd_mode");
    if (mode != "embedded" && mode != "external") {
      return Status::InvalidArgument(config.path() + ": etcd_mode \"" + mode +
                                     "\": want embedded or external");
    }
    PDPM_RETURN_IF_ERROR(EtcdMembers(config, &f->etcd));
  }
  if (config.Has("etcd_prefix") && !parser.IsSet("etcd-prefix")) {
    f->ha.prefix = config.Get("etcd_prefix");
    while (f->ha.prefix.size() > 1 && f->ha.prefix.back() == '/') f->ha.prefix.pop_back();
  }
  if (config.Has("cluster_key_file") && !parser.IsSet("secret-file")) {
    f->secret_file = config.Get("cluster_key_file");
  }
  if (config.Has("monitor_port") && !parser.IsSet("listen")) {
    f->listen = "0.0.0.0:" + config.Get("monitor_port");
    const char* ip = Env("POD_IP");
    if (ip != nullptr && *ip != '\0' && !parser.IsSet("advertise")) {
      f->advertise = std::string(ip) + ":" + config.Get("monitor_port");
    }
  }
  if (config.Has("replica_count") && !parser.IsSet("replicas")) {
    PDPM_RETURN_IF_ERROR(ConfigNumber(config, "replica_count", &o.replicas));
    o.replicas_set = true;
  }
  if (config.Has("tables") && !parser.IsSet("tables")) {
    PDPM_RETURN_IF_ERROR(ConfigNumber(config, "tables", &o.tables));
    o.tables_set = true;
  }
  if (config.Has("segment_size") && !parser.IsSet("segment-size")) {
    PDPM_RETURN_IF_ERROR(ParseSize(config.Get("segment_size"), &o.segment_size)
                             .WithContext(config.path() + ": segment_size"));
    o.segment_size_set = true;
  }
  // Failure detection (the PDPMCluster's monitor.failureDetection): a
  // loaded node needs longer timeouts than the flags' defaults.
  const struct {
    const char* key;
    const char* flag;
    std::chrono::milliseconds* value;
  } timings[] = {{"heartbeat_interval", "heartbeat-interval", &o.heartbeat_interval},
                 {"suspect_timeout", "suspect-timeout", &o.suspect_timeout},
                 {"down_timeout", "down-timeout", &o.down_timeout}};
  for (const auto& t : timings) {
    if (!config.Has(t.key) || parser.IsSet(t.flag)) continue;
    PDPM_RETURN_IF_ERROR(
        ParseDuration(config.Get(t.key), t.value).WithContext(config.path() + ": " + t.key));
  }
  return Status::OK();
}

int Run(int argc, char** argv) {
  Flags flags;
  MonitorOptions& o = flags.options;
  FlagParser parser("pdpm-monitor");
  parser.AddString("config", &flags.config,
                   "cluster configuration file as the Kubernetes operator renders it");
  parser.AddString("listen", &flags.listen, "gRPC address host:port (port 0: any free port)");
  parser.AddString("dir", &flags.dir, "directory holding the cluster view (required)");
  parser.AddBool("embedded", &flags.embedded, "keep the view in a local file under --dir");
  parser.AddString("secret-file", &flags.secret_file,
                   "file with the cluster secret (default: DIR/cluster.secret, generated)");
  parser.AddUint32("replicas", &o.replicas, "copies of every segment (new cluster)");
  parser.AddUint32("tables", &o.tables, "object-store tables (new cluster)");
  parser.AddSize("segment-size", &o.segment_size, "segment size, e.g. 2GiB (new cluster)");
  parser.AddDuration("heartbeat-interval", &o.heartbeat_interval,
                     "how often servers heartbeat (default 50ms)");
  parser.AddDuration("suspect-timeout", &o.suspect_timeout,
                     "silence before SUSPECT (default 250ms)");
  parser.AddDuration(
      "down-timeout", &o.down_timeout,
      "silence before DOWN (default 500ms); servers hold leases of nine tenths of it");
  parser.AddString("port-file", &flags.port_file, "write the bound host:port here once serving");
  parser.AddString("advertise", &flags.advertise,
                   "with --etcd: the address other monitors name as the leader (default: the "
                   "bound --listen address; set it when listening on 0.0.0.0)");
  parser.AddString("log-level", &flags.log_level, "debug, info, warn or error");
  parser.AddString("etcd", &flags.etcd,
                   "keep the view in etcd, members host:port,... (high availability)");
  parser.AddString("etcd-prefix", &flags.ha.prefix, "etcd key prefix of this cluster");
  parser.AddDuration("lease-ttl", &flags.ha.lease_ttl,
                     "leader lease in etcd, whole seconds (failover takes about this long)");

  Logger log("monitor");
  if (std::optional<int> rc = ParseDaemonFlags(parser, argc, argv, flags.log_level, &log))
    return *rc;
  Status s;
  o.segment_size_set = parser.IsSet("segment-size");
  o.replicas_set = parser.IsSet("replicas");
  o.tables_set = parser.IsSet("tables");
  if (!flags.config.empty()) {
    s = ApplyConfig(parser, &flags);
    if (!s.ok()) return FailStart(log, "bad configuration file", s);
  }
  if (flags.embedded == !flags.etcd.empty()) {
    return FailStart(log, "bad command line",
                     Status::InvalidArgument("give either --embedded --dir DIR (a local view) or "
                                             "--etcd HOST:PORT,... (a view shared in etcd)"));
  }
  if (flags.embedded && flags.dir.empty()) {
    return FailStart(log, "bad command line", Status::InvalidArgument("--dir is required"));
  }
  if (!flags.embedded && (!flags.dir.empty() || flags.secret_file.empty())) {
    return FailStart(log, "bad command line",
                     Status::InvalidArgument("with --etcd, --secret-file is required and --dir is "
                                             "not used (every monitor must share the secret)"));
  }
  s = CheckAddress("--listen", flags.listen);
  if (s.ok() && !flags.advertise.empty()) s = CheckAddress("--advertise", flags.advertise);
  if (!s.ok()) return FailStart(log, "bad command line", s);

  std::unique_ptr<FileViewStore> store;
  std::unique_ptr<EtcdClient> etcd;
  if (flags.embedded) {
    s = FileViewStore::Open(flags.dir, &store);
    if (!s.ok()) return FailStart(log, "cannot use the view directory", s);
  } else {
    s = EtcdClient::Create(flags.etcd, flags.ha.lease_ttl / 3, &etcd);
    if (!s.ok()) return FailStart(log, "bad command line", s);
  }
  s = LoadSecret(flags, log, &o.cluster_secret);
  if (!s.ok()) return FailStart(log, "cannot read the cluster secret", s);
  s = o.Validate();
  if (!s.ok()) return FailStart(log, "bad command line", s);
  flags.ha.monitor = o;
  flags.ha.self = flags.listen;  // checked now, set to the bound address below
  s = flags.ha.Validate();
  if (!flags.embedded && !s.ok()) return FailStart(log, "bad command line", s);

  // Block the stop signals before any thread starts so only sigwait sees them.
  sigset_t stop_signals = BlockStopSignals();

  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::InsecureServerCredentials(), &port);
  // Without this a second process could bind the same port and steal calls.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);

  // Embedded: one view manager for the life of the process. HA: the
  // current term's, while this monitor leads.
  std::unique_ptr<ViewManager> views;
  std::unique_ptr<Leadership> leadership;
  std::atomic<Leadership*> electing{nullptr};
  std::unique_ptr<MonitorService> service;
  if (flags.embedded) {
    s = ViewManager::Open(store.get(), o, log, &views);
    if (!s.ok()) return FailStart(log, "cannot load the cluster view", s);
    service = std::make_unique<MonitorService>(views.get());
  } else {
    // Calls may arrive as soon as the port is bound, before the election
    // (which needs the bound address) exists.
    service = std::make_unique<MonitorService>([&](std::shared_ptr<ViewManager>* out) {
      Leadership* l = electing.load();
      if (l == nullptr) {
        return Status::Unavailable(std::string(kNotLeaderMessage) + "; no leader is elected yet");
      }
      return l->Current(out);
    });
  }
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return FailStart(
        log, "cannot serve",
        Status::Unavailable("cannot listen on " + flags.listen + " (address in use or not local)"));
  }
  std::string bound = flags.listen.substr(0, flags.listen.rfind(':')) + ":" + std::to_string(port);
  if (flags.embedded) {
    views->SetLeaderAddress(bound);
  } else {
    flags.ha.self = flags.advertise.empty() ? bound : flags.advertise;
    leadership = std::make_unique<Leadership>(etcd.get(), flags.ha, log);
    leadership->Start();
    electing = leadership.get();
  }
  if (!flags.port_file.empty()) {
    s = WriteFileAtomically(flags.port_file, bound + "\n", 0644);
    if (!s.ok()) {
      server->Shutdown();
      return FailStart(log, "cannot write the port file", s);
    }
  }
  if (flags.embedded) {
    log.Info("serving", {{"listen", bound},
                         {"store", store->Describe()},
                         {"epoch", views->epoch()},
                         {"heartbeat_interval_ms", o.heartbeat_interval.count()},
                         {"suspect_timeout_ms", o.suspect_timeout.count()},
                         {"down_timeout_ms", o.down_timeout.count()}});
  } else {
    log.Info("serving; campaigning for leadership",
             {{"listen", bound},
              {"etcd", flags.etcd},
              {"prefix", flags.ha.prefix},
              {"lease_ttl_ms", flags.ha.lease_ttl.count()},
              {"heartbeat_interval_ms", o.heartbeat_interval.count()},
              {"suspect_timeout_ms", o.suspect_timeout.count()},
              {"down_timeout_ms", o.down_timeout.count()}});
  }

  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::thread liveness([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, o.heartbeat_interval, [&] { return stopping; })) {
      lock.unlock();
      if (leadership != nullptr) {
        leadership->CheckLiveness();
      } else {
        views->CheckLiveness();
      }
      lock.lock();
    }
  });

  int sig = 0;
  Status fatal;
  const timespec tick = {0, 200L * 1000 * 1000};
  while (sig <= 0 && fatal.ok()) {
    sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (leadership != nullptr) fatal = leadership->fatal();
  }
  if (fatal.ok()) log.Info("stopping", {{"signal", sig}});
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cv.notify_all();
  liveness.join();
  if (leadership != nullptr) leadership->Stop();  // a leader resigns: fast handover
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  if (!fatal.ok()) return FailStart(log, "cannot lead this cluster", fatal);
  log.Info("stopped");
  return 0;
}

}  // namespace
}  // namespace pdpm::monitor

int main(int argc, char** argv) {
  return pdpm::monitor::Run(argc, argv);
}
