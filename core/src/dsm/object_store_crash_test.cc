// Crash tests on the PM layer's power-loss simulation: a forked child runs a
// deterministic workload on a PM file and the PM layer kills it with SIGKILL
// once a given number of bytes has been persisted (mid-line, leaving torn
// words), for a schedule of byte counts that covers the whole workload; only
// what was persisted survives. The parent then checks the crashed image,
// recovers, checks again and compares every object with a model of the
// acknowledged operations.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dsm/dsm_test_region.h"
#include "dsm/object_store.h"
#include "dsm/segment_check.h"
#include "pm/pm_device.h"
#include "pm/pm_space.h"
#include "pm/test_util.h"

namespace pdpm::dsm {
namespace {

// The workload needs 7 chunks (one per size class it uses) and a spare.
constexpr uint64_t kSegmentSize = 9 * kChunkSize;
constexpr int kNumKeys = 6;

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
    uint64_t key = rng() % kNumKeys;
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

// The store in segment 0 of the PM space on `device`.
struct Store {
  std::unique_ptr<pm::PmSpace> space;
  std::unique_ptr<PAllocator> alloc;
  std::unique_ptr<ObjectStoreTable> table;

  PmRange Range() const {
    std::span<char> seg = space->segment(0);
    return PmRange{seg.data(), seg.size(), space->device().persist_fn()};
  }
  char* base() const { return space->segment(0).data(); }
};

Status OpenDevice(const std::string& path, uint64_t crash_after_bytes, Store* store) {
  pm::PmOptions o;
  o.crash_after_persisted_bytes = crash_after_bytes;
  std::unique_ptr<pm::PmDevice> device;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(path, o, &device));
  return pm::PmSpace::Open(std::move(device), {}, &store->space);
}

// Opens device and store: the recovery path of a server.
Status OpenStore(const std::string& path, uint64_t crash_after_bytes, Store* store) {
  PDPM_RETURN_IF_ERROR(OpenDevice(path, crash_after_bytes, store));
  PDPM_RETURN_IF_ERROR(PAllocator::Open(store->Range(), {}, &store->alloc));
  return ObjectStoreTable::Open(store->alloc.get(), {}, &store->table, nullptr);
}

// Creates a PM file holding one segment with a formatted, opened allocator.
Status CreateStoreFile(const std::string& path, uint64_t segment_size, Store* store) {
  pm::PmOptions o;
  o.create_size = pm::kSuperblockAreaSize + segment_size;
  std::unique_ptr<pm::PmDevice> device;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(path, o, &device));
  pm::FormatOptions f;
  f.segment_size = segment_size;
  PDPM_RETURN_IF_ERROR(pm::PmSpace::Format(std::move(device), f, &store->space));
  PDPM_RETURN_IF_ERROR(PAllocator::Format(store->Range()));
  return PAllocator::Open(store->Range(), {}, &store->alloc);
}

class CrashTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  void SetUp() override {
    ops_ = MakeWorkload(GetParam(), 60);
    // The starting image: a PM space with one segment holding an empty table.
    {
      Store store;
      ASSERT_TRUE(CreateStoreFile(pristine_, kSegmentSize, &store).ok());
      ASSERT_TRUE(ObjectStoreTable::Create(store.alloc.get(), {}, &store.table).ok());
      // What the workload persists, counted the way the PM layer counts.
      TestRegion dry(kSegmentSize);
      memcpy(dry.base(), store.base(), kSegmentSize);
      std::unique_ptr<PAllocator> a;
      std::unique_ptr<ObjectStoreTable> t;
      ASSERT_TRUE(PAllocator::Open(dry.range(), {}, &a).ok());
      ASSERT_TRUE(ObjectStoreTable::Open(a.get(), {}, &t, nullptr).ok());
      uint64_t before = dry.persisted_bytes();
      for (const Op& op : ops_) ASSERT_TRUE(RunOp(t.get(), op).ok());
      total_bytes_ = dry.persisted_bytes() - before;
      ASSERT_GT(total_bytes_, 64u * 200);
    }
  }

  // Forks a child running `body(ack_fd)`; returns its acknowledgements and
  // whether it died of SIGKILL.
  std::vector<uint32_t> RunChild(const std::function<void(int)>& body, bool* killed) {
    return pm::CollectReports(pm::ForkChild(body), killed);
  }

  SegmentCheckReport CheckImage() {
    Store store;
    Status s = OpenDevice(image_, 0, &store);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return {};
    return CheckSegment(store.base(), kSegmentSize, 0);
  }

  // A crash once `kill_at` bytes of the workload are persisted, then
  // optionally a second one once recovery has persisted `recovery_kill_at`
  // bytes, then recovery and verification.
  void CrashAndVerify(uint64_t kill_at, uint64_t recovery_kill_at) {
    SCOPED_TRACE("crash after " + std::to_string(kill_at) + " of " + std::to_string(total_bytes_) +
                 " persisted bytes, recovery crash after " + std::to_string(recovery_kill_at));
    std::filesystem::copy_file(pristine_, image_,
                               std::filesystem::copy_options::overwrite_existing);
    bool killed;
    std::vector<uint32_t> acks = RunChild(
        [&](int ack_fd) {
          Store store;
          // Opening persists nothing on a clean image, so the budget is the
          // workload's alone.
          if (!OpenStore(image_, kill_at, &store).ok()) _exit(91);
          for (uint32_t i = 0; i < ops_.size(); ++i) {
            if (!RunOp(store.table.get(), ops_[i]).ok()) _exit(92);
            pm::WriteReport(ack_fd, i);
          }
        },
        &killed);
    ASSERT_TRUE(killed);
    size_t acked = acks.size();
    for (size_t i = 0; i < acked; ++i) ASSERT_EQ(acks[i], i);

    // The crashed image may hold leaks and stale towers, never a violation.
    SegmentCheckReport crashed = CheckImage();
    ASSERT_TRUE(crashed.ok()) << crashed.ToString();

    if (recovery_kill_at > 0) {
      bool recovery_killed;
      RunChild(
          [&](int) {
            Store store;
            if (!OpenStore(image_, recovery_kill_at, &store).ok()) _exit(94);
          },
          &recovery_killed);
      crashed = CheckImage();
      ASSERT_TRUE(crashed.ok()) << crashed.ToString();
    }

    Store store;
    Status s = OpenStore(image_, 0, &store);
    ASSERT_TRUE(s.ok()) << s.ToString();
    SegmentCheckReport recovered = CheckSegment(store.base(), kSegmentSize, 0);
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
    for (uint64_t key = 0; key < kNumKeys; ++key) {
      std::string got;
      Status g = store.table->Get(IdOf(key), &got);
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
    ASSERT_TRUE(store.table->Put(IdOf(99), "after recovery").ok());
    std::string v;
    ASSERT_TRUE(store.table->Get(IdOf(99), &v).ok());
    EXPECT_EQ(v, "after recovery");
    EXPECT_TRUE(CheckSegment(store.base(), kSegmentSize, 0).clean());
  }

  pm::TempDir dir_;
  std::string pristine_ = dir_.File("pristine.pm");
  std::string image_ = dir_.File("image.pm");
  std::vector<Op> ops_;
  uint64_t total_bytes_ = 0;
};

