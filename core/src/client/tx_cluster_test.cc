// Transactions against a real cluster (a pdpm-monitor and three pdpm-server
// processes on file-backed PM, tcp on loopback), with one copy of every
// segment and with two (primary and backup, fast failure detection): the
// bank invariant under contention from several client processes, with a
// server killed and restarted (with two copies its segments fail over to
// their backups first), with a participant losing power mid-commit, and
// with the coordinator killed at each phase of the commit; and the
// replication windows of a commit: an object-only transaction's holder
// killed after the decision, a backup joining, and one re-attached (four
// servers), while a transaction commits. The offline checker runs on
// every server's PM after every crash.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <thread>

#include "client/cluster_harness.h"
#include "client/cluster_pm_check.h"
#include "client/tx_bank.h"
#include "monitor/placement.h"
#include "server/fsck.h"
#include "server/tx_participant.h"

namespace pdpm::client {
namespace {

constexpr int64_t kInitialBalance = 1000;
constexpr int kAccountsPerServer = 8;
// A resolution waits for the lock timeout (2 s) and a resolver pass; a
// reading transaction may also conflict with the bank for a while. Scaled
// like every deadline of the test environment (cluster_harness.h).
constexpr uint32_t kSettleMs = 15000;
// Deadlines against a hang of the bank workers (scaled): all of a run
// done, and the progress a test waits for. A run takes seconds.
constexpr uint32_t kBankDoneMs = 90000;
constexpr uint32_t kBankProgressMs = 60000;

// `replicas` copies of every segment.
LocalClusterOptions Options(uint32_t replicas) {
  LocalClusterOptions o;
  o.segment_size = 64ull << 20;
  // A table, the heap, the transaction log; with two copies the backups of
  // two other servers' segments and room to fill them again elsewhere.
  o.pm_size = (replicas == 1 ? 3 * 64 + 2 : 6 * 64 + 2) * (1ull << 20);
  o.replicas = replicas;
  if (replicas > 1) {
    // Failover within a few seconds, without declaring live servers of a
    // loaded machine down.
    o.heartbeat_ms = 100;
    o.suspect_ms = 2000;
    o.down_ms = 4000;
  }
  return o;
}

// The parameter: the cluster's replica count.
class TxClusterTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  TxClusterTest() : TxClusterTest(Options(GetParam())) {}
  explicit TxClusterTest(const LocalClusterOptions& options)
      : cluster_(options), servers_(options.servers) {}

  void SetUp() override {
    Status s = cluster_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(OpenClient(&client_).ok());
    // Accounts on every server, one granule each.
    for (uint32_t server = 1; server <= 3; server++) {
      GlobalAddress block;
      s = client_->PAllocate(kAccountsPerServer * dsm::kTxGranule, server, &block);
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (int i = 0; i < kAccountsPerServer; i++) {
        GlobalAddress a = block;
        a.offset += i * dsm::kTxGranule;
        ASSERT_TRUE(client_->Write(a, &kInitialBalance, sizeof(kInitialBalance)).ok());
        accounts_.push_back(a);
      }
    }
    ASSERT_TRUE(SaveAccounts(accounts_, AccountsFile()).ok());
    // The accounts' segments have their backups before any failure; a
    // fill gives a primary a new key, so the client starts afresh.
    if (replicated()) {
      WaitReplicated();
      ASSERT_TRUE(OpenClient(&client_).ok());
    }
  }

  bool replicated() const { return GetParam() > 1; }

  // The monitor's view; empty (no segments) when it cannot be read.
  v1::GetMappingResponse Mapping() {
    v1::GetMappingResponse m;
    if (!cluster_.GetMapping(&m).ok()) m.Clear();
    return m;
  }

  // With two copies: waits (bounded) until every segment has an in-sync
  // backup and no primary on server `gone` (an id; 0: none).
  void WaitReplicated(uint32_t gone = 0) {
    if (!replicated()) return;
    v1::GetMappingResponse m;
    const uint32_t timeout_ms = net::testing::ScaledMs(30000);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      m = Mapping();
      bool done = m.segments_size() > 0;
      for (const auto& seg : m.segments()) {
        int in_sync = 0;
        for (const auto& b : seg.backups()) in_sync += b.state() == v1::REPLICA_STATE_IN_SYNC;
        done &= in_sync == 1 && seg.primary().server_id() != gone;
      }
      if (done) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "not replicated after " << timeout_ms << " ms:\n" << m.DebugString();
  }

  // With two copies: waits (bounded) until no segment's primary is on
  // server `gone` (its backups promoted).
  void WaitFailover(uint32_t gone) {
    const uint32_t timeout_ms = net::testing::ScaledMs(20000);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      bool moved = true;
      v1::GetMappingResponse m = Mapping();
      for (const auto& seg : m.segments()) moved &= seg.primary().server_id() != gone;
      if (moved) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "server " << gone << " still holds primaries after " << timeout_ms << " ms";
  }

  Status OpenClient(std::unique_ptr<Client>* out) {
    return Client::Open(TestClientOptions(cluster_.monitor_address(), cluster_.secret()), out);
  }

  std::string AccountsFile() const { return cluster_.dir() + "/accounts"; }
  std::string ObjectAccountsFile() const { return cluster_.dir() + "/object-accounts"; }

  // The cluster index of server `id` (-1: none).
  int ServerIndex(uint32_t id) const {
    for (int i = 0; i < servers_; i++) {
      if (cluster_.ServerId(i) == id) return i;
    }
    return -1;
  }

