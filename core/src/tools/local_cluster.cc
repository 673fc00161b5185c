#include "tools/local_cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "dsm/address.h"
#include "monitor/etcd/etcd_members.h"
#include "monitor/monitor_client.h"

namespace pdpm::tools {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int kLogTailLines = 15;

// An exclusive flock on DIR/.lock for the duration of an up or down, so two
// invocations never start or stop the same daemons at once.
class DirLock {
 public:
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Acquire(const std::string& dir) {
    std::string path = dir + "/.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) return Status::FromErrno("open " + path, errno);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        return Status::FailedPrecondition("another pdpm up or down is working on " + dir);
      }
      return Status::FromErrno("lock " + path, errno);
    }
    return Status::OK();
  }

 private:
  int fd_ = -1;
};

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// `name` beside the running executable (an installed or copied tree), else
// the path the build gave it.
std::string FindBinary(const std::string& name, const std::string& build_path) {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string candidate = Dirname(std::string(self, static_cast<size_t>(n))) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return build_path;
}

// `name` in a directory of $PATH, "" when none has it.
std::string FindInPath(const std::string& name) {
  // getenv is safe here: PDPM never modifies its environment.
  const char* path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe)
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

Status ParseUint(std::string_view key, std::string_view text, uint64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return Status::Corruption("cluster.conf: " + std::string(key) + "=" + std::string(text) +
                              " is not a number");
  }
  return Status::OK();
}

std::string Indent(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += "\n    " + text.substr(start, end - start);
    start = end + 1;
  }
  return out;
}

// The failure `what` of daemon `spec`, with the tail of its log.
Status DaemonFailed(StatusCode code, const DaemonSpec& spec, const std::string& what) {
  std::string tail = LogTail(spec.log_file, kLogTailLines);
  std::string msg = spec.name + " " + what;
  if (tail.empty()) {
    msg += " (its log " + spec.log_file + " is empty)";
  } else {
    msg += "; last lines of " + spec.log_file + ":" + Indent(tail);
  }
  return Status(code, msg);
}

// The first daemon of `started` that has exited, as an error with its log.
Status CheckStarted(const std::vector<std::pair<DaemonSpec, pid_t>>& started) {
  for (const auto& [spec, pid] : started) {
    std::string how;
    if (ChildExited(pid, &how)) {
      return DaemonFailed(StatusCode::kUnavailable, spec, how + " while starting");
    }
  }
  return Status::OK();
}

std::vector<monitor::EtcdMember> EtcdMembers(const LocalClusterConfig& config) {
  std::vector<monitor::EtcdMember> members;
  for (uint32_t i = 0; i < LocalClusterConfig::kHaMembers; ++i) {
    members.push_back({"etcd-" + std::to_string(i + 1), config.host, config.etcd_port + 2 * i,
                       config.etcd_port + 2 * i + 1});
  }
  return members;
}

// Every monitor's address, comma-separated.
std::string MonitorList(const LocalClusterConfig& config) {
  std::string monitors;
  for (uint32_t m = 0; m < config.monitors(); ++m) {
    monitors += (m ? "," : "") + config.host + ":" + std::to_string(config.monitor_port + m);
  }
  return monitors;
}

}  // namespace

Status LocalClusterConfig::Validate() const {
  if (servers < 1 || servers > 64) return Status::InvalidArgument("--servers must be 1..64");
  // A table segment holds 4 MiB allocator chunks, one at least per size
  // class in use (object index and pages, pDKVS index, items of every
  // size): a few chunks fill at once.
  if (segment_size < (64ULL << 20)) {
    return Status::InvalidArgument("--segment-size must be at least 64MiB");
  }
  if (pm_size < 2 * segment_size) {
    return Status::InvalidArgument("--pm-size must hold at least two segments of --segment-size (" +
                                   HumanBytes(segment_size) + ")");
  }
  if (monitor_port > 65535 || server_port == 0 || server_port + servers - 1 > 65535) {
    return Status::InvalidArgument("--monitor-port and --server-port must be ports (1..65535)");
  }
  // Every port the daemons use, each once.
  std::map<uint32_t, std::string> used;
  auto claim = [&](uint32_t port, const std::string& what) -> Status {
    if (port == 0 || port > 65535) {
      return Status::InvalidArgument(what + " would use port " + std::to_string(port) +
                                     ", not a port (1..65535)");
    }
    auto [it, fresh] = used.emplace(port, what);
    if (!fresh) {
      return Status::InvalidArgument(
          what + " and " + it->second + " would share port " + std::to_string(port) +
          "; choose other --monitor-port, --server-port, --etcd-port or --gateway-port");
    }
    return Status::OK();
  };
  for (uint32_t i = 0; i < monitors(); ++i) {
    std::string n = ha ? " " + std::to_string(i + 1) : "";
    PDPM_RETURN_IF_ERROR(claim(monitor_port + i, "monitor" + n));
    if (ha) {
      PDPM_RETURN_IF_ERROR(claim(etcd_port + 2 * i, "etcd member" + n));
      PDPM_RETURN_IF_ERROR(claim(etcd_port + 2 * i + 1, "etcd member" + n + " (peers)"));
    }
  }
  for (uint32_t i = 0; i < servers; ++i) {
    PDPM_RETURN_IF_ERROR(claim(server_port + i, "server " + std::to_string(i + 1)));
  }
  if (gateway_port != 0) PDPM_RETURN_IF_ERROR(claim(gateway_port, "the gateway"));
  if (tables > 4096) return Status::InvalidArgument("--tables must be 1..4096");
  if (transport != "tcp" && transport != "verbs") {
    return Status::InvalidArgument("--transport must be tcp or verbs");
  }
  if (host.empty()) return Status::InvalidArgument("--host must not be empty");
  if (replicas < 1 || replicas > dsm::kMaxReplicas) {
    return Status::InvalidArgument("--replicas must be 1.." + std::to_string(dsm::kMaxReplicas));
  }
  return Status::OK();
}

