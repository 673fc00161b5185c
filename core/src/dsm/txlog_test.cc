// The transaction log area (dsm/txlog.h): format, ring wrap-around,
// damage detection, and crashes on the PM layer's power-loss simulation at
// every point of a workload's persistence stream.
#include "dsm/txlog.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "dsm/dsm_test_region.h"
#include "pm/pm_device.h"
#include "pm/test_util.h"

namespace pdpm::dsm {
namespace {

constexpr uint64_t kAreaSize = 16 << 10;

std::string Body(uint64_t tx) {
  std::vector<TxEntry> entries(1 + tx % 3);
  for (size_t i = 0; i < entries.size(); i++) {
    entries[i].segment = static_cast<uint32_t>(1 + i);
    entries[i].offset = (tx * 977 + i * 64) % 100000 + kChunkSize;
    entries[i].data.assign(8 + (tx * 131 + i * 17) % 1500, static_cast<char>('a' + tx % 26));
  }
  std::string body;
  EncodeTxEntries(entries, &body);
  return body;
}

// The workload: step 2i appends the record of tx i; step 2i+1 ends tx i-2
// (applied or aborted) and trims. Three records are live at a time and the
// ring wraps around many times.
constexpr int kTxs = 60;
int Steps() {
  return 2 * kTxs;
}

void RunStep(TxLogArea* area, std::map<uint64_t, TxRecord>* live, int step) {
  uint64_t tx = step / 2 + 1;
  if (step % 2 == 0) {
    TxRecord r;
    ASSERT_TRUE(area->Append(TxRecordKind::kLock, 0, tx, 7, Body(tx), &r).ok()) << step;
    (*live)[tx] = r;
  } else if (tx > 2) {
    uint64_t done = tx - 2;
    area->SetState((*live)[done], done % 2 == 0 ? TxState::kApplied : TxState::kAborted);
    live->erase(done);
    area->Trim([&](uint64_t offset) {
      for (const auto& [t, r] : *live) {
        if (r.offset == offset) return false;
      }
      return true;
    });
  }
}

TEST(TxLogTest, EntriesRoundTripAndRefuseBadInput) {
  std::vector<TxEntry> in(2), out;
  in[0].segment = 3;
  in[0].offset = 4096;
  in[0].data = "hello";
  in[1].kind = TxEntryKind::kFree;
  in[1].segment = 4;
  in[1].offset = 8192;
  std::string body;
  EncodeTxEntries(in, &body);
  ASSERT_TRUE(DecodeTxEntries(body, false, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].data, "hello");
  EXPECT_EQ(out[1].kind, TxEntryKind::kFree);
  EXPECT_EQ(DecodeTxEntries(body.substr(0, 30), false, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeTxEntries(body.substr(0, 30), true, &out).code(), StatusCode::kCorruption);
  body[0] = 9;
  EXPECT_EQ(DecodeTxEntries(body, false, &out).code(), StatusCode::kInvalidArgument);
  // Object entries carry the 16-byte id first.
  std::vector<TxEntry> objects(2);
  objects[0].kind = TxEntryKind::kPutObject;
  objects[0].data = std::string(kTxObjectIdSize, 'i') + "content";
  objects[1].kind = TxEntryKind::kDeleteObject;
  objects[1].data = std::string(kTxObjectIdSize, 'j');
  body.clear();
  EncodeTxEntries(objects, &body);
  ASSERT_TRUE(DecodeTxEntries(body, false, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(IsObjectEntry(out[0]) && IsObjectEntry(out[1]));
  EXPECT_EQ(out[0].data, objects[0].data);
  objects[1].data += "x";  // a delete with content
  body.clear();
  EncodeTxEntries(objects, &body);
  EXPECT_EQ(DecodeTxEntries(body, false, &out).code(), StatusCode::kInvalidArgument);
  // pDKVS entries: table segment, table, key and value (an empty key too).
  std::vector<TxEntry> kv = {MakeKvEntry(TxEntryKind::kKvPut, 0xfffffffeu, 3, "key", "value"),
                             MakeKvEntry(TxEntryKind::kKvPutIfAbsent, 0xffffffffu, 1, "", "v")};
  body.clear();
  EncodeTxEntries(kv, &body);
  ASSERT_TRUE(DecodeTxEntries(body, true, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(IsKvEntry(out[0]) && IsKvEntry(out[1]) && !IsObjectEntry(out[0]));
  EXPECT_EQ(out[0].kind, TxEntryKind::kKvPut);
  EXPECT_EQ(out[1].kind, TxEntryKind::kKvPutIfAbsent);
  EXPECT_EQ(out[0].segment, 0xfffffffeu);
  EXPECT_EQ(out[0].offset, 3u);
  EXPECT_EQ(KvEntryKey(out[0]), "key");
  EXPECT_EQ(KvEntryValue(out[0]), "value");
  EXPECT_EQ(KvEntryKey(out[1]), "");
  EXPECT_EQ(KvEntryValue(out[1]), "v");
  // A key longer than the entry, no key length, no table: refused.
  kv[0].data[0] = 9;
  body.clear();
  EncodeTxEntries(kv, &body);
  EXPECT_EQ(DecodeTxEntries(body, true, &out).code(), StatusCode::kCorruption);
  kv[0].data = "ab";
  body.clear();
  EncodeTxEntries(kv, &body);
  EXPECT_EQ(DecodeTxEntries(body, false, &out).code(), StatusCode::kInvalidArgument);
  kv[0] = MakeKvEntry(TxEntryKind::kKvPut, 1, 0, "k", "v");
  body.clear();
  EncodeTxEntries(kv, &body);
  EXPECT_EQ(DecodeTxEntries(body, false, &out).code(), StatusCode::kInvalidArgument);
  // MULTI/EXEC's entries: a put with its expiry time, a delete.
  kv = {MakeKvEntry(TxEntryKind::kKvPutExpiring, 7, 2, "exp", "val", 1234567),
        MakeKvEntry(TxEntryKind::kKvDelete, 7, 2, "gone", "ignored")};
  body.clear();
  EncodeTxEntries(kv, &body);
  ASSERT_TRUE(DecodeTxEntries(body, true, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(IsKvEntry(out[0]) && IsKvEntry(out[1]));
  EXPECT_EQ(KvEntryKey(out[0]), "exp");
  EXPECT_EQ(KvEntryValue(out[0]), "val");
  EXPECT_EQ(KvEntryExpiry(out[0]), 1234567u);
  EXPECT_EQ(KvEntryKey(out[1]), "gone");
  EXPECT_EQ(KvEntryValue(out[1]), "");
  EXPECT_EQ(KvEntryExpiry(out[1]), 0u);
  // An expiring put without its expiry, a delete carrying a value: refused.
  std::vector<TxEntry> bad = {MakeKvEntry(TxEntryKind::kKvPutExpiring, 7, 2, "k", "v", 0)};
  body.clear();
  EncodeTxEntries(bad, &body);
  EXPECT_EQ(DecodeTxEntries(body, true, &out).code(), StatusCode::kCorruption);
  bad = {MakeKvEntry(TxEntryKind::kKvDelete, 7, 2, "k", "")};
  bad[0].data += "v";
  body.clear();
  EncodeTxEntries(bad, &body);
  EXPECT_EQ(DecodeTxEntries(body, false, &out).code(), StatusCode::kInvalidArgument);
  // A hash's entries: a field set, a field removed, an expiry change.
  kv = {MakeKvHashEntry(TxEntryKind::kKvHashSet, 7, 2, "h", "field", "value"),
        MakeKvHashEntry(TxEntryKind::kKvHashDelete, 7, 2, "h", "gone", "ignored"),
        MakeKvEntry(TxEntryKind::kKvSetExpiry, 7, 2, "h", "ignored", 99),
        MakeKvEntry(TxEntryKind::kKvSetExpiry, 7, 2, "h2", "", 0)};
  body.clear();
  EncodeTxEntries(kv, &body);
  ASSERT_TRUE(DecodeTxEntries(body, true, &out).ok());
  ASSERT_EQ(out.size(), 4u);
  for (const TxEntry& e : out) EXPECT_TRUE(IsKvEntry(e));
  EXPECT_EQ(KvEntryKey(out[0]), "h");
  EXPECT_EQ(KvEntryField(out[0]), "field");
  EXPECT_EQ(KvEntryValue(out[0]), "value");
  EXPECT_EQ(KvEntryField(out[1]), "gone");
  EXPECT_EQ(KvEntryValue(out[1]), "");
  EXPECT_EQ(KvEntryKey(out[2]), "h");
  EXPECT_EQ(KvEntryField(out[2]), "");
  EXPECT_EQ(KvEntryValue(out[2]), "");
  EXPECT_EQ(KvEntryExpiry(out[2]), 99u);
  EXPECT_EQ(KvEntryKey(out[3]), "h2");
  EXPECT_EQ(KvEntryExpiry(out[3]), 0u);
  // A field longer than the entry, a field delete or an expiry change
  // carrying a value: refused.
  for (TxEntry b : {MakeKvHashEntry(TxEntryKind::kKvHashSet, 7, 2, "h", "f", "v"),
                    MakeKvHashEntry(TxEntryKind::kKvHashDelete, 7, 2, "h", "f", ""),
                    MakeKvEntry(TxEntryKind::kKvSetExpiry, 7, 2, "h", "", 5)}) {
    if (b.kind == TxEntryKind::kKvHashSet) {
      b.data[4] = 9;
    } else {
      b.data += "v";
    }
    body.clear();
    EncodeTxEntries({b}, &body);
    EXPECT_EQ(DecodeTxEntries(body, true, &out).code(), StatusCode::kCorruption)
        << static_cast<int>(b.kind);
  }
}

TEST(TxLogTest, RingWrapsAndReopens) {
  TestRegion region(kAreaSize);
  TxLogArea area(region.base(), kAreaSize, 0, region.range().persist);
  std::vector<TxRecord> recs;
  ASSERT_TRUE(area.Open(&recs).ok());
  EXPECT_EQ(area.coordinator(), 0u);
  ASSERT_TRUE(area.Assign(42).ok());
  std::map<uint64_t, TxRecord> live;
  for (int step = 0; step < Steps(); step++) {
    RunStep(&area, &live, step);
    if (step % 7 == 0) {
      // Reopening finds exactly the live records, in order.
      TxLogArea again(region.base(), kAreaSize, 0, region.range().persist);
      ASSERT_TRUE(again.Open(&recs).ok());
      EXPECT_EQ(again.coordinator(), 42u);
      ASSERT_EQ(recs.size(), live.size()) << step;
      auto it = live.begin();
      for (const auto& r : recs) {
        EXPECT_EQ(r.tx, it->first);
        EXPECT_EQ(r.body, Body(r.tx));
        ++it;
      }
    }
  }
  // A record larger than the area is refused; a full ring is exhausted.
  TxRecord r;
  EXPECT_EQ(area.Append(TxRecordKind::kLock, 0, 999, 7, std::string(kAreaSize, 'x'), &r).code(),
            StatusCode::kTooLarge);
  Status s;
  for (uint64_t tx = 1000; s.ok(); tx++)
    s = area.Append(TxRecordKind::kLock, 0, tx, 7, Body(tx), &r);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  TxLogCheck check;
  CheckTxLogRegion(region.base(), kAreaSize, 1, &check);
  EXPECT_TRUE(check.violations.empty());
  EXPECT_EQ(check.assigned_areas, 1u);
  EXPECT_GT(check.in_doubt, 3u);
  // A damaged header is reported and refused.
  region.base()[17] ^= 1;
  TxLogCheck damaged;
  CheckTxLogRegion(region.base(), kAreaSize, 1, &damaged);
  EXPECT_EQ(damaged.violations.size(), 1u);
  EXPECT_EQ(area.Open(&recs).code(), StatusCode::kCorruption);
}

// A record that stays live (its commit pending at a slow or absent party)
// while the records behind it end does not hold the ring: Compact moves it
// forward. A crash between a move's copy and its trim leaves both on PM; a
// reader keeps the copy only. With every record live nothing is moved.
TEST(TxLogTest, ALiveRecordDoesNotHoldTheRing) {
  TestRegion region(kAreaSize);
  TxLogArea area(region.base(), kAreaSize, 0, region.range().persist);
  std::vector<TxRecord> recs;
  ASSERT_TRUE(area.Open(&recs).ok());
  ASSERT_TRUE(area.Assign(42).ok());
  std::map<uint64_t, TxRecord> live;  // by offset
  std::vector<char> snapshot;         // the area as a move's copy left it
  uint64_t moves = 0;
  TxLogArea::Owner owner;
  owner.done = [&](uint64_t offset) { return live.count(offset) == 0; };
  owner.dropped = [&](uint64_t offset) { EXPECT_EQ(live.count(offset), 0u) << offset; };
  owner.movable = [&](uint64_t offset) { return live.count(offset) != 0; };
  owner.moved = [&](uint64_t from, const TxRecord& to) {
    TxRecord r = live.at(from);
    EXPECT_EQ(to.flags, r.flags | kTxRecordMoved);
    EXPECT_EQ(to.state, r.state);
    EXPECT_GT(to.seq, r.seq);
    live.erase(from);
    r.offset = to.offset;
    r.seq = to.seq;
    r.flags = to.flags;
    live[to.offset] = r;
    if (moves++ == 3) snapshot.assign(region.base(), region.base() + kAreaSize);
  };
  auto append = [&](uint64_t tx) {
    std::string body = Body(tx);
    area.Compact(body.size(), owner);
    TxRecord r;
    Status s = area.Append(TxRecordKind::kLock, kTxRecordHolder, tx, 7, body, &r);
    if (s.ok()) live[r.offset] = r;
    return s;
  };
  ASSERT_TRUE(append(1).ok());  // stays live throughout
  uint64_t stuck = live.begin()->first;
  area.SetState(live.at(stuck), TxState::kCommitted);
  live.at(stuck).state = TxState::kCommitted;
  // Each transaction ends when the next one is logged: the ring wraps
  // around many times past the live record.
  uint64_t bytes = 0;
  for (uint64_t tx = 2; bytes < 20 * kAreaSize; tx++) {
    Status s = append(tx);
    ASSERT_TRUE(s.ok()) << "tx " << tx << ": " << s.ToString();
    bytes += Body(tx).size();
    for (auto it = live.begin(); it != live.end(); ++it) {
      if (it->second.tx != 1 && it->second.tx != tx) {
        area.SetState(it->second, TxState::kApplied);
        live.erase(it);
        break;
      }
    }
    area.Trim(owner.done);
  }
  EXPECT_GT(moves, 3u);
  // Reopened: the live records once each, the moved one with its state;
  // the others read back are those ended behind the head, not yet trimmed.
  TxLogArea again(region.base(), kAreaSize, 0, region.range().persist);
  ASSERT_TRUE(again.Open(&recs).ok());
  std::map<uint64_t, const TxRecord*> by_tx;
  for (const auto& r : recs) by_tx[r.tx] = &r;
  ASSERT_EQ(by_tx.size(), recs.size());
  for (const auto& [offset, r] : live) EXPECT_EQ(by_tx.count(r.tx), 1u) << r.tx;
  for (const auto& r : recs) {
    bool is_live = false;
    for (const auto& [offset, l] : live) is_live |= l.tx == r.tx;
    if (!is_live) {
      EXPECT_EQ(r.state, TxState::kApplied) << r.tx;
    }
  }
  ASSERT_EQ(by_tx.count(1), 1u);
  EXPECT_EQ(by_tx[1]->state, TxState::kCommitted);
  EXPECT_NE(by_tx[1]->flags & kTxRecordMoved, 0);
  EXPECT_EQ(by_tx[1]->body, Body(1));
  // The crash after a copy, before its trim: the original is still in the
  // chain; the reader and the checker see the record once.
  ASSERT_FALSE(snapshot.empty());
  TestRegion crashed(kAreaSize);
  std::memcpy(crashed.base(), snapshot.data(), kAreaSize);
  TxLogArea reopened(crashed.base(), kAreaSize, 0, crashed.range().persist);
  ASSERT_TRUE(reopened.Open(&recs).ok());
  std::map<uint64_t, int> seen;
  for (const auto& r : recs) seen[r.tx]++;
  for (const auto& [tx, n] : seen) EXPECT_EQ(n, 1) << "tx " << tx;
  EXPECT_EQ(seen.count(1), 1u);
  TxLogCheck check;
  CheckTxLogRegion(crashed.base(), kAreaSize, 1, &check);
  EXPECT_TRUE(check.violations.empty());
  EXPECT_EQ(check.live_records, recs.size());
  // The reopened area goes on: the superseded original is dropped at the
  // first trim, and appends continue.
  TxRecord r;
  ASSERT_TRUE(reopened.Append(TxRecordKind::kLock, 0, 100000, 7, Body(5), &r).ok());
  // From now on every record stays live: once the two live before are
  // moved past the ended ones, Compact has nothing to gain and moves
  // nothing (no churn); the ring fills.
  const uint64_t moved_before = moves;
  Status s;
  for (uint64_t tx = 200000; s.ok(); tx++) s = append(tx);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_LE(moves, moved_before + 2);
}

// A crash at every point: the records acknowledged live are there, intact;
// nothing else is, except the one operation in flight.
TEST(TxLogCrashTest, PowerLossAtEveryPointKeepsTheAcknowledgedRecords) {
  pm::TempDir dir;
  std::string pristine = dir.File("pristine"), image = dir.File("image");
  {
    pm::PmOptions o;
    o.create_size = 2 << 20;
    std::unique_ptr<pm::PmDevice> d;
    ASSERT_TRUE(pm::PmDevice::Open(pristine, o, &d).ok());
    TxLogArea area(d->base(), kAreaSize, 0, d->persist_fn());
    std::vector<TxRecord> recs;
    ASSERT_TRUE(area.Open(&recs).ok());
    ASSERT_TRUE(area.Assign(42).ok());
  }
  // What the workload persists, in bytes as the PM layer counts them.
  TestRegion dry(kAreaSize);
  uint64_t total = 0;
  {
    std::unique_ptr<pm::PmDevice> d;
    ASSERT_TRUE(pm::PmDevice::Open(pristine, {}, &d).ok());
    std::memcpy(dry.base(), d->base(), kAreaSize);
    TxLogArea area(dry.base(), kAreaSize, 0, dry.range().persist);
    std::vector<TxRecord> recs;
    ASSERT_TRUE(area.Open(&recs).ok());
    std::map<uint64_t, TxRecord> live;
    for (int step = 0; step < Steps(); step++) RunStep(&area, &live, step);
    total = dry.persisted_bytes();
  }
  for (uint64_t kill_at = 8; kill_at < total; kill_at += total / 45 + 8) {
    SCOPED_TRACE("crash after " + std::to_string(kill_at) + " of " + std::to_string(total));
    std::filesystem::copy_file(pristine, image, std::filesystem::copy_options::overwrite_existing);
    bool killed = false;
    std::vector<uint32_t> acks =
        pm::CollectReports(pm::ForkChild([&](int ack_fd) {
                             pm::PmOptions o;
                             o.crash_after_persisted_bytes = kill_at;
                             std::unique_ptr<pm::PmDevice> d;
                             if (!pm::PmDevice::Open(image, o, &d).ok()) _exit(91);
                             TxLogArea area(d->base(), kAreaSize, 0, d->persist_fn());
                             std::vector<TxRecord> recs;
                             if (!area.Open(&recs).ok()) _exit(92);
                             std::map<uint64_t, TxRecord> live;
                             for (int step = 0; step < Steps(); step++) {
                               RunStep(&area, &live, step);
                               pm::WriteReport(ack_fd, static_cast<uint32_t>(step));
                             }
                           }),
                           &killed);
    ASSERT_TRUE(killed);
    int done = static_cast<int>(acks.size());  // steps acknowledged; `done` was in flight
    // The model after the acknowledged steps.
    std::map<uint64_t, TxState> expected;  // live tx -> state
    for (int step = 0; step < done; step++) {
      uint64_t tx = step / 2 + 1;
      if (step % 2 == 0) {
        expected[tx] = TxState::kLocked;
      } else if (tx > 2) {
        expected.erase(tx - 2);
      }
    }
    std::unique_ptr<pm::PmDevice> d;
    ASSERT_TRUE(pm::PmDevice::Open(image, {}, &d).ok());
    TxLogCheck check;
    CheckTxLogRegion(d->base(), kAreaSize, 1, &check);
    EXPECT_TRUE(check.violations.empty()) << check.violations.front();
    TxLogArea area(d->base(), kAreaSize, 0, d->persist_fn());
    std::vector<TxRecord> recs;
    ASSERT_TRUE(area.Open(&recs).ok());
    EXPECT_EQ(area.coordinator(), 42u);
    uint64_t in_flight_tx = done / 2 + 1;
    bool in_flight_append = done % 2 == 0;
    std::map<uint64_t, TxState> got;
    for (const auto& r : recs) {
      EXPECT_EQ(r.body, Body(r.tx)) << r.tx;
      got[r.tx] = r.state;
    }
    for (const auto& [tx, state] : expected) {
      bool ending = !in_flight_append && in_flight_tx > 2 && tx == in_flight_tx - 2;
      auto it = got.find(tx);
      if (it == got.end()) {
        EXPECT_TRUE(ending) << "acknowledged record of tx " << tx << " lost";
        continue;
      }
      EXPECT_TRUE(it->second == state || ending) << tx;
    }
    for (const auto& [tx, state] : got) {
      bool known = expected.count(tx) != 0 || (in_flight_append && tx == in_flight_tx) ||
                   (!in_flight_append && in_flight_tx > 2 && tx == in_flight_tx - 2);
      EXPECT_TRUE(known) << "record of tx " << tx << " should be gone";
    }
    // The log goes on after recovery.
    TxRecord r;
    ASSERT_TRUE(area.Append(TxRecordKind::kLock, 0, 5000, 7, Body(5000), &r).ok());
    TxLogArea again(d->base(), kAreaSize, 0, d->persist_fn());
    ASSERT_TRUE(again.Open(&recs).ok());
    ASSERT_FALSE(recs.empty());
    EXPECT_EQ(recs.back().tx, 5000u);
  }
}

}  // namespace
}  // namespace pdpm::dsm
