#include "pdkvs/cluster/cluster_kv_store.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "monitor/placement.h"
#include "pdkvs/item.h"

namespace pdpm::pdkvs {
namespace {

using server::Decoder;
using server::Encoder;
using server::KvRequest;

constexpr uint64_t kResidues = monitor::kKeyResidueMask + 1;
// A kKvVnodeBatches request carries at most this many bytes of batches
// (the server takes half a reply's worth); larger ones go vnode by vnode.
constexpr size_t kVnodeBatchesBytes = 8u << 20;

Decoder ReplyDecoder(std::string_view reply) {
  return Decoder({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
}

Status ReplyU64(const std::string& reply, uint64_t* v) {
  Decoder d = ReplyDecoder(reply);
  PDPM_RETURN_IF_ERROR(d.U64(v));
  return d.Done();
}

// `pairs` with each key once, holding its last value, in the order of the
// keys' last occurrences.
std::vector<std::pair<std::string_view, std::string_view>> LastValueOfEachKey(
    const std::vector<std::pair<std::string_view, std::string_view>>& pairs) {
  std::unordered_map<std::string_view, size_t> last;
  last.reserve(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) last[pairs[i].first] = i;
  if (last.size() == pairs.size()) return pairs;
  std::vector<std::pair<std::string_view, std::string_view>> out;
  out.reserve(last.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (last[pairs[i].first] == i) out.push_back(pairs[i]);
  }
  return out;
}

Status CheckValueSize(std::string_view key, uint64_t value_len) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, value_len));
  if (value_len > server::kKvMaxValueSize) {
    return Status::TooLarge("value of " + std::to_string(value_len) + " bytes: the limit is " +
                            std::to_string(server::kKvMaxValueSize));
  }
  return Status::OK();
}

// The size checks of a batched op, as its single operation makes them.
Status CheckOp(const KvOp& op) {
  switch (op.kind) {
    case KvOp::Kind::kGet:
    case KvOp::Kind::kHashGet: return CheckItemSize(op.key, 0);
    case KvOp::Kind::kSet: return CheckValueSize(op.key, op.value.size());
    case KvOp::Kind::kHashSet:
      PDPM_RETURN_IF_ERROR(CheckItemSize(op.key, 0));
      return CheckValueSize(op.field, op.value.size());
  }
  return Status::OK();
}

// Fills `op` from the reply `body` of its successful batch request.
Status ReadOpReply(std::string_view body, KvOp* op) {
  switch (op->kind) {
    case KvOp::Kind::kGet: op->result.assign(body); return Status::OK();
    case KvOp::Kind::kSet: return Status::OK();
    case KvOp::Kind::kHashSet: {
      Decoder d = ReplyDecoder(body);
      PDPM_RETURN_IF_ERROR(d.U64(&op->added));
      return d.Done();
    }
    case KvOp::Kind::kHashGet: {
      Decoder d = ReplyDecoder(body);
      uint64_t n = 0, present = 0;
      PDPM_RETURN_IF_ERROR(d.U64(&n));
      if (n != 1) return Status::Corruption("hash get reply of " + std::to_string(n));
      PDPM_RETURN_IF_ERROR(d.U64(&present));
      if (present == 0) return Status::NotFound("no such field");
      std::string_view v;
      PDPM_RETURN_IF_ERROR(d.Str(&v));
      op->result.assign(v);
      return d.Done();
    }
  }
  return Status::OK();
}

}  // namespace

ClusterKvStore::ClusterKvStore(std::unique_ptr<client::Client> client, uint32_t failover_wait_ms)
    : client_(std::move(client)), failover_wait_ms_(failover_wait_ms) {}

ClusterKvStore::~ClusterKvStore() = default;

Status ClusterKvStore::Open(const client::ClientOptions& options,
                            std::unique_ptr<ClusterKvStore>* out) {
  std::unique_ptr<client::Client> client;
  PDPM_RETURN_IF_ERROR(client::Client::Open(options, &client));
  out->reset(new ClusterKvStore(std::move(client), options.failover_wait_ms));
  return Status::OK();
}

