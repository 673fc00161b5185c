#include "pm/pm_space.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "pm/test_util.h"

namespace pdpm::pm {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kSegment = 4 * kMiB;
// Superblock area plus three segments plus a little that fits no segment.
constexpr uint64_t kDeviceSize = kSuperblockAreaSize + 3 * kSegment + kMiB;

Uuid ParseUuid(const char* text) {
  Uuid u;
  EXPECT_TRUE(Uuid::Parse(text, &u).ok()) << text;
  return u;
}

const Uuid kClusterA = ParseUuid("aaaaaaaa-0000-4000-8000-000000000001");
const Uuid kClusterB = ParseUuid("bbbbbbbb-0000-4000-8000-000000000002");

class PmSpaceTest : public ::testing::Test {
 protected:
  std::unique_ptr<PmDevice> Device(bool simulate = false) {
    PmOptions o;
    o.create_size = kDeviceSize;
    o.simulate_power_loss = simulate;
    std::unique_ptr<PmDevice> device;
    Status s = PmDevice::Open(path_, o, &device);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return device;
  }

  Status Format(const FormatOptions& options, std::unique_ptr<PmSpace>* out = nullptr) {
    std::unique_ptr<PmSpace> space;
    Status s = PmSpace::Format(Device(), options, &space);
    if (out != nullptr) *out = std::move(space);
    return s;
  }

  FormatOptions SmallSegments(const Uuid& cluster = {}, uint32_t server_id = 0) {
    FormatOptions o;
    o.segment_size = kSegment;
    o.cluster_uuid = cluster;
    o.server_id = server_id;
    return o;
  }

  Status Open(const OpenOptions& options = {}, std::unique_ptr<PmSpace>* out = nullptr,
              bool simulate = false) {
    std::unique_ptr<PmSpace> space;
    Status s = PmSpace::Open(Device(simulate), options, &space);
    if (out != nullptr) *out = std::move(space);
    return s;
  }

  Superblock OpenedSuperblock() {
    std::unique_ptr<PmSpace> space;
    Status s = Open({}, &space);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return space ? space->superblock() : Superblock{};
  }

  std::string Slot(int i) const {
    return ReadFileAt(path_, i * kSuperblockSlotStride, kSuperblockEncodedSize);
  }
  void SetSlot(int i, const std::string& bytes) const {
    WriteFileAt(path_, i * kSuperblockSlotStride, bytes);
  }

  TempDir dir_;
  const std::string path_ = dir_.File("pm");
};

TEST_F(PmSpaceTest, FormatThenOpenGivesTheSegments) {
  std::unique_ptr<PmSpace> space;
  ASSERT_TRUE(Format(SmallSegments(kClusterA, 5), &space).ok());
  EXPECT_EQ(space->segment_count(), 3u);
  EXPECT_EQ(space->segment_size(), kSegment);
  Superblock sb = space->superblock();
  EXPECT_EQ(sb.generation, 1u);
  EXPECT_EQ(sb.cluster_uuid, kClusterA);
  EXPECT_EQ(sb.server_id, 5u);
  EXPECT_EQ(sb.layout_version, kLayoutVersion);
  std::span<char> seg2 = space->segment(2);
  EXPECT_EQ(seg2.data(), space->device().base() + kSuperblockAreaSize + 2 * kSegment);
  EXPECT_EQ(seg2.size(), kSegment);
  EXPECT_TRUE(space->segment(3).empty());
  space->device().CopyPersist(seg2.data(), "segment data", 12);
  space.reset();

  OpenOptions expect;
  expect.cluster_uuid = kClusterA;
  expect.segment_size = kSegment;
  ASSERT_TRUE(Open(expect, &space).ok());
  EXPECT_EQ(space->superblock(), sb);
  EXPECT_EQ(space->segment_count(), 3u);
  EXPECT_EQ(std::string(space->segment(2).data(), 12), "segment data");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(space->segment(1).data()) % kSegmentAlignment,
            reinterpret_cast<uintptr_t>(space->device().base()) % kSegmentAlignment);
}

