// TxParticipant in process (docs/tx.md "Log format"): a holder's record
// that stays live — its transaction's commit pending at a participant that
// is down, so its coordinator cannot truncate it — while the coordinator
// goes on committing must not fill the coordinator's log area (it did:
// `transaction log area N full`); after a restart the holder still answers
// RESOLVE for it (commit), and the log reads back clean. A coordinator that
// dies before truncating its decisions does not keep its area: once no
// participant waits on a decision, the holder drops it, and the area goes
// to another coordinator.
#include "server/tx_participant.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "dsm/dsm_test_region.h"
#include "server/segment_role.h"

namespace pdpm::server {
namespace {

constexpr uint32_t kHeapSegment = 1;
constexpr uint64_t kCoordinator = 77;
constexpr uint64_t kWriteSize = 4096;
constexpr uint64_t kWriteOffset = 1 << 20;

class TxParticipantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dsm::PAllocator::Format(log_.range()).ok());
    net::TransportOptions to;
    ASSERT_TRUE(net::Transport::Create(to, &transport_).ok());
  }

  // A participant on the test's segments (a heap segment held as primary,
  // no backups) and its log segment; recovered.
  void Start(uint32_t silent_coordinator_ms = TxParticipantOptions{}.silent_coordinator_ms) {
    participant_.reset();
    log_alloc_.reset();
    ASSERT_TRUE(dsm::PAllocator::Open(log_.range(), {}, &log_alloc_).ok());
    TxHooks hooks;
    hooks.check = [](const RequestHeader&) { return Status::OK(); };
    hooks.segment = [this](uint32_t segment, TxCopy copy, uint64_t, dsm::PmRange* mem,
                           dsm::PAllocator** alloc) {
      if (segment != kHeapSegment || copy != TxCopy::kPrimary) return Status::NotFound("segment");
      *mem = heap_.range();
      *alloc = nullptr;
      return Status::OK();
    };
    hooks.mutate = [this](uint32_t segment, TxCopy, TxTag, const TxMutation& op) {
      if (segment != kHeapSegment) return Status::NotFound("segment");
      return op(heap_.range(), nullptr);
    };
    hooks.log_segment = [this](bool, dsm::PmRange* mem, dsm::PAllocator** alloc) {
      *mem = log_.range();
      *alloc = log_alloc_.get();
      return Status::OK();
    };
    hooks.backups = [](uint32_t, std::vector<uint32_t>* in_sync, std::vector<uint32_t>* syncing) {
      in_sync->clear();
      syncing->clear();
    };
    // The other participants: kTxPending answers `pending_` (-1: down).
    hooks.call_primary = [this](uint32_t segment, bool, uint16_t method, const std::string&,
                                std::string* reply) {
      if (method != kTxPending) return Status::Unavailable("no other server here");
      asked_segment_ = segment;
      asks_++;
      if (pending_.load() < 0) return Status::Unavailable("participant down");
      Encoder(reply).U64(static_cast<uint64_t>(pending_.load()));
      return Status::OK();
    };
    TxParticipantOptions o;
    o.area_count = kAreas;  // 1 MiB areas in the 16 MiB log segment
    o.silent_coordinator_ms = silent_coordinator_ms;
    participant_ = std::make_unique<TxParticipant>(std::move(hooks), transport_.get(),
                                                   Logger("test", 2, LogLevel::kWarn), o);
    ASSERT_TRUE(participant_->Recover().ok());
  }

  static std::span<const uint8_t> Bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  // LOCK of a 4 KiB write to the heap segment, at the holder, carrying
  // the truncations `truncate`; with `participants` (a coordinator of
  // version 6) the other segments the transaction writes.
  Status Lock(uint64_t tx, const std::vector<uint64_t>& truncate,
              uint64_t coordinator = kCoordinator,
              const std::optional<std::vector<uint32_t>>& participants = std::nullopt) {
    std::string req, reply;
    Encoder e(&req);
    e.Header({});
    e.U64(coordinator);
    e.U64(tx);
    e.U64(kHeapSegment | (dsm::kTxRolePrimary << 32) | (1ull << 40) | dsm::kTxLockListsBackups |
          (participants ? dsm::kTxLockListsParticipants : 0));
    e.U64(uint64_t{truncate.size()} << 32);
    for (uint64_t t : truncate) e.U64(t);
    e.U64(0);  // no backups
    dsm::TxEntry w;
    w.segment = kHeapSegment;
    w.offset = kWriteOffset;
    w.data.assign(kWriteSize, static_cast<char>('a' + tx % 26));
    std::vector<dsm::TxEntry> entries{w};
    for (uint32_t p : participants.value_or(std::vector<uint32_t>{})) {
      dsm::TxEntry named;
      named.kind = dsm::TxEntryKind::kParticipant;
      named.segment = p;
      entries.push_back(named);
    }
    dsm::EncodeTxEntries(entries, &req);
    return participant_->HandleLock(Bytes(req), &reply);
  }

  // COMMIT (deciding: the holder's record is applied, and stays until
  // truncated — it answers RESOLVE).
  Status Commit(uint64_t tx, uint64_t coordinator = kCoordinator, bool decide = true) {
    std::string req, reply;
    Encoder e(&req);
    e.Header({});
    e.U64(coordinator);
    e.U64(tx);
    e.U64(decide ? 1 : 0);
    return participant_->HandleCommit(Bytes(req), &reply);
  }
  Status Decide(uint64_t tx) { return Commit(tx); }

  Status Hello(uint64_t coordinator) {
    std::string req, reply;
    Encoder e(&req);
    e.Header({});
    e.U64(coordinator);
    return participant_->HandleHello(Bytes(req), &reply);
  }

  Status Resolve(uint64_t tx, uint64_t* outcome, uint64_t coordinator = kCoordinator) {
    std::string req, reply;
    Encoder e(&req);
    e.Header({});
    e.U64(coordinator);
    e.U64(tx);
    PDPM_RETURN_IF_ERROR(participant_->HandleResolve(Bytes(req), &reply));
    Decoder d(Bytes(reply));
    PDPM_RETURN_IF_ERROR(d.U64(outcome));
    return d.Done();
  }

  // The offline check of the log region.
  dsm::TxLogCheck CheckLog() {
    uint64_t region = log_alloc_->GetRoot(kTxLogRegionSlot);
    uint64_t geometry = log_alloc_->GetRoot(kTxLogGeometrySlot);
    dsm::TxLogCheck check;
    dsm::CheckTxLogRegion(log_.base() + region, geometry & 0xffffffffu,
                          static_cast<uint32_t>(geometry >> 32), &check);
    return check;
  }

  // Waits (bounded) until the holder has dropped the decision of `tx`:
  // RESOLVE finds no record (so answers abort, changing nothing).
  bool WaitDropped(uint64_t tx, uint64_t coordinator) {
    for (int i = 0; i < 3000; i++) {
      uint64_t outcome = 0;
      if (Resolve(tx, &outcome, coordinator).ok() && outcome == dsm::kTxOutcomeAbort) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Waits (bounded) until the participants were asked `n` more times.
  void WaitAsked(uint32_t n) {
    const uint32_t until = asks_.load() + n;
    for (int i = 0; i < 3000 && asks_.load() < until; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GE(asks_.load(), until);
  }

  static constexpr uint32_t kAreas = 8;
  std::atomic<int> pending_{0};
  std::atomic<uint32_t> asked_segment_{0};
  std::atomic<uint32_t> asks_{0};
  dsm::TestRegion heap_{8 << 20};
  dsm::TestRegion log_{16 << 20};
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<dsm::PAllocator> log_alloc_;
  std::unique_ptr<TxParticipant> participant_;
};

// The release of an empty table segment (docs/server.md "Freed segments")
// closes it at the participant first: refused while a record names it (a
// write, the holder, a listed participant); once closed, a LOCK writing
// it aborts with nothing locked; reopened, LOCKs go through again.
TEST_F(TxParticipantTest, ASegmentClosesOnlyWithoutRecordsAndThenRefusesLocks) {
  Start();
  ASSERT_TRUE(participant_->CloseSegment(kHeapSegment));
  Status s = Lock(1, {});
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.ToString().find("being released"), std::string::npos) << s.ToString();
  participant_->ReopenSegment(kHeapSegment);
  ASSERT_TRUE(Lock(2, {}).ok());  // the refused LOCK left no word locked
  EXPECT_FALSE(participant_->CloseSegment(kHeapSegment));
  ASSERT_TRUE(Decide(2).ok());
  EXPECT_FALSE(participant_->CloseSegment(kHeapSegment));  // kept for RESOLVE
  constexpr uint32_t kListed = 5;
  ASSERT_TRUE(Lock(3, {}, kCoordinator, std::vector<uint32_t>{kListed}).ok());
  EXPECT_FALSE(participant_->CloseSegment(kListed));
  EXPECT_TRUE(participant_->CloseSegment(kListed + 1));
}

TEST_F(TxParticipantTest, AHolderRecordAwaitingTruncationDoesNotFillTheArea) {
  Start();
  // Transaction 1 commits here, but its coordinator never truncates it (a
  // participant of it is down): the record stays at the head of the area.
  ASSERT_TRUE(Lock(1, {}).ok());
  ASSERT_TRUE(Decide(1).ok());
  // About 4 MiB of records through a 1 MiB area: each later transaction
  // is truncated with the next LOCK, as a coordinator does.
  constexpr uint64_t kTxs = 1000;
  for (uint64_t tx = 2; tx <= kTxs; tx++) {
    std::vector<uint64_t> truncate;
    if (tx > 2) truncate.push_back(tx - 1);
    Status s = Lock(tx, truncate);
    ASSERT_TRUE(s.ok()) << "transaction " << tx << ": " << s.ToString();
    ASSERT_TRUE(Decide(tx).ok()) << tx;
  }
  char last[kWriteSize];
  std::memcpy(last, heap_.base() + kWriteOffset, kWriteSize);
  EXPECT_EQ(last[0], static_cast<char>('a' + kTxs % 26));
  uint64_t outcome = 0;
  ASSERT_TRUE(Resolve(1, &outcome).ok());
  EXPECT_EQ(outcome, dsm::kTxOutcomeCommit);
  // A restart reads the log back: transaction 1 is still decided commit;
  // nothing is in doubt, no record twice.
  Start();
  dsm::TxLogCheck check = CheckLog();
  EXPECT_TRUE(check.violations.empty()) << check.violations.front();
  EXPECT_EQ(check.in_doubt, 0u);
  EXPECT_EQ(check.live_records, 2u);  // transactions 1 and kTxs
  ASSERT_TRUE(Resolve(1, &outcome).ok());
  EXPECT_EQ(outcome, dsm::kTxOutcomeCommit);
  // The coordinator truncates it at last: its area empties.
  ASSERT_TRUE(Lock(kTxs + 1, {1, kTxs}).ok());
  ASSERT_TRUE(Decide(kTxs + 1).ok());
  EXPECT_EQ(CheckLog().live_records, 1u);
}

// When every record of an area is live (transactions in flight), a LOCK
// is refused with kAborted — run the transaction again — and nothing of it
// stays locked or logged.
TEST_F(TxParticipantTest, AnAreaFullOfLiveRecordsAbortsTheLock) {
  Start();
  Status s;
  uint64_t tx = 1;
  for (; s.ok(); tx++) {
    s = Lock(tx, {});
    if (s.ok()) {
      ASSERT_TRUE(Decide(tx).ok());
    }
  }
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("full"), std::string::npos) << s.ToString();
  const uint64_t refused = tx - 1;
  uint64_t outcome = 0;
  ASSERT_TRUE(Resolve(refused, &outcome).ok());
  EXPECT_EQ(outcome, dsm::kTxOutcomeAbort);  // never logged here
  // Truncating the earlier ones makes room; the transaction runs again.
  std::vector<uint64_t> done;
  for (uint64_t t = 1; t < refused; t++) done.push_back(t);
  ASSERT_TRUE(Lock(refused + 1, done).ok());
  ASSERT_TRUE(Decide(refused + 1).ok());
  EXPECT_EQ(CheckLog().in_doubt, 0u);
}

