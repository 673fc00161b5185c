#include "dsm/hash_index.h"

#include <cstddef>
#include <cstring>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>

namespace pdpm::dsm {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint32_t RootCrc(const IndexRoot& r) {
  return Crc32c(&r, offsetof(IndexRoot, crc));
}
uint32_t EntryCrc(const IndexEntry& e) {
  return Crc32c(&e, offsetof(IndexEntry, crc));
}

}  // namespace

uint32_t BucketOf(const ObjectId& id, uint32_t bucket_count) {
  return static_cast<uint32_t>(Mix(id.hi ^ Mix(id.lo)) % bucket_count);
}

Status CheckIndexRoot(const char* base, uint64_t region_size, uint64_t root) {
  if (!RecordInBounds(region_size, root, sizeof(IndexRoot))) {
    return Status::Corruption("index root offset outside the region");
  }
  auto* r = reinterpret_cast<const IndexRoot*>(base + root);
  if (r->magic != kIndexRootMagic) return Status::Corruption("index root: bad magic");
  if (r->version != kFormatVersion) return Status::Corruption("index root: unsupported version");
  if (r->crc != RootCrc(*r)) return Status::Corruption("index root: crc mismatch");
  if (r->bucket_count == 0 || r->bucket_count > kMaxBuckets ||
      !RecordInBounds(region_size, r->buckets, uint64_t{r->bucket_count} * 8)) {
    return Status::Corruption("index root: bucket array outside the region");
  }
  return Status::OK();
}

Status CheckIndexEntry(const char* base, uint64_t region_size, uint64_t entry) {
  if (!RecordInBounds(region_size, entry, sizeof(IndexEntry))) {
    return Status::Corruption("index entry offset outside the region");
  }
  auto* e = reinterpret_cast<const IndexEntry*>(base + entry);
  if (e->magic != kIndexEntryMagic) return Status::Corruption("index entry: bad magic");
  if (e->crc != EntryCrc(*e)) return Status::Corruption("index entry: crc mismatch");
  return Status::OK();
}

Status HashIndex::Create(PAllocator* alloc, uint32_t bucket_count, uint64_t* root) {
  if (bucket_count == 0 || bucket_count > kMaxBuckets) {
    return Status::InvalidArgument("bucket count must be in [1, 2^24]");
  }
  uint64_t buckets;
  uint64_t bytes = uint64_t{bucket_count} * 8;
  PDPM_RETURN_IF_ERROR(
      alloc->Allocate(bytes, BlockOwner::kObjectStore, PAllocator::kCurrentCore, &buckets));
  memset(alloc->At<char>(buckets), 0, bytes);
  alloc->Persist(alloc->At<char>(buckets), bytes);
  uint64_t r;
  Status s =
      alloc->Allocate(sizeof(IndexRoot), BlockOwner::kObjectStore, PAllocator::kCurrentCore, &r);
  if (!s.ok()) {
    PDPM_RETURN_IF_ERROR(alloc->Free(buckets, BlockOwner::kObjectStore));
    return s;
  }
  IndexRoot* p = alloc->At<IndexRoot>(r);
  memset(p, 0, sizeof(*p));
  p->magic = kIndexRootMagic;
  p->version = kFormatVersion;
  p->bucket_count = bucket_count;
  p->buckets = buckets;
  p->crc = RootCrc(*p);
  alloc->Persist(p, sizeof(*p));
  *root = r;
  return Status::OK();
}

Status HashIndex::Open(PAllocator* alloc, uint64_t root, std::unique_ptr<HashIndex>* out) {
  uint64_t region_size = alloc->region_size();
  PDPM_RETURN_IF_ERROR(CheckIndexRoot(alloc->base(), region_size, root));
  const IndexRoot* r = alloc->At<IndexRoot>(root);
  const uint64_t* heads = alloc->At<uint64_t>(r->buckets);
  // Every entry sits in one chain; more steps than entries could fit in the
  // region means a cycle.
  uint64_t budget = region_size / sizeof(IndexEntry);
  std::unordered_set<uint64_t> seen;
  std::set<std::pair<uint64_t, uint64_t>> ids;
  for (uint32_t b = 0; b < r->bucket_count; ++b) {
    for (uint64_t e = heads[b]; e != 0;) {
      PDPM_RETURN_IF_ERROR(CheckIndexEntry(alloc->base(), region_size, e)
                               .WithContext("bucket " + std::to_string(b)));
      const IndexEntry* entry = alloc->At<IndexEntry>(e);
      if (BucketOf(ObjectId{entry->id_hi, entry->id_lo}, r->bucket_count) != b) {
        return Status::Corruption("index entry in the wrong bucket " + std::to_string(b));
      }
      if (!seen.insert(e).second || budget-- == 0) {
        return Status::Corruption("index chain of bucket " + std::to_string(b) + " has a cycle");
      }
      if (!ids.insert({entry->id_hi, entry->id_lo}).second) {
        return Status::Corruption("two index entries for one object ID");
      }
      e = entry->next;
    }
  }
  out->reset(new HashIndex(alloc, root));
  return Status::OK();
}

uint64_t* HashIndex::bucket(const ObjectId& id) const {
  const IndexRoot* r = root_ptr();
  return alloc_->At<uint64_t>(r->buckets) + BucketOf(id, r->bucket_count);
}

uint64_t HashIndex::Find(const ObjectId& id) const {
  for (uint64_t e = *bucket(id); e != 0; e = Entry(e)->next) {
    const IndexEntry* entry = Entry(e);
    if (entry->id_hi == id.hi && entry->id_lo == id.lo) return e;
  }
  return 0;
}

Status HashIndex::Insert(const ObjectId& id, uint64_t object) {
  uint64_t e;
  PDPM_RETURN_IF_ERROR(
      alloc_->Allocate(sizeof(IndexEntry), BlockOwner::kObjectStore, PAllocator::kCurrentCore, &e));
  uint64_t* head = bucket(id);
  IndexEntry* entry = Entry(e);
  memset(entry, 0, sizeof(*entry));
  entry->magic = kIndexEntryMagic;
  entry->id_hi = id.hi;
  entry->id_lo = id.lo;
  entry->crc = EntryCrc(*entry);
  entry->next = *head;
  entry->object = object;
  alloc_->Persist(entry, sizeof(*entry));
  alloc_->StoreAndPersist(head, e);
  return Status::OK();
}

void HashIndex::SetObject(uint64_t entry, uint64_t object) {
  alloc_->StoreAndPersist(&Entry(entry)->object, object);
}

Status HashIndex::Remove(const ObjectId& id, uint64_t* object) {
  for (uint64_t* link = bucket(id); *link != 0; link = &Entry(*link)->next) {
    IndexEntry* entry = Entry(*link);
    if (entry->id_hi != id.hi || entry->id_lo != id.lo) continue;
    uint64_t e = *link;
    *object = entry->object;
    alloc_->StoreAndPersist(link, entry->next);
    return alloc_->Free(e, BlockOwner::kObjectStore);
  }
  return Status::NotFound("no such object");
}

void HashIndex::ForEach(const std::function<void(uint64_t)>& fn) const {
  const IndexRoot* r = root_ptr();
  const uint64_t* heads = alloc_->At<uint64_t>(r->buckets);
  for (uint32_t b = 0; b < r->bucket_count; ++b) {
    for (uint64_t e = heads[b]; e != 0; e = Entry(e)->next) fn(e);
  }
}

}  // namespace pdpm::dsm
