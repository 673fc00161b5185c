// pdfs_bench: the file-system figures of `make bench-fs`
// (scripts/bench-fs.sh, docs/benchmarks.md) that fio does not measure.
//
//   pdfs_bench meta --dir DIR [--files 1000] [--dirs 10] [--seconds 20]
//   pdfs_bench meta --monitor HOST:PORT --secret-file F --volume V [...]
//   pdfs_bench data --monitor HOST:PORT --secret-file F --volume V [--jobs 1]
//                   [--seq-bytes 128MiB] [--rand-bytes 32MiB] [--seconds 20]
//
// meta: metadata operations, one thread, one at a time, on any mounted file
// system (--dir: plain system calls) or on pDFS through pDFSLib (no FUSE,
// ino-based calls as a FUSE file system gets them). Twice: with every file
// in one directory, and spread over --dirs directories (names ".dirs").
// Phases in order: create (an empty file, closed), stat, readdir (every
// directory listed to its end, repeated for at least half a second; entries
// per second), unlink, mkdir, rmdir — each over --files names, or what
// --seconds allowed create and mkdir to make. Every result is checked (a
// listing must show exactly the files created).
//
// data: pDFSLib data figures with --jobs threads, each on its own file, as
// scripts/bench-fs.sh runs fio through the mounts: 1 MiB sequential writes
// of --seq-bytes then fsync, 1 MiB sequential reads of them (every byte
// checked), 4 KiB writes and then reads at random offsets of a
// --rand-bytes file written beforehand (every block once, in a random
// order, at most --seconds each; every block read checked).
//
// Prints "FIGURE <name> <value> <unit>" lines (ops/s, entries/s, MiB/s);
// exits 1 with one error line when any operation fails.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/client_flags.h"
#include "common/flags.h"
#include "pdfs/client/file_system.h"

namespace pdpm::pdfs {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A directory as the target addresses it: a path, or a pDFS inode.
struct Dir {
  std::string path;
  uint64_t ino = 0;
};

// The metadata operations measured; each returns 0 or an errno.
class MetaTarget {
 public:
  virtual ~MetaTarget() = default;
  virtual int Mkdir(const Dir& parent, const std::string& name, Dir* out) = 0;
  virtual int Rmdir(const Dir& parent, const std::string& name) = 0;
  // An empty regular file, closed again.
  virtual int Create(const Dir& parent, const std::string& name) = 0;
  virtual int Stat(const Dir& parent, const std::string& name) = 0;
  virtual int Unlink(const Dir& parent, const std::string& name) = 0;
  // Lists `dir` to its end; *entries without "." and "..".
  virtual int List(const Dir& dir, uint64_t* entries) = 0;
};

// Plain system calls on a mounted file system.
class PosixTarget : public MetaTarget {
 public:
  int Mkdir(const Dir& parent, const std::string& name, Dir* out) override {
    out->path = parent.path + "/" + name;
    return ::mkdir(out->path.c_str(), 0755) == 0 ? 0 : errno;
  }
  int Rmdir(const Dir& parent, const std::string& name) override {
    return ::rmdir((parent.path + "/" + name).c_str()) == 0 ? 0 : errno;
  }
  int Create(const Dir& parent, const std::string& name) override {
    int fd = ::open((parent.path + "/" + name).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return errno;
    return ::close(fd) == 0 ? 0 : errno;
  }
  int Stat(const Dir& parent, const std::string& name) override {
    struct stat st;
    return ::lstat((parent.path + "/" + name).c_str(), &st) == 0 ? 0 : errno;
  }
  int Unlink(const Dir& parent, const std::string& name) override {
    return ::unlink((parent.path + "/" + name).c_str()) == 0 ? 0 : errno;
  }
  int List(const Dir& dir, uint64_t* entries) override {
    DIR* d = ::opendir(dir.path.c_str());
    if (d == nullptr) return errno;
    *entries = 0;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++*entries;
    }
    int err = errno;
    ::closedir(d);
    return err;
  }
};

// pDFSLib, by inode as pdfs-fuse calls it.
class LibTarget : public MetaTarget {
 public:
  explicit LibTarget(FileSystem* fs) : fs_(fs) {}
  int Mkdir(const Dir& parent, const std::string& name, Dir* out) override {
    Attr a;
    int err = fs_->Mkdir(parent.ino, name, 0755, owner_, &a);
    out->ino = a.ino;
    return err;
  }
  int Rmdir(const Dir& parent, const std::string& name) override {
    return fs_->Rmdir(parent.ino, name);
  }
  int Create(const Dir& parent, const std::string& name) override {
    Attr a;
    return fs_->Mknod(parent.ino, name, S_IFREG | 0644, 0, owner_, &a);
  }
  int Stat(const Dir& parent, const std::string& name) override {
    Attr a;
    return fs_->Lookup(parent.ino, name, &a);
  }
  int Unlink(const Dir& parent, const std::string& name) override {
    return fs_->Unlink(parent.ino, name);
  }
  int List(const Dir& dir, uint64_t* entries) override {
    *entries = 0;
    uint64_t cookie = 0;
    for (bool eof = false; !eof;) {
      std::vector<ReaddirEntry> page;
      int err = fs_->Readdir(dir.ino, cookie, 128, &page, &eof);
      if (err != 0) return err;
      *entries += page.size();
      if (!page.empty()) cookie = page.back().next_cookie;
    }
    return 0;
  }

