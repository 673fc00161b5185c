// Watches this process's mount table for the end of the FUSE mount on a
// directory, and calls `gone` once it is no longer there. An unmount does
// not always end the kernel's connection: while another mount namespace
// holds a copy of the mount (one made by a process that unshared its mounts
// meanwhile: container runtimes, `ip netns exec`, `unshare -m`), the
// connection lives on and no request tells the file system. The mount
// table does (/proc/self/mountinfo polls POLLPRI on every change).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "common/log.h"

namespace pdpm::pdfs {

class MountWatch {
 public:
  // Starts watching the mount of type `fstype` (as mountinfo names it:
  // "fuse.pdfs") on `mountpoint`, which must be mounted now. `gone` runs
  // on the watching thread.
  MountWatch(std::string mountpoint, std::string fstype, Logger* log, std::function<void()> gone);
  // Stops watching.
  ~MountWatch();
  MountWatch(const MountWatch&) = delete;
  MountWatch& operator=(const MountWatch&) = delete;

  bool fired() const { return fired_.load(); }

 private:
  void Loop();

  const std::string mountpoint_, fstype_;
  Logger* const log_;
  const std::function<void()> gone_;
  int stop_fd_ = -1;  // an eventfd: written to stop
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

}  // namespace pdpm::pdfs
