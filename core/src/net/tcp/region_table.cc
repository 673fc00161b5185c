#include "net/tcp/region_table.h"

#include <atomic>

namespace pdpm::net::tcp {

RegionTable::RegionTable(std::function<bool()> allowed)
    : allowed_(std::move(allowed)), rng_(std::random_device{}()) {}
RegionTable::RegionTable(uint32_t seed) : rng_(seed) {}

std::shared_ptr<RegionEntry> RegionTable::Add(char* data, size_t size, uint32_t access,
                                              PersistFn persist) {
  auto entry = std::make_shared<RegionEntry>();
  entry->data = data;
  entry->size = size;
  entry->access = access;
  entry->persist = std::move(persist);
  std::unique_lock lock(mu_);
  uint32_t key;
  do {
    key = rng_();
  } while (key == 0 || entries_.count(key) != 0);
  entry->key = key;
  entries_.emplace(key, entry);
  return entry;
}

void RegionTable::Remove(const std::shared_ptr<RegionEntry>& entry) {
  {
    std::unique_lock lock(mu_);
    entries_.erase(entry->key);
  }
  std::unique_lock lock(entry->mu);
  entry->dead = true;
}

Status RegionTable::Resolve(uint32_t key, uint64_t offset, uint64_t length, uint32_t access,
                            std::shared_ptr<RegionEntry>* out) const {
  std::shared_lock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return Status::PermissionDenied("no registered range with key " + std::to_string(key));
  }
  const RegionEntry& e = *it->second;
  if ((e.access & access) != access) {
    return Status::PermissionDenied("range with key " + std::to_string(key) +
                                    " does not grant this access");
  }
  if (offset > e.size || length > e.size - offset) {
    return Status::OutOfRange("[" + std::to_string(offset) + ", +" + std::to_string(length) +
                              ") outside range of " + std::to_string(e.size) + " bytes");
  }
  PDPM_RETURN_IF_ERROR(Allowed(e));
  *out = it->second;
  return Status::OK();
}

Status RegionTable::Allowed(const RegionEntry& entry) const {
  if ((entry.access & kAccessGated) != 0 && allowed_ && !allowed_()) {
    return Status::Unavailable("range with key " + std::to_string(entry.key) +
                               " is not served now");
  }
  return Status::OK();
}

Status ExecuteAtomic(const RegionTable& table, bool compare_swap, uint32_t key, uint64_t offset,
                     uint64_t compare_or_add, uint64_t swap, uint64_t* old_value) {
  if (offset % 8 != 0) return Status::InvalidArgument("atomic on a misaligned word");
  std::shared_ptr<RegionEntry> entry;
  PDPM_RETURN_IF_ERROR(table.Resolve(key, offset, 8, kRemoteAtomic, &entry));
  std::shared_lock lock(entry->mu);
  if (entry->dead) return Status::PermissionDenied("range deregistered");
  char* p = entry->data + offset;
  if (reinterpret_cast<uintptr_t>(p) % 8 != 0) {
    return Status::InvalidArgument("atomic on a misaligned word (range not 8-aligned)");
  }
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(p));
  if (compare_swap) {
    uint64_t expected = compare_or_add;
    word.compare_exchange_strong(expected, swap, std::memory_order_acq_rel);
    *old_value = expected;
  } else {
    *old_value = word.fetch_add(compare_or_add, std::memory_order_acq_rel);
  }
  return Status::OK();
}

}  // namespace pdpm::net::tcp
