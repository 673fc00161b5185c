#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace pdpm {

Status ReadWholeFile(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + " does not exist");
    return Status::FromErrno("open " + path, errno);
  }
  out->clear();
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out->append(buf, static_cast<size_t>(n));
  }
  int err = errno;
  ::close(fd);
  if (n < 0) return Status::FromErrno("read " + path, err);
  return Status::OK();
}

Status ReadSecretFile(const std::string& path, std::string* secret) {
  PDPM_RETURN_IF_ERROR(ReadWholeFile(path, secret));
  while (!secret->empty() && (secret->back() == '\n' || secret->back() == '\r')) {
    secret->pop_back();
  }
  if (secret->empty()) return Status::InvalidArgument(path + " is empty");
  return Status::OK();
}

Status WriteFileAtomically(const std::string& path, const std::string& data, mode_t mode) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::FromErrno("create " + tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno("write " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno("fsync " + tmp, err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno("rename " + tmp, errno);
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  int dfd = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Status::FromErrno("open " + dir, errno);
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0) return Status::FromErrno("fsync " + dir, err);
  return Status::OK();
}

Status MakeDirs(const std::string& path, mode_t mode) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) {
      return Status::FromErrno("mkdir " + prefix, errno);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno("stat " + path, errno);
  if (!S_ISDIR(st.st_mode)) return Status::FailedPrecondition(path + " is not a directory");
  return Status::OK();
}

bool FileExists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

}  // namespace pdpm
