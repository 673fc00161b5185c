#include "pm/pm_device.h"

#include <fcntl.h>
#include <libpmem2.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pdpm::pm {
namespace {

constexpr uint64_t kCacheLine = 64;

// An OS error with the code that says what went wrong, not just kIOError.
Status OsError(const std::string& what, int err) {
  std::string msg = what + ": " + std::generic_category().message(err);
  switch (err) {
    case ENOENT: return Status::NotFound(msg);
    case EACCES:
    case EPERM:
    case EROFS: return Status::PermissionDenied(msg);
    case ENOSPC:
    case EDQUOT:
    case ENOMEM: return Status::ResourceExhausted(msg);
    case EISDIR:
    case EFBIG:
    case EINVAL: return Status::InvalidArgument(msg);
    default: return Status::IOError(msg);
  }
}

// A libpmem2 error: rc is a PMEM2_E_* code or a negated errno.
Status Pmem2Error(const std::string& what, int rc) {
  std::string msg = what + ": " + pmem2_errormsg();
  switch (rc) {
    case PMEM2_E_INVALID_FILE_TYPE:
    case PMEM2_E_SOURCE_TYPE_NOT_SUPPORTED:
    case PMEM2_E_GRANULARITY_NOT_SUPPORTED:
    case PMEM2_E_SRC_DEVDAX_PRIVATE:
    case PMEM2_E_NOSUPP: return Status::NotSupported(msg);
    case PMEM2_E_SOURCE_EMPTY:
    case PMEM2_E_LENGTH_UNALIGNED:
    case PMEM2_E_MAP_RANGE: return Status::InvalidArgument(msg);
    case -ENOMEM: return Status::ResourceExhausted(msg);
    case -EACCES:
    case -EPERM: return Status::PermissionDenied(msg);
    default: return Status::IOError(msg);
  }
}

struct SourceDeleter {
  void operator()(pmem2_source* s) const { pmem2_source_delete(&s); }
};
struct ConfigDeleter {
  void operator()(pmem2_config* c) const { pmem2_config_delete(&c); }
};
struct MapDeleter {
  void operator()(pmem2_map* m) const { pmem2_map_delete(&m); }
};
using SourcePtr = std::unique_ptr<pmem2_source, SourceDeleter>;
using ConfigPtr = std::unique_ptr<pmem2_config, ConfigDeleter>;
using MapPtr = std::unique_ptr<pmem2_map, MapDeleter>;

Status NewMap(const std::string& path, const pmem2_source* source, size_t length,
              pmem2_sharing_type sharing, MapPtr* out) {
  pmem2_config* raw_config = nullptr;
  int rc = pmem2_config_new(&raw_config);
  if (rc != 0) return Pmem2Error("pmem2 config for " + path, rc);
  ConfigPtr config(raw_config);
  // PAGE is the weakest requirement: every source qualifies, and the map
  // reports the granularity it actually got.
  rc = pmem2_config_set_required_store_granularity(config.get(), PMEM2_GRANULARITY_PAGE);
  if (rc == 0) rc = pmem2_config_set_length(config.get(), length);
  if (rc == 0) rc = pmem2_config_set_sharing(config.get(), sharing);
  if (rc != 0) return Pmem2Error("pmem2 config for " + path, rc);
  pmem2_map* raw_map = nullptr;
  rc = pmem2_map_new(&raw_map, config.get(), source);
  if (rc != 0) return Pmem2Error("cannot map " + path, rc);
  out->reset(raw_map);
  return Status::OK();
}

// A regular file without DAX, mapped by us rather than by libpmem2.
//
// libpmem2 maps every shared mapping MAP_FIXED over its own reservation,
// trying MAP_SYNC first. On a file system that offers MAP_SYNC only for DAX
// files (ext4, xfs) the kernel refuses it from the file's mmap handler,
// after it has already unmapped the reservation: until libpmem2's second
// attempt the range is a hole, and another thread's mmap (a new malloc
// arena, a thread stack) may land there — to be overwritten by the file.
// A file that cannot be MAP_SYNC gains nothing from libpmem2 (its
// persistence is msync), so we map it ourselves and never leave a hole.
class FileMap {
 public:
  // Maps [0, length) of `fd` shared or private at a 2 MiB-aligned address
  // (what libpmem2 gives: huge pages may back it).
  static Status Map(const std::string& path, int fd, size_t length, bool shared,
                    std::unique_ptr<FileMap>* out) {
    constexpr size_t kAlign = 2u << 20;
    void* reserved = mmap(nullptr, length + kAlign, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved == MAP_FAILED) return OsError("reserve address space for " + path, errno);
    char* const start = static_cast<char*>(reserved);
    char* const aligned = start + (kAlign - reinterpret_cast<uintptr_t>(start) % kAlign) % kAlign;
    // Replaces part of our own reservation: the range is never unmapped.
    void* addr = mmap(aligned, length, PROT_READ | PROT_WRITE,
                      MAP_FIXED | (shared ? MAP_SHARED : MAP_PRIVATE), fd, 0);
    const int err = errno;
    if (addr == MAP_FAILED) {
      munmap(reserved, length + kAlign);
      return OsError("map " + path, err);
    }
    if (aligned > start) munmap(start, aligned - start);
    const size_t tail = start + kAlign - aligned;  // past aligned + length
    if (tail > 0) munmap(aligned + length, tail);
    out->reset(new FileMap(static_cast<char*>(addr), length));
    return Status::OK();
  }
  ~FileMap() { munmap(base_, length_); }
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;

