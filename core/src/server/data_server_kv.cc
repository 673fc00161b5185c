// pDKVS on pDSM: each object-store table is a vnode of the distributed
// key-value store; its CCEH index lives in the table's segment (root slot
// kKvRootSlot) beside the object table, in the same PAllocator (docs/pdkvs.md
// "Distributed store").
//
// Every write runs inside Mutate (the segment's mutation lock, its persists
// shipped to the backups before the reply), counted in the segment's
// kv_writes around it. Reads (Get, Exists, GetRange, GetExpiry, multi-gets,
// batches of those) first try without the lock: they run when no write of
// the vnode is in progress and none completed meanwhile, so they never see a
// value not yet on every copy nor half a multi-key write; else, or when
// they meet an expired item (whose freeing is a write) or a key a multi-put
// locked, they run inside Mutate as writes do. Multi-key requests of one
// vnode are therefore atomic.
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
bool MayCreate(uint16_t method, const KvRequest& r) {
  if (method == kKvHash) return KvHashOpWrites(r.hash_op);
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
bool WritesKeys(uint16_t method, const KvRequest& r) {
  if (method == kKvHash) return KvHashOpWrites(r.hash_op);
  switch (method) {
    case kKvSet:
    case kKvGetDelete:
    case kKvDelete:
    case kKvIncrBy:
    case kKvAppend:
    case kKvSetRange:
    case kKvSetExpiry:
    case kKvSetExpiryIf:
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
    case kKvSetExpiryIf: e.U64(0); return Status::OK();
    case kKvCount:
    case kKvReclaimExpired:
      e.U64(0);
      e.U64(0);
      return Status::OK();
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

// Encodes a multi-get's reply, reading each key with `read` (Get or Peek):
// as many answers as one reply carries; the client asks again for the rest.
Status MultiGet(const KvRequest& r, pdkvs::CcehIndex* index,
                Status (pdkvs::CcehIndex::*read)(std::string_view, std::string*, pdkvs::ItemMeta*),
                std::string* reply) {
  std::string answers;
  Encoder a(&answers);
  uint64_t answered = 0;
  for (std::string_view key : r.keys) {
    std::string v;
    pdkvs::ItemMeta meta;
    Status s = (index->*read)(key, &v, &meta);
    if (s.code() == StatusCode::kNotFound) {
      a.U64(0);
    } else if (s.ok() && meta.flags == pdkvs::kItemFlagHash) {
      a.U64(kKvMultiGetHash);
    } else {
      PDPM_RETURN_IF_ERROR(s);
      if (answered > 0 && answers.size() + v.size() + 64 > kMaxRpcPayload) break;
      a.U64(1);
      a.Str(v);
    }
    ++answered;
  }
  Encoder e(reply);
  e.U64(answered);
  e.Bytes(answers);
  return Status::OK();
}

// Whether `method` only reads: it may run without the mutation lock
// (ReadWithoutMutation).
bool ReadsOnly(uint16_t method) {
  switch (method) {
    case kKvGet:
    case kKvExists:
    case kKvGetRange:
    case kKvGetExpiry:
    case kKvMultiGet:
    case kKvMultiGetVersioned: return true;
    default: return false;
  }
}

bool RequestReadsOnly(uint16_t method, const KvRequest& r) {
  if (method != kKvBatch) return ReadsOnly(method);
  return std::all_of(r.batch.begin(), r.batch.end(),
                     [](const KvBatchEntry& b) { return ReadsOnly(b.method); });
}

// Counts one write of a vnode in its segment's kv_writes for its lifetime:
// in progress (low 32 bits) while it applies and ships, then completed
// (high 32 bits).
class KvWriteScope {
 public:
  explicit KvWriteScope(std::atomic<uint64_t>* writes) : writes_(writes) {
    writes_->fetch_add(1, std::memory_order_seq_cst);
  }
  ~KvWriteScope() { writes_->fetch_add((uint64_t{1} << 32) - 1, std::memory_order_seq_cst); }
  KvWriteScope(const KvWriteScope&) = delete;
  KvWriteScope& operator=(const KvWriteScope&) = delete;

 private:
  std::atomic<uint64_t>* const writes_;
};

constexpr uint64_t kKvWritesInProgress = 0xffffffffu;

// Runs read-only request `r` (ReadsOnly) on vnode `index`, encoding its
// reply, with Peek: an expired item answers kFailedPrecondition
// (pdkvs::kExpiredMessage) instead of being freed.
Status RunKvRead(uint16_t method, const KvRequest& r, pdkvs::CcehIndex* index, std::string* reply) {
  Encoder e(reply);
  switch (method) {
    case kKvGet: {
      pdkvs::ItemMeta meta;
      PDPM_RETURN_IF_ERROR(index->Peek(r.key, reply, &meta));
      return pdkvs::WrongTypeUnlessString(meta);
    }
    case kKvExists: {
      Status s = index->Peek(r.key, nullptr);
      if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
      e.U64(s.ok() ? 1 : 0);
      return Status::OK();
    }
    case kKvGetRange: {
      std::string whole;
      pdkvs::ItemMeta meta;
      Status s = index->Peek(r.key, &whole, &meta);
      if (s.code() == StatusCode::kNotFound) return Status::OK();
      PDPM_RETURN_IF_ERROR(s);
      PDPM_RETURN_IF_ERROR(pdkvs::WrongTypeUnlessString(meta));
      std::string range;
      pdkvs::SliceRange(whole, static_cast<int64_t>(r.arg0), static_cast<int64_t>(r.arg1), &range);
      reply->append(range);
      return Status::OK();
    }
    case kKvGetExpiry: {
      pdkvs::ItemMeta meta;
      PDPM_RETURN_IF_ERROR(index->Peek(r.key, nullptr, &meta));
      e.U64(meta.expire_at_ms);
      return Status::OK();
    }
    case kKvMultiGet:
    case kKvMultiGetVersioned: return MultiGet(r, index, &pdkvs::CcehIndex::Peek, reply);
    default: return Status::Internal("not a read-only pDKVS method");
  }
}

// Runs kKvHash request `r` on the hashes of a vnode, encoding its reply.
// A scan page is made smaller until its reply fits half an RPC.
Status RunKvHash(const KvRequest& r, pdkvs::CcehIndex* index, pdkvs::VnodeHashes* hashes,
                 std::string* reply) {
  Encoder e(reply);
  const std::vector<std::string_view>& f = r.fields;
  switch (r.hash_op) {
    case KvHashOp::kType: {
      pdkvs::KvType type = pdkvs::KvType::kNone;
      PDPM_RETURN_IF_ERROR(pdkvs::VnodeType(index, r.key, &type));
      e.U64(static_cast<uint64_t>(type));
      return Status::OK();
    }
    case KvHashOp::kSet:
    case KvHashOp::kSetIfAbsent: {
      std::vector<std::pair<std::string_view, std::string_view>> pairs;
      for (size_t i = 0; i + 1 < f.size(); i += 2) {
        if (f[i + 1].size() > kKvMaxValueSize) {
          return Status::TooLarge("value of " + std::to_string(f[i + 1].size()) + " bytes");
        }
        pairs.emplace_back(f[i], f[i + 1]);
      }
      uint64_t added = 0;
      PDPM_RETURN_IF_ERROR(hashes->Set(r.key, pairs, r.hash_op == KvHashOp::kSetIfAbsent, &added));
      e.U64(added);
      return Status::OK();
    }
    case KvHashOp::kGet: {
      std::vector<std::optional<std::string>> values;
      PDPM_RETURN_IF_ERROR(hashes->GetFields(r.key, f, &values));
      e.U64(values.size());
      for (const auto& v : values) {
        e.U64(v ? 1 : 0);
        if (v) e.Str(*v);
      }
      if (reply->size() > kMaxRpcPayload) {
        reply->clear();
        return Status::TooLarge("the fields' values do not fit one reply");
      }
      return Status::OK();
    }
    case KvHashOp::kDelete: {
      uint64_t removed = 0;
      PDPM_RETURN_IF_ERROR(hashes->Delete(r.key, f, &removed));
      e.U64(removed);
      return Status::OK();
    }
    case KvHashOp::kLength: {
      uint64_t n = 0;
      PDPM_RETURN_IF_ERROR(hashes->Length(r.key, &n));
      e.U64(n);
      return Status::OK();
    }
    case KvHashOp::kIncrBy: {
      int64_t result = 0;
      PDPM_RETURN_IF_ERROR(hashes->IncrBy(r.key, f[0], static_cast<int64_t>(r.arg1), &result));
      e.U64(static_cast<uint64_t>(result));
      return Status::OK();
    }
    case KvHashOp::kIncrByFloat: {
      long double incr = 0;
      if (!pdkvs::ParseLongDouble(f[1], &incr)) {
        return Status::InvalidArgument("value is not a valid float");
      }
      return hashes->IncrByFloat(r.key, f[0], incr, reply);
    }
    case KvHashOp::kScan: {
      if (r.hash_count == 0) return Status::InvalidArgument("scan count must be positive");
      for (size_t count = std::min(r.hash_count, kKvMaxScanCount);; count = (count + 1) / 2) {
        pdkvs::VnodeHashes::FieldPage page;
        PDPM_RETURN_IF_ERROR(hashes->Scan(r.key, r.arg1, count, &page));
        reply->clear();
        e.U64(page.next_cursor);
        e.U64(page.done ? 1 : 0);
        e.U64(page.fields.size());
        for (const auto& [field, value] : page.fields) {
          e.Str(field);
          e.Str(value);
        }
        if (reply->size() <= kMaxRpcPayload / 2 || count == 1) return Status::OK();
      }
    }
  }
  return Status::Internal("unknown pDKVS hash operation");
}

// Runs request `r` on vnode `index` and its `hashes`, encoding its reply.
Status RunKvOn(uint16_t method, const KvRequest& r, pdkvs::CcehIndex* index,
               pdkvs::VnodeHashes* hashes, std::string* reply) {
  Encoder e(reply);
  switch (method) {
    case kKvGet: return pdkvs::VnodeGet(index, r.key, reply);
    case kKvHash: return RunKvHash(r, index, hashes, reply);
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
    case kKvMultiGetVersioned: return MultiGet(r, index, &pdkvs::CcehIndex::Get, reply);
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
    case kKvSetExpiry:
    case kKvSetExpiryIf: {
      // kKvSetExpiry's arg1 is 0: no condition.
      bool changed = false;
      PDPM_RETURN_IF_ERROR(pdkvs::VnodeSetExpiry(
          index, r.key, r.arg0, static_cast<pdkvs::ExpiryCondition>(r.arg1), NowMs(), &changed));
      e.U64(changed ? 1 : 0);
      return Status::OK();
    }
    case kKvCount:
      e.U64(index->Count());
      e.U64(index->CountExpiring());
      return Status::OK();
    case kKvReclaimExpired: {
      uint64_t next = 0, reclaimed = 0;
      PDPM_RETURN_IF_ERROR(index->ReclaimExpired(r.arg0, &next, &reclaimed));
      e.U64(next);
      e.U64(reclaimed);
      return Status::OK();
    }
    default: return Status::Internal("unknown pDKVS method");
  }
}

// RunKvOn, then the freeing of the field indexes of the hashes it dropped
// (a string set over a hash, a delete, an expiry), in the same mutation.
Status RunKv(uint16_t method, const KvRequest& r, pdkvs::CcehIndex* index,
             pdkvs::VnodeHashes* hashes, std::string* reply) {
  Status s = RunKvOn(method, r, index, hashes, reply);
  Status freed = hashes->FreeDetached();
  return s.ok() ? freed : s;
}

// Whether request `r` of `method` may add a key (a batch: any of its own).
bool RequestMayCreate(uint16_t method, const KvRequest& r) {
  if (method != kKvBatch) return MayCreate(method, r);
  return std::any_of(r.batch.begin(), r.batch.end(),
                     [](const KvBatchEntry& b) { return MayCreate(b.method, b.r); });
}

// The answers of a kKvBatch or kKvVnodeBatches reply: u64 answered, then
// per answer u64 status code, bytes (its reply, or its error message).
class Answers {
 public:
  void Add(const Status& s, std::string_view reply) {
    Encoder a(&answers_);
    a.U64(static_cast<uint64_t>(s.code()));
    a.Str(s.ok() ? reply : s.message());
    ++count_;
  }
  uint64_t count() const { return count_; }
  size_t bytes() const { return answers_.size(); }
  void EncodeTo(std::string* reply) const {
    Encoder e(reply);
    e.U64(count_);
    e.Bytes(answers_);
  }

 private:
  std::string answers_;
  uint64_t count_ = 0;
};

// Encodes a kKvBatch's reply, running its requests in order with `run`
// (status and reply of one request). A read whose reply would pass
// `budget` ends it there, unless it is the first request of a whole reply
// (kMaxRpcPayload): writes' replies are small.
template <typename Run>
void EncodeKvBatch(const KvRequest& r, const Run& run, uint64_t budget, std::string* reply) {
  Answers answers;
  std::string one;
  for (const KvBatchEntry& b : r.batch) {
    one.clear();
    Status s = run(b, &one);
    if ((answers.count() > 0 || budget < kMaxRpcPayload) && !WritesKeys(b.method, b.r) &&
        answers.bytes() + one.size() + 64 > budget) {
      break;
    }
    answers.Add(s, one);
  }
  answers.EncodeTo(reply);
}

// Runs the requests of a kKvBatch in order on vnode `index` (nullptr: the
// vnode holds nothing yet, and no request creates it), encoding one status
// and reply each. A request naming a key a transaction locked is refused
// (kAborted) and the rest go on: requests of one key are refused together,
// so the client runs them again in their order. A read whose value would
// overflow the reply ends it there (reads change nothing the client sees).
void RunKvBatch(TxParticipant* tx, const KvRequest& r, pdkvs::CcehIndex* index,
                pdkvs::VnodeHashes* hashes, uint64_t budget, std::string* reply) {
  EncodeKvBatch(
      r,
      [&](const KvBatchEntry& b, std::string* one) {
        TxParticipant::KvKeyVersion version = tx->KvKey(r.table, b.r.key);
        if (version.locked()) return Status::Aborted(kKvKeyLockedMessage);
        if (index == nullptr) return AnswerEmpty(b.method, b.r, one);
        Status s = RunKv(b.method, b.r, index, hashes, one);
        if (s.ok() && WritesKeys(b.method, b.r)) version.Written();
        return s;
      },
      budget, reply);
}

// Runs read-only request `r` (RequestReadsOnly) on `index`, the
// vnode's published index, without the segment's mutation lock; `writes` is
// the segment's kv_writes. *done false (reply untouched) when the request
// must run under the mutation instead: the vnode is not made yet, a write
// of it was in progress or completed meanwhile (the value read might not
// be on every copy yet, or a multi-key read might see half a write), a key
// is locked by a multi-put, or an expired item is to be freed.
Status ReadWithoutMutation(const std::atomic<uint64_t>& writes, pdkvs::CcehIndex* index,
                           const TxParticipant& tx, uint32_t server, uint16_t method,
                           const KvRequest& r, uint64_t budget, std::string* reply, bool* done) {
  *done = false;
  if (index == nullptr) return Status::OK();
  const uint64_t before = writes.load(std::memory_order_seq_cst);
  if ((before & kKvWritesInProgress) != 0) return Status::OK();
  bool again = false;
  auto run = [&](uint16_t m, const KvRequest& one_r, std::string_view key, std::string* out) {
    if (tx.KvLocked(r.table, key)) {
      again = true;
      return Status::OK();
    }
    Status s = RunKvRead(m, one_r, index, out);
    if (s.code() == StatusCode::kFailedPrecondition && s.message() == pdkvs::kExpiredMessage) {
      again = true;
    }
    return s;
  };
  std::string out;
  Status s;
  if (method == kKvBatch) {
    EncodeKvBatch(
        r,
        [&](const KvBatchEntry& b, std::string* one) { return run(b.method, b.r, b.r.key, one); },
        budget, &out);
  } else {
    for (std::string_view k : r.keys) again = again || tx.KvLocked(r.table, k);
    if (!again) s = run(method, r, r.key, &out);
    if (s.ok() && method == kKvMultiGetVersioned) AppendVersions(tx, server, r, &out);
  }
  // Every read of the index above took its segment's lock after (or
  // released it before) a write's: a write that touched what was read
  // counted itself first, and shows here.
  if (again || writes.load(std::memory_order_seq_cst) != before) return Status::OK();
  *done = true;
  if (s.ok()) reply->append(out);
  return s;
}

}  // namespace

Status DataServer::OpenVnode(Segment* seg) {
  dsm::PAllocator* alloc = seg->alloc.get();
  std::vector<pdkvs::CcehIndex*> indexes;
  if (const uint64_t header = alloc->GetRoot(kKvRootSlot); header != 0) {
    PDPM_RETURN_IF_ERROR(
        pdkvs::CcehIndex::Open(alloc, header, {}, &seg->kv)
            .WithContext("pDKVS vnode of table " + std::to_string(seg->role.table)));
    PDPM_RETURN_IF_ERROR(
        pdkvs::VnodeHashes::Open(alloc, seg->kv.get(), {}, &seg->kv_hashes)
            .WithContext("pDKVS hashes of table " + std::to_string(seg->role.table)));
    seg->kv_published.store(seg->kv.get());
    indexes = seg->kv_hashes->indexes();
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
  if (method == kKvVnodeBatches) return HandleKvVnodeBatches(req, reply);
  Decoder d(req);
  RequestHeader h;
  KvRequest r;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(DecodeKvRequest(method, &d, &r));
  return HandleKvRequest(method, h, std::move(r), reply, kMaxRpcPayload, nullptr);
}

Status DataServer::HandleKvRequest(uint16_t method, const RequestHeader& h, KvRequest r,
                                   std::string* reply, uint64_t reply_budget,
                                   std::vector<DeferredKvBatch>* deferred) {
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
    RunKvBatch(tx_.get(), r, nullptr, nullptr, reply_budget, reply);
    return Status::OK();
  }
  if (s.code() == StatusCode::kNotFound) {
    PDPM_RETURN_IF_ERROR(AnswerEmpty(method, r, reply));
    if (method == kKvMultiGetVersioned) AppendVersions(*tx_, server_id_, r, reply);
    return Status::OK();
  }
  PDPM_RETURN_IF_ERROR(s);
  if (RequestReadsOnly(method, r) && !seg->fenced) {
    bool done = false;
    Status rs = ReadWithoutMutation(seg->kv_writes, seg->kv_published.load(), *tx_, server_id_,
                                    method, r, reply_budget, reply, &done);
    if (done) return rs;
  }
  if (method == kKvBatch) {
    // One step for the whole batch: one shipment to the backups.
    auto run = [this, seg, may_create, r = std::move(r), reply](uint64_t budget) -> Status {
      if (seg->kv == nullptr && may_create) PDPM_RETURN_IF_ERROR(EnsureVnode(seg));
      RunKvBatch(tx_.get(), r, seg->kv.get(), seg->kv_hashes.get(), budget, reply);
      return Status::OK();
    };
    auto writing = std::make_shared<KvWriteScope>(&seg->kv_writes);
    if (deferred != nullptr) {
      deferred->push_back({seg, std::move(run), std::move(writing)});
      return Status::OK();
    }
    return Mutate(seg, [&] { return run(reply_budget); });
  }
  KvWriteScope writing(&seg->kv_writes);
  bool locked = false;
  s = Mutate(seg, [&]() -> Status {
    // A key a transaction locked: its outcome first (checked under the
    // mutation, which the transaction's LOCK check and commit also take).
    // The client asks again; waiting here would hold a serving thread the
    // transaction's commit may need.
    std::vector<TxParticipant::KvKeyVersion> versions;
    versions.reserve(keys.size());
    for (std::string_view k : keys) {
      versions.push_back(tx_->KvKey(r.table, k));
      locked = locked || versions.back().locked();
    }
    if (locked) return Status::OK();
    if (seg->kv == nullptr) {
      if (!may_create) {
        PDPM_RETURN_IF_ERROR(AnswerEmpty(method, r, reply));
        if (method == kKvMultiGetVersioned) AppendVersions(*tx_, server_id_, r, reply);
        return Status::OK();
      }
      PDPM_RETURN_IF_ERROR(EnsureVnode(seg));
    }
    // A flush bumps the version word of every key it removes: a
    // transaction (a WATCH) that read one of them fails.
    Status st =
        method == kKvFlush
            ? pdkvs::VnodeFlush(seg->kv.get(),
                                [&](std::string_view key) { tx_->KvKey(r.table, key).Written(); })
            : RunKv(method, r, seg->kv.get(), seg->kv_hashes.get(), reply);
    if (st.ok() && method == kKvFlush) st = seg->kv_hashes->FreeDetached();
    if (!st.ok()) {
      reply->clear();
      return st;
    }
    if (WritesKeys(method, r)) {
      for (TxParticipant::KvKeyVersion& v : versions) v.Written();
    }
    if (method == kKvMultiGetVersioned) AppendVersions(*tx_, server_id_, r, reply);
    return st;
  });
  if (locked) return Status::Aborted(kKvKeyLockedMessage);
  return s;
}

Status DataServer::HandleKvVnodeBatches(std::span<const uint8_t> req, std::string* reply) {
  // The replies of writes are smaller than their requests: a request of at
  // most half a reply leaves reads the other half.
  if (req.size() > kMaxRpcPayload / 2) {
    return Status::InvalidArgument("pDKVS vnode batches of " + std::to_string(req.size()) +
                                   " bytes: send the batches alone");
  }
  Decoder d(req);
  RequestHeader h;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  uint64_t n = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&n));
  if (n == 0 || n > kKvMaxVnodeBatches) {
    return Status::InvalidArgument("pDKVS vnode batches: " + std::to_string(n));
  }
  std::vector<std::string_view> bodies(n);
  for (std::string_view& body : bodies) PDPM_RETURN_IF_ERROR(d.Str(&body));
  PDPM_RETURN_IF_ERROR(d.Done());
  // Each batch runs as a kKvBatch request of its own (with this request's
  // header); those that mutate their vnode run together at the end, so
  // each backup gets one shipment for all of them. Reads get what is left
  // of half the reply, each batch's framing counted.
  constexpr uint64_t kFraming = 64;
  uint64_t used = kFraming;
  auto budget = [&] { return kMaxRpcPayload / 2 > used ? kMaxRpcPayload / 2 - used : 0; };
  std::vector<std::string> replies(n);
  std::vector<Status> statuses(n);
  std::vector<DeferredKvBatch> deferred;
  std::vector<size_t> deferred_batch;  // the batch of each deferred job
  for (size_t i = 0; i < n; ++i) {
    const size_t before = deferred.size();
    Decoder body(std::span(reinterpret_cast<const uint8_t*>(bodies[i].data()), bodies[i].size()));
    KvRequest r;
    statuses[i] = DecodeKvRequest(kKvBatch, &body, &r);
    if (statuses[i].ok()) {
      statuses[i] = HandleKvRequest(kKvBatch, h, std::move(r), &replies[i], budget(), &deferred);
    }
    if (deferred.size() > before) {
      deferred_batch.push_back(i);
    } else {
      used += replies[i].size() + kFraming;
    }
  }
  for (size_t k = 0; k < deferred.size(); ++k) {
    deferred[k].run = [&, k, inner = std::move(deferred[k].run)](uint64_t) {
      Status s = inner(budget());
      used += replies[deferred_batch[k]].size() + kFraming;
      return s;
    };
  }
  std::vector<Status> results;
  MutateTogether(&deferred, &results);
  for (size_t k = 0; k < deferred.size(); ++k) {
    statuses[deferred_batch[k]] = results[k];
    if (!results[k].ok()) replies[deferred_batch[k]].clear();
  }
  Answers answers;
  for (size_t i = 0; i < n; ++i) answers.Add(statuses[i], replies[i]);
  answers.EncodeTo(reply);
  return Status::OK();
}