Status ClusterKvStore::Send(uint16_t method, const client::Client::TableRoute& route, KvRequest* r,
                            std::string* reply) {
  std::chrono::steady_clock::time_point deadline{};
  uint32_t backoff_us = 100;
  for (;;) {
    Status s = client_->TableCall(
        route, method,
        [&](uint32_t table, std::string* body) {
          r->table = table;
          Encoder e(body);
          server::EncodeKvRequest(method, *r, &e);
        },
        server::IsKvIdempotent(method, *r), reply);
    // A key locked by a multi-put in progress, or the vnode's segment still
    // being created: refused, nothing done; the lock goes within the
    // participants' lock timeout (or a failover), the creation within the
    // first fill's bound.
    if (s.code() != StatusCode::kAborted) return s;
    const auto now = std::chrono::steady_clock::now();
    if (deadline == std::chrono::steady_clock::time_point{}) {
      deadline = now + std::chrono::milliseconds(failover_wait_ms_);
    } else if (now > deadline) {
      return Status::Unavailable(std::string(s.message()) + ", still after the failover wait");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
    backoff_us = std::min<uint32_t>(backoff_us * 2, 5000);
  }
}

Status ClusterKvStore::KeyCall(uint16_t method, KvRequest r, std::string* reply) {
  const uint64_t hash = HashKey(r.key);
  return Send(
      method,
      [&](uint32_t table_count, uint32_t* table) {
        *table = monitor::TableForKey(hash, table_count);
        return Status::OK();
      },
      &r, reply);
}

Status ClusterKvStore::VnodeCall(uint16_t method, uint32_t table, std::string* reply,
                                 uint64_t arg0) {
  KvRequest r;
  r.arg0 = arg0;
  return Send(
      method,
      [&](uint32_t table_count, uint32_t* out) {
        if (table > table_count) return Status::OutOfRange("no table " + std::to_string(table));
        *out = table;
        return Status::OK();
      },
      &r, reply);
}

Status ClusterKvStore::GroupCall(uint16_t method, const std::vector<std::string_view>& keys,
                                 const std::vector<size_t>& pending, const KvPairs* pairs,
                                 KvRequest* r, std::vector<size_t>* sent, std::string* reply) {
  return Send(
      method,
      [&](uint32_t table_count, uint32_t* table) {
        *table = monitor::TableForKey(HashKey(keys[pending.front()]), table_count);
        sent->clear();
        r->keys.clear();
        r->pairs.clear();
        for (size_t i : pending) {
          if (monitor::TableForKey(HashKey(keys[i]), table_count) != *table) continue;
          sent->push_back(i);
          if (pairs != nullptr) {
            r->pairs.push_back((*pairs)[i]);
          } else {
            r->keys.push_back(keys[i]);
          }
        }
        return Status::OK();
      },
      r, reply);
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
  std::set<uint32_t> tables;
  const uint32_t table_count = client_->table_count();
  for (std::string_view key : keys) tables.insert(monitor::TableForKey(HashKey(key), table_count));
  if (tables.size() <= 1) return MultiGetOnce(keys, values, nullptr);
  // Across vnodes: each vnode's values come with their keys' version
  // words (read in the same step), which are read again after the last
  // vnode. Unchanged and unlocked, each value was current from its read to
  // its second word's, so all were at once, between the last read and the
  // first validation; a write meanwhile (it bumps the word) or a multi-put
  // in progress (it locks it) makes the reads go again.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(failover_wait_ms_);
  for (;;) {
    std::vector<KeyVersion> before, after;
    PDPM_RETURN_IF_ERROR(MultiGetOnce(keys, values, &before));
    PDPM_RETURN_IF_ERROR(Versions(keys, &after));
    bool stable = before == after;
    for (const KeyVersion& v : before) stable = stable && (v.word & dsm::kTxVersionLock) == 0;
    if (stable) return Status::OK();
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Aborted("multi-get: the keys kept changing during the reads");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status ClusterKvStore::ForEachGroup(uint16_t method, const std::vector<std::string_view>& keys,
                                    const GroupReader& read) {
  std::vector<size_t> pending(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) pending[i] = i;
  while (!pending.empty()) {
    std::vector<size_t> sent;
    std::string reply;
    KvRequest r;
    PDPM_RETURN_IF_ERROR(GroupCall(method, keys, pending, nullptr, &r, &sent, &reply));
    Decoder d = ReplyDecoder(reply);
    uint64_t answered = 0;
    PDPM_RETURN_IF_ERROR(read(sent, &d, &answered));
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

Status ClusterKvStore::Versions(const std::vector<std::string_view>& keys,
                                std::vector<KeyVersion>* out) {
  out->assign(keys.size(), {});
  return ForEachGroup(
      server::kKvVersions, keys,
      [&](const std::vector<size_t>& sent, Decoder* d, uint64_t* answered) {
        uint64_t server = 0;
        PDPM_RETURN_IF_ERROR(d->U64(&server));
        PDPM_RETURN_IF_ERROR(d->U64(answered));
        if (*answered != sent.size()) {
          return Status::Corruption("versions reply of " + std::to_string(*answered) + " words");
        }
        for (size_t i : sent) {
          (*out)[i].server = server;
          PDPM_RETURN_IF_ERROR(d->U64(&(*out)[i].word));
        }
        return Status::OK();
      });
}

Status ClusterKvStore::MultiGetOnce(const std::vector<std::string_view>& keys,
                                    std::vector<std::optional<std::string>>* values,
                                    std::vector<KeyVersion>* versions, std::vector<bool>* hashes) {
  values->assign(keys.size(), std::nullopt);
  if (versions != nullptr) versions->assign(keys.size(), {});
  if (hashes != nullptr) hashes->assign(keys.size(), false);
  const uint16_t method = versions != nullptr ? server::kKvMultiGetVersioned : server::kKvMultiGet;
  return ForEachGroup(
      method, keys, [&](const std::vector<size_t>& sent, Decoder* d, uint64_t* answered) {
        PDPM_RETURN_IF_ERROR(d->U64(answered));
        if (*answered == 0 || *answered > sent.size()) {
          return Status::Corruption("multi-get reply of " + std::to_string(*answered) + " answers");
        }
        for (uint64_t i = 0; i < *answered; ++i) {
          uint64_t present = 0;
          PDPM_RETURN_IF_ERROR(d->U64(&present));
          if (present == server::kKvMultiGetHash && hashes != nullptr) (*hashes)[sent[i]] = true;
          if (present == 0 || present == server::kKvMultiGetHash) continue;
          std::string_view v;
          PDPM_RETURN_IF_ERROR(d->Str(&v));
          (*values)[sent[i]].emplace(v);
        }
        if (versions == nullptr) return Status::OK();
        uint64_t server = 0;
        PDPM_RETURN_IF_ERROR(d->U64(&server));
        for (uint64_t i = 0; i < *answered; ++i) {
          (*versions)[sent[i]].server = server;
          PDPM_RETURN_IF_ERROR(d->U64(&(*versions)[sent[i]].word));
        }
        return Status::OK();
      });
}

Status ClusterKvStore::MultiPut(const KvPairs& given, bool if_none_exist, bool* applied) {
  *applied = false;
  for (const auto& [key, value] : given) PDPM_RETURN_IF_ERROR(CheckValueSize(key, value.size()));
  if (given.empty()) {
    *applied = true;
    return Status::OK();
  }
  // A key given twice takes its last value: only that pair is written, so
  // the servers see each key once (one put, one log entry, one lock).
  const KvPairs pairs = LastValueOfEachKey(given);
  const uint32_t table_count = client_->table_count();
  std::vector<uint32_t> tables(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    tables[i] = monitor::TableForKey(HashKey(pairs[i].first), table_count);
  }
  if (std::any_of(tables.begin(), tables.end(), [&](uint32_t t) { return t != tables.front(); })) {
    return TxMultiPut(pairs, tables, if_none_exist, applied);
  }
  // One vnode: one request, if_none_exist checked by the server in the
  // same step. Should the cluster's table count split the keys when the
  // request is routed, they go as a transaction instead.
  KvRequest r;
  r.arg0 = if_none_exist ? 1 : 0;
  bool split = false;
  std::string reply;
  Status s = Send(
      server::kKvMultiPut,
      [&](uint32_t count, uint32_t* table) {
        *table = monitor::TableForKey(HashKey(pairs.front().first), count);
        r.pairs.clear();
        for (size_t i = 0; i < pairs.size(); ++i) {
          tables[i] = monitor::TableForKey(HashKey(pairs[i].first), count);
          split = split || tables[i] != *table;
          r.pairs.push_back(pairs[i]);
        }
        return split ? Status::Aborted("the keys span vnodes") : Status::OK();
      },
      &r, &reply);
  if (split) return TxMultiPut(pairs, tables, if_none_exist, applied);
  PDPM_RETURN_IF_ERROR(s);
  uint64_t done = 0;
  PDPM_RETURN_IF_ERROR(ReplyU64(reply, &done));
  *applied = done != 0;
  return Status::OK();
}

Status ClusterKvStore::TxMultiPut(const KvPairs& pairs, const std::vector<uint32_t>& tables,
                                  bool if_none_exist, bool* applied) {
  Status s = RunTransaction(
      [&](client::Transaction* tx) {
        for (size_t i = 0; i < pairs.size(); ++i) {
          PDPM_RETURN_IF_ERROR(
              CreatedIfNone(tables[i], tx->KvPut(tables[i], HashKey(pairs[i].first), pairs[i].first,
                                                 pairs[i].second, if_none_exist)));
        }
        return Status::OK();
      },
      /*retry_conflicts=*/true, /*rerun_unknown=*/!if_none_exist);
  // A key exists: *applied stays false (multi-put if none exist). Run
  // again, a multi-put if none exist of unknown outcome would find its own
  // keys: it is not (kUnavailable).
  if (s.code() == StatusCode::kAlreadyExists) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  *applied = true;
  return Status::OK();
}

Status ClusterKvStore::CreatedIfNone(uint32_t table, Status put) {
  if (put.code() != StatusCode::kNotFound) return put;
  std::string reply;
  PDPM_RETURN_IF_ERROR(VnodeCall(server::kKvMultiPut, table, &reply));
  return Status::NotFound("table " + std::to_string(table) + " got its segment: route again");
}

Status ClusterKvStore::TxRead(const std::vector<std::string_view>& keys,
                              std::vector<KvTxRead>* out) {
  out->assign(keys.size(), {});
  for (std::string_view key : keys) PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  std::vector<std::optional<std::string>> values;
  std::vector<KeyVersion> versions;
  std::vector<bool> hashes;
  PDPM_RETURN_IF_ERROR(MultiGetOnce(keys, &values, &versions, &hashes));
  for (size_t i = 0; i < keys.size(); ++i) {
    KvTxRead& r = (*out)[i];
    if ((versions[i].word & dsm::kTxVersionLock) != 0) {
      return Status::Aborted("a key is locked by a transaction");
    }
    r.version = KvVersion{versions[i].server, versions[i].word};
    r.hash = hashes[i];
    r.value = r.hash ? std::optional<std::string>("") : std::move(values[i]);
    if (!r.value) continue;
    // A write of the key since the read (the expiry's included) changes its
    // version: the commit's check fails then.
    Status s = GetExpiry(keys[i], &r.expire_at_ms);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
  }
  return Status::OK();
}

Status ClusterKvStore::TxCommit(const std::vector<KvTxCheck>& checks,
                                const std::vector<KvTxWrite>& writes) {
  for (const KvTxWrite& w : writes) {
    PDPM_RETURN_IF_ERROR(CheckValueSize(w.key, w.value && !w.hash ? w.value->size() : 0));
    for (const auto& [field, value] : w.fields) {
      PDPM_RETURN_IF_ERROR(CheckValueSize(field, value ? value->size() : 0));
    }
  }
  std::vector<std::string_view> checked;
  checked.reserve(checks.size());
  for (const KvTxCheck& c : checks) checked.push_back(c.key);
  // A checked key this transaction writes is locked by its own LOCK when
  // the words are read again.
  std::vector<bool> written(checks.size(), false);
  for (size_t i = 0; i < checks.size(); ++i) {
    for (const KvTxWrite& w : writes) written[i] = written[i] || w.key == checks[i].key;
  }
  return RunTransaction(
      [&](client::Transaction* tx) {
        // In VALIDATE, with every LOCK held: each checked key's word where
        // its vnode lives then (routed anew, epoch-checked by the vnode's
        // server). A vnode that moved since the read (a drain, a failover)
        // answers from another server, whose words say nothing of the
        // read, so the commit fails and the caller reads again; a changed
        // word too. Validating before the LOCKs instead left the instant
        // between that check and the commit open to a move.
        tx->AddValidation([&] {
          std::vector<KeyVersion> now;
          PDPM_RETURN_IF_ERROR(Versions(checked, &now));
          for (size_t i = 0; i < checks.size(); ++i) {
            const uint64_t word = written[i] ? now[i].word & ~dsm::kTxVersionLock : now[i].word;
            if (KeyVersion{now[i].server, word} !=
                KeyVersion{checks[i].version.server, checks[i].version.word}) {
              return Status::Aborted("conflict: a read key changed, or its vnode moved");
            }
          }
          return Status::OK();
        });
        const uint32_t table_count = client_->table_count();
        for (const KvTxCheck& c : checks) {
          const uint64_t hash = HashKey(c.key);
          PDPM_RETURN_IF_ERROR(tx->KvRead(static_cast<uint32_t>(c.version.server),
                                          monitor::TableForKey(hash, table_count), hash,
                                          c.version.word));
        }
        for (const KvTxWrite& w : writes) {
          const uint64_t hash = HashKey(w.key);
          const uint32_t table = monitor::TableForKey(hash, table_count);
          if (w.hash) {
            PDPM_RETURN_IF_ERROR(TxHashWrite(tx, table, hash, w));
            continue;
          }
          if (w.value) {
            PDPM_RETURN_IF_ERROR(CreatedIfNone(
                table, tx->KvPut(table, hash, w.key, *w.value, false, w.expire_at_ms)));
            continue;
          }
          // A table without a segment in this client's mapping may have got
          // one since (another client's first write): skipping the delete
          // would commit the rest without it. The segment is made (or
          // found) and the transaction routed again, as for a put.
          PDPM_RETURN_IF_ERROR(CreatedIfNone(table, tx->KvDelete(table, hash, w.key)));
        }
        return Status::OK();
      },
      /*retry_conflicts=*/false, /*rerun_unknown=*/false);
}

Status ClusterKvStore::TxHashWrite(client::Transaction* tx, uint32_t table, uint64_t hash,
                                   const KvTxWrite& w) {
  // The entries of one key apply in their order: what the key held, then
  // the sets, the removals (the hash is never empty on the way), the
  // expiry. A table without a segment in the mapping gets one (or the
  // mapping is stale) and the transaction is routed again, as for a put.
  if (w.fresh) PDPM_RETURN_IF_ERROR(CreatedIfNone(table, tx->KvDelete(table, hash, w.key)));
  for (const auto& [field, value] : w.fields) {
    if (value) {
      PDPM_RETURN_IF_ERROR(CreatedIfNone(table, tx->KvHashSet(table, hash, w.key, field, *value)));
    }
  }
  for (const auto& [field, value] : w.fields) {
    if (!value) {
      PDPM_RETURN_IF_ERROR(CreatedIfNone(table, tx->KvHashDelete(table, hash, w.key, field)));
    }
  }
  return CreatedIfNone(table, tx->KvSetExpiry(table, hash, w.key, w.expire_at_ms));
}

Status ClusterKvStore::RunTransaction(const std::function<Status(client::Transaction* tx)>& fill,
                                      bool retry_conflicts, bool rerun_unknown) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(failover_wait_ms_);
  std::minstd_rand random(std::random_device{}());
  uint32_t backoff_us = 100;
  for (;;) {
    std::unique_ptr<client::Transaction> tx;
    PDPM_RETURN_IF_ERROR(client_->TxBegin(&tx));
    Status s = fill(tx.get());
    if (s.ok()) s = tx->Commit();
    if (s.ok()) return s;
    if (tx->outcome_unknown() && !rerun_unknown) {
      return Status::Unavailable("the transaction's outcome is unknown: " +
                                 std::string(s.message()));
    }
    // A conflict, a failover or a stale route: nothing was applied (or, of
    // unknown outcome, running it again is the same).
    const bool retry = (retry_conflicts && s.code() == StatusCode::kAborted) ||
                       s.code() == StatusCode::kUnavailable ||
                       s.code() == StatusCode::kStaleEpoch || s.code() == StatusCode::kNotFound;
    if (!retry || std::chrono::steady_clock::now() > deadline) return s;
    if (s.code() != StatusCode::kAborted) (void)client_->RefreshMapping();
    std::this_thread::sleep_for(std::chrono::microseconds(random() % backoff_us));
    backoff_us = std::min<uint32_t>(backoff_us * 2, 50000);
  }
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
    PDPM_RETURN_IF_ERROR(Send(
        server::kKvScan,
        [&](uint32_t table_count, uint32_t* out) {
          map = Residues(table_count);
          table = map->table[pos & monitor::kKeyResidueMask];
          *out = table;
          return Status::OK();
        },
        &r, &reply));
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

Status ClusterKvStore::SetExpiry(std::string_view key, uint64_t expire_at_ms,
                                 ExpiryCondition condition, bool* changed) {
  *changed = false;
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  r.arg0 = expire_at_ms;
  r.arg1 = static_cast<uint64_t>(condition);
  std::string reply;
  uint64_t v = 0;
  // A change without a condition keeps the request servers before the
  // conditional one know.
  PDPM_RETURN_IF_ERROR(
      KeyCall(condition == ExpiryCondition::kAlways ? server::kKvSetExpiry : server::kKvSetExpiryIf,
              r, &reply));
  PDPM_RETURN_IF_ERROR(ReplyU64(reply, &v));
  *changed = v != 0;
  return Status::OK();
}

Status ClusterKvStore::HashCall(server::KvHashOp op, std::string_view key,
                                std::vector<std::string_view> fields, std::string* reply,
                                uint64_t arg, uint64_t count) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, 0));
  KvRequest r;
  r.key = key;
  r.hash_op = op;
  r.arg1 = arg;
  r.hash_count = count;
  r.fields = std::move(fields);
  return KeyCall(server::kKvHash, r, reply);
}

Status ClusterKvStore::Type(std::string_view key, KvType* type) {
  *type = KvType::kNone;
  std::string reply;
  uint64_t v = 0;
  Status s = HashCall(server::KvHashOp::kType, key, {}, &reply);
  if (s.code() == StatusCode::kNotFound) return Status::OK();  // no vnode yet
  PDPM_RETURN_IF_ERROR(s);
  PDPM_RETURN_IF_ERROR(ReplyU64(reply, &v));
  if (v > static_cast<uint64_t>(KvType::kHash))
    return Status::Corruption("type " + std::to_string(v));
  *type = static_cast<KvType>(v);
  return Status::OK();
}

Status ClusterKvStore::HashSet(
    std::string_view key, std::span<const std::pair<std::string_view, std::string_view>> fields,
    bool if_absent, uint64_t* added) {
  *added = 0;
  std::vector<std::string_view> strings;
  strings.reserve(fields.size() * 2);
  for (const auto& [f, v] : fields) {
    PDPM_RETURN_IF_ERROR(CheckValueSize(f, v.size()));
    strings.push_back(f);
    strings.push_back(v);
  }
  std::string reply;
  PDPM_RETURN_IF_ERROR(HashCall(if_absent ? server::KvHashOp::kSetIfAbsent : server::KvHashOp::kSet,
                                key, std::move(strings), &reply));
  return ReplyU64(reply, added);
}

Status ClusterKvStore::HashGet(std::string_view key, std::span<const std::string_view> fields,
                               std::vector<std::optional<std::string>>* values) {
  values->assign(fields.size(), std::nullopt);
  std::string reply;
  Status s = HashCall(server::KvHashOp::kGet, key, {fields.begin(), fields.end()}, &reply);
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  Decoder d = ReplyDecoder(reply);
  uint64_t n = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&n));
  if (n != fields.size()) return Status::Corruption("hash get reply of " + std::to_string(n));
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t present = 0;
    PDPM_RETURN_IF_ERROR(d.U64(&present));
    if (present == 0) continue;
    std::string_view v;
    PDPM_RETURN_IF_ERROR(d.Str(&v));
    (*values)[i].emplace(v);
  }
  return d.Done();
}

