#include "monitor/file_view_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/crc32c.h"
#include "common/file_util.h"

namespace pdpm::monitor {
namespace {

constexpr char kMagic[8] = {'P', 'D', 'P', 'M', 'V', 'I', 'E', 'W'};
// A view of a few thousand servers and a million segments stays far below.
constexpr uint64_t kMaxPayload = 1ULL << 30;

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetLe(const std::string& in, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[pos + i])} << (8 * i);
  return v;
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write " + path, errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace

FileViewStore::FileViewStore(std::string dir, int dir_fd, int lock_fd)
    : dir_(std::move(dir)),
      view_path_(dir_ + "/view"),
      tmp_path_(dir_ + "/view.tmp"),
      dir_fd_(dir_fd),
      lock_fd_(lock_fd) {}

FileViewStore::~FileViewStore() {
  ::close(lock_fd_);  // releases the flock
  ::close(dir_fd_);
}

Status FileViewStore::Open(const std::string& dir, std::unique_ptr<FileViewStore>* store) {
  if (dir.empty()) return Status::InvalidArgument("view directory not given");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno("create view directory " + dir, errno);
  }
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Status::FromErrno("open view directory " + dir, errno);
  std::string lock_path = dir + "/LOCK";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    Status s = Status::FromErrno("create " + lock_path, errno);
    ::close(dir_fd);
    return s;
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(lock_fd);
    ::close(dir_fd);
    if (err == EWOULDBLOCK) {
      return Status::FailedPrecondition(
          "view directory " + dir + " is in use by another monitor (" + lock_path + " is locked)");
    }
    return Status::FromErrno("lock " + lock_path, err);
  }
  // A leftover view.tmp is a put that never reached its rename: it was not
  // acknowledged, so it is dropped.
  std::string tmp = dir + "/view.tmp";
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    Status s = Status::FromErrno("remove " + tmp, errno);
    ::close(lock_fd);
    ::close(dir_fd);
    return s;
  }
  store->reset(new FileViewStore(dir, dir_fd, lock_fd));
  return Status::OK();
}

std::string FileViewStore::Encode(uint64_t revision, const v1::ClusterView& view) {
  std::string payload;
  view.SerializeToString(&payload);
  std::string out;
  out.reserve(kHeaderSize + payload.size());
  out.append(kMagic, sizeof(kMagic));
  PutLe(&out, kFormatVersion, 4);
  PutLe(&out, 0, 4);
  PutLe(&out, revision, 8);
  PutLe(&out, payload.size(), 8);
  PutLe(&out, Crc32c(payload), 4);
  PutLe(&out, Crc32c(out), 4);
  out += payload;
  return out;
}

Status FileViewStore::Decode(const std::string& bytes, const std::string& what,
                             v1::ClusterView* view, uint64_t* revision) {
  if (bytes.size() < kHeaderSize) {
    return Status::Corruption(what + " is truncated: " + std::to_string(bytes.size()) +
                              " bytes, shorter than the " + std::to_string(kHeaderSize) +
                              "-byte header");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption(what + " is not a PDPM view file (bad magic)");
  }
  uint32_t header_crc = static_cast<uint32_t>(GetLe(bytes, 36, 4));
  if (Crc32c(std::string_view(bytes.data(), 36)) != header_crc) {
    return Status::Corruption(what + ": header checksum mismatch");
  }
  uint32_t version = static_cast<uint32_t>(GetLe(bytes, 8, 4));
  if (version != kFormatVersion) {
    return Status::Corruption(what + " has format version " + std::to_string(version) +
                              "; this monitor reads version " + std::to_string(kFormatVersion));
  }
  uint32_t flags = static_cast<uint32_t>(GetLe(bytes, 12, 4));
  if (flags != 0) return Status::Corruption(what + ": unknown header flags");
  uint64_t rev = GetLe(bytes, 16, 8);
  uint64_t len = GetLe(bytes, 24, 8);
  if (rev == 0) return Status::Corruption(what + ": revision 0 in header");
  if (len > kMaxPayload || bytes.size() - kHeaderSize != len) {
    return Status::Corruption(what + " is torn: header announces " + std::to_string(len) +
                              " payload bytes, file holds " +
                              std::to_string(bytes.size() - kHeaderSize));
  }
  std::string_view payload(bytes.data() + kHeaderSize, len);
  PDPM_RETURN_IF_ERROR(
      DecodeViewPayload(payload, static_cast<uint32_t>(GetLe(bytes, 32, 4)), what, view));
  *revision = rev;
  return Status::OK();
}

Status FileViewStore::Load(v1::ClusterView* view, uint64_t* revision) {
  std::string bytes;
  Status s = ReadWholeFile(view_path_, &bytes);
  if (s.code() == StatusCode::kNotFound) {
    revision_ = 0;
    revision_known_ = true;
    *revision = 0;
    return Status::NotFound("no view stored in " + dir_);
  }
  PDPM_RETURN_IF_ERROR(s);
  PDPM_RETURN_IF_ERROR(Decode(bytes, view_path_, view, revision));
  revision_ = *revision;
  revision_known_ = true;
  return Status::OK();
}

Status FileViewStore::CompareAndPut(uint64_t expected_revision, const v1::ClusterView& view,
                                    uint64_t* new_revision) {
  if (!revision_known_) {
    v1::ClusterView current;
    uint64_t rev = 0;
    Status s = Load(&current, &rev);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
  }
  if (expected_revision != revision_) {
    return Status::Aborted("view revision is " + std::to_string(revision_) + ", not " +
                           std::to_string(expected_revision));
  }
  uint64_t next = revision_ + 1;
  std::string bytes = Encode(next, view);
  if (bytes.size() - kHeaderSize > kMaxPayload) {
    return Status::TooLarge("view of " + std::to_string(bytes.size()) + " bytes");
  }
  int fd = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("create " + tmp_path_, errno);
  Status s = WriteAll(fd, bytes, tmp_path_);
  if (s.ok() && ::fsync(fd) != 0) s = Status::FromErrno("fsync " + tmp_path_, errno);
  ::close(fd);
  if (s.ok() && ::rename(tmp_path_.c_str(), view_path_.c_str()) != 0) {
    s = Status::FromErrno("rename " + tmp_path_ + " to " + view_path_, errno);
  }
  if (!s.ok()) {
    ::unlink(tmp_path_.c_str());
    return s;
  }
  // The rename is durable only once the directory is; until then the put
  // is not acknowledged. If this fsync fails we cannot tell which view a
  // crash would leave, so the next put must re-read the file.
  if (::fsync(dir_fd_) != 0) {
    revision_known_ = false;
    return Status::FromErrno("fsync view directory " + dir_, errno);
  }
  revision_ = next;
  *new_revision = next;
  return Status::OK();
}

}  // namespace pdpm::monitor
