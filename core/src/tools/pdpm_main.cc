// pdpm: the command-line tool of PDPM (docs/cli.md).
//
//   pdpm up | down | status | obj put|get|del | kv get|put|del|scan |
//        fs mount|umount|volume | fsck | server drain   [--dir DIR] [flags]
//
// Every failure is one line "pdpm: <what>" on stderr (a failing daemon's
// log tail follows it, indented) and a non-zero exit: 1 for errors, 2 for
// a bad command line.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "monitor/monitor_client.h"
#include "pdfs/client/file_system.h"
#include "pdfs/client/fs_check.h"
#include "pdfs/volumes/volume_manager.h"
#include "pdkvs/cluster/cluster_kv_store.h"
#include "server/fsck.h"
#include "server/kv_protocol.h"
#include "tools/local_cluster.h"
#include "tools/object_id.h"

namespace pdpm::tools {
namespace {

using std::chrono::milliseconds;

constexpr const char* kUsage =
    "usage: pdpm <command> [arguments] [--dir DIR] [flags]\n"
    "\n"
    "commands:\n"
    "  up                    start a local cluster (monitor + servers on file-backed PM;\n"
    "                        --ha: 3 etcd members + 3 monitors)\n"
    "  status                servers, epoch, capacity, use and health; exit 1 unless healthy\n"
    "                        (--monitor HOST:PORT: of any cluster's monitor)\n"
    "  down                  stop the local cluster (its data stays in DIR)\n"
    "  obj put <id> [file]   store an object from the file (stdin when none)\n"
    "  obj get <id> [file]   write an object to the file (stdout when none)\n"
    "  obj del <id>          delete an object\n"
    "  kv put <key> [value]  set a pDKVS key (value from stdin when none)\n"
    "  kv get <key>          print a key's value\n"
    "  kv del <key>          delete a key\n"
    "  kv scan               list the keys\n"
    "  fs volume create <name>   create a pDFS volume (--bytes, --inodes: its quota)\n"
    "  fs volume resize <name>   change its quota (--bytes, --inodes)\n"
    "  fs volume stat <name>     its use and quota\n"
    "  fs volume delete <name>   delete a volume and everything in it (not while mounted)\n"
    "  fs volume list            list the volumes with their use and quota\n"
    "  fs mount <volume> <dir>   mount a volume on a directory (pdfs-fuse, a daemon)\n"
    "  fs umount <dir>           unmount it\n"
    "  fsck                  check the PM of the stopped servers offline\n"
    "  fsck --fs [--repair]  check the pDFS of the running cluster (repair: free\n"
    "                        orphans and leaks, set quota usage; no mount may run)\n"
    "  server drain <id>     move a server's data away; it is DRAINED and may leave\n"
    "  help [command]        this text, or the flags of one command\n"
    "\n"
    "DIR defaults to $XDG_DATA_HOME/pdpm (~/.local/share/pdpm). Object ids are\n"
    "32 hex digits or a decimal number. The cluster's pDKVS also speaks the Redis\n"
    "protocol (its gateway's port is in `pdpm up`'s output).\n";

constexpr const char* kSwitches[] = {"--ha", "--nx", "--xx", "--fs", "--repair"};

int Fail(const Status& s) {
  std::fprintf(stderr, "pdpm: %s\n", s.ToString().c_str());
  return 1;
}

// The command line of one subcommand: positional arguments and flags may
// be mixed; every flag takes a value (`--name value` or `--name=value`)
// except the switches in kSwitches.
class CommandLine {
 public:
  CommandLine(std::string command, std::vector<std::string> args)
      : parser_("pdpm " + command), command_(std::move(command)) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--help" || args[i] == "-h") {
        help_ = true;
      } else if (args[i].rfind("--", 0) == 0) {
        flags_.push_back(args[i]);
        bool is_switch =
            std::find(std::begin(kSwitches), std::end(kSwitches), args[i]) != std::end(kSwitches);
        if (!is_switch && args[i].find('=') == std::string::npos && i + 1 < args.size()) {
          flags_.push_back(args[++i]);
        }
      } else {
        positional_.push_back(args[i]);
      }
    }
    parser_.AddString("dir", &dir_, "cluster directory (default $XDG_DATA_HOME/pdpm)");
  }

  FlagParser& parser() { return parser_; }
  const std::vector<std::string>& positional() const { return positional_; }

  // Parses the flags and resolves the directory. With --help it prints the
  // command's usage instead and help_shown() is true.
  Status Parse(size_t min_positional, size_t max_positional, const std::string& positional_usage) {
    if (help_) {
      // The parser's own first line lacks the positional arguments.
      std::string flags = parser_.Usage();
      flags.erase(0, flags.find('\n') + 1);
      std::printf("usage: pdpm %s%s\n%s", command_.c_str(), positional_usage.c_str(),
                  flags.c_str());
      return Status::OK();
    }
    std::vector<const char*> argv = {command_.c_str()};
    for (const std::string& f : flags_) argv.push_back(f.c_str());
    PDPM_RETURN_IF_ERROR(parser_.Parse(static_cast<int>(argv.size()), argv.data()));
    if (positional_.size() < min_positional || positional_.size() > max_positional) {
      return Status::InvalidArgument("usage: pdpm " + command_ + positional_usage);
    }
    if (dir_.empty()) PDPM_RETURN_IF_ERROR(DefaultClusterDir(&dir_));
    while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
    return Status::OK();
  }

  const std::string& dir() const { return dir_; }
  bool help_shown() const { return help_; }

 private:
  FlagParser parser_;
  std::string command_;
  std::vector<std::string> flags_;
  std::vector<std::string> positional_;
  std::string dir_;
  bool help_ = false;
};

