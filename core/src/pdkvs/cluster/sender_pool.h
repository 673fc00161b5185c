// SenderPool: a few threads that run the parts of a job at once, so a
// caller with several independent blocking requests (a batch per vnode)
// keeps them all in flight. Thread-safe: jobs of several callers share the
// threads; each caller also works on its own job.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace pdpm::pdkvs {

class SenderPool {
 public:
  explicit SenderPool(size_t threads);
  ~SenderPool();
  SenderPool(const SenderPool&) = delete;
  SenderPool& operator=(const SenderPool&) = delete;

  // Runs part(0) .. part(parts - 1), each once, on the pool's threads and
  // the caller's; returns when every part has returned.
  void Run(size_t parts, const std::function<void(size_t)>& part);

 private:
  struct Job {
    const std::function<void(size_t)>* part = nullptr;
    size_t parts = 0;
    size_t next = 0;  // the next part to claim; guarded by mu_
    size_t done = 0;  // parts that returned; guarded by mu_
  };
  // Claims and runs parts of `job` until none is left unclaimed. `lock`
  // holds mu_ on entry and exit.
  void Work(Job* job, std::unique_lock<std::mutex>* lock);
  void Loop();

  std::mutex mu_;
  std::condition_variable work_cv_;  // a job has unclaimed parts, or stopping
  std::condition_variable done_cv_;  // a part returned
  std::deque<Job*> jobs_;            // with unclaimed parts
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace pdpm::pdkvs