Status DataServer::EnsureVnode(Segment* seg) {
  if (seg->kv != nullptr) return Status::OK();
  // The vnode's creation commits when its header reaches the root slot; a
  // crash before leaves blocks that OpenVnode reclaims.
  uint64_t header = 0;
  std::unique_ptr<pdkvs::CcehIndex> index;
  PDPM_RETURN_IF_ERROR(pdkvs::CcehIndex::Create(seg->alloc.get(), {}, &header, &index));
  PDPM_RETURN_IF_ERROR(seg->alloc->SetRoot(kKvRootSlot, header));
  PDPM_RETURN_IF_ERROR(
      pdkvs::VnodeHashes::Open(seg->alloc.get(), index.get(), {}, &seg->kv_hashes));
  seg->kv = std::move(index);
  seg->kv_published.store(seg->kv.get());
  return Status::OK();
}

Status DataServer::TxKv(uint32_t segment, uint32_t table, TxCopy copy, uint64_t epoch, TxTag tag,
                        bool create, const std::vector<std::string_view>& keys,
                        const std::function<Status(pdkvs::CcehIndex*, pdkvs::VnodeHashes*)>& op) {
  Segment* seg = nullptr;
  if (copy == TxCopy::kBackup) {
    // Being promoted: Promote opened its allocator and vnode and holds its
    // replication lock; written directly (the backups left are refilled).
    PDPM_RETURN_IF_ERROR(TxSegment(segment, copy, 0, &seg));
    if (seg->role.kind != SegmentKind::kTable || seg->alloc == nullptr) {
      return Status::FailedPrecondition("segment " + std::to_string(segment) +
                                        " is not a table being promoted");
    }
    KvWriteScope writing(&seg->kv_writes);
    if (create) PDPM_RETURN_IF_ERROR(EnsureVnode(seg));
    PDPM_RETURN_IF_ERROR(op(seg->kv.get(), seg->kv_hashes.get()));
    return seg->kv_hashes != nullptr ? seg->kv_hashes->FreeDetached() : Status::OK();
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
  KvWriteScope writing(&seg->kv_writes);
  return Mutate(
      seg,
      [&]() -> Status {
        if (create) PDPM_RETURN_IF_ERROR(EnsureVnode(seg));
        PDPM_RETURN_IF_ERROR(op(seg->kv.get(), seg->kv_hashes.get()));
        return seg->kv_hashes != nullptr ? seg->kv_hashes->FreeDetached() : Status::OK();
      },
      tag);
}

}  // namespace pdpm::server