TEST_F(PmSpaceTest, FormatHonoursSegmentCountAndRefusesBadGeometry) {
  FormatOptions o = SmallSegments();
  o.segment_count = 2;
  std::unique_ptr<PmSpace> space;
  ASSERT_TRUE(Format(o, &space).ok());
  EXPECT_EQ(space->segment_count(), 2u);
  space.reset();

  o.overwrite = true;
  o.segment_count = 4;
  EXPECT_EQ(Format(o).code(), StatusCode::kResourceExhausted);
  o.segment_count = 0;
  o.segment_size = 3 * kMiB;
  EXPECT_EQ(Format(o).code(), StatusCode::kInvalidArgument);
  o.segment_size = 0;
  EXPECT_EQ(Format(o).code(), StatusCode::kInvalidArgument);
  o.segment_size = 2ull << 30;  // the default: far larger than the device
  Status s = Format(o);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.ToString().find("too small"), std::string::npos) << s.ToString();
}

TEST_F(PmSpaceTest, UnformattedDeviceIsRefused) {
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.ToString().find("formatted explicitly"), std::string::npos) << s.ToString();
}

TEST_F(PmSpaceTest, DeviceHoldingOtherDataIsNeitherOpenedNorFormatted) {
  Device().reset();
  WriteFileAt(path_, 100, "not a superblock");
  EXPECT_EQ(Open().code(), StatusCode::kCorruption);
  EXPECT_EQ(Format(SmallSegments()).code(), StatusCode::kAlreadyExists);
}

TEST_F(PmSpaceTest, FormatNeedsOverwriteForAFormattedDevice) {
  ASSERT_TRUE(Format(SmallSegments(kClusterA, 1)).ok());
  Status s = Format(SmallSegments(kClusterB, 2));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.ToString().find("overwrite"), std::string::npos) << s.ToString();
  EXPECT_EQ(OpenedSuperblock().cluster_uuid, kClusterA);

  FormatOptions o = SmallSegments(kClusterB, 2);
  o.overwrite = true;
  ASSERT_TRUE(Format(o).ok());
  Superblock sb = OpenedSuperblock();
  EXPECT_EQ(sb.cluster_uuid, kClusterB);
  EXPECT_EQ(sb.server_id, 2u);
  EXPECT_GT(sb.generation, 1u);  // outranks whatever the old slots held
}

TEST_F(PmSpaceTest, ForeignClusterIsRefusedNamingBoth) {
  ASSERT_TRUE(Format(SmallSegments(kClusterA, 1)).ok());
  OpenOptions o;
  o.cluster_uuid = kClusterB;
  Status s = Open(o);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.ToString().find(kClusterA.ToString()), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find(kClusterB.ToString()), std::string::npos) << s.ToString();
}

TEST_F(PmSpaceTest, DeviceOfNoClusterYetIsAccepted) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  OpenOptions o;
  o.cluster_uuid = kClusterB;
  EXPECT_TRUE(Open(o).ok());
}

TEST_F(PmSpaceTest, OtherSegmentSizeIsRefused) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  OpenOptions o;
  o.segment_size = 2 * kSegment;
  Status s = Open(o);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.ToString().find(std::to_string(kSegment)), std::string::npos) << s.ToString();
}

TEST_F(PmSpaceTest, TruncatedDeviceIsCorruption) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  ASSERT_EQ(truncate(path_.c_str(), kSuperblockAreaSize + kSegment), 0);
  std::unique_ptr<PmDevice> device;
  ASSERT_TRUE(PmDevice::Open(path_, {}, &device).ok());
  std::unique_ptr<PmSpace> space;
  Status s = PmSpace::Open(std::move(device), {}, &space);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.ToString().find("truncated"), std::string::npos) << s.ToString();
}

