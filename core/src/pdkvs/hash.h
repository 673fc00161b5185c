// Redis hashes in a pDKVS vnode (docs/pdkvs.md "Hashes"): the storage of a
// hash of any size, where one field's change writes only that field.
//
// A hash is a *header item* in the vnode's index under the hash's key
// (ItemMeta::flags kItemFlagHash; the expiry of the hash is that item's)
// whose value names the hash's own CcehIndex, the *field index*, in the
// same region: one item per field (key: the field, value: its value). Format
// of the header item's value (version 1, little-endian, 16 bytes):
//
//   +0  magic u32 "KVHS"
//   +4  version u32 (1)
//   +8  field index header offset u64
//
// The field count is the field index's (counted by its Open).
//
// Contract:
// - Every call that returns OK is durable. One field's put or delete is
//   atomic across a crash (CcehIndex); a call naming several fields may
//   leave a prefix of them applied after a crash (it was not
//   acknowledged). A hash appears at the store of its header item, after
//   its first fields are in its field index, and disappears at the removal
//   of that item, before its field index is freed: a crash in between
//   leaves unreachable blocks, freed by the next Open's reclaim.
// - A hash is never empty: the removal of its last field removes it (a
//   crash in between leaves an empty one, which Open removes).
// - Errors: kNotFound (no such hash or field), kFailedPrecondition with
//   kWrongTypeMessage (the key holds a string), kTooLarge, kResourceExhausted,
//   kCorruption (a bad header item).
// - Thread-safe: field reads and writes of one vnode run at once; creating
//   and removing hashes is serialized with them by the object's lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "dsm/pallocator.h"
#include "pdkvs/cceh.h"

namespace pdpm::pdkvs {

inline constexpr uint32_t kHashMagic = 0x5348564b;  // "KVHS"
inline constexpr uint32_t kHashFormatVersion = 1;

// The field index's geometry: small segments, so that a hash of a few
// fields costs about a kilobyte, while a hash of millions splits as any
// index does.
CcehOptions FieldIndexOptions(const CcehOptions& vnode);

// A header item's value naming the field index at `field_index`.
std::string EncodeHashHeader(uint64_t field_index);
// Decodes a header item's value: kCorruption unless it is a version-1
// header.
Status DecodeHashHeader(std::string_view value, uint64_t* field_index);

class VnodeHashes {
 public:
  // Opens the hashes of the vnode `index` (in `alloc`'s region): every
  // header item's field index, removing a hash left empty by a crash.
  // Afterwards `indexes()` lists the field indexes, which the region's
  // CcehIndex::ReclaimUnreachable must be given with the vnode's index.
  // Installs the index's drop hook (CcehIndex::SetDropHook): a header item
  // the index itself drops (a string written over the hash, a delete, an
  // expiry, a flush) detaches its field index, freed by FreeDetached.
  static Status Open(dsm::PAllocator* alloc, CcehIndex* index, const CcehOptions& options,
                     std::unique_ptr<VnodeHashes>* out);
  ~VnodeHashes();
  VnodeHashes(const VnodeHashes&) = delete;
  VnodeHashes& operator=(const VnodeHashes&) = delete;

  // HSET (if_absent false) and HSETNX (true, one field): sets each field,
  // creating the hash if absent; *added counts the fields that were new
  // (HSETNX: 0 when the field existed, nothing changed).
  Status Set(std::string_view key,
             std::span<const std::pair<std::string_view, std::string_view>> fields, bool if_absent,
             uint64_t* added);
  // HGET: kNotFound when the hash or the field is absent.
  Status Get(std::string_view key, std::string_view field, std::string* value);
  // HMGET: one answer per field, nullopt for an absent one (all of them
  // for an absent hash).
  Status GetFields(std::string_view key, std::span<const std::string_view> fields,
                   std::vector<std::optional<std::string>>* values);
  // HDEL: *removed counts the fields that existed; removes the hash with
  // its last field.
  Status Delete(std::string_view key, std::span<const std::string_view> fields, uint64_t* removed);
  // HLEN: 0 for an absent hash.
  Status Length(std::string_view key, uint64_t* fields);
  // HINCRBY: the field's value as a 64-bit integer plus `delta` (absent:
  // 0 + delta). kInvalidArgument when the value is not an integer,
  // kOutOfRange on overflow.
  Status IncrBy(std::string_view key, std::string_view field, int64_t delta, int64_t* result);
  // HINCRBYFLOAT: the field's value as a long double plus `incr`, stored
  // and returned as Redis prints it (VnodeIncrByFloat's rules).
  Status IncrByFloat(std::string_view key, std::string_view field, long double incr,
                     std::string* result);
  // HSCAN, HGETALL, HKEYS, HVALS: a page of fields with their values, from
  // `cursor` (the field index's scan cursor: every field present for the
  // whole scan returned once). An absent hash is an empty, done page.
  struct FieldPage {
    std::vector<std::pair<std::string, std::string>> fields;
    uint64_t next_cursor = 0;
    bool done = true;
  };
  Status Scan(std::string_view key, uint64_t cursor, size_t count, FieldPage* page);
  // Removes the hash `key` (DEL): its header item, then every block of its
  // field index. kNotFound when the key holds no hash.
  Status Remove(std::string_view key);
  // Frees the field indexes whose header item the vnode's index dropped
  // (the drop hook). The owner calls it after each write of the vnode it
  // runs itself (a string's set or delete, an expiry step, a flush) so
  // their blocks are freed in the same step; every hash operation calls it
  // too. Not while the caller holds an index lock.
  Status FreeDetached();
  // Every field index, for CcehIndex::ReclaimUnreachable (not while
  // hashes are created or removed).
  std::vector<CcehIndex*> indexes() const;

  // Offline check of every hash of the vnode whose check is `vnode` (its
  // hash header items): each header's format and its field index
  // (CcehIndex::Check), no block reached twice. Adds their blocks to
  // vnode->reachable, their problems to its violations and the hashes
  // left empty by a crash (Open removes them) to its empty_hashes.
  static void Check(dsm::PAllocator* alloc, CcehCheckReport* vnode);

 private:
  VnodeHashes(dsm::PAllocator* alloc, CcehIndex* index, const CcehOptions& options);
  // The field index of hash `key`; kNotFound when the key is absent,
  // kFailedPrecondition (WRONGTYPE) when it holds a string. mu_ held.
  Status Find(std::string_view key, CcehIndex** fields);
  // Runs `op` on the field index of hash `key`. An absent hash: kNotFound
  // unless `create`, then a new field index, filled by `op` and published
  // by the header item only if `op` succeeded and left a field.
  Status WithFields(std::string_view key, bool create,
                    const std::function<Status(CcehIndex* fields)>& op);
  // Frees every block of a field index no header item names any more.
  // mu_ held exclusively.
  Status Destroy(uint64_t header_offset);

  dsm::PAllocator* const alloc_;
  CcehIndex* const index_;
  const CcehOptions field_options_;
  // Shared by field reads and writes; exclusive to create or remove a
  // hash (and its entry in open_).
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<CcehIndex>> open_;  // by field index header
  // Field indexes the drop hook detached, not yet freed. A leaf lock: the
  // hook takes it under an index segment lock.
  std::mutex detached_mu_;
  std::vector<uint64_t> detached_;
  std::atomic<bool> any_detached_{false};
};

}  // namespace pdpm::pdkvs
