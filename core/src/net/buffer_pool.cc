#include "net/buffer_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <utility>

namespace pdpm::net {

namespace {
constexpr size_t kPage = 4096;
}  // namespace

BufferPool::Buffer& BufferPool::Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Release();
    pool_ = std::exchange(o.pool_, nullptr);
    index_ = o.index_;
  }
  return *this;
}

char* BufferPool::Buffer::data() const {
  return pool_->slots_[index_].memory;
}
size_t BufferPool::Buffer::size() const {
  return pool_->buffer_size_;
}
uint32_t BufferPool::Buffer::key() const {
  return pool_->slots_[index_].region->key();
}

LocalBuffer BufferPool::Buffer::local(uint32_t length) const {
  return LocalBuffer{pool_->slots_[index_].region.get(), 0, length};
}

void BufferPool::Buffer::Release() {
  if (pool_ != nullptr) std::exchange(pool_, nullptr)->Return(index_);
}

BufferPool::BufferPool(Transport* transport, size_t buffer_size, size_t count, uint32_t access)
    : transport_(transport),
      buffer_size_((buffer_size + kPage - 1) / kPage * kPage),
      access_(access),
      slots_(count) {}

BufferPool::~BufferPool() {
  for (Slot& s : slots_) {
    s.region.reset();  // deregister before the memory goes
    if (s.memory != nullptr) ::munmap(s.memory, buffer_size_);
  }
}

Status BufferPool::Create(Transport* transport, size_t buffer_size, size_t count, uint32_t access,
                          std::unique_ptr<BufferPool>* out) {
  if (buffer_size == 0 || count == 0) return Status::InvalidArgument("empty buffer pool");
  std::unique_ptr<BufferPool> pool(new BufferPool(transport, buffer_size, count, access));
  for (Slot& s : pool->slots_) {
    // Anonymous pages: zero and unbacked until written.
    void* p = ::mmap(nullptr, pool->buffer_size_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Status::FromErrno("buffer pool mmap", errno);
    s.memory = static_cast<char*>(p);
  }
  pool->free_.reserve(count);
  for (size_t i = count; i-- > 0;) pool->free_.push_back(i);
  *out = std::move(pool);
  return Status::OK();
}

Status BufferPool::Acquire(Buffer* out) {
  out->Release();
  size_t index = 0;
  {
    std::lock_guard lock(mu_);
    if (free_.empty()) {
      return Status::ResourceExhausted("all " + std::to_string(slots_.size()) + " buffers in use");
    }
    index = free_.back();
    free_.pop_back();
  }
  Slot& s = slots_[index];
  if (s.region == nullptr) {
    // This buffer's first loan: only its borrower touches the slot now.
    Status r = transport_->RegisterMemory(s.memory, buffer_size_, access_, {}, &s.region);
    if (!r.ok()) {
      Return(index);
      return r.WithContext("registering a transfer buffer");
    }
    registered_.fetch_add(1, std::memory_order_relaxed);
  }
  out->pool_ = this;
  out->index_ = index;
  return Status::OK();
}

size_t BufferPool::available() const {
  std::lock_guard lock(mu_);
  return free_.size();
}

size_t BufferPool::registered() const {
  return registered_.load(std::memory_order_relaxed);
}

void BufferPool::Return(size_t index) {
  std::lock_guard lock(mu_);
  free_.push_back(index);
}

}  // namespace pdpm::net
