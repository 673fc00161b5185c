#include "pdkvs/item.h"

#include <cstddef>
#include <cstring>

#include "common/crc32c.h"

namespace pdpm::pdkvs {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  x ^= x >> 33;
  return x;
}

uint32_t ItemCrc(const ItemHeader* h) {
  const char* p = reinterpret_cast<const char*>(h);
  constexpr size_t kExpiry = offsetof(ItemHeader, expire_at_ms);
  constexpr size_t kAfterExpiry = kExpiry + sizeof(uint64_t);
  uint32_t crc = Crc32c(p + 8, kExpiry - 8);
  return Crc32cExtend(crc, p + kAfterExpiry,
                      sizeof(ItemHeader) - kAfterExpiry + h->key_len + h->value_len);
}

}  // namespace

uint64_t HashKey(std::string_view key) {
  // Eight bytes at a time, each word folded into the state through a
  // multiply-xorshift mixer; the length seeds the state so that keys which
  // differ only in trailing zero bytes differ.
  uint64_t h = Mix(key.size() + 0x9e3779b97f4a7c15ull);
  size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, key.data() + i, 8);
    h = Mix(h ^ w) + 0x9e3779b97f4a7c15ull;
  }
  if (i < key.size()) {
    uint64_t w = 0;
    std::memcpy(&w, key.data() + i, key.size() - i);
    h = Mix(h ^ w ^ 0xa5a5a5a5a5a5a5a5ull);
  }
  return Mix(h);
}

Status CheckItemSize(std::string_view key, uint64_t value_len) {
  if (key.size() > kMaxKeySize) {
    return Status::TooLarge("key of " + std::to_string(key.size()) + " bytes is over the " +
                            std::to_string(kMaxKeySize) + " byte limit");
  }
  if (value_len > kMaxValueSize) {
    return Status::TooLarge("value of " + std::to_string(value_len) + " bytes is over the " +
                            std::to_string(kMaxValueSize) + " byte limit");
  }
  return Status::OK();
}

Status WriteItem(dsm::PAllocator* alloc, std::string_view key, std::string_view value,
                 const ItemMeta& meta, uint64_t hash, uint64_t* offset) {
  PDPM_RETURN_IF_ERROR(CheckItemSize(key, value.size()));
  uint64_t size = sizeof(ItemHeader) + key.size() + value.size();
  uint64_t off;
  PDPM_RETURN_IF_ERROR(
      alloc->Allocate(size, dsm::BlockOwner::kKvStore, dsm::PAllocator::kCurrentCore, &off));
  auto* h = alloc->At<ItemHeader>(off);
  h->magic = kItemMagic;
  h->key_len = static_cast<uint32_t>(key.size());
  h->flags = meta.flags;
  h->value_len = value.size();
  h->expire_at_ms = meta.expire_at_ms;
  h->hash = hash;
  char* data = reinterpret_cast<char*>(h + 1);
  if (!key.empty()) std::memcpy(data, key.data(), key.size());
  if (!value.empty()) std::memcpy(data + key.size(), value.data(), value.size());
  h->crc = ItemCrc(h);
  alloc->Persist(h, size);
  *offset = off;
  return Status::OK();
}

Status ItemView::Open(const dsm::PAllocator& alloc, uint64_t offset, ItemView* out) {
  const uint64_t region = alloc.region_size();
  if (!dsm::RecordInBounds(region, offset, sizeof(ItemHeader))) {
    return Status::Corruption("item " + dsm::HexOffset(offset) + " is outside the region");
  }
  const auto* h = alloc.At<const ItemHeader>(offset);
  if (h->magic != kItemMagic) {
    return Status::Corruption("item " + dsm::HexOffset(offset) + " has a bad magic");
  }
  if (h->key_len > kMaxKeySize || h->value_len > kMaxValueSize ||
      h->key_len + h->value_len > region - offset - sizeof(ItemHeader)) {
    return Status::Corruption("item " + dsm::HexOffset(offset) + " has bad lengths");
  }
  out->header_ = h;
  return Status::OK();
}

std::string_view ItemView::key() const {
  return {reinterpret_cast<const char*>(header_ + 1), header_->key_len};
}

std::string_view ItemView::value() const {
  return {reinterpret_cast<const char*>(header_ + 1) + header_->key_len, header_->value_len};
}

Status ItemView::VerifyChecksum() const {
  if (ItemCrc(header_) != header_->crc) {
    return Status::Corruption("item with key of " + std::to_string(header_->key_len) +
                              " bytes fails its checksum");
  }
  return Status::OK();
}

}  // namespace pdpm::pdkvs
