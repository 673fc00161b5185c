// FairMutex: a mutex that grants the lock in the order it was asked for.
//
// std::mutex lets a thread that releases the lock and asks again at once
// take it back before a waiter wakes up; a loop of short critical sections
// (a backup fill's copy steps) then starves everyone else until it ends.
// Here each lock() draws a ticket and waits for its turn, so a waiter gets
// the lock after at most the holders ahead of it. Meets the standard
// Lockable requirements (std::lock_guard, std::unique_lock).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace pdpm {

class FairMutex {
 public:
  FairMutex() = default;
  FairMutex(const FairMutex&) = delete;
  FairMutex& operator=(const FairMutex&) = delete;

  void lock() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t ticket = next_++;
    turn_cv_.wait(l, [&] { return serving_ == ticket; });
  }

  bool try_lock() {
    std::lock_guard<std::mutex> l(mu_);
    if (serving_ != next_) return false;  // held, or others wait for it
    ++next_;
    return true;
  }

  void unlock() {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++serving_;
    }
    turn_cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable turn_cv_;
  uint64_t next_ = 0;     // the ticket the next lock() draws; mu_
  uint64_t serving_ = 0;  // the ticket holding (or about to hold) the lock; mu_
};

}  // namespace pdpm
