#include "pdkvs/vnode_ops.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "pdkvs/tx_overlay.h"

namespace pdpm::pdkvs {

Status WrongTypeUnlessString(const ItemMeta& meta) {
  if (meta.flags == kItemFlagHash) return Status::FailedPrecondition(kWrongTypeMessage);
  return Status::OK();
}

bool ParseLongDouble(std::string_view s, long double* out) {
  if (s.empty() || s.size() > 5000 || isspace(static_cast<unsigned char>(s[0]))) return false;
  std::string copy(s);
  char* end = nullptr;
  errno = 0;
  *out = strtold(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || errno == ERANGE || std::isnan(*out) ||
      std::isinf(*out)) {
    return false;
  }
  return true;
}

std::string LongDoubleString(long double v) {
  char buf[5200];
  int n = snprintf(buf, sizeof(buf), "%.17Lf", v);
  std::string out(buf, static_cast<size_t>(std::max(n, 0)));
  if (out.find('.') != std::string::npos) {
    while (!out.empty() && out.back() == '0') out.pop_back();
    if (!out.empty() && out.back() == '.') out.pop_back();
  }
  if (out == "-0") out = "0";
  return out;
}

template <class Index>
Status VnodeGet(Index* index, std::string_view key, std::string* value) {
  ItemMeta meta;
  PDPM_RETURN_IF_ERROR(index->Get(key, value, &meta));
  return WrongTypeUnlessString(meta);
}

template <class Index>
Status VnodeType(Index* index, std::string_view key, KvType* type) {
  ItemMeta meta;
  Status s = index->Get(key, nullptr, &meta);
  *type = KvType::kNone;
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  *type = meta.flags == kItemFlagHash ? KvType::kHash : KvType::kString;
  return Status::OK();
}

template <class Index>
Status VnodeIncrByFloat(Index* index, std::string_view key, long double incr, std::string* result) {
  return index->Update(key,
                       [&](const std::string_view* old, const ItemMeta& old_meta, Mutation* m) {
                         PDPM_RETURN_IF_ERROR(WrongTypeUnlessString(old_meta));
                         long double v = 0;
                         if (old != nullptr && !ParseLongDouble(*old, &v)) {
                           return Status::InvalidArgument("value is not a valid float");
                         }
                         const long double sum = v + incr;
                         if (std::isnan(sum) || std::isinf(sum)) {
                           return Status::OutOfRange("increment would produce NaN or Infinity");
                         }
                         *result = LongDoubleString(sum);
                         m->kind = Mutation::kPut;
                         m->value = *result;
                         m->meta = old_meta;
                         return Status::OK();
                       });
}

template <class Index>
Status VnodeSet(Index* index, std::string_view key, std::string_view value,
                const SetOptions& options, SetResult* result) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, value.size()));
  result->applied = false;
  result->old_value.reset();
  if (!options.want_old) {
    PutOptions put;
    switch (options.condition) {
      case SetOptions::Condition::kAlways: put.mode = PutMode::kAlways; break;
      case SetOptions::Condition::kIfAbsent: put.mode = PutMode::kIfAbsent; break;
      case SetOptions::Condition::kIfPresent: put.mode = PutMode::kIfPresent; break;
    }
    put.keep_ttl = options.expiry == SetOptions::Expiry::kKeep;
    if (options.expiry == SetOptions::Expiry::kSet) put.meta.expire_at_ms = options.expire_at_ms;
    Status s = index->Put(key, value, put);
    if ((s.code() == StatusCode::kAlreadyExists && put.mode == PutMode::kIfAbsent) ||
        (s.code() == StatusCode::kNotFound && put.mode == PutMode::kIfPresent)) {
      return Status::OK();
    }
    result->applied = s.ok();
    return s;
  }
  return index->Update(
      key, [&](const std::string_view* old, const ItemMeta& old_meta, Mutation* m) {
        PDPM_RETURN_IF_ERROR(WrongTypeUnlessString(old_meta));
        if (old != nullptr) result->old_value.emplace(*old);
        if ((options.condition == SetOptions::Condition::kIfAbsent && old != nullptr) ||
            (options.condition == SetOptions::Condition::kIfPresent && old == nullptr)) {
          return Status::OK();
        }
        m->kind = Mutation::kPut;
        m->value.assign(value);
        if (options.expiry == SetOptions::Expiry::kKeep)
          m->meta.expire_at_ms = old_meta.expire_at_ms;
        if (options.expiry == SetOptions::Expiry::kSet) m->meta.expire_at_ms = options.expire_at_ms;
        result->applied = true;
        return Status::OK();
      });
}