// Coordinators that die after their decisions, never truncating them
// (killed clients): the holder keeps each decision while a participant
// waits on it, or cannot be asked, then drops it; the dead coordinators'
// areas go to new ones, many more than there are areas. A decision
// recorded without its participants (an older coordinator) stays.
TEST_F(TxParticipantTest, DeadCoordinatorsAreasAreReclaimedOnceNoParticipantWaits) {
  constexpr uint32_t kParticipantSegment = 9;
  Start(/*silent_coordinator_ms=*/50);
  // An older coordinator's decision: no participants listed, kept.
  constexpr uint64_t kOld = 1000;
  ASSERT_TRUE(Lock(1, {}, kOld).ok());
  ASSERT_TRUE(Commit(1, kOld).ok());
  // A participant waits (its record locked), then cannot be asked: kept.
  pending_ = 1;
  ASSERT_TRUE(Lock(1, {}, kCoordinator, std::vector<uint32_t>{kParticipantSegment}).ok());
  ASSERT_TRUE(Decide(1).ok());
  // Two checks each: the first one's outcome is in place at the second.
  WaitAsked(2);
  EXPECT_EQ(asked_segment_.load(), kParticipantSegment);
  pending_ = -1;
  WaitAsked(2);
  uint64_t outcome = 0;
  ASSERT_TRUE(Resolve(1, &outcome).ok());
  EXPECT_EQ(outcome, dsm::kTxOutcomeCommit);
  // Every participant done: dropped.
  pending_ = 0;
  ASSERT_TRUE(WaitDropped(1, kCoordinator));
  // Four times as many coordinators as areas, each dying after its
  // decision (no participant waits on it, one without any): each gets an
  // area once an earlier one's decision is dropped.
  for (uint64_t c = 1; c <= 4 * kAreas; c++) {
    const uint64_t coordinator = kCoordinator + c;
    Status s;
    for (int i = 0; i < 1000; i++) {
      s = Hello(coordinator);
      if (s.code() != StatusCode::kResourceExhausted) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(s.ok()) << "coordinator " << c << ": " << s.ToString();
    std::vector<uint32_t> others;
    if (c % 2 == 0) others.push_back(kParticipantSegment);
    ASSERT_TRUE(Lock(1, {}, coordinator, others).ok()) << c;
    ASSERT_TRUE(Commit(1, coordinator).ok()) << c;
  }
  ASSERT_TRUE(WaitDropped(1, kCoordinator + 4 * kAreas));
  // After a restart (decisions now kept for a minute), the first
  // coordinator comes back, its area long given to another: it works in a
  // fresh one; what it names of its old area is gone (resolved).
  Start(/*silent_coordinator_ms=*/60000);
  EXPECT_EQ(Commit(1, kCoordinator, /*decide=*/false).code(), StatusCode::kNotFound);
  ASSERT_TRUE(Lock(2, {1}, kCoordinator, std::vector<uint32_t>{}).ok());
  ASSERT_TRUE(Decide(2).ok());
  ASSERT_TRUE(Resolve(2, &outcome).ok());
  EXPECT_EQ(outcome, dsm::kTxOutcomeCommit);
  // The older coordinator's decision is still there.
  ASSERT_TRUE(Resolve(1, &outcome, kOld).ok());
  EXPECT_EQ(outcome, dsm::kTxOutcomeCommit);
  dsm::TxLogCheck check = CheckLog();
  EXPECT_TRUE(check.violations.empty()) << check.violations.front();
  EXPECT_EQ(check.in_doubt, 0u);
  EXPECT_EQ(check.live_records, 2u);  // kOld's and the one kCoordinator made last
}

// A LOCK listing participants is refused where no decision is kept.
TEST_F(TxParticipantTest, ParticipantsListedOnlyAtTheHolder) {
  Start();
  std::string req, reply;
  Encoder e(&req);
  e.Header({});
  e.U64(kCoordinator);
  e.U64(1);
  // A primary, not the holder.
  e.U64(kHeapSegment | (dsm::kTxRolePrimary << 32) | dsm::kTxLockListsBackups |
        dsm::kTxLockListsParticipants);
  e.U64(0);
  e.U64(0);
  dsm::TxEntry w;
  w.segment = kHeapSegment;
  w.offset = kWriteOffset;
  w.data = "x";
  dsm::TxEntry named;
  named.kind = dsm::TxEntryKind::kParticipant;
  named.segment = 9;
  dsm::EncodeTxEntries({w, named}, &req);
  Status s = participant_->HandleLock(Bytes(req), &reply);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // Participant entries without the flag.
  EXPECT_EQ(Lock(1, {}, kCoordinator, std::nullopt).code(), StatusCode::kOk);
  std::string bad;
  Encoder b(&bad);
  b.Header({});
  b.U64(kCoordinator);
  b.U64(2);
  b.U64(kHeapSegment | (dsm::kTxRolePrimary << 32) | (1ull << 40) | dsm::kTxLockListsBackups);
  b.U64(0);
  b.U64(0);
  dsm::EncodeTxEntries({w, named}, &bad);
  s = participant_->HandleLock(Bytes(bad), &reply);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace pdpm::server
