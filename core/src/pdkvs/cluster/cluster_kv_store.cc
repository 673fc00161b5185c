#include "pdkvs/cluster/cluster_kv_store.h"

#include <algorithm>

#include "monitor/placement.h"
#include "pdkvs/item.h"

namespace pdpm::pdkvs {
namespace {

using server::Decoder;
using server::Encoder;
using server::KvRequest;

constexpr uint64_t kResidues = monitor::kKeyResidueMask + 1;

Decoder ReplyDecoder(const std::string& reply) {
  return Decoder({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
}

Status ReplyU64(const std::string& reply, uint64_t* v) {
  Decoder d = ReplyDecoder(reply);
  PDPM_RETURN_IF_ERROR(d.U64(v));
  return d.Done();
}

Status CheckValueSize(std::string_view key, uint64_t value_len) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, value_len));
  if (value_len > server::kKvMaxValueSize) {
    return Status::TooLarge("value of " + std::to_string(value_len) + " bytes: the limit is " +
                            std::to_string(server::kKvMaxValueSize));
  }
  return Status::OK();
}

}  // namespace

ClusterKvStore::ClusterKvStore(std::unique_ptr<client::Client> client)
    : client_(std::move(client)) {}

ClusterKvStore::~ClusterKvStore() = default;

Status ClusterKvStore::Open(const client::ClientOptions& options,
                            std::unique_ptr<ClusterKvStore>* out) {
  std::unique_ptr<client::Client> client;
  PDPM_RETURN_IF_ERROR(client::Client::Open(options, &client));
  out->reset(new ClusterKvStore(std::move(client)));
  return Status::OK();
}

Status ClusterKvStore::KeyCall(uint16_t method, KvRequest r, std::string* reply) {
  const uint64_t hash = HashKey(r.key);
  return client_->TableCall(
      [&](uint32_t table_count, uint32_t* table) {
        *table = monitor::TableForKey(hash, table_count);
        return Status::OK();
      },
      method,
      [&](uint32_t table, std::string* body) {
        r.table = table;
        Encoder e(body);
        server::EncodeKvRequest(method, r, &e);
      },
      reply);
}

Status ClusterKvStore::VnodeCall(uint16_t method, uint32_t table, KvRequest r,
                                 std::string* reply) {
  return client_->TableCall(
      [&](uint32_t table_count, uint32_t* out) {
        if (table > table_count) return Status::OutOfRange("no table " + std::to_string(table));
        *out = table;
        return Status::OK();
      },
      method,
      [&](uint32_t t, std::string* body) {
        r.table = t;
        Encoder e(body);
        server::EncodeKvRequest(method, r, &e);
      },
      reply);
}

Status ClusterKvStore::GroupCall(uint16_t method, const std::vector<std::string_view>& all,
                                 const std::vector<size_t>& keys, KvRequest r,
                                 std::vector<size_t>* sent, std::string* reply) {
  uint32_t count = 0;
  return client_->TableCall(
      [&](uint32_t table_count, uint32_t* table) {
        count = table_count;
        *table = monitor::TableForKey(HashKey(all[keys.front()]), table_count);
        return Status::OK();
      },
      method,
      [&](uint32_t table, std::string* body) {
        sent->clear();
        r.table = table;
        r.keys.clear();
        for (size_t i : keys) {
          if (monitor::TableForKey(HashKey(all[i]), count) != table) continue;
          sent->push_back(i);
          r.keys.push_back(all[i]);
        }
        Encoder e(body);
        server::EncodeKvRequest(method, r, &e);
      },
      reply);
}

std::shared_ptr<const ClusterKvStore::ResidueMap> ClusterKvStore::Residues(uint32_t table_count) {
  std::lock_guard<std::mutex> lock(residue_mu_);
  if (residue_count_ != table_count) {
    auto map = std::make_shared<ResidueMap>();
    map->table.resize(kResidues);
    map->least.assign(table_count + 1, kResidues);
    for (uint64_t r = 0; r < kResidues; ++r) {
      const uint32_t t = monitor::TableForKey(r, table_count);
      map->table[r] = t;
      map->least[t] = std::min(map->least[t], r);
    }
    residues_ = std::move(map);
    residue_count_ = table_count;
  }
  return residues_;
}

