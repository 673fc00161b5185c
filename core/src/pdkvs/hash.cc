#include "pdkvs/hash.h"

#include <cstring>
#include <unordered_set>

#include "pdkvs/vnode_ops.h"

namespace pdpm::pdkvs {
namespace {

constexpr size_t kHeaderSize = 16;

Status WrongType() {
  return Status::FailedPrecondition(kWrongTypeMessage);
}

}  // namespace

std::string EncodeHashHeader(uint64_t field_index) {
  std::string v(kHeaderSize, '\0');
  const uint32_t magic = kHashMagic, version = kHashFormatVersion;
  std::memcpy(v.data(), &magic, 4);
  std::memcpy(v.data() + 4, &version, 4);
  std::memcpy(v.data() + 8, &field_index, 8);
  return v;
}

CcehOptions FieldIndexOptions(const CcehOptions& vnode) {
  CcehOptions o;
  o.buckets_per_segment = 8;
  o.probe_buckets = 4;
  o.clock_ms = vnode.clock_ms;
  return o;
}

Status DecodeHashHeader(std::string_view value, uint64_t* field_index) {
  uint32_t magic = 0, version = 0;
  if (value.size() != kHeaderSize) {
    return Status::Corruption("hash header of " + std::to_string(value.size()) + " bytes");
  }
  std::memcpy(&magic, value.data(), 4);
  std::memcpy(&version, value.data() + 4, 4);
  std::memcpy(field_index, value.data() + 8, 8);
  if (magic != kHashMagic) return Status::Corruption("hash header: bad magic");
  if (version != kHashFormatVersion) {
    return Status::Corruption("hash header: unknown format version " + std::to_string(version));
  }
  return Status::OK();
}

VnodeHashes::VnodeHashes(dsm::PAllocator* alloc, CcehIndex* index, const CcehOptions& options)
    : alloc_(alloc), index_(index), field_options_(FieldIndexOptions(options)) {
  index_->SetDropHook([this](const ItemView& dropped) {
    uint64_t header = 0;
    if (dropped.meta().flags != kItemFlagHash || !DecodeHashHeader(dropped.value(), &header).ok()) {
      return;  // a bad header names no field index Open opened
    }
    std::lock_guard<std::mutex> lock(detached_mu_);
    detached_.push_back(header);
    any_detached_.store(true);
  });
}

VnodeHashes::~VnodeHashes() {
  index_->SetDropHook(nullptr);
}

Status VnodeHashes::Open(dsm::PAllocator* alloc, CcehIndex* index, const CcehOptions& options,
                         std::unique_ptr<VnodeHashes>* out) {
  std::unique_ptr<VnodeHashes> h(new VnodeHashes(alloc, index, options));
  std::vector<std::string> empty;
  ScanPage page;
  uint64_t cursor = 0;
  do {
    PDPM_RETURN_IF_ERROR(index->Scan(cursor, 1024, &page));
    for (const std::string& key : page.keys) {
      std::string value;
      ItemMeta meta;
      Status s = index->Get(key, &value, &meta);
      if (s.code() == StatusCode::kNotFound) continue;  // expired meanwhile
      PDPM_RETURN_IF_ERROR(s);
      if (meta.flags != kItemFlagHash) continue;
      uint64_t header = 0;
      PDPM_RETURN_IF_ERROR(DecodeHashHeader(value, &header).WithContext("hash " + key));
      std::unique_ptr<CcehIndex> fields;
      PDPM_RETURN_IF_ERROR(
          CcehIndex::Open(alloc, header, h->field_options_, &fields).WithContext("hash " + key));
      if (fields->Count() == 0) empty.push_back(key);
      h->open_.emplace(header, std::move(fields));
    }
    cursor = page.next_cursor;
  } while (!page.done);
  // A crash between the removal of a hash's last field and the removal of
  // the hash left it empty: finish the removal.
  for (const std::string& key : empty) PDPM_RETURN_IF_ERROR(h->Remove(key));
  *out = std::move(h);
  return Status::OK();
}

Status VnodeHashes::Find(std::string_view key, CcehIndex** fields) {
  std::string value;
  ItemMeta meta;
  PDPM_RETURN_IF_ERROR(index_->Get(key, &value, &meta));
  if (meta.flags != kItemFlagHash) return WrongType();
  uint64_t header = 0;
  PDPM_RETURN_IF_ERROR(DecodeHashHeader(value, &header));
  auto it = open_.find(header);
  if (it == open_.end()) return Status::Corruption("hash header names an index not opened");
  *fields = it->second.get();
  return Status::OK();
}

Status VnodeHashes::WithFields(std::string_view key, bool create,
                               const std::function<Status(CcehIndex* fields)>& op) {
  PDPM_RETURN_IF_ERROR(FreeDetached());
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    CcehIndex* index = nullptr;
    Status s = Find(key, &index);
    if (s.ok()) return op(index);
    if (s.code() != StatusCode::kNotFound || !create) return s;
  }
  // A new hash: its field index filled first, then published by its
  // header item (the commit); until then its blocks are leaks.
  Status s;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    CcehIndex* existing = nullptr;
    s = Find(key, &existing);
    if (s.ok()) return op(existing);  // created meanwhile
    if (s.code() != StatusCode::kNotFound) return s;
    PDPM_RETURN_IF_ERROR(CheckItemSize(key, kHeaderSize));
    uint64_t header = 0;
    std::unique_ptr<CcehIndex> index;
    PDPM_RETURN_IF_ERROR(CcehIndex::Create(alloc_, field_options_, &header, &index));
    s = op(index.get());
    bool published = false;
    if (s.ok() && index->Count() > 0) {
      PutOptions put;
      put.meta.flags = kItemFlagHash;
      // An expired key of either type is replaced (the index frees it; an
      // expired hash's field index is detached).
      s = index_->Put(key, EncodeHashHeader(header), put);
      published = s.ok();
    }
    if (published) {
      open_.emplace(header, std::move(index));
    } else {  // nothing names its blocks
      std::unordered_set<uint64_t> blocks;
      index->AddReachable(&blocks);
      index.reset();
      for (uint64_t b : blocks) (void)alloc_->Free(b, dsm::BlockOwner::kKvStore);
    }
  }
  Status freed = FreeDetached();
  return s.ok() ? freed : s;
}