int BadCommandLine(const Status& s) {
  std::fprintf(stderr, "pdpm: %s\n", s.ToString().c_str());
  std::fprintf(stderr, "(`pdpm help` lists the commands; `pdpm help <command>` its flags)\n");
  return 2;
}

int Up(CommandLine& cl) {
  LocalClusterConfig requested;
  milliseconds timeout{30000};
  FlagParser& p = cl.parser();
  p.AddUint32("servers", &requested.servers, "number of servers (new cluster; default 3)");
  p.AddSize("pm-size", &requested.pm_size, "PM file size per server (new cluster; default 1GiB)");
  p.AddSize("segment-size", &requested.segment_size, "segment size (new cluster; default 64MiB)");
  p.AddString("host", &requested.host, "address every daemon listens on (default 127.0.0.1)");
  p.AddUint32("monitor-port", &requested.monitor_port, "monitor port (default 7400)");
  p.AddUint32("server-port", &requested.server_port,
              "port of server 1; server i uses this + i - 1 (default 7401)");
  p.AddString("transport", &requested.transport, "data transport: tcp or verbs (default tcp)");
  p.AddBool("ha", &requested.ha,
            "high availability: 3 etcd members and 3 monitors on --monitor-port + 0..2 "
            "(new cluster)");
  p.AddUint32("etcd-port", &requested.etcd_port,
              "with --ha: etcd member i serves on this + 2(i-1), its peers on the next port "
              "(default 2379)");
  p.AddUint32("replicas", &requested.replicas,
              "copies of every segment, on distinct servers (new cluster; default 2)");
  p.AddUint32("tables", &requested.tables,
              "object-store tables = pDKVS vnodes, each filling a segment once used "
              "(new cluster; default 16)");
  p.AddUint32("gateway-port", &requested.gateway_port,
              "port of the pDKVS gateway (Redis protocol); 0: none (new cluster; default 7379)");
  p.AddDuration("timeout", &timeout, "how long to wait for a healthy cluster (default 30s)");
  Status s = cl.Parse(0, 0, " [flags]");
  if (cl.help_shown()) return 0;
  if (!s.ok()) return BadCommandLine(s);

  // Three monitors take the ports from --monitor-port on; the servers
  // follow them unless placed explicitly.
  if (requested.ha && !cl.parser().IsSet("server-port")) {
    requested.server_port = requested.monitor_port + LocalClusterConfig::kHaMembers;
  }
  s = requested.Validate();
  if (!s.ok()) return BadCommandLine(s);
  LocalCluster cluster(cl.dir());
  LocalClusterConfig config = requested;
  LocalClusterConfig stored;
  s = cluster.LoadConfig(&stored);
  if (s.ok()) {
    // An existing cluster keeps its parameters; a flag contradicting them
    // is a mistake, not a request to reformat.
    for (const std::string& key : stored.Differences(requested)) {
      if (!cl.parser().IsSet(key)) continue;
      // The stored value, from its "key=value" line.
      std::string text = "\n" + stored.Serialize();
      size_t at = text.find("\n" + key + "=") + key.size() + 2;
      std::string value = text.substr(at, text.find('\n', at) - at);
      std::string msg = "the cluster in " + cl.dir() + " was created with --";
      msg.append(key).append(" ").append(value).append("; drop the flag or use another --dir");
      return Fail(Status::InvalidArgument(msg));
    }
    config = stored;
  } else if (s.code() != StatusCode::kNotFound) {
    return Fail(s);
  }
  std::cout << "starting PDPM in " << cl.dir() << "\n" << std::flush;
  s = cluster.Up(config, {timeout}, std::cout);
  if (!s.ok()) return Fail(s);
  std::string address;
  s = cluster.MonitorAddress(&address);
  if (!s.ok()) return Fail(s);
  std::string dir_flag = " --dir " + cl.dir();
  std::cout << "PDPM is up: " << config.servers << " servers, " << HumanBytes(config.pm_size)
            << " of PM each, " << (config.ha ? "monitors at " : "monitor at ") << address
            << (config.ha ? " (view in etcd)" : "") << "\n"
            << "\n"
            << "  pdpm status" << dir_flag << "\n"
            << "  pdpm obj put 1 FILE" << dir_flag << "     # store FILE as object 1\n"
            << "  pdpm obj get 1 COPY" << dir_flag << "     # read it back\n"
            << "  pdpm kv put greeting hello" << dir_flag << "\n"
            << "  pdpm kv get greeting" << dir_flag << "\n";
  std::string gateway;
  if (cluster.GatewayAddress(&gateway).ok()) {
    std::string port = gateway.substr(gateway.rfind(':') + 1);
    std::cout << "  redis-cli -p " << port << " get greeting      # the Redis protocol\n";
  }
  std::cout << "  pdpm down" << dir_flag << "\n"
            << "\n"
            << "Programs using libpdpm connect to "
            << (config.ha ? "the monitors at " : "the monitor at ") << address
            << " with the secret in " << cl.dir() << "/cluster.secret";
  if (!gateway.empty()) std::cout << "; Redis clients to the gateway at " << gateway;
  std::string volume_api;
  if (cluster.VolumeApiAddress(&volume_api).ok()) {
    std::cout << "; gRPC clients of the pDFS volume API (pdpm.v1.Volumes) to " << volume_api;
  }
  std::cout << ".\n";
  return 0;
}