std::string LocalClusterConfig::Serialize() const {
  return "servers=" + std::to_string(servers) + "\npm-size=" + std::to_string(pm_size) +
         "\nsegment-size=" + std::to_string(segment_size) + "\nhost=" + host +
         "\nmonitor-port=" + std::to_string(monitor_port) +
         "\nserver-port=" + std::to_string(server_port) + "\ntransport=" + transport +
         "\nha=" + (ha ? "1" : "0") + "\netcd-port=" + std::to_string(etcd_port) +
         "\nreplicas=" + std::to_string(replicas) +
         "\ngateway-port=" + std::to_string(gateway_port) + "\ntables=" + std::to_string(tables) +
         "\n";
}

Status LocalClusterConfig::Parse(const std::string& text, LocalClusterConfig* out) {
  std::map<std::string, std::string> kv;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) return Status::Corruption("cluster.conf: bad line: " + line);
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  LocalClusterConfig c;
  uint64_t v = 0;
  for (const char* key :
       {"servers", "pm-size", "segment-size", "host", "monitor-port", "server-port", "transport"}) {
    if (!kv.count(key)) return Status::Corruption(std::string("cluster.conf: no ") + key);
  }
  PDPM_RETURN_IF_ERROR(ParseUint("servers", kv["servers"], &v));
  c.servers = static_cast<uint32_t>(v);
  PDPM_RETURN_IF_ERROR(ParseUint("pm-size", kv["pm-size"], &c.pm_size));
  PDPM_RETURN_IF_ERROR(ParseUint("segment-size", kv["segment-size"], &c.segment_size));
  PDPM_RETURN_IF_ERROR(ParseUint("monitor-port", kv["monitor-port"], &v));
  c.monitor_port = static_cast<uint32_t>(v);
  PDPM_RETURN_IF_ERROR(ParseUint("server-port", kv["server-port"], &v));
  c.server_port = static_cast<uint32_t>(v);
  c.host = kv["host"];
  c.transport = kv["transport"];
  // Absent in directories made before HA existed: a single monitor.
  if (kv.count("ha")) {
    if (kv["ha"] != "0" && kv["ha"] != "1") {
      return Status::Corruption("cluster.conf: ha=" + kv["ha"] + " is neither 0 nor 1");
    }
    c.ha = kv["ha"] == "1";
  }
  if (kv.count("etcd-port")) {
    PDPM_RETURN_IF_ERROR(ParseUint("etcd-port", kv["etcd-port"], &v));
    c.etcd_port = static_cast<uint32_t>(v);
  }
  c.replicas = 1;
  if (kv.count("replicas")) {
    PDPM_RETURN_IF_ERROR(ParseUint("replicas", kv["replicas"], &v));
    c.replicas = static_cast<uint32_t>(v);
  }
  c.tables = 0;
  if (kv.count("tables")) {
    PDPM_RETURN_IF_ERROR(ParseUint("tables", kv["tables"], &v));
    if (v == 0) return Status::Corruption("cluster.conf: tables=0");
    c.tables = static_cast<uint32_t>(v);
  }
  // Absent in directories made before the gateway: they get the default.
  if (kv.count("gateway-port")) {
    PDPM_RETURN_IF_ERROR(ParseUint("gateway-port", kv["gateway-port"], &v));
    c.gateway_port = static_cast<uint32_t>(v);
  }
  PDPM_RETURN_IF_ERROR(c.Validate().WithContext("cluster.conf"));
  *out = c;
  return Status::OK();
}