Status ClusterKvStore::HashDelete(std::string_view key, std::span<const std::string_view> fields,
                                  uint64_t* removed) {
  *removed = 0;
  std::string reply;
  Status s = HashCall(server::KvHashOp::kDelete, key, {fields.begin(), fields.end()}, &reply);
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  return ReplyU64(reply, removed);
}

Status ClusterKvStore::HashLength(std::string_view key, uint64_t* fields) {
  *fields = 0;
  std::string reply;
  Status s = HashCall(server::KvHashOp::kLength, key, {}, &reply);
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  return ReplyU64(reply, fields);
}

Status ClusterKvStore::HashIncrBy(std::string_view key, std::string_view field, int64_t delta,
                                  int64_t* result) {
  std::string reply;
  uint64_t v = 0;
  PDPM_RETURN_IF_ERROR(
      HashCall(server::KvHashOp::kIncrBy, key, {field}, &reply, static_cast<uint64_t>(delta)));
  PDPM_RETURN_IF_ERROR(ReplyU64(reply, &v));
  *result = static_cast<int64_t>(v);
  return Status::OK();
}

Status ClusterKvStore::HashIncrByFloat(std::string_view key, std::string_view field,
                                       std::string_view incr, std::string* result) {
  return HashCall(server::KvHashOp::kIncrByFloat, key, {field, incr}, result);
}

