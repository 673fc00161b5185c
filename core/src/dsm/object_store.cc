#include "dsm/object_store.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>

namespace pdpm::dsm {
namespace {

std::string IdString(const ObjectId& id) {
  char buf[40];
  snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(id.hi),
           static_cast<unsigned long long>(id.lo));
  return buf;
}

bool IdLess(const ObjectId& a, const ObjectId& b) {
  return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
}

}  // namespace

Status ObjectStoreTable::Create(PAllocator* alloc, const ObjectStoreOptions& options,
                                std::unique_ptr<ObjectStoreTable>* out) {
  if (options.root_slot < 0 || options.root_slot >= kNumRoots) {
    return Status::InvalidArgument("root slot out of range");
  }
  if (alloc->GetRoot(options.root_slot) != 0) {
    return Status::AlreadyExists("the region already holds an object-store table");
  }
  // With no table published, every object-store block is a leftover.
  PDPM_RETURN_IF_ERROR(alloc->ReclaimUnreachable(BlockOwner::kObjectStore, {}, nullptr));
  uint64_t root;
  PDPM_RETURN_IF_ERROR(HashIndex::Create(alloc, options.bucket_count, &root));
  PDPM_RETURN_IF_ERROR(alloc->SetRoot(options.root_slot, root));
  std::unique_ptr<HashIndex> index;
  PDPM_RETURN_IF_ERROR(HashIndex::Open(alloc, root, &index));
  out->reset(new ObjectStoreTable(alloc, options, std::move(index)));
  return Status::OK();
}

Status ObjectStoreTable::Open(PAllocator* alloc, const ObjectStoreOptions& options,
                              std::unique_ptr<ObjectStoreTable>* out,
                              ObjectStoreRecovery* recovery) {
  if (options.root_slot < 0 || options.root_slot >= kNumRoots) {
    return Status::InvalidArgument("root slot out of range");
  }
  uint64_t root = alloc->GetRoot(options.root_slot);
  if (root == 0) return Status::NotFound("the region holds no object-store table");
  std::unique_ptr<HashIndex> index;
  PDPM_RETURN_IF_ERROR(HashIndex::Open(alloc, root, &index));
  std::unique_ptr<ObjectStoreTable> t(new ObjectStoreTable(alloc, options, std::move(index)));
  ObjectStoreRecovery rec;
  Status status;
  t->index_->ForEach([&](uint64_t e) {
    if (!status.ok()) return;
    const IndexEntry* entry = t->index_->Entry(e);
    ObjectId id{entry->id_hi, entry->id_lo};
    status = t->lists_.Validate(entry->object, id).WithContext("object " + IdString(id));
    if (!status.ok()) return;
    rec.repaired_links += t->lists_.RebuildTowers(entry->object);
    ++rec.objects;
  });
  PDPM_RETURN_IF_ERROR(status);
  std::unordered_set<uint64_t> reachable;
  t->TraceLocked(&reachable);
  PDPM_RETURN_IF_ERROR(
      alloc->ReclaimUnreachable(BlockOwner::kObjectStore, reachable, &rec.reclaimed_blocks));
  t->objects_ = rec.objects;
  if (recovery != nullptr) *recovery = rec;
  *out = std::move(t);
  return Status::OK();
}

Status ObjectStoreTable::HeaderOf(const ObjectId& id, uint64_t* header) const {
  uint64_t e = index_->Find(id);
  if (e == 0) return Status::NotFound("no object " + IdString(id));
  *header = index_->Entry(e)->object;
  return Status::OK();
}