std::vector<std::string> LocalClusterConfig::Differences(const LocalClusterConfig& o) const {
  std::vector<std::string> keys;
  if (servers != o.servers) keys.push_back("servers");
  if (pm_size != o.pm_size) keys.push_back("pm-size");
  if (segment_size != o.segment_size) keys.push_back("segment-size");
  if (host != o.host) keys.push_back("host");
  if (monitor_port != o.monitor_port) keys.push_back("monitor-port");
  if (server_port != o.server_port) keys.push_back("server-port");
  if (transport != o.transport) keys.push_back("transport");
  if (ha != o.ha) keys.push_back("ha");
  if (etcd_port != o.etcd_port) keys.push_back("etcd-port");
  if (replicas != o.replicas) keys.push_back("replicas");
  if (gateway_port != o.gateway_port) keys.push_back("gateway-port");
  if (tables != o.tables) keys.push_back("tables");
  return keys;
}

LocalCluster::LocalCluster(std::string dir)
    : dir_(std::move(dir)),
      monitor_binary_(FindBinary("pdpm-monitor", PDPM_MONITOR_BINARY)),
      server_binary_(FindBinary("pdpm-server", PDPM_SERVER_BINARY)),
      gateway_binary_(FindBinary("pdkvs-gateway", PDKVS_GATEWAY_BINARY)),
      fuse_binary_(FindBinary("pdfs-fuse", PDFS_FUSE_BINARY)),
      volume_api_binary_(FindBinary("pdfs-volume-api", PDFS_VOLUME_API_BINARY)),
      etcd_binary_(FindInPath("etcd")) {}

Status LocalCluster::LoadConfig(LocalClusterConfig* config) const {
  std::string text;
  Status s = ReadWholeFile(Path("cluster.conf"), &text);
  if (s.code() == StatusCode::kNotFound) {
    return Status::NotFound("no PDPM cluster in " + dir_ + " (create one with `pdpm up --dir " +
                            dir_ + "`)");
  }
  PDPM_RETURN_IF_ERROR(s);
  return LocalClusterConfig::Parse(text, config);
}

std::string LocalCluster::ServerPmFile(uint32_t index) const {
  return Path("server-" + std::to_string(index) + ".pm");
}

std::string LocalCluster::ServerAddressFile(uint32_t index) const {
  return Path("server-" + std::to_string(index) + ".addr");
}

std::string LocalCluster::FormatPendingMarker(uint32_t index) const {
  return Path("server-" + std::to_string(index) + ".format-pending");
}

std::string LocalCluster::ServerAddress(const LocalClusterConfig& config, uint32_t index) const {
  return config.host + ":" + std::to_string(config.server_port + index - 1);
}

std::string LocalCluster::MonitorAddressFile(const LocalClusterConfig& config,
                                             uint32_t index) const {
  return config.ha ? Path("monitor-" + std::to_string(index) + ".addr") : Path("monitor.addr");
}

std::vector<DaemonSpec> LocalCluster::EtcdDaemons(const LocalClusterConfig& config) const {
  std::vector<DaemonSpec> daemons;
  if (!config.ha) return daemons;
  std::vector<monitor::EtcdMember> members = EtcdMembers(config);
  for (uint32_t i = 0; i < members.size(); ++i) {
    const std::string& name = members[i].name;
    std::vector<std::string> argv = {etcd_binary_};
    for (std::string& a : monitor::EtcdMemberArgs(members, i, Path(name), "pdpm-" + dir_)) {
      argv.push_back(std::move(a));
    }
    daemons.push_back({"etcd " + std::to_string(i + 1), std::move(argv), Path(name),
                       Path(name + ".pid"), Path(name + ".log")});
  }
  return daemons;
}

