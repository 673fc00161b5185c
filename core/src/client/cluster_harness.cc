#include "client/cluster_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace pdpm::client {
namespace {

// "a,b,c" → {"a", "b", "c"}; "" → {}.
std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// "<timeout scaled>ms", for the daemons' duration flags.
std::string ScaledDuration(uint32_t ms) {
  return std::to_string(net::testing::ScaledMs(ms)) + "ms";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tests never modify their environment, so reading it is safe.
const char* Env(const char* name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
}

}  // namespace

std::string FileTail(const std::string& path, size_t bytes) {
  std::string s = ReadAll(path);
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

std::string ProcessStacks(pid_t pid) {
  const std::string p = std::to_string(pid);
  std::string out;
  if (FILE* gdb =
          ::popen(("gdb -batch -nx -p " + p + " -ex 'thread apply all bt' 2>&1").c_str(), "r");
      gdb != nullptr) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), gdb)) > 0) out.append(buf, n);
    if (::pclose(gdb) == 0) return out;
  }
  // No gdb: where each thread waits in the kernel.
  out = "(no gdb) threads of " + p + ", wait channels:";
  std::string tasks = "/proc/" + p + "/task/";
  if (DIR* d = ::opendir(tasks.c_str()); d != nullptr) {
    while (dirent* e = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe): this thread's stream
      if (e->d_name[0] == '.') continue;
      out += " " + std::string(e->d_name) + ":" + ReadAll(tasks + e->d_name + "/wchan");
    }
    ::closedir(d);
  }
  return out;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    Wait();
  }
}

Status ChildProcess::Start(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::string& log) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; e++) env_strings.emplace_back(*e);
  for (const auto& e : env) env_strings.push_back(e);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    pid_ = -1;
    return Status::FromErrno("spawn " + argv[0], rc);
  }
  return Status::OK();
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

Status ChildProcess::Freeze() {
  if (pid_ <= 0) return Status::Internal("freeze: the process is not running");
  if (::kill(pid_, SIGSTOP) != 0) return Status::FromErrno("freeze: kill", errno);
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &status, WUNTRACED);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno("freeze: waitpid", errno);
    if (WIFSTOPPED(status)) return Status::OK();
    pid_ = -1;  // exited: reaped
    return Status::Internal("freeze: the process exited");
  }
}

