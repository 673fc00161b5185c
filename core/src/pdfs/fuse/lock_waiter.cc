#include "pdfs/fuse/lock_waiter.h"

#include <algorithm>
#include <cerrno>

namespace pdpm::pdfs {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{5};
constexpr std::chrono::milliseconds kMaxBackoff{100};

}  // namespace

LockWaiter::LockWaiter(FileSystem* fs) : fs_(fs), thread_([this] { Loop(); }) {}

LockWaiter::~LockWaiter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (Pending& p : pending_) fuse_reply_err(p.req, EINTR);
}

void LockWaiter::Wait(fuse_req_t req, uint64_t ino, const LockRequest& lock,
                      std::function<void()> granted) {
  // Registered before the wait is listed (nothing can answer `req` yet);
  // an interrupt that came earlier is seen by fuse_req_interrupted.
  fuse_req_interrupt_func(req, OnInterrupt, this);
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_.push_back({req, ino, lock, std::move(granted),
                        std::chrono::steady_clock::now() + kFirstBackoff, kFirstBackoff,
                        fuse_req_interrupted(req) != 0});
  }
  cv_.notify_all();
}

// From a libfuse thread, which keeps `req` alive meanwhile; a request
// already answered is no longer listed.
void LockWaiter::OnInterrupt(fuse_req_t req, void* self) {
  auto* w = static_cast<LockWaiter*>(self);
  {
    std::lock_guard<std::mutex> l(w->mu_);
    for (Pending& p : w->pending_) {
      if (p.req == req) p.interrupted = true;
    }
  }
  w->cv_.notify_all();
}

void LockWaiter::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    auto now = std::chrono::steady_clock::now();
    auto wake = now + kMaxBackoff;
    for (auto it = pending_.begin(); it != pending_.end() && !stop_;) {
      if (!it->interrupted && it->next_try > now) {
        wake = std::min(wake, it->next_try);
        ++it;
        continue;
      }
      int err = EINTR;
      if (!it->interrupted) {
        // The entry stays listed (and its interrupt seen) while it is tried.
        const uint64_t ino = it->ino;
        const LockRequest lock = it->lock;
        const std::function<void()> granted = it->granted;
        l.unlock();
        err = fs_->SetLock(ino, lock);
        if (err == 0) granted();  // unlocked: it may wait for the kernel
        l.lock();
      }
      if (err == EAGAIN) {
        it->backoff = std::min(it->backoff * 2, kMaxBackoff);
        it->next_try = std::chrono::steady_clock::now() + it->backoff;
        wake = std::min(wake, it->next_try);
        ++it;
        continue;
      }
      fuse_reply_err(it->req, err);
      it = pending_.erase(it);
      now = std::chrono::steady_clock::now();
    }
    cv_.wait_until(l, wake);
  }
}

}  // namespace pdpm::pdfs
