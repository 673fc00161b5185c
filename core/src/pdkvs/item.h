// Key-value items of a pDKVS vnode: one PAllocator block (owner kKvStore)
// per item, written and persisted whole before any index slot points to it;
// an update writes a new item, only the expiry time changes in place. Format
// version 1, all integers little-endian:
//
//   +0   magic u32 "KVIT"
//   +4   crc32c u32 of bytes [8, 24) and [32, 40 + key_len + value_len):
//        everything but the magic, itself and the expiry time
//   +8   key_len u32 (at most kMaxKeySize)
//   +12  flags u32 (the caller's, stored and returned unchanged)
//   +16  value_len u64 (at most kMaxValueSize)
//   +24  expire_at_ms u64 (Unix time in ms; 0: never expires). The one
//        field that changes in a published item: by one atomic persisted
//        store (a TTL change), so it is outside the checksum.
//   +32  hash u64 (HashKey(key): lets recovery and the checker place an item
//        without hashing it again)
//   +40  key bytes, then value bytes
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "dsm/pallocator.h"

namespace pdpm::pdkvs {

inline constexpr uint32_t kItemMagic = 0x5449564b;  // "KVIT"
inline constexpr uint64_t kMaxKeySize = 64 << 10;
inline constexpr uint64_t kMaxValueSize = 512ull << 20;

// The flag of a hash's header item (ItemMeta::flags, pdkvs/hash.h); a
// string's item carries 0.
inline constexpr uint32_t kItemFlagHash = 1;
// The message of kFailedPrecondition for an operation on a key of the
// other type (Redis's WRONGTYPE).
inline constexpr std::string_view kWrongTypeMessage =
    "Operation against a key holding the wrong kind of value";

// What an item carries besides its key and value.
struct ItemMeta {
  uint64_t expire_at_ms = 0;  // 0: never expires
  uint32_t flags = 0;
};

struct ItemHeader {
  uint32_t magic;
  uint32_t crc;
  uint32_t key_len;
  uint32_t flags;
  uint64_t value_len;
  uint64_t expire_at_ms;
  uint64_t hash;
};
static_assert(sizeof(ItemHeader) == 40);

// The 64-bit hash of a key that places it in an index. Part of the format:
// never change it for format version 1.
uint64_t HashKey(std::string_view key);

// kTooLarge when the key or value is over its limit.
Status CheckItemSize(std::string_view key, uint64_t value_len);

// Allocates an item of `key` and `value` on the calling thread's core,
// writes and persists it. On success *offset is the durable item's block.
Status WriteItem(dsm::PAllocator* alloc, std::string_view key, std::string_view value,
                 const ItemMeta& meta, uint64_t hash, uint64_t* offset);

// A read-only view of a published item, valid while the item is.
class ItemView {
 public:
  ItemView() = default;
  // Validates bounds, magic and lengths of the item at `offset` (not the
  // checksum): kCorruption names what is wrong.
  static Status Open(const dsm::PAllocator& alloc, uint64_t offset, ItemView* out);

  const ItemHeader& header() const { return *header_; }
  std::string_view key() const;
  std::string_view value() const;
  ItemMeta meta() const { return ItemMeta{header_->expire_at_ms, header_->flags}; }
  bool ExpiredAt(uint64_t now_ms) const {
    return header_->expire_at_ms != 0 && header_->expire_at_ms <= now_ms;
  }
  uint64_t size() const { return sizeof(ItemHeader) + header_->key_len + header_->value_len; }
  // kCorruption unless the checksum matches.
  Status VerifyChecksum() const;

 private:
  const ItemHeader* header_ = nullptr;
};

}  // namespace pdpm::pdkvs
