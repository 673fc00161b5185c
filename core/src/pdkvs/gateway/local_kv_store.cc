#include "pdkvs/gateway/local_kv_store.h"

#include <sys/stat.h>

#include <chrono>
#include <mutex>

#include "pdkvs/vnode_ops.h"

namespace pdpm::pdkvs {
namespace {

constexpr uint64_t kLayoutMagic = 0x4c4b5631;  // "LKV1"
constexpr int kLayoutRoot = 0;
constexpr uint32_t kMaxVnodes = dsm::kNumRoots - 1;

uint64_t SystemNowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Creates the vnodes of a store whose layout word is not written yet, then
// writes it: the commit of the store's creation.
Status CreateLayout(dsm::PAllocator* alloc, uint32_t vnodes, const CcehOptions& options) {
  for (uint32_t i = 0; i < vnodes; ++i) {
    uint64_t header = 0;
    std::unique_ptr<CcehIndex> index;
    PDPM_RETURN_IF_ERROR(CcehIndex::Create(alloc, options, &header, &index));
    PDPM_RETURN_IF_ERROR(alloc->SetRoot(1 + static_cast<int>(i), header));
  }
  return alloc->SetRoot(kLayoutRoot, (kLayoutMagic << 32) | vnodes);
}

}  // namespace

LocalKvStore::~LocalKvStore() = default;

Status LocalKvStore::Open(const std::string& path, const LocalKvStoreOptions& options,
                          std::unique_ptr<LocalKvStore>* out) {
  if (options.vnodes == 0 || options.vnodes > kMaxVnodes) {
    return Status::InvalidArgument("vnodes must be 1.." + std::to_string(kMaxVnodes));
  }
  struct stat st;
  const bool fresh = stat(path.c_str(), &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0);
  std::unique_ptr<LocalKvStore> store(new LocalKvStore());
  store->options_ = options;
  pm::PmOptions pm_options;
  pm_options.create_size = options.create_size;
  PDPM_RETURN_IF_ERROR(pm::PmDevice::Open(path, pm_options, &store->device_));
  const pm::PmDevice& dev = *store->device_;
  dsm::PmRange range{dev.base(), dev.capacity(), dev.persist_fn()};
  if (fresh) PDPM_RETURN_IF_ERROR(dsm::PAllocator::Format(range));
  dsm::PAllocatorOptions alloc_options;
  alloc_options.num_cores = options.cores;
  Status s = dsm::PAllocator::Open(range, alloc_options, &store->alloc_);
  if (!s.ok()) return s.WithContext("open pDKVS store " + path);
  dsm::PAllocator* alloc = store->alloc_.get();

  CcehOptions cceh;
  cceh.clock_ms = [store = store.get()] { return store->NowMs(); };
  uint64_t layout = alloc->GetRoot(kLayoutRoot);
  if (layout == 0) {
    // A new store, or one whose creation a crash interrupted (its blocks
    // are leaks the reclaim below frees).
    PDPM_RETURN_IF_ERROR(CreateLayout(alloc, options.vnodes, cceh));
    layout = alloc->GetRoot(kLayoutRoot);
  }
  const uint64_t vnodes = layout & 0xffffffffu;
  if ((layout >> 32) != kLayoutMagic || vnodes == 0 || vnodes > kMaxVnodes) {
    return Status::Corruption("pDKVS store " + path + ": bad layout word in root slot 0");
  }
  for (uint64_t i = 0; i < vnodes; ++i) {
    std::unique_ptr<CcehIndex> index;
    s = CcehIndex::Open(alloc, alloc->GetRoot(1 + static_cast<int>(i)), cceh, &index);
    if (!s.ok()) return s.WithContext("pDKVS store " + path + " vnode " + std::to_string(i));
    store->indexes_.push_back(std::move(index));
  }
  std::vector<CcehIndex*> all;
  for (auto& index : store->indexes_) {
    std::unique_ptr<VnodeHashes> hashes;
    PDPM_RETURN_IF_ERROR(VnodeHashes::Open(alloc, index.get(), cceh, &hashes));
    for (CcehIndex* fields : hashes->indexes()) all.push_back(fields);
    store->hashes_.push_back(std::move(hashes));
    all.push_back(index.get());
  }
  uint64_t reclaimed = 0;
  PDPM_RETURN_IF_ERROR(CcehIndex::ReclaimUnreachable(alloc, all, &reclaimed));
  *out = std::move(store);
  return Status::OK();
}

uint64_t LocalKvStore::NowMs() const {
  return options_.clock_ms ? options_.clock_ms() : SystemNowMs();
}

size_t LocalKvStore::VnodeNumber(std::string_view key) const {
  return HashKey(key) % indexes_.size();
}

CcehIndex* LocalKvStore::VnodeOf(std::string_view key) const {
  return indexes_[VnodeNumber(key)].get();
}

VnodeHashes* LocalKvStore::HashesOf(std::string_view key) const {
  return hashes_[VnodeNumber(key)].get();
}

std::atomic<uint64_t>& LocalKvStore::VersionOf(std::string_view key) const {
  return versions_[HashKey(key) % kVersionSlots];
}

// The bump comes after the write: a TxRead reads the version before the
// value, so a write it may have seen bumps a version it read.
template <class Op>
Status LocalKvStore::Write(std::string_view key, Op op) {
  Status s = op();
  Status freed = HashesOf(key)->FreeDetached();
  VersionOf(key).fetch_add(1);
  return s.ok() ? freed : s;
}

Status LocalKvStore::Get(std::string_view key, std::string* value) {
  std::shared_lock lock(multi_mu_);
  return VnodeGet(VnodeOf(key), key, value);
}

Status LocalKvStore::Set(std::string_view key, std::string_view value, const SetOptions& options,
                         SetResult* result) {
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return VnodeSet(VnodeOf(key), key, value, options, result); });
}