  char* base() const { return base_; }

 private:
  FileMap(char* base, size_t length) : base_(base), length_(length) {}
  char* const base_;
  const size_t length_;
};

// Persistence of a FileMap: msync of the pages covering the range. A
// failing msync means the data may not be durable; nothing may be
// acknowledged after it, so the process stops (recovery starts from what
// is durable).
void MsyncPersist(const void* addr, size_t len) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // msync wants a page-aligned start: back up to the page that holds addr.
  const uintptr_t into_page = reinterpret_cast<uintptr_t>(addr) % page;
  char* const begin = const_cast<char*>(static_cast<const char*>(addr)) - into_page;
  if (msync(begin, len + into_page, MS_SYNC) != 0) {
    std::fprintf(stderr, "pdpm: msync of PM range [%p, +%zu) failed: %s\n", addr, len,
                 std::strerror(errno));  // NOLINT(concurrency-mt-unsafe): aborting
    std::abort();
  }
}
void MsyncDrain() {}  // every flush was already durable
void* MsyncMemcpy(void* dst, const void* src, size_t len, unsigned /*flags*/) {
  std::memcpy(dst, src, len);
  MsyncPersist(dst, len);
  return dst;
}

// A file in memory (tmpfs, ramfs): its pages are the storage, which a
// process crash leaves intact (every store executed stays in them) and a
// power loss takes whole; msync does nothing there. A persist only keeps
// the compiler from moving stores across it.
void MemoryPersist(const void* /*addr*/, size_t /*len*/) {
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
void MemoryDrain() {}
void* MemoryMemcpy(void* dst, const void* src, size_t len, unsigned /*flags*/) {
  std::memcpy(dst, src, len);
  MemoryPersist(dst, len);
  return dst;
}

bool IsMemoryFile(int fd) {
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0) return false;
  return fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC;
}

// Whether the kernel maps this regular file directly (DAX), so that
// MAP_SYNC works and libpmem2 maps it. A kernel too old to say (before
// 5.8) gets the msync path, which is durable on DAX files too.
bool IsDaxFile(int fd) {
  struct statx stx {};
  if (statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx) != 0) return false;
  return (stx.stx_attributes_mask & STATX_ATTR_DAX) != 0 &&
         (stx.stx_attributes & STATX_ATTR_DAX) != 0;
}

// The simulation settings: the options, overridden by the environment.
// getenv is safe here: PDPM never modifies its environment.
Status SimulationSettings(const PmOptions& options, bool* simulate, uint64_t* crash_after) {
  const char* flag = std::getenv(kSimulatePowerLossEnv);  // NOLINT(concurrency-mt-unsafe)
  *crash_after = options.crash_after_persisted_bytes;
  const char* v = std::getenv(kCrashAfterPersistedBytesEnv);  // NOLINT(concurrency-mt-unsafe)
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    errno = 0;
    *crash_after = std::strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || *v == '-') {
      return Status::InvalidArgument(std::string(kCrashAfterPersistedBytesEnv) + "=" + v +
                                     " is not a byte count");
    }
  }
  *simulate = options.simulate_power_loss || (flag != nullptr && std::strcmp(flag, "1") == 0) ||
              *crash_after != 0;
  return Status::OK();
}

