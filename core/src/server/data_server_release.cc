// Empty heap segments go back to the free segments (docs/server.md "Freed
// segments"): the monitor frees the global segment first, then the local
// segment is cleared, so a crash in between leaves a copy the view no
// longer maps, which a restart frees.
#include "server/data_server.h"

namespace pdpm::server {

void DataServer::ReleaseEmptySegments() {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  const int64_t due = std::chrono::nanoseconds(kReleaseEmptyAfter).count();
  std::vector<Segment*> empty;
  {
    std::shared_lock lock(mu_);
    for (const auto& [global, seg] : by_global_) {
      const int64_t since = seg->empty_since_ns;
      if (seg->role.kind == SegmentKind::kHeap && since != 0 && now - since >= due) {
        empty.push_back(seg);
      }
    }
  }
  for (Segment* seg : empty) {
    Status s = ReleaseSegment(seg);
    if (!s.ok()) {
      log_.Warn("releasing an empty heap segment failed; tried again later",
                {{"global", seg->role.global}, {"status", s}});
    }
  }
}

Status DataServer::ReleaseSegment(Segment* seg) {
  const uint32_t g = seg->role.global;
  {
    std::lock_guard lock(seg->repl_mu);
    if (seg->fenced || seg->backup || seg->first_fill || g == 0 ||
        seg->alloc->Stats().blocks_allocated != 0) {
      seg->empty_since_ns = 0;
      return Status::OK();
    }
    seg->released = true;  // no allocation from here on
  }
  v1::FreeSegmentRequest req;
  req.set_server_id(server_id_);
  req.set_segment(g);
  {
    std::shared_lock lock(mu_);
    req.set_epoch(epoch_);
  }
  v1::FreeSegmentResponse resp;
  Status s = monitor_->FreeSegment(req, &resp);
  if (!s.ok() && s.code() != StatusCode::kNotFound) {
    // Not freed (the monitor unreachable, or the segment given to another
    // server meanwhile: the mapping fences it then).
    std::lock_guard lock(seg->repl_mu);
    seg->released = false;
    seg->empty_since_ns = 0;
    return s.WithContext("free segment " + std::to_string(g));
  }
  // Freed (kNotFound: by an earlier attempt whose answer was lost). A
  // mutation that began before has ended once repl_mu is held; later ones
  // see the fence. The monitor may already have placed a backup in the
  // local segment, whose attach then took it itself.
  {
    std::lock_guard repl(seg->repl_mu);
    std::unique_lock lock(mu_);
    by_global_.erase(g);
    placement_.erase(g);
    seg->fenced = true;
    seg->region.reset();  // no one-sided op reaches it any more
    if (segments_[seg->local].get() == seg) {
      ClearLocalSegment(seg->local);
      retired_.push_back(std::move(segments_[seg->local]));
    }
  }
  log_.Info("empty heap segment released", {{"global", g}, {"local", seg->local}});
  return Status::OK();
}

}  // namespace pdpm::server
