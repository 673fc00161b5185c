// A pool of equal-sized transfer buffers carved from one range that is
// registered once, when the pool is made: the datapath never registers
// memory. Buffers are the source or destination of one-sided operations
// (the in-transit area of iRDMA's remote copy).
#pragma once

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
    // Offset of the buffer inside the pool's registered range.
    uint64_t offset() const { return offset_; }
    // The first `length` bytes as an op's local buffer.
    LocalBuffer local(uint32_t length) const;
    void Release();

   private:
    friend class BufferPool;
    BufferPool* pool_ = nullptr;
    uint64_t offset_ = 0;
  };

  // `count` buffers of `buffer_size` bytes (rounded up to 64), registered
  // on `transport` with remote `access`.
  static Status Create(Transport* transport, size_t buffer_size, size_t count, uint32_t access,
                       std::unique_ptr<BufferPool>* out);
  ~BufferPool();

  // kResourceExhausted when every buffer is on loan.
  Status Acquire(Buffer* out);

  size_t buffer_size() const { return buffer_size_; }
  size_t available() const;
  MemoryRegion* region() const { return region_.get(); }
  uint32_t key() const { return region_->key(); }

 private:
  BufferPool(size_t buffer_size, size_t count);
  void Return(uint64_t offset);

  const size_t buffer_size_;
  const size_t count_;
  char* memory_ = nullptr;
  std::unique_ptr<MemoryRegion> region_;
  mutable std::mutex mu_;
  std::vector<uint64_t> free_;  // offsets; guarded by mu_
};

}  // namespace pdpm::net
