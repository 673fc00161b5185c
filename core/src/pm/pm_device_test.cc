#include "pm/pm_device.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "pm/test_util.h"

namespace pdpm::pm {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::unique_ptr<PmDevice> OpenOrDie(const std::string& path, PmOptions options = {}) {
  std::unique_ptr<PmDevice> device;
  Status s = PmDevice::Open(path, options, &device);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return device;
}

PmOptions Sized(uint64_t create_size) {
  PmOptions o;
  o.create_size = create_size;
  return o;
}

PmOptions Simulated(uint64_t create_size = 0) {
  PmOptions o = Sized(create_size);
  o.simulate_power_loss = true;
  return o;
}

TEST(PmDeviceTest, CreatesRegularFileAndReopensIt) {
  TempDir dir;
  const std::string path = dir.File("pm");
  {
    auto device = OpenOrDie(path, Sized(8 * kMiB));
    ASSERT_NE(device, nullptr);
    EXPECT_EQ(device->kind(), PmKind::kFile);
    EXPECT_EQ(device->granularity(), PersistGranularity::kPage);
    EXPECT_EQ(device->capacity(), 8 * kMiB);
    EXPECT_FALSE(device->simulating_power_loss());
    EXPECT_EQ(device->path(), path);
    Store(device->base() + 5 * kMiB, "persisted");
    device->Persist(device->base() + 5 * kMiB, 9);
  }
  auto device = OpenOrDie(path);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->capacity(), 8 * kMiB);
  EXPECT_EQ(std::string(device->base() + 5 * kMiB, 9), "persisted");
}

TEST(PmDeviceTest, CreateSizeExtendsButNeverShrinks) {
  TempDir dir;
  const std::string path = dir.File("pm");
  {
    auto device = OpenOrDie(path, Sized(4 * kMiB));
    ASSERT_NE(device, nullptr);
    device->CopyPersist(device->base() + 100, "kept", 4);
  }
  {
    auto device = OpenOrDie(path, Sized(8 * kMiB));
    ASSERT_NE(device, nullptr);
    EXPECT_EQ(device->capacity(), 8 * kMiB);
    EXPECT_EQ(std::string(device->base() + 100, 4), "kept");
  }
  auto device = OpenOrDie(path, Sized(4 * kMiB));
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->capacity(), 8 * kMiB);
}

TEST(PmDeviceTest, CapacityIsRoundedDownToThePage) {
  TempDir dir;
  const std::string path = dir.File("pm");
  auto device = OpenOrDie(path, Sized(4 * kMiB + 100));
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->capacity(), 4 * kMiB);
}

TEST(PmDeviceTest, MissingPathIsNotFound) {
  TempDir dir;
  std::unique_ptr<PmDevice> device;
  Status s = PmDevice::Open(dir.File("absent"), {}, &device);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.ToString().find("create_size"), std::string::npos) << s.ToString();

  s = PmDevice::Open(dir.File("no-such-dir/pm"), Sized(4 * kMiB), &device);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.ToString().find("directory does not exist"), std::string::npos) << s.ToString();
  EXPECT_EQ(device, nullptr);
}

TEST(PmDeviceTest, DirectoryIsRefused) {
  TempDir dir;
  std::unique_ptr<PmDevice> device;
  Status s = PmDevice::Open(dir.path(), {}, &device);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.ToString().find("is a directory"), std::string::npos) << s.ToString();
}

TEST(PmDeviceTest, EmptyOrTinyFileIsRefused) {
  TempDir dir;
  const std::string path = dir.File("pm");
  int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  std::unique_ptr<PmDevice> device;
  Status s = PmDevice::Open(path, {}, &device);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();

  WriteFileAt(path, 0, "tiny");
  s = PmDevice::Open(path, {}, &device);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.ToString().find("too small"), std::string::npos) << s.ToString();
}

TEST(PmDeviceTest, CharacterDeviceThatIsNotDaxIsRefused) {
  std::unique_ptr<PmDevice> device;
  Status s = PmDevice::Open("/dev/null", {}, &device);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.ToString();
  EXPECT_NE(s.ToString().find("not a device-DAX"), std::string::npos) << s.ToString();
}