TEST_F(PmSpaceTest, AnyDamagedByteOfTheOnlyRecordIsCorruption) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  const std::string good = Slot(0);
  for (size_t i = 0; i < kSuperblockEncodedSize; ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(~bad[i]);
    SetSlot(0, bad);
    Status s = Open();
    ASSERT_EQ(s.code(), StatusCode::kCorruption) << "byte " << i << ": " << s.ToString();
  }
  SetSlot(0, good);
  EXPECT_TRUE(Open().ok());
}

TEST_F(PmSpaceTest, DamagedNewestRecordFallsBackToThePreviousOne) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  {
    std::unique_ptr<PmSpace> space;
    ASSERT_TRUE(Open({}, &space).ok());
    ASSERT_TRUE(space->AssignIdentity(kClusterA, 9).ok());  // generation 2, slot 1
  }
  std::string newest = Slot(1);
  newest[50] ^= 0x40;
  SetSlot(1, newest);
  Superblock sb = OpenedSuperblock();
  EXPECT_EQ(sb.generation, 1u);
  EXPECT_TRUE(sb.cluster_uuid.is_nil());
  std::string previous = Slot(0);
  previous[60] ^= 0x01;
  SetSlot(0, previous);
  EXPECT_EQ(Open().code(), StatusCode::kCorruption);
}

TEST_F(PmSpaceTest, NewerLayoutVersionIsNotSupported) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  {
    std::unique_ptr<PmSpace> space;
    ASSERT_TRUE(Open({}, &space).ok());
    ASSERT_TRUE(space->AssignIdentity(kClusterA, 3).ok());  // slot 1 is newest
  }
  std::string record = Slot(1);
  const uint32_t version = kLayoutVersion + 1;
  std::memcpy(record.data() + 8, &version, 4);
  const uint32_t crc = Crc32c(record.data(), 124);
  std::memcpy(record.data() + 124, &crc, 4);
  SetSlot(1, record);
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.ToString();
  EXPECT_NE(s.ToString().find("layout version 2"), std::string::npos) << s.ToString();
}

TEST_F(PmSpaceTest, AssignIdentityPersistsAndRefusesAnotherCluster) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  {
    std::unique_ptr<PmSpace> space;
    ASSERT_TRUE(Open({}, &space).ok());
    EXPECT_EQ(space->AssignIdentity(Uuid{}, 1).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(space->AssignIdentity(kClusterA, 0).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(space->AssignIdentity(kClusterA, 4).ok());
    ASSERT_TRUE(space->AssignIdentity(kClusterA, 6).ok());  // a new server ID is fine
    Status s = space->AssignIdentity(kClusterB, 6);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_EQ(space->superblock().generation, 3u);
  }
  Superblock sb = OpenedSuperblock();
  EXPECT_EQ(sb.cluster_uuid, kClusterA);
  EXPECT_EQ(sb.server_id, 6u);
  EXPECT_EQ(sb.generation, 3u);
  EXPECT_EQ(sb.segment_count, 3u);
}

// A crash can persist any subset of an update's words. Tear the update at
// every word boundary, from either end: Open finds the old record or the
// new one, nothing else.
TEST_F(PmSpaceTest, TornUpdateAtEveryWordGivesOldOrNew) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  {
    std::unique_ptr<PmSpace> space;
    ASSERT_TRUE(Open({}, &space).ok());
    ASSERT_TRUE(space->AssignIdentity(kClusterA, 2).ok());  // generation 2 in slot 1
  }
  const std::string old_slot0 = Slot(0);  // generation 1: the next update's target
  {
    std::unique_ptr<PmSpace> space;
    ASSERT_TRUE(Open({}, &space).ok());
    ASSERT_TRUE(space->AssignIdentity(kClusterA, 3).ok());  // generation 3 in slot 0
  }
  const std::string new_slot0 = Slot(0);
  ASSERT_NE(old_slot0, new_slot0);
  for (size_t cut = 0; cut <= kSuperblockEncodedSize; cut += 8) {
    for (bool prefix : {true, false}) {
      std::string torn = prefix ? new_slot0.substr(0, cut) + old_slot0.substr(cut)
                                : old_slot0.substr(0, cut) + new_slot0.substr(cut);
      SetSlot(0, torn);
      Superblock sb = OpenedSuperblock();
      const bool all_new = torn == new_slot0;
      EXPECT_EQ(sb.generation, all_new ? 3u : 2u) << "cut " << cut << " prefix " << prefix;
      EXPECT_EQ(sb.server_id, all_new ? 3u : 2u) << "cut " << cut << " prefix " << prefix;
    }
  }
}

