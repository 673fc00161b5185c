// pDFSLib under crashes of a server: kill -9 (two copies: the backups take
// over) and a simulated power loss of a server's PM (one copy: the server
// comes back from what its PM kept). Clients create, write + fsync,
// truncate, rename, unlink, mkdir and rename directories meanwhile; every
// operation that returned success must be there afterwards — through the
// failover, after the server's return, for a fresh client — and fsck must
// find no violation (what cut operations legitimately leave is repaired,
// then fsck is clean).
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/cluster_pm_check.h"
#include "common/test_scale.h"
#include "monitor/placement.h"
#include "pdfs/client/fs_test_fixture.h"
#include "pdfs/client/test_seed.h"

namespace pdpm::pdfs {
namespace {

// What one worker knows about its directory /w/<worker>: the paths whose
// state is known (operations that returned success), the paths that must
// not exist, and the paths an operation that failed (outcome unknown) may
// or may not have changed. Paths are relative to the worker's directory.
struct WorkerModel {
  std::map<std::string, std::string> files;  // path -> content
  std::set<std::string> dirs;                // "" is the worker's directory
  std::set<std::string> gone;
  std::set<std::string> unknown;
  int ops = 0;                          // completed operations
  std::vector<std::string> unexpected;  // errors other than EIO
};

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// The crash workload: `workers` threads, each on its own directory, until
// stop is set. Each operation returns 0 or EIO (a cluster failure: its
// outcome is unknown); anything else is recorded as unexpected.
class CrashWorkload {
 public:
  CrashWorkload(FsTest* test, FileSystem* fs, int workers, uint64_t seed)
      : test_(test), fs_(fs), models_(static_cast<size_t>(workers)), seed_(seed) {}

  void Start() {
    for (size_t w = 0; w < models_.size(); ++w) {
      threads_.emplace_back([this, w] { Run(static_cast<int>(w)); });
    }
  }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  int CompletedOps() const { return completed_.load(); }

  // Every completed operation is visible through `test`'s file system.
  void Verify(FsTest* test) {
    FileSystem* fs = test->fs();
    for (size_t w = 0; w < models_.size(); ++w) {
      const WorkerModel& m = models_[w];
      const std::string root = "/w/" + std::to_string(w);
      std::printf(
          "worker %zu: %d operations; %zu files, %zu directories, %zu names gone, %zu "
          "unknown (failed with EIO) checked\n",
          w, m.ops, m.files.size(), m.dirs.size(), m.gone.size(), m.unknown.size());
      for (const std::string& u : m.unexpected) ADD_FAILURE() << "worker " << w << ": " << u;
      for (const auto& [path, content] : m.files) {
        EXPECT_EQ(test->ReadFile(root + "/" + path), content) << "worker " << w << ": " << path;
      }
      for (const std::string& path : m.gone) {
        Attr a;
        EXPECT_EQ(fs->Lstat(root + "/" + path, &a), ENOENT) << "worker " << w << ": " << path;
      }
      // Each known directory lists its known names and perhaps names whose
      // operation's outcome is unknown, nothing else.
      for (const std::string& dir : m.dirs) {
        std::set<std::string> want, may;
        for (const auto& [path, content] : m.files) {
          if (Parent(path) == dir) want.insert(path);
        }
        for (const std::string& d : m.dirs) {
          if (!d.empty() && Parent(d) == dir) want.insert(d);
        }
        for (const std::string& u : m.unknown) {
          if (Parent(u) == dir) may.insert(u);
        }
        const std::string abs = dir.empty() ? root : root + "/" + dir;
        for (const std::string& name : test->List(abs)) {
          const std::string path = dir.empty() ? name : dir + "/" + name;
          EXPECT_TRUE(want.erase(path) == 1 || may.count(path) == 1)
              << "worker " << w << ": " << path << " exists, no completed operation made it";
        }
        for (const std::string& path : want) {
          ADD_FAILURE() << "worker " << w << ": " << path << " is not listed";
        }
      }
    }
  }