Status ClusterKvStore::Get(std::string_view key, std::string* value) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  return KeyCall(server::kKvGet, r, value);
}

Status ClusterKvStore::Set(std::string_view key, std::string_view value, const SetOptions& options,
                           SetResult* result) {
  result->applied = false;
  result->old_value.reset();
  PDPM_RETURN_IF_ERROR(CheckValueSize(key, value.size()));
  KvRequest r;
  r.key = key;
  r.value = value;
  r.arg0 = static_cast<uint64_t>(options.condition) |
           (static_cast<uint64_t>(options.expiry) << server::kKvSetExpiryShift) |
           (options.want_old ? server::kKvSetWantOld : 0);
  r.arg1 = options.expire_at_ms;
  std::string reply;
  PDPM_RETURN_IF_ERROR(KeyCall(server::kKvSet, r, &reply));
  Decoder d = ReplyDecoder(reply);
  uint64_t applied = 0, has_old = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&applied));
  PDPM_RETURN_IF_ERROR(d.U64(&has_old));
  std::string_view old = d.Rest();
  result->applied = applied != 0;
  if (has_old != 0) result->old_value.emplace(old);
  return Status::OK();
}

Status ClusterKvStore::GetDelete(std::string_view key, std::string* value) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  return KeyCall(server::kKvGetDelete, r, value);
}

Status ClusterKvStore::Delete(std::string_view key) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  std::string reply;
  return KeyCall(server::kKvDelete, r, &reply);
}

Status ClusterKvStore::Exists(std::string_view key, bool* exists) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  std::string reply;
  uint64_t v = 0;
  PDPM_RETURN_IF_ERROR(KeyCall(server::kKvExists, r, &reply));
  PDPM_RETURN_IF_ERROR(ReplyU64(reply, &v));
  *exists = v != 0;
  return Status::OK();
}

Status ClusterKvStore::IncrBy(std::string_view key, int64_t delta, int64_t* result) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  r.arg0 = static_cast<uint64_t>(delta);
  std::string reply;
  uint64_t v = 0;
  PDPM_RETURN_IF_ERROR(KeyCall(server::kKvIncrBy, r, &reply));
  PDPM_RETURN_IF_ERROR(ReplyU64(reply, &v));
  *result = static_cast<int64_t>(v);
  return Status::OK();
}

Status ClusterKvStore::Append(std::string_view key, std::string_view suffix, uint64_t* length) {
  PDPM_RETURN_IF_ERROR(CheckValueSize(key, suffix.size()));
  KvRequest r;
  r.key = key;
  r.value = suffix;
  std::string reply;
  PDPM_RETURN_IF_ERROR(KeyCall(server::kKvAppend, r, &reply));
  return ReplyU64(reply, length);
}

Status ClusterKvStore::GetRange(std::string_view key, int64_t start, int64_t end,
                                std::string* value) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  r.arg0 = static_cast<uint64_t>(start);
  r.arg1 = static_cast<uint64_t>(end);
  return KeyCall(server::kKvGetRange, r, value);
}

Status ClusterKvStore::SetRange(std::string_view key, uint64_t offset, std::string_view data,
                                uint64_t* length) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  if (offset > server::kKvMaxValueSize || data.size() > server::kKvMaxValueSize - offset) {
    return Status::OutOfRange("string exceeds maximum allowed size");
  }
  KvRequest r;
  r.key = key;
  r.arg0 = offset;
  r.value = data;
  std::string reply;
  PDPM_RETURN_IF_ERROR(KeyCall(server::kKvSetRange, r, &reply));
  return ReplyU64(reply, length);
}