template <class Index>
Status VnodeGetDelete(Index* index, std::string_view key, std::string* value) {
  return index->Update(key, [&](const std::string_view* old, const ItemMeta& meta, Mutation* m) {
    if (old == nullptr) return Status::NotFound("no such key");
    PDPM_RETURN_IF_ERROR(WrongTypeUnlessString(meta));
    value->assign(*old);
    m->kind = Mutation::kDelete;
    return Status::OK();
  });
}

template <class Index>
Status VnodeIncrBy(Index* index, std::string_view key, int64_t delta, int64_t* result) {
  return index->Update(
      key, [&](const std::string_view* old, const ItemMeta& old_meta, Mutation* m) {
        PDPM_RETURN_IF_ERROR(WrongTypeUnlessString(old_meta));
        int64_t v = 0;
        if (old != nullptr && !ParseDecimalInt64(*old, &v)) {
          return Status::InvalidArgument("value is not an integer or out of range");
        }
        if ((delta > 0 && v > INT64_MAX - delta) || (delta < 0 && v < INT64_MIN - delta)) {
          return Status::OutOfRange("increment or decrement would overflow");
        }
        *result = v + delta;
        m->kind = Mutation::kPut;
        m->value = std::to_string(*result);
        m->meta = old_meta;
        return Status::OK();
      });
}

template <class Index>
Status VnodeAppend(Index* index, std::string_view key, std::string_view suffix,
                   uint64_t max_value_size, uint64_t* length) {
  return index->Update(
      key, [&](const std::string_view* old, const ItemMeta& old_meta, Mutation* m) {
        PDPM_RETURN_IF_ERROR(WrongTypeUnlessString(old_meta));
        const uint64_t old_len = old == nullptr ? 0 : old->size();
        PDPM_RETURN_IF_ERROR(CheckItemSize(key, old_len + suffix.size()));
        if (old_len + suffix.size() > max_value_size) {
          return Status::TooLarge("value of " + std::to_string(old_len + suffix.size()) +
                                  " bytes: the limit is " + std::to_string(max_value_size));
        }
        m->kind = Mutation::kPut;
        m->value.reserve(old_len + suffix.size());
        if (old != nullptr) m->value.assign(*old);
        m->value.append(suffix);
        m->meta = old_meta;
        *length = m->value.size();
        return Status::OK();
      });
}

template <class Index>
Status VnodeGetRange(Index* index, std::string_view key, int64_t start, int64_t end,
                     std::string* value) {
  value->clear();
  std::string whole;
  Status s = VnodeGet(index, key, &whole);
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  SliceRange(whole, start, end, value);
  return Status::OK();
}

void SliceRange(std::string_view whole, int64_t start, int64_t end, std::string* value) {
  value->clear();
  const int64_t len = static_cast<int64_t>(whole.size());
  if (start < 0 && end < 0 && start > end) return;
  if (start < 0) start = len + start;
  if (end < 0) end = len + end;
  if (start < 0) start = 0;
  if (end < 0) end = 0;
  if (end >= len) end = len - 1;
  if (start > end || len == 0) return;
  value->assign(whole.substr(static_cast<size_t>(start), static_cast<size_t>(end - start + 1)));
}

template <class Index>
Status VnodeSetRange(Index* index, std::string_view key, uint64_t offset, std::string_view data,
                     uint64_t max_value_size, uint64_t* length) {
  if (offset > max_value_size || data.size() > max_value_size - offset) {
    return Status::OutOfRange("string exceeds maximum allowed size");
  }
  return index->Update(key,
                       [&](const std::string_view* old, const ItemMeta& old_meta, Mutation* m) {
                         PDPM_RETURN_IF_ERROR(WrongTypeUnlessString(old_meta));
                         const uint64_t old_len = old == nullptr ? 0 : old->size();
                         if (data.empty()) {
                           *length = old_len;
                           return Status::OK();
                         }
                         m->kind = Mutation::kPut;
                         if (old != nullptr) m->value.assign(*old);
                         if (m->value.size() < offset + data.size())
                           m->value.resize(offset + data.size(), '\0');
                         m->value.replace(offset, data.size(), data);
                         m->meta = old_meta;
                         *length = m->value.size();
                         return Status::OK();
                       });
}

