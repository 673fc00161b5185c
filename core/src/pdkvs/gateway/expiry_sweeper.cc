#include "pdkvs/gateway/expiry_sweeper.h"

namespace pdpm::pdkvs {

ExpirySweeper::ExpirySweeper(KvStore* store, const ExpirySweeperOptions& options, const Logger& log,
                             std::atomic<uint64_t>* reclaimed)
    : store_(store), options_(options), log_(log), reclaimed_(reclaimed) {
  thread_ = std::thread([this] { Run(); });
}

ExpirySweeper::~ExpirySweeper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool ExpirySweeper::Pause(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return stop_; });
}

void ExpirySweeper::Run() {
  uint32_t vnode = 0;
  uint64_t position = 0;
  bool failing = false;
  while (Pause(failing ? options_.retry_after : options_.interval)) {
    uint64_t next = 0, reclaimed = 0;
    Status s = store_->ReclaimExpired(vnode, position, &next, &reclaimed);
    reclaimed_->fetch_add(reclaimed);
    if (s.code() == StatusCode::kOutOfRange) {
      // Past the last vnode: the sweep is complete, the next one starts.
      // (A store with no vnode at all answers so for vnode 0 too.)
      if (vnode > 0) sweeps_.fetch_add(1);
      vnode = 0;
      position = 0;
      continue;
    }
    if (!s.ok()) {
      // Logged once per run of failures: a failover lasts seconds.
      if (!failing) log_.Warn("active expiry: a step failed", {{"vnode", vnode}, {"error", s}});
      failing = true;
      continue;
    }
    failing = false;
    position = next;
    if (position == 0) ++vnode;
  }
}

}  // namespace pdpm::pdkvs