std::vector<DaemonSpec> LocalCluster::MonitorDaemons(const LocalClusterConfig& config) const {
  std::vector<DaemonSpec> daemons;
  std::vector<std::string> tables;
  if (config.tables != 0) tables = {"--tables", std::to_string(config.tables)};
  if (!config.ha) {
    std::string monitor_address = config.host + ":" + std::to_string(config.monitor_port);
    daemons.push_back(
        {"monitor",
         {monitor_binary_, "--embedded", "--dir", Path("monitor"), "--listen", monitor_address,
          "--port-file", Path("monitor.addr"), "--secret-file", Path("cluster.secret"),
          "--segment-size", std::to_string(config.segment_size), "--replicas",
          std::to_string(config.replicas)},
         Path("monitor"),
         Path("monitor.pid"),
         Path("monitor.log")});
    daemons.back().argv.insert(daemons.back().argv.end(), tables.begin(), tables.end());
    return daemons;
  }
  std::string etcd = monitor::EtcdClientEndpoints(EtcdMembers(config));
  for (uint32_t i = 1; i <= LocalClusterConfig::kHaMembers; ++i) {
    std::string n = std::to_string(i);
    daemons.push_back(
        {"monitor " + n,
         {monitor_binary_, "--etcd", etcd, "--etcd-prefix", "/pdpm/local", "--listen",
          config.host + ":" + std::to_string(config.monitor_port + i - 1), "--port-file",
          MonitorAddressFile(config, i), "--secret-file", Path("cluster.secret"), "--segment-size",
          std::to_string(config.segment_size), "--replicas", std::to_string(config.replicas)},
         MonitorAddressFile(config, i),
         Path("monitor-" + n + ".pid"),
         Path("monitor-" + n + ".log")});
    daemons.back().argv.insert(daemons.back().argv.end(), tables.begin(), tables.end());
  }
  return daemons;
}

DaemonSpec LocalCluster::ServerDaemon(const LocalClusterConfig& config, uint32_t i) const {
  std::string monitors = MonitorList(config);
  std::string n = std::to_string(i);
  return {"server " + n,
          {server_binary_, "--pm", ServerPmFile(i), "--pm-size", std::to_string(config.pm_size),
           "--listen", ServerAddress(config, i), "--transport", config.transport, "--monitor",
           monitors, "--secret-file", Path("cluster.secret"), "--port-file", ServerAddressFile(i)},
          ServerPmFile(i),
          Path("server-" + n + ".pid"),
          Path("server-" + n + ".log")};
}

DaemonSpec LocalCluster::GatewayDaemon(const LocalClusterConfig& config) const {
  return {"gateway",
          {gateway_binary_, "--monitor", MonitorList(config), "--secret-file",
           Path("cluster.secret"), "--transport", config.transport, "--listen",
           config.host + ":" + std::to_string(config.gateway_port), "--port-file",
           Path("gateway.addr")},
          Path("gateway.addr"),
          Path("gateway.pid"),
          Path("gateway.log")};
}

DaemonSpec LocalCluster::VolumeApiDaemon(const LocalClusterConfig& config) const {
  return {
      "volume api",
      {volume_api_binary_, "--listen", config.host + ":0", "--port-file", Path("volume-api.addr")},
      Path("volume-api.addr"),
      Path("volume-api.pid"),
      Path("volume-api.log")};
}

namespace {

// The name of a mount's files in fs/: its mountpoint with '/' as '_' and
// a checksum telling apart mountpoints that read alike then.
std::string MountKey(const std::string& mountpoint) {
  std::string key = mountpoint;
  std::replace(key.begin(), key.end(), '/', '_');
  char crc[16];
  std::snprintf(crc, sizeof(crc), "-%08x", Crc32c(mountpoint));
  return key + crc;
}

constexpr long kFuseSuperMagic = 0x65735546;

// Drops a FUSE mount whose daemon is gone (lazily: open files keep it
// until closed): umount2 as root, else fusermount3.
void DetachMount(const std::string& mountpoint) {
  if (::umount2(mountpoint.c_str(), MNT_DETACH) == 0 || errno != EPERM) return;
  pid_t pid = fork();
  if (pid == 0) {
    execlp("fusermount3", "fusermount3", "-u", "-z", mountpoint.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  if (pid > 0) (void)waitpid(pid, &status, 0);
}

}  // namespace

DaemonSpec LocalCluster::FsMountDaemon(const LocalClusterConfig& config,
                                       const std::string& mountpoint,
                                       const std::string& volume) const {
  const std::string base = Path("fs/" + MountKey(mountpoint));
  std::vector<std::string> argv = {
      fuse_binary_,  "--monitor",      MonitorList(config), "--secret-file", Path("cluster.secret"),
      "--transport", config.transport, "--mountpoint",      mountpoint};
  if (!volume.empty()) {
    argv.push_back("--volume");
    argv.push_back(volume);
  }
  return {"mount " + mountpoint, argv, mountpoint, base + ".pid", base + ".log"};
}

std::vector<std::pair<std::string, std::string>> LocalCluster::FsMounts() const {
  std::vector<std::pair<std::string, std::string>> mounts;
  DIR* d = ::opendir(Path("fs").c_str());
  if (d == nullptr) return mounts;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 7 || name.compare(name.size() - 6, 6, ".mount") != 0) continue;
    std::string text;
    if (!ReadWholeFile(Path("fs/" + name), &text).ok()) continue;
    const size_t nl = text.find('\n');
    if (nl == std::string::npos) continue;
    mounts.emplace_back(text.substr(0, nl), text.substr(nl + 1));
  }
  ::closedir(d);
  std::sort(mounts.begin(), mounts.end());
  return mounts;
}

