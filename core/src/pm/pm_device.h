// PmDevice: one PM source mapped into this process, and the only way PDPM
// makes stores to it durable.
//
// Sources (the kind is detected, never configured):
//   kDevDax  a device-DAX character device (/dev/daxX.Y), mapped by
//            libpmem2: real PM, stores become durable at cache-line
//            granularity (byte with eADR);
//   kFsDax   a DAX file (a file system mounted with -o dax), mapped
//            MAP_SYNC by libpmem2: real PM, cache-line granularity;
//   kFile    any other regular file standing in for PM (tmpfs, disk),
//            mapped by mmap: persistence is msync, page granularity.
// No mapping ever leaves its range unmapped while it is made, so other
// threads' memory cannot end up under it.
//
// Contract:
//   * base()[0, capacity()) is the mapping. A store is durable only after a
//     Persist / CopyPersist covering it returns, or after a Flush covering
//     it followed by a Drain on the same thread. Nothing else (not even a
//     clean exit) promises durability.
//   * Persist, Flush, Drain and CopyPersist are thread-safe and take
//     ranges inside the mapping only: anything else is a bug and aborts
//     the process with a message (data would silently not be durable).
//   * One PmDevice per source at a time: Open takes an exclusive advisory
//     lock (flock) on it and fails with kFailedPrecondition while another
//     open instance, in any process, holds it. The lock is released when
//     the instance is destroyed or its process's files close (not only once
//     its mapping is gone).
//
// Power-loss simulation (PmOptions::simulate_power_loss, or the environment
// variable PDPM_PM_SIMULATE_POWER_LOSS=1 for whole processes): the program
// works on a private copy-on-write view of the file; only ranges made
// durable as above are copied, in whole 64-byte cache lines, 8 bytes at a
// time, to the file. A process killed at any moment therefore leaves in the
// file what a power loss would leave on PM: everything persisted, some of
// the 8-byte words of a persist in progress (a prefix here; real PM may
// leave any subset, so never rely on the order), and nothing else. Flushed-but-not-drained lines
// are not durable. Files only (a devdax mapping cannot be private); the file itself is not
// msync'ed, so the mode models power loss for crash tests and is not durable against a real one.
//
// Crash injection (PmOptions::crash_after_persisted_bytes, or the
// environment variable PDPM_PM_CRASH_AFTER_PERSISTED_BYTES=N; implies
// simulation): the process kills itself with SIGKILL at the moment the
// N-th byte (rounded down to whole words) has been copied to the file,
// counting every persisted cache line in the order the copies happen. A
// test sweeping N crashes a process at every point of its persistence
// stream, deterministically (for a single persisting thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pdpm::pm {

enum class PmKind { kDevDax, kFsDax, kFile };
std::string_view PmKindName(PmKind kind);  // "devdax", "fsdax", "file"

// The unit in which stores become durable (and may tear on power loss).
enum class PersistGranularity { kByte, kCacheLine, kPage };
std::string_view PersistGranularityName(PersistGranularity g);  // "byte", ...

// Environment variables of the simulation (see above).
inline constexpr char kSimulatePowerLossEnv[] = "PDPM_PM_SIMULATE_POWER_LOSS";
inline constexpr char kCrashAfterPersistedBytesEnv[] = "PDPM_PM_CRASH_AFTER_PERSISTED_BYTES";

struct PmOptions {
  // 0: the path must exist. Otherwise a missing path is created as a
  // regular file of this many bytes, and an existing regular file smaller
  // than this is extended to it (never shrunk). Space is allocated up
  // front, so a full file system fails here (kResourceExhausted) and not
  // later on a store.
  uint64_t create_size = 0;
  // See "Power-loss simulation" above. Also on when the environment
  // variable kSimulatePowerLossEnv is "1".
  bool simulate_power_loss = false;
  // See "Crash injection" above; 0 is off. The environment variable
  // kCrashAfterPersistedBytesEnv, when set, takes precedence.
  uint64_t crash_after_persisted_bytes = 0;
};

class PmDevice {
 public:
  // Opens and maps `path`. Errors: kNotFound (no such path, or its
  // directory is missing when creating), kInvalidArgument (a directory, an
  // empty or too small file, a malformed environment variable), kNotSupported (a block device, a
  // character device that is not device-DAX, simulation on devdax), kPermissionDenied,
  // kFailedPrecondition (opened elsewhere), kResourceExhausted (no space to create/extend, no
  // address space), kIOError (anything else the OS or libpmem2 refuses).
  static Status Open(const std::string& path, const PmOptions& options,
                     std::unique_ptr<PmDevice>* out);

  ~PmDevice();
  PmDevice(const PmDevice&) = delete;
  PmDevice& operator=(const PmDevice&) = delete;

  const std::string& path() const { return path_; }
  PmKind kind() const { return kind_; }
  // What the program can rely on: the source's granularity, or kCacheLine
  // (what is modelled) in power-loss simulation.
  PersistGranularity granularity() const { return granularity_; }
  // Mapped bytes: the source's size rounded down to its mapping alignment.
  uint64_t capacity() const { return capacity_; }
  char* base() const { return base_; }
  bool simulating_power_loss() const { return simulation_ != nullptr; }

  // Makes [addr, addr+len) durable before returning.
  void Persist(const void* addr, size_t len) const;
  // Starts write-back of [addr, addr+len); durable after this thread's
  // next Drain.
  void Flush(const void* addr, size_t len) const;
  // Waits until everything this thread flushed is durable.
  void Drain() const;
  // memcpy(dst, src, len) into PM, then Persist(dst, len).
  void CopyPersist(void* dst, const void* src, size_t len) const;

  // Persist as a callable (compatible with net::PersistFn), e.g. for the
  // transport to persist remote writes. Valid while this device lives.
  std::function<void(const void*, size_t)> persist_fn() const;

 private:
  struct Mapping;
  class Simulation;

  // [begin, end): offsets in the mapping, whole cache lines.
  struct LineRange {
    uint64_t begin;
    uint64_t end;
  };

  PmDevice() = default;
  // The cache lines covering [addr, addr+len); aborts when the range is not
  // inside the mapping.
  LineRange CheckedLines(const void* addr, size_t len) const;

  std::string path_;
  PmKind kind_ = PmKind::kFile;
  PersistGranularity granularity_ = PersistGranularity::kPage;
  uint64_t capacity_ = 0;
  char* base_ = nullptr;
  std::unique_ptr<Mapping> mapping_;
  std::unique_ptr<Simulation> simulation_;  // null unless simulating
};

}  // namespace pdpm::pm
