#include "pdkvs/tx_overlay.h"

#include "pdkvs/item.h"

namespace pdpm::pdkvs {

void TxOverlay::Preload(std::string_view key, KvTxRead read) {
  Entry e;
  e.value = std::move(read.value);
  e.expire_at_ms = read.expire_at_ms;
  e.version = read.version;
  e.hash = read.hash && e.value.has_value();
  Settle(&e);
  entries_.emplace(std::string(key), std::move(e));
}

void TxOverlay::Settle(Entry* e) const {
  if (e->value && e->expire_at_ms != 0 && e->expire_at_ms <= now_ms_) {
    e->value.reset();
    e->expire_at_ms = 0;
    e->hash = false;
    e->fields.reset();
  }
}

void TxOverlay::Remove(Entry* e) {
  e->value.reset();
  e->expire_at_ms = 0;
  e->hash = false;
  e->fields.reset();
  e->written = true;
}

Status TxOverlay::Find(std::string_view key, Entry** out) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    KvTxRead read;
    PDPM_RETURN_IF_ERROR(reader_(key, &read));
    Preload(key, std::move(read));
    it = entries_.find(key);
  }
  *out = &it->second;
  return Status::OK();
}

Status TxOverlay::Get(std::string_view key, std::string* value, ItemMeta* meta) {
  Entry* e = nullptr;
  PDPM_RETURN_IF_ERROR(Find(key, &e));
  if (!e->value) return Status::NotFound("no such key");
  if (value != nullptr) value->assign(*e->value);
  if (meta != nullptr) *meta = ItemMeta{e->expire_at_ms, e->hash ? kItemFlagHash : 0};
  return Status::OK();
}

Status TxOverlay::Exists(std::string_view key, bool* exists) {
  Entry* e = nullptr;
  PDPM_RETURN_IF_ERROR(Find(key, &e));
  *exists = e->value.has_value();
  return Status::OK();
}

Status TxOverlay::Put(std::string_view key, std::string_view value, const PutOptions& options) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, value.size()));
  Entry* e = nullptr;
  PDPM_RETURN_IF_ERROR(Find(key, &e));
  if (options.mode == PutMode::kIfAbsent && e->value) return Status::AlreadyExists("key exists");
  if (options.mode == PutMode::kIfPresent && !e->value) return Status::NotFound("no such key");
  const bool keep = options.keep_ttl && e->value;
  e->value.emplace(value);
  e->hash = false;
  e->fields.reset();
  if (!keep) e->expire_at_ms = options.meta.expire_at_ms;
  e->written = true;
  Settle(e);
  return Status::OK();
}

Status TxOverlay::Delete(std::string_view key) {
  Entry* e = nullptr;
  PDPM_RETURN_IF_ERROR(Find(key, &e));
  if (!e->value) return Status::NotFound("no such key");
  Remove(e);
  return Status::OK();
}

Status TxOverlay::Update(std::string_view key, const UpdateFn& fn) {
  Entry* e = nullptr;
  PDPM_RETURN_IF_ERROR(Find(key, &e));
  std::string_view old;
  if (e->value) old = *e->value;
  Mutation m;
  PDPM_RETURN_IF_ERROR(
      fn(e->value ? &old : nullptr, ItemMeta{e->expire_at_ms, e->hash ? kItemFlagHash : 0}, &m));
  switch (m.kind) {
    case Mutation::kKeep: return Status::OK();
    case Mutation::kPut:
      PDPM_RETURN_IF_ERROR(CheckItemSize(key, m.value.size()));
      e->value = std::move(m.value);
      e->expire_at_ms = m.meta.expire_at_ms;
      e->hash = false;
      e->fields.reset();
      break;
    case Mutation::kDelete: Remove(e); break;
    case Mutation::kSetExpiry:
      if (!e->value) return Status::NotFound("no such key");
      e->expire_at_ms = m.meta.expire_at_ms;
      break;
  }
  e->written = true;
  Settle(e);
  return Status::OK();
}

void TxOverlay::Commit(std::vector<KvTxCheck>* checks, std::vector<KvTxWrite>* writes) const {
  for (const auto& [key, e] : entries_) {
    checks->push_back({key, e.version});
    if (!e.written) continue;
    KvTxWrite& w = writes->emplace_back();
    w.key = key;
    w.expire_at_ms = e.expire_at_ms;
    if (e.value && e.hash) {
      // A hash: the fields the transaction changed (none when only its
      // expiry did).
      w.hash = true;
      if (e.fields == nullptr) continue;
      w.fresh = e.fields->fresh;
      for (const auto& [field, f] : e.fields->fields.entries()) {
        if (!f.written) continue;
        w.fields.emplace_back(field,
                              f.value ? std::optional<std::string_view>(*f.value) : std::nullopt);
      }
    } else if (e.value) {
      w.value = *e.value;
    }
  }
}

}  // namespace pdpm::pdkvs
