// Crash tests of the index on the PM layer's power-loss simulation: a forked
// child runs a deterministic workload on a PM file and the PM layer kills
// it with SIGKILL once a given number of bytes has been persisted. The crash
// points sweep every persisted word of the operations that split a segment
// or double the directory, and sample the rest. The parent checks the
// crashed image, recovers (sometimes crashing recovery too), reclaims leaks
// and compares every key with a model of the acknowledged operations.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dsm/dsm_test_region.h"
#include "pdkvs/cceh.h"
#include "pm/pm_device.h"
#include "pm/pm_space.h"
#include "pm/test_util.h"

namespace pdpm::pdkvs {
namespace {

using dsm::PAllocator;

// Items stay in the 64-byte class, segments and directories in a few more.
constexpr uint64_t kSegmentSize = 8 * dsm::kChunkSize;
constexpr int kNumKeys = 64;
constexpr int kRootSlot = 3;

CcehOptions TinyGeometry() {
  CcehOptions o;
  o.buckets_per_segment = 2;
  o.probe_buckets = 1;
  return o;
}

struct Op {
  enum Kind { kPut, kDelete, kAppend } kind;
  std::string key;
  std::string value;
};

std::string KeyOf(uint64_t i) {
  return "k" + std::to_string(i);
}

std::vector<Op> MakeWorkload(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<Op> ops;
  std::map<std::string, size_t> sizes;
  while (static_cast<int>(ops.size()) < n) {
    std::string key = KeyOf(rng() % kNumKeys);
    int choice = rng() % 10;
    auto it = sizes.find(key);
    if (it == sizes.end() || choice < 5) {
      std::string v(rng() % 16, static_cast<char>('a' + rng() % 26));
      sizes[key] = v.size();
      ops.push_back({Op::kPut, key, v});
    } else if (choice < 8 && it->second < 12) {
      it->second += 2;
      ops.push_back({Op::kAppend, key, "+."});
    } else {
      sizes.erase(it);
      ops.push_back({Op::kDelete, key, {}});
    }
  }
  return ops;
}

Status RunOp(CcehIndex* index, const Op& op) {
  switch (op.kind) {
    case Op::kPut: return index->Put(op.key, op.value);
    case Op::kDelete: return index->Delete(op.key);
    case Op::kAppend:
      return index->Update(op.key, [&](const std::string_view* old, const ItemMeta&, Mutation* m) {
        if (old == nullptr) return Status::NotFound("append to an absent key");
        m->kind = Mutation::kPut;
        m->value = std::string(*old) + op.value;
        return Status::OK();
      });
  }
  return Status::Internal("unknown op");
}

using Model = std::map<std::string, std::string>;

void ApplyOp(Model* m, const Op& op) {
  switch (op.kind) {
    case Op::kPut: (*m)[op.key] = op.value; break;
    case Op::kDelete: m->erase(op.key); break;
    case Op::kAppend: (*m)[op.key] += op.value; break;
  }
}

// The index in segment 0 of the PM space on a device; its header offset in
// a root slot of the segment's allocator.
struct Store {
  std::unique_ptr<pm::PmSpace> space;
  std::unique_ptr<PAllocator> alloc;
  std::unique_ptr<CcehIndex> index;

