#include "pdkvs/gateway/tx_kv_store.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "pdkvs/item.h"
#include "pdkvs/vnode_ops.h"

namespace pdpm::pdkvs {

Status TxKvStore::Get(std::string_view key, std::string* value) {
  return VnodeGet(overlay_, key, value);
}

Status TxKvStore::Set(std::string_view key, std::string_view value, const SetOptions& options,
                      SetResult* result) {
  return VnodeSet(overlay_, key, value, options, result);
}

Status TxKvStore::GetDelete(std::string_view key, std::string* value) {
  return VnodeGetDelete(overlay_, key, value);
}

Status TxKvStore::Delete(std::string_view key) {
  return overlay_->Delete(key);
}

Status TxKvStore::Exists(std::string_view key, bool* exists) {
  return overlay_->Exists(key, exists);
}

Status TxKvStore::IncrBy(std::string_view key, int64_t delta, int64_t* result) {
  return VnodeIncrBy(overlay_, key, delta, result);
}

Status TxKvStore::Append(std::string_view key, std::string_view suffix, uint64_t* length) {
  return VnodeAppend(overlay_, key, suffix, kMaxValueSize, length);
}

Status TxKvStore::GetRange(std::string_view key, int64_t start, int64_t end, std::string* value) {
  return VnodeGetRange(overlay_, key, start, end, value);
}

Status TxKvStore::SetRange(std::string_view key, uint64_t offset, std::string_view data,
                           uint64_t* length) {
  return VnodeSetRange(overlay_, key, offset, data, kMaxValueSize, length);
}

Status TxKvStore::MultiGet(const std::vector<std::string_view>& keys,
                           std::vector<std::optional<std::string>>* values) {
  return GetEach(
      keys, [&](std::string_view key, std::string* v) { return VnodeGetString(overlay_, key, v); },
      values);
}

Status TxKvStore::MultiPut(const std::vector<std::pair<std::string_view, std::string_view>>& pairs,
                           bool if_none_exist, bool* applied) {
  *applied = false;
  for (const auto& [key, value] : pairs) PDPM_RETURN_IF_ERROR(CheckItemSize(key, value.size()));
  if (if_none_exist) {
    for (const auto& pair : pairs) {
      bool exists = false;
      PDPM_RETURN_IF_ERROR(overlay_->Exists(pair.first, &exists));
      if (exists) return Status::OK();
    }
  }
  for (const auto& [key, value] : pairs) PDPM_RETURN_IF_ERROR(overlay_->Put(key, value));
  *applied = true;
  return Status::OK();
}

Status TxKvStore::Scan(uint64_t cursor, size_t count, KvScanPage* page) {
  return store_->Scan(cursor, count, page);
}

Status TxKvStore::GetExpiry(std::string_view key, uint64_t* expire_at_ms) {
  return VnodeGetExpiry(overlay_, key, expire_at_ms);
}

Status TxKvStore::SetExpiry(std::string_view key, uint64_t expire_at_ms, ExpiryCondition condition,
                            bool* changed) {
  return VnodeSetExpiry(overlay_, key, expire_at_ms, condition, now_ms_, changed);
}

Status TxKvStore::Type(std::string_view key, KvType* type) {
  return VnodeType(overlay_, key, type);
}

Status TxKvStore::HashOf(std::string_view key, bool create, TxOverlay::Entry** entry,
                         TxOverlay::HashFields** fields) {
  *fields = nullptr;
  TxOverlay::Entry* e = nullptr;
  PDPM_RETURN_IF_ERROR(overlay_->Find(key, &e));
  *entry = e;
  if (e->value && !e->hash) return Status::FailedPrecondition(kWrongTypeMessage);
  if (!e->value) {
    if (!create) return Status::OK();
    // A new hash: the store's fields (if any: the key was removed by the
    // transaction) are not its own.
    e->value.emplace();
    e->hash = true;
    e->expire_at_ms = 0;
    e->fields = std::make_shared<TxOverlay::HashFields>(
        [](std::string_view, KvTxRead*) { return Status::OK(); }, /*fresh=*/true, 0);
  } else if (e->fields == nullptr) {
    uint64_t length = 0;
    PDPM_RETURN_IF_ERROR(Read(store_->HashLength(key, &length)));
    e->fields = std::make_shared<TxOverlay::HashFields>(
        [this, key = std::string(key)](std::string_view field, KvTxRead* out) {
          std::vector<std::optional<std::string>> values;
          PDPM_RETURN_IF_ERROR(Read(store_->HashGet(key, {&field, 1}, &values)));
          out->value = std::move(values[0]);
          return Status::OK();
        },
        /*fresh=*/false, length);
  }
  *fields = e->fields.get();
  return Status::OK();
}

Status TxKvStore::Read(Status s) {
  if (!s.ok() && read_error_.ok()) {
    read_error_ = IsWrongType(s) ? Status::Aborted("conflict: a hash became a string") : s;
  }
  return s;
}

void TxKvStore::Changed(TxOverlay::Entry* entry) {
  if (entry->fields != nullptr && entry->fields->length == 0) return TxOverlay::Remove(entry);
  entry->written = true;
}

Status TxKvStore::HashSet(std::string_view key,
                          std::span<const std::pair<std::string_view, std::string_view>> fields,
                          bool if_absent, uint64_t* added) {
  *added = 0;
  for (const auto& [field, value] : fields)
    PDPM_RETURN_IF_ERROR(CheckItemSize(field, value.size()));
  TxOverlay::Entry* e = nullptr;
  TxOverlay::HashFields* h = nullptr;
  PDPM_RETURN_IF_ERROR(HashOf(key, /*create=*/true, &e, &h));
  Status s;
  bool wrote = false;
  for (const auto& [field, value] : fields) {
    bool exists = false;
    s = h->fields.Exists(field, &exists);
    if (!s.ok()) break;
    if (exists && if_absent) continue;
    s = h->fields.Put(field, value);
    if (!s.ok()) break;
    wrote = true;
    if (!exists) {
      ++h->length;
      ++*added;
    }
  }
  if (wrote || h->length == 0) Changed(e);
  return s;
}

Status TxKvStore::HashGet(std::string_view key, std::span<const std::string_view> fields,
                          std::vector<std::optional<std::string>>* values) {
  values->assign(fields.size(), std::nullopt);
  TxOverlay::Entry* e = nullptr;
  TxOverlay::HashFields* h = nullptr;
  PDPM_RETURN_IF_ERROR(HashOf(key, /*create=*/false, &e, &h));
  if (h == nullptr) return Status::OK();
  for (size_t i = 0; i < fields.size(); ++i) {
    std::string v;
    Status s = h->fields.Get(fields[i], &v);
    if (s.code() == StatusCode::kNotFound) continue;
    PDPM_RETURN_IF_ERROR(s);
    (*values)[i] = std::move(v);
  }
  return Status::OK();
}

Status TxKvStore::HashDelete(std::string_view key, std::span<const std::string_view> fields,
                             uint64_t* removed) {
  *removed = 0;
  TxOverlay::Entry* e = nullptr;
  TxOverlay::HashFields* h = nullptr;
  PDPM_RETURN_IF_ERROR(HashOf(key, /*create=*/false, &e, &h));
  if (h == nullptr) return Status::OK();
  Status s;
  for (std::string_view field : fields) {
    s = h->fields.Delete(field);
    if (s.code() == StatusCode::kNotFound) {
      s = Status::OK();
      continue;
    }
    if (!s.ok()) break;
    --h->length;
    ++*removed;
  }
  if (*removed > 0) Changed(e);
  return s;
}

Status TxKvStore::HashLength(std::string_view key, uint64_t* length) {
  *length = 0;
  TxOverlay::Entry* e = nullptr;
  TxOverlay::HashFields* h = nullptr;
  PDPM_RETURN_IF_ERROR(HashOf(key, /*create=*/false, &e, &h));
  if (h != nullptr) *length = h->length;
  return Status::OK();
}

Status TxKvStore::UpdateField(std::string_view key, std::string_view field,
                              const std::function<Status(TxOverlay* fields)>& update) {
  TxOverlay::Entry* e = nullptr;
  TxOverlay::HashFields* h = nullptr;
  PDPM_RETURN_IF_ERROR(HashOf(key, /*create=*/true, &e, &h));
  bool existed = false;
  Status s = h->fields.Exists(field, &existed);
  if (s.ok()) s = update(&h->fields);
  if (s.ok() && !existed) ++h->length;
  if (s.ok() || h->length == 0) Changed(e);
  return s;
}

Status TxKvStore::HashIncrBy(std::string_view key, std::string_view field, int64_t delta,
                             int64_t* result) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(field, 20));
  return UpdateField(key, field,
                     [&](TxOverlay* fields) { return VnodeIncrBy(fields, field, delta, result); });
}