Status ClusterKvStore::MultiGet(const std::vector<std::string_view>& keys,
                                std::vector<std::optional<std::string>>* values) {
  values->assign(keys.size(), std::nullopt);
  for (std::string_view key : keys) PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  std::vector<size_t> pending(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) pending[i] = i;
  while (!pending.empty()) {
    std::vector<size_t> sent;
    std::string reply;
    PDPM_RETURN_IF_ERROR(GroupCall(server::kKvMultiGet, keys, pending, {}, &sent, &reply));
    Decoder d = ReplyDecoder(reply);
    uint64_t answered = 0;
    PDPM_RETURN_IF_ERROR(d.U64(&answered));
    if (answered == 0 || answered > sent.size()) {
      return Status::Corruption("multi-get reply of " + std::to_string(answered) + " answers");
    }
    for (uint64_t i = 0; i < answered; ++i) {
      uint64_t present = 0;
      PDPM_RETURN_IF_ERROR(d.U64(&present));
      if (present == 0) continue;
      std::string_view v;
      PDPM_RETURN_IF_ERROR(d.Str(&v));
      (*values)[sent[i]].emplace(v);
    }
    PDPM_RETURN_IF_ERROR(d.Done());
    // The answered keys leave; the rest (other vnodes, or beyond one reply)
    // go again.
    std::vector<size_t> rest;
    std::set_difference(pending.begin(), pending.end(), sent.begin(), sent.begin() + answered,
                        std::back_inserter(rest));
    pending = std::move(rest);
  }
  return Status::OK();
}

Status ClusterKvStore::MultiPut(
    const std::vector<std::pair<std::string_view, std::string_view>>& pairs, bool if_none_exist,
    bool* applied) {
  *applied = false;
  for (const auto& [key, value] : pairs) PDPM_RETURN_IF_ERROR(CheckValueSize(key, value.size()));
  if (pairs.empty()) {
    *applied = true;
    return Status::OK();
  }
  std::vector<std::string_view> keys;
  for (const auto& p : pairs) keys.push_back(p.first);
  std::vector<size_t> pending(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) pending[i] = i;
  std::vector<std::vector<size_t>> groups;
  if (if_none_exist) {
    // Across vnodes the check precedes the writes (see the header); within
    // one vnode the server repeats it atomically with them.
    std::vector<std::optional<std::string>> found;
    PDPM_RETURN_IF_ERROR(MultiGet(keys, &found));
    for (const auto& v : found) {
      if (v.has_value()) return Status::OK();
    }
  }
  while (!pending.empty()) {
    std::vector<size_t> sent;
    std::string reply;
    Status s = client_->TableCall(
        [&](uint32_t table_count, uint32_t* table) {
          *table = monitor::TableForKey(HashKey(keys[pending.front()]), table_count);
          sent.clear();
          for (size_t i : pending) {
            if (monitor::TableForKey(HashKey(keys[i]), table_count) == *table) sent.push_back(i);
          }
          return Status::OK();
        },
        server::kKvMultiPut,
        [&](uint32_t table, std::string* body) {
          KvRequest r;
          r.table = table;
          r.arg0 = if_none_exist ? 1 : 0;
          for (size_t i : sent) r.pairs.push_back(pairs[i]);
          Encoder e(body);
          server::EncodeKvRequest(server::kKvMultiPut, r, &e);
        },
        &reply);
    PDPM_RETURN_IF_ERROR(s);
    uint64_t done = 0;
    PDPM_RETURN_IF_ERROR(ReplyU64(reply, &done));
    if (done == 0) return Status::OK();  // a key of this vnode appeared meanwhile
    std::vector<size_t> rest;
    std::set_difference(pending.begin(), pending.end(), sent.begin(), sent.end(),
                        std::back_inserter(rest));
    pending = std::move(rest);
  }
  *applied = true;
  return Status::OK();
}

