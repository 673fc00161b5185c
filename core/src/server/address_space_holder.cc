#include "server/address_space_holder.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <thread>

namespace pdpm::server {
namespace {

constexpr size_t kStackSize = 64 << 10;

struct HolderStart {
  pid_t parent = 0;
  std::atomic<int> ready{0};  // 1: signals blocked, files closed, watching the parent
};

// Every signal: the holder ignores all but SIGKILL (the kernel's sigset).
constexpr uint64_t kAllSignals = ~uint64_t{0};

// The holder's whole life. It shares the server's memory, including the
// thread-local storage (errno, sanitizer state) of the thread that created
// it, so it calls no library function but syscall(), uninstrumented, and
// touches nothing but `start`. A failing call writes errno only while that
// thread waits for `ready` and reads none.
__attribute__((no_sanitize("address", "thread", "undefined"))) int HoldAddressSpace(void* arg) {
  auto* start = static_cast<HolderStart*>(arg);
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &kAllSignals, nullptr, sizeof(kAllSignals));
  ::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // Its copies of the server's files (the log) would keep them open; the
  // sockets and the PM do not exist yet. Without close_range it leaves.
  const bool leave = ::syscall(SYS_getppid) != start->parent ||  // the server already died
                     ::syscall(SYS_close_range, 0U, ~0U, 0U) != 0;
  start->ready.store(1, std::memory_order_release);
  if (leave) ::syscall(SYS_exit, 0);
  for (;;) ::syscall(SYS_pause);
}

}  // namespace

Status AddressSpaceHolder::Start(std::unique_ptr<AddressSpaceHolder>* out) {
  void* stack = ::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return Status::FromErrno("address space holder stack", errno);
  auto start = std::make_unique<HolderStart>();
  start->parent = ::getpid();
  pid_t pid = ::clone(HoldAddressSpace, static_cast<char*>(stack) + kStackSize, CLONE_VM | SIGCHLD,
                      start.get());
  if (pid < 0) {
    int err = errno;
    ::munmap(stack, kStackSize);
    return Status::FromErrno("start the address space holder", err);
  }
  // `start` lives on until the holder has read it (or died: killed by
  // someone else meanwhile).
  while (start->ready.load(std::memory_order_acquire) == 0) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) {
      ::munmap(stack, kStackSize);
      return Status::Internal("the address space holder died while starting");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  // A holder that left (close_range unsupported) is reaped by the
  // destructor: no help, no harm.
  out->reset(new AddressSpaceHolder(pid, stack));
  return Status::OK();
}

AddressSpaceHolder::~AddressSpaceHolder() {
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  ::munmap(stack_, kStackSize);
}

}  // namespace pdpm::server