 private:
  FileSystem* fs_;
  Owner owner_{::getuid(), ::getgid()};
};

int Fail(const std::string& what, int err) {
  std::fprintf(stderr, "pdfs_bench: %s: %s\n", what.c_str(), std::strerror(err));
  return 1;
}

void Report(const std::string& name, double value, const char* unit) {
  std::printf("FIGURE %s %.1f %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

struct MetaOptions {
  uint64_t files = 1000;
  uint64_t dirs = 10;
  double seconds = 20;
};

// One layout: `parents` directories of `base`, name i in parent i % count.
int MeasureMeta(MetaTarget* t, const Dir& base, const std::string& layout, uint64_t parent_count,
                const MetaOptions& o) {
  const std::string suffix = parent_count == 1 ? "" : ".dirs";
  Dir top;
  int err = t->Mkdir(base, "meta-" + layout, &top);
  if (err != 0) return Fail("mkdir meta-" + layout, err);
  std::vector<Dir> parents(parent_count);
  for (uint64_t p = 0; p < parent_count; ++p) {
    err = t->Mkdir(top, "p" + std::to_string(p), &parents[p]);
    if (err != 0) return Fail("mkdir parent", err);
  }
  // Runs op(i) for i < n (stopping early after --seconds when `bounded`);
  // returns how many ran and reports the rate.
  auto phase = [&](const std::string& name, uint64_t n, bool bounded,
                   const std::function<int(uint64_t)>& op, uint64_t* done) {
    const auto start = Clock::now();
    uint64_t i = 0;
    for (; i < n; ++i) {
      int e = op(i);
      if (e != 0) return Fail(name + " #" + std::to_string(i), e);
      if (bounded && (i & 15) == 15 && SecondsSince(start) > o.seconds) {
        ++i;
        break;
      }
    }
    Report("meta." + name + suffix, static_cast<double>(i) / SecondsSince(start), "ops/s");
    *done = i;
    return 0;
  };
  auto parent = [&](uint64_t i) -> const Dir& { return parents[i % parent_count]; };
  auto file = [](uint64_t i) { return "f" + std::to_string(i); };
  auto dir = [](uint64_t i) { return "d" + std::to_string(i); };
  uint64_t files = 0, ignored = 0;
  if (phase(
          "create", o.files, true, [&](uint64_t i) { return t->Create(parent(i), file(i)); },
          &files) != 0 ||
      phase(
          "stat", files, false, [&](uint64_t i) { return t->Stat(parent(i), file(i)); },
          &ignored) != 0) {
    return 1;
  }
  // Every directory listed to its end, again until half a second passed.
  const auto start = Clock::now();
  uint64_t listed = 0;
  do {
    uint64_t total = 0;
    for (const Dir& p : parents) {
      uint64_t entries = 0;
      err = t->List(p, &entries);
      if (err != 0) return Fail("readdir", err);
      total += entries;
    }
    if (total != files) {
      std::fprintf(stderr, "pdfs_bench: readdir listed %llu entries, %llu files exist\n",
                   static_cast<unsigned long long>(total), static_cast<unsigned long long>(files));
      return 1;
    }
    listed += total;
  } while (SecondsSince(start) < 0.5);
  Report("meta.readdir" + suffix, static_cast<double>(listed) / SecondsSince(start), "entries/s");
  uint64_t dirs = 0;
  if (phase(
          "unlink", files, false, [&](uint64_t i) { return t->Unlink(parent(i), file(i)); },
          &ignored) != 0 ||
      phase(
          "mkdir", o.files, true,
          [&](uint64_t i) {
            Dir d;
            return t->Mkdir(parent(i), dir(i), &d);
          },
          &dirs) != 0 ||
      phase(
          "rmdir", dirs, false, [&](uint64_t i) { return t->Rmdir(parent(i), dir(i)); },
          &ignored) != 0) {
    return 1;
  }
  for (uint64_t p = 0; p < parent_count; ++p) {
    err = t->Rmdir(top, "p" + std::to_string(p));
    if (err != 0) return Fail("rmdir parent", err);
  }
  err = t->Rmdir(base, "meta-" + layout);
  return err == 0 ? 0 : Fail("rmdir meta-" + layout, err);
}

struct DataOptions {
  uint32_t jobs = 1;
  uint64_t seq_bytes = 128ull << 20;
  uint64_t rand_bytes = 32ull << 20;
  double seconds = 20;
};

// The byte at `offset` of each 1 MiB block of job `job`'s sequential file.
char Pattern(uint32_t job, uint64_t offset) {
  return static_cast<char>((offset >> 12) * 131 + job * 31 + offset);
}

// Runs `fn(job)` on one thread per job; the first error (0: none).
int OnJobs(uint32_t jobs, const std::function<int(uint32_t)>& fn) {
  std::vector<int> errs(jobs, 0);
  std::vector<std::thread> threads;
  for (uint32_t j = 0; j < jobs; ++j) threads.emplace_back([&, j] { errs[j] = fn(j); });
  for (std::thread& th : threads) th.join();
  for (int e : errs) {
    if (e != 0) return e;
  }
  return 0;
}

int MeasureData(FileSystem* fs, uint64_t base, const DataOptions& o) {
  constexpr uint64_t kSeqBlock = 1 << 20;
  constexpr uint64_t kRandBlock = 4096;
  const std::string suffix = o.jobs == 1 ? "" : ".x" + std::to_string(o.jobs);
  const Owner owner{::getuid(), ::getgid()};
  Attr dir;
  int err = fs->Mkdir(base, "data" + suffix, 0755, owner, &dir);
  if (err != 0) return Fail("mkdir data", err);
  std::vector<uint64_t> seq(o.jobs), rnd(o.jobs);
  for (uint32_t j = 0; j < o.jobs; ++j) {
    Attr a;
    err = fs->Mknod(dir.ino, "seq." + std::to_string(j), S_IFREG | 0644, 0, owner, &a);
    seq[j] = a.ino;
    if (err == 0)
      err = fs->Mknod(dir.ino, "rand." + std::to_string(j), S_IFREG | 0644, 0, owner, &a);
    rnd[j] = a.ino;
    if (err != 0) return Fail("create data files", err);
  }
  const uint64_t seq_blocks = std::max<uint64_t>(1, o.seq_bytes / kSeqBlock);
  // Each 1 MiB block: the job's pattern, its first 8 bytes the block number.
  auto block_of = [&](uint32_t j) {
    std::string buf(kSeqBlock, '\0');
    for (uint64_t k = 0; k < kSeqBlock; ++k) buf[k] = Pattern(j, k);
    return buf;
  };
  auto start = Clock::now();
  err = OnJobs(o.jobs, [&](uint32_t j) {
    std::string buf = block_of(j);
    for (uint64_t b = 0; b < seq_blocks; ++b) {
      std::memcpy(buf.data(), &b, sizeof(b));
      uint64_t at = b * kSeqBlock;
      int e = fs->Write(seq[j], &at, buf, false);
      if (e != 0) return e;
    }
    return fs->Fsync(seq[j]);
  });
  if (err != 0) return Fail("sequential write", err);
  const double seq_mib = static_cast<double>(o.jobs * seq_blocks * kSeqBlock) / (1 << 20);
  Report("write.1MiB" + suffix, seq_mib / SecondsSince(start), "MiB/s");
  start = Clock::now();
  err = OnJobs(o.jobs, [&](uint32_t j) {
    const std::string want = block_of(j);
    std::string buf;
    for (uint64_t b = 0; b < seq_blocks; ++b) {
      int e = fs->Read(seq[j], b * kSeqBlock, kSeqBlock, &buf);
      if (e != 0) return e;
      uint64_t number = 0;
      if (buf.size() == kSeqBlock) std::memcpy(&number, buf.data(), sizeof(number));
      if (number != b || buf.compare(8, std::string::npos, want, 8) != 0) return EILSEQ;
    }
    return 0;
  });
  if (err != 0) return Fail("sequential read (EILSEQ: wrong bytes)", err);
  Report("read.1MiB" + suffix, seq_mib / SecondsSince(start), "MiB/s");

  // Random 4 KiB blocks: the file first filled (not timed), then every
  // block written once in a random order, then read once in another.
  const uint64_t rand_blocks = std::max<uint64_t>(1, o.rand_bytes / kRandBlock);
  err = OnJobs(o.jobs, [&](uint32_t j) {
    const std::string fill(kSeqBlock, 'r');
    const uint64_t size = rand_blocks * kRandBlock;
    for (uint64_t at = 0; at < size; at += kSeqBlock) {
      uint64_t where = at;
      int e = fs->Write(rnd[j], &where, std::string_view(fill).substr(0, size - at), false);
      if (e != 0) return e;
    }
    return 0;
  });
  if (err != 0) return Fail("fill the random-access files", err);
  std::atomic<uint64_t> ops{0};
  auto random_phase = [&](const std::string& name, bool write) {
    ops = 0;
    const auto begin = Clock::now();
    int e = OnJobs(o.jobs, [&](uint32_t j) {
      std::vector<uint64_t> order(rand_blocks);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937_64(j * 2 + (write ? 1 : 0)));
      std::string block(kRandBlock, static_cast<char>('a' + j)), got;
      for (uint64_t i = 0; i < order.size(); ++i) {
        uint64_t at = order[i] * kRandBlock;
        int e2 =
            write ? fs->Write(rnd[j], &at, block, false) : fs->Read(rnd[j], at, kRandBlock, &got);
        if (e2 != 0) return e2;
        // A block holds the fill ('r') or, once rewritten, the job's byte.
        if (!write &&
            (got.size() != kRandBlock || (got[0] != 'r' && got[0] != static_cast<char>('a' + j)))) {
          return EILSEQ;
        }
        ops.fetch_add(1, std::memory_order_relaxed);
        if ((i & 63) == 63 && SecondsSince(begin) > o.seconds) break;
      }
      return 0;
    });
    if (e != 0) return Fail(name + " (EILSEQ: wrong bytes)", e);
    Report(name + suffix, static_cast<double>(ops.load()) / SecondsSince(begin), "ops/s");
    return 0;
  };
  if (random_phase("randwrite.4KiB", true) != 0) return 1;
  if (random_phase("randread.4KiB", false) != 0) return 1;
  for (uint32_t j = 0; j < o.jobs; ++j) {
    err = fs->Unlink(dir.ino, "seq." + std::to_string(j));
    if (err == 0) err = fs->Unlink(dir.ino, "rand." + std::to_string(j));
    if (err != 0) return Fail("unlink data files", err);
  }
  err = fs->Rmdir(base, "data" + suffix);
  return err == 0 ? 0 : Fail("rmdir data", err);
}

int Run(int argc, char** argv) {
  // The mode comes first; without one the flags are still parsed (--help).
  const std::string mode = argc > 1 && argv[1][0] != '-' ? argv[1] : "";
  client::ClientFlags cluster;
  std::string dir, volume;
  MetaOptions meta;
  DataOptions data;
  uint32_t seconds = 20;
  FlagParser flags("pdfs_bench meta|data");
  flags.AddString("dir", &dir, "meta: a directory of a mounted file system to work in");
  cluster.Register(&flags, "pDFSLib: ");
  flags.AddString("volume", &volume, "pDFSLib: the volume (a directory of the root) to work in");
  flags.AddUint64("files", &meta.files, "meta: names per operation (default 1000)");
  flags.AddUint64("dirs", &meta.dirs, "meta: directories of the spread layout (default 10)");
  flags.AddUint32("jobs", &data.jobs, "data: threads, each on its own files (default 1)");
  flags.AddSize("seq-bytes", &data.seq_bytes, "data: bytes per job written then read (128MiB)");
  flags.AddSize("rand-bytes", &data.rand_bytes, "data: bytes per job of 4 KiB blocks (32MiB)");
  flags.AddUint32("seconds", &seconds, "most seconds of create, mkdir and random I/O (20)");
  Status s = mode.empty() ? flags.Parse(argc, argv) : flags.Parse(argc - 1, argv + 1);
  if (s.ok() && flags.PrintUsageIfAsked()) return 0;
  const bool lib = cluster.given();
  if (s.ok() && mode != "meta" && mode != "data") {
    s = Status::InvalidArgument("the first argument is meta or data");
  } else if (s.ok() && lib == !dir.empty()) {
    s = Status::InvalidArgument("give --dir (a mount) or --monitor (pDFSLib), not both");
  } else if (s.ok() && lib && (cluster.secret_file.empty() || volume.empty())) {
    s = Status::InvalidArgument("pDFSLib needs --secret-file and --volume");
  } else if (s.ok() && mode == "data" && !lib) {
    s = Status::InvalidArgument("data runs through pDFSLib (fio measures mounts)");
  } else if (s.ok() && (meta.files == 0 || meta.dirs == 0 || data.jobs == 0 || seconds == 0)) {
    s = Status::InvalidArgument("--files, --dirs, --jobs and --seconds must be positive");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "pdfs_bench: %s\n%s", s.ToString().c_str(), flags.Usage().c_str());
    return 2;
  }
  meta.seconds = data.seconds = seconds;
  if (!lib) {
    PosixTarget t;
    Dir base{dir, 0};
    if (MeasureMeta(&t, base, "one", 1, meta) != 0) return 1;
    return MeasureMeta(&t, base, "dirs", meta.dirs, meta);
  }
  client::ClientOptions options;
  // As pdfs-fuse with its default 8 threads.
  options.connections_per_server = std::max<uint32_t>(8, data.jobs);
  s = cluster.ToOptions(&options);
  std::unique_ptr<client::Client> client;
  if (s.ok()) s = client::Client::Open(options, &client);
  std::unique_ptr<FileSystem> fs;
  if (s.ok()) s = FileSystem::Open(client.get(), {}, &fs);
  if (!s.ok()) {
    std::fprintf(stderr, "pdfs_bench: cannot open the file system: %s\n", s.ToString().c_str());
    return 1;
  }
  Attr v;
  int err = fs->Lookup(kRootIno, volume, &v);
  if (err != 0) return Fail("volume " + volume, err);
  if (mode == "data") return MeasureData(fs.get(), v.ino, data);
  LibTarget t(fs.get());
  Dir base{"", v.ino};
  if (MeasureMeta(&t, base, "one", 1, meta) != 0) return 1;
  return MeasureMeta(&t, base, "dirs", meta.dirs, meta);
}

}  // namespace
}  // namespace pdpm::pdfs

int main(int argc, char** argv) {
  return pdpm::pdfs::Run(argc, argv);
}
