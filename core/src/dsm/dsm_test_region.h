// Test-only: anonymous memory standing in for a PM range in unit tests of
// the pDSM structures. Persist only counts what it would write back, in
// whole 64-byte cache lines as the PM layer does; crash behaviour is tested
// on the PM layer's power-loss simulation (object_store_crash_test.cc).
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "dsm/chunk.h"

namespace pdpm::dsm {

class TestRegion {
 public:
  explicit TestRegion(uint64_t size) : size_(size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    base_ = static_cast<char*>(p);
  }
  ~TestRegion() { munmap(base_, size_); }
  TestRegion(const TestRegion&) = delete;
  TestRegion& operator=(const TestRegion&) = delete;

  PmRange range() {
    return PmRange{base_, size_, [this](const void* p, size_t n) {
                     auto begin = reinterpret_cast<uintptr_t>(p) / 64;
                     auto end = (reinterpret_cast<uintptr_t>(p) + n + 63) / 64;
                     persisted_bytes_.fetch_add((end - begin) * 64, std::memory_order_relaxed);
                   }};
  }
  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  // Bytes of the cache lines persisted so far.
  uint64_t persisted_bytes() const { return persisted_bytes_.load(); }

 private:
  char* base_;
  uint64_t size_;
  std::atomic<uint64_t> persisted_bytes_{0};
};

}  // namespace pdpm::dsm