  // Two accounts in different segments, h's the lower (its primary holds
  // the decision of a transfer between them) and on neither g's primary
  // nor g's backup; with `apart`, h's backup is not on g's primary either
  // (a commit at h's backups does not reach g's record). p: g's primary
  // (id), pi its cluster index.
  struct TwoSegments {
    GlobalAddress g, h;
    uint32_t p = 0;
    int pi = -1;
  };
  void BackupJoinsDuringACommit(bool at_holder);
  void PickTwoSegments(TwoSegments* out, bool apart = false) {
    v1::GetMappingResponse m = Mapping();
    std::map<uint32_t, const v1::SegmentMapping*> by_segment;
    for (const auto& sm : m.segments()) by_segment[static_cast<uint32_t>(sm.segment())] = &sm;
    auto primary = [&](const GlobalAddress& a) {
      return by_segment.at(a.segment)->primary().server_id();
    };
    auto backup = [&](const GlobalAddress& a) {
      const auto* sm = by_segment.at(a.segment);
      return sm->backups_size() > 0 ? sm->backups(0).server_id() : 0u;
    };
    bool found = false;
    for (const auto& g : accounts_) {
      for (const auto& h : accounts_) {
        if (found || h.segment >= g.segment || primary(h) == primary(g) ||
            primary(h) == backup(g) || (apart && backup(h) == primary(g))) {
          continue;
        }
        out->g = g;
        out->h = h;
        found = true;
      }
    }
    ASSERT_TRUE(found) << m.DebugString();
    out->p = primary(out->g);
    out->pi = ServerIndex(out->p);
    ASSERT_GE(out->pi, 0);
  }

  // The primary of `segment` in the monitor's view (0: none).
  uint32_t PrimaryOf(uint32_t segment) {
    v1::GetMappingResponse m = Mapping();
    for (const auto& sm : m.segments()) {
      if (sm.segment() == segment) return sm.primary().server_id();
    }
    return 0;
  }

  // Whether `segment` has an in-sync backup in the monitor's view.
  bool BackupInSync(uint32_t segment) {
    v1::GetMappingResponse m = Mapping();
    for (const auto& sm : m.segments()) {
      if (sm.segment() != segment) continue;
      for (const auto& b : sm.backups()) {
        if (b.state() == v1::REPLICA_STATE_IN_SYNC) return true;
      }
    }
    return false;
  }

  // The owner of object `id`'s table in the current view (0: none).
  uint32_t ObjectOwner(const ObjectId& id) {
    v1::GetMappingResponse m = Mapping();
    if (m.table_count() == 0) return 0;
    uint32_t table = monitor::TableForObject(id.hi, id.lo, m.table_count());
    for (const auto& t : m.tables()) {
      if (t.table() == table) return t.server_id();
    }
    return 0;
  }
  std::string BankLog(int w) const { return cluster_.dir() + "/bank" + std::to_string(w) + ".log"; }

  // `accounts`: the accounts file ("": AccountsFile()); `flags`: more of
  // pdpm_tx_bank's flags.
  void StartBank(int n, uint32_t txs, std::vector<ChildProcess>* procs,
                 const std::vector<std::string>& env = {}, const std::string& accounts = "",
                 const std::vector<std::string>& flags = {}) {
    *procs = std::vector<ChildProcess>(static_cast<size_t>(n));
    for (int w = 0; w < n; w++) {
      std::vector<std::string> args{PDPM_TX_BANK_BINARY,
                                    "--monitor",
                                    cluster_.monitor_address(),
                                    "--secret-file",
                                    cluster_.secret_file(),
                                    "--accounts",
                                    accounts.empty() ? AccountsFile() : accounts,
                                    "--worker",
                                    std::to_string(w + 10 * runs_),
                                    "--txs",
                                    std::to_string(txs)};
      args.insert(args.end(), flags.begin(), flags.end());
      Status s = (*procs)[w].Start(args, env, BankLog(w + 10 * runs_));
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    runs_++;
  }

  // Waits for every worker; each must exit with `code`. One still running
  // at the deadline fails the test with where it and the servers stand
  // (and is killed with the test's processes).
  void FinishBank(std::vector<ChildProcess>* procs, int code = 0) {
    const uint32_t timeout_ms = net::testing::ScaledMs(kBankDoneMs);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (size_t w = 0; w < procs->size(); w++) {
      const std::string log = BankLog(static_cast<int>(w) + 10 * (runs_ - 1));
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      int ws = 0;
      if (!(*procs)[w].WaitFor(static_cast<uint32_t>(std::max<int64_t>(left.count(), 0)), &ws)) {
        ADD_FAILURE() << "bank worker " << w << " (pid " << (*procs)[w].pid() << ") still running "
                      << timeout_ms << " ms after the test began waiting:\n"
                      << cluster_.HangReport((*procs)[w], log);
        continue;
      }
      EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == code)
          << "bank worker " << w << " status " << ws << ":\n"
          << FileTail(log);
    }
  }

  // Whether the last `n` workers started have all logged their summary.
  bool BankDone(int n) {
    for (int w = 0; w < n; w++) {
      if (FileTail(BankLog(w + 10 * (runs_ - 1))).find("done ") == std::string::npos) return false;
    }
    return true;
  }

  // Conflicts the last `n` workers retried.
  uint64_t BankConflicts(int n) {
    uint64_t total = 0;
    for (int w = 0; w < n; w++) {
      std::string tail = FileTail(BankLog(w + 10 * (runs_ - 1)));
      size_t at = tail.find(" conflicts");
      size_t comma = tail.rfind(", ", at);
      if (at != std::string::npos && comma != std::string::npos) {
        total += std::stoull(tail.substr(comma + 2, at - comma - 2));
      }
    }
    return total;
  }

  // Waits until worker `w` of the last run (in `procs`) has logged
  // progress `n` or its summary; a worker that does not within the
  // deadline fails the test with where it and the servers stand.
  void WaitForProgress(const std::vector<ChildProcess>& procs, int w, uint32_t n) {
    const std::string log = BankLog(w + 10 * (runs_ - 1));
    const uint32_t timeout_ms = net::testing::ScaledMs(kBankProgressMs);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(log);
      std::string line;
      while (std::getline(in, line)) {
        if (line.rfind("progress ", 0) == 0 && std::stoul(line.substr(9)) >= n) return;
        if (line.rfind("done ", 0) == 0) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "bank worker " << w << " did not reach transfer " << n << " in " << timeout_ms
                  << " ms:\n"
                  << cluster_.HangReport(procs[static_cast<size_t>(w)], log);
  }

  // The total is intact, read in one transaction by a fresh client (which
  // also proves no account stays locked).
  void ExpectInvariant() {
    std::unique_ptr<Client> c;
    ASSERT_TRUE(OpenClient(&c).ok());
    int64_t total = 0;
    Status s = SumBalances(c.get(), accounts_, net::testing::ScaledMs(kSettleMs), &total);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(total, kInitialBalance * static_cast<int64_t>(accounts_.size()));
  }

  // Transactions whose coordinator gave up at a dead server (a failed
  // decision: outcome unknown) are resolved by their participants after
  // the lock timeout, as are the records a restarted server found: only
  // then is none in doubt.
  static void WaitOutLockTimeout() {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(server::TxParticipantOptions{}.lock_timeout_ms + 1000));
  }