// Copies whole words as the hardware writes back cache lines: each aligned
// 8-byte store is atomic, so a kill mid-copy leaves whole words only.
// Volatile keeps the compiler from turning this into a memcpy call.
//
// Not instrumented for ThreadSanitizer: this models the cache's write-back,
// which runs outside the program's memory model; another thread may be
// storing to the same line meanwhile, exactly as on real hardware.
__attribute__((no_sanitize("thread"))) void CopyWords(char* dst, const char* src, size_t len) {
  auto* d = reinterpret_cast<volatile uint64_t*>(dst);
  const auto* s = reinterpret_cast<const volatile uint64_t*>(src);
  for (size_t i = 0; i < len / sizeof(uint64_t); ++i) d[i] = s[i];
}

}  // namespace

std::string_view PmKindName(PmKind kind) {
  switch (kind) {
    case PmKind::kDevDax: return "devdax";
    case PmKind::kFsDax: return "fsdax";
    case PmKind::kFile: return "file";
  }
  return "unknown";
}

std::string_view PersistGranularityName(PersistGranularity g) {
  switch (g) {
    case PersistGranularity::kByte: return "byte";
    case PersistGranularity::kCacheLine: return "cache-line";
    case PersistGranularity::kPage: return "page";
  }
  return "unknown";
}

// The OS and libpmem2 resources, released in the reverse order of their
// acquisition (the lock last, so no one maps while this instance still does).
struct PmDevice::Mapping {
  int fd = -1;
  // Holds the lock. Not `fd`: a mapping keeps its file open, and so would
  // keep a lock on it, as long as the mapping exists — after the process
  // died, while the kernel or a process sharing its memory still unmaps it
  // (server/address_space_holder.h).
  int lock_fd = -1;
  SourcePtr source;
  // Through libpmem2 (devdax, DAX files) or ours (other files), never both.
  MapPtr durable;
  MapPtr view;  // the private view, in power-loss simulation only
  std::unique_ptr<FileMap> file_durable;
  std::unique_ptr<FileMap> file_view;
  pmem2_persist_fn persist = nullptr;
  pmem2_flush_fn flush = nullptr;
  pmem2_drain_fn drain = nullptr;
  pmem2_memcpy_fn memcpy = nullptr;

  ~Mapping() {
    view.reset();
    durable.reset();
    file_view.reset();
    file_durable.reset();
    source.reset();
    if (fd >= 0) close(fd);
    if (lock_fd >= 0) close(lock_fd);
  }
};

// The durable image of a simulated device, fed only by persistence calls.
class PmDevice::Simulation {
 public:
  Simulation(const char* view, char* durable, uint64_t crash_after_bytes)
      : view_(view), durable_(durable), crash_after_bytes_(crash_after_bytes) {}

  // Copies the lines [begin, end) from the view to the durable image. Each
  // line is copied under its stripe lock: two threads persisting one line
  // must not let an older snapshot of it land last, which real write-back
  // (from the single cache line) never does.
  void Persist(uint64_t begin, uint64_t end) {
    for (uint64_t line = begin; line < end; line += kCacheLine) {
      std::lock_guard<std::mutex> lock(line_locks_[(line / kCacheLine) % line_locks_.size()]);
      if (crash_after_bytes_ != 0) CrashIfBudgetEnds(line);
      CopyWords(durable_ + line, view_ + line, kCacheLine);
    }
  }

  void Flush(uint64_t begin, uint64_t end) {
    std::lock_guard<std::mutex> lock(flushed_mu_);
    flushed_[std::this_thread::get_id()].push_back({begin, end});
  }

  void Drain() {
    std::vector<LineRange> ranges;
    {
      std::lock_guard<std::mutex> lock(flushed_mu_);
      auto it = flushed_.find(std::this_thread::get_id());
      if (it == flushed_.end()) return;
      ranges = std::move(it->second);
      flushed_.erase(it);
    }
    for (const LineRange& r : ranges) Persist(r.begin, r.end);
  }

 private:
  // Crash injection: when copying `line` would pass the budget, copies the
  // words still inside it and kills the process.
  void CrashIfBudgetEnds(uint64_t line) {
    const uint64_t before = persisted_bytes_.fetch_add(kCacheLine, std::memory_order_relaxed);
    if (before + kCacheLine <= crash_after_bytes_) return;
    const uint64_t remaining = before < crash_after_bytes_ ? crash_after_bytes_ - before : 0;
    CopyWords(durable_ + line, view_ + line, remaining);
    raise(SIGKILL);
  }

