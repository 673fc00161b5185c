// ExpirySweeper: the active expiry of a gateway's store. A thread walks
// every vnode of the store in turn, one step of KvStore::ReclaimExpired
// (one index segment: at most a few thousand slots) every `interval`, so a
// key whose expiry time passed gives its PM back without being touched,
// and DBSIZE and INFO's keyspace line come back to the truth by
// themselves (docs/pdkvs.md "Active expiry").
//
// Safe with any number of gateways on one cluster and with failovers: a
// step is idempotent and runs at the vnode's server inside the vnode's
// replicated mutation (the frees reach every backup before the step
// answers); a step that fails (a failover in progress) is tried again
// after `retry_after`, from the same place.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "pdkvs/gateway/kv_store.h"

namespace pdpm::pdkvs {

struct ExpirySweeperOptions {
  // The pause between two steps: the rate limit.
  std::chrono::milliseconds interval{10};
  // The pause after a step that failed.
  std::chrono::milliseconds retry_after{1000};
};

class ExpirySweeper {
 public:
  // Starts sweeping `store` (which outlives the sweeper); every key freed
  // is counted in *reclaimed (Redis's INFO expired_keys).
  ExpirySweeper(KvStore* store, const ExpirySweeperOptions& options, const Logger& log,
                std::atomic<uint64_t>* reclaimed);
  // Stops the sweep (a step in progress ends first).
  ~ExpirySweeper();
  ExpirySweeper(const ExpirySweeper&) = delete;
  ExpirySweeper& operator=(const ExpirySweeper&) = delete;

  // Sweeps of the whole store completed so far.
  uint64_t sweeps() const { return sweeps_.load(); }

 private:
  void Run();
  // Waits `d` or until stopped; false when stopped.
  bool Pause(std::chrono::milliseconds d);

  KvStore* const store_;
  const ExpirySweeperOptions options_;
  const Logger log_;
  std::atomic<uint64_t>* const reclaimed_;
  std::atomic<uint64_t> sweeps_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace pdpm::pdkvs