Status LocalCluster::FsMount(const std::string& mountpoint, const std::string& volume,
                             milliseconds timeout) {
  LocalClusterConfig config;
  PDPM_RETURN_IF_ERROR(LoadConfig(&config));
  PDPM_RETURN_IF_ERROR(MakeDirs(Path("fs"), 0700));
  DaemonSpec spec = FsMountDaemon(config, mountpoint, volume);
  if (RunningPid(spec) != 0) {
    return Status::AlreadyExists("a pDFS mount of this cluster runs on " + mountpoint);
  }
  pid_t pid = 0;
  PDPM_RETURN_IF_ERROR(StartDaemon(spec, &pid));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    struct statfs st {};
    if (::statfs(mountpoint.c_str(), &st) == 0 && st.f_type == kFuseSuperMagic &&
        RunningPid(spec) != 0) {
      break;
    }
    std::string how;
    if (ChildExited(pid, &how) || std::chrono::steady_clock::now() > deadline) {
      bool killed = false;
      (void)StopDaemon(spec, milliseconds(2000), &killed);
      return Status::Unavailable("pdfs-fuse " + (how.empty() ? "did not mount" : how) + "\n" +
                                 LogTail(spec.log_file, 10));
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  const std::string base = Path("fs/" + MountKey(mountpoint));
  return WriteFileAtomically(base + ".mount", mountpoint + "\n" + volume, 0600);
}

Status LocalCluster::FsUnmount(const std::string& mountpoint, milliseconds grace) {
  LocalClusterConfig config;
  PDPM_RETURN_IF_ERROR(LoadConfig(&config));
  const std::string base = Path("fs/" + MountKey(mountpoint));
  std::string volume;
  for (const auto& [m, v] : FsMounts()) {
    if (m == mountpoint) volume = v;
  }
  DaemonSpec spec = FsMountDaemon(config, mountpoint, volume);
  if (RunningPid(spec) == 0 && !FileExists(base + ".mount")) {
    return Status::NotFound("no pDFS mount of this cluster on " + mountpoint);
  }
  bool killed = false;
  PDPM_RETURN_IF_ERROR(StopDaemon(spec, grace, &killed));
  if (killed) DetachMount(mountpoint);  // killed before it unmounted
  ::unlink((base + ".mount").c_str());
  return Status::OK();
}

std::vector<DaemonSpec> LocalCluster::Daemons(const LocalClusterConfig& config) const {
  std::vector<DaemonSpec> daemons = EtcdDaemons(config);
  for (DaemonSpec& d : MonitorDaemons(config)) daemons.push_back(std::move(d));
  for (uint32_t i = 1; i <= config.servers; ++i) daemons.push_back(ServerDaemon(config, i));
  if (config.gateway_port != 0) daemons.push_back(GatewayDaemon(config));
  daemons.push_back(VolumeApiDaemon(config));
  return daemons;
}

Status LocalCluster::EnsureSecret() const {
  std::string path = Path("cluster.secret");
  if (FileExists(path)) return Status::OK();
  unsigned char raw[32];
  if (::getrandom(raw, sizeof(raw), 0) != static_cast<ssize_t>(sizeof(raw))) {
    return Status::FromErrno("getrandom", errno);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 0xf]);
  }
  return WriteFileAtomically(path, hex + "\n", 0600);
}

Status LocalCluster::Secret(std::string* secret) const {
  PDPM_RETURN_IF_ERROR(ReadWholeFile(Path("cluster.secret"), secret).WithContext("cluster secret"));
  while (!secret->empty() && (secret->back() == '\n' || secret->back() == ' ')) secret->pop_back();
  if (secret->empty()) return Status::Corruption(Path("cluster.secret") + " is empty");
  return Status::OK();
}

Status LocalCluster::MonitorAddress(std::string* address) const {
  LocalClusterConfig config;
  PDPM_RETURN_IF_ERROR(LoadConfig(&config));
  std::vector<DaemonSpec> monitors = MonitorDaemons(config);
  address->clear();
  for (uint32_t i = 1; i <= monitors.size(); ++i) {
    if (RunningPid(monitors[i - 1]) == 0) continue;
    std::string text;
    if (!ReadWholeFile(MonitorAddressFile(config, i), &text).ok()) continue;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    if (!text.empty()) *address += (address->empty() ? "" : ",") + text;
  }
  if (address->empty()) {
    return Status::FailedPrecondition("no PDPM cluster is running in " + dir_ +
                                      " (start it with `pdpm up --dir " + dir_ + "`)");
  }
  return Status::OK();
}