  dsm::PmRange Range() const {
    std::span<char> seg = space->segment(0);
    return dsm::PmRange{seg.data(), seg.size(), space->device().persist_fn()};
  }
};

// Opens the PM space and the allocator; crash_after_bytes > 0 crashes the
// process there, power loss simulated.
Status OpenSpace(const std::string& path, uint64_t crash_after_bytes, Store* store,
                 bool simulate_power_loss = false) {
  pm::PmOptions o;
  o.crash_after_persisted_bytes = crash_after_bytes;
  o.simulate_power_loss = simulate_power_loss;
  std::unique_ptr<pm::PmDevice> device;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(path, o, &device));
  PDPM_RETURN_IF_ERROR(pm::PmSpace::Open(std::move(device), {}, &store->space));
  return PAllocator::Open(store->Range(), {}, &store->alloc);
}

// The recovery path of a server: allocator, index, then the reclaim of
// leaks with every index of the region.
Status OpenStore(const std::string& path, uint64_t crash_after_bytes, Store* store,
                 bool simulate_power_loss = false) {
  PDPM_RETURN_IF_ERROR(OpenSpace(path, crash_after_bytes, store, simulate_power_loss));
  PDPM_RETURN_IF_ERROR(
      CcehIndex::Open(store->alloc.get(), store->alloc->GetRoot(kRootSlot), {}, &store->index));
  CcehIndex* all[] = {store->index.get()};
  return CcehIndex::ReclaimUnreachable(store->alloc.get(), all, nullptr);
}

// Formats a PM file of one segment holding an empty index of tiny geometry,
// published in kRootSlot.
void FormatStore(const std::string& path, uint64_t segment_size, Store* store) {
  pm::PmOptions o;
  o.create_size = pm::kSuperblockAreaSize + segment_size;
  std::unique_ptr<pm::PmDevice> device;
  ASSERT_TRUE(pm::PmDevice::Open(path, o, &device).ok());
  pm::FormatOptions f;
  f.segment_size = segment_size;
  ASSERT_TRUE(pm::PmSpace::Format(std::move(device), f, &store->space).ok());
  ASSERT_TRUE(PAllocator::Format(store->Range()).ok());
  ASSERT_TRUE(PAllocator::Open(store->Range(), {}, &store->alloc).ok());
  uint64_t header;
  ASSERT_TRUE(CcehIndex::Create(store->alloc.get(), TinyGeometry(), &header, &store->index).ok());
  ASSERT_TRUE(store->alloc->SetRoot(kRootSlot, header).ok());
}

// The non-zero 4 KiB pages of a file: most of a fresh PM file is zero, so
// restoring the image before each crash point writes these only.
struct SparseImage {
  off_t size = 0;
  std::vector<std::pair<off_t, std::string>> pages;

  void Load(const std::string& path) {
    std::string all = pm::ReadFileAt(path, 0, std::filesystem::file_size(path));
    size = static_cast<off_t>(all.size());
    for (size_t off = 0; off < all.size(); off += 4096) {
      std::string_view page = std::string_view(all).substr(off, 4096);
      if (page.find_first_not_of('\0') != std::string_view::npos) {
        pages.emplace_back(off, std::string(page));
      }
    }
  }
  void WriteTo(const std::string& path) const {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(ftruncate(fd, size), 0);
    for (const auto& [off, page] : pages) {
      ASSERT_EQ(pwrite(fd, page.data(), page.size(), off), static_cast<ssize_t>(page.size()));
    }
    close(fd);
  }
};

class CcehCrashTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  void SetUp() override {
    ops_ = MakeWorkload(GetParam(), 120);
    Store store;
    FormatStore(pristine_, kSegmentSize, &store);
    if (HasFatalFailure()) return;
    const uint64_t header = store.alloc->GetRoot(kRootSlot);
    pristine_image_.Load(pristine_);

    // A dry run on a copy counts what each operation persists, the way the
    // PM layer counts it, and which operations split or double.
    dsm::TestRegion dry(kSegmentSize);
    memcpy(dry.base(), store.space->segment(0).data(), kSegmentSize);
    std::unique_ptr<PAllocator> a;
    std::unique_ptr<CcehIndex> index;
    ASSERT_TRUE(PAllocator::Open(dry.range(), {}, &a).ok());
    ASSERT_TRUE(CcehIndex::Open(a.get(), header, {}, &index).ok());
    uint64_t start = dry.persisted_bytes();
    for (const Op& op : ops_) {
      CcehStats before = index->Stats();
      uint64_t from = dry.persisted_bytes() - start;
      ASSERT_TRUE(RunOp(index.get(), op).ok());
      CcehStats after = index->Stats();
      op_bytes_.push_back({from, dry.persisted_bytes() - start, after.splits > before.splits,
                           after.doublings > before.doublings});
    }
    total_bytes_ = dry.persisted_bytes() - start;
    ASSERT_GT(index->Stats().doublings, 3u);
    ASSERT_GT(index->Stats().splits, index->Stats().doublings + 1);
  }