TEST_F(PmSpaceTest, ConcurrentUpdatesAllCount) {
  ASSERT_TRUE(Format(SmallSegments()).ok());
  constexpr int kThreads = 4;
  constexpr int kUpdates = 50;
  {
    std::unique_ptr<PmSpace> space;
    ASSERT_TRUE(Open({}, &space).ok());
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kUpdates; ++i) {
          EXPECT_TRUE(space->AssignIdentity(kClusterA, 1 + t * kUpdates + i).ok());
          (void)space->superblock();
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  EXPECT_EQ(OpenedSuperblock().generation, 1u + kThreads * kUpdates);
}

void FormatForCrashTests(const std::string& path, uint32_t server_id) {
  std::unique_ptr<PmDevice> device;
  PmOptions o;
  o.create_size = kDeviceSize;
  ASSERT_TRUE(PmDevice::Open(path, o, &device).ok());
  FormatOptions f;
  f.segment_size = kSegment;
  f.cluster_uuid = kClusterA;
  f.server_id = server_id;
  std::unique_ptr<PmSpace> space;
  ASSERT_TRUE(PmSpace::Format(std::move(device), f, &space).ok());
}

// Opens the space as a crashed child left it and checks it is intact.
Superblock ReopenAfterCrash(const std::string& path, int round) {
  std::unique_ptr<PmDevice> device;
  EXPECT_TRUE(PmDevice::Open(path, {}, &device).ok());
  std::unique_ptr<PmSpace> space;
  Status s = PmSpace::Open(std::move(device), {}, &space);
  EXPECT_TRUE(s.ok()) << "round " << round << ": " << s.ToString();
  if (!s.ok()) return {};
  const Superblock sb = space->superblock();
  // Every update raises generation and server ID by one: a record mixing
  // two updates would break this.
  EXPECT_EQ(sb.generation, static_cast<uint64_t>(sb.server_id)) << "round " << round;
  EXPECT_EQ(sb.cluster_uuid, kClusterA) << "round " << round;
  EXPECT_EQ(sb.segment_count, 3u) << "round " << round;
  return sb;
}

// The child's loop: update, then report the server ID now durable.
[[noreturn]] void UpdateForever(const std::string& path, const PmOptions& options, int report_fd) {
  std::unique_ptr<PmDevice> device;
  std::unique_ptr<PmSpace> space;
  if (!PmDevice::Open(path, options, &device).ok()) _exit(2);
  if (!PmSpace::Open(std::move(device), {}, &space).ok()) _exit(2);
  for (;;) {
    const uint32_t next = space->superblock().server_id + 1;
    if (!space->AssignIdentity(kClusterA, next).ok()) _exit(2);
    WriteReport(report_fd, next);
  }
}

// A child updates the superblock in a loop and is killed with SIGKILL after
// a scheduled number of its reports, while it goes on updating. The record
// found afterwards is one the child wrote completely: the last reported
// one or the one after it.
TEST_F(PmSpaceTest, KillDuringUpdatesLeavesOldOrNew) {
  FormatForCrashTests(path_, 1);
  constexpr int kRounds = 12;
  for (int round = 0; round < kRounds; ++round) {
    const uint32_t kill_after = 1 + (round * 7) % 13;
    Child child = ForkChild([&](int report_fd) { UpdateForever(path_, {}, report_fd); });
    uint32_t last_reported = 0;
    for (uint32_t n = 0; n < kill_after; ++n) {
      ASSERT_TRUE(ReadReport(child.read_fd, &last_reported))
          << "round " << round << ": child stopped before report " << n;
    }
    KillAndReap(child);
    uint32_t value = 0;
    while (ReadReport(child.read_fd, &value)) last_reported = value;
    close(child.read_fd);
    const Superblock sb = ReopenAfterCrash(path_, round);
    EXPECT_TRUE(sb.server_id == last_reported || sb.server_id == last_reported + 1)
        << "round " << round << ": found server " << sb.server_id << ", last reported "
        << last_reported;
  }
}

// Under power-loss simulation, with crash injection sweeping the crash
// point over every word of several updates: each update persists one
// 128-byte record, so a crash after B bytes leaves exactly the B / 128
// completed updates; a torn record never wins.
TEST_F(PmSpaceTest, PowerLossAtEveryWordOfUpdatesLeavesOldOrNew) {
  FormatForCrashTests(path_, 1);
  uint32_t server_id = 1;
  for (uint64_t words = 1; words <= 3 * kSuperblockEncodedSize / 8; ++words) {
    const int round = static_cast<int>(words);
    PmOptions o;
    o.crash_after_persisted_bytes = words * 8;
    Child child = ForkChild([&](int report_fd) { UpdateForever(path_, o, report_fd); });
    uint32_t last_reported = server_id;
    uint32_t value = 0;
    while (ReadReport(child.read_fd, &value)) last_reported = value;
    close(child.read_fd);
    ReapKilled(child);
    const uint64_t completed = words * 8 / kSuperblockEncodedSize;
    const Superblock sb = ReopenAfterCrash(path_, round);
    EXPECT_EQ(sb.server_id, server_id + completed) << "crash after " << words << " words";
    EXPECT_EQ(last_reported, server_id + completed) << "crash after " << words << " words";
    server_id = sb.server_id;
  }
}

// Real PM: the same format/update/reopen cycle on a devdax device (its
// contents are destroyed) and on a DAX file system.
TEST(PmSpaceDaxTest, FormatAndUpdateOnRealPm) {
  const std::string devdax = TestEnv("PDPM_TEST_DEVDAX");
  const std::string fsdax_dir = TestEnv("PDPM_TEST_FSDAX_DIR");
  if (devdax.empty() && fsdax_dir.empty()) {
    GTEST_SKIP() << "needs a devdax device / DAX mount: runs in the QEMU guest (make test-hw); "
                    "set PDPM_TEST_DEVDAX and/or PDPM_TEST_FSDAX_DIR";
  }
  std::vector<std::pair<std::string, uint64_t>> targets;  // path, create_size
  if (!devdax.empty()) targets.emplace_back(devdax, 0);
  if (!fsdax_dir.empty()) {
    targets.emplace_back(fsdax_dir + "/pdpm-space-test-" + std::to_string(getpid()),
                         kSuperblockAreaSize + 2 * kSegmentAlignment);
  }
  for (const auto& [path, create_size] : targets) {
    SCOPED_TRACE(path);
    PmOptions o;
    o.create_size = create_size;
    std::unique_ptr<PmDevice> device;
    ASSERT_TRUE(PmDevice::Open(path, o, &device).ok());
    FormatOptions f;
    f.segment_size = kSegmentAlignment;
    f.overwrite = true;
    std::unique_ptr<PmSpace> space;
    Status s = PmSpace::Format(std::move(device), f, &space);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(space->AssignIdentity(kClusterA, 11).ok());
    const uint64_t count = space->segment_count();
    space->device().CopyPersist(space->segment(count - 1).data(), "last segment", 12);
    space.reset();
    ASSERT_TRUE(PmDevice::Open(path, {}, &device).ok());
    OpenOptions expect;
    expect.cluster_uuid = kClusterA;
    ASSERT_TRUE(PmSpace::Open(std::move(device), expect, &space).ok());
    EXPECT_EQ(space->superblock().server_id, 11u);
    EXPECT_EQ(space->segment_count(), count);
    EXPECT_EQ(std::string(space->segment(count - 1).data(), 12), "last segment");
    space.reset();
    if (create_size != 0) unlink(path.c_str());
  }
}

}  // namespace
}  // namespace pdpm::pm