Status TxKvStore::HashIncrByFloat(std::string_view key, std::string_view field,
                                  std::string_view incr, std::string* result) {
  long double v = 0;
  if (!ParseLongDouble(incr, &v)) return Status::InvalidArgument("value is not a valid float");
  PDPM_RETURN_IF_ERROR(CheckItemSize(field, 0));
  return UpdateField(key, field,
                     [&](TxOverlay* fields) { return VnodeIncrByFloat(fields, field, v, result); });
}

Status TxKvStore::HashScan(std::string_view key, uint64_t cursor, size_t count, KvHashPage* page) {
  page->fields.clear();
  page->next_cursor = 0;
  TxOverlay::Entry* e = nullptr;
  TxOverlay::HashFields* h = nullptr;
  PDPM_RETURN_IF_ERROR(HashOf(key, /*create=*/false, &e, &h));
  if (h == nullptr) return Status::OK();
  const auto& changed = h->fields.entries();
  const bool unchanged = !h->fresh && std::none_of(changed.begin(), changed.end(),
                                                   [](auto& c) { return c.second.written; });
  if (unchanged) return Read(store_->HashScan(key, cursor, count, page));
  // Changed by the transaction: every field as it sees them, in the
  // store's order (by hash position, the cursor's meaning), paged here.
  std::map<std::string, std::string, std::less<>> now;
  if (!h->fresh) {
    uint64_t at = 0;
    do {
      KvHashPage stored;
      PDPM_RETURN_IF_ERROR(Read(store_->HashScan(key, at, 1024, &stored)));
      for (auto& [field, value] : stored.fields) now[std::move(field)] = std::move(value);
      at = stored.next_cursor;
    } while (at != 0);
  }
  for (const auto& [field, c] : changed) {
    if (!c.written) continue;
    if (c.value) {
      now[field] = *c.value;
    } else {
      now.erase(field);
    }
  }
  std::vector<std::tuple<uint64_t, const std::string*, const std::string*>> ordered;
  ordered.reserve(now.size());
  for (const auto& [field, value] : now) ordered.emplace_back(HashKey(field), &field, &value);
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  auto it = std::lower_bound(ordered.begin(), ordered.end(), cursor,
                             [](const auto& f, uint64_t c) { return std::get<0>(f) < c; });
  // A page ends between positions: fields sharing one go together.
  for (; it != ordered.end(); ++it) {
    if (page->fields.size() >= count && std::get<0>(*it) != std::get<0>(*(it - 1))) break;
    page->fields.emplace_back(*std::get<1>(*it), *std::get<2>(*it));
  }
  if (it != ordered.end()) page->next_cursor = std::get<0>(*it);
  return Status::OK();
}

Status TxKvStore::Count(KvCounts* counts) {
  return store_->Count(counts);
}

Status TxKvStore::ReclaimExpired(uint32_t, uint64_t, uint64_t*, uint64_t*) {
  return Status::FailedPrecondition("no active expiry inside a transaction");
}

uint32_t TxKvStore::BackupCount() {
  return store_->BackupCount();
}

Status TxKvStore::Flush() {
  return Status::FailedPrecondition("no flush inside a transaction");
}

Status TxKvStore::TxRead(const std::vector<std::string_view>&, std::vector<KvTxRead>*) {
  return Status::FailedPrecondition("transactions do not nest");
}

Status TxKvStore::TxCommit(const std::vector<KvTxCheck>&, const std::vector<KvTxWrite>&) {
  return Status::FailedPrecondition("transactions do not nest");
}

}  // namespace pdpm::pdkvs