Status ClusterKvStore::HashScan(std::string_view key, uint64_t cursor, size_t count,
                                KvHashPage* page) {
  page->fields.clear();
  page->next_cursor = 0;
  std::string reply;
  Status s = HashCall(server::KvHashOp::kScan, key, {}, &reply, cursor, count);
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  PDPM_RETURN_IF_ERROR(s);
  Decoder d = ReplyDecoder(reply);
  uint64_t next = 0, done = 0, n = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&next));
  PDPM_RETURN_IF_ERROR(d.U64(&done));
  PDPM_RETURN_IF_ERROR(d.U64(&n));
  for (uint64_t i = 0; i < n; ++i) {
    std::string_view f, v;
    PDPM_RETURN_IF_ERROR(d.Str(&f));
    PDPM_RETURN_IF_ERROR(d.Str(&v));
    page->fields.emplace_back(f, v);
  }
  PDPM_RETURN_IF_ERROR(d.Done());
  page->next_cursor = done != 0 ? 0 : next;
  return Status::OK();
}

Status ClusterKvStore::Count(KvCounts* counts) {
  *counts = {};
  for (uint32_t table = 1;; ++table) {
    std::string reply;
    Status s = VnodeCall(server::kKvCount, table, &reply);
    if (s.code() == StatusCode::kOutOfRange) return Status::OK();
    PDPM_RETURN_IF_ERROR(s);
    Decoder d = ReplyDecoder(reply);
    uint64_t keys = 0, expires = 0;
    PDPM_RETURN_IF_ERROR(d.U64(&keys));
    // A server before the expiring count sent the keys only.
    if (!d.Done().ok()) PDPM_RETURN_IF_ERROR(d.U64(&expires));
    PDPM_RETURN_IF_ERROR(d.Done());
    counts->keys += keys;
    counts->expires += expires;
  }
}