int Down(CommandLine& cl) {
  milliseconds grace{10000};
  cl.parser().AddDuration("timeout", &grace,
                          "how long each daemon gets after SIGTERM before SIGKILL (default 10s)");
  Status s = cl.Parse(0, 0, " [flags]");
  if (cl.help_shown()) return 0;
  if (!s.ok()) return BadCommandLine(s);
  s = LocalCluster(cl.dir()).Down(grace, std::cout);
  return s.ok() ? 0 : Fail(s);
}

const char* StateName(v1::ServerState state) {
  switch (state) {
    case v1::SERVER_STATE_UP: return "UP";
    case v1::SERVER_STATE_SUSPECT: return "SUSPECT";
    case v1::SERVER_STATE_DOWN: return "DOWN";
    case v1::SERVER_STATE_DRAINING: return "DRAINING";
    case v1::SERVER_STATE_DRAINED: return "DRAINED";
    default: return "?";
  }
}

const char* HealthName(v1::Health health) {
  switch (health) {
    case v1::HEALTH_OK: return "OK";
    case v1::HEALTH_DEGRADED: return "DEGRADED";
    case v1::HEALTH_DOWN: return "DOWN";
    default: return "UNKNOWN";
  }
}

std::string Percent(uint64_t part, uint64_t whole) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f%%", whole == 0 ? 0.0 : 100.0 * part / whole);
  return buf;
}

// A server's labels as k=v,k=v in key order ("-" for none).
std::string LabelList(const v1::ServerInfo& server) {
  std::map<std::string, std::string> sorted(server.labels().begin(), server.labels().end());
  std::string out;
  for (const auto& [key, value] : sorted) out += (out.empty() ? "" : ",") + key + "=" + value;
  return out.empty() ? "-" : out;
}

