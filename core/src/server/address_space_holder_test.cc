#include "server/address_space_holder.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>

namespace pdpm::server {
namespace {

// Whether /proc/<pid>/maps lists a mapping that contains `addr`. Not one
// that starts there: the kernel merges a new anonymous mapping into its
// neighbours when their flags match (under ASan it lands next to the
// allocator's own), so its first byte can sit anywhere inside a line.
bool MapsAddress(pid_t pid, const void* addr) {
  const auto a = reinterpret_cast<unsigned long>(addr);
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi) return true;
  }
  return false;
}

int OpenFiles(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';  // NOLINT(concurrency-mt-unsafe)
  ::closedir(d);
  return n;
}

TEST(AddressSpaceHolder, SharesLaterMappingsHoldsNoFileAndIsReapedOnDestruction) {
  std::unique_ptr<AddressSpaceHolder> holder;
  ASSERT_TRUE(AddressSpaceHolder::Start(&holder).ok());
  const pid_t pid = holder->pid();
  // A mapping made after the holder started is in its address space: the
  // same one, not a copy.
  void* later =
      ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(later, MAP_FAILED);
  EXPECT_TRUE(MapsAddress(pid, later));
  EXPECT_EQ(OpenFiles(pid), 0);
  ::munmap(later, 1 << 20);
  holder.reset();
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

// What the holder is for: a process killed with SIGKILL closes its sockets
// (here: its listening port refuses) while the holder still lives, and the
// holder dies after it.
TEST(AddressSpaceHolder, KilledProcessClosesItsSocketsAndTheHolderFollows) {
  // Orphans (the holder) become our children, so we can reap them.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t server = ::fork();
  ASSERT_GE(server, 0);
  if (server == 0) {
    std::unique_ptr<AddressSpaceHolder> holder;
    if (!AddressSpaceHolder::Start(&holder).ok()) ::_exit(1);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 4) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::_exit(1);
    }
    int msg[2] = {holder->pid(), ntohs(a.sin_port)};
    if (::write(report[1], msg, sizeof(msg)) != sizeof(msg)) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(report[1]);
  int msg[2] = {0, 0};
  ASSERT_EQ(::read(report[0], msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg)));
  ::close(report[0]);
  const pid_t holder = msg[0];
  ASSERT_EQ(::kill(server, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(server, &status, 0), server);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(msg[1]));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  ::close(fd);
  ASSERT_EQ(::waitpid(holder, &status, 0), holder);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0), 0);
}

}  // namespace
}  // namespace pdpm::server