template <class Index>
Status VnodeGetExpiry(Index* index, std::string_view key, uint64_t* expire_at_ms) {
  std::string value;
  ItemMeta meta;
  PDPM_RETURN_IF_ERROR(index->Get(key, &value, &meta));
  *expire_at_ms = meta.expire_at_ms;
  return Status::OK();
}

template <class Index>
Status VnodeSetExpiry(Index* index, std::string_view key, uint64_t expire_at_ms,
                      ExpiryCondition condition, uint64_t now_ms, bool* changed) {
  *changed = false;
  return index->Update(key, [&](const std::string_view* old, const ItemMeta& old_meta,
                                Mutation* m) {
    if (old == nullptr || !ExpiryConditionHolds(condition, old_meta.expire_at_ms, expire_at_ms) ||
        (expire_at_ms == 0 && old_meta.expire_at_ms == 0)) {
      return Status::OK();
    }
    *changed = true;
    if (expire_at_ms != 0 && expire_at_ms <= now_ms) {
      m->kind = Mutation::kDelete;
      return Status::OK();
    }
    m->kind = Mutation::kSetExpiry;
    m->meta.expire_at_ms = expire_at_ms;
    return Status::OK();
  });
}

Status GetEach(const std::vector<std::string_view>& keys,
               const std::function<Status(std::string_view key, std::string* value)>& get,
               std::vector<std::optional<std::string>>* values) {
  values->clear();
  values->reserve(keys.size());
  for (std::string_view key : keys) {
    std::string v;
    Status s = get(key, &v);
    if (s.code() == StatusCode::kNotFound) {
      values->emplace_back();
      continue;
    }
    PDPM_RETURN_IF_ERROR(s);
    values->emplace_back(std::move(v));
  }
  return Status::OK();
}

Status VnodeFlush(CcehIndex* index, const std::function<void(std::string_view key)>& removed) {
  ScanPage page;
  do {
    // Deleting restarts every page at 0: what was returned is gone.
    PDPM_RETURN_IF_ERROR(index->Scan(0, 1024, &page));
    for (const std::string& key : page.keys) {
      Status s = index->Delete(key);
      if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
      if (s.ok() && removed) removed(key);
    }
  } while (!page.keys.empty());
  return Status::OK();
}

#define PDPM_VNODE_OPS_FOR(Index)                                                               \
  template Status VnodeGet(Index*, std::string_view, std::string*);                             \
  template Status VnodeType(Index*, std::string_view, KvType*);                                 \
  template Status VnodeIncrByFloat(Index*, std::string_view, long double, std::string*);        \
  template Status VnodeSet(Index*, std::string_view, std::string_view, const SetOptions&,       \
                           SetResult*);                                                         \
  template Status VnodeGetDelete(Index*, std::string_view, std::string*);                       \
  template Status VnodeIncrBy(Index*, std::string_view, int64_t, int64_t*);                     \
  template Status VnodeAppend(Index*, std::string_view, std::string_view, uint64_t, uint64_t*); \
  template Status VnodeGetRange(Index*, std::string_view, int64_t, int64_t, std::string*);      \
  template Status VnodeSetRange(Index*, std::string_view, uint64_t, std::string_view, uint64_t, \
                                uint64_t*);                                                     \
  template Status VnodeGetExpiry(Index*, std::string_view, uint64_t*);                          \
  template Status VnodeSetExpiry(Index*, std::string_view, uint64_t, ExpiryCondition, uint64_t, \
                                 bool*);
PDPM_VNODE_OPS_FOR(CcehIndex)
PDPM_VNODE_OPS_FOR(TxOverlay)
#undef PDPM_VNODE_OPS_FOR

}  // namespace pdpm::pdkvs