  // A crash once `kill_at` bytes of the workload are persisted, optionally
  // a second one once recovery has persisted `recovery_kill_at` bytes, then
  // recovery and verification. Returns the check of the crashed image.
  CcehCheckReport CrashAndVerify(uint64_t kill_at, uint64_t recovery_kill_at) {
    SCOPED_TRACE("crash after " + std::to_string(kill_at) + " of " + std::to_string(total_bytes_) +
                 " persisted bytes, recovery crash after " + std::to_string(recovery_kill_at));
    pristine_image_.WriteTo(image_);
    bool killed;
    std::vector<uint32_t> acks = pm::CollectReports(
        pm::ForkChild([&](int ack_fd) {
          Store store;
          if (!OpenSpace(image_, kill_at, &store).ok()) _exit(91);
          if (!CcehIndex::Open(store.alloc.get(), store.alloc->GetRoot(kRootSlot), {}, &store.index)
                   .ok()) {
            _exit(92);
          }
          for (uint32_t i = 0; i < ops_.size(); ++i) {
            if (!RunOp(store.index.get(), ops_[i]).ok()) _exit(93);
            pm::WriteReport(ack_fd, i);
          }
        }),
        &killed);
    EXPECT_TRUE(killed);
    size_t acked = acks.size();

    // The crashed image: interrupted splits and stale slots at most.
    CcehCheckReport crashed;
    {
      Store store;
      Status s = OpenSpace(image_, 0, &store);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) return crashed;
      crashed = CcehIndex::Check(store.alloc.get(), store.alloc->GetRoot(kRootSlot));
      EXPECT_TRUE(crashed.ok()) << crashed.ToString();
    }
    if (recovery_kill_at > 0) {
      bool recovery_killed;
      pm::CollectReports(pm::ForkChild([&](int) {
                           Store store;
                           if (!OpenStore(image_, recovery_kill_at, &store).ok()) _exit(94);
                         }),
                         &recovery_killed);
    }

    Store store;
    Status s = OpenStore(image_, 0, &store);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return crashed;
    CcehCheckReport recovered =
        CcehIndex::Check(store.alloc.get(), store.alloc->GetRoot(kRootSlot));
    EXPECT_TRUE(recovered.clean()) << recovered.ToString();
    EXPECT_EQ(store.alloc->Stats().blocks_allocated, recovered.reachable.size())
        << "leaked blocks survived recovery";

    Model before;
    for (size_t i = 0; i < acked; ++i) ApplyOp(&before, ops_[i]);
    std::optional<Model> after;
    std::string in_flight;
    if (acked < ops_.size()) {
      after = before;
      ApplyOp(&*after, ops_[acked]);
      in_flight = ops_[acked].key;
    }
    auto expect = [](const Model& m, const std::string& key) -> std::optional<std::string> {
      auto it = m.find(key);
      return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    uint64_t present = 0;
    for (uint64_t k = 0; k < kNumKeys; ++k) {
      std::string key = KeyOf(k);
      std::string got;
      Status g = store.index->Get(key, &got);
      EXPECT_TRUE(g.ok() || g.code() == StatusCode::kNotFound) << g.ToString();
      std::optional<std::string> actual;
      if (g.ok()) actual = got;
      present += g.ok();
      bool matches =
          actual == expect(before, key) || (key == in_flight && actual == expect(*after, key));
      EXPECT_TRUE(matches) << key << " after " << acked << " acknowledged ops is "
                           << actual.value_or("absent");
    }
    EXPECT_EQ(store.index->Count(), present);
    // The recovered index keeps working.
    EXPECT_TRUE(store.index->Put("after recovery", "v").ok());
    EXPECT_TRUE(CcehIndex::Check(store.alloc.get(), store.alloc->GetRoot(kRootSlot)).clean());
    return crashed;
  }

  struct OpBytes {
    uint64_t from, to;
    bool split, doubled;
  };

