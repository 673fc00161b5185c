// DataServer: the vnode batches of one kKvVnodeBatches request mutate their
// segments together and ship to each backup in one message
// (kReplicaApplyMany, docs/replication.md "Shipping several segments").
// A share that fails falls back to the segment's own shipment (ShipLocked),
// which waits out a backup's failure or replacement as for any mutation.
#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

#include "server/data_server.h"

namespace pdpm::server {
namespace {

// The most bytes of kReplicaApply messages one kReplicaApplyMany carries;
// larger shipments go segment by segment.
constexpr size_t kShipManyBytes = 8u << 20;

}  // namespace

void DataServer::MutateTogether(std::vector<DeferredKvBatch>* jobs, std::vector<Status>* results) {
  std::vector<DeferredKvBatch>& js = *jobs;
  results->assign(js.size(), Status::OK());
  // The segments' locks in one order (other requests may take some of them).
  std::vector<size_t> order(js.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return js[a].seg->role.global < js[b].seg->role.global; });
  for (size_t k = 1; k < order.size(); ++k) {
    if (js[order[k]].seg == js[order[k - 1]].seg) {
      // Two batches of one vnode: one after the other.
      for (size_t i = 0; i < js.size(); ++i) {
        (*results)[i] = Mutate(js[i].seg, [&] { return js[i].run(0); });
      }
      return;
    }
  }
  std::vector<std::unique_lock<FairMutex>> locks;
  locks.reserve(order.size());
  for (size_t i : order) locks.emplace_back(js[i].seg->repl_mu);

  // Each batch runs as inside Mutate, its persists captured.
  std::vector<RedoBatch> batches(js.size());
  std::vector<bool> ship(js.size(), false);
  for (size_t i = 0; i < js.size(); ++i) {
    Segment* seg = js[i].seg;
    if (Status s = CheckMutable(*seg); !s.ok()) {
      (*results)[i] = std::move(s);
      continue;
    }
    {
      std::shared_lock l(mu_);
      auto it = placement_.find(seg->role.global);
      ship[i] = it != placement_.end() && it->second.backups_size() > 0;
    }
    if (ship[i]) seg->capture.store(&batches[i], std::memory_order_release);
    (*results)[i] = js[i].run(0);
    if (ship[i]) seg->capture.store(nullptr, std::memory_order_release);
    ship[i] = ship[i] && !batches[i].empty();
  }

  // Each backup server's share of every segment, as kReplicaApply messages.
  struct Share {
    PeerAddress address;
    std::vector<size_t> jobs;  // each job's one message is messages[job]
    size_t bytes = 0;
  };
  std::vector<std::string> messages(js.size());
  std::map<uint32_t, Share> shares;           // by backup server
  std::vector<bool> alone(js.size(), false);  // shipped on its own
  uint64_t epoch = 0;
  {
    std::shared_lock l(mu_);
    epoch = epoch_;
    for (size_t i = 0; i < js.size(); ++i) {
      if (!ship[i]) continue;
      Segment* seg = js[i].seg;
      auto it = placement_.find(seg->role.global);
      std::vector<std::string> encoded =
          batches[i].Encode({epoch, credential_}, seg->role.global, kShipManyBytes);
      const bool primary_here = it != placement_.end() &&
                                it->second.primary().server_id() == server_id_ &&
                                it->second.primary().local_index() == seg->local;
      if (!primary_here || encoded.size() != 1) {
        alone[i] = true;  // ShipLocked answers or splits it
        continue;
      }
      messages[i] = std::move(encoded.front());
      for (const auto& b : it->second.backups()) {
        const ReplicaId id{b.server_id(), b.local_index()};
        if (b.state() != v1::REPLICA_STATE_IN_SYNC && seg->attached.count(id) == 0) continue;
        auto a = server_addresses_.find(b.server_id());
        Share& share = shares[b.server_id()];
        share.address = a == server_addresses_.end() ? PeerAddress{} : a->second;
        share.jobs.push_back(i);
        share.bytes += messages[i].size();
      }
    }
  }
  // Every backup server's share in flight at once.
  std::vector<std::string> requests;
  std::vector<const Share*> sent;
  requests.reserve(shares.size());
  for (const auto& [server, share] : shares) {
    if (share.bytes > kShipManyBytes) {  // too large for one message
      for (size_t i : share.jobs) alone[i] = true;
      continue;
    }
    std::string& request = requests.emplace_back();
    request.reserve(kRequestHeaderSize + 8 + share.bytes + 8 * share.jobs.size());
    Encoder e(&request);
    e.Header({epoch, credential_});
    e.U64(share.jobs.size());
    for (size_t i : share.jobs) e.Str(messages[i]);
    sent.push_back(&share);
  }
  std::vector<PeerCall> calls;
  for (size_t k = 0; k < sent.size(); ++k) {
    calls.emplace_back(sent[k]->address, kReplicaApplyMany, requests[k]);
  }
  peers_.CallAll(calls);
  for (size_t k = 0; k < calls.size(); ++k) {
    if (!calls[k].status.ok()) {
      for (size_t i : sent[k]->jobs) alone[i] = true;
    }
  }
  for (size_t i = 0; i < js.size(); ++i) {
    if (!alone[i]) continue;
    // As Mutate: not acknowledged unless every backup took it.
    Status s = ShipLocked(js[i].seg, batches[i]);
    if (!s.ok()) (*results)[i] = s;
  }
}

Status DataServer::HandleReplicaApplyMany(std::span<const uint8_t> req, std::string* reply) {
  Decoder d(req);
  RequestHeader h;
  PDPM_RETURN_IF_ERROR(d.Header(&h));
  PDPM_RETURN_IF_ERROR(CheckHeader(h));
  uint64_t n = 0;
  PDPM_RETURN_IF_ERROR(d.U64(&n));
  std::vector<std::string_view> messages;
  for (uint64_t i = 0; i < n; ++i) {
    std::string_view m;
    PDPM_RETURN_IF_ERROR(d.Str(&m));
    messages.push_back(m);
  }
  PDPM_RETURN_IF_ERROR(d.Done());
  // In order; the first refusal ends it (the primary then ships each
  // segment on its own, applying again what was applied: the same bytes).
  for (std::string_view m : messages) {
    PDPM_RETURN_IF_ERROR(
        HandleReplicaApply(std::span(reinterpret_cast<const uint8_t*>(m.data()), m.size()), reply));
  }
  return Status::OK();
}

}  // namespace pdpm::server