Status VnodeHashes::Set(std::string_view key,
                        std::span<const std::pair<std::string_view, std::string_view>> fields,
                        bool if_absent, uint64_t* added) {
  *added = 0;
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, kHeaderSize));
  for (const auto& [f, v] : fields) PDPM_RETURN_IF_ERROR(CheckItemSize(f, v.size()));
  uint64_t count = 0;
  Status s = WithFields(key, /*create=*/true, [&](CcehIndex* index) -> Status {
    for (const auto& [f, v] : fields) {
      PutOptions put;
      put.mode = if_absent ? PutMode::kIfAbsent : PutMode::kAlways;
      bool existed = false;
      if (!if_absent) PDPM_RETURN_IF_ERROR(index->Exists(f, &existed));
      Status st = index->Put(f, v, put);
      if (if_absent && st.code() == StatusCode::kAlreadyExists) continue;
      PDPM_RETURN_IF_ERROR(st);
      if (!existed) ++count;
    }
    return Status::OK();
  });
  if (s.ok()) *added = count;
  return s;
}

Status VnodeHashes::Get(std::string_view key, std::string_view field, std::string* value) {
  return WithFields(key, /*create=*/false,
                    [&](CcehIndex* index) { return index->Get(field, value); });
}

Status VnodeHashes::GetFields(std::string_view key, std::span<const std::string_view> fields,
                              std::vector<std::optional<std::string>>* values) {
  values->assign(fields.size(), std::nullopt);
  Status s = WithFields(key, /*create=*/false, [&](CcehIndex* index) -> Status {
    for (size_t i = 0; i < fields.size(); ++i) {
      std::string v;
      Status st = index->Get(fields[i], &v);
      if (st.code() == StatusCode::kNotFound) continue;
      PDPM_RETURN_IF_ERROR(st);
      (*values)[i] = std::move(v);
    }
    return Status::OK();
  });
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

Status VnodeHashes::Delete(std::string_view key, std::span<const std::string_view> fields,
                           uint64_t* removed) {
  *removed = 0;
  bool emptied = false;
  Status s = WithFields(key, /*create=*/false, [&](CcehIndex* index) -> Status {
    for (std::string_view f : fields) {
      Status st = index->Delete(f);
      if (st.code() == StatusCode::kNotFound) continue;
      PDPM_RETURN_IF_ERROR(st);
      ++*removed;
    }
    emptied = index->Count() == 0;
    return Status::OK();
  });
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  if (!s.ok() || !emptied) return s;
  std::unique_lock<std::shared_mutex> lock(mu_);
  CcehIndex* index = nullptr;
  s = Find(key, &index);
  if (s.code() == StatusCode::kNotFound) return Status::OK();  // removed meanwhile
  PDPM_RETURN_IF_ERROR(s);
  if (index->Count() != 0) return Status::OK();  // filled again meanwhile
  lock.unlock();
  return Remove(key);
}

Status VnodeHashes::Length(std::string_view key, uint64_t* fields) {
  *fields = 0;
  Status s = WithFields(key, /*create=*/false, [&](CcehIndex* index) {
    *fields = index->Count();
    return Status::OK();
  });
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

Status VnodeHashes::IncrBy(std::string_view key, std::string_view field, int64_t delta,
                           int64_t* result) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(field, 20));
  return WithFields(key, /*create=*/true,
                    [&](CcehIndex* index) { return VnodeIncrBy(index, field, delta, result); });
}