Status LocalKvStore::GetDelete(std::string_view key, std::string* value) {
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return VnodeGetDelete(VnodeOf(key), key, value); });
}

Status LocalKvStore::Delete(std::string_view key) {
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return VnodeOf(key)->Delete(key); });
}

Status LocalKvStore::Exists(std::string_view key, bool* exists) {
  std::shared_lock lock(multi_mu_);
  return VnodeOf(key)->Exists(key, exists);
}

Status LocalKvStore::IncrBy(std::string_view key, int64_t delta, int64_t* result) {
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return VnodeIncrBy(VnodeOf(key), key, delta, result); });
}

Status LocalKvStore::Append(std::string_view key, std::string_view suffix, uint64_t* length) {
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return VnodeAppend(VnodeOf(key), key, suffix, kMaxValueSize, length); });
}

Status LocalKvStore::GetRange(std::string_view key, int64_t start, int64_t end,
                              std::string* value) {
  std::shared_lock lock(multi_mu_);
  return VnodeGetRange(VnodeOf(key), key, start, end, value);
}

Status LocalKvStore::SetRange(std::string_view key, uint64_t offset, std::string_view data,
                              uint64_t* length) {
  std::shared_lock lock(multi_mu_);
  return Write(
      key, [&] { return VnodeSetRange(VnodeOf(key), key, offset, data, kMaxValueSize, length); });
}

Status LocalKvStore::MultiGet(const std::vector<std::string_view>& keys,
                              std::vector<std::optional<std::string>>* values) {
  std::shared_lock lock(multi_mu_);
  return GetEach(
      keys,
      [&](std::string_view key, std::string* v) { return VnodeGetString(VnodeOf(key), key, v); },
      values);
}

Status LocalKvStore::MultiPut(
    const std::vector<std::pair<std::string_view, std::string_view>>& pairs, bool if_none_exist,
    bool* applied) {
  *applied = false;
  for (const auto& [key, value] : pairs) PDPM_RETURN_IF_ERROR(CheckItemSize(key, value.size()));
  std::unique_lock lock(multi_mu_);
  if (if_none_exist) {
    for (const auto& pair : pairs) {
      bool exists = false;
      PDPM_RETURN_IF_ERROR(VnodeOf(pair.first)->Exists(pair.first, &exists));
      if (exists) return Status::OK();
    }
  }
  for (const auto& pair : pairs) {
    PDPM_RETURN_IF_ERROR(
        Write(pair.first, [&] { return VnodeOf(pair.first)->Put(pair.first, pair.second); }));
  }
  *applied = true;
  return Status::OK();
}

