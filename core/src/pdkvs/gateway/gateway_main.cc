// pdkvs-gateway: serves a pDKVS store over the Redis protocol: with
// --monitor the distributed store of a PDPM cluster (ClusterKvStore), with
// --pm a LocalKvStore on that PM source. Stops on SIGINT / SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "client/client_flags.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/log.h"
#include "pdkvs/cluster/cluster_kv_store.h"
#include "pdkvs/gateway/gateway.h"
#include "pdkvs/gateway/local_kv_store.h"

namespace {

using namespace pdpm;
using namespace pdpm::pdkvs;

Status ParseListen(const std::string& listen, GatewayConfig* config) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("--listen wants HOST:PORT");
  config->bind = listen.substr(0, colon);
  int64_t port = 0;
  if (!ParseDecimalInt64(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return Status::InvalidArgument("--listen: bad port in " + listen);
  }
  config->port = static_cast<int>(port);
  return Status::OK();
}

// The store the flags name: exactly one of --monitor and --pm.
struct StoreFlags {
  client::ClientFlags cluster;
  std::string pm_path;
  uint64_t pm_size = 1ull << 30;
  uint32_t vnodes = 8;
};

Status OpenStore(const StoreFlags& f, uint32_t threads, const Logger& log,
                 std::unique_ptr<KvStore>* out) {
  if (f.cluster.given()) {
    client::ClientOptions options;
    // Each event loop its own connection to a server: a loop's round in
    // flight to a server does not hold up the other loops' rounds.
    options.connections_per_server = threads;
    PDPM_RETURN_IF_ERROR(f.cluster.ToOptions(&options));
    std::unique_ptr<ClusterKvStore> store;
    PDPM_RETURN_IF_ERROR(ClusterKvStore::Open(options, &store));
    log.Info("store: the PDPM cluster", {{"monitor", options.monitor}});
    *out = std::move(store);
    return Status::OK();
  }
  LocalKvStoreOptions options;
  options.create_size = f.pm_size;
  options.vnodes = f.vnodes;
  options.cores = static_cast<int>(threads);
  std::unique_ptr<LocalKvStore> store;
  PDPM_RETURN_IF_ERROR(LocalKvStore::Open(f.pm_path, options, &store));
  log.Info("store: local", {{"pm", f.pm_path}, {"vnodes", store->vnodes()}});
  *out = std::move(store);
  return Status::OK();
}

int Main(int argc, char** argv) {
  Logger log("pdkvs-gateway");
  std::string listen = "127.0.0.1:6379", password_file, port_file;
  StoreFlags store_flags;
  uint64_t max_bulk = 512ull << 20, max_args = 1 << 20;
  uint32_t threads = 2;
  uint64_t max_clients = 10000;
  bool enable_flushdb = false;
  FlagParser flags("pdkvs-gateway");
  flags.AddString("listen", &listen, "HOST:PORT to serve the Redis protocol on (port 0: any)");
  store_flags.cluster.Register(&flags);
  flags.AddString("pm", &store_flags.pm_path,
                  "instead of --monitor: PM source (devdax, DAX file or file) of a local store");
  flags.AddSize("pm-size", &store_flags.pm_size, "size of the PM file when it is created");
  flags.AddUint32("vnodes", &store_flags.vnodes, "vnodes of a new local store (1..15)");
  flags.AddString("port-file", &port_file, "write the bound host:port here once serving");
  flags.AddString("password-file", &password_file,
                  "file holding the password clients AUTH with (else $PDKVS_PASSWORD)");
  flags.AddBool("enable-flushdb", &enable_flushdb, "allow FLUSHDB");
  flags.AddSize("max-request", &max_bulk, "longest argument of a request (protocol error above)");
  flags.AddUint64("max-request-args", &max_args, "most arguments of a request");
  flags.AddUint64("maxclients", &max_clients, "most connected clients");
  flags.AddUint32("threads", &threads, "event-loop threads");
  std::chrono::milliseconds active_expiry = GatewayConfig{}.active_expiry_interval;
  flags.AddDuration("active-expiry-interval", &active_expiry,
                    "pause between two steps of the sweep that frees expired keys (0: no sweep)");
  Status s = flags.Parse(argc, argv);
  if (s.ok() && flags.PrintUsageIfAsked()) return 0;
  if (!s.ok()) {
    fprintf(stderr, "%s\n%s", s.ToString().c_str(), flags.Usage().c_str());
    return 2;
  }
  GatewayConfig config;
  s = ParseListen(listen, &config);
  if (s.ok() && store_flags.pm_path.empty() == !store_flags.cluster.given()) {
    s = Status::InvalidArgument("give either --monitor (a PDPM cluster) or --pm (a local store)");
  }
  if (s.ok() && store_flags.cluster.given() && store_flags.cluster.secret_file.empty()) {
    s = Status::InvalidArgument("--monitor needs --secret-file");
  }
  if (s.ok() && !password_file.empty()) {
    s = ReadSecretFile(password_file, &config.password).WithContext("--password-file");
  }
  if (s.ok() && password_file.empty()) {
    // Single-threaded here, and nothing changes the environment.
    if (const char* env = getenv("PDKVS_PASSWORD")) {  // NOLINT(concurrency-mt-unsafe)
      config.password = env;
    }
  }
  if (!s.ok()) {
    fprintf(stderr, "%s\n%s", s.ToString().c_str(), flags.Usage().c_str());
    return 2;
  }
  config.enable_flushdb = enable_flushdb;
  config.limits.max_bulk = max_bulk;
  config.limits.max_args = max_args;
  config.max_clients = max_clients;
  config.active_expiry_interval = active_expiry;

  // Signals go to sigwait below, not to the event loops.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::unique_ptr<KvStore> store;
  s = OpenStore(store_flags, threads, log, &store);
  if (!s.ok()) {
    log.Error("cannot open the pDKVS store", {{"error", s}});
    return 1;
  }
  std::unique_ptr<Gateway> gateway;
  s = Gateway::Start(store.get(), config, static_cast<int>(threads), log, &gateway);
  if (!s.ok()) {
    log.Error("cannot start the gateway", {{"error", s}});
    return 1;
  }
  const std::string bound = config.bind + ":" + std::to_string(gateway->port());
  log.Info("serving", {{"listen", bound}, {"auth", !config.password.empty()}});
  if (!port_file.empty()) {
    s = WriteFileAtomically(port_file, bound + "\n", 0644);
    if (!s.ok()) {
      log.Error("cannot write the port file", {{"error", s}});
      return 1;
    }
  }
  // The port on stdout, for scripts that asked for port 0.
  printf("port=%d\n", gateway->port());
  fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  log.Info("stopping", {{"signal", sig}});
  gateway.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Main(argc, argv);
}
