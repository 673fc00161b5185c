// A pool of equal-sized transfer buffers: the source or destination of
// one-sided operations (the in-transit area of iRDMA's remote copy).
//
// Each buffer is its own mapping and its own registered region. A buffer is
// registered the first time it is lent and stays registered until the pool
// goes, so the datapath registers memory at most once per buffer, and a
// buffer never lent costs neither pinned memory (verbs pins what it
// registers) nor registration time. Lending is last-in first-out: a pool
// used by one caller at a time registers one buffer only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "net/transport.h"

namespace pdpm::net {

class BufferPool {
 public:
  // A buffer on loan; returns itself to the pool when destroyed. The pool
  // must outlive it.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept;
    ~Buffer() { Release(); }

    bool valid() const { return pool_ != nullptr; }
    char* data() const;
    size_t size() const;
    // The key a peer presents to reach this buffer (its own region; the
    // buffer starts at offset 0 of it).
    uint32_t key() const;
    // The first `length` bytes as an op's local buffer.
    LocalBuffer local(uint32_t length) const;
    void Release();

   private:
    friend class BufferPool;
    BufferPool* pool_ = nullptr;
    size_t index_ = 0;
  };

  // `count` buffers of `buffer_size` bytes (rounded up to the page size),
  // to be registered on `transport` with remote `access` when first lent.
  static Status Create(Transport* transport, size_t buffer_size, size_t count, uint32_t access,
                       std::unique_ptr<BufferPool>* out);
  ~BufferPool();

  // kResourceExhausted when every buffer is on loan; the transport's error
  // when registering the buffer (its first loan) fails.
  Status Acquire(Buffer* out);

  size_t buffer_size() const { return buffer_size_; }
  size_t available() const;
  // Buffers registered so far.
  size_t registered() const;

 private:
  struct Slot {
    char* memory = nullptr;
    std::unique_ptr<MemoryRegion> region;  // null until first lent
  };
  BufferPool(Transport* transport, size_t buffer_size, size_t count, uint32_t access);
  void Return(size_t index);

  Transport* const transport_;
  const size_t buffer_size_;
  const uint32_t access_;
  // Fixed size; a slot's region is set by the borrower that registers it
  // (it owns the slot then) and read by later borrowers after mu_.
  std::vector<Slot> slots_;
  mutable std::mutex mu_;
  std::vector<size_t> free_;  // indexes, the next to lend last; guarded by mu_
  std::atomic<size_t> registered_{0};
};

}  // namespace pdpm::net