TEST(PmDeviceTest, SecondOpenIsRefusedWhileTheFirstLives) {
  TempDir dir;
  const std::string path = dir.File("pm");
  auto first = OpenOrDie(path, Sized(4 * kMiB));
  ASSERT_NE(first, nullptr);
  std::unique_ptr<PmDevice> second;
  Status s = PmDevice::Open(path, {}, &second);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.ToString().find("in use"), std::string::npos) << s.ToString();
  first.reset();
  EXPECT_TRUE(PmDevice::Open(path, {}, &second).ok());
}

// The lock follows the instance's files, not its mapping: a mapping that
// outlives them (a dead server's, still shared by its address space holder,
// server/address_space_holder.h) does not keep a restarted server out.
// Here a forked child keeps the mapping and closes every file.
TEST(PmDeviceTest, AMappingLeftWithoutItsFilesHoldsNoLock) {
  TempDir dir;
  const std::string path = dir.File("pm");
  auto first = OpenOrDie(path, Sized(4 * kMiB));
  ASSERT_NE(first, nullptr);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const unsigned keep = static_cast<unsigned>(ready[1]);
    ::syscall(SYS_close_range, 0U, keep - 1, 0U);
    ::syscall(SYS_close_range, keep + 1, ~0U, 0U);
    if (::write(ready[1], "x", 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  first.reset();
  std::unique_ptr<PmDevice> second;
  Status s = PmDevice::Open(path, {}, &second);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(PmDeviceTest, PersistenceCallsReachTheFile) {
  TempDir dir;
  const std::string path = dir.File("pm");
  auto device = OpenOrDie(path, Sized(4 * kMiB));
  ASSERT_NE(device, nullptr);
  char* base = device->base();
  Store(base, "flushed");
  device->Flush(base, 7);
  device->Drain();
  device->CopyPersist(base + 4096, "copied", 6);
  Store(base + 8192, "through fn");
  auto persist = device->persist_fn();
  persist(base + 8192, 10);
  device->Persist(base, 0);  // an empty range is allowed
  EXPECT_EQ(ReadFileAt(path, 0, 7), "flushed");
  EXPECT_EQ(ReadFileAt(path, 4096, 6), "copied");
  EXPECT_EQ(ReadFileAt(path, 8192, 10), "through fn");
}

// Mapping a file must never leave its address range unmapped, even for a
// moment: another thread's mmap (a malloc arena, a thread stack) could land
// there and then be overwritten by the file (a server once crashed in malloc
// this way). The other thread maps memory in a loop and checks that what it
// stored stays; the PM is opened and closed meanwhile. The file lives on the
// disk of the working directory when it is writable (else in the temporary
// directory): tmpfs refuses MAP_SYNC before unmapping anything, ext4 and xfs
// (where the hole was) only after.
TEST(PmDeviceTest, OpeningNeverMapsOverAnotherThreadsMemory) {
  const std::string cwd = std::filesystem::current_path().string();
  const std::string tmpdir = TestEnv("TMPDIR");
  TempDir dir(access(cwd.c_str(), W_OK) == 0 ? cwd : !tmpdir.empty() ? tmpdir : "/tmp");
  const std::string path = dir.File("pm");
  { ASSERT_NE(OpenOrDie(path, Sized(64 * kMiB)), nullptr); }
  std::atomic<bool> stop{false};
  std::atomic<int> lost{0};
  std::thread other([&] {
    constexpr size_t kLen = 8 * kMiB;
    constexpr uint64_t kMark = 0x5044504d6d61726bULL;
    while (!stop.load()) {
      void* p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) continue;
      auto* words = static_cast<volatile uint64_t*>(p);
      words[0] = kMark;
      for (int i = 0; i < 100; i++) {
        if (words[0] != kMark) {
          lost.fetch_add(1);
          break;
        }
      }
      munmap(p, kLen);
    }
  });
  for (int i = 0; i < 2000 && lost.load() == 0; i++) {
    auto device = OpenOrDie(path);
    ASSERT_NE(device, nullptr);
  }
  stop.store(true);
  other.join();
  EXPECT_EQ(lost.load(), 0) << "a file mapping replaced another thread's memory";
}

TEST(PmDeviceTest, SimulationMakesOnlyPersistedLinesDurable) {
  TempDir dir;
  const std::string path = dir.File("pm");
  auto device = OpenOrDie(path, Simulated(4 * kMiB));
  ASSERT_NE(device, nullptr);
  EXPECT_TRUE(device->simulating_power_loss());
  EXPECT_EQ(device->kind(), PmKind::kFile);
  EXPECT_EQ(device->granularity(), PersistGranularity::kCacheLine);
  char* base = device->base();
  const std::string zeros64(64, '\0');

  // A persist covers whole cache lines, and only those.
  std::memset(base + 8192, 'x', 128);
  EXPECT_EQ(ReadFileAt(path, 8192, 64), zeros64);
  device->Persist(base + 8192 + 10, 4);
  EXPECT_EQ(ReadFileAt(path, 8192, 64), std::string(64, 'x'));
  EXPECT_EQ(ReadFileAt(path, 8192 + 64, 64), zeros64);
  // A range straddling a line boundary takes both lines.
  device->Persist(base + 8192 + 60, 8);
  EXPECT_EQ(ReadFileAt(path, 8192 + 64, 64), std::string(64, 'x'));

  // Flushed lines are durable after a drain on the flushing thread only.
  Store(base + 12288, "flushed");
  device->Flush(base + 12288, 7);
  EXPECT_EQ(ReadFileAt(path, 12288, 7), std::string(7, '\0'));
  std::thread([&] { device->Drain(); }).join();
  EXPECT_EQ(ReadFileAt(path, 12288, 7), std::string(7, '\0'));
  device->Drain();
  EXPECT_EQ(ReadFileAt(path, 12288, 7), "flushed");

  device->CopyPersist(base + 16384, "copied", 6);
  EXPECT_EQ(ReadFileAt(path, 16384, 6), "copied");
  Store(base + 20480, "through fn");
  device->persist_fn()(base + 20480, 10);
  EXPECT_EQ(ReadFileAt(path, 20480, 10), "through fn");

  // Never persisted: not in the file, not even after a clean close.
  Store(base + 24576, "volatile");
  EXPECT_EQ(std::string(base + 24576, 8), "volatile");  // the program sees it
  device.reset();
  EXPECT_EQ(ReadFileAt(path, 24576, 8), std::string(8, '\0'));

  // Reopened, the view starts from what is durable.
  device = OpenOrDie(path, Simulated());
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(std::string(device->base() + 16384, 6), "copied");
  EXPECT_EQ(std::string(device->base() + 24576, 8), std::string(8, '\0'));
}

// Stays set for the scope; restores the previous state after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);  // NOLINT(concurrency-mt-unsafe): single-threaded here
    had_old_ = old != nullptr;
    if (had_old_) old_ = old;
    setenv(name, value, 1);  // NOLINT(concurrency-mt-unsafe)
  }
  ~ScopedEnv() {
    if (had_old_) {
      setenv(name_, old_.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    } else {
      unsetenv(name_);  // NOLINT(concurrency-mt-unsafe)
    }
  }

 private:
  const char* name_;
  bool had_old_ = false;
  std::string old_;
};

TEST(PmDeviceTest, EnvironmentVariableTurnsSimulationOn) {
  TempDir dir;
  {
    ScopedEnv env(kSimulatePowerLossEnv, "0");
    auto device = OpenOrDie(dir.File("off"), Sized(4 * kMiB));
    ASSERT_NE(device, nullptr);
    EXPECT_FALSE(device->simulating_power_loss());
  }
  ScopedEnv env(kSimulatePowerLossEnv, "1");
  auto device = OpenOrDie(dir.File("on"), Sized(4 * kMiB));
  ASSERT_NE(device, nullptr);
  EXPECT_TRUE(device->simulating_power_loss());
  Store(device->base(), "volatile");
  EXPECT_EQ(ReadFileAt(dir.File("on"), 0, 8), std::string(8, '\0'));
}

// What a kill -9 leaves in simulation: persisted data, and nothing else.
TEST(PmDeviceTest, KillInSimulationLeavesExactlyThePersistedData) {
  TempDir dir;
  const std::string path = dir.File("pm");
  OpenOrDie(path, Simulated(4 * kMiB)).reset();  // create it, all zero

  Child child = ForkChild([&](int report_fd) {
    std::unique_ptr<PmDevice> device;
    if (!PmDevice::Open(path, Simulated(), &device).ok()) _exit(2);
    char* base = device->base();
    Store(base + 4096, "persisted");
    device->Persist(base + 4096, 9);
    device->CopyPersist(base + 8192, "copied", 6);
    Store(base + 12288, "flushed+drained");
    device->Flush(base + 12288, 15);
    device->Drain();
    Store(base + 16384, "flushed only");
    device->Flush(base + 16384, 12);
    Store(base + 20480, "never persisted");
    WriteReport(report_fd, 1);
    pause();  // killed here, with unpersisted stores in its view
  });
  uint32_t report = 0;
  ASSERT_TRUE(ReadReport(child.read_fd, &report)) << "child failed before reporting";
  KillAndReap(child);
  close(child.read_fd);

  auto device = OpenOrDie(path);
  ASSERT_NE(device, nullptr);
  const char* base = device->base();
  EXPECT_EQ(std::string(base + 4096, 9), "persisted");
  EXPECT_EQ(std::string(base + 8192, 6), "copied");
  EXPECT_EQ(std::string(base + 12288, 15), "flushed+drained");
  EXPECT_EQ(std::string(base + 16384, 12), std::string(12, '\0'));
  EXPECT_EQ(std::string(base + 20480, 15), std::string(15, '\0'));
}

// Crash injection stops the process in the middle of a persist, leaving
// whole words up to the budget.
TEST(PmDeviceTest, CrashInjectionKillsAtTheByteBudget) {
  TempDir dir;
  const std::string path = dir.File("pm");
  OpenOrDie(path, Simulated(4 * kMiB)).reset();
  Child child = ForkChild([&](int report_fd) {
    PmOptions o;
    o.crash_after_persisted_bytes = 64 + 20;  // one line, then two whole words
    std::unique_ptr<PmDevice> device;
    if (!PmDevice::Open(path, o, &device).ok()) _exit(2);
    if (!device->simulating_power_loss()) _exit(2);
    char* base = device->base();
    std::memset(base, 'a', 64);
    std::memset(base + 4096, 'b', 64);
    device->Persist(base, 64);
    WriteReport(report_fd, 1);
    device->Persist(base + 4096, 64);  // dies here
    WriteReport(report_fd, 2);
  });
  uint32_t report = 0;
  ASSERT_TRUE(ReadReport(child.read_fd, &report));
  EXPECT_EQ(report, 1u);
  EXPECT_FALSE(ReadReport(child.read_fd, &report)) << "survived its crash point";
  ReapKilled(child);
  close(child.read_fd);
  EXPECT_EQ(ReadFileAt(path, 0, 64), std::string(64, 'a'));
  EXPECT_EQ(ReadFileAt(path, 4096, 64), std::string(16, 'b') + std::string(48, '\0'));
}

TEST(PmDeviceTest, MalformedCrashBudgetInTheEnvironmentIsRefused) {
  TempDir dir;
  ScopedEnv env(kCrashAfterPersistedBytesEnv, "12x");
  std::unique_ptr<PmDevice> device;
  Status s = PmDevice::Open(dir.File("pm"), Sized(4 * kMiB), &device);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.ToString().find(kCrashAfterPersistedBytesEnv), std::string::npos) << s.ToString();
}

