// pdkvs-gateway: serves a pDKVS store over the Redis protocol. With --pm the
// store is a LocalKvStore on that PM source. Stops on SIGINT / SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/flags.h"
#include "common/log.h"
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

Status ReadPassword(const std::string& file, std::string* password) {
  std::ifstream in(file);
  if (!in) return Status::NotFound("--password-file: cannot read " + file);
  std::stringstream ss;
  ss << in.rdbuf();
  *password = ss.str();
  while (!password->empty() && (password->back() == '\n' || password->back() == '\r')) {
    password->pop_back();
  }
  if (password->empty()) return Status::InvalidArgument("--password-file: empty password");
  return Status::OK();
}

int Main(int argc, char** argv) {
  Logger log("pdkvs-gateway");
  std::string listen = "127.0.0.1:6379", pm_path, password_file;
  uint64_t pm_size = 1ull << 30, max_bulk = 512ull << 20, max_args = 1 << 20;
  uint32_t threads = 2, vnodes = 8;
  uint64_t max_clients = 10000;
  bool enable_flushdb = false;
  FlagParser flags("pdkvs-gateway");
  flags.AddString("listen", &listen, "HOST:PORT to serve the Redis protocol on (port 0: any)");
  flags.AddString("pm", &pm_path, "PM source (devdax, DAX file or file) of the local store");
  flags.AddSize("pm-size", &pm_size, "size of the PM file when it is created");
  flags.AddUint32("vnodes", &vnodes, "vnodes of a new local store (1..15)");
  flags.AddString("password-file", &password_file,
                  "file holding the password clients AUTH with (else $PDKVS_PASSWORD)");
  flags.AddBool("enable-flushdb", &enable_flushdb, "allow FLUSHDB");
  flags.AddSize("max-request", &max_bulk, "longest argument of a request (protocol error above)");
  flags.AddUint64("max-request-args", &max_args, "most arguments of a request");
  flags.AddUint64("maxclients", &max_clients, "most connected clients");
  flags.AddUint32("threads", &threads, "event-loop threads");
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) {
    fprintf(stderr, "%s\n%s", s.ToString().c_str(), flags.Usage().c_str());
    return 2;
  }
  GatewayConfig config;
  s = ParseListen(listen, &config);
  if (s.ok() && pm_path.empty()) s = Status::InvalidArgument("--pm is required");
  if (s.ok() && !password_file.empty()) s = ReadPassword(password_file, &config.password);
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

  // Signals go to sigwait below, not to the event loops.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  LocalKvStoreOptions store_options;
  store_options.create_size = pm_size;
  store_options.vnodes = vnodes;
  store_options.cores = static_cast<int>(threads);
  std::unique_ptr<LocalKvStore> store;
  s = LocalKvStore::Open(pm_path, store_options, &store);
  if (!s.ok()) {
    log.Error("cannot open the pDKVS store", {{"pm", pm_path}, {"error", s}});
    return 1;
  }
  std::unique_ptr<Gateway> gateway;
  s = Gateway::Start(store.get(), config, static_cast<int>(threads), log, &gateway);
  if (!s.ok()) {
    log.Error("cannot start the gateway", {{"error", s}});
    return 1;
  }
  uint64_t keys = 0;
  (void)store->Count(&keys);
  log.Info("serving", {{"listen", config.bind + ":" + std::to_string(gateway->port())},
                       {"pm", pm_path},
                       {"vnodes", store->vnodes()},
                       {"keys", keys},
                       {"auth", !config.password.empty()}});
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
