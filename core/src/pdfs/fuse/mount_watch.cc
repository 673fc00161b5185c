#include "pdfs/fuse/mount_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace pdpm::pdfs {
namespace {

// The file system type of mount `id` in `mountinfo` ("" when absent).
// A line: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [FIELDS...] - TYPE ...
std::string TypeOfMount(const std::string& mountinfo, uint64_t id) {
  std::istringstream lines(mountinfo);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    uint64_t line_id = 0;
    if (!(fields >> line_id) || line_id != id) continue;
    for (std::string f; fields >> f;) {
      if (f == "-") {
        std::string type;
        fields >> type;
        return type;
      }
    }
  }
  return "";
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[8192];
  if (lseek(fd, 0, SEEK_SET) < 0) return out;
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace

MountWatch::MountWatch(std::string mountpoint, std::string fstype, Logger* log,
                       std::function<void()> gone)
    : mountpoint_(std::move(mountpoint)),
      fstype_(std::move(fstype)),
      log_(log),
      gone_(std::move(gone)),
      stop_fd_(eventfd(0, EFD_CLOEXEC)),
      thread_([this] { Loop(); }) {}

MountWatch::~MountWatch() {
  const uint64_t one = 1;
  if (stop_fd_ >= 0 && write(stop_fd_, &one, sizeof(one)) != sizeof(one)) {
    log_->Error("cannot stop the mount watch", {{"error", strerror(errno)}});
  }
  thread_.join();
  if (stop_fd_ >= 0) close(stop_fd_);
}

void MountWatch::Loop() {
  const int table = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  // The mount's id, without asking the file system for attributes (the
  // request would wait behind this very thread's caller otherwise).
  struct statx stx {};
  if (table < 0 || stop_fd_ < 0 ||
      statx(AT_FDCWD, mountpoint_.c_str(), AT_STATX_DONT_SYNC, STATX_MNT_ID, &stx) != 0 ||
      (stx.stx_mask & STATX_MNT_ID) == 0) {
    log_->Error("cannot watch the mount table: an unmount elsewhere goes unseen",
                {{"mountpoint", mountpoint_}, {"error", strerror(errno)}});
    if (table >= 0) close(table);
    return;
  }
  const uint64_t id = stx.stx_mnt_id;
  for (;;) {
    if (TypeOfMount(ReadAll(table), id) != fstype_) {
      log_->Info("the mount is gone from the mount table", {{"mountpoint", mountpoint_}});
      fired_.store(true);
      gone_();
      break;
    }
    pollfd fds[2] = {{table, POLLPRI, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if ((fds[1].revents & POLLIN) != 0) break;
  }
  close(table);
}

}  // namespace pdpm::pdfs
