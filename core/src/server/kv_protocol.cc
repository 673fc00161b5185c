#include "server/kv_protocol.h"

#include <algorithm>

#include "pdkvs/gateway/kv_store.h"

namespace pdpm::server {
bool IsKvMethod(uint16_t method) {
  return method >= kKvGet && method <= kKvLast;
}

bool IsKvSingleKey(uint16_t method) {
  switch (method) {
    case kKvMultiGet:
    case kKvMultiGetVersioned:
    case kKvVersions:
    case kKvMultiPut:
    case kKvScan:
    case kKvCount:
    case kKvFlush:
    case kKvReclaimExpired:
    case kKvBatch:
    case kKvVnodeBatches: return false;
    default: return IsKvMethod(method);
  }
}

bool IsKvBatchable(uint16_t method) {
  return IsKvSingleKey(method) && method != kKvGetDelete;
}

bool KvHashOpWrites(KvHashOp op) {
  switch (op) {
    case KvHashOp::kSet:
    case KvHashOp::kSetIfAbsent:
    case KvHashOp::kDelete:
    case KvHashOp::kIncrBy:
    case KvHashOp::kIncrByFloat: return true;
    default: return false;
  }
}

bool IsKvIdempotent(uint16_t method, const KvRequest& r) {
  switch (method) {
    case kKvGet:
    case kKvExists:
    case kKvGetRange:
    case kKvSetRange:
    case kKvMultiGet:
    case kKvMultiGetVersioned:
    case kKvVersions:
    case kKvScan:
    case kKvGetExpiry:
    case kKvCount:
    case kKvFlush:
    case kKvReclaimExpired: return true;
    case kKvSet: return (r.arg0 & (kKvSetConditionMask | kKvSetWantOld)) == 0;
    case kKvMultiPut: return r.arg0 == 0;
    case kKvHash: return !KvHashOpWrites(r.hash_op);
    case kKvBatch:
      return std::all_of(r.batch.begin(), r.batch.end(),
                         [](const KvBatchEntry& b) { return IsKvIdempotent(b.method, b.r); });
    default: return false;
  }
}

namespace {

// The body of `method` after its table.
void EncodeKvFields(uint16_t method, const KvRequest& r, Encoder* e) {
  if (IsKvSingleKey(method)) e->Str(r.key);
  switch (method) {
    case kKvSet:
      e->Str(r.value);
      e->U64(r.arg0);
      e->U64(r.arg1);
      break;
    case kKvAppend: e->Str(r.value); break;
    case kKvIncrBy:
    case kKvSetExpiry:
    case kKvReclaimExpired: e->U64(r.arg0); break;
    case kKvGetRange:
    case kKvScan:
    case kKvSetExpiryIf:
      e->U64(r.arg0);
      e->U64(r.arg1);
      break;
    case kKvSetRange:
      e->U64(r.arg0);
      e->Str(r.value);
      break;
    case kKvMultiGet:
    case kKvMultiGetVersioned:
    case kKvVersions:
      e->U64(r.keys.size());
      for (std::string_view k : r.keys) e->Str(k);
      break;
    case kKvHash:
      e->U64(static_cast<uint64_t>(r.hash_op));
      e->U64(r.arg1);
      e->U64(r.hash_count);
      e->U64(r.fields.size());
      for (std::string_view f : r.fields) e->Str(f);
      break;
    case kKvMultiPut:
      e->U64(r.arg0);
      e->U64(r.pairs.size());
      for (const auto& [k, v] : r.pairs) {
        e->Str(k);
        e->Str(v);
      }
      break;
    case kKvBatch:
      e->U64(r.batch.size());
      for (const KvBatchEntry& b : r.batch) {
        e->U64(b.method);
        EncodeKvFields(b.method, b.r, e);
      }
      break;
    default: break;
  }
}

Status DecodeKvFields(uint16_t method, Decoder* d, KvRequest* r) {
  if (IsKvSingleKey(method)) PDPM_RETURN_IF_ERROR(d->Str(&r->key));
  switch (method) {
    case kKvSet: {
      PDPM_RETURN_IF_ERROR(d->Str(&r->value));
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg0));
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg1));
      const uint64_t condition = r->arg0 & kKvSetConditionMask;
      const uint64_t expiry = (r->arg0 >> kKvSetExpiryShift) & 0x3;
      if (condition == 3 || expiry == 3 || (r->arg0 & ~uint64_t{0x1f}) != 0) {
        return Status::InvalidArgument("pDKVS set flags " + std::to_string(r->arg0));
      }
      break;
    }
    case kKvAppend: PDPM_RETURN_IF_ERROR(d->Str(&r->value)); break;
    case kKvIncrBy:
    case kKvSetExpiry:
    case kKvReclaimExpired: PDPM_RETURN_IF_ERROR(d->U64(&r->arg0)); break;
    case kKvGetRange:
    case kKvScan:
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg0));
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg1));
      break;
    case kKvSetExpiryIf:
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg0));
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg1));
      if (r->arg1 == 0 || r->arg1 > static_cast<uint64_t>(pdkvs::ExpiryCondition::kLast)) {
        return Status::InvalidArgument("pDKVS expiry condition " + std::to_string(r->arg1));
      }
      break;
    case kKvSetRange:
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg0));
      PDPM_RETURN_IF_ERROR(d->Str(&r->value));
      break;
    case kKvMultiGet:
    case kKvMultiGetVersioned:
    case kKvVersions: {
      uint64_t n = 0;
      PDPM_RETURN_IF_ERROR(d->U64(&n));
      for (uint64_t i = 0; i < n; ++i) {
        std::string_view k;
        PDPM_RETURN_IF_ERROR(d->Str(&k));  // fails before n outgrows the message
        r->keys.push_back(k);
      }
      break;
    }
    case kKvHash: {
      uint64_t op = 0, n = 0;
      PDPM_RETURN_IF_ERROR(d->U64(&op));
      if (op > static_cast<uint64_t>(KvHashOp::kLast)) {
        return Status::InvalidArgument("pDKVS hash operation " + std::to_string(op));
      }
      r->hash_op = static_cast<KvHashOp>(op);
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg1));
      PDPM_RETURN_IF_ERROR(d->U64(&r->hash_count));
      PDPM_RETURN_IF_ERROR(d->U64(&n));
      for (uint64_t i = 0; i < n; ++i) {
        std::string_view f;
        PDPM_RETURN_IF_ERROR(d->Str(&f));  // fails before n outgrows the message
        r->fields.push_back(f);
      }
      const size_t want = r->fields.size();
      bool ok = true;
      switch (r->hash_op) {
        case KvHashOp::kType:
        case KvHashOp::kLength:
        case KvHashOp::kScan: ok = want == 0; break;
        case KvHashOp::kSet: ok = want > 0 && want % 2 == 0; break;
        case KvHashOp::kSetIfAbsent:
        case KvHashOp::kIncrByFloat: ok = want == 2; break;
        case KvHashOp::kGet:
        case KvHashOp::kDelete: ok = want > 0; break;
        case KvHashOp::kIncrBy: ok = want == 1; break;
      }
      if (!ok) {
        return Status::InvalidArgument("pDKVS hash operation " + std::to_string(op) + " with " +
                                       std::to_string(want) + " strings");
      }
      break;
    }
    case kKvMultiPut: {
      uint64_t n = 0;
      PDPM_RETURN_IF_ERROR(d->U64(&r->arg0));
      if (r->arg0 > 1) return Status::InvalidArgument("pDKVS multi-put flag");
      PDPM_RETURN_IF_ERROR(d->U64(&n));
      for (uint64_t i = 0; i < n; ++i) {
        std::string_view k, v;
        PDPM_RETURN_IF_ERROR(d->Str(&k));
        PDPM_RETURN_IF_ERROR(d->Str(&v));
        r->pairs.emplace_back(k, v);
      }
      break;
    }
    case kKvBatch: {
      uint64_t n = 0;
      PDPM_RETURN_IF_ERROR(d->U64(&n));
      if (n > kKvMaxBatch) {
        return Status::InvalidArgument("pDKVS batch of " + std::to_string(n) + " requests");
      }
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t m = 0;
        PDPM_RETURN_IF_ERROR(d->U64(&m));
        if (m > 0xffff || !IsKvBatchable(static_cast<uint16_t>(m))) {
          return Status::InvalidArgument("pDKVS batch entry of method " + std::to_string(m));
        }
        KvBatchEntry& b = r->batch.emplace_back();
        b.method = static_cast<uint16_t>(m);
        b.r.table = r->table;
        PDPM_RETURN_IF_ERROR(DecodeKvFields(b.method, d, &b.r));
        if (b.method == kKvSet && (b.r.arg0 & kKvSetWantOld) != 0) {
          return Status::InvalidArgument("pDKVS batch entry: a set that returns the old value");
        }
      }
      break;
    }
    default: break;
  }
  return Status::OK();
}

}  // namespace

void EncodeKvRequest(uint16_t method, const KvRequest& r, Encoder* e) {
  e->U64(r.table);
  EncodeKvFields(method, r, e);
}

Status DecodeKvRequest(uint16_t method, Decoder* d, KvRequest* r) {
  if (!IsKvMethod(method)) return Status::InvalidArgument("not a pDKVS method");
  uint64_t table = 0;
  PDPM_RETURN_IF_ERROR(d->U64(&table));
  if (table == 0 || table > 0xffffff) {
    return Status::InvalidArgument("pDKVS request for table " + std::to_string(table));
  }
  r->table = static_cast<uint32_t>(table);
  PDPM_RETURN_IF_ERROR(DecodeKvFields(method, d, r));
  return d->Done();
}

}  // namespace pdpm::server
