// The tcp backend's registered ranges, and the emulated one-sided
// operations a peer runs against them. Every access is checked against key,
// bounds and access rights; atomics use std::atomic_ref so they are atomic
// against concurrent remote and local updates of the same aligned word.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>

#include "common/status.h"
#include "net/transport.h"

namespace pdpm::net::tcp {

// One registered range. Users of `data` hold `mu` shared and check `dead`;
// deregistration takes it exclusively, so once it returns no emulated op
// touches the memory any more.
struct RegionEntry {
  char* data = nullptr;
  size_t size = 0;
  uint32_t access = 0;
  uint32_t key = 0;
  PersistFn persist;
  std::shared_mutex mu;
  bool dead = false;  // guarded by mu
};

class RegionTable {
 public:
  // `allowed` (may be empty): whether ranges registered with kAccessGated
  // may be accessed now.
  explicit RegionTable(std::function<bool()> allowed = {});
  // Keys drawn from a generator seeded with `seed`: reproducible keys for
  // the fuzzer's corpus. The transport always uses the random constructor.
  explicit RegionTable(uint32_t seed);

  // Registers a range under a fresh random non-zero key, unique in this table.
  std::shared_ptr<RegionEntry> Add(char* data, size_t size, uint32_t access, PersistFn persist);
  // Deregisters; waits for emulated ops touching the range to finish.
  void Remove(const std::shared_ptr<RegionEntry>& entry);

  // The entry for `key` if [offset, offset+length) lies inside it and it
  // grants `access`. kPermissionDenied for an unknown key or a missing
  // right, kOutOfRange for a range outside it, kUnavailable for a gated
  // range while access is not allowed (Allowed).
  Status Resolve(uint32_t key, uint64_t offset, uint64_t length, uint32_t access,
                 std::shared_ptr<RegionEntry>* out) const;
  // kUnavailable when `entry` is gated and access is not allowed now:
  // asked again before a write is acknowledged.
  Status Allowed(const RegionEntry& entry) const;

 private:
  const std::function<bool()> allowed_;
  mutable std::shared_mutex mu_;
  std::map<uint32_t, std::shared_ptr<RegionEntry>> entries_;  // by key
  std::mt19937 rng_;                                          // guarded by mu_
};

// Runs a compare-swap or fetch-add on the 8-byte word at `offset` of the
// range behind `key`; `old_value` receives the word's previous value.
// kInvalidArgument for a misaligned word.
Status ExecuteAtomic(const RegionTable& table, bool compare_swap, uint32_t key, uint64_t offset,
                     uint64_t compare_or_add, uint64_t swap, uint64_t* old_value);

}  // namespace pdpm::net::tcp