int ChildProcess::Wait() {
  int status = 0;
  if (pid_ > 0) {
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  return status;
}

bool ChildProcess::Exited(int* wait_status) {
  if (pid_ <= 0) return true;
  if (::waitpid(pid_, wait_status, WNOHANG) == pid_) {
    pid_ = -1;
    return true;
  }
  return false;
}

bool ChildProcess::Stopped() const {
  if (pid_ <= 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The state follows the command name, which is in parentheses.
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
}

bool ChildProcess::WaitFor(uint32_t timeout_ms, int* wait_status) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!Exited(wait_status)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

LocalCluster::LocalCluster(const LocalClusterOptions& options)
    : options_(options), servers_(static_cast<size_t>(options.servers)) {
  std::string base = "/tmp";
  if (const char* t = Env("PDPM_TEST_TMPDIR"); t != nullptr) {
    base = t;
  } else if (::access("/dev/shm", W_OK) == 0) {
    base = "/dev/shm";
  } else if (const char* t = Env("TMPDIR"); t != nullptr) {
    base = t;
  }
  std::string templ = base + "/pdpm-cluster-XXXXXX";
  char* d = ::mkdtemp(templ.data());
  dir_ = d != nullptr ? d : "";
  const char* devices_env = Env("PDPM_TEST_SERVER_PM");
  std::vector<std::string> devices = SplitCommas(devices_env != nullptr ? devices_env : "");
  for (int i = 0; i < options_.servers; i++) {
    bool device = static_cast<size_t>(i) < devices.size() && i != options_.file_pm_server;
    pm_paths_.push_back(device ? devices[i] : dir_ + "/pm" + std::to_string(i));
    pm_is_device_.push_back(device);
  }
  secret_ = "test-secret-" + std::to_string(::getpid());
  secret_file_ = dir_ + "/cluster.secret";
  std::ofstream(secret_file_) << secret_ << "\n";
}

LocalCluster::~LocalCluster() {
  for (auto& s : servers_) {
    s.Signal(SIGKILL);
    s.Wait();
  }
  monitor_.Signal(SIGKILL);
  monitor_.Wait();
  if (!dir_.empty() && Env("PDPM_KEEP_TEST_DIR") == nullptr) {
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0) {  // NOLINT(concurrency-mt-unsafe): test teardown
      // Leaves the directory behind; nothing else to do in a destructor.
    }
  }
}

Status LocalCluster::WaitForFile(const std::string& path, ChildProcess* proc,
                                 const std::string& log, std::string* content) {
  // Generous: a deadline only against a hang, never a timing assertion.
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(net::testing::ScaledMs(60000));
  while (std::chrono::steady_clock::now() < deadline) {
    std::string s = ReadAll(path);
    if (!s.empty() && s.back() == '\n') {
      s.pop_back();
      *content = s;
      return Status::OK();
    }
    int ws = 0;
    if (proc->Exited(&ws)) {
      return Status::Unavailable("process exited (status " + std::to_string(ws) +
                                 ") before serving:\n" + FileTail(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Timeout("no " + path + " after " + ScaledDuration(60000) + ":\n" + FileTail(log));
}

Status LocalCluster::WipeDevices() {
  std::vector<ChildProcess> wipes(pm_paths_.size());
  for (size_t i = 0; i < pm_paths_.size(); i++) {
    if (!pm_is_device_[i]) continue;
    PDPM_RETURN_IF_ERROR(wipes[i].Start({PDPM_SERVER_BINARY, "--wipe-pm=" + pm_paths_[i]}, {},
                                        server_log(static_cast<int>(i))));
  }
  for (size_t i = 0; i < wipes.size(); i++) {
    if (!wipes[i].running()) continue;
    int ws = wipes[i].Wait();
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      return Status::IOError("wiping " + pm_paths_[i] + " failed (status " + std::to_string(ws) +
                             "):\n" + FileTail(server_log(static_cast<int>(i))));
    }
  }
  return Status::OK();
}

Status LocalCluster::Start() {
  if (dir_.empty()) return Status::IOError("mkdtemp failed");
  PDPM_RETURN_IF_ERROR(WipeDevices());
  std::string port_file = dir_ + "/monitor.port";
  std::string log = dir_ + "/monitor.log";
  ::mkdir((dir_ + "/monitor").c_str(), 0755);
  std::vector<std::string> argv{PDPM_MONITOR_BINARY,
                                "--embedded",
                                "--dir",
                                dir_ + "/monitor",
                                "--listen",
                                "127.0.0.1:0",
                                "--port-file",
                                port_file,
                                "--secret-file",
                                secret_file_,
                                "--tables",
                                std::to_string(options_.tables),
                                "--segment-size",
                                std::to_string(options_.segment_size),
                                "--replicas",
                                std::to_string(options_.replicas),
                                "--heartbeat-interval",
                                std::to_string(options_.heartbeat_ms) + "ms"};
  // Liveness deadlines scale with the environment; the heartbeat does not.
  argv.insert(
      argv.end(),
      {"--suspect-timeout", ScaledDuration(options_.suspect_ms ? options_.suspect_ms : 3000),
       "--down-timeout", ScaledDuration(options_.down_ms ? options_.down_ms : 10000)});
  PDPM_RETURN_IF_ERROR(monitor_.Start(argv, {}, log));
  PDPM_RETURN_IF_ERROR(WaitForFile(port_file, &monitor_, log, &monitor_address_));
  for (int i = 0; i < options_.servers; i++) PDPM_RETURN_IF_ERROR(StartServer(i));
  return Status::OK();
}

Status LocalCluster::StartServer(int i, const std::vector<std::string>& env) {
  std::string port_file = dir_ + "/server" + std::to_string(i) + ".port";
  ::unlink(port_file.c_str());
  ChildProcess& p = servers_[i];
  std::vector<std::string> all_env = options_.server_env;
  all_env.insert(all_env.end(), env.begin(), env.end());
  // The test's extra flags follow the harness's own.
  std::vector<std::string> argv = options_.server_args;
  argv.insert(argv.begin(),
              {PDPM_SERVER_BINARY, "--pm", pm_path(i), "--pm-size",
               std::to_string(options_.pm_size), "--format", "--monitor", monitor_address_,
               "--secret-file", secret_file_, "--listen", net::testing::TestHost() + ":0",
               "--transport", std::string(net::BackendKindName(net::testing::TestBackend())),
               "--port-file", port_file, "--cores", std::to_string(options_.cores)});
  PDPM_RETURN_IF_ERROR(p.Start(argv, all_env, server_log(i)));
  std::string address;
  return WaitForFile(port_file, &p, server_log(i), &address);
}

std::string LocalCluster::server_address(int i) const {
  std::string s = ReadAll(dir_ + "/server" + std::to_string(i) + ".port");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::string LocalCluster::LogTails() const {
  std::string out = "--- monitor.log\n" + FileTail(dir_ + "/monitor.log");
  for (int i = 0; i < options_.servers; i++)
    out += "--- server" + std::to_string(i) + ".log\n" + FileTail(server_log(i));
  return out;
}

std::string LocalCluster::ServerStacks() const {
  std::string out;
  for (int i = 0; i < options_.servers; i++) {
    if (servers_[i].running())
      out += "--- server " + std::to_string(i) + "\n" + ProcessStacks(servers_[i].pid());
  }
  return out;
}

std::string LocalCluster::HangReport(const ChildProcess& proc, const std::string& log) const {
  return "--- its log\n" + FileTail(log) + "\n--- its stacks\n" + ProcessStacks(proc.pid()) + "\n" +
         LogTails() + ServerStacks();
}

void LocalCluster::KillServer(int i) {
  servers_[i].Signal(SIGKILL);
  servers_[i].Wait();
}

Status LocalCluster::StopServer(int i) {
  servers_[i].Signal(SIGTERM);
  const uint32_t timeout_ms = net::testing::ScaledMs(60000);
  int ws = 0;
  if (!servers_[i].WaitFor(timeout_ms, &ws)) {
    std::string stacks = ProcessStacks(servers_[i].pid());
    KillServer(i);
    return Status::Timeout("server " + std::to_string(i) + " still running " +
                           std::to_string(timeout_ms) + " ms after SIGTERM:\n" + stacks + "\n" +
                           FileTail(server_log(i)));
  }
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    return Status::Internal("server " + std::to_string(i) + " did not exit cleanly (status " +
                            std::to_string(ws) + "):\n" + FileTail(server_log(i)));
  }
  return Status::OK();
}

Status LocalCluster::GetMapping(v1::GetMappingResponse* out) const {
  monitor::MonitorClient mc(monitor_address_, {secret_});
  return mc.GetMapping(0, out);
}

uint32_t LocalCluster::ServerId(int i) const {
  v1::GetMappingResponse m;
  if (!GetMapping(&m).ok()) return 0;
  for (const auto& s : m.servers()) {
    if (s.address() == server_address(i)) return s.id();
  }
  return 0;
}

}  // namespace pdpm::client