Status ClusterKvStore::ReclaimExpired(uint32_t vnode, uint64_t position, uint64_t* next_position,
                                      uint64_t* reclaimed) {
  std::string reply;
  PDPM_RETURN_IF_ERROR(VnodeCall(server::kKvReclaimExpired, vnode + 1, &reply, position));
  Decoder d = ReplyDecoder(reply);
  uint64_t freed = 0;
  PDPM_RETURN_IF_ERROR(d.U64(next_position));
  PDPM_RETURN_IF_ERROR(d.U64(&freed));
  PDPM_RETURN_IF_ERROR(d.Done());
  *reclaimed += freed;
  return Status::OK();
}

uint32_t ClusterKvStore::BackupCount() {
  // A write is acknowledged once every in-sync backup of its segment has
  // it; a segment whose backup failed has fewer until it is re-made.
  const uint32_t copies = client_->replica_count();
  return copies > 0 ? copies - 1 : 0;
}

Status ClusterKvStore::Flush() {
  for (uint32_t table = 1;; ++table) {
    std::string reply;
    Status s = VnodeCall(server::kKvFlush, table, &reply);
    if (s.code() == StatusCode::kOutOfRange) return Status::OK();
    PDPM_RETURN_IF_ERROR(s);
  }
}

}  // namespace pdpm::pdkvs

