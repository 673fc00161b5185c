#include "pdkvs/cluster/sender_pool.h"

#include <algorithm>

namespace pdpm::pdkvs {

SenderPool::SenderPool(size_t threads) {
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

SenderPool::~SenderPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void SenderPool::Work(Job* job, std::unique_lock<std::mutex>* lock) {
  while (job->next < job->parts) {
    const size_t i = job->next++;
    if (job->next == job->parts) std::erase(jobs_, job);
    lock->unlock();
    (*job->part)(i);
    lock->lock();
    if (++job->done == job->parts) done_cv_.notify_all();
  }
}

void SenderPool::Run(size_t parts, const std::function<void(size_t)>& part) {
  if (parts == 0) return;
  Job job;
  job.part = &part;
  job.parts = parts;
  std::unique_lock<std::mutex> lock(mu_);
  if (parts > 1) {
    jobs_.push_back(&job);
    // One thread for each part beside the caller's, not every thread: the
    // others would wake (a system call and a switch each) to find nothing.
    for (size_t i = 1; i < std::min(parts, threads_.size() + 1); ++i) work_cv_.notify_one();
  }
  Work(&job, &lock);
  // `job` lives on this stack: wait for the parts other threads run.
  done_cv_.wait(lock, [&] { return job.done == job.parts; });
}

void SenderPool::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    Work(jobs_.front(), &lock);
  }
}

}  // namespace pdpm::pdkvs
