// pdfs-volume-api: serves pdpm.v1.Volumes, the pDFS volume API
// (proto/pdpm/v1/pdfs.proto, docs/pdfs.md "Volume API"), on a TCP address
// or a unix socket. Each request names its cluster; no cluster is given on
// the command line. Stops on SIGINT / SIGTERM.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

#include "common/daemon_main.h"
#include "common/file_util.h"
#include "pdfs/service/volume_service.h"

namespace {

using namespace pdpm;

int Main(int argc, char** argv) {
  Logger log("pdfs-volume-api");
  std::string listen = "127.0.0.1:0", port_file, log_level = "info";
  pdfs::VolumeServiceOptions options;
  uint64_t max_clusters = options.max_clusters;
  FlagParser parser("pdfs-volume-api");
  parser.AddString("listen", &listen,
                   "HOST:PORT (port 0: any) or unix:PATH to serve the volume API on");
  parser.AddString("port-file", &port_file,
                   "write the bound address here once serving (HOST:PORT, or unix:PATH)");
  parser.AddUint64("max-clusters", &max_clusters,
                   "clusters to keep a client of (the least recently used goes first)");
  parser.AddUint32("failover-wait-ms", &options.failover_wait_ms,
                   "how long an operation whose PM server failed waits for the failover");
  parser.AddString("log-level", &log_level, "debug, info, warn or error");
  if (std::optional<int> exit = ParseDaemonFlags(parser, argc, argv, log_level, &log)) {
    return *exit;
  }
  if (max_clusters == 0) {
    return FailStart(log, "bad command line",
                     Status::InvalidArgument("--max-clusters must be 1 or more"));
  }
  options.max_clusters = max_clusters;
  const bool unix_socket = listen.rfind("unix:", 0) == 0;
  if (!unix_socket && listen.rfind(':') == std::string::npos) {
    return FailStart(log, "bad command line",
                     Status::InvalidArgument("--listen wants HOST:PORT or unix:PATH"));
  }

  sigset_t stop_signals = BlockStopSignals();
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  pdfs::VolumeService service(options, log);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  // Without this a second process could bind the same port and steal calls.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (!unix_socket && port == 0)) {
    return FailStart(log, "cannot serve",
                     Status::Unavailable("cannot listen on " + listen +
                                         " (address in use, not local, or no such directory)"));
  }
  const std::string bound =
      unix_socket ? listen : listen.substr(0, listen.rfind(':')) + ":" + std::to_string(port);
  if (!port_file.empty()) {
    Status s = WriteFileAtomically(port_file, bound + "\n", 0644);
    if (!s.ok()) {
      server->Shutdown();
      return FailStart(log, "cannot write the port file", s);
    }
  }
  log.Info("serving", {{"listen", bound}, {"max_clusters", max_clusters}});
  int sig = 0;
  while (sig <= 0) sig = sigwaitinfo(&stop_signals, nullptr);
  log.Info("stopping", {{"signal", sig}});
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  log.Info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Main(argc, argv);
}