namespace pdpm::pdkvs {

void ClusterKvStore::RunBatch(std::span<KvOp> ops) {
  // Group by table, keeping each table's ops in their order, then the
  // tables by the server owning them: one request per server.
  const uint32_t table_count = client_->table_count();
  std::vector<std::vector<size_t>> groups;
  std::vector<uint32_t> tables;
  std::unordered_map<uint32_t, size_t> group_of;
  for (size_t i = 0; i < ops.size(); ++i) {
    KvOp& op = ops[i];
    op.status = CheckOp(op);
    if (!op.status.ok()) continue;
    const uint32_t table =
        table_count == 0 ? 0 : monitor::TableForKey(HashKey(op.key), table_count);
    auto [it, added] = group_of.emplace(table, groups.size());
    if (added) {
      groups.emplace_back();
      tables.push_back(table);
    }
    groups[it->second].push_back(i);
  }
  std::vector<std::vector<size_t>> sends;  // group indexes, one request each
  std::unordered_map<uint32_t, size_t> send_of;
  for (size_t g = 0; g < groups.size(); ++g) {
    const uint32_t server = tables[g] == 0 ? 0 : client_->table_owner(tables[g]);
    if (server == 0) {
      sends.push_back({g});
      continue;
    }
    auto [it, added] = send_of.emplace(server, sends.size());
    if (added) sends.emplace_back();
    sends[it->second].push_back(g);
  }
  // Every server's request in flight at once, from this thread: a wake-up
  // of another thread per server a round costs more than the posting.
  std::vector<VnodeBatches> requests;
  requests.reserve(sends.size());
  std::vector<client::Client::TableCallArgs> calls;
  for (const std::vector<size_t>& members : sends) {
    if (tables[members.front()] == 0) {
      SendBatch(ops, groups[members.front()]);  // no server: its error
      continue;
    }
    VnodeBatches& v = requests.emplace_back(EncodeVnodeBatches(ops, groups, tables, members));
    if (v.batches.size() > kVnodeBatchesBytes) continue;  // each batch alone, below
    client::Client::TableCallArgs& c = calls.emplace_back();
    c.route = [&v, &tables, table_count](uint32_t count, uint32_t* table) {
      // The groups hold under the table count they were made with only.
      v.regrouped = count != table_count;
      *table = tables[v.members->front()];
      return v.regrouped ? Status::FailedPrecondition("the table count changed") : Status::OK();
    };
    c.method = server::kKvVnodeBatches;
    c.body = [&v](uint32_t, std::string* body) { body->append(v.batches); };
    c.idempotent = v.idempotent;
  }
  client_->TableCallAll(calls);
  size_t k = 0;
  for (VnodeBatches& v : requests) {
    if (v.batches.size() > kVnodeBatchesBytes) {
      for (size_t g : *v.members) SendBatch(ops, groups[g]);
      continue;
    }
    ReadVnodeBatchesReply(ops, groups, v, calls[k].status, calls[k].reply);
    ++k;
  }
}

server::KvRequest ClusterKvStore::BatchRequest(std::span<KvOp> ops,
                                               const std::vector<size_t>& group) {
  KvRequest r;
  for (size_t i : group) {
    server::KvBatchEntry& b = r.batch.emplace_back();
    const KvOp& op = ops[i];
    b.r.key = op.key;
    switch (op.kind) {
      case KvOp::Kind::kGet: b.method = server::kKvGet; break;
      case KvOp::Kind::kSet:
        b.method = server::kKvSet;
        b.r.value = op.value;
        break;
      case KvOp::Kind::kHashGet:
        b.method = server::kKvHash;
        b.r.hash_op = server::KvHashOp::kGet;
        b.r.fields = {op.field};
        break;
      case KvOp::Kind::kHashSet:
        b.method = server::kKvHash;
        b.r.hash_op = server::KvHashOp::kSet;
        b.r.fields = {op.field, op.value};
        break;
    }
  }
  return r;
}

void ClusterKvStore::SendBatch(std::span<KvOp> ops, const std::vector<size_t>& group) {
  KvRequest r = BatchRequest(ops, group);
  bool split = false;
  std::string reply;
  Status s = Send(
      server::kKvBatch,
      [&](uint32_t count, uint32_t* table) {
        *table = monitor::TableForKey(HashKey(r.batch.front().r.key), count);
        for (const server::KvBatchEntry& b : r.batch) {
          split = split || monitor::TableForKey(HashKey(b.r.key), count) != *table;
        }
        // Not kAborted: Send would route it again and again.
        return split ? Status::FailedPrecondition("the keys span vnodes") : Status::OK();
      },
      &r, &reply);
  // A new table count split the group: each op on its own, in order.
  if (split) {
    for (size_t i : group) RunOne(&ops[i]);
    return;
  }
  if (!s.ok()) {
    for (size_t i : group) ops[i].status = s;
    return;
  }
  ReadBatchReply(ops, group, reply, /*may_answer_none=*/false);
}

ClusterKvStore::VnodeBatches ClusterKvStore::EncodeVnodeBatches(
    std::span<KvOp> ops, const std::vector<std::vector<size_t>>& groups,
    const std::vector<uint32_t>& tables, const std::vector<size_t>& members) {
  // The request's body after its header, encoded once: u64 count, then
  // each batch as bytes (u64 length, written once it is known).
  VnodeBatches v;
  v.members = &members;
  Encoder e(&v.batches);
  e.U64(members.size());
  for (size_t g : members) {
    KvRequest r = BatchRequest(ops, groups[g]);
    r.table = tables[g];
    v.idempotent = v.idempotent && server::IsKvIdempotent(server::kKvBatch, r);
    const size_t length_at = v.batches.size();
    e.U64(0);
    server::EncodeKvRequest(server::kKvBatch, r, &e);
    const uint64_t length = v.batches.size() - length_at - sizeof(uint64_t);
    for (size_t i = 0; i < sizeof(uint64_t); ++i) {
      v.batches[length_at + i] = static_cast<char>(length >> (8 * i));
    }
  }
  return v;
}

void ClusterKvStore::ReadVnodeBatchesReply(std::span<KvOp> ops,
                                           const std::vector<std::vector<size_t>>& groups,
                                           const VnodeBatches& v, Status s,
                                           const std::string& reply) {
  const std::vector<size_t>& members = *v.members;
  if (v.regrouped) {
    for (size_t g : members) SendBatch(ops, groups[g]);
    return;
  }
  // Each vnode's batch answered on its own; one the server did not run
  // (its table is elsewhere now, the reply was full, ...) goes again alone.
  std::vector<bool> answered(members.size(), false);
  if (s.ok()) {
    Decoder d = ReplyDecoder(reply);
    uint64_t n = 0;
    s = d.U64(&n);
    if (s.ok() && n > members.size()) {
      s = Status::Corruption("vnode batches reply of " + std::to_string(n) + " answers");
    }
    for (size_t k = 0; k < n && s.ok(); ++k) {
      uint64_t code = 0;
      std::string_view body;
      s = d.U64(&code);
      if (s.ok()) s = d.Str(&body);
      if (!s.ok()) break;
      if (static_cast<StatusCode>(code) != StatusCode::kOk) continue;
      ReadBatchReply(ops, groups[members[k]], body, /*may_answer_none=*/true);
      answered[k] = true;
    }
    if (s.ok()) s = d.Done();
  }
  for (size_t k = 0; k < members.size(); ++k) {
    if (answered[k]) continue;
    if (s.ok()) {
      SendBatch(ops, groups[members[k]]);
    } else {
      for (size_t i : groups[members[k]]) ops[i].status = s;
    }
  }
}

void ClusterKvStore::ReadBatchReply(std::span<KvOp> ops, const std::vector<size_t>& group,
                                    std::string_view reply, bool may_answer_none) {
  std::vector<size_t> again;
  Decoder d = ReplyDecoder(reply);
  uint64_t n = 0;
  Status s = d.U64(&n);
  if (s.ok() && ((n == 0 && !may_answer_none) || n > group.size())) {
    s = Status::Corruption("batch reply of " + std::to_string(n) + " answers");
  }
  for (size_t k = 0; k < n && s.ok(); ++k) {
    KvOp& op = ops[group[k]];
    uint64_t code = 0;
    std::string_view body;
    s = d.U64(&code);
    if (s.ok()) s = d.Str(&body);
    if (!s.ok()) break;
    const auto c = static_cast<StatusCode>(code);
    if (c == StatusCode::kAborted) {
      again.push_back(group[k]);  // a key locked by a multi-put
    } else if (c != StatusCode::kOk) {
      op.status = Status(c, body);
    } else {
      op.status = ReadOpReply(body, &op);
    }
  }
  if (s.ok()) s = d.Done();
  if (!s.ok()) {
    for (size_t i : group) ops[i].status = s;
    return;
  }
  // Reads past what one reply carries.
  again.insert(again.end(), group.begin() + static_cast<ptrdiff_t>(n), group.end());
  for (size_t i : again) RunOne(&ops[i]);
}

}  // namespace pdpm::pdkvs
