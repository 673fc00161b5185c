// Crash tests: a forked child runs a deterministic workload on simulated PM
// and is killed with SIGKILL at its n-th persist, for a schedule of n that
// covers the whole workload; only what was persisted survives. The parent
// then checks the crashed image, recovers, checks again and compares every
// object with a model of the acknowledged operations.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dsm/dsm_test_region.h"
#include "dsm/object_store.h"
#include "dsm/segment_check.h"

namespace pdpm::dsm {
namespace {

constexpr uint64_t kRegionSize = 12 * kChunkSize;
constexpr uint64_t kCacheLine = 64;

// Power-loss simulation: the durable image is a shared mapping that outlives
// the child; the child works on a private copy, and persist copies the
// touched cache lines into the image. A SIGKILL therefore loses exactly what
// was not persisted.
class PowerLossImage {
 public:
  PowerLossImage() {
    fd_ = memfd_create("pdpm-power-loss-image", 0);
    if (fd_ < 0 || ftruncate(fd_, kRegionSize) != 0) abort();
    void* p = mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) abort();
    durable_ = static_cast<char*>(p);
  }
  ~PowerLossImage() {
    munmap(durable_, kRegionSize);
    close(fd_);
  }

  char* durable() const { return durable_; }

  // In the child: a private (copy-on-write) view of the image whose persist
  // copies cache lines into the image, and which kills the process instead
  // of performing persist number `kill_at`.
  PmRange WorkingCopy(uint64_t kill_at) {
    void* p = mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) _exit(90);
    char* work = static_cast<char*>(p);
    char* durable = durable_;
    auto count = std::make_shared<uint64_t>(0);
    return PmRange{work, kRegionSize, [=](const void* addr, size_t n) {
                     if (++*count == kill_at) kill(getpid(), SIGKILL);
                     uint64_t start = static_cast<const char*>(addr) - work;
                     uint64_t from = start / kCacheLine * kCacheLine;
                     uint64_t to = std::min(kRegionSize,
                                            (start + n + kCacheLine - 1) / kCacheLine * kCacheLine);
                     memcpy(durable + from, work + from, to - from);
                   }};
  }

  // In the parent: the image itself, for recovery.
  PmRange Durable() {
    return PmRange{durable_, kRegionSize, [](const void*, size_t) {}};
  }

 private:
  int fd_;
  char* durable_;
};

struct Op {
  enum Kind { kPut, kWrite, kDelete } kind;
  uint64_t key;
  uint64_t offset = 0;
  std::string data;
};

ObjectId IdOf(uint64_t key) {
  return ObjectId{0xabcdef00 + key, key * 31};
}

std::string Bytes(size_t n, std::mt19937_64& rng) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Only valid operations: every one must succeed when no crash intervenes.
std::vector<Op> MakeWorkload(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<Op> ops;
  std::map<uint64_t, uint64_t> sizes;
  while (static_cast<int>(ops.size()) < n) {
    uint64_t key = rng() % 6;
    int choice = rng() % 10;
    auto it = sizes.find(key);
    if (it == sizes.end() || choice < 3) {
      Op op{Op::kPut, key, 0, Bytes(rng() % 90000, rng)};
      sizes[key] = op.data.size();
      ops.push_back(std::move(op));
    } else if (choice < 9) {
      uint64_t off = rng() % (it->second + 9000);
      Op op{Op::kWrite, key, off, Bytes(1 + rng() % 20000, rng)};
      it->second = std::max(it->second, off + op.data.size());
      ops.push_back(std::move(op));
    } else {
      ops.push_back(Op{Op::kDelete, key, 0, {}});
      sizes.erase(it);
    }
  }
  return ops;
}

Status RunOp(ObjectStoreTable* t, const Op& op) {
  switch (op.kind) {
    case Op::kPut: return t->Put(IdOf(op.key), op.data);
    case Op::kWrite: return t->Write(IdOf(op.key), op.offset, op.data);
    case Op::kDelete: return t->Delete(IdOf(op.key));
  }
  return Status::Internal("unknown op");
}

using Model = std::map<uint64_t, std::string>;

void ApplyOp(Model* m, const Op& op) {
  switch (op.kind) {
    case Op::kPut: (*m)[op.key] = op.data; break;
    case Op::kWrite: {
      std::string& v = (*m)[op.key];
      if (v.size() < op.offset + op.data.size()) v.resize(op.offset + op.data.size(), '\0');
      v.replace(op.offset, op.data.size(), op.data);
      break;
    }
    case Op::kDelete: m->erase(op.key); break;
  }
}

Status OpenStore(const PmRange& range, std::unique_ptr<PAllocator>* alloc,
                 std::unique_ptr<ObjectStoreTable>* table) {
  PDPM_RETURN_IF_ERROR(PAllocator::Open(range, {}, alloc));
  return ObjectStoreTable::Open(alloc->get(), {}, table, nullptr);
}

class CrashTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  void SetUp() override {
    ops_ = MakeWorkload(GetParam(), 60);
    // The starting image: formatted, a table with a few objects.
    TestRegion start(kRegionSize);
    ASSERT_TRUE(PAllocator::Format(start.range()).ok());
    std::unique_ptr<PAllocator> alloc;
    ASSERT_TRUE(PAllocator::Open(start.range(), {}, &alloc).ok());
    std::unique_ptr<ObjectStoreTable> table;
    ASSERT_TRUE(ObjectStoreTable::Create(alloc.get(), {}, &table).ok());
    pristine_.assign(start.base(), kRegionSize);
    // How many persists the whole workload makes, on a copy of that image.
    TestRegion dry(kRegionSize);
    memcpy(dry.base(), pristine_.data(), kRegionSize);
    std::unique_ptr<PAllocator> a;
    std::unique_ptr<ObjectStoreTable> t;
    ASSERT_TRUE(OpenStore(dry.range(), &a, &t).ok());
    uint64_t before = dry.persists();
    for (const Op& op : ops_) ASSERT_TRUE(RunOp(t.get(), op).ok());
    total_persists_ = dry.persists() - before;
    ASSERT_GT(total_persists_, 100u);
  }

  // Forks a child that runs `body` on a working copy of the image, killed at
  // persist `kill_at`; returns the acknowledgements it sent.
  std::vector<uint32_t> RunChild(uint64_t kill_at,
                                 const std::function<void(const PmRange&, int)>& body,
                                 bool* killed) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      body(image_.WorkingCopy(kill_at), fds[1]);
      _exit(0);
    }
    close(fds[1]);
    std::vector<uint32_t> acks;
    uint32_t v;
    while (read(fds[0], &v, sizeof(v)) == sizeof(v)) acks.push_back(v);
    close(fds[0]);
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    *killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    EXPECT_TRUE(*killed || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
        << "child failed with status " << status;
    return acks;
  }

  // One crash at workload persist `kill_at`, then optionally a second crash
  // during recovery at its persist `recovery_kill_at`, then recovery and
  // verification.
  void CrashAndVerify(uint64_t kill_at, uint64_t recovery_kill_at) {
    SCOPED_TRACE("kill at persist " + std::to_string(kill_at) + " of " +
                 std::to_string(total_persists_));
    memcpy(image_.durable(), pristine_.data(), kRegionSize);
    bool killed;
    std::vector<uint32_t> acks = RunChild(
        kill_at,
        [&](const PmRange& range, int ack_fd) {
          std::unique_ptr<PAllocator> a;
          std::unique_ptr<ObjectStoreTable> t;
          if (!OpenStore(range, &a, &t).ok()) _exit(91);
          for (uint32_t i = 0; i < ops_.size(); ++i) {
            if (!RunOp(t.get(), ops_[i]).ok()) _exit(92);
            if (write(ack_fd, &i, sizeof(i)) != sizeof(i)) _exit(93);
          }
        },
        &killed);
    ASSERT_TRUE(killed);
    size_t acked = acks.size();
    for (size_t i = 0; i < acked; ++i) ASSERT_EQ(acks[i], i);

    // The crashed image may hold leaks and stale towers, never a violation.
    SegmentCheckReport crashed = CheckSegment(image_.durable(), kRegionSize, 0);
    ASSERT_TRUE(crashed.ok()) << crashed.ToString();

    if (recovery_kill_at > 0) {
      bool recovery_killed;
      RunChild(
          recovery_kill_at,
          [&](const PmRange& range, int) {
            std::unique_ptr<PAllocator> a;
            std::unique_ptr<ObjectStoreTable> t;
            if (!OpenStore(range, &a, &t).ok()) _exit(94);
          },
          &recovery_killed);
      crashed = CheckSegment(image_.durable(), kRegionSize, 0);
      ASSERT_TRUE(crashed.ok()) << crashed.ToString();
    }

    std::unique_ptr<PAllocator> alloc;
    std::unique_ptr<ObjectStoreTable> table;
    Status s = OpenStore(image_.Durable(), &alloc, &table);
    ASSERT_TRUE(s.ok()) << s.ToString();
    SegmentCheckReport recovered = CheckSegment(image_.durable(), kRegionSize, 0);
    ASSERT_TRUE(recovered.clean()) << recovered.ToString();

    Model before;
    for (size_t i = 0; i < acked; ++i) ApplyOp(&before, ops_[i]);
    std::optional<Model> after;
    std::optional<uint64_t> in_flight;
    if (acked < ops_.size()) {
      after = before;
      ApplyOp(&*after, ops_[acked]);
      in_flight = ops_[acked].key;
    }
    for (uint64_t key = 0; key < 6; ++key) {
      std::string got;
      Status g = table->Get(IdOf(key), &got);
      ASSERT_TRUE(g.ok() || g.code() == StatusCode::kNotFound) << g.ToString();
      std::optional<std::string> actual;
      if (g.ok()) actual = got;
      auto expect = [&](const Model& m) -> std::optional<std::string> {
        auto it = m.find(key);
        return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
      };
      bool matches = actual == expect(before) || (in_flight == key && actual == expect(*after));
      ASSERT_TRUE(matches) << "object " << key << " after " << acked << " acknowledged ops is "
                           << (actual ? std::to_string(actual->size()) + " bytes" : "absent");
    }
    // The recovered store keeps working.
    ASSERT_TRUE(table->Put(IdOf(99), "after recovery").ok());
    std::string v;
    ASSERT_TRUE(table->Get(IdOf(99), &v).ok());
    EXPECT_EQ(v, "after recovery");
    EXPECT_TRUE(CheckSegment(image_.durable(), kRegionSize, 0).clean());
  }

  std::vector<Op> ops_;
  std::string pristine_;
  uint64_t total_persists_ = 0;
  PowerLossImage image_;
};

TEST_P(CrashTest, EveryAcknowledgedOperationSurvivesAKill) {
  // The first persists one by one (opening, first allocations), then points
  // spread over the whole workload; every third crash is followed by a crash
  // during recovery.
  std::vector<uint64_t> points;
  for (uint64_t p = 1; p <= 12; ++p) points.push_back(p);
  const uint64_t kSpread = 40;
  for (uint64_t k = 0; k < kSpread; ++k) {
    points.push_back(std::min(total_persists_, 13 + (total_persists_ - 13) * k / kSpread + k % 7));
  }
  for (size_t i = 0; i < points.size(); ++i) {
    CrashAndVerify(points[i], i % 3 == 2 ? 1 + i % 4 : 0);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, CrashTest, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace pdpm::dsm