  // Stops every server cleanly; no violation, and no record in doubt.
  // `exact_heap`: the heap holds just the account blocks, on every copy
  // (every block a transaction allocated was freed or kept as its
  // transaction decided; a server crash may leak one allocated just before
  // it, so crash tests skip this).
  void StopAndCheckAll(bool exact_heap = true) {
    client_.reset();
    std::vector<server::PmCheckReport> reports;
    StopServersAndExpectCleanPm(cluster_, &reports);
    uint64_t heap_blocks = 0;
    for (size_t i = 0; i < reports.size(); i++) {
      for (const auto& seg : reports[i].segments) {
        EXPECT_EQ(seg.tx_log.in_doubt, 0u) << "server " << i << ":\n" << reports[i].ToString();
        if (seg.role.kind == server::SegmentKind::kHeap) {
          heap_blocks += seg.report.allocated_blocks;
        }
      }
    }
    if (exact_heap) {
      EXPECT_EQ(heap_blocks, 3u * GetParam());  // one block of accounts per server
    }
  }

  LocalCluster cluster_;
  const int servers_;
  std::unique_ptr<Client> client_;
  std::vector<GlobalAddress> accounts_;
  int runs_ = 0;
};

TEST_P(TxClusterTest, ConflictAbortAndAllocation) {
  // A conflict is kAborted and leaves nothing.
  std::unique_ptr<Transaction> t1, t2;
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  ASSERT_TRUE(client_->TxBegin(&t2).ok());
  int64_t v1 = 0, v2 = 0;
  ASSERT_TRUE(t1->Read(accounts_[0], &v1, 8).ok());
  ASSERT_TRUE(t2->Read(accounts_[0], &v2, 8).ok());
  v1 += 5;
  v2 += 7;
  ASSERT_TRUE(t1->Write(accounts_[0], &v1, 8).ok());
  ASSERT_TRUE(t2->Write(accounts_[0], &v2, 8).ok());
  ASSERT_TRUE(t1->Write(accounts_[20], &v1, 8).ok());
  Status s = t1->Commit();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(t2->Commit().code(), StatusCode::kAborted);
  int64_t got = 0;
  ASSERT_TRUE(client_->Read(accounts_[0], &got, 8).ok());
  EXPECT_EQ(got, kInitialBalance + 5);
  ASSERT_TRUE(client_->Read(accounts_[20], &got, 8).ok());
  EXPECT_EQ(got, kInitialBalance + 5);
  EXPECT_EQ(t1->Commit().code(), StatusCode::kFailedPrecondition);

  // Reads see the transaction's own writes; Abort leaves nothing.
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  int64_t w = 42;
  ASSERT_TRUE(t1->Write(accounts_[1], &w, 8).ok());
  ASSERT_TRUE(t1->Read(accounts_[1], &got, 8).ok());
  EXPECT_EQ(got, 42);
  t1->Abort();
  ASSERT_TRUE(client_->Read(accounts_[1], &got, 8).ok());
  EXPECT_EQ(got, kInitialBalance);

  // Allocation: kept on commit, freed on abort; PFree applies at commit.
  GlobalAddress kept, dropped;
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  ASSERT_TRUE(t1->PAllocate(64, &kept).ok());
  ASSERT_TRUE(t1->Write(kept, &w, 8).ok());
  ASSERT_TRUE(t1->Commit().ok());
  ASSERT_TRUE(client_->Read(kept, &got, 8).ok());
  EXPECT_EQ(got, 42);
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  ASSERT_TRUE(t1->PAllocate(64, &dropped).ok());
  t1->Abort();
  EXPECT_EQ(client_->PFree(dropped).code(), StatusCode::kFailedPrecondition);  // already free
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  ASSERT_TRUE(t1->PFree(kept).ok());
  ASSERT_TRUE(t1->Commit().ok());
  EXPECT_EQ(client_->PFree(kept).code(), StatusCode::kFailedPrecondition);

  // Bad inputs.
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  EXPECT_EQ(t1->Write(GlobalAddress{}, &w, 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t1->Read(accounts_[0], &w, 0).code(), StatusCode::kInvalidArgument);
  GlobalAddress ro = accounts_[0];
  ro.descriptor = dsm::Descriptor::Make(dsm::kPermRead, 1);
  EXPECT_EQ(t1->Write(ro, &w, 8).code(), StatusCode::kPermissionDenied);
  t1.reset();  // before its client
  t2.reset();
  StopAndCheckAll();
}

// One client runs many transactions on one heap segment, each logging a
// 4 KiB write: far more records than a log area (512 KiB) holds at the
// segment's primary and, with two copies, at its backup, which this client
// never locks as a primary. Every record must be truncated as the client
// goes on: the area never fills (it did at the backup, whose truncations
// rode on primary LOCKs only: `transaction log area N full`).
TEST_P(TxClusterTest, ManyTransactionsOnOneSegmentNeverFillALogArea) {
  constexpr uint64_t kPage = 4096;
  constexpr int kTxs = 400;  // about 1.7 MiB of records per participant
  GlobalAddress page;
  ASSERT_TRUE(client_->PAllocate(kPage, 1, &page).ok());
  std::string data(kPage, 'p');
  int64_t zero = 0;
  ASSERT_TRUE(client_->Write(page, &zero, sizeof(zero)).ok());
  for (int i = 0; i < kTxs; i++) {
    std::unique_ptr<Transaction> t;
    ASSERT_TRUE(client_->TxBegin(&t).ok());
    int64_t count = 0;
    ASSERT_TRUE(t->Read(page, &count, sizeof(count)).ok());
    ASSERT_EQ(count, i) << "transaction " << i;
    count++;
    std::memcpy(data.data(), &count, sizeof(count));
    ASSERT_TRUE(t->Write(page, data.data(), data.size()).ok());
    Status s = t->Commit();
    ASSERT_TRUE(s.ok()) << "transaction " << i << ": " << s.ToString();
  }
  int64_t count = 0;
  ASSERT_TRUE(client_->Read(page, &count, sizeof(count)).ok());
  EXPECT_EQ(count, kTxs);
  ASSERT_TRUE(client_->PFree(page).ok());
  StopAndCheckAll();
}

TEST_P(TxClusterTest, ObjectsInTransactions) {
  ObjectId a{7, 1}, b{7, 2};
  ASSERT_TRUE(client_->PutObj(a, "one").ok());
  std::unique_ptr<Transaction> t1, t2;
  std::string got;
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  ASSERT_TRUE(t1->GetObj(a, &got).ok());
  EXPECT_EQ(got, "one");
  EXPECT_EQ(t1->GetObj(b, &got).code(), StatusCode::kNotFound);
  ASSERT_TRUE(t1->PutObj(b, "two").ok());
  ASSERT_TRUE(t1->DelObj(a).ok());
  EXPECT_EQ(t1->GetObj(a, &got).code(), StatusCode::kNotFound);  // its own delete
  ASSERT_TRUE(t1->GetObj(b, &got).ok());
  EXPECT_EQ(got, "two");
  Status s = t1->Commit();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(client_->GetObj(a, &got).code(), StatusCode::kNotFound);
  ASSERT_TRUE(client_->GetObj(b, &got).ok());
  EXPECT_EQ(got, "two");

  // A conflict on an object, and one on an absent object's creation.
  ObjectId c{7, 3};
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  ASSERT_TRUE(client_->TxBegin(&t2).ok());
  ASSERT_TRUE(t1->GetObj(b, &got).ok());
  ASSERT_TRUE(t2->GetObj(b, &got).ok());
  EXPECT_EQ(t1->GetObj(c, &got).code(), StatusCode::kNotFound);
  EXPECT_EQ(t2->GetObj(c, &got).code(), StatusCode::kNotFound);
  ASSERT_TRUE(t1->PutObj(b, "x").ok());
  ASSERT_TRUE(t1->PutObj(c, "created").ok());
  ASSERT_TRUE(t2->PutObj(c, "y").ok());
  ASSERT_TRUE(t1->Commit().ok());
  EXPECT_EQ(t2->Commit().code(), StatusCode::kAborted);
  ASSERT_TRUE(client_->GetObj(b, &got).ok());
  EXPECT_EQ(got, "x");
  ASSERT_TRUE(client_->GetObj(c, &got).ok());
  EXPECT_EQ(got, "created");

  // Abort leaves nothing; heap and objects commit together.
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  ASSERT_TRUE(t1->PutObj(b, "z").ok());
  t1->Abort();
  ASSERT_TRUE(client_->GetObj(b, &got).ok());
  EXPECT_EQ(got, "x");
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  int64_t v = 0;
  ASSERT_TRUE(t1->Read(accounts_[3], &v, 8).ok());
  v -= 10;
  ASSERT_TRUE(t1->Write(accounts_[3], &v, 8).ok());
  ASSERT_TRUE(t1->PutObj(b, "paid 10").ok());
  ASSERT_TRUE(t1->Commit().ok());
  ASSERT_TRUE(client_->GetObj(b, &got).ok());
  EXPECT_EQ(got, "paid 10");
  ASSERT_TRUE(client_->Read(accounts_[3], &v, 8).ok());
  EXPECT_EQ(v, kInitialBalance - 10);
  ASSERT_TRUE(client_->TxBegin(&t1).ok());
  EXPECT_EQ(t1->PutObj(b, std::string(kMaxTxObject + 1, 'x')).code(), StatusCode::kTooLarge);
  t1.reset();  // before its client
  t2.reset();
  StopAndCheckAll();
}

TEST_P(TxClusterTest, BankInvariantUnderContention) {
  std::vector<ChildProcess> bank;
  StartBank(4, 120, &bank);
  FinishBank(&bank);
  EXPECT_GT(BankConflicts(4), 0u) << "no contention";
  ExpectInvariant();
  StopAndCheckAll();
  // And after a restart from PM alone.
  for (int i = 0; i < 3; i++) ASSERT_TRUE(cluster_.StartServer(i).ok());
  ExpectInvariant();
}

TEST_P(TxClusterTest, BankInvariantWithAServerKilledAndRestarted) {
  std::vector<ChildProcess> bank;
  StartBank(3, 200, &bank);
  WaitForProgress(bank, 0, 40);
  WaitReplicated();  // a segment whose backup is still filling has no copy to fail over to
  uint32_t killed = cluster_.ServerId(1);
  ASSERT_NE(killed, 0u);
  cluster_.KillServer(1);
  ExpectPmChecks(cluster_, 1, /*clean=*/false);
  if (replicated()) {
    // Its segments' backups take over (committed records they hold are
    // applied, undecided ones resolved) while the load goes on; the
    // invariant holds without the killed server.
    WaitFailover(killed);
    WaitForProgress(bank, 0, 80);
    ExpectInvariant();
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  Status s = cluster_.StartServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  FinishBank(&bank);
  ExpectInvariant();
  WaitReplicated();
  WaitOutLockTimeout();
  StopAndCheckAll(/*exact_heap=*/false);
}

TEST_P(TxClusterTest, BankInvariantWithAParticipantLosingPowerMidCommit) {
  // Server 1 keeps only what it persisted and dies once 60 kB more are
  // persisted (a third of what the load makes it persist): somewhere inside
  // a LOCK, a COMMIT or a trim.
  ASSERT_TRUE(cluster_.StopServer(1).ok());
  Status s = cluster_.StartServer(
      1, {"PDPM_PM_SIMULATE_POWER_LOSS=1", "PDPM_PM_CRASH_AFTER_PERSISTED_BYTES=60000"});
  ASSERT_TRUE(s.ok()) << s.ToString();
  WaitReplicated();
  std::vector<ChildProcess> bank;
  StartBank(3, 150, &bank);
  bool crashed = false;
  for (int i = 0; i < 1200 && !crashed && !BankDone(3); i++) {
    int ws = 0;
    crashed = cluster_.server(1).Exited(&ws);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(crashed) << "the injected power loss did not happen during the load";
  cluster_.KillServer(1);
  ExpectPmChecks(cluster_, 1, /*clean=*/false);
  s = cluster_.StartServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  FinishBank(&bank);
  ExpectInvariant();
  WaitReplicated();
  WaitOutLockTimeout();
  StopAndCheckAll(/*exact_heap=*/false);
}

TEST_P(TxClusterTest, CoordinatorKilledAtEachPhase) {
  for (const char* phase :
       {"lock-holder", "lock", "validate", "backup", "decide", "commit-one", "commit"}) {
    SCOPED_TRACE(phase);
    std::vector<ChildProcess> bank;
    StartBank(1, 400, &bank, {std::string("PDPM_TX_CRASH_AT=") + phase + ":3"});
    FinishBank(&bank, 86);
    ExpectInvariant();
  }
  StopAndCheckAll();
}

// More coordinators die than a server has transaction log areas (64), one
// after another, each in its one transfer between the same two accounts
// (so the same holder): most after the commit, before they could truncate
// the holder's decision (it stayed for good, and the 65th client got `no
// free transaction log area`), the others at every other phase of the
// commit (_exit at the phase, as kill -9 then), and some killed (-9)
// mid-run. The holder drops each decision once no participant waits on it;
// every worker got its area (it reached its phase); a new client then
// works; the in-doubt transactions were all resolved (the total is intact,
// no record in doubt, nothing allocated left). Two copies: the holder
// segment's backup keeps the decision too, and drops it the same way.
class TxKilledCoordinatorsTest : public TxClusterTest {};

TEST_P(TxKilledCoordinatorsTest, DeadCoordinatorsLogAreasAreReclaimed) {
  TwoSegments t;
  PickTwoSegments(&t);
  // Pairs of accounts of the two segments, one pair per worker in turn: a
  // worker that died holding locks blocks its pair until the lock timeout
  // (then its records are resolved), so a pair is used again only after.
  std::vector<GlobalAddress> in_h, in_g;
  for (const auto& a : accounts_) {
    if (a.segment == t.h.segment) in_h.push_back(a);
    if (a.segment == t.g.segment) in_g.push_back(a);
  }
  ASSERT_EQ(in_h.size(), in_g.size());
  std::vector<std::string> pairs;
  for (size_t k = 0; k < in_h.size(); k++) {
    pairs.push_back(cluster_.dir() + "/pair" + std::to_string(k));
    ASSERT_TRUE(SaveAccounts({in_h[k], in_g[k]}, pairs.back()).ok());
  }
  std::vector<std::chrono::steady_clock::time_point> pair_free(pairs.size());
  const auto lock_timeout =
      std::chrono::milliseconds(server::TxParticipantOptions{}.lock_timeout_ms + 1000);
  const std::vector<std::string> phases{
      "commit", "lock-holder", "commit", "lock",       "commit", "validate", "commit", "backup",
      "commit", "decide",      "commit", "commit-one", "commit", "kill",     "commit", "kill"};
  constexpr int kCoordinators = 96;  // 72 leave a decision: more than a server's 64 areas
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < kCoordinators; i++) {
    const std::string& phase = phases[static_cast<size_t>(i) % phases.size()];
    SCOPED_TRACE("coordinator " + std::to_string(i) + ", " + phase);
    const size_t pair = static_cast<size_t>(i) % pairs.size();
    const std::string& accounts = pairs[pair];
    std::this_thread::sleep_until(pair_free[pair]);
    pair_free[pair] = std::chrono::steady_clock::now() + lock_timeout;
    std::vector<ChildProcess> bank;
    if (phase == "kill") {
      StartBank(1, 100000, &bank, {}, accounts, {"--no-receipt", "--abort-every", "0"});
      WaitForProgress(bank, 0, 20);
      bank[0].Signal(SIGKILL);
      int ws = bank[0].Wait();
      EXPECT_TRUE(WIFSIGNALED(ws)) << ws << ":\n" << FileTail(BankLog(10 * (runs_ - 1)));
      continue;
    }
    StartBank(1, 1, &bank, {"PDPM_TX_CRASH_AT=" + phase + ":1"}, accounts,
              {"--no-receipt", "--abort-every", "0"});
    FinishBank(&bank, 86);
    if (HasFailure()) return;
  }
  std::printf("%d coordinators killed in %.1f s\n", kCoordinators,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  // A new client works, at the holder and the other server.
  std::unique_ptr<Client> c;
  ASSERT_TRUE(OpenClient(&c).ok());
  std::this_thread::sleep_for(lock_timeout);
  Status s;
  for (int attempt = 0; attempt < 200; attempt++) {
    s = Transfer(c.get(), t.h, t.g, 1, /*abort=*/false, /*receipt=*/false);
    if (s.code() != StatusCode::kAborted) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(s.ok()) << s.ToString();
  c.reset();
  ExpectInvariant();
  WaitOutLockTimeout();
  StopAndCheckAll();
}

// An object-only transaction: its decision holder is the lowest written
// table segment. The coordinator dies right after the decision, and the
// holder's server is killed at once, before the other table's owner
// committed (it resolves after the lock timeout). The holder's decision is
// on its table segment's backup (a BACKUP record marked applied by the
// commit's shipment): with two copies the promoted backup answers commit
// and both puts happen; with one, the restarted holder does.
TEST_P(TxClusterTest, ObjectTransactionSurvivesItsHolderDyingAfterTheDecision) {
  // Two accounts whose tables have different owners; A's table is created
  // last, so its segment number is the lower one: A's owner holds the
  // decision.
  ObjectId a{9, 0}, b{9, 0};
  uint32_t owner_a = 0, owner_b = 0;
  for (uint64_t lo = 1; lo < 1000 && (owner_b == 0 || owner_b == owner_a); lo++) {
    if (owner_a == 0) {
      a.lo = lo;
      owner_a = ObjectOwner(a);
      continue;
    }
    b.lo = lo;
    owner_b = ObjectOwner(b);
  }
  ASSERT_NE(owner_a, 0u);
  ASSERT_NE(owner_b, 0u);
  ASSERT_NE(owner_a, owner_b);
  std::string balance(reinterpret_cast<const char*>(&kInitialBalance), sizeof(kInitialBalance));
  ASSERT_TRUE(client_->PutObj(b, balance).ok());
  ASSERT_TRUE(client_->PutObj(a, balance).ok());
  WaitReplicated();
  ASSERT_EQ(ObjectOwner(a), owner_a);
  {
    std::ofstream out(ObjectAccountsFile(), std::ios::trunc);
    out << a.hi << ' ' << a.lo << '\n' << b.hi << ' ' << b.lo << '\n';
  }
  std::vector<ObjectId> objects{a, b};
  auto expect_total = [&] {
    std::unique_ptr<Client> c;
    ASSERT_TRUE(OpenClient(&c).ok());
    int64_t total = 0;
    Status s = SumObjectBalances(c.get(), objects, net::testing::ScaledMs(kSettleMs), &total);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(total, 2 * kInitialBalance) << "half of a transaction applied";
  };
  // No aborts on purpose: the third transfer is decided.
  std::vector<ChildProcess> bank;
  StartBank(1, 50, &bank, {"PDPM_TX_CRASH_AT=decide:3"}, ObjectAccountsFile(), {"--objects"});
  FinishBank(&bank, 86);
  int killed = ServerIndex(owner_a);
  ASSERT_GE(killed, 0);
  cluster_.KillServer(killed);
  ExpectPmChecks(cluster_, killed, /*clean=*/false);
  if (replicated()) {
    WaitFailover(owner_a);
  } else {
    ASSERT_TRUE(cluster_.StartServer(killed).ok());
  }
  WaitOutLockTimeout();  // B's owner resolves its record with A's table's (new) owner
  expect_total();
  if (replicated()) {
    Status s = cluster_.StartServer(killed);
    ASSERT_TRUE(s.ok()) << s.ToString();
    WaitReplicated();
    expect_total();
  }
  StopAndCheckAll(/*exact_heap=*/false);
}

// Blocks allocated for transactions by a server that is then killed (-9)
// before they commit: one transaction its coordinator abandons, one whose
// commit fails at the dead server; a third, which only allocates, committed
// just before. With two copies the blocks' segment fails over to its
// backup, which logged each allocation with its shipment (a BACKUP-ALLOC
// record): the promotion frees the blocks of the two unfinished ones and
// keeps the committed one's (its commit marked it kept there). With one
// copy the restarted server frees them after the lock timeout. Either way
// no block leaks and the kept one is still allocated.
TEST_P(TxClusterTest, AllocationsFollowTheirTransactionsWhenTheirServerDies) {
  // Every server's transaction log exists first (created on first use, which
  // may outlast a call's timeout on a loaded machine): one account of each
  // read in a transaction, retried.
  for (int tries = 0;; tries++) {
    std::unique_ptr<Transaction> warm;
    ASSERT_TRUE(client_->TxBegin(&warm).ok());
    int64_t v = 0;
    Status st;
    for (size_t i = 0; i < accounts_.size() && st.ok(); i += kAccountsPerServer) {
      st = warm->Read(accounts_[i], &v, sizeof(v));
    }
    if (st.ok()) break;
    ASSERT_LT(tries, 20) << st.ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::unique_ptr<Transaction> kept_tx;
  ASSERT_TRUE(client_->TxBegin(&kept_tx).ok());
  GlobalAddress kept;
  ASSERT_TRUE(kept_tx->PAllocate(64, &kept).ok());
  Status s = kept_tx->Commit();
  ASSERT_TRUE(s.ok()) << s.ToString();
  const uint32_t victim = PrimaryOf(kept.segment);
  const int killed = ServerIndex(victim);
  ASSERT_GE(killed, 0);
  // Transactions with a block on the victim (allocations go round-robin).
  auto allocate_there = [&](std::unique_ptr<Transaction>* tx) {
    for (int i = 0; i < 12; i++) {
      ASSERT_TRUE(client_->TxBegin(tx).ok());
      GlobalAddress a;
      Status st = (*tx)->PAllocate(64, &a);
      ASSERT_TRUE(st.ok()) << st.ToString();
      if (PrimaryOf(a.segment) == victim) return;
      (*tx)->Abort();
    }
    FAIL() << "no allocation on server " << victim;
  };
  std::unique_ptr<Transaction> abandoned, failing;
  ASSERT_NO_FATAL_FAILURE(allocate_there(&abandoned));
  ASSERT_NO_FATAL_FAILURE(allocate_there(&failing));
  cluster_.KillServer(killed);
  ExpectPmChecks(cluster_, killed, /*clean=*/false);
  s = failing->Commit();
  EXPECT_FALSE(s.ok()) << "a commit at a dead server";
  if (replicated()) WaitFailover(victim);
  // Back (with two copies fenced): it resolves its ALLOC records.
  s = cluster_.StartServer(killed);
  ASSERT_TRUE(s.ok()) << s.ToString();
  WaitOutLockTimeout();
  abandoned.reset();  // its abort reaches no one who holds the block
  WaitReplicated();
  kept_tx.reset();  // before their client
  failing.reset();
  ASSERT_TRUE(OpenClient(&client_).ok());
  s = client_->PFree(kept);
  EXPECT_TRUE(s.ok()) << "the committed transaction's block was freed: " << s.ToString();
  StopAndCheckAll();
}

// A backup that turns in sync while a transaction is locked at its
// segment's primary, whose coordinator read the mapping while the backup
// was filled (so it logs no BACKUP record there): the coordinator stops
// after its locks, the fill ends meanwhile (held back until then by
// PDPM_TEST_FILL_GATE), the coordinator goes on, decides and dies, and the
// primary is killed. The transfer must happen whole or not at all.
// `at_holder` says whose backup joins: g's (a participant, killed before it
// committed), or h's (the decision holder, killed after it decided and
// applied: its promoted backup must answer the other participant's
// resolution with the decision it never got a BACKUP record of).
void TxClusterTest::BackupJoinsDuringACommit(bool at_holder) {
  TwoSegments t;
  ASSERT_NO_FATAL_FAILURE(PickTwoSegments(&t));
  const uint32_t segment = at_holder ? t.h.segment : t.g.segment;
  const uint32_t p = PrimaryOf(segment);
  const int pi = ServerIndex(p);
  ASSERT_GE(pi, 0);
  std::string two = cluster_.dir() + "/two-accounts";
  ASSERT_TRUE(SaveAccounts({t.g, t.h}, two).ok());
  auto backup_in_sync = [&] { return BackupInSync(segment); };

  // The segment's primary restarts: its backup is filled again, and joins
  // only once the gate file exists.
  std::string gate = cluster_.dir() + "/fill-gate";
  client_.reset();
  ASSERT_TRUE(cluster_.StopServer(pi).ok());
  Status s = cluster_.StartServer(pi, {"PDPM_TEST_FILL_GATE=" + gate});
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(PrimaryOf(segment), p) << "the primary was declared dead while it restarted";
  for (int i = 0; i < 500 && backup_in_sync(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(backup_in_sync()) << "the backup is not being filled again";
  // The coordinator reads the mapping (the backup syncing), locks, stops.
  std::vector<ChildProcess> bank;
  StartBank(1, 20, &bank, {"PDPM_TX_STOP_AT=lock:1", "PDPM_TX_CRASH_AT=decide:1"}, two,
            {"--no-receipt"});
  for (int i = 0; i < 2000 && !bank[0].Stopped(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(bank[0].Stopped()) << FileTail(BankLog(10 * (runs_ - 1)));
  // The fill ends; the backup joins — or, while the transaction is locked
  // at the primary without a BACKUP record there, waits. The coordinator
  // goes on well within the lock timeout (else its holder aborts it).
  { std::ofstream(gate).put('1'); }
  for (int i = 0; i < 80 && replicated() && !backup_in_sync(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bank[0].Signal(SIGCONT);
  FinishBank(&bank, 86);
  if (at_holder && replicated()) {
    // The holder applied at the decision, so the backup joins now.
    for (int i = 0; i < 1000 && !backup_in_sync(); i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(backup_in_sync()) << "the holder's backup did not join after the decision";
  }
  cluster_.KillServer(pi);
  ExpectPmChecks(cluster_, pi, /*clean=*/false);
  if (at_holder && replicated()) {
    // The joined backup takes over; the other participant resolves with it.
    WaitFailover(p);
    WaitOutLockTimeout();
    ExpectInvariant();
  } else {
    // A backup still filling cannot take over.
    for (int i = 0; i < 400 && replicated() && PrimaryOf(segment) == p; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  s = cluster_.StartServer(pi);
  ASSERT_TRUE(s.ok()) << s.ToString();
  WaitReplicated();
  WaitOutLockTimeout();
  ExpectInvariant();
  StopAndCheckAll(/*exact_heap=*/false);
}

TEST_P(TxClusterTest, BackupJoiningDuringACommitLosesNothing) {
  BackupJoinsDuringACommit(/*at_holder=*/false);
}

TEST_P(TxClusterTest, HolderBackupJoiningDuringACommitKeepsTheDecision) {
  BackupJoinsDuringACommit(/*at_holder=*/true);
}

// Two copies, and every server's promotions fail for a while from its
// first (PDPM_TEST_REFUSE_PROMOTIONS_MS): the view names a promoted backup
// as its segment's primary well before that server has applied the
// committed transactions only its BACKUP records hold.
class TxClusterSlowPromotionTest : public TxClusterTest {
 protected:
  static constexpr uint32_t kRefuseMs = 3000;  // scaled
  static LocalClusterOptions SlowPromotions() {
    LocalClusterOptions o = Options(2);
    o.server_env = {"PDPM_TEST_REFUSE_PROMOTIONS_MS=" +
                    std::to_string(net::testing::ScaledMs(kRefuseMs))};
    return o;
  }
  TxClusterSlowPromotionTest() : TxClusterTest(SlowPromotions()) {}

  std::string ServerLog(uint32_t id) {
    std::ifstream in(cluster_.server_log(ServerIndex(id)));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
};

// A transfer between g and h whose coordinator dies right after the
// decision at h's primary (which applied its part there); g's primary is
// killed before it resolved its record. Until its promotion resolves the
// transfer with h's primary and applies it from its BACKUP record, g's
// promoted backup holds g's value from before it: a transaction that reads g there
// meanwhile must not commit. Every transaction reading g and h must see
// both parts of the transfer or neither. (It saw g without the transfer
// and h with it — money created — when the promoted copy served one-sided
// reads from the view change on: a bank run ended 77 units richer.)
TEST_P(TxClusterSlowPromotionTest, NoReadOfAPromotedCopyBeforeItsPromotionApplied) {
  TwoSegments t;
  ASSERT_NO_FATAL_FAILURE(PickTwoSegments(&t));
  uint32_t b = 0;
  const v1::GetMappingResponse view = Mapping();
  for (const auto& sm : view.segments()) {
    if (sm.segment() == t.g.segment && sm.backups_size() > 0) b = sm.backups(0).server_id();
  }
  ASSERT_NE(b, 0u);
  std::string two = cluster_.dir() + "/two-accounts";
  ASSERT_TRUE(SaveAccounts({t.g, t.h}, two).ok());
  std::vector<ChildProcess> bank;
  StartBank(1, 20, &bank, {"PDPM_TX_CRASH_AT=decide:1"}, two, {"--no-receipt"});
  FinishBank(&bank, 86);
  // Well within the lock timeout: g's primary has not resolved its record.
  cluster_.KillServer(t.pi);
  ExpectPmChecks(cluster_, t.pi, /*clean=*/false);
  WaitFailover(t.p);
  const std::string promoted = "msg=\"promoted to primary\" global=" + std::to_string(t.g.segment);
  EXPECT_EQ(ServerLog(b).find(promoted), std::string::npos)
      << "g's backup was promoted before the first read: the test proves nothing";
  std::unique_ptr<Client> c;
  ASSERT_TRUE(OpenClient(&c).ok());
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(net::testing::ScaledMs(kSettleMs));
  bool read = false;
  while (!read && std::chrono::steady_clock::now() < deadline) {
    std::unique_ptr<Transaction> tx;
    ASSERT_TRUE(c->TxBegin(&tx).ok());
    int64_t vg = 0, vh = 0;
    Status s = tx->Read(t.g, &vg, sizeof(vg));
    if (s.ok()) s = tx->Read(t.h, &vh, sizeof(vh));
    if (s.ok()) s = tx->Commit();
    if (!s.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    read = true;
    EXPECT_EQ(vg + vh, 2 * kInitialBalance)
        << "g " << vg << " and h " << vh << ": half of a transfer seen"
        << (ServerLog(b).find(promoted) == std::string::npos ? ", before g's promotion" : "");
  }
  EXPECT_TRUE(read) << "g and h never read";
  EXPECT_NE(ServerLog(b).find("PDPM_TEST_REFUSE_PROMOTIONS_MS"), std::string::npos)
      << "no promotion was refused: the test proves nothing";
  c.reset();
  ExpectInvariant();
  // Back (fenced): g's primary drops its record of the transfer.
  Status s = cluster_.StartServer(t.pi);
  ASSERT_TRUE(s.ok()) << s.ToString();
  WaitReplicated();
  WaitOutLockTimeout();
  ExpectInvariant();
  StopAndCheckAll(/*exact_heap=*/false);
}

INSTANTIATE_TEST_SUITE_P(Copies, TxClusterSlowPromotionTest, ::testing::Values(2u),
                         [](const ::testing::TestParamInfo<uint32_t>&) {
                           return std::string("Two");
                         });

// With four servers (two copies): a transfer's two segments can have
// primaries and backups on four distinct servers.
class TxClusterFourTest : public TxClusterTest {
 protected:
  static LocalClusterOptions FourServers() {
    LocalClusterOptions o = Options(2);
    o.servers = 4;
    return o;
  }
  TxClusterFourTest() : TxClusterTest(FourServers()) {}
};

// A backup re-attached for a fill while a committed transaction is not yet
// applied at its primary: the coordinator stops once the backups committed
// (g's backup holds the transaction's BACKUP record, committed), the
// holder's server is stopped (so g's primary cannot resolve its record),
// and g's primary is killed and restarted: it fills its backup again,
// which marks that record applied (the fill is to bring the value). The
// backup must not join before the primary applied the transaction: g's
// primary, killed again, must find its segment still its own when it
// returns, and then resolve and commit.
TEST_P(TxClusterFourTest, ReattachedBackupMissesNoCommit) {
  TwoSegments t;
  ASSERT_NO_FATAL_FAILURE(PickTwoSegments(&t, /*apart=*/true));
  std::string two = cluster_.dir() + "/two-accounts";
  ASSERT_TRUE(SaveAccounts({t.g, t.h}, two).ok());
  const int holder = ServerIndex(PrimaryOf(t.h.segment));
  ASSERT_GE(holder, 0);
  std::vector<ChildProcess> bank;
  StartBank(1, 20, &bank, {"PDPM_TX_STOP_AT=commit-backup:1"}, two, {"--no-receipt"});
  for (int i = 0; i < 2000 && !bank[0].Stopped(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(bank[0].Stopped()) << FileTail(BankLog(10 * (runs_ - 1)));
  cluster_.server(holder).Signal(SIGSTOP);
  cluster_.KillServer(t.pi);
  Status s = cluster_.StartServer(t.pi);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // Short of the down timeout: the stopped holder stays a member.
  for (int i = 0; i < 150 && !BackupInSync(t.g.segment); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  cluster_.KillServer(t.pi);
  cluster_.server(holder).Signal(SIGCONT);
  bank[0].Signal(SIGKILL);
  bank[0].Wait();
  ExpectPmChecks(cluster_, t.pi, /*clean=*/false);
  // A backup in sync would take over now; one still filling cannot.
  for (int i = 0; i < 400 && PrimaryOf(t.g.segment) == t.p; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  s = cluster_.StartServer(t.pi);
  ASSERT_TRUE(s.ok()) << s.ToString();
  WaitReplicated();
  WaitOutLockTimeout();
  ExpectInvariant();
  StopAndCheckAll(/*exact_heap=*/false);
}

// Servers with three local segments each: after the setup and a bank run,
// every server's PM is full (its accounts' heap segment, another server's
// backup, and its transaction log, which is server-local: in no mapping).
class TxClusterFullServersTest : public TxClusterTest {
 protected:
  static LocalClusterOptions FullServers() {
    LocalClusterOptions o = Options(2);
    o.pm_size = (3 * 64 + 2) * (1ull << 20);
    return o;
  }
  TxClusterFullServersTest() : TxClusterTest(FullServers()) {}
};

// The e2e failure "segments under-replicated" for good: a failover placed
// the backups of the killed server's segments on the survivors' only
// local segment the view showed free, which held their transaction logs;
// the fills were refused for ever. The view now records the logs: the
// segments stay under-replicated only until the killed server returns.
TEST_P(TxClusterFullServersTest, FailoverNeverPlacesABackupOnATransactionLog) {
  std::vector<ChildProcess> bank;
  StartBank(1, 100, &bank);
  FinishBank(&bank);
  v1::GetMappingResponse m = Mapping();
  std::map<uint32_t, std::set<uint32_t>> logs;
  for (const auto& sv : m.servers()) {
    logs[sv.id()].insert(sv.server_local_segments().begin(), sv.server_local_segments().end());
    EXPECT_EQ(logs[sv.id()].size(), 1u) << "server " << sv.id() << " has no log:\n"
                                        << m.DebugString();
  }
  uint32_t killed = cluster_.ServerId(1);
  ASSERT_NE(killed, 0u);
  cluster_.KillServer(1);
  WaitFailover(killed);
  m = Mapping();
  for (const auto& seg : m.segments()) {
    for (const auto& b : seg.backups()) {
      EXPECT_EQ(logs[b.server_id()].count(b.local_index()), 0u)
          << "segment " << seg.segment() << " has a backup on server " << b.server_id()
          << "'s transaction log:\n"
          << m.DebugString();
    }
  }
  Status s = cluster_.StartServer(1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  WaitReplicated();
  ExpectInvariant();
}

INSTANTIATE_TEST_SUITE_P(Copies, TxClusterFullServersTest, ::testing::Values(2u),
                         [](const ::testing::TestParamInfo<uint32_t>&) {
                           return std::string("Two");
                         });

INSTANTIATE_TEST_SUITE_P(Copies, TxClusterFourTest, ::testing::Values(2u),
                         [](const ::testing::TestParamInfo<uint32_t>&) {
                           return std::string("Two");
                         });

INSTANTIATE_TEST_SUITE_P(Copies, TxKilledCoordinatorsTest, ::testing::Values(2u),
                         [](const ::testing::TestParamInfo<uint32_t>&) {
                           return std::string("Two");
                         });
INSTANTIATE_TEST_SUITE_P(Copies, TxClusterTest, ::testing::Values(1u, 2u),
                         [](const ::testing::TestParamInfo<uint32_t>& info) {
                           return info.param == 1 ? std::string("One") : std::string("Two");
                         });

}  // namespace
}  // namespace pdpm::client
