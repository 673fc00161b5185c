// Crash tests of hashes (VnodeHashes) on the PM layer's power-loss
// simulation: a forked child runs a deterministic workload of hash
// operations on a PM file and is killed once a given number of bytes has
// been persisted, at points spread over the whole workload. The parent
// recovers as a vnode's owner does (index, hashes, reclaim with every
// field index), checks the image and compares every hash with a model of
// the acknowledged operations: nothing acknowledged is lost, the operation
// in flight left a prefix of its fields, no block leaks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dsm/dsm_test_region.h"
#include "pdkvs/hash.h"
#include "pm/pm_device.h"
#include "pm/pm_space.h"
#include "pm/test_util.h"

namespace pdpm::pdkvs {
namespace {

using dsm::PAllocator;

constexpr uint64_t kSegmentSize = 4 * dsm::kChunkSize;
constexpr int kRootSlot = 3;
constexpr int kHashes = 3;

struct Op {
  enum Kind { kSet, kDelete, kRemove } kind;
  std::string key;
  std::vector<std::pair<std::string, std::string>> fields;  // kDelete: names only
};

std::vector<Op> MakeWorkload(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<Op> ops;
  while (static_cast<int>(ops.size()) < n) {
    Op op;
    op.key = "h" + std::to_string(rng() % kHashes);
    const int choice = static_cast<int>(rng() % 20);
    op.kind = choice < 14 ? Op::kSet : choice < 19 ? Op::kDelete : Op::kRemove;
    const int fields = op.kind == Op::kRemove ? 0 : 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < fields; i++) {
      op.fields.emplace_back("f" + std::to_string(rng() % 48),
                             std::string(rng() % 12, static_cast<char>('a' + rng() % 26)));
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

Status RunOp(VnodeHashes* hashes, const Op& op) {
  uint64_t n = 0;
  switch (op.kind) {
    case Op::kSet: {
      std::vector<std::pair<std::string_view, std::string_view>> f(op.fields.begin(),
                                                                   op.fields.end());
      return hashes->Set(op.key, f, false, &n);
    }
    case Op::kDelete: {
      std::vector<std::string_view> f;
      for (const auto& p : op.fields) f.push_back(p.first);
      return hashes->Delete(op.key, f, &n);
    }
    case Op::kRemove: {
      Status s = hashes->Remove(op.key);
      return s.code() == StatusCode::kNotFound ? Status::OK() : s;
    }
  }
  return Status::Internal("unknown op");
}

using Hash = std::map<std::string, std::string>;
using Model = std::map<std::string, Hash>;

// The model after the first `fields` fields of `op` (all: the whole op).
void ApplyPrefix(Model* m, const Op& op, size_t fields) {
  Hash& h = (*m)[op.key];
  if (op.kind == Op::kRemove) h.clear();
  for (size_t i = 0; i < fields && i < op.fields.size(); i++) {
    if (op.kind == Op::kSet) h[op.fields[i].first] = op.fields[i].second;
    if (op.kind == Op::kDelete) h.erase(op.fields[i].first);
  }
  if (h.empty()) m->erase(op.key);
}

struct Store {
  std::unique_ptr<pm::PmSpace> space;
  std::unique_ptr<PAllocator> alloc;
  std::unique_ptr<CcehIndex> index;
  std::unique_ptr<VnodeHashes> hashes;

  dsm::PmRange Range() const {
    std::span<char> seg = space->segment(0);
    return dsm::PmRange{seg.data(), seg.size(), space->device().persist_fn()};
  }
};

Status OpenSpace(const std::string& path, uint64_t crash_after_bytes, Store* store) {
  pm::PmOptions o;
  o.crash_after_persisted_bytes = crash_after_bytes;
  o.simulate_power_loss = true;
  std::unique_ptr<pm::PmDevice> device;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(path, o, &device));
  PDPM_RETURN_IF_ERROR(pm::PmSpace::Open(std::move(device), {}, &store->space));
  return PAllocator::Open(store->Range(), {}, &store->alloc);
}

// The recovery of a vnode's owner: allocator, index, hashes, then the
// reclaim with every index of the region.
Status OpenStore(const std::string& path, uint64_t crash_after_bytes, Store* store) {
  PDPM_RETURN_IF_ERROR(OpenSpace(path, crash_after_bytes, store));
  PDPM_RETURN_IF_ERROR(
      CcehIndex::Open(store->alloc.get(), store->alloc->GetRoot(kRootSlot), {}, &store->index));
  PDPM_RETURN_IF_ERROR(
      VnodeHashes::Open(store->alloc.get(), store->index.get(), {}, &store->hashes));
  std::vector<CcehIndex*> all = store->hashes->indexes();
  all.push_back(store->index.get());
  return CcehIndex::ReclaimUnreachable(store->alloc.get(), all, nullptr);
}

class HashCrashTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  void SetUp() override {
    ops_ = MakeWorkload(GetParam(), 150);
    pm::PmOptions o;
    o.create_size = pm::kSuperblockAreaSize + kSegmentSize;
    std::unique_ptr<pm::PmDevice> device;
    ASSERT_TRUE(pm::PmDevice::Open(pristine_, o, &device).ok());
    pm::FormatOptions f;
    f.segment_size = kSegmentSize;
    Store store;
    ASSERT_TRUE(pm::PmSpace::Format(std::move(device), f, &store.space).ok());
    ASSERT_TRUE(PAllocator::Format(store.Range()).ok());
    ASSERT_TRUE(PAllocator::Open(store.Range(), {}, &store.alloc).ok());
    uint64_t header = 0;
    ASSERT_TRUE(CcehIndex::Create(store.alloc.get(), {}, &header, &store.index).ok());
    ASSERT_TRUE(store.alloc->SetRoot(kRootSlot, header).ok());
    // A dry run on a copy counts the bytes the workload persists.
    dsm::TestRegion dry(kSegmentSize);
    memcpy(dry.base(), store.space->segment(0).data(), kSegmentSize);
    std::unique_ptr<PAllocator> a;
    std::unique_ptr<CcehIndex> index;
    std::unique_ptr<VnodeHashes> hashes;
    ASSERT_TRUE(PAllocator::Open(dry.range(), {}, &a).ok());
    ASSERT_TRUE(CcehIndex::Open(a.get(), header, {}, &index).ok());
    ASSERT_TRUE(VnodeHashes::Open(a.get(), index.get(), {}, &hashes).ok());
    const uint64_t start = dry.persisted_bytes();
    for (const Op& op : ops_) ASSERT_TRUE(RunOp(hashes.get(), op).ok());
    total_bytes_ = dry.persisted_bytes() - start;
  }
  void CrashAndVerify(uint64_t kill_at) {
    SCOPED_TRACE("crash after " + std::to_string(kill_at) + " of " + std::to_string(total_bytes_) +
                 " persisted bytes");
    std::filesystem::copy_file(pristine_, image_,
                               std::filesystem::copy_options::overwrite_existing);
    bool killed = false;
    std::vector<uint32_t> acks = pm::CollectReports(
        pm::ForkChild([&](int ack_fd) {
          Store store;
          if (!OpenSpace(image_, kill_at, &store).ok()) _exit(91);
          if (!CcehIndex::Open(store.alloc.get(), store.alloc->GetRoot(kRootSlot), {}, &store.index)
                   .ok() ||
              !VnodeHashes::Open(store.alloc.get(), store.index.get(), {}, &store.hashes).ok()) {
            _exit(92);
          }
          for (uint32_t i = 0; i < ops_.size(); ++i) {
            if (!RunOp(store.hashes.get(), ops_[i]).ok()) _exit(93);
            pm::WriteReport(ack_fd, i);
          }
        }),
        &killed);
    EXPECT_TRUE(killed);
    const size_t acked = acks.size();
    Store store;
    Status s = OpenStore(image_, 0, &store);
    ASSERT_TRUE(s.ok()) << s.ToString();
    CcehCheckReport r = CcehIndex::Check(store.alloc.get(), store.alloc->GetRoot(kRootSlot));
    VnodeHashes::Check(store.alloc.get(), &r);
    EXPECT_TRUE(r.clean()) << r.ToString();
    EXPECT_EQ(store.alloc->Stats().blocks_allocated, r.reachable.size()) << "leaked blocks";

    Model before;
    for (size_t i = 0; i < acked; ++i) ApplyPrefix(&before, ops_[i], SIZE_MAX);
    std::vector<Model> allowed{before};
    if (acked < ops_.size()) {
      for (size_t j = 1; j <= std::max<size_t>(ops_[acked].fields.size(), 1); j++) {
        Model m = before;
        ApplyPrefix(&m, ops_[acked], j);
        allowed.push_back(std::move(m));
      }
    }
    Model got;
    for (int h = 0; h < kHashes; h++) {
      const std::string key = "h" + std::to_string(h);
      VnodeHashes::FieldPage page;
      uint64_t cursor = 0;
      do {
        ASSERT_TRUE(store.hashes->Scan(key, cursor, 100, &page).ok());
        for (auto& [f, v] : page.fields) got[key][f] = v;
        cursor = page.next_cursor;
      } while (!page.done);
    }
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), got), allowed.end())
        << "the hashes after " << acked << " acknowledged operations match no allowed state";
    // The recovered hashes keep working.
    uint64_t n = 0;
    const std::pair<std::string_view, std::string_view> f{"after", "recovery"};
    EXPECT_TRUE(store.hashes->Set("h0", {&f, 1}, false, &n).ok());
  }

  std::vector<Op> ops_;
  uint64_t total_bytes_ = 0;
  pm::TempDir dir_{pm::TestEnv("PDPM_TEST_FSDAX_DIR")};  // real PM where there is some
  const std::string pristine_ = dir_.File("pristine.pm");
  const std::string image_ = dir_.File("image.pm");
};

// 60 crash points spread over the workload (about 1 s).
TEST_P(HashCrashTest, NothingAcknowledgedIsLost) {
  ASSERT_GT(total_bytes_, 0u);
  for (uint64_t k = 1; k <= 60; k++) {
    CrashAndVerify(total_bytes_ * k / 61 + k);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, HashCrashTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace pdpm::pdkvs