// The cursor is a hash position: vnode i holds the keys whose hash is i mod
// N, so a position rounded up to the next value that is i mod N is the same
// position inside vnode i, and its remainder names the vnode. Vnode 0 starts
// at 0 (the first cursor), vnode i at i.
Status LocalKvStore::Scan(uint64_t cursor, size_t count, KvScanPage* page) {
  page->keys.clear();
  page->next_cursor = 0;
  const uint64_t n = indexes_.size();
  uint64_t vnode = cursor % n;
  uint64_t pos = cursor;
  std::shared_lock lock(multi_mu_);
  while (vnode < n) {
    ScanPage part;
    PDPM_RETURN_IF_ERROR(indexes_[vnode]->Scan(pos, count, &part));
    for (std::string& k : part.keys) page->keys.push_back(std::move(k));
    if (!part.done) {
      // Round up to the next position that is `vnode` mod n.
      uint64_t next = part.next_cursor - part.next_cursor % n + vnode;
      if (next < part.next_cursor) next += n;
      if (next >= part.next_cursor) {  // no wrap-around past UINT64_MAX
        page->next_cursor = next;
        return Status::OK();
      }
    }
    ++vnode;
    pos = vnode;
    if (vnode < n && page->keys.size() >= count) {
      page->next_cursor = vnode;
      return Status::OK();
    }
  }
  return Status::OK();
}

Status LocalKvStore::GetExpiry(std::string_view key, uint64_t* expire_at_ms) {
  std::shared_lock lock(multi_mu_);
  return VnodeGetExpiry(VnodeOf(key), key, expire_at_ms);
}

Status LocalKvStore::SetExpiry(std::string_view key, uint64_t expire_at_ms,
                               ExpiryCondition condition, bool* changed) {
  const uint64_t now = NowMs();
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] {
    return VnodeSetExpiry(VnodeOf(key), key, expire_at_ms, condition, now, changed);
  });
}

Status LocalKvStore::Type(std::string_view key, KvType* type) {
  std::shared_lock lock(multi_mu_);
  return VnodeType(VnodeOf(key), key, type);
}

Status LocalKvStore::HashSet(std::string_view key,
                             std::span<const std::pair<std::string_view, std::string_view>> fields,
                             bool if_absent, uint64_t* added) {
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return HashesOf(key)->Set(key, fields, if_absent, added); });
}

Status LocalKvStore::HashGet(std::string_view key, std::span<const std::string_view> fields,
                             std::vector<std::optional<std::string>>* values) {
  std::shared_lock lock(multi_mu_);
  return HashesOf(key)->GetFields(key, fields, values);
}

Status LocalKvStore::HashDelete(std::string_view key, std::span<const std::string_view> fields,
                                uint64_t* removed) {
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return HashesOf(key)->Delete(key, fields, removed); });
}

Status LocalKvStore::HashLength(std::string_view key, uint64_t* fields) {
  std::shared_lock lock(multi_mu_);
  return HashesOf(key)->Length(key, fields);
}

Status LocalKvStore::HashIncrBy(std::string_view key, std::string_view field, int64_t delta,
                                int64_t* result) {
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return HashesOf(key)->IncrBy(key, field, delta, result); });
}

Status LocalKvStore::HashIncrByFloat(std::string_view key, std::string_view field,
                                     std::string_view incr, std::string* result) {
  long double v = 0;
  if (!ParseLongDouble(incr, &v)) return Status::InvalidArgument("value is not a valid float");
  std::shared_lock lock(multi_mu_);
  return Write(key, [&] { return HashesOf(key)->IncrByFloat(key, field, v, result); });
}

Status LocalKvStore::HashScan(std::string_view key, uint64_t cursor, size_t count,
                              KvHashPage* page) {
  VnodeHashes::FieldPage fields;
  {
    std::shared_lock lock(multi_mu_);
    PDPM_RETURN_IF_ERROR(HashesOf(key)->Scan(key, cursor, count, &fields));
  }
  page->fields = std::move(fields.fields);
  page->next_cursor = fields.done ? 0 : fields.next_cursor;
  return Status::OK();
}