Status LocalCluster::RefuseIfRunning(const std::vector<DaemonSpec>& daemons) const {
  std::string running;
  size_t count = 0;
  for (const DaemonSpec& d : daemons) {
    pid_t pid = RunningPid(d);
    if (pid == 0) continue;
    ++count;
    running += (running.empty() ? "" : ", ") + d.name + " pid " + std::to_string(pid);
  }
  if (count == 0) return Status::OK();
  std::string what = count == daemons.size() ? "PDPM is already running in " + dir_
                                             : "part of the cluster in " + dir_ + " is running";
  return Status::AlreadyExists(what + " (" + running + "); stop it with `pdpm down --dir " + dir_ +
                               "`");
}

Status LocalCluster::Up(const LocalClusterConfig& config, const UpOptions& options,
                        std::ostream& progress) {
  PDPM_RETURN_IF_ERROR(config.Validate());
  PDPM_RETURN_IF_ERROR(MakeDirs(dir_, 0700));
  DirLock lock;
  PDPM_RETURN_IF_ERROR(lock.Acquire(dir_));
  if (!FileExists(Path("cluster.conf"))) {
    PDPM_RETURN_IF_ERROR(WriteFileAtomically(Path("cluster.conf"), config.Serialize(), 0644));
  }
  PDPM_RETURN_IF_ERROR(EnsureSecret());
  if (!config.ha) PDPM_RETURN_IF_ERROR(MakeDirs(Path("monitor"), 0700));
  for (const char* binary : {monitor_binary_.c_str(), server_binary_.c_str(),
                             gateway_binary_.c_str(), volume_api_binary_.c_str()}) {
    if (::access(binary, X_OK) != 0) {
      return Status::NotFound(std::string(binary) + " is not there or not executable (build it)");
    }
  }
  if (config.ha && etcd_binary_.empty()) {
    return Status::NotFound(
        "--ha needs etcd, which is not on PATH (Debian: apt install etcd-server)");
  }
  std::vector<DaemonSpec> daemons = Daemons(config);
  PDPM_RETURN_IF_ERROR(RefuseIfRunning(daemons));

  std::vector<std::pair<DaemonSpec, pid_t>> started;
  Status s = StartAll(config, options, progress, &started);
  if (!s.ok()) {
    // Best effort: the start failure is what the caller must see.
    bool killed = false;
    for (auto it = started.rbegin(); it != started.rend(); ++it) {
      (void)StopDaemon(it->first, milliseconds(5000), &killed);
    }
  }
  return s;
}