  const char* const view_;
  char* const durable_;
  const uint64_t crash_after_bytes_;  // 0: no crash injection
  std::atomic<uint64_t> persisted_bytes_{0};
  std::array<std::mutex, 64> line_locks_;
  std::mutex flushed_mu_;
  // Lines flushed and not yet drained, per thread: a drain (a store fence)
  // only covers the flushes of its own thread.
  std::unordered_map<std::thread::id, std::vector<LineRange>> flushed_;
};

Status PmDevice::Open(const std::string& path, const PmOptions& options,
                      std::unique_ptr<PmDevice>* out) {
  bool simulate = false;
  uint64_t crash_after_bytes = 0;
  PDPM_RETURN_IF_ERROR(SimulationSettings(options, &simulate, &crash_after_bytes));
  auto mapping = std::make_unique<Mapping>();

  // Open, creating only when asked. O_EXCL tells us whether we created it,
  // so that a failed creation leaves no half-made file behind.
  bool created = false;
  if (options.create_size > 0) {
    mapping->fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (mapping->fd >= 0) {
      created = true;
    } else if (errno == ENOENT) {
      return Status::NotFound("cannot create " + path + ": its directory does not exist");
    } else if (errno != EEXIST) {
      return OsError("create " + path, errno);
    }
  }
  if (mapping->fd < 0) {
    mapping->fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (mapping->fd < 0 && errno == ENOENT) {
      return Status::NotFound(path +
                              " does not exist (a regular file standing in for PM is created "
                              "only when create_size is set)");
    }
    if (mapping->fd < 0 && errno == EISDIR) {
      return Status::InvalidArgument(path + " is a directory, not a PM device or file");
    }
    if (mapping->fd < 0) return OsError("open " + path, errno);
  }
  Status s = [&]() -> Status {
    struct stat st {};
    if (fstat(mapping->fd, &st) != 0) return OsError("stat " + path, errno);
    if (S_ISBLK(st.st_mode)) {
      return Status::NotSupported(path +
                                  " is a block device: use a file on its DAX file system "
                                  "(mount -o dax) or a devdax namespace");
    }
    if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
      return Status::NotSupported(path + " is neither a regular file nor a devdax device");
    }
    mapping->lock_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (mapping->lock_fd < 0) return OsError("open " + path + " to lock it", errno);
    if (flock(mapping->lock_fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        return Status::FailedPrecondition(path + " is in use: another PmDevice has it open");
      }
      return OsError("lock " + path, errno);
    }
    if (S_ISREG(st.st_mode) && options.create_size > static_cast<uint64_t>(st.st_size)) {
      int err = posix_fallocate(mapping->fd, 0, static_cast<off_t>(options.create_size));
      if (err != 0) {
        return OsError("allocate " + std::to_string(options.create_size) + " bytes for " + path,
                       err);
      }
    }

    pmem2_source* raw_source = nullptr;
    int rc = pmem2_source_from_fd(&raw_source, mapping->fd);
    if (rc == PMEM2_E_INVALID_FILE_TYPE) {
      return Status::NotSupported(path + " is a character device but not a device-DAX one");
    }
    if (rc != 0) return Pmem2Error("pmem2 source for " + path, rc);
    mapping->source.reset(raw_source);
    size_t size = 0;
    size_t alignment = 0;
    rc = pmem2_source_size(mapping->source.get(), &size);
    if (rc == 0) rc = pmem2_source_alignment(mapping->source.get(), &alignment);
    if (rc != 0) return Pmem2Error("size of " + path, rc);
    const size_t length = size / alignment * alignment;
    if (length == 0) {
      return Status::InvalidArgument(path + " is too small to map: " + std::to_string(size) +
                                     " bytes, mapping alignment " + std::to_string(alignment) +
                                     " (set create_size to size a file)");
    }

    const bool devdax = S_ISCHR(st.st_mode);
    if (simulate && devdax) {
      return Status::NotSupported(path +
                                  ": power-loss simulation needs a file; a devdax device "
                                  "cannot be mapped privately");
    }
    auto device = std::unique_ptr<PmDevice>(new PmDevice());
    device->path_ = path;
    device->capacity_ = length;
    char* durable_base = nullptr;
    char* view_base = nullptr;
    if (devdax || IsDaxFile(mapping->fd)) {
      PDPM_RETURN_IF_ERROR(
          NewMap(path, mapping->source.get(), length, PMEM2_SHARED, &mapping->durable));
      if (simulate) {
        PDPM_RETURN_IF_ERROR(
            NewMap(path, mapping->source.get(), length, PMEM2_PRIVATE, &mapping->view));
        view_base = static_cast<char*>(pmem2_map_get_address(mapping->view.get()));
      }
      pmem2_map* durable = mapping->durable.get();
      durable_base = static_cast<char*>(pmem2_map_get_address(durable));
      mapping->persist = pmem2_get_persist_fn(durable);
      mapping->flush = pmem2_get_flush_fn(durable);
      mapping->drain = pmem2_get_drain_fn(durable);
      mapping->memcpy = pmem2_get_memcpy_fn(durable);
      switch (pmem2_map_get_store_granularity(durable)) {
        case PMEM2_GRANULARITY_BYTE: device->granularity_ = PersistGranularity::kByte; break;
        case PMEM2_GRANULARITY_CACHE_LINE:
          device->granularity_ = PersistGranularity::kCacheLine;
          break;
        case PMEM2_GRANULARITY_PAGE: device->granularity_ = PersistGranularity::kPage; break;
      }
    } else {
      PDPM_RETURN_IF_ERROR(FileMap::Map(path, mapping->fd, length, true, &mapping->file_durable));
      if (simulate) {
        PDPM_RETURN_IF_ERROR(FileMap::Map(path, mapping->fd, length, false, &mapping->file_view));
        view_base = mapping->file_view->base();
      }
      durable_base = mapping->file_durable->base();
      if (IsMemoryFile(mapping->fd)) {
        mapping->persist = MemoryPersist;
        mapping->flush = MemoryPersist;
        mapping->drain = MemoryDrain;
        mapping->memcpy = MemoryMemcpy;
      } else {
        mapping->persist = MsyncPersist;
        mapping->flush = MsyncPersist;
        mapping->drain = MsyncDrain;
        mapping->memcpy = MsyncMemcpy;
      }
      device->granularity_ = PersistGranularity::kPage;
    }
    if (devdax) {
      device->kind_ = PmKind::kDevDax;
    } else {
      device->kind_ =
          device->granularity_ == PersistGranularity::kPage ? PmKind::kFile : PmKind::kFsDax;
    }
    if (simulate) {
      device->base_ = view_base;
      device->simulation_ =
          std::make_unique<Simulation>(device->base_, durable_base, crash_after_bytes);
      device->granularity_ = PersistGranularity::kCacheLine;
    } else {
      device->base_ = durable_base;
    }
    device->mapping_ = std::move(mapping);
    *out = std::move(device);
    return Status::OK();
  }();
  if (!s.ok() && created) {
    mapping.reset();
    unlink(path.c_str());
  }
  return s;
}