Status LocalKvStore::Count(KvCounts* counts) {
  *counts = {};
  for (auto& index : indexes_) {
    counts->keys += index->Count();
    counts->expires += index->CountExpiring();
  }
  return Status::OK();
}

Status LocalKvStore::ReclaimExpired(uint32_t vnode, uint64_t position, uint64_t* next_position,
                                    uint64_t* reclaimed) {
  if (vnode >= indexes_.size()) return Status::OutOfRange("no vnode " + std::to_string(vnode));
  std::shared_lock lock(multi_mu_);
  PDPM_RETURN_IF_ERROR(indexes_[vnode]->ReclaimExpired(position, next_position, reclaimed));
  return hashes_[vnode]->FreeDetached();
}

uint32_t LocalKvStore::BackupCount() {
  return 0;
}

Status LocalKvStore::Flush() {
  std::unique_lock lock(multi_mu_);
  Status s;
  for (size_t i = 0; i < indexes_.size() && s.ok(); ++i) {
    s = VnodeFlush(indexes_[i].get());
    if (s.ok()) s = hashes_[i]->FreeDetached();
  }
  for (size_t i = 0; i < kVersionSlots; ++i) versions_[i].fetch_add(1);
  return s;
}

Status LocalKvStore::TxRead(const std::vector<std::string_view>& keys, std::vector<KvTxRead>* out) {
  out->assign(keys.size(), {});
  std::shared_lock lock(multi_mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    KvTxRead& r = (*out)[i];
    r.version.word = VersionOf(keys[i]).load();
    std::string value;
    ItemMeta meta;
    Status s = VnodeOf(keys[i])->Get(keys[i], &value, &meta);
    if (s.code() == StatusCode::kNotFound) continue;
    PDPM_RETURN_IF_ERROR(s);
    r.hash = meta.flags == kItemFlagHash;
    r.value = r.hash ? std::string() : std::move(value);
    r.expire_at_ms = meta.expire_at_ms;
  }
  return Status::OK();
}

Status LocalKvStore::TxCommit(const std::vector<KvTxCheck>& checks,
                              const std::vector<KvTxWrite>& writes) {
  for (const KvTxWrite& w : writes) {
    PDPM_RETURN_IF_ERROR(CheckItemSize(w.key, w.value && !w.hash ? w.value->size() : 0));
    for (const auto& [field, value] : w.fields) {
      PDPM_RETURN_IF_ERROR(CheckItemSize(field, value ? value->size() : 0));
    }
  }
  std::unique_lock lock(multi_mu_);
  for (const KvTxCheck& c : checks) {
    if (VersionOf(c.key).load() != c.version.word) {
      return Status::Aborted("conflict: a key changed since the transaction read it");
    }
  }
  auto absent_is_done = [](Status s) {
    return s.code() == StatusCode::kNotFound ? Status::OK() : s;
  };
  for (const KvTxWrite& w : writes) {
    PDPM_RETURN_IF_ERROR(Write(w.key, [&] {
      CcehIndex* index = VnodeOf(w.key);
      if (w.hash) {
        VnodeHashes* hashes = HashesOf(w.key);
        if (w.fresh) PDPM_RETURN_IF_ERROR(absent_is_done(index->Delete(w.key)));
        // Sets before removals: the hash is never empty on the way.
        for (const auto& [field, value] : w.fields) {
          if (!value) continue;
          const std::pair<std::string_view, std::string_view> set{field, *value};
          uint64_t added = 0;
          PDPM_RETURN_IF_ERROR(hashes->Set(w.key, {&set, 1}, false, &added));
        }
        for (const auto& [field, value] : w.fields) {
          if (value) continue;
          uint64_t removed = 0;
          PDPM_RETURN_IF_ERROR(absent_is_done(hashes->Delete(w.key, {&field, 1}, &removed)));
        }
        bool changed = false;
        return VnodeSetExpiry(index, w.key, w.expire_at_ms, ExpiryCondition::kAlways, 0, &changed);
      }
      if (!w.value) return absent_is_done(index->Delete(w.key));
      PutOptions put;
      put.meta.expire_at_ms = w.expire_at_ms;
      return index->Put(w.key, *w.value, put);
    }));
  }
  return Status::OK();
}

}  // namespace pdpm::pdkvs
