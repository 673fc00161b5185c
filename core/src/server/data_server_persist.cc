// kHeapPersist: a client's explicit persist of a heap range it wrote with
// unpersisted one-sided writes (client.h WriteUnpersisted, docs/client.md).
#include "server/data_server.h"

namespace pdpm::server {

Status DataServer::HandleHeapPersist(std::span<const uint8_t> req, std::string* /*reply*/) {
  Decoder d(req);
  RequestHeader h;
  dsm::GlobalAddress a;
  uint64_t length = 0;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(d.Address(&a));
  PDPM_RETURN_IF_ERROR(d.U64(&length));
  PDPM_RETURN_IF_ERROR(d.Done());
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  if (a.kind() != dsm::SpaceKind::kHeap) {
    return Status::InvalidArgument(a.ToString() + " is not a heap address");
  }
  PDPM_RETURN_IF_ERROR(a.CheckRange(length, space_->segment_size()));
  // Under the lock: the segment stays ours (and mapped) while it persists.
  std::shared_lock l(mu_);
  auto it = by_global_.find(a.segment);
  if (it == by_global_.end() || it->second->fenced.load()) {
    return Status::StaleEpoch("segment " + std::to_string(a.segment) + " is not served here");
  }
  // The device's own persist, not the segment's capturing one: nothing
  // changes, so nothing is shipped. Backups already hold these bytes
  // persisted (a segment with copies takes only persisted writes).
  space_->device().Persist(it->second->base + a.offset, length);
  return Status::OK();
}

}  // namespace pdpm::server
