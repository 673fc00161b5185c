// TxParticipant in process (docs/tx.md "Log format"): a holder's record
// that stays live — its transaction's commit pending at a participant that
// is down, so its coordinator cannot truncate it — while the coordinator
// goes on committing must not fill the coordinator's log area (it did:
// `transaction log area N full`); after a restart the holder still answers
// RESOLVE for it (commit), and the log reads back clean.
#include "server/tx_participant.h"

#include <gtest/gtest.h>

#include <cstring>

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
  void Start() {
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
    hooks.call_primary = [](uint32_t, bool, uint16_t, const std::string&, std::string*) {
      return Status::Unavailable("no other server here");
    };
    TxParticipantOptions o;
    o.area_count = 8;  // 1 MiB areas in the 16 MiB log segment
    participant_ = std::make_unique<TxParticipant>(std::move(hooks), transport_.get(),
                                                   Logger("test", 2, LogLevel::kWarn), o);
    ASSERT_TRUE(participant_->Recover().ok());
  }

  static std::span<const uint8_t> Bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  // LOCK of a 4 KiB write to the heap segment, at the holder, carrying
  // the truncations `truncate`.
  Status Lock(uint64_t tx, const std::vector<uint64_t>& truncate) {
    std::string req, reply;
    Encoder e(&req);
    e.Header({});
    e.U64(kCoordinator);
    e.U64(tx);
    e.U64(kHeapSegment | (dsm::kTxRolePrimary << 32) | (1ull << 40) | dsm::kTxLockListsBackups);
    e.U64(uint64_t{truncate.size()} << 32);
    for (uint64_t t : truncate) e.U64(t);
    e.U64(0);  // no backups
    dsm::TxEntry w;
    w.segment = kHeapSegment;
    w.offset = kWriteOffset;
    w.data.assign(kWriteSize, static_cast<char>('a' + tx % 26));
    dsm::EncodeTxEntries({w}, &req);
    return participant_->HandleLock(Bytes(req), &reply);
  }

  // COMMIT, deciding: the holder's record is applied, and stays until
  // truncated (it answers RESOLVE).
  Status Decide(uint64_t tx) {
    std::string req, reply;
    Encoder e(&req);
    e.Header({});
    e.U64(kCoordinator);
    e.U64(tx);
    e.U64(1);
    return participant_->HandleCommit(Bytes(req), &reply);
  }

  Status Resolve(uint64_t tx, uint64_t* outcome) {
    std::string req, reply;
    Encoder e(&req);
    e.Header({});
    e.U64(kCoordinator);
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

  dsm::TestRegion heap_{8 << 20};
  dsm::TestRegion log_{16 << 20};
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<dsm::PAllocator> log_alloc_;
  std::unique_ptr<TxParticipant> participant_;
};

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

}  // namespace
}  // namespace pdpm::server