// Threads storing to and persisting words of the same lines at once: the
// durable image must end with every thread's last value, as real
// write-back from one cache line would.
TEST(PmDeviceTest, ConcurrentPersistsOfSharedLinesKeepTheNewestData) {
  TempDir dir;
  auto device = OpenOrDie(dir.File("pm"), Simulated(4 * kMiB));
  ASSERT_NE(device, nullptr);
  constexpr size_t kThreads = 4;
  constexpr size_t kLines = 16;
  constexpr uint64_t kRounds = 300;
  char* base = device->base();
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t round = 1; round <= kRounds; ++round) {
        for (size_t line = 0; line < kLines; ++line) {
          uint64_t value = round * kThreads + t;
          std::memcpy(base + line * 64 + t * 8, &value, 8);
        }
        device->Persist(base, kLines * 64);
      }
    });
  }
  for (auto& th : threads) th.join();
  device.reset();
  const std::string durable = ReadFileAt(dir.File("pm"), 0, kLines * 64);
  for (size_t line = 0; line < kLines; ++line) {
    for (size_t t = 0; t < kThreads; ++t) {
      uint64_t value = 0;
      std::memcpy(&value, durable.data() + line * 64 + t * 8, 8);
      EXPECT_EQ(value, kRounds * kThreads + t) << "line " << line << " thread " << t;
    }
  }
}