Status ObjectStoreTable::Put(const ObjectId& id, std::string_view value) {
  if (value.size() > kMaxObjectSize) {
    return Status::TooLarge("object of " + std::to_string(value.size()) +
                            " bytes exceeds the 64 MiB limit");
  }
  std::unique_lock lock(mu_);
  uint64_t header;
  PDPM_RETURN_IF_ERROR(lists_.Build(id, value, &header));
  uint64_t e = index_->Find(id);
  if (e == 0) {
    Status s = index_->Insert(id, header);
    if (!s.ok()) {
      PDPM_RETURN_IF_ERROR(lists_.Destroy(header));
      return s;
    }
    objects_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  uint64_t old = index_->Entry(e)->object;
  index_->SetObject(e, header);
  return lists_.Destroy(old);
}

Status ObjectStoreTable::Write(const ObjectId& id, uint64_t offset, std::string_view data) {
  if (offset > kMaxObjectSize || data.size() > kMaxObjectSize - offset) {
    return Status::TooLarge("write would grow the object past the 64 MiB limit");
  }
  std::unique_lock lock(mu_);
  uint64_t header;
  PDPM_RETURN_IF_ERROR(HeaderOf(id, &header));
  return lists_.Write(header, offset, data);
}

Status ObjectStoreTable::Read(const ObjectId& id, uint64_t offset, uint64_t length,
                              char* out) const {
  std::shared_lock lock(mu_);
  uint64_t header;
  PDPM_RETURN_IF_ERROR(HeaderOf(id, &header));
  uint64_t size = lists_.Size(header);
  if (offset > size || length > size - offset) {
    return Status::OutOfRange("read of [" + std::to_string(offset) + ", +" +
                              std::to_string(length) + ") past the end of a " +
                              std::to_string(size) + "-byte object");
  }
  lists_.Read(header, offset, length, out);
  return Status::OK();
}

Status ObjectStoreTable::Get(const ObjectId& id, std::string* value) const {
  std::shared_lock lock(mu_);
  uint64_t header;
  PDPM_RETURN_IF_ERROR(HeaderOf(id, &header));
  value->resize(lists_.Size(header));
  lists_.Read(header, 0, value->size(), value->data());
  return Status::OK();
}

Status ObjectStoreTable::Truncate(const ObjectId& id, uint64_t size) {
  std::unique_lock lock(mu_);
  uint64_t header;
  PDPM_RETURN_IF_ERROR(HeaderOf(id, &header));
  return lists_.Truncate(header, size);
}

Status ObjectStoreTable::Size(const ObjectId& id, uint64_t* size) const {
  std::shared_lock lock(mu_);
  uint64_t header;
  PDPM_RETURN_IF_ERROR(HeaderOf(id, &header));
  *size = lists_.Size(header);
  return Status::OK();
}

Status ObjectStoreTable::Delete(const ObjectId& id) {
  std::unique_lock lock(mu_);
  uint64_t header;
  Status s = index_->Remove(id, &header);
  if (s.code() == StatusCode::kNotFound) return Status::NotFound("no object " + IdString(id));
  PDPM_RETURN_IF_ERROR(s);
  objects_.fetch_sub(1, std::memory_order_relaxed);
  return lists_.Destroy(header);
}

void ObjectStoreTable::ListIds(uint32_t tag, const ObjectId& start, size_t max,
                               std::vector<ObjectId>* out) const {
  std::shared_lock lock(mu_);
  KeepSmallest(
      max,
      [&](const ObjectId& id) -> std::optional<ObjectId> {
        if ((id.hi >> 32) != tag || IdLess(id, start)) return std::nullopt;
        return id;
      },
      IdLess, out);
}

void ObjectStoreTable::ListIdsByPosition(
    const std::function<uint64_t(const ObjectId&)>& position_of, const TableRange& range,
    const PositionedId* after, size_t max, std::vector<PositionedId>* out) const {
  auto less = [](const PositionedId& a, const PositionedId& b) {
    return a.position != b.position ? a.position < b.position : IdLess(a.id, b.id);
  };
  std::shared_lock lock(mu_);
  KeepSmallest(
      max,
      [&](const ObjectId& id) -> std::optional<PositionedId> {
        PositionedId item{position_of(id), id};
        if (!range.Covers(item.position) || (after != nullptr && !less(*after, item))) {
          return std::nullopt;
        }
        return item;
      },
      less, out);
}

template <typename T, typename Pick, typename Less>
void ObjectStoreTable::KeepSmallest(size_t max, Pick pick, Less less, std::vector<T>* out) const {
  out->clear();
  if (max == 0) return;
  // The index is hashed, not ordered: keep the `max` smallest picked items
  // in a max-heap.
  index_->ForEach([&](uint64_t e) {
    const IndexEntry* entry = index_->Entry(e);
    std::optional<T> item = pick(ObjectId{entry->id_hi, entry->id_lo});
    if (!item) return;
    if (out->size() == max) {
      if (!less(*item, out->front())) return;
      std::pop_heap(out->begin(), out->end(), less);
      out->back() = *item;
    } else {
      out->push_back(*item);
    }
    std::push_heap(out->begin(), out->end(), less);
  });
  std::sort_heap(out->begin(), out->end(), less);
}

void ObjectStoreTable::Trace(std::unordered_set<uint64_t>* blocks) const {
  std::shared_lock lock(mu_);
  TraceLocked(blocks);
}

void ObjectStoreTable::TraceLocked(std::unordered_set<uint64_t>* blocks) const {
  blocks->insert(index_->root());
  blocks->insert(index_->buckets());
  index_->ForEach([&](uint64_t e) {
    blocks->insert(e);
    lists_.Trace(index_->Entry(e)->object, blocks);
  });
}

}  // namespace pdpm::dsm