int StatusCommand(CommandLine& cl) {
  std::string address;
  cl.parser().AddString("monitor", &address,
                        "ask the monitor(s) host:port[,...] of any cluster (e.g. on Kubernetes) "
                        "instead of the local cluster of --dir");
  Status s = cl.Parse(0, 0, " [flags]");
  if (cl.help_shown()) return 0;
  if (!s.ok()) return BadCommandLine(s);
  if (address.empty()) {
    LocalCluster cluster(cl.dir());
    s = cluster.MonitorAddress(&address);
    if (!s.ok()) return Fail(s);
  }
  monitor::MonitorClient client(address, {"", milliseconds(5000)});
  v1::ClusterStatus st;
  s = client.GetClusterStatus(&st);
  if (!s.ok()) return Fail(s.WithContext("monitor at " + address));

  std::printf("health   %s  (%u/%u servers up)\n", HealthName(st.health()), st.servers_up(),
              st.servers_total());
  std::printf("epoch    %lu\n", static_cast<unsigned long>(st.epoch()));
  std::printf("capacity %s, used %s (%s); %u segment(s) of %s, %u replica(s), %u tables\n",
              HumanBytes(st.capacity_bytes()).c_str(), HumanBytes(st.used_bytes()).c_str(),
              Percent(st.used_bytes(), st.capacity_bytes()).c_str(), st.segments(),
              HumanBytes(st.segment_size()).c_str(), st.replica_count(), st.table_count());
  if (address.find(',') == std::string::npos) {
    std::printf("monitor  %s  cluster %s\n\n", address.c_str(),
                st.cluster_uuid().empty() ? "(no server yet)" : st.cluster_uuid().c_str());
  } else {
    std::printf("monitors %s  leader %s  cluster %s\n\n", address.c_str(), st.leader().c_str(),
                st.cluster_uuid().empty() ? "(no server yet)" : st.cluster_uuid().c_str());
  }
  std::printf("%-4s %-22s %-9s %-10s %-10s %-9s %-6s %s\n", "ID", "ADDRESS", "STATE", "CAPACITY",
              "USED", "SEGMENTS", "TABLES", "LABELS");
  for (const v1::ServerInfo& sv : st.servers()) {
    std::string segments =
        std::to_string(sv.segments_used()) + "/" + std::to_string(sv.segment_count());
    std::printf("%-4u %-22s %-9s %-10s %-10s %-9s %-6u %s\n", sv.id(), sv.address().c_str(),
                StateName(sv.state()), HumanBytes(sv.capacity_bytes()).c_str(),
                HumanBytes(sv.used_bytes()).c_str(), segments.c_str(), sv.tables(),
                LabelList(sv).c_str());
  }
  std::fflush(stdout);
  if (st.health() != v1::HEALTH_OK) {
    std::string msg = std::string("cluster is ") + HealthName(st.health());
    if (!st.message().empty()) msg += ": " + st.message();
    std::fprintf(stderr, "pdpm: %s\n", msg.c_str());
    return 1;
  }
  return 0;
}

// Reads all of fd, failing with kTooLarge beyond `limit` bytes (`what`
// names the limit: "object", "value").
Status ReadAll(int fd, const std::string& name, uint64_t limit, const std::string& what,
               std::string* out) {
  out->clear();
  char buf[1 << 16];
  while (out->size() <= limit) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + name, errno);
    if (n == 0) return Status::OK();
    out->append(buf, static_cast<size_t>(n));
  }
  return Status::TooLarge(name + " is larger than the largest " + what + " (" + HumanBytes(limit) +
                          ")");
}