Status VnodeHashes::IncrByFloat(std::string_view key, std::string_view field, long double incr,
                                std::string* result) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(field, 0));
  return WithFields(key, /*create=*/true,
                    [&](CcehIndex* index) { return VnodeIncrByFloat(index, field, incr, result); });
}

Status VnodeHashes::Scan(std::string_view key, uint64_t cursor, size_t count, FieldPage* page) {
  page->fields.clear();
  page->next_cursor = 0;
  page->done = true;
  Status s = WithFields(key, /*create=*/false, [&](CcehIndex* index) -> Status {
    ScanPage keys;
    PDPM_RETURN_IF_ERROR(index->Scan(cursor, count, &keys));
    for (std::string& f : keys.keys) {
      std::string v;
      Status st = index->Get(f, &v);
      if (st.code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      PDPM_RETURN_IF_ERROR(st);
      page->fields.emplace_back(std::move(f), std::move(v));
    }
    page->next_cursor = keys.next_cursor;
    page->done = keys.done;
    return Status::OK();
  });
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

Status VnodeHashes::Remove(std::string_view key) {
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    std::string value;
    ItemMeta meta;
    PDPM_RETURN_IF_ERROR(index_->Get(key, &value, &meta));
    if (meta.flags != kItemFlagHash) return Status::NotFound("the key holds no hash");
    // The commit: from here the hash is gone, its field index detached (the
    // drop hook).
    PDPM_RETURN_IF_ERROR(index_->Delete(key));
  }
  return FreeDetached();
}

Status VnodeHashes::FreeDetached() {
  if (!any_detached_.load()) return Status::OK();
  std::unique_lock<std::shared_mutex> lock(mu_);
  std::vector<uint64_t> detached;
  {
    std::lock_guard<std::mutex> d(detached_mu_);
    detached.swap(detached_);
    any_detached_.store(false);
  }
  for (uint64_t header : detached) PDPM_RETURN_IF_ERROR(Destroy(header));
  return Status::OK();
}

Status VnodeHashes::Destroy(uint64_t header_offset) {
  auto it = open_.find(header_offset);
  if (it == open_.end()) return Status::OK();  // never published (a failed creation)
  std::unordered_set<uint64_t> blocks;
  it->second->AddReachable(&blocks);
  open_.erase(it);
  for (uint64_t b : blocks) PDPM_RETURN_IF_ERROR(alloc_->Free(b, dsm::BlockOwner::kKvStore));
  return Status::OK();
}

std::vector<CcehIndex*> VnodeHashes::indexes() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<CcehIndex*> out;
  out.reserve(open_.size());
  for (const auto& [header, index] : open_) out.push_back(index.get());
  return out;
}

void VnodeHashes::Check(dsm::PAllocator* alloc, CcehCheckReport* vnode) {
  for (const auto& [key, value] : vnode->hashes) {
    uint64_t header = 0;
    Status s = DecodeHashHeader(value, &header);
    if (!s.ok()) {
      vnode->violations.push_back("hash " + key + ": " + s.ToString());
      continue;
    }
    if (vnode->reachable.count(header) != 0) {
      vnode->violations.push_back("hash " + key + ": its field index is reached twice");
      continue;
    }
    CcehCheckReport fields = CcehIndex::Check(alloc, header);
    for (const std::string& v : fields.violations) {
      vnode->violations.push_back("hash " + key + ": " + v);
    }
    // No field: a removal a crash interrupted, which Open finishes.
    if (fields.ok() && fields.items == 0) ++vnode->empty_hashes;
    if (!fields.hashes.empty()) {
      vnode->violations.push_back("hash " + key + ": a field item carries the hash flag");
    }
    for (uint64_t b : fields.reachable) {
      if (!vnode->reachable.insert(b).second) {
        vnode->violations.push_back("hash " + key + ": block reached twice");
        break;
      }
    }
    vnode->interrupted_splits += fields.interrupted_splits;
    vnode->stale_slots += fields.stale_slots;
  }
}

}  // namespace pdpm::pdkvs
