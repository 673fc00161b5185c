// Test-only: anonymous memory standing in for a PM range in unit tests of
// the pDSM structures (persist counts calls; crash behaviour is tested with
// the power-loss simulation in object_store_crash_test.cc).
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
    return PmRange{base_, size_, [this](const void*, size_t) {
                     persists_.fetch_add(1, std::memory_order_relaxed);
                   }};
  }
  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t persists() const { return persists_.load(); }

 private:
  char* base_;
  uint64_t size_;
  std::atomic<uint64_t> persists_{0};
};

}  // namespace pdpm::dsm