// The cursor is a hash position p inside the vnode of its residue
// (p & 0xffff); vnodes are visited in the order of their least residue,
// each from that residue (so cursor 0 starts the vnode of residue 0).
Status ClusterKvStore::Scan(uint64_t cursor, size_t count, KvScanPage* page) {
  page->keys.clear();
  page->next_cursor = 0;
  if (count == 0) return Status::InvalidArgument("scan count must be positive");
  uint64_t pos = cursor;
  for (;;) {
    std::shared_ptr<const ResidueMap> map;
    uint32_t table = 0;
    std::string reply;
    KvRequest r;
    r.arg0 = pos;
    r.arg1 = std::clamp<uint64_t>(count - std::min(count, page->keys.size()), 1,
                                  server::kKvMaxScanCount);
    PDPM_RETURN_IF_ERROR(client_->TableCall(
        [&](uint32_t table_count, uint32_t* out) {
          map = Residues(table_count);
          table = map->table[pos & monitor::kKeyResidueMask];
          *out = table;
          return Status::OK();
        },
        server::kKvScan,
        [&](uint32_t t, std::string* body) {
          r.table = t;
          Encoder e(body);
          server::EncodeKvRequest(server::kKvScan, r, &e);
        },
        &reply));
    Decoder d = ReplyDecoder(reply);
    uint64_t next = 0, done = 0, n = 0;
    PDPM_RETURN_IF_ERROR(d.U64(&next));
    PDPM_RETURN_IF_ERROR(d.U64(&done));
    PDPM_RETURN_IF_ERROR(d.U64(&n));
    for (uint64_t i = 0; i < n; ++i) {
      std::string_view k;
      PDPM_RETURN_IF_ERROR(d.Str(&k));
      page->keys.emplace_back(k);
    }
    PDPM_RETURN_IF_ERROR(d.Done());
    if (done == 0) {
      // Round up to the next position of this vnode's residues: no key of
      // the vnode lies in between.
      const uint64_t base = next & ~monitor::kKeyResidueMask;
      uint64_t res = next & monitor::kKeyResidueMask;
      while (res < kResidues && map->table[res] != table) ++res;
      if (res < kResidues) {
        page->next_cursor = base + res;
        return Status::OK();
      }
      if (base <= UINT64_MAX - kResidues - map->least[table]) {
        page->next_cursor = base + kResidues + map->least[table];
        return Status::OK();
      }
    }
    // This vnode is done: the next one is the vnode of the next least
    // residue.
    uint64_t following = kResidues;
    for (uint64_t least : map->least) {
      if (least > map->least[table] && least < following) following = least;
    }
    if (following == kResidues) return Status::OK();  // the last vnode: the scan is over
    pos = following;
    if (page->keys.size() >= count) {
      page->next_cursor = pos;
      return Status::OK();
    }
  }
}

Status ClusterKvStore::GetExpiry(std::string_view key, uint64_t* expire_at_ms) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  std::string reply;
  PDPM_RETURN_IF_ERROR(KeyCall(server::kKvGetExpiry, r, &reply));
  return ReplyU64(reply, expire_at_ms);
}

Status ClusterKvStore::SetExpiry(std::string_view key, uint64_t expire_at_ms, bool* changed) {
  *changed = false;
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  r.arg0 = expire_at_ms;
  std::string reply;
  uint64_t v = 0;
  PDPM_RETURN_IF_ERROR(KeyCall(server::kKvSetExpiry, r, &reply));
  PDPM_RETURN_IF_ERROR(ReplyU64(reply, &v));
  *changed = v != 0;
  return Status::OK();
}

Status ClusterKvStore::Count(uint64_t* count) {
  *count = 0;
  for (uint32_t table = 1;; ++table) {
    std::string reply;
    Status s = VnodeCall(server::kKvCount, table, {}, &reply);
    if (s.code() == StatusCode::kOutOfRange) return Status::OK();
    PDPM_RETURN_IF_ERROR(s);
    uint64_t n = 0;
    PDPM_RETURN_IF_ERROR(ReplyU64(reply, &n));
    *count += n;
  }
}

Status ClusterKvStore::Flush() {
  for (uint32_t table = 1;; ++table) {
    std::string reply;
    Status s = VnodeCall(server::kKvFlush, table, {}, &reply);
    if (s.code() == StatusCode::kOutOfRange) return Status::OK();
    PDPM_RETURN_IF_ERROR(s);
  }
}

}  // namespace pdpm::pdkvs