PmDevice::~PmDevice() = default;

PmDevice::LineRange PmDevice::CheckedLines(const void* addr, size_t len) const {
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  const auto base = reinterpret_cast<uintptr_t>(base_);
  if (begin < base || begin - base > capacity_ || len > capacity_ - (begin - base)) {
    std::fprintf(stderr, "pdpm: persistence call on [%p, +%zu) outside PM %s [%p, +%llu)\n", addr,
                 len, path_.c_str(), static_cast<void*>(base_),
                 static_cast<unsigned long long>(capacity_));
    std::abort();
  }
  const uint64_t offset = begin - base;
  return {offset / kCacheLine * kCacheLine,
          (offset + len + kCacheLine - 1) / kCacheLine * kCacheLine};
}

void PmDevice::Persist(const void* addr, size_t len) const {
  LineRange lines = CheckedLines(addr, len);
  if (len == 0) return;
  if (simulation_) {
    simulation_->Persist(lines.begin, lines.end);
  } else {
    mapping_->persist(addr, len);
  }
}

void PmDevice::Flush(const void* addr, size_t len) const {
  LineRange lines = CheckedLines(addr, len);
  if (len == 0) return;
  if (simulation_) {
    simulation_->Flush(lines.begin, lines.end);
  } else {
    mapping_->flush(addr, len);
  }
}

void PmDevice::Drain() const {
  if (simulation_) {
    simulation_->Drain();
  } else {
    mapping_->drain();
  }
}

void PmDevice::CopyPersist(void* dst, const void* src, size_t len) const {
  LineRange lines = CheckedLines(dst, len);
  if (len == 0) return;
  if (simulation_) {
    std::memcpy(dst, src, len);
    simulation_->Persist(lines.begin, lines.end);
  } else {
    mapping_->memcpy(dst, src, len, 0);
  }
}

std::function<void(const void*, size_t)> PmDevice::persist_fn() const {
  return [this](const void* addr, size_t len) { Persist(addr, len); };
}

}  // namespace pdpm::pm