Status WriteAll(int fd, const std::string& name, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("write " + name, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

Status ClientOptionsFor(const std::string& dir, client::ClientOptions* options) {
  LocalCluster cluster(dir);
  LocalClusterConfig config;
  PDPM_RETURN_IF_ERROR(cluster.LoadConfig(&config));
  PDPM_RETURN_IF_ERROR(cluster.MonitorAddress(&options->monitor));
  PDPM_RETURN_IF_ERROR(cluster.Secret(&options->cluster_secret));
  return net::ParseBackendKind(config.transport, &options->transport);
}

Status OpenClient(const std::string& dir, std::unique_ptr<client::Client>* out) {
  client::ClientOptions options;
  PDPM_RETURN_IF_ERROR(ClientOptionsFor(dir, &options));
  return client::Client::Open(options, out).WithContext("cannot connect to the cluster");
}

int Obj(CommandLine& cl) {
  Status s = cl.Parse(2, 3, " put|get|del <id> [file] [flags]");
  if (cl.help_shown()) return 0;
  if (!s.ok()) return BadCommandLine(s);
  const std::vector<std::string>& args = cl.positional();
  const std::string& verb = args[0];
  if (verb != "put" && verb != "get" && verb != "del") {
    return BadCommandLine(
        Status::InvalidArgument("unknown obj command \"" + verb + "\": want put, get or del"));
  }
  if (verb == "del" && args.size() == 3) {
    return BadCommandLine(Status::InvalidArgument("usage: pdpm obj del <id> [flags]"));
  }
  dsm::ObjectId id;
  s = ParseObjectId(args[1], &id);
  if (!s.ok()) return BadCommandLine(s);
  std::string file = args.size() == 3 ? args[2] : "";

  // Read the input before connecting: a missing file is the user's first
  // error to hear about.
  std::string data;
  if (verb == "put") {
    if (file.empty()) {
      s = ReadAll(0, "stdin", client::kMaxObjectSize, "object", &data);
    } else {
      int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Fail(Status::FromErrno("open " + file, errno));
      s = ReadAll(fd, file, client::kMaxObjectSize, "object", &data);
      ::close(fd);
    }
    if (!s.ok()) return Fail(s);
  }
  std::unique_ptr<client::Client> c;
  s = OpenClient(cl.dir(), &c);
  if (!s.ok()) return Fail(s);
  std::string what = "object " + FormatObjectId(id);
  if (verb == "put") {
    s = c->PutObj(id, data);
    if (!s.ok()) return Fail(s.WithContext("put " + what));
    return 0;
  }
  if (verb == "del") {
    s = c->DelObj(id);
    return s.ok() ? 0 : Fail(s.WithContext("delete " + what));
  }
  s = c->GetObj(id, &data);
  if (!s.ok()) return Fail(s.WithContext("get " + what));
  s = file.empty() ? WriteAll(1, "stdout", data) : WriteFileAtomically(file, data, 0644);
  return s.ok() ? 0 : Fail(s);
}

// `pdpm kv get|put|del|scan`: the cluster's pDKVS through the C++ client
// (pdkvs::ClusterKvStore), not through the gateway.
int Kv(CommandLine& cl) {
  bool if_absent = false, if_present = false;
  milliseconds ttl{0};
  uint64_t count = 100;
  FlagParser& p = cl.parser();
  p.AddBool("nx", &if_absent, "put: only when the key is absent");
  p.AddBool("xx", &if_present, "put: only when the key is present");
  p.AddDuration("ttl", &ttl, "put: the key expires after this long (default never)");
  p.AddUint64("count", &count, "scan: keys asked for per round trip (default 100)");
  Status s = cl.Parse(1, 3, " get|put|del|scan [key] [value] [flags]");
  if (cl.help_shown()) return 0;
  if (!s.ok()) return BadCommandLine(s);
  const std::vector<std::string>& args = cl.positional();
  const std::string& verb = args[0];
  const size_t want = verb == "scan" ? 1 : verb == "put" ? 0 : 2;
  if (verb != "get" && verb != "put" && verb != "del" && verb != "scan") {
    return BadCommandLine(
        Status::InvalidArgument("unknown kv command \"" + verb + "\": want get, put, del or scan"));
  }
  if ((want != 0 && args.size() != want) || (verb == "put" && args.size() < 2)) {
    std::string usage = verb == "scan" ? "" : verb == "put" ? " <key> [value]" : " <key>";
    return BadCommandLine(Status::InvalidArgument("usage: pdpm kv " + verb + usage + " [flags]"));
  }
  if (if_absent && if_present) {
    return BadCommandLine(Status::InvalidArgument("--nx and --xx exclude each other"));
  }
  if (count == 0) return BadCommandLine(Status::InvalidArgument("--count must be at least 1"));
  std::string value;
  if (verb == "put") {
    if (args.size() == 3) {
      value = args[2];
    } else {
      s = ReadAll(0, "stdin", server::kKvMaxValueSize, "value", &value);
      if (!s.ok()) return Fail(s);
    }
  }
  client::ClientOptions options;
  s = ClientOptionsFor(cl.dir(), &options);
  std::unique_ptr<pdkvs::ClusterKvStore> store;
  if (s.ok()) s = pdkvs::ClusterKvStore::Open(options, &store);
  if (!s.ok()) return Fail(s.WithContext("cannot connect to the cluster"));
  const std::string key = args.size() > 1 ? args[1] : "";
  if (verb == "get") {
    s = store->Get(key, &value);
    if (!s.ok()) return Fail(s.WithContext("get " + key));
    // A terminal gets a line; a pipe or file the exact bytes.
    if (::isatty(1)) value.push_back('\n');
    s = WriteAll(1, "stdout", value);
    return s.ok() ? 0 : Fail(s);
  }
  if (verb == "put") {
    pdkvs::SetOptions set;
    if (if_absent) set.condition = pdkvs::SetOptions::Condition::kIfAbsent;
    if (if_present) set.condition = pdkvs::SetOptions::Condition::kIfPresent;
    if (ttl.count() > 0) {
      set.expiry = pdkvs::SetOptions::Expiry::kSet;
      set.expire_at_ms =
          static_cast<uint64_t>(std::chrono::duration_cast<milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch() + ttl)
                                    .count());
    }
    pdkvs::SetResult result;
    s = store->Set(key, value, set, &result);
    if (!s.ok()) return Fail(s.WithContext("put " + key));
    if (!result.applied) {
      return Fail(if_absent ? Status::AlreadyExists("put " + key + ": the key exists (--nx)")
                            : Status::NotFound("put " + key + ": no such key (--xx)"));
    }
    return 0;
  }
  if (verb == "del") {
    s = store->Delete(key);
    return s.ok() ? 0 : Fail(s.WithContext("delete " + key));
  }
  uint64_t cursor = 0;
  do {
    pdkvs::KvScanPage page;
    s = store->Scan(cursor, count, &page);
    if (!s.ok()) return Fail(s.WithContext("scan"));
    for (std::string& k : page.keys) {
      k.push_back('\n');
      s = WriteAll(1, "stdout", k);
      if (!s.ok()) return Fail(s);
    }
    cursor = page.next_cursor;
  } while (cursor != 0);
  return 0;
}

// `pdpm fsck --fs [--repair]`: the pDFS checker (pdfs/client/fs_check.h)
// on the running cluster; a repair checks again and reports that.
int FsckPdfs(CommandLine& cl, bool repair) {
  LocalCluster cluster(cl.dir());
  if (repair) {
    // A repair frees orphans, which a mount may hold open.
    const auto mounts = cluster.FsMounts();
    if (!mounts.empty()) {
      return Fail(Status::FailedPrecondition(
          "volume " + mounts[0].second + " is mounted on " + mounts[0].first +
          "; fsck --repair frees unlinked files a mount may hold open: pdpm fs umount it first"));
    }
  }
  std::unique_ptr<client::Client> c;
  Status s = OpenClient(cl.dir(), &c);
  std::unique_ptr<pdfs::FileSystem> fs;
  if (s.ok()) s = pdfs::FileSystem::Open(c.get(), {}, &fs);
  pdfs::FsCheckReport report;
  if (s.ok()) s = pdfs::CheckFileSystem(c.get(), &report);
  if (s.ok() && repair && !report.clean()) {
    std::printf("before the repair: %s", report.ToString().c_str());
    s = pdfs::RepairFileSystem(c.get(), fs.get(), report);
    if (s.ok()) s = pdfs::CheckFileSystem(c.get(), &report);
  }
  if (!s.ok()) return Fail(s.WithContext("fsck of pDFS"));
  std::printf("%s: %s",
              report.ok() ? (report.clean() ? "clean" : "ok, repairable findings") : "VIOLATIONS",
              report.ToString().c_str());
  std::fflush(stdout);
  if (!report.ok()) {
    std::fprintf(stderr, "pdpm: fsck found broken invariants of pDFS (see above)\n");
    return 1;
  }
  return 0;
}

int Fsck(CommandLine& cl) {
  uint32_t only = 0;
  bool pdfs = false, repair = false;
  cl.parser().AddUint32("server", &only, "check only this server (1..N; default all)");
  cl.parser().AddBool("fs", &pdfs, "check pDFS on the running cluster instead of the PM");
  cl.parser().AddBool("repair", &repair, "with --fs: free orphans and leaks, set quota usage");
  Status s = cl.Parse(0, 0, " [flags]");
  if (cl.help_shown()) return 0;
  if (!s.ok()) return BadCommandLine(s);
  if (repair && !pdfs) {
    return BadCommandLine(Status::InvalidArgument("--repair works with --fs only"));
  }
  if (pdfs && only != 0) {
    return BadCommandLine(Status::InvalidArgument("--server works without --fs only"));
  }
  if (pdfs) return FsckPdfs(cl, repair);
  LocalCluster cluster(cl.dir());
  LocalClusterConfig config;
  s = cluster.LoadConfig(&config);
  if (!s.ok()) return Fail(s);
  if (only > config.servers) {
    return BadCommandLine(Status::InvalidArgument("--server " + std::to_string(only) +
                                                  ": the cluster has servers 1.." +
                                                  std::to_string(config.servers)));
  }
  bool all_ok = true;
  for (uint32_t i = 1; i <= config.servers; ++i) {
    if (only != 0 && i != only) continue;
    if (pid_t pid = RunningPid(cluster.ServerDaemon(config, i)); pid != 0) {
      return Fail(Status::FailedPrecondition(
          "server " + std::to_string(i) + " is running (pid " + std::to_string(pid) +
          "); fsck checks stopped servers only: `pdpm down --dir " + cl.dir() + "` first"));
    }
    server::PmCheckReport report;
    s = server::CheckServerPm(cluster.ServerPmFile(i), &report);
    if (!s.ok()) return Fail(s.WithContext("server " + std::to_string(i)));
    // The report names the server by its cluster id, which need not be i.
    std::printf("%s: %s\n%s", cluster.ServerPmFile(i).c_str(),
                report.ok() ? (report.clean() ? "clean" : "ok, repairable findings") : "VIOLATIONS",
                report.ToString().c_str());
    all_ok = all_ok && report.ok();
  }
  std::fflush(stdout);
  if (!all_ok) {
    std::fprintf(stderr, "pdpm: fsck found broken invariants (see above)\n");
    return 1;
  }
  return 0;
}

// `pdpm server drain <id>`: asks the monitor to move the server's segments
// and tables away and waits until it holds nothing.
int ServerCommand(CommandLine& cl) {
  milliseconds timeout{120000};
  cl.parser().AddDuration("timeout", &timeout, "how long to wait for DRAINED (default 2m)");
  Status s = cl.Parse(2, 2, " drain <id> [flags]");
  if (cl.help_shown()) return 0;
  if (!s.ok()) return BadCommandLine(s);
  if (cl.positional()[0] != "drain") {
    return BadCommandLine(Status::InvalidArgument("unknown server command \"" + cl.positional()[0] +
                                                  "\": want drain"));
  }
  uint64_t id = 0;
  const std::string& text = cl.positional()[1];
  if (text.empty() || text.size() > 9 ||
      text.find_first_not_of("0123456789") != std::string::npos || (id = std::stoull(text)) == 0) {
    return BadCommandLine(
        Status::InvalidArgument("server id \"" + text + "\" is not a positive number"));
  }
  LocalCluster cluster(cl.dir());
  std::string address, secret;
  s = cluster.MonitorAddress(&address);
  if (s.ok()) s = cluster.Secret(&secret);
  if (!s.ok()) return Fail(s);
  monitor::MonitorClient client(address, {secret, milliseconds(5000)});
  v1::DrainServerRequest req;
  req.set_server_id(static_cast<uint32_t>(id));
  v1::DrainServerResponse resp;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  while (true) {
    s = client.DrainServer(req, &resp);
    if (!s.ok()) return Fail(s.WithContext("drain server " + text));
    if (resp.state() == v1::SERVER_STATE_DRAINED) break;
    if (resp.message() != last) {
      std::printf("server %s draining: %s\n", text.c_str(), resp.message().c_str());
      std::fflush(stdout);
      last = resp.message();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Fail(Status::Timeout("server " + text + " not drained after " +
                                  std::to_string(timeout.count()) + " ms: " + resp.message()));
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  std::printf("server %s drained (epoch %lu): it holds no data and may be stopped\n", text.c_str(),
              static_cast<unsigned long>(resp.epoch()));
  return 0;
}

// "used/limit" of a quota figure ("-" for no limit).
std::string UsedOf(uint64_t used, uint64_t limit, bool bytes) {
  auto show = [&](uint64_t v) { return bytes ? HumanBytes(v) : std::to_string(v); };
  return show(used) + "/" + (limit == 0 ? std::string("-") : show(limit));
}

void PrintVolume(const pdfs::VolumeInfo& v) {
  std::printf("%-24s bytes %-24s inodes %s\n", v.name.c_str(),
              UsedOf(v.quota.bytes_used, v.quota.byte_limit, true).c_str(),
              UsedOf(v.quota.inodes_used, v.quota.inode_limit, false).c_str());
}

// `pdpm fs volume create|resize|stat|delete|list`, `pdpm fs mount|umount`.
int FsCommand(CommandLine& cl) {
  milliseconds timeout{20000};
  uint64_t bytes = 0, inodes = 0;
  FlagParser& p = cl.parser();
  p.AddDuration("timeout", &timeout,
                "mount: how long to wait for the mount (default 20s); umount: how long "
                "pdfs-fuse gets after SIGTERM");
  p.AddSize("bytes", &bytes, "volume create|resize: byte quota (default 0: none)");
  p.AddUint64("inodes", &inodes, "volume create|resize: inode quota (default 0: none)");
  Status s = cl.Parse(2, 3,
                      " volume create|resize|stat|delete|list [name] | mount <volume> <dir> | "
                      "umount <dir> [flags]");
  if (cl.help_shown()) return 0;
  if (!s.ok()) return BadCommandLine(s);
  const std::vector<std::string>& args = cl.positional();
  LocalCluster cluster(cl.dir());
  if (args[0] == "umount") {
    if (args.size() != 2) {
      return BadCommandLine(Status::InvalidArgument("usage: pdpm fs umount <dir>"));
    }
    char abs[PATH_MAX];
    if (::realpath(args[1].c_str(), abs) == nullptr) {
      return Fail(Status::FromErrno(args[1], errno));
    }
    s = cluster.FsUnmount(abs, timeout);
    if (!s.ok()) return Fail(s);
    std::printf("unmounted %s\n", abs);
    return 0;
  }
  const bool mount = args[0] == "mount";
  if (!mount && args[0] != "volume") {
    return BadCommandLine(Status::InvalidArgument("unknown fs command \"" + args[0] +
                                                  "\": want volume, mount or umount"));
  }
  if (mount && args.size() != 3) {
    return BadCommandLine(Status::InvalidArgument("usage: pdpm fs mount <volume> <dir>"));
  }
  const std::string& verb = mount ? args[0] : args[1];
  if (!mount && verb != "create" && verb != "resize" && verb != "stat" && verb != "delete" &&
      verb != "list") {
    return BadCommandLine(Status::InvalidArgument("unknown fs volume command \"" + verb +
                                                  "\": want create, resize, stat, delete or list"));
  }
  if (!mount && (verb == "list") != (args.size() == 2)) {
    return BadCommandLine(Status::InvalidArgument("usage: pdpm fs volume " + verb +
                                                  (verb == "list" ? "" : " <name>")));
  }
  const std::string name = mount ? args[1] : args.size() == 3 ? args[2] : "";
  if (!name.empty()) {
    s = pdfs::CheckVolumeName(name);
    if (!s.ok()) return BadCommandLine(s);
  }
  client::ClientOptions options;
  s = ClientOptionsFor(cl.dir(), &options);
  std::unique_ptr<pdfs::VolumeManager> volumes;
  if (s.ok()) s = pdfs::VolumeManager::Open(options, &volumes);
  if (!s.ok()) return Fail(s);
  pdfs::VolumeInfo v;
  if (verb == "list") {
    std::vector<pdfs::VolumeInfo> all;
    std::string next;
    s = volumes->List("", 0, &all, &next);
    if (!s.ok()) return Fail(s);
    for (const pdfs::VolumeInfo& each : all) PrintVolume(each);
    return 0;
  }
  if (verb == "create") {
    s = volumes->Create(name, bytes, inodes, {::getuid(), ::getgid()}, "", &v);
  } else if (verb == "resize") {
    if (!p.IsSet("bytes") && !p.IsSet("inodes")) {
      return BadCommandLine(Status::InvalidArgument("resize wants --bytes and/or --inodes"));
    }
    s = volumes->Stat(name, &v);
    if (s.ok()) {
      s = volumes->Resize(name, p.IsSet("bytes") ? bytes : v.quota.byte_limit,
                          p.IsSet("inodes") ? inodes : v.quota.inode_limit, &v);
    }
  } else if (verb == "stat") {
    s = volumes->Stat(name, &v);
  } else if (verb == "delete") {
    for (const auto& [mountpoint, volume] : cluster.FsMounts()) {
      if (volume == name) {
        return Fail(Status::FailedPrecondition("volume " + name + " is mounted on " + mountpoint +
                                               " (pdpm fs umount it first)"));
      }
    }
    // Deleting a missing volume succeeds (the API is idempotent), but a
    // person typing a wrong name hears about it.
    s = volumes->Stat(name, &v);
    if (s.ok()) s = volumes->Delete(name);
    if (!s.ok()) return Fail(s);
    std::printf("deleted volume %s\n", name.c_str());
    return 0;
  } else {
    s = volumes->Stat(name, &v);
    if (s.ok()) {
      char abs[PATH_MAX];
      if (::realpath(args[2].c_str(), abs) == nullptr) {
        return Fail(Status::FromErrno(args[2], errno));
      }
      s = cluster.FsMount(abs, name, timeout);
      if (!s.ok()) return Fail(s.WithContext("mount volume " + name + " on " + abs));
      std::printf("mounted volume %s on %s\n", name.c_str(), abs);
      return 0;
    }
  }
  if (!s.ok()) return Fail(s);
  PrintVolume(v);
  return 0;
}

int Dispatch(const std::string& command, CommandLine& cl) {
  if (command == "server") return ServerCommand(cl);
  if (command == "up") return Up(cl);
  if (command == "down") return Down(cl);
  if (command == "status") return StatusCommand(cl);
  if (command == "obj") return Obj(cl);
  if (command == "kv") return Kv(cl);
  if (command == "fs") return FsCommand(cl);
  if (command == "fsck") return Fsck(cl);
  std::fprintf(stderr, "pdpm: unknown command \"%s\" (`pdpm help` lists the commands)\n",
               command.c_str());
  return 2;
}

int Run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "pdpm: no command given\n%s", kUsage);
    return 2;
  }
  std::string command = args.front();
  args.erase(args.begin());
  if (command == "help" || command == "--help" || command == "-h") {
    if (args.empty()) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    command = args.front();
    args = {"--help"};
  }
  CommandLine cl(command, args);
  return Dispatch(command, cl);
}

}  // namespace
}  // namespace pdpm::tools

int main(int argc, char** argv) {
  return pdpm::tools::Run(argc, argv);
}
