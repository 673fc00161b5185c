#include "monitor/etcd/etcd_test_cluster.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

namespace pdpm::monitor {
namespace {

// The tests never modify their environment, so reading it is safe.
const char* Env(const char* name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
}

}  // namespace

Status FreeLoopbackPort(uint32_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Status s = Status::FromErrno("bind a loopback port", errno);
    ::close(fd);
    return s;
  }
  *port = ntohs(addr.sin_port);
  ::close(fd);
  return Status::OK();
}

EtcdTestCluster::EtcdTestCluster() {
  std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  if (const char* t = Env("PDPM_TEST_TMPDIR"); t != nullptr) base = t;
  std::string templ = base + "/pdpm-etcd-XXXXXX";
  char* d = ::mkdtemp(templ.data());
  dir_ = d != nullptr ? d : "";
}

EtcdTestCluster::~EtcdTestCluster() {
  procs_.clear();  // SIGKILL and reap
  if (!dir_.empty() && Env("PDPM_KEEP_TEST_DIR") == nullptr) {
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0) {  // NOLINT(concurrency-mt-unsafe): test teardown
      // Leaves the directory behind; nothing else to do in a destructor.
    }
  }
}

Status EtcdTestCluster::Start(int members) {
  if (dir_.empty()) return Status::IOError("mkdtemp failed");
  for (int i = 0; i < members; ++i) {
    EtcdMember m{"etcd-" + std::to_string(i + 1), "127.0.0.1", 0, 0};
    PDPM_RETURN_IF_ERROR(FreeLoopbackPort(&m.client_port));
    PDPM_RETURN_IF_ERROR(FreeLoopbackPort(&m.peer_port));
    members_.push_back(m);
    procs_.push_back(std::make_unique<client::ChildProcess>());
  }
  for (int i = 0; i < members; ++i) PDPM_RETURN_IF_ERROR(StartMember(i));
  return WaitServing(endpoints());
}

Status EtcdTestCluster::StartMember(int i) {
  std::vector<std::string> argv = {"/usr/bin/etcd"};
  for (std::string& a :
       EtcdMemberArgs(members_, static_cast<size_t>(i), dir_ + "/" + members_[i].name, "test")) {
    argv.push_back(std::move(a));
  }
  return procs_[i]->Start(argv, {}, log(i));
}

void EtcdTestCluster::Kill(int i) {
  procs_[i]->Signal(SIGKILL);
  procs_[i]->Wait();
}

Status EtcdTestCluster::Restart(int i) {
  PDPM_RETURN_IF_ERROR(StartMember(i));
  return WaitServing(endpoint(i));
}

Status EtcdTestCluster::WaitServing(const std::string& endpoints) {
  // Generous: a deadline only against a hang, never a timing assertion.
  return WaitEtcdServing(endpoints, std::chrono::seconds(60), [&]() -> Status {
    for (size_t i = 0; i < procs_.size(); ++i) {
      int ws = 0;
      if (procs_[i]->running() && procs_[i]->Exited(&ws)) {
        return Status::Unavailable("etcd member " + members_[i].name + " exited (status " +
                                   std::to_string(ws) + "):\n" + client::FileTail(log(i)));
      }
    }
    return Status::OK();
  });
}

}  // namespace pdpm::monitor
