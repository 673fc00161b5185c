// The blocking lock requests of a FUSE mount (fcntl F_SETLKW and
// F_OFD_SETLKW, flock without LOCK_NB) that met a conflicting lock. One
// thread tries each again with backoff (5 ms doubling to 100 ms) until the
// lock is set (answered 0), fails (its errno), or the waiting process is
// interrupted by a signal (the kernel's FUSE_INTERRUPT: EINTR). A waiter
// holds none of the threads serving requests, so the unlock it waits for
// always gets through, however many processes wait.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

#include "pdfs/client/file_system.h"

namespace pdpm::pdfs {

class LockWaiter {
 public:
  explicit LockWaiter(FileSystem* fs);
  // Answers every wait left with EINTR.
  ~LockWaiter();
  LockWaiter(const LockWaiter&) = delete;
  LockWaiter& operator=(const LockWaiter&) = delete;

  // Takes `req` over: sets `lock` on `ino` once no conflicting lock is in
  // the way, runs `granted` and answers 0 (or answers the error).
  void Wait(fuse_req_t req, uint64_t ino, const LockRequest& lock, std::function<void()> granted);

 private:
  struct Pending {
    fuse_req_t req;
    uint64_t ino;
    LockRequest lock;
    std::function<void()> granted;
    std::chrono::steady_clock::time_point next_try;
    std::chrono::milliseconds backoff;
    bool interrupted = false;
  };
  static void OnInterrupt(fuse_req_t req, void* self);
  void Loop();

  FileSystem* const fs_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<Pending> pending_;  // guarded by mu_; the loop alone removes
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pdpm::pdfs