 private:
  // Records the outcome of an operation on `paths`: success runs `apply`;
  // EIO makes the paths (and everything below them) unknown.
  template <typename Apply>
  void Outcome(WorkerModel& m, int err, const std::string& what,
               const std::vector<std::string>& paths, Apply apply) {
    if (err == 0) {
      apply();
      m.ops++;
      completed_++;
      return;
    }
    if (err != EIO) m.unexpected.push_back(what + ": " + strerror(err));
    for (const std::string& p : paths) Forget(m, p);
  }
  static void Forget(WorkerModel& m, const std::string& path) {
    const std::string below = path + "/";
    for (auto it = m.files.begin(); it != m.files.end();) {
      if (it->first == path || it->first.starts_with(below)) {
        m.unknown.insert(it->first);
        it = m.files.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = m.dirs.begin(); it != m.dirs.end();) {
      if (*it == path || it->starts_with(below)) {
        m.unknown.insert(*it);
        it = m.dirs.erase(it);
      } else {
        ++it;
      }
    }
    m.gone.erase(path);
    m.unknown.insert(path);
  }
  // Moves the known state of `from` (and below) to `to`.
  static void Move(WorkerModel& m, const std::string& from, const std::string& to) {
    const std::string below = from + "/";
    std::map<std::string, std::string> files;
    for (auto it = m.files.begin(); it != m.files.end();) {
      if (it->first == from || it->first.starts_with(below)) {
        files[to + it->first.substr(from.size())] = it->second;
        m.gone.insert(it->first);
        it = m.files.erase(it);
      } else {
        ++it;
      }
    }
    std::set<std::string> dirs;
    for (auto it = m.dirs.begin(); it != m.dirs.end();) {
      if (*it == from || it->starts_with(below)) {
        dirs.insert(to + it->substr(from.size()));
        m.gone.insert(*it);
        it = m.dirs.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [p, c] : files) {
      m.files[p] = c;
      m.gone.erase(p);
    }
    for (const std::string& d : dirs) {
      m.dirs.insert(d);
      m.gone.erase(d);
    }
    // What failed below `from` (a create that may have happened) moved
    // with it, if it is there.
    std::set<std::string> unknown;
    for (const std::string& u : m.unknown) {
      if (u.starts_with(below)) unknown.insert(to + u.substr(from.size()));
    }
    m.unknown.insert(unknown.begin(), unknown.end());
  }

  void Run(int w) {
    WorkerModel& m = models_[static_cast<size_t>(w)];
    const std::string root = "/w/" + std::to_string(w);
    std::mt19937_64 rng(seed_ * 1000 + static_cast<uint64_t>(w));
    if (test_->Mkdir(root) != 0) {
      m.unexpected.push_back("mkdir " + root + " failed");
      return;
    }
    m.dirs.insert("");
    auto pick = [&](const auto& container) {
      auto it = container.begin();
      std::advance(it, static_cast<long>(rng() % container.size()));
      return it;
    };
    auto abs = [&](const std::string& p) { return p.empty() ? root : root + "/" + p; };
    auto join = [](const std::string& dir, const std::string& name) {
      return dir.empty() ? name : dir + "/" + name;
    };
    auto bytes = [&](size_t n) {
      std::string s(n, '\0');
      for (char& c : s) c = static_cast<char>('a' + rng() % 26);
      return s;
    };
    for (int i = 0; !stop_; ++i) {
      const std::string fresh = "n" + std::to_string(i);
      const int kind = static_cast<int>(rng() % 10);
      if (kind <= 2 || m.files.empty()) {
        // Create, write and fsync a new file.
        const std::string path = join(*pick(m.dirs), fresh);
        const std::string content = bytes(1 + rng() % 20000);
        std::unique_ptr<File> f;
        int err = fs_->OpenPath(abs(path), O_CREAT | O_EXCL | O_WRONLY, 0644, {}, &f);
        if (err == 0) err = f->Pwrite(0, content);
        if (err == 0) err = f->Fsync();
        Outcome(m, err, "create " + path, {path}, [&] { m.files[path] = content; });
      } else if (kind == 3) {
        // Overwrite or extend an existing file, then fsync.
        auto it = pick(m.files);
        const std::string path = it->first;
        std::string content = it->second;
        const uint64_t at = rng() % (content.size() + 1);
        const std::string data = bytes(1 + rng() % 9000);
        std::unique_ptr<File> f;
        int err = fs_->OpenPath(abs(path), O_WRONLY, 0, {}, &f);
        if (err == 0) err = f->Pwrite(at, data);
        if (err == 0) err = f->Fsync();
        if (content.size() < at + data.size()) content.resize(at + data.size());
        content.replace(at, data.size(), data);
        Outcome(m, err, "write " + path, {path}, [&] { m.files[path] = content; });
      } else if (kind == 4) {
        // Truncate (shorter or longer).
        auto it = pick(m.files);
        const std::string path = it->first;
        std::string content = it->second;
        const uint64_t size = rng() % (content.size() + 3000);
        std::unique_ptr<File> f;
        int err = fs_->OpenPath(abs(path), O_WRONLY, 0, {}, &f);
        if (err == 0) err = f->Truncate(size);
        content.resize(size, '\0');
        Outcome(m, err, "truncate " + path, {path}, [&] { m.files[path] = content; });
      } else if (kind == 5) {
        // Rename a file: to a new name (perhaps in another directory) or
        // over another file.
        const std::string from = pick(m.files)->first;
        std::string to = join(*pick(m.dirs), fresh);
        if (rng() % 3 == 0) to = pick(m.files)->first;
        const int err = test_->Rename(abs(from), abs(to));
        Outcome(m, err, "rename " + from + " " + to, {from, to}, [&] {
          if (from == to) return;
          m.files[to] = m.files[from];
          m.files.erase(from);
          m.gone.insert(from);
          m.gone.erase(to);
        });
      } else if (kind == 6) {
        const std::string path = pick(m.files)->first;
        Outcome(m, test_->Unlink(abs(path)), "unlink " + path, {path}, [&] {
          m.files.erase(path);
          m.gone.insert(path);
        });
      } else if (kind == 7 && m.dirs.size() < 6) {
        const std::string path = join(*pick(m.dirs), fresh);
        Outcome(m, test_->Mkdir(abs(path)), "mkdir " + path, {path}, [&] { m.dirs.insert(path); });
      } else if (kind == 8 && m.dirs.size() > 1) {
        // Rename a directory with what is below it (to the top, so never
        // below itself).
        std::string from;
        while (from.empty()) from = *pick(m.dirs);
        const int err = test_->Rename(abs(from), abs(fresh));
        Outcome(m, err, "rename directory " + from, {from, fresh}, [&] { Move(m, from, fresh); });
      } else {
        // A file read back.
        auto it = pick(m.files);
        const std::string got = test_->ReadFile(abs(it->first));
        if (got != it->second && got != "<" + std::string(strerror(EIO)) + ">") {
          m.unexpected.push_back("read " + it->first + ": " + std::to_string(got.size()) +
                                 " bytes, not the " + std::to_string(it->second.size()) +
                                 " written");
        }
      }
    }
  }

  FsTest* const test_;
  FileSystem* const fs_;
  std::vector<WorkerModel> models_;
  const uint64_t seed_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> completed_{0};
};

// Waits until `n` more operations completed (false after `seconds`).
bool WaitForOps(const CrashWorkload& load, int n, int seconds) {
  const int target = load.CompletedOps() + n;
  for (int i = 0; i < seconds * 20; ++i) {
    if (load.CompletedOps() >= target) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The index of the server that owns the table of `id` (-1: none).
int ServerOf(LocalCluster& cluster, client::Client* c, const dsm::ObjectId& id) {
  const uint32_t table = monitor::TableForObject(id.hi, id.lo, c->table_count());
  const uint32_t owner = c->table_owner(table);
  for (int i = 0; i < cluster.server_count(); ++i) {
    if (cluster.ServerId(i) == owner) return i;
  }
  return -1;
}

// Two copies of every segment; parameter: whether the server killed is the
// one holding the root directory's records (the nearest thing to
// LocoFS's directory server: every path walk starts there).
class FsKillTest : public FsTest, public ::testing::WithParamInterface<bool> {
 protected:
  FsKillTest() : FsTest(FsClusterOptions(2)) {}
};

TEST_P(FsKillTest, KillNineOfAServerLosesNoCompletedOperation) {
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(Mkdir("/w"), 0);
  const int root_holder = ServerOf(cluster_, client_.get(), InodeId(kRootIno));
  ASSERT_GE(root_holder, 0);
  const int victim = GetParam() ? root_holder : (root_holder + 1) % cluster_.server_count();
  std::printf("killing server %d (%s the root directory's records)\n", victim,
              GetParam() ? "holding" : "not holding");
  CrashWorkload load(this, fs_.get(), 3, TestSeed());
  load.Start();
  EXPECT_TRUE(WaitForOps(load, 150, 60)) << cluster_.LogTails();
  cluster_.KillServer(victim);
  // Operations go on once the backups are promoted.
  EXPECT_TRUE(WaitForOps(load, 150, 60)) << cluster_.LogTails();
  load.Stop();
  std::printf("%d operations completed\n", load.CompletedOps());
  load.Verify(this);
  // The server comes back (fenced, refilled): everything is still there,
  // also for a client that starts afresh.
  ASSERT_TRUE(cluster_.StartServer(victim).ok());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  load.Verify(this);
  FsCheckReport report = Fsck(/*clean=*/false);
  ASSERT_TRUE(RepairFileSystem(client_.get(), fs_.get(), report).ok());
  Fsck();
  std::printf("took %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

INSTANTIATE_TEST_SUITE_P(Victim, FsKillTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "RootHolder" : "OtherServer";
                         });

// One copy; server 1's PM is a file under power-loss simulation: it keeps
// only what the server persisted, and the server dies at a point of its
// persistence stream while the workload runs. It comes back from its PM
// alone.
class FsPowerLossTest : public FsTest {
 protected:
  FsPowerLossTest() : FsTest(PowerLossOptions()) {}
  static LocalClusterOptions PowerLossOptions() {
    LocalClusterOptions o = FsClusterOptions(1);
    o.file_pm_server = 1;
    return o;
  }
};

TEST_F(FsPowerLossTest, PowerLossOfAServerLosesNoCompletedOperation) {
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(Mkdir("/w"), 0);
  ASSERT_TRUE(cluster_.StopServer(1).ok());
  // The power fails mid-load at any scale: the three clients' first
  // operations persist more than the least.
  const long crash_after = ScaledForTest(3000000, 750000);
  Status s = cluster_.StartServer(
      1, {"PDPM_PM_SIMULATE_POWER_LOSS=1",
          "PDPM_PM_CRASH_AFTER_PERSISTED_BYTES=" + std::to_string(crash_after)});
  ASSERT_TRUE(s.ok()) << s.ToString();
  CrashWorkload load(this, fs_.get(), 3, TestSeed());
  load.Start();
  bool crashed = false;
  for (int i = 0; i < 1200 && !crashed; ++i) {
    int ws = 0;
    crashed = cluster_.server(1).Exited(&ws);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(crashed) << "the injected power loss did not happen during the load";
  const int before = load.CompletedOps();
  std::printf("power lost after %d operations\n", before);
  cluster_.KillServer(1);
  ExpectPmChecks(cluster_, 1, /*clean=*/false);
  s = cluster_.StartServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(WaitForOps(load, 100, 60)) << cluster_.LogTails();
  load.Stop();
  load.Verify(this);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  load.Verify(this);
  FsCheckReport report = Fsck(/*clean=*/false);
  ASSERT_TRUE(RepairFileSystem(client_.get(), fs_.get(), report).ok());
  Fsck();
  StopServersAndExpectCleanPm(cluster_);
  std::printf("took %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace
}  // namespace pdpm::pdfs
