// pDKVS on pDSM: each object-store table is a vnode of the distributed
// key-value store; its CCEH index lives in the table's segment (root slot
// kKvRootSlot) beside the object table, in the same PAllocator (docs/pdkvs.md
// "Distributed store").
//
// Every operation, reads included, runs inside Mutate: a read that finds an
// expired item frees it (a PM write that must reach the backups like any
// other), and the segment's mutation lock also orders the vnode's creation
// with its use. Multi-key requests of one vnode are therefore atomic.
//
// Multi-puts across vnodes are pDSM transactions (docs/tx.md, pDKVS
// entries): a request naming a key a transaction has locked is refused
// (kAborted, kKvKeyLockedMessage; the client asks again) until the
// transaction is resolved, and every write bumps the key's version word,
// which kKvVersions and kKvMultiGetVersioned report (docs/pdkvs.md).
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "monitor/placement.h"
#include "pdkvs/item.h"
#include "pdkvs/vnode_ops.h"
#include "server/data_server.h"
#include "server/kv_protocol.h"

namespace pdpm::server {
namespace {

// Requests that may add a key: they create the table's segment and vnode.
bool MayCreate(uint16_t method) {
  switch (method) {
    case kKvSet:
    case kKvIncrBy:
    case kKvAppend:
    case kKvSetRange:
    case kKvMultiPut: return true;
    default: return false;
  }
}

pdkvs::SetOptions DecodeSetOptions(uint64_t flags, uint64_t expire_at_ms) {
  pdkvs::SetOptions o;
  o.condition = static_cast<pdkvs::SetOptions::Condition>(flags & kKvSetConditionMask);
  o.expiry = static_cast<pdkvs::SetOptions::Expiry>((flags >> kKvSetExpiryShift) & 0x3);
  o.expire_at_ms = expire_at_ms;
  o.want_old = (flags & kKvSetWantOld) != 0;
  return o;
}

// Requests that change keys they name (their version words are bumped).
bool WritesKeys(uint16_t method) {
  switch (method) {
    case kKvSet:
    case kKvGetDelete:
    case kKvDelete:
    case kKvIncrBy:
    case kKvAppend:
    case kKvSetRange:
    case kKvSetExpiry:
    case kKvMultiPut: return true;
    default: return false;
  }
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The answer of a vnode that holds nothing yet.
Status AnswerEmpty(uint16_t method, const KvRequest& r, std::string* reply) {
  Encoder e(reply);
  switch (method) {
    case kKvExists:
    case kKvSetExpiry:
    case kKvCount: e.U64(0); return Status::OK();
    case kKvGetRange:
    case kKvFlush: return Status::OK();
    case kKvMultiGet:
    case kKvMultiGetVersioned:
      e.U64(r.keys.size());
      for (size_t i = 0; i < r.keys.size(); ++i) e.U64(0);
      return Status::OK();
    case kKvScan:
      e.U64(0);
      e.U64(1);
      e.U64(0);
      return Status::OK();
    default: return Status::NotFound("no such key");
  }
}

// Appends to a multi-get's reply (kKvMultiGetVersioned) the version word of
// each answered key, after this server's id (words of two servers are
// never equal for the client: a vnode that moved meanwhile reads again).
void AppendVersions(const TxParticipant& tx, uint32_t server, const KvRequest& r,
                    std::string* reply) {
  uint64_t answered = 0;
  std::memcpy(&answered, reply->data(), sizeof(answered));
  Encoder e(reply);
  e.U64(server);
  for (uint64_t i = 0; i < answered && i < r.keys.size(); ++i) {
    e.U64(tx.KvVersion(r.table, r.keys[i]));
  }
}

// Runs request `r` on vnode `index`, encoding its reply.
Status RunKv(uint16_t method, const KvRequest& r, pdkvs::CcehIndex* index, std::string* reply) {
  Encoder e(reply);
  switch (method) {
    case kKvGet: return index->Get(r.key, reply);
    case kKvSet: {
      if (r.value.size() > kKvMaxValueSize) {
        return Status::TooLarge("value of " + std::to_string(r.value.size()) + " bytes");
      }
      pdkvs::SetResult result;
      PDPM_RETURN_IF_ERROR(
          pdkvs::VnodeSet(index, r.key, r.value, DecodeSetOptions(r.arg0, r.arg1), &result));
      e.U64(result.applied ? 1 : 0);
      e.U64(result.old_value.has_value() ? 1 : 0);
      if (result.old_value) e.Bytes(*result.old_value);
      return Status::OK();
    }
    case kKvGetDelete: return pdkvs::VnodeGetDelete(index, r.key, reply);
    case kKvDelete: return index->Delete(r.key);
    case kKvExists: {
      bool exists = false;
      PDPM_RETURN_IF_ERROR(index->Exists(r.key, &exists));
      e.U64(exists ? 1 : 0);
      return Status::OK();
    }
    case kKvIncrBy: {
      int64_t result = 0;
      PDPM_RETURN_IF_ERROR(pdkvs::VnodeIncrBy(index, r.key, static_cast<int64_t>(r.arg0), &result));
      e.U64(static_cast<uint64_t>(result));
      return Status::OK();
    }
    case kKvAppend: {
      uint64_t length = 0;
      PDPM_RETURN_IF_ERROR(pdkvs::VnodeAppend(index, r.key, r.value, kKvMaxValueSize, &length));
      e.U64(length);
      return Status::OK();
    }
    case kKvGetRange:
      return pdkvs::VnodeGetRange(index, r.key, static_cast<int64_t>(r.arg0),
                                  static_cast<int64_t>(r.arg1), reply);
    case kKvSetRange: {
      uint64_t length = 0;
      PDPM_RETURN_IF_ERROR(
          pdkvs::VnodeSetRange(index, r.key, r.arg0, r.value, kKvMaxValueSize, &length));
      e.U64(length);
      return Status::OK();
    }
    case kKvMultiGet:
    case kKvMultiGetVersioned: {
      // As many answers as one reply carries; the client asks again for the
      // rest.
      std::string answers;
      Encoder a(&answers);
      uint64_t answered = 0;
      for (std::string_view key : r.keys) {
        std::string v;
        Status s = index->Get(key, &v);
        if (s.code() == StatusCode::kNotFound) {
          a.U64(0);
        } else {
          PDPM_RETURN_IF_ERROR(s);
          if (answered > 0 && answers.size() + v.size() + 64 > kMaxRpcPayload) break;
          a.U64(1);
          a.Str(v);
        }
        ++answered;
      }
      e.U64(answered);
      e.Bytes(answers);
      return Status::OK();
    }
    case kKvMultiPut: {
      for (const auto& [key, value] : r.pairs) {
        PDPM_RETURN_IF_ERROR(pdkvs::CheckItemSize(key, value.size()));
        if (value.size() > kKvMaxValueSize) {
          return Status::TooLarge("value of " + std::to_string(value.size()) + " bytes");
        }
      }
      if (r.arg0 != 0) {
        for (const auto& pair : r.pairs) {
          bool exists = false;
          PDPM_RETURN_IF_ERROR(index->Exists(pair.first, &exists));
          if (exists) {
            e.U64(0);
            return Status::OK();
          }
        }
      }
      for (const auto& [key, value] : r.pairs) PDPM_RETURN_IF_ERROR(index->Put(key, value));
      e.U64(1);
      return Status::OK();
    }
    case kKvScan: {
      if (r.arg1 == 0) return Status::InvalidArgument("scan count must be positive");
      pdkvs::ScanPage page;
      PDPM_RETURN_IF_ERROR(index->Scan(r.arg0, std::min(r.arg1, kKvMaxScanCount), &page));
      e.U64(page.next_cursor);
      e.U64(page.done ? 1 : 0);
      e.U64(page.keys.size());
      for (const std::string& k : page.keys) e.Str(k);
      return Status::OK();
    }
    case kKvGetExpiry: {
      uint64_t expire_at_ms = 0;
      PDPM_RETURN_IF_ERROR(pdkvs::VnodeGetExpiry(index, r.key, &expire_at_ms));
      e.U64(expire_at_ms);
      return Status::OK();
    }
    case kKvSetExpiry: {
      bool changed = false;
      PDPM_RETURN_IF_ERROR(pdkvs::VnodeSetExpiry(index, r.key, r.arg0, NowMs(), &changed));
      e.U64(changed ? 1 : 0);
      return Status::OK();
    }
    case kKvCount: e.U64(index->Count()); return Status::OK();
    case kKvFlush: return pdkvs::VnodeFlush(index);
    default: return Status::Internal("unknown pDKVS method");
  }
}

// Whether request `r` of `method` may add a key (a batch: any of its own).
bool RequestMayCreate(uint16_t method, const KvRequest& r) {
  if (method != kKvBatch) return MayCreate(method);
  return std::any_of(r.batch.begin(), r.batch.end(),
                     [](const KvBatchEntry& b) { return MayCreate(b.method); });
}

// Runs the requests of a kKvBatch in order on vnode `index` (nullptr: the
// vnode holds nothing yet, and no request creates it), encoding one status
// and reply each. A request naming a key a transaction locked is refused
// (kAborted) and the rest go on: requests of one key are refused together,
// so the client runs them again in their order. A read whose value would
// overflow the reply ends it there (reads change nothing the client sees).
void RunKvBatch(TxParticipant* tx, const KvRequest& r, pdkvs::CcehIndex* index,
                std::string* reply) {
  std::string answers, one;
  Encoder a(&answers);
  uint64_t answered = 0;
  for (const KvBatchEntry& b : r.batch) {
    one.clear();
    Status s;
    if (tx->KvLocked(r.table, b.r.key)) {
      s = Status::Aborted(kKvKeyLockedMessage);
    } else if (index == nullptr) {
      s = AnswerEmpty(b.method, b.r, &one);
    } else {
      s = RunKv(b.method, b.r, index, &one);
      if (s.ok() && WritesKeys(b.method)) tx->KvWritten(r.table, b.r.key);
    }
    if (answered > 0 && !WritesKeys(b.method) &&
        answers.size() + one.size() + 64 > kMaxRpcPayload) {
      break;
    }
    a.U64(static_cast<uint64_t>(s.code()));
    a.Str(s.ok() ? std::string_view(one) : s.message());
    ++answered;
  }
  Encoder e(reply);
  e.U64(answered);
  e.Bytes(answers);
}

}  // namespace

Status DataServer::OpenVnode(Segment* seg) {
  dsm::PAllocator* alloc = seg->alloc.get();
  std::vector<pdkvs::CcehIndex*> indexes;
  if (const uint64_t header = alloc->GetRoot(kKvRootSlot); header != 0) {
    PDPM_RETURN_IF_ERROR(
        pdkvs::CcehIndex::Open(alloc, header, {}, &seg->kv)
            .WithContext("pDKVS vnode of table " + std::to_string(seg->role.table)));
    indexes.push_back(seg->kv.get());
  }
  // Vnode items and index blocks are owned kKvStore, the object table's
  // kObjectStore: each reclaim frees only its own owner's unreachable blocks.
  uint64_t reclaimed = 0;
  PDPM_RETURN_IF_ERROR(pdkvs::CcehIndex::ReclaimUnreachable(alloc, indexes, &reclaimed));
  if (seg->kv != nullptr || reclaimed > 0) {
    log_.Info("vnode recovered", {{"table", seg->role.table},
                                  {"keys", seg->kv ? seg->kv->Count() : 0},
                                  {"reclaimed_blocks", reclaimed}});
  }
  return Status::OK();
}

Status DataServer::HandleKv(uint16_t method, std::span<const uint8_t> req, std::string* reply) {
  Decoder d(req);
  RequestHeader h;
  KvRequest r;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(DecodeKvRequest(method, &d, &r));
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  {
    // Every key must belong to the table under this server's table map: a
    // client routing with another table count refreshes and routes again.
    std::shared_lock lock(mu_);
    if (table_count_ == 0) return Status::Unavailable("no table map yet");
    auto belongs = [&](std::string_view key) {
      return monitor::TableForKey(pdkvs::HashKey(key), table_count_) == r.table;
    };
    bool ok = !IsKvSingleKey(method) || belongs(r.key);
    for (std::string_view k : r.keys) ok = ok && belongs(k);
    for (const auto& p : r.pairs) ok = ok && belongs(p.first);
    for (const KvBatchEntry& b : r.batch) ok = ok && belongs(b.r.key);
    if (!ok) {
      return Status::StaleEpoch("a key of table " + std::to_string(r.table) +
                                " belongs to another table in epoch " + std::to_string(epoch_));
    }
  }
  std::vector<std::string_view> keys = r.keys;
  if (IsKvSingleKey(method)) keys.push_back(r.key);
  for (const auto& p : r.pairs) keys.push_back(p.first);
  Segment* seg = nullptr;
  const bool may_create = RequestMayCreate(method, r);
  Status s = TableSegment(r.table, h.epoch, may_create, &seg);
  if (method == kKvVersions) {
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
    Encoder e(reply);
    e.U64(server_id_);
    e.U64(keys.size());
    for (std::string_view k : keys) e.U64(tx_->KvVersion(r.table, k));
    return Status::OK();
  }
  if (s.code() == StatusCode::kNotFound && method == kKvBatch) {
    RunKvBatch(tx_.get(), r, nullptr, reply);
    return Status::OK();
  }
  if (s.code() == StatusCode::kNotFound) {
    PDPM_RETURN_IF_ERROR(AnswerEmpty(method, r, reply));
    if (method == kKvMultiGetVersioned) AppendVersions(*tx_, server_id_, r, reply);
    return Status::OK();
  }
  PDPM_RETURN_IF_ERROR(s);
  if (method == kKvBatch) {
    // One step for the whole batch: one shipment to the backups.
    return Mutate(seg, [&]() -> Status {
      if (seg->kv == nullptr && may_create) PDPM_RETURN_IF_ERROR(EnsureVnode(seg));
      RunKvBatch(tx_.get(), r, seg->kv.get(), reply);
      return Status::OK();
    });
  }
  bool locked = false;
  s = Mutate(seg, [&]() -> Status {
    // A key a transaction locked: its outcome first (checked under the
    // mutation, which the transaction's LOCK check and commit also take).
    // The client asks again; waiting here would hold a serving thread the
    // transaction's commit may need.
    for (std::string_view k : keys) locked = locked || tx_->KvLocked(r.table, k);
    if (locked) return Status::OK();
    if (seg->kv == nullptr) {
      if (!may_create) {
        PDPM_RETURN_IF_ERROR(AnswerEmpty(method, r, reply));
        if (method == kKvMultiGetVersioned) AppendVersions(*tx_, server_id_, r, reply);
        return Status::OK();
      }
      PDPM_RETURN_IF_ERROR(EnsureVnode(seg));
    }
    Status st = RunKv(method, r, seg->kv.get(), reply);
    if (!st.ok()) {
      reply->clear();
      return st;
    }
    if (WritesKeys(method)) {
      for (std::string_view k : keys) tx_->KvWritten(r.table, k);
    }
    if (method == kKvMultiGetVersioned) AppendVersions(*tx_, server_id_, r, reply);
    return st;
  });
  if (locked) return Status::Aborted(kKvKeyLockedMessage);
  return s;
}

Status DataServer::EnsureVnode(Segment* seg) {
  if (seg->kv != nullptr) return Status::OK();
  // The vnode's creation commits when its header reaches the root slot; a
  // crash before leaves blocks that OpenVnode reclaims.
  uint64_t header = 0;
  std::unique_ptr<pdkvs::CcehIndex> index;
  PDPM_RETURN_IF_ERROR(pdkvs::CcehIndex::Create(seg->alloc.get(), {}, &header, &index));
  PDPM_RETURN_IF_ERROR(seg->alloc->SetRoot(kKvRootSlot, header));
  seg->kv = std::move(index);
  return Status::OK();
}

Status DataServer::TxKv(uint32_t segment, uint32_t table, TxCopy copy, uint64_t epoch, TxTag tag,
                        bool create, const std::vector<std::string_view>& keys,
                        const std::function<Status(pdkvs::CcehIndex*)>& op) {
  Segment* seg = nullptr;
  if (copy == TxCopy::kBackup) {
    // Being promoted: Promote opened its allocator and vnode and holds its
    // replication lock; written directly (the backups left are refilled).
    PDPM_RETURN_IF_ERROR(TxSegment(segment, copy, 0, &seg));
    if (seg->role.kind != SegmentKind::kTable || seg->alloc == nullptr) {
      return Status::FailedPrecondition("segment " + std::to_string(segment) +
                                        " is not a table being promoted");
    }
    if (create) PDPM_RETURN_IF_ERROR(EnsureVnode(seg));
    return op(seg->kv.get());
  }
  {
    std::shared_lock lock(mu_);
    if (table_count_ == 0) return Status::Unavailable("no table map yet");
    for (std::string_view k : keys) {
      if (monitor::TableForKey(pdkvs::HashKey(k), table_count_) != table) {
        return Status::StaleEpoch("a key of table " + std::to_string(table) +
                                  " belongs to another table in epoch " + std::to_string(epoch_));
      }
    }
    if (epoch == 0) epoch = epoch_;  // applying a logged record
  }
  PDPM_RETURN_IF_ERROR(TableSegment(table, epoch, false, &seg));
  if (seg->role.global != segment) {
    return Status::StaleEpoch("table " + std::to_string(table) + " is in segment " +
                              std::to_string(seg->role.global) + ", not " +
                              std::to_string(segment));
  }
  return Mutate(
      seg,
      [&]() -> Status {
        if (create) PDPM_RETURN_IF_ERROR(EnsureVnode(seg));
        return op(seg->kv.get());
      },
      tag);
}

}  // namespace pdpm::server