constexpr char kNeedsDaxHardware[] =
    "needs a devdax device / DAX mount: runs in the QEMU guest (make test-hw)";

// Real PM: set PDPM_TEST_DEVDAX to a device-DAX device whose contents may
// be destroyed.
TEST(PmDeviceDaxTest, DevDaxMapsWithCacheLineGranularity) {
  const std::string devdax = TestEnv("PDPM_TEST_DEVDAX");
  if (devdax.empty()) {
    GTEST_SKIP() << kNeedsDaxHardware << "; set PDPM_TEST_DEVDAX=/dev/daxX.Y";
  }
  {
    auto device = OpenOrDie(devdax);
    ASSERT_NE(device, nullptr);
    EXPECT_EQ(device->kind(), PmKind::kDevDax);
    EXPECT_NE(device->granularity(), PersistGranularity::kPage);
    EXPECT_GT(device->capacity(), 0u);
    EXPECT_EQ(device->capacity() % (2 * kMiB), 0u);
    device->CopyPersist(device->base() + kMiB, "devdax data", 11);
    Store(device->base() + kMiB + 64, "flushed");
    device->Flush(device->base() + kMiB + 64, 7);
    device->Drain();
  }
  auto device = OpenOrDie(devdax);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(std::string(device->base() + kMiB, 11), "devdax data");
  EXPECT_EQ(std::string(device->base() + kMiB + 64, 7), "flushed");
  device.reset();

  std::unique_ptr<PmDevice> simulated;
  Status s = PmDevice::Open(devdax, Simulated(), &simulated);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.ToString();
}