  pm::TempDir dir_{pm::TestEnv("PDPM_TEST_FSDAX_DIR")};  // real PM where there is some
  std::string pristine_ = dir_.File("pristine.pm");
  std::string image_ = dir_.File("image.pm");
  SparseImage pristine_image_;
  std::vector<Op> ops_;
  std::vector<OpBytes> op_bytes_;
  uint64_t total_bytes_ = 0;
};

TEST_P(CcehCrashTest, EveryAcknowledgedOperationSurvivesAKill) {
  // Every 56th byte (7 words: every cache line is hit and every word position
  // of a line recurs) of the operations that split or double; every 8th
  // operation's start else.
  std::vector<uint64_t> points;
  for (size_t i = 0; i < op_bytes_.size(); ++i) {
    const OpBytes& ob = op_bytes_[i];
    if (ob.split || ob.doubled) {
      for (uint64_t at = ob.from + 8; at <= ob.to; at += 56) points.push_back(at);
    } else if (i % 8 == 0) {
      points.push_back(ob.from + 8);
    }
  }
  int interrupted_split = 0, interrupted_doubling = 0, stale = 0;
  for (size_t k = 0; k < points.size(); ++k) {
    uint64_t at = points[k];
    bool doubling = false;
    for (const OpBytes& ob : op_bytes_) doubling |= ob.doubled && at > ob.from && at <= ob.to;
    // Every fifth crash is followed by a crash during recovery.
    uint64_t recovery_at = k % 5 == 4 ? 8 * (1 + k % 12) : 0;
    CcehCheckReport crashed = CrashAndVerify(at, recovery_at);
    if (HasFailure()) return;
    if (crashed.interrupted_splits > 0) ++(doubling ? interrupted_doubling : interrupted_split);
    if (crashed.stale_slots > 0) ++stale;
  }
  // The sweep did hit the windows recovery has to repair.
  EXPECT_GT(interrupted_split, 0);
  EXPECT_GT(interrupted_doubling, 0);
  EXPECT_GT(stale, 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, CcehCrashTest, ::testing::Values(1, 2));

// kill -9 from outside, power loss simulated, while several threads write
// and split: every acknowledged put is there after recovery.
TEST(CcehKillTest, ConcurrentWritersKilled) {
  pm::TempDir dir(pm::TestEnv("PDPM_TEST_FSDAX_DIR"));
  std::string path = dir.File("kv.pm");
  {
    Store store;
    FormatStore(path, 4 * kSegmentSize, &store);
    if (HasFatalFailure()) return;
  }
  constexpr uint32_t kThreads = 3;
  constexpr uint32_t kPerThread = 20000;
  pm::Child child = pm::ForkChild([&](int ack_fd) {
    Store store;
    if (!OpenStore(path, 0, &store, /*simulate_power_loss=*/true).ok()) _exit(91);
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint32_t i = 0; i < kPerThread; ++i) {
          uint32_t id = t * kPerThread + i;
          if (!store.index->Put(KeyOf(id), std::to_string(id * 7)).ok()) _exit(92);
          pm::WriteReport(ack_fd, id);  // 4-byte pipe writes are atomic
        }
      });
    }
    for (auto& t : threads) t.join();
  });
  std::vector<uint32_t> acks;
  uint32_t v;
  while (acks.size() < 1500 && pm::ReadReport(child.read_fd, &v)) acks.push_back(v);
  pm::KillAndReap(child);
  close(child.read_fd);
  ASSERT_EQ(acks.size(), 1500u);

  Store store;
  Status s = OpenStore(path, 0, &store);
  ASSERT_TRUE(s.ok()) << s.ToString();
  CcehCheckReport r = CcehIndex::Check(store.alloc.get(), store.alloc->GetRoot(kRootSlot));
  ASSERT_TRUE(r.clean()) << r.ToString();
  EXPECT_EQ(store.alloc->Stats().blocks_allocated, r.reachable.size());
  for (uint32_t id : acks) {
    std::string got;
    ASSERT_TRUE(store.index->Get(KeyOf(id), &got).ok()) << id;
    EXPECT_EQ(got, std::to_string(id * 7));
  }
}

}  // namespace
}  // namespace pdpm::pdkvs
