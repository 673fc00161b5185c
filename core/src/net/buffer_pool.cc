#include "net/buffer_pool.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace pdpm::net {

BufferPool::Buffer& BufferPool::Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Release();
    pool_ = std::exchange(o.pool_, nullptr);
    offset_ = o.offset_;
  }
  return *this;
}

char* BufferPool::Buffer::data() const {
  return pool_->memory_ + offset_;
}
size_t BufferPool::Buffer::size() const {
  return pool_->buffer_size_;
}

LocalBuffer BufferPool::Buffer::local(uint32_t length) const {
  return LocalBuffer{pool_->region_.get(), offset_, length};
}

void BufferPool::Buffer::Release() {
  if (pool_ != nullptr) std::exchange(pool_, nullptr)->Return(offset_);
}

BufferPool::BufferPool(size_t buffer_size, size_t count)
    : buffer_size_((buffer_size + 63) / 64 * 64), count_(count) {}

BufferPool::~BufferPool() {
  region_.reset();  // deregister before the memory goes
  std::free(memory_);
}

Status BufferPool::Create(Transport* transport, size_t buffer_size, size_t count, uint32_t access,
                          std::unique_ptr<BufferPool>* out) {
  if (buffer_size == 0 || count == 0) return Status::InvalidArgument("empty buffer pool");
  std::unique_ptr<BufferPool> pool(new BufferPool(buffer_size, count));
  size_t bytes = (pool->buffer_size_ * count + 4095) / 4096 * 4096;
  pool->memory_ = static_cast<char*>(std::aligned_alloc(4096, bytes));
  if (pool->memory_ == nullptr) return Status::ResourceExhausted("buffer pool allocation");
  std::memset(pool->memory_, 0, bytes);
  PDPM_RETURN_IF_ERROR(transport->RegisterMemory(pool->memory_, bytes, access, {}, &pool->region_));
  pool->free_.reserve(count);
  for (size_t i = count; i-- > 0;) pool->free_.push_back(i * pool->buffer_size_);
  *out = std::move(pool);
  return Status::OK();
}

Status BufferPool::Acquire(Buffer* out) {
  out->Release();
  std::lock_guard lock(mu_);
  if (free_.empty()) {
    return Status::ResourceExhausted("all " + std::to_string(count_) + " buffers in use");
  }
  out->pool_ = this;
  out->offset_ = free_.back();
  free_.pop_back();
  return Status::OK();
}

size_t BufferPool::available() const {
  std::lock_guard lock(mu_);
  return free_.size();
}

void BufferPool::Return(uint64_t offset) {
  std::lock_guard lock(mu_);
  free_.push_back(offset);
}

}  // namespace pdpm::net