Status LocalCluster::StartAll(const LocalClusterConfig& config, const UpOptions& options,
                              std::ostream& progress,
                              std::vector<std::pair<DaemonSpec, pid_t>>* started) {
  auto deadline = steady_clock::now() + options.timeout;
  std::vector<DaemonSpec> monitors = MonitorDaemons(config);
  // A stale address from the last run must not be taken for the new one.
  std::vector<std::string> address_files;
  for (uint32_t i = 1; i <= monitors.size(); ++i) {
    address_files.push_back(MonitorAddressFile(config, i));
  }
  for (uint32_t i = 1; i <= config.servers; ++i) address_files.push_back(ServerAddressFile(i));
  address_files.push_back(Path("gateway.addr"));
  address_files.push_back(Path("volume-api.addr"));
  for (const std::string& file : address_files) {
    if (::unlink(file.c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno("remove " + file, errno);
    }
  }
  auto check_children = [&] { return CheckStarted(*started); };

  if (config.ha) PDPM_RETURN_IF_ERROR(StartEtcd(config, deadline, progress, started));
  pid_t pid = 0;
  std::string monitor_address;  // every monitor's, comma-separated
  for (uint32_t m = 1; m <= monitors.size(); ++m) {
    const DaemonSpec& spec = monitors[m - 1];
    PDPM_RETURN_IF_ERROR(StartDaemon(spec, &pid));
    started->emplace_back(spec, pid);
    std::string address;
    while (true) {
      PDPM_RETURN_IF_ERROR(check_children());
      std::string text;
      if (ReadWholeFile(MonitorAddressFile(config, m), &text).ok() && !text.empty() &&
          text.back() == '\n') {
        address = text.substr(0, text.size() - 1);
        break;
      }
      if (steady_clock::now() >= deadline) {
        return DaemonFailed(StatusCode::kTimeout, spec, "did not start serving in time");
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    monitor_address += (monitor_address.empty() ? "" : ",") + address;
    progress << spec.name << "  " << address << "  (pid " << pid << ")\n";
  }

  for (uint32_t i = 1; i <= config.servers; ++i) {
    // A new PM file is formatted explicitly, the first time only; an
    // existing one is always recovered, never reformatted. The marker
    // covers a first start that failed before the server formatted its
    // file (--format formats a blank PM only, so repeating it is safe).
    std::string pending = FormatPendingMarker(i);
    bool fresh = !FileExists(ServerPmFile(i)) || FileExists(pending);
    DaemonSpec server = ServerDaemon(config, i);
    if (fresh) {
      PDPM_RETURN_IF_ERROR(WriteFileAtomically(pending, "", 0644));
      server.argv.insert(server.argv.end(),
                         {"--format", "--segment-size", std::to_string(config.segment_size)});
    }
    PDPM_RETURN_IF_ERROR(StartDaemon(server, &pid));
    started->emplace_back(server, pid);
    progress << "server " << i << " " << ServerAddress(config, i) << "  (pid " << pid << ", "
             << (fresh ? "new PM file" : "recovering its PM") << ")\n";
  }

  std::string secret;
  PDPM_RETURN_IF_ERROR(Secret(&secret));
  monitor::MonitorClient client(monitor_address, {secret, milliseconds(2000)});
  v1::ClusterStatus status;
  Status last = Status::Unavailable("no answer yet");
  // Healthy: every server has finished starting (it writes its address
  // file once it serves, after recovery and re-announcing its segments) and
  // the monitor reports all of them UP.
  auto servers_serving = [&] {
    for (uint32_t i = 1; i <= config.servers; ++i) {
      if (!FileExists(ServerAddressFile(i))) return false;
    }
    return true;
  };
  auto healthy = [&] {
    return last.ok() && status.servers_up() == config.servers && status.health() == v1::HEALTH_OK &&
           servers_serving();
  };
  while (true) {
    PDPM_RETURN_IF_ERROR(check_children());
    last = client.GetClusterStatus(&status);
    if (healthy()) break;
    if (steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  if (healthy()) {
    // Every server is UP, so each has formatted its PM and joined.
    for (uint32_t i = 1; i <= config.servers; ++i) {
      if (::unlink(FormatPendingMarker(i).c_str()) != 0 && errno != ENOENT) {
        return Status::FromErrno("remove " + FormatPendingMarker(i), errno);
      }
    }
    std::string address;
    if (config.gateway_port != 0) {
      PDPM_RETURN_IF_ERROR(StartFrontEnd(GatewayDaemon(config), deadline, started, &address));
      progress << "gateway  " << address << "  (pid " << started->back().second
               << ", Redis protocol)\n";
    }
    PDPM_RETURN_IF_ERROR(StartFrontEnd(VolumeApiDaemon(config), deadline, started, &address));
    progress << "volume api  " << address << "  (pid " << started->back().second
             << ", pdpm.v1.Volumes)\n";
    return Status::OK();
  }
  std::string after =
      "after " + std::to_string(options.timeout.count() / 1000.0).substr(0, 4) + "s";
  if (!last.ok()) {
    return DaemonFailed(StatusCode::kTimeout, monitors[0],
                        "does not answer " + after + ": " + last.ToString());
  }
  // Name the first server that is not serving or the monitor does not
  // report UP.
  for (uint32_t i = 1; i <= config.servers; ++i) {
    if (!FileExists(ServerAddressFile(i))) {
      return DaemonFailed(StatusCode::kTimeout, ServerDaemon(config, i),
                          "has not finished starting " + after);
    }
    bool up = false;
    for (const v1::ServerInfo& info : status.servers()) {
      if (info.address() == ServerAddress(config, i) && info.state() == v1::SERVER_STATE_UP) {
        up = true;
      }
    }
    if (!up) {
      return DaemonFailed(StatusCode::kTimeout, ServerDaemon(config, i),
                          "is not UP at the monitor " + after + " (" +
                              std::to_string(status.servers_up()) + "/" +
                              std::to_string(config.servers) + " servers up)");
    }
  }
  return Status(StatusCode::kTimeout, "cluster not healthy " + after + ": " +
                                          v1::Health_Name(status.health()) + " " +
                                          status.message());
}

Status LocalCluster::StartFrontEnd(const DaemonSpec& spec, steady_clock::time_point deadline,
                                   std::vector<std::pair<DaemonSpec, pid_t>>* started,
                                   std::string* address) {
  pid_t pid = 0;
  PDPM_RETURN_IF_ERROR(StartDaemon(spec, &pid));
  started->emplace_back(spec, pid);
  while (!ServingAddress(spec, address).ok()) {
    PDPM_RETURN_IF_ERROR(CheckStarted(*started));
    if (steady_clock::now() >= deadline) {
      return DaemonFailed(StatusCode::kTimeout, spec, "did not start serving in time");
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return Status::OK();
}

Status LocalCluster::ServingAddress(const DaemonSpec& spec, std::string* address) const {
  std::string text;
  if (RunningPid(spec) == 0 || !ReadWholeFile(spec.identity, &text).ok() || text.empty() ||
      text.back() != '\n') {
    return Status::FailedPrecondition("no " + spec.name + " is running in " + dir_);
  }
  text.pop_back();
  *address = text;
  return Status::OK();
}

Status LocalCluster::GatewayAddress(std::string* address) const {
  LocalClusterConfig config;
  PDPM_RETURN_IF_ERROR(LoadConfig(&config));
  if (config.gateway_port == 0) {
    return Status::FailedPrecondition("no pDKVS gateway is running in " + dir_);
  }
  return ServingAddress(GatewayDaemon(config), address).WithContext("the pDKVS gateway");
}

Status LocalCluster::VolumeApiAddress(std::string* address) const {
  LocalClusterConfig config;
  PDPM_RETURN_IF_ERROR(LoadConfig(&config));
  return ServingAddress(VolumeApiDaemon(config), address);
}

Status LocalCluster::StartEtcd(const LocalClusterConfig& config, steady_clock::time_point deadline,
                               std::ostream& progress,
                               std::vector<std::pair<DaemonSpec, pid_t>>* started) {
  std::vector<monitor::EtcdMember> members = EtcdMembers(config);
  std::vector<DaemonSpec> daemons = EtcdDaemons(config);
  for (size_t i = 0; i < daemons.size(); ++i) {
    pid_t pid = 0;
    PDPM_RETURN_IF_ERROR(StartDaemon(daemons[i], &pid));
    started->emplace_back(daemons[i], pid);
    progress << daemons[i].name << "  " << monitor::EtcdClientEndpoints({members[i]}) << "  (pid "
             << pid << ")\n";
  }
  auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
  return monitor::WaitEtcdServing(monitor::EtcdClientEndpoints(members),
                                  std::max(left, milliseconds(1)),
                                  [&] { return CheckStarted(*started); });
}

Status LocalCluster::Down(milliseconds grace, std::ostream& progress) {
  if (!FileExists(dir_)) return Status::NotFound(dir_ + " does not exist");
  DirLock lock;
  PDPM_RETURN_IF_ERROR(lock.Acquire(dir_));
  LocalClusterConfig config;
  PDPM_RETURN_IF_ERROR(LoadConfig(&config));
  for (const auto& [mountpoint, volume] : FsMounts()) {
    PDPM_RETURN_IF_ERROR(FsUnmount(mountpoint, grace));
    progress << "unmounted " << mountpoint << "\n";
  }
  std::vector<DaemonSpec> daemons = Daemons(config);
  // The reverse of the start: servers first, so none of them sees its
  // monitor go away, and etcd last, so the leader can resign.
  std::reverse(daemons.begin(), daemons.end());
  size_t stopped = 0;
  for (const DaemonSpec& d : daemons) {
    pid_t pid = RunningPid(d);
    bool killed = false;
    PDPM_RETURN_IF_ERROR(StopDaemon(d, grace, &killed));
    if (pid == 0) continue;
    ++stopped;
    progress << "stopped " << d.name << " (pid " << pid << (killed ? ", SIGKILL" : "") << ")\n";
  }
  if (stopped == 0) progress << "nothing was running in " << dir_ << "\n";
  return Status::OK();
}

Status DefaultClusterDir(std::string* dir) {
  // getenv is safe here: PDPM never modifies its environment.
  const char* xdg = std::getenv("XDG_DATA_HOME");  // NOLINT(concurrency-mt-unsafe)
  if (xdg != nullptr && xdg[0] == '/') {
    *dir = std::string(xdg) + "/pdpm";
    return Status::OK();
  }
  const char* home = std::getenv("HOME");  // NOLINT(concurrency-mt-unsafe)
  if (home == nullptr || home[0] != '/') {
    return Status::InvalidArgument("neither XDG_DATA_HOME nor HOME is set; pass --dir");
  }
  *dir = std::string(home) + "/.local/share/pdpm";
  return Status::OK();
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0 || v >= 100 || v == static_cast<uint64_t>(v)) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

}  // namespace pdpm::tools