// Real PM: set PDPM_TEST_FSDAX_DIR to a directory on a file system mounted
// with -o dax.
TEST(PmDeviceDaxTest, FsDaxFileMapsWithCacheLineGranularity) {
  const std::string fsdax_dir = TestEnv("PDPM_TEST_FSDAX_DIR");
  if (fsdax_dir.empty()) {
    GTEST_SKIP() << kNeedsDaxHardware << "; set PDPM_TEST_FSDAX_DIR=<dax mount>";
  }
  const std::string path = fsdax_dir + "/pdpm-pm-test-" + std::to_string(getpid());
  {
    auto device = OpenOrDie(path, Sized(16 * kMiB));
    ASSERT_NE(device, nullptr);
    EXPECT_EQ(device->kind(), PmKind::kFsDax);
    EXPECT_NE(device->granularity(), PersistGranularity::kPage);
    EXPECT_EQ(device->capacity(), 16 * kMiB);
    device->CopyPersist(device->base() + 4096, "fsdax data", 10);
  }
  {
    auto device = OpenOrDie(path, Simulated());
    ASSERT_NE(device, nullptr);
    EXPECT_EQ(device->kind(), PmKind::kFsDax);
    EXPECT_EQ(std::string(device->base() + 4096, 10), "fsdax data");
  }
  unlink(path.c_str());
}

}  // namespace
}  // namespace pdpm::pm