TEST_P(CrashTest, EveryAcknowledgedOperationSurvivesAKill) {
  // Crash points spread over every byte the workload persists, landing on
  // varying words of a line; every third crash is followed by a crash
  // during recovery.
  const uint64_t kPoints = 32;
  for (uint64_t k = 0; k < kPoints; ++k) {
    uint64_t at = 8 + (total_bytes_ - 64) * k / kPoints / 8 * 8 + (k % 8) * 8;
    uint64_t recovery_at = k % 3 == 2 ? 8 * (1 + k % 24) : 0;
    CrashAndVerify(at, recovery_at);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, CrashTest, ::testing::Values(1, 2, 3));

// The allocator alone, with heap blocks of every class and large runs: an
// acknowledged allocation stays allocated and an acknowledged free stays
// free across a crash, and nothing allocated is handed out again.
struct AllocOp {
  bool alloc;
  uint64_t size;  // alloc
  uint64_t pick;  // free: which live block (modulo their count)
};

std::vector<AllocOp> MakeAllocWorkload(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<AllocOp> ops;
  int live = 0;
  for (int i = 0; i < n; ++i) {
    if (live == 0 || rng() % 5 < 3) {
      uint64_t size =
          rng() % 10 == 0 ? kChunkSize * (1 + rng() % 2) : (64ull << (rng() % 15)) - rng() % 64;
      ops.push_back({true, size, 0});
      ++live;
    } else {
      ops.push_back({false, 0, rng()});
      --live;
    }
  }
  return ops;
}

// Runs op `op` against the live list; returns the offset allocated (0 when
// the region is full) or freed.
uint64_t RunAllocOp(PAllocator* a, const AllocOp& op, std::vector<uint64_t>* live) {
  if (op.alloc) {
    uint64_t off = 0;
    Status s = a->Allocate(op.size, BlockOwner::kHeap, 0, &off);
    if (!s.ok() && s.code() != StatusCode::kResourceExhausted) _exit(95);
    if (s.ok()) live->push_back(off);
    return s.ok() ? off : 0;
  }
  size_t k = op.pick % live->size();
  uint64_t off = (*live)[k];
  (*live)[k] = live->back();
  live->pop_back();
  if (!a->Free(off, BlockOwner::kHeap).ok()) _exit(96);
  return off;
}

class AllocatorCrashTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  static constexpr uint64_t kHeapSegment = 12 * kChunkSize;

  void SetUp() override {
    ops_ = MakeAllocWorkload(GetParam(), 400);
    Store store;
    ASSERT_TRUE(CreateStoreFile(pristine_, kHeapSegment, &store).ok());
    TestRegion dry(kHeapSegment);
    memcpy(dry.base(), store.base(), kHeapSegment);
    std::unique_ptr<PAllocator> a;
    ASSERT_TRUE(PAllocator::Open(dry.range(), {}, &a).ok());
    std::vector<uint64_t> live;
    for (const AllocOp& op : ops_) RunAllocOp(a.get(), op, &live);
    total_bytes_ = dry.persisted_bytes();
    ASSERT_GT(total_bytes_, 64u * 200);
  }

  void CrashAndVerify(uint64_t kill_at) {
    SCOPED_TRACE("crash after " + std::to_string(kill_at) + " of " + std::to_string(total_bytes_) +
                 " persisted bytes");
    std::filesystem::copy_file(pristine_, image_,
                               std::filesystem::copy_options::overwrite_existing);
    pm::Child child = pm::ForkChild([&](int report_fd) {
      Store store;
      if (!OpenDevice(image_, kill_at, &store).ok()) _exit(91);
      if (!PAllocator::Open(store.Range(), {}, &store.alloc).ok()) _exit(92);
      std::vector<uint64_t> live;
      for (const AllocOp& op : ops_) {
        pm::WriteReport(report_fd, static_cast<uint32_t>(RunAllocOp(store.alloc.get(), op, &live)));
      }
    });
    std::vector<uint32_t> reports;
    uint32_t v;
    while (pm::ReadReport(child.read_fd, &v)) reports.push_back(v);
    close(child.read_fd);
    pm::ReapKilled(child);
    ASSERT_LT(reports.size(), ops_.size());

    // Replay the acknowledged operations.
    std::vector<uint64_t> live;
    std::map<uint64_t, uint64_t> sizes;  // live offset -> requested size
    std::set<uint64_t> freed;
    for (size_t i = 0; i < reports.size(); ++i) {
      if (ops_[i].alloc) {
        if (reports[i] == 0) continue;
        live.push_back(reports[i]);
        sizes[reports[i]] = ops_[i].size;
        freed.erase(reports[i]);
      } else {
        size_t k = ops_[i].pick % live.size();
        ASSERT_EQ(live[k], reports[i]);
        sizes.erase(live[k]);
        freed.insert(live[k]);
        live[k] = live.back();
        live.pop_back();
      }
    }
    const AllocOp& in_flight = ops_[reports.size()];
    uint64_t in_flight_free = in_flight.alloc ? 0 : live[in_flight.pick % live.size()];

    Store store;
    ASSERT_TRUE(OpenDevice(image_, 0, &store).ok());
    SegmentCheckReport r = CheckSegment(store.base(), kHeapSegment, -1);
    ASSERT_TRUE(r.ok()) << r.ToString();
    ASSERT_TRUE(PAllocator::Open(store.Range(), {}, &store.alloc).ok());
    for (auto [off, size] : sizes) {
      if (off == in_flight_free) continue;
      uint64_t bs;
      Status s = store.alloc->BlockSize(off, BlockOwner::kHeap, &bs);
      ASSERT_TRUE(s.ok()) << "acknowledged block " << off << ": " << s.ToString();
      EXPECT_GE(bs, size);
    }
    if (!in_flight.alloc) {
      for (uint64_t off : freed) {
        uint64_t bs;
        EXPECT_FALSE(store.alloc->BlockSize(off, BlockOwner::kHeap, &bs).ok())
            << "freed block " << off << " is allocated again";
      }
    }
    // New blocks never overlap an acknowledged one.
    std::map<uint64_t, uint64_t> ranges;  // start -> end
    for (auto [off, size] : sizes) {
      if (off == in_flight_free) continue;
      uint64_t bs;
      ASSERT_TRUE(store.alloc->BlockSize(off, BlockOwner::kHeap, &bs).ok());
      ranges[off] = off + bs;
    }
    std::mt19937_64 rng(kill_at);
    for (int i = 0; i < 40; ++i) {
      uint64_t off, bs;
      Status s = store.alloc->Allocate(64ull << (rng() % 12), BlockOwner::kHeap, 0, &off);
      if (s.code() == StatusCode::kResourceExhausted) continue;
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_TRUE(store.alloc->BlockSize(off, BlockOwner::kHeap, &bs).ok());
      auto next = ranges.lower_bound(off);
      ASSERT_TRUE(next == ranges.end() || next->first >= off + bs) << "overlaps " << next->first;
      ASSERT_TRUE(next == ranges.begin() || std::prev(next)->second <= off)
          << "overlaps " << std::prev(next)->first;
      ranges[off] = off + bs;
    }
  }

  pm::TempDir dir_;
  std::string pristine_ = dir_.File("pristine.pm");
  std::string image_ = dir_.File("image.pm");
  std::vector<AllocOp> ops_;
  uint64_t total_bytes_ = 0;
};

TEST_P(AllocatorCrashTest, AcknowledgedAllocationsAndFreesSurviveAKill) {
  const uint64_t kPoints = 20;
  for (uint64_t k = 0; k < kPoints; ++k) {
    CrashAndVerify(8 + (total_bytes_ - 64) * k / kPoints / 8 * 8 + (k % 8) * 8);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, AllocatorCrashTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace pdpm::dsm
