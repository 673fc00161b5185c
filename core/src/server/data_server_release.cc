// Empty heap and table segments go back to the free segments
// (docs/server.md "Freed segments"): the monitor frees the global segment
// first, then the local segment is cleared, so a crash in between leaves a
// copy the view no longer maps, which a restart frees.
#include "server/data_server.h"

namespace pdpm::server {

bool DataServer::HoldsNothing(const Segment& seg) {
  switch (seg.role.kind) {
    case SegmentKind::kHeap: return seg.alloc->Stats().blocks_allocated == 0;
    case SegmentKind::kTable: {
      const pdkvs::CcehIndex* kv = seg.kv_published.load();
      return seg.table->ObjectCount() == 0 && (kv == nullptr || kv->Count() == 0);
    }
    default: return false;
  }
}

void DataServer::ReleaseEmptySegments() {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  const int64_t due = std::chrono::nanoseconds(kReleaseEmptyAfter).count();
  std::vector<Segment*> empty;
  {
    std::shared_lock lock(mu_);
    for (const auto& [global, seg] : by_global_) {
      const int64_t since = seg->empty_since_ns;
      if (since != 0 && now - since >= due) empty.push_back(seg);
    }
  }
  for (Segment* seg : empty) {
    Status s = ReleaseSegment(seg);
    if (!s.ok()) {
      log_.Warn("releasing an empty segment failed; tried again later",
                {{"global", seg->role.global}, {"status", s}});
    }
  }
}

Status DataServer::ReleaseSegment(Segment* seg) {
  const uint32_t g = seg->role.global;
  const bool table = seg->role.kind == SegmentKind::kTable;
  // A table segment is closed to transactions first: no record may name
  // it once it is gone, and one that names it keeps it.
  if (table && !tx_->CloseSegment(g)) {
    seg->empty_since_ns = 0;
    return Status::OK();
  }
  bool releasing = false;
  {
    std::lock_guard lock(seg->repl_mu);
    releasing = !seg->fenced && !seg->backup && !seg->first_fill && g != 0 && HoldsNothing(*seg);
    // From here on no allocation or table mutation (CheckMutable).
    seg->released = releasing;
    if (!releasing) seg->empty_since_ns = 0;
  }
  if (!releasing) {
    if (table) tx_->ReopenSegment(g);
    return Status::OK();
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
    {
      std::lock_guard lock(seg->repl_mu);
      seg->released = false;
      seg->empty_since_ns = 0;
    }
    if (table) tx_->ReopenSegment(g);
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
    // The table's next mutation creates a new segment.
    if (auto it = by_table_.find(seg->role.table);
        table && it != by_table_.end() && it->second == seg) {
      by_table_.erase(it);
    }
    seg->fenced = true;
    seg->region.reset();  // no one-sided op reaches it any more
    if (segments_[seg->local].get() == seg) {
      ClearLocalSegment(seg->local);
      retired_.push_back(std::move(segments_[seg->local]));
    }
  }
  log_.Info(table ? "empty table segment released" : "empty heap segment released",
            {{"global", g}, {"local", seg->local}, {"table", seg->role.table}});
  return Status::OK();
}

}  // namespace pdpm::server
