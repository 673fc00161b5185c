#include "monitor/view_manager.h"

#include <uuid/uuid.h>

#include <algorithm>
#include <set>

#include "dsm/address.h"
#include "dsm/table_range.h"
#include "monitor/placement.h"
#include "monitor/probe.h"
#include "monitor/reconfigure.h"

namespace pdpm::monitor {
namespace {

// How long ReportUnreachable waits for a probed server to answer.
constexpr std::chrono::milliseconds kProbeTimeout{200};

std::string NewClusterUuid() {
  uuid_t id;
  uuid_generate_random(id);
  char text[37];
  uuid_unparse_lower(id, text);
  return text;
}

// Comparison that does not stop at the first differing byte, so response
// times say nothing about how much of a guessed secret was right.
bool SecretsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

uint64_t NowUnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string_view StateName(v1::ServerState s) {
  switch (s) {
    case v1::SERVER_STATE_UP: return "up";
    case v1::SERVER_STATE_SUSPECT: return "suspect";
    case v1::SERVER_STATE_DOWN: return "down";
    case v1::SERVER_STATE_DRAINING: return "draining";
    case v1::SERVER_STATE_DRAINED: return "drained";
    default: return "unspecified";
  }
}

v1::ServerInfo* FindServer(v1::ClusterView* view, uint32_t id) {
  for (auto& s : *view->mutable_servers()) {
    if (s.id() == id) return &s;
  }
  return nullptr;
}

const v1::ServerInfo* FindServer(const v1::ClusterView& view, uint32_t id) {
  for (const auto& s : view.servers()) {
    if (s.id() == id) return &s;
  }
  return nullptr;
}

// InvalidArgument unless every index of `local` is below `segment_count`
// and appears once.
Status CheckServerLocal(const google::protobuf::RepeatedField<uint32_t>& local,
                        uint32_t segment_count) {
  std::set<uint32_t> seen;
  for (uint32_t i : local) {
    if (i >= segment_count) {
      return Status::InvalidArgument("server-local segment " + std::to_string(i) +
                                     " does not exist (" + std::to_string(segment_count) +
                                     " segments)");
    }
    if (!seen.insert(i).second) {
      return Status::InvalidArgument("server-local segment " + std::to_string(i) + " listed twice");
    }
  }
  return Status::OK();
}

// The position of global segment `segment` in `view`'s mapping table;
// kNotFound when it is not mapped.
Status FindSegmentIndex(const v1::ClusterView& view, uint64_t segment, int* index) {
  for (int i = 0; i < view.segments_size(); i++) {
    if (view.segments(i).segment() == segment) {
      *index = i;
      return Status::OK();
    }
  }
  return Status::NotFound("global segment " + std::to_string(segment) + " is not mapped");
}

// A table segment's range of positions (dsm/table_range.h); depth 0 for
// every mapping written before ranges.
dsm::TableRange RangeOf(const v1::SegmentMapping& m) {
  return {m.range_depth(), m.range_prefix()};
}

void SetRange(v1::SegmentMapping* m, const dsm::TableRange& range) {
  m->set_range_depth(range.depth);
  m->set_range_prefix(range.prefix);
}

// The ranges and pending splits of a loaded view (format 2): every range
// valid and on a table segment; each pending split names a mapped table
// segment of its table once, halves its range and, once created, a new
// segment holding the upper half that names it as its parent; no other
// segment names a parent; the routable segments of a table split at least
// once partition the positions.
Status CheckRanges(const v1::ClusterView& v) {
  auto bad = [](uint64_t segment, const std::string& what) {
    return Status::Corruption("stored view: segment " + std::to_string(segment) + " " + what);
  };
  std::map<uint32_t, std::vector<dsm::TableRange>> routable;  // table -> ranges
  std::set<uint32_t> split_tables;                            // tables with a depth > 0
  for (const auto& m : v.segments()) {
    if (!RangeOf(m).Valid()) return bad(m.segment(), "has an invalid range");
    if (m.table() == 0) {
      if (m.range_depth() != 0 || m.split_parent() != 0) {
        return bad(m.segment(), "is a heap segment with a range");
      }
      continue;
    }
    if (m.split_parent() == 0) {
      routable[m.table()].push_back(RangeOf(m));
      if (m.range_depth() > 0) split_tables.insert(m.table());
    } else {
      const int i = FindSplit(v, m.split_parent());
      if (i < 0 || v.splits(i).child() != m.segment()) {
        return bad(m.segment(), "names segment " + std::to_string(m.split_parent()) +
                                    " as its split parent, but no such split is pending");
      }
    }
  }
  for (int i = 0; i < v.splits_size(); ++i) {
    const v1::PendingSplit& sp = v.splits(i);
    int index = 0;
    if (!FindSegmentIndex(v, sp.parent(), &index).ok()) {
      return bad(sp.parent(), "has a pending split but is not mapped");
    }
    const v1::SegmentMapping& parent = v.segments(index);
    const dsm::TableRange range = RangeOf(parent);
    const dsm::TableRange child_range{sp.child_range_depth(), sp.child_range_prefix()};
    if (FindSplit(v, sp.parent()) != i || parent.table() == 0 || parent.table() != sp.table() ||
        parent.split_parent() != 0 || range.depth >= dsm::kMaxRangeDepth ||
        child_range != range.Upper()) {
      return bad(sp.parent(), "has an inconsistent pending split");
    }
    if (sp.child() != 0) {
      if (!FindSegmentIndex(v, sp.child(), &index).ok()) {
        return bad(sp.child(), "is the new half of a split but is not mapped");
      }
      const v1::SegmentMapping& child = v.segments(index);
      if (child.split_parent() != sp.parent() || child.table() != sp.table() ||
          RangeOf(child) != child_range) {
        return bad(sp.child(),
                   "does not match the pending split of segment " + std::to_string(sp.parent()));
      }
    }
  }
  for (uint32_t table : split_tables) {
    Status s = dsm::SortAndCheckPartition(&routable[table]);
    if (!s.ok()) {
      return Status::Corruption("stored view: the segments of table " + std::to_string(table) +
                                " do not partition its positions: " + std::string(s.message()));
    }
  }
  return Status::OK();
}

std::vector<TableSlot> TableSlots(const v1::ClusterView& view) {
  std::vector<TableSlot> slots;
  for (const auto& t : view.tables()) slots.push_back({t.table(), t.server_id(), 0});
  for (const auto& m : view.segments()) {
    if (m.table() >= 1 && m.table() <= slots.size()) ++slots[m.table() - 1].segments;
  }
  return slots;
}

// Internal consistency of a loaded view; a violation means the store holds
// something no monitor wrote.
Status CheckView(const v1::ClusterView& v) {
  if (v.format_version() > kViewFormatVersion) {
    return Status::FailedPrecondition(
        "stored view has format version " + std::to_string(v.format_version()) +
        "; this monitor reads up to " + std::to_string(kViewFormatVersion) +
        " (a newer monitor wrote it)");
  }
  if (v.epoch() == 0) return Status::Corruption("stored view has epoch 0");
  PDPM_RETURN_IF_ERROR(dsm::ValidateSegmentSize(v.segment_size()).WithContext("stored view"));
  if (v.replica_count() == 0 || v.replica_count() > dsm::kMaxReplicas || v.table_count() == 0 ||
      static_cast<uint32_t>(v.tables_size()) != v.table_count()) {
    return Status::Corruption("stored view has inconsistent replica or table counts");
  }
  for (int i = 0; i < v.tables_size(); ++i) {
    if (v.tables(i).table() != static_cast<uint32_t>(i) + 1) {
      return Status::Corruption("stored view's table map is out of order");
    }
  }
  for (const auto& s : v.servers()) {
    if (!CheckServerLocal(s.server_local_segments(), s.segment_count()).ok()) {
      return Status::Corruption("stored view lists bad server-local segments of server " +
                                std::to_string(s.id()));
    }
  }
  for (const auto& m : v.segments()) {
    if (FindServer(v, m.primary().server_id()) == nullptr) {
      return Status::Corruption("stored view maps segment " + std::to_string(m.segment()) +
                                " to unknown server " + std::to_string(m.primary().server_id()));
    }
  }
  return CheckRanges(v);
}

v1::SegmentMapping WithoutKeys(v1::SegmentMapping m) {
  m.clear_access_key();
  for (auto& b : *m.mutable_backups()) b.clear_access_key();
  return m;
}

}  // namespace

Status MonitorOptions::Validate() const {
  PDPM_RETURN_IF_ERROR(dsm::ValidateSegmentSize(segment_size).WithContext("--segment-size"));
  if (replicas == 0 || replicas > dsm::kMaxReplicas) {
    return Status::InvalidArgument("--replicas must be 1.." + std::to_string(dsm::kMaxReplicas));
  }
  if (tables == 0 || tables > 65536) {
    return Status::InvalidArgument("--tables must be 1..65536");
  }
  if (cluster_secret.empty()) return Status::InvalidArgument("the cluster secret is empty");
  if (heartbeat_interval.count() <= 0) {
    return Status::InvalidArgument("--heartbeat-interval must be positive");
  }
  if (suspect_timeout <= heartbeat_interval) {
    return Status::InvalidArgument("--suspect-timeout must be longer than --heartbeat-interval");
  }
  if (down_timeout <= suspect_timeout) {
    return Status::InvalidArgument("--down-timeout must be longer than --suspect-timeout");
  }
  return Status::OK();
}

ViewManager::ViewManager(ViewStore* store, const MonitorOptions& options, const Logger& log)
    : store_(store), options_(options), log_(log) {}

Status ViewManager::Open(ViewStore* store, const MonitorOptions& options, const Logger& log,
                         std::unique_ptr<ViewManager>* manager) {
  PDPM_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<ViewManager> m(new ViewManager(store, options, log));
  Status s = store->Load(&m->view_, &m->revision_);
  if (s.code() == StatusCode::kNotFound) {
    v1::ClusterView fresh;
    fresh.set_format_version(kViewFormatVersion);
    fresh.set_epoch(1);
    fresh.set_segment_size(options.segment_size);
    fresh.set_replica_count(options.replicas);
    fresh.set_table_count(options.tables);
    fresh.set_next_server_id(1);
    fresh.set_next_heap_segment(dsm::kFirstHeapSegment);
    fresh.set_next_object_segment(dsm::kLastSegment);
    for (uint32_t t = 1; t <= options.tables; ++t) fresh.add_tables()->set_table(t);
    PDPM_RETURN_IF_ERROR(store->CompareAndPut(0, fresh, &m->revision_));
    m->view_ = std::move(fresh);
    log.Info("created a new cluster view", {{"store", store->Describe()},
                                            {"segment_size", options.segment_size},
                                            {"replicas", options.replicas},
                                            {"tables", options.tables}});
  } else {
    PDPM_RETURN_IF_ERROR(s);
    PDPM_RETURN_IF_ERROR(CheckView(m->view_).WithContext(store->Describe()));
    const v1::ClusterView& v = m->view_;
    auto mismatch = [&](const char* flag, uint64_t given, uint64_t stored) {
      return Status::FailedPrecondition(std::string(flag) + " " + std::to_string(given) +
                                        " contradicts the stored view (" + store->Describe() +
                                        " was created with " + std::to_string(stored) +
                                        "); it cannot change for an existing cluster");
    };
    if (options.segment_size_set && options.segment_size != v.segment_size()) {
      return mismatch("--segment-size", options.segment_size, v.segment_size());
    }
    if (options.replicas_set && options.replicas != v.replica_count()) {
      return mismatch("--replicas", options.replicas, v.replica_count());
    }
    if (options.tables_set && options.tables != v.table_count()) {
      return mismatch("--tables", options.tables, v.table_count());
    }
    log.Info("loaded the cluster view", {{"store", store->Describe()},
                                         {"cluster", v.cluster_uuid()},
                                         {"epoch", v.epoch()},
                                         {"servers", v.servers_size()},
                                         {"segments", v.segments_size()},
                                         {"format_version", v.format_version()}});
    if (v.format_version() < 1) {
      // Written before servers' server-local segments were recorded: a
      // backup placed on one is refused by its server and placed anew
      // (REPLICA_STATE_REFUSED), and each server's list is complete once it
      // registers again.
      log.Warn(
          "the stored view is of an older format: server-local segments are unknown until "
          "each server registers again",
          {{"format_version", v.format_version()}});
    }
  }
  auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(m->liveness_mu_);
    for (const auto& server : m->view_.servers()) m->liveness_[server.id()].last_seen = now;
  }
  m->Publish();
  *manager = std::move(m);
  return Status::OK();
}

uint64_t ViewManager::epoch() {
  std::lock_guard<std::mutex> lock(mu_);
  return view_.epoch();
}

void ViewManager::SetLeaderAddress(std::string address) {
  std::lock_guard<std::mutex> lock(mu_);
  leader_address_ = std::move(address);
}

Status ViewManager::CheckSecret(const std::string& presented) const {
  if (presented.empty()) return Status::PermissionDenied("no cluster secret presented");
  if (!SecretsEqual(presented, options_.cluster_secret)) {
    return Status::PermissionDenied("wrong cluster secret");
  }
  return Status::OK();
}

Status ViewManager::Commit(v1::ClusterView next) {
  next.set_format_version(kViewFormatVersion);
  uint64_t new_revision = 0;
  Status s = store_->CompareAndPut(revision_, next, &new_revision);
  if (!s.ok()) {
    log_.Error("storing the view failed; the change is not applied",
               {{"store", store_->Describe()}, {"epoch", next.epoch()}, {"status", s}});
    if (s.code() == StatusCode::kAborted) {
      return Status::Unavailable("the stored view changed underneath this monitor: " +
                                 std::string(s.message()));
    }
    return s.WithContext("store the view");
  }
  revision_ = new_revision;
  view_ = std::move(next);
  Publish();
  return Status::OK();
}

void ViewManager::Publish() {
  std::lock_guard<std::mutex> lock(liveness_mu_);
  published_epoch_ = view_.epoch();
  published_members_.clear();
  for (const auto& s : view_.servers()) published_members_.insert(s.id());
  EndDeclarationsLocked();
}

void ViewManager::EndDeclarationsLocked() {
  for (auto& [id, l] : liveness_) l.being_declared_down = false;
}

v1::ServerState ViewManager::LiveState(uint32_t server_id, Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(liveness_mu_);
  return LiveStateLocked(server_id, now);
}

v1::ServerState ViewManager::LiveStateLocked(uint32_t server_id, Clock::time_point now) const {
  auto it = liveness_.find(server_id);
  if (it == liveness_.end()) return v1::SERVER_STATE_DOWN;
  if (it->second.refused_at > it->second.last_seen) return v1::SERVER_STATE_DOWN;
  auto silent = now - it->second.last_seen;
  if (silent >= options_.down_timeout) return v1::SERVER_STATE_DOWN;
  if (silent >= options_.suspect_timeout) return v1::SERVER_STATE_SUSPECT;
  return v1::SERVER_STATE_UP;
}

std::vector<uint32_t> ViewManager::LiveServers(const v1::ClusterView& view,
                                               Clock::time_point now) const {
  std::vector<uint32_t> ids;
  for (const auto& s : view.servers()) {
    if (s.state() == v1::SERVER_STATE_UP && LiveState(s.id(), now) == v1::SERVER_STATE_UP) {
      ids.push_back(s.id());
    }
  }
  return ids;
}

bool ViewManager::RebalanceTables(v1::ClusterView* view, Clock::time_point now) const {
  std::vector<TableSlot> slots = TableSlots(*view);
  std::vector<uint32_t> suspect;  // keep their tables (placement.h)
  for (const auto& s : view->servers()) {
    if (s.state() == v1::SERVER_STATE_UP && LiveState(s.id(), now) == v1::SERVER_STATE_SUSPECT) {
      suspect.push_back(s.id());
    }
  }
  if (!BalanceTables(&slots, LiveServers(*view, now), suspect)) return false;
  for (size_t i = 0; i < slots.size(); ++i) {
    v1::TableAssignment* t = view->mutable_tables(static_cast<int>(i));
    if (t->server_id() != slots[i].owner) {
      t->set_server_id(slots[i].owner);
      t->set_assigned_epoch(view->epoch());
    }
  }
  return true;
}

void ViewManager::Touch(uint32_t server_id) {
  std::lock_guard<std::mutex> lock(liveness_mu_);
  TouchLocked(server_id);
}

void ViewManager::TouchLocked(uint32_t server_id) {
  Liveness& l = liveness_[server_id];
  l.last_seen = Clock::now();
  l.last_heartbeat_unix_ms = NowUnixMs();
}

void ViewManager::FillServers(Clock::time_point now,
                              google::protobuf::RepeatedPtrField<v1::ServerInfo>* out) const {
  auto used = TakenLocalSegments(view_);
  std::map<uint32_t, uint32_t> tables;
  for (const auto& t : view_.tables()) ++tables[t.server_id()];
  std::lock_guard<std::mutex> lock(liveness_mu_);
  for (const auto& stored : view_.servers()) {
    v1::ServerInfo* s = out->Add();
    *s = stored;
    auto it = liveness_.find(stored.id());
    if (it != liveness_.end()) {
      s->set_used_bytes(it->second.used_bytes);
      s->set_last_heartbeat_unix_ms(it->second.last_heartbeat_unix_ms);
    }
    if (stored.state() == v1::SERVER_STATE_UP) s->set_state(LiveStateLocked(stored.id(), now));
    s->set_segments_used(static_cast<uint32_t>(used[stored.id()].size()));
    s->set_tables(tables[stored.id()]);
  }
}

Status ViewManager::RegisterServer(const v1::RegisterServerRequest& req,
                                   v1::RegisterServerResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  const v1::ServerInfo& info = req.info();
  if (info.address().empty()) return Status::InvalidArgument("server address is empty");
  if (info.transport() != "tcp" && info.transport() != "verbs") {
    return Status::InvalidArgument("transport \"" + info.transport() +
                                   "\" is neither tcp nor verbs");
  }
  if (req.segment_count() == 0) {
    return Status::InvalidArgument("server offers no segments (its PM is smaller than one)");
  }
  PDPM_RETURN_IF_ERROR(CheckServerLocal(req.server_local_segments(), req.segment_count()));
  std::lock_guard<std::mutex> lock(mu_);
  if (req.segment_size() != view_.segment_size()) {
    return Status::FailedPrecondition(
        "server cut its PM into segments of " + std::to_string(req.segment_size()) +
        " bytes; this cluster uses " + std::to_string(view_.segment_size()));
  }
  auto now = Clock::now();
  v1::ClusterView next = view_;
  uint32_t id = 0;
  bool changed = false;
  bool fresh = false;  // a member added by this call
  if (req.cluster_uuid().empty()) {
    if (req.server_id() != 0) {
      return Status::InvalidArgument("server id " + std::to_string(req.server_id()) +
                                     " presented without a cluster uuid");
    }
    for (const auto& member : view_.servers()) {
      if (!req.join_token().empty() && member.join_token() == req.join_token()) {
        id = member.id();  // a retry of a join that succeeded
      }
    }
    fresh = id == 0;
    if (fresh) {
      if (next.cluster_uuid().empty()) next.set_cluster_uuid(NewClusterUuid());
      id = next.next_server_id();
      next.set_next_server_id(id + 1);
      v1::ServerInfo* s = next.add_servers();
      s->set_id(id);
      s->set_address(info.address());
      s->set_transport(info.transport());
      s->set_cores(info.cores());
      s->set_capacity_bytes(uint64_t{req.segment_count()} * req.segment_size());
      *s->mutable_labels() = info.labels();
      s->set_segment_count(req.segment_count());
      s->set_state(v1::SERVER_STATE_UP);
      s->set_join_token(req.join_token());
      *s->mutable_server_local_segments() = req.server_local_segments();
      s->set_features(req.features());
      changed = true;
    }
  } else {
    if (view_.cluster_uuid().empty()) {
      return Status::FailedPrecondition("server belongs to cluster " + req.cluster_uuid() +
                                        " but this monitor's view has no cluster yet (" +
                                        store_->Describe() +
                                        " is not the view that cluster was created with)");
    }
    if (req.cluster_uuid() != view_.cluster_uuid()) {
      return Status::FailedPrecondition("server belongs to cluster " + req.cluster_uuid() +
                                        "; this monitor serves cluster " + view_.cluster_uuid());
    }
    id = req.server_id();
    v1::ServerInfo* s = id == 0 ? nullptr : FindServer(&next, id);
    if (s == nullptr) {
      return Status::NotFound("server id " + std::to_string(id) + " is not a member of cluster " +
                              view_.cluster_uuid());
    }
    std::set<uint32_t> mapped;  // this server's copies in the mapping
    std::set<uint32_t> primaries;
    for (const auto& m : view_.segments()) {
      if (m.primary().server_id() == id) {
        mapped.insert(m.primary().local_index());
        primaries.insert(m.primary().local_index());
      }
      for (const auto& b : m.backups()) {
        if (b.server_id() == id) mapped.insert(b.local_index());
      }
    }
    if (!mapped.empty() && *mapped.rbegin() >= req.segment_count()) {
      return Status::FailedPrecondition(
          "server " + std::to_string(id) + " now offers " + std::to_string(req.segment_count()) +
          " segments but local segment " + std::to_string(*mapped.rbegin()) + " is mapped");
    }
    for (uint32_t local : req.server_local_segments()) {
      if (primaries.count(local)) {
        return Status::FailedPrecondition(
            "server " + std::to_string(id) + " holds server-local data in local segment " +
            std::to_string(local) + ", which the mapping gives a primary copy");
      }
    }
    // A backup mapped on a server-local segment is placed anew by the next
    // reconfiguration (its server never took the copy).
    v1::ServerInfo updated = *s;
    *updated.mutable_server_local_segments() = req.server_local_segments();
    updated.set_address(info.address());
    updated.set_transport(info.transport());
    updated.set_cores(info.cores());
    updated.set_capacity_bytes(uint64_t{req.segment_count()} * req.segment_size());
    *updated.mutable_labels() = info.labels();
    updated.set_segment_count(req.segment_count());
    updated.set_features(req.features());
    if (updated.SerializeAsString() != s->SerializeAsString()) {
      *s = updated;
      changed = true;
    }
  }
  {
    std::lock_guard<std::mutex> lock(liveness_mu_);
    TouchLocked(id);
    liveness_[id].reported = v1::SERVER_STATE_UP;
  }
  next.set_epoch(next.epoch() + 1);  // the epoch table owners would take
  if (RebalanceTables(&next, now)) changed = true;
  if (changed) {
    Status s = Commit(std::move(next));
    if (!s.ok()) {
      if (fresh) {
        std::lock_guard<std::mutex> lock(liveness_mu_);
        liveness_.erase(id);
      }
      return s;
    }
  }
  resp->set_cluster_uuid(view_.cluster_uuid());
  resp->set_server_id(id);
  resp->set_epoch(view_.epoch());
  resp->set_heartbeat_interval_ms(static_cast<uint64_t>(options_.heartbeat_interval.count()));
  resp->set_down_timeout_ms(static_cast<uint64_t>(options_.down_timeout.count()));
  resp->set_lease_ms(static_cast<uint64_t>(options_.lease().count()));
  log_.Info(fresh                        ? "server joined"
            : req.cluster_uuid().empty() ? "server join retried"
                                         : "server rejoined",
            {{"server_id", id},
             {"addr", info.address()},
             {"segments", req.segment_count()},
             {"cluster", view_.cluster_uuid()},
             {"epoch", view_.epoch()}});
  return Status::OK();
}

Status ViewManager::FindMember(uint32_t server_id, const v1::ServerInfo** server) const {
  *server = FindServer(view_, server_id);
  if (*server == nullptr) {
    return Status::NotFound("server id " + std::to_string(server_id) +
                            " is not a member; register first");
  }
  return Status::OK();
}

Status ViewManager::Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  // liveness_mu_ only, never mu_: see the header.
  std::lock_guard<std::mutex> lock(liveness_mu_);
  if (published_members_.count(req.server_id()) == 0) {
    return Status::NotFound("server id " + std::to_string(req.server_id()) +
                            " is not a member; register first");
  }
  auto it = liveness_.find(req.server_id());
  if (it != liveness_.end() && it->second.being_declared_down) {
    return Status::Unavailable("server " + std::to_string(req.server_id()) +
                               " is being declared down; no lease until the new view is stored");
  }
  TouchLocked(req.server_id());
  Liveness& l = liveness_[req.server_id()];
  l.used_bytes = req.used_bytes();
  // A late heartbeat eats into the margin between the timeouts and a busy
  // host's delays (docs/monitor.md "Timing"): worth seeing before it costs
  // a false SUSPECT.
  if (l.last_heartbeat != Clock::time_point{} &&
      l.last_seen - l.last_heartbeat > 2 * options_.heartbeat_interval) {
    log_.Info("late heartbeat", {{"server_id", req.server_id()},
                                 {"gap_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                                l.last_seen - l.last_heartbeat)
                                                .count()}});
  }
  l.last_heartbeat = l.last_seen;
  resp->set_epoch(published_epoch_);
  resp->set_lease_ms(static_cast<uint64_t>(options_.lease().count()));
  return Status::OK();
}

Status ViewManager::AllocateSegment(const v1::AllocateSegmentRequest& req,
                                    v1::AllocateSegmentResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t server_id = req.server_id();
  const v1::ServerInfo* server = nullptr;
  PDPM_RETURN_IF_ERROR(FindMember(server_id, &server));
  if (req.epoch() > view_.epoch()) {
    return Status::InvalidArgument("request epoch " + std::to_string(req.epoch()) +
                                   " is ahead of the cluster's " + std::to_string(view_.epoch()));
  }
  if (req.local_index() >= server->segment_count()) {
    return Status::OutOfRange("local segment " + std::to_string(req.local_index()) +
                              " does not exist: server " + std::to_string(server_id) + " has " +
                              std::to_string(server->segment_count()));
  }
  if (req.table() > view_.table_count()) {
    return Status::InvalidArgument("table " + std::to_string(req.table()) + " does not exist (" +
                                   std::to_string(view_.table_count()) + " tables)");
  }
  Touch(server_id);
  // The pending split this segment is the new half of (split_parent), or -1.
  int split = -1;
  if (req.split_parent() != 0) {
    split = FindSplit(view_, req.split_parent());
    const std::string of = "segment " + std::to_string(req.split_parent());
    if (split < 0) {
      return Status::FailedPrecondition(of + " has no pending split (given up or committed)");
    }
    const v1::PendingSplit& sp = view_.splits(split);
    if (sp.target_server() != server_id || sp.table() != req.table()) {
      return Status::FailedPrecondition("the split of " + of + " creates a segment of table " +
                                        std::to_string(sp.table()) + " on server " +
                                        std::to_string(sp.target_server()));
    }
  } else if (req.table() != 0) {
    const v1::TableAssignment& t = view_.tables(static_cast<int>(req.table()) - 1);
    if (t.server_id() != server_id) {
      return Status::FailedPrecondition("table " + std::to_string(req.table()) +
                                        " belongs to server " + std::to_string(t.server_id()) +
                                        " since epoch " + std::to_string(t.assigned_epoch()) +
                                        "; refresh the mapping");
    }
  }
  if (req.segment() != 0) {
    // The server's PM records this local segment as global `segment`: it
    // must still be that segment's primary copy.
    auto it =
        std::find_if(view_.segments().begin(), view_.segments().end(),
                     [&](const v1::SegmentMapping& m) { return m.segment() == req.segment(); });
    if (it == view_.segments().end() || it->primary().server_id() != server_id ||
        it->primary().local_index() != req.local_index()) {
      return Status::StaleEpoch(
          "segment " + std::to_string(req.segment()) +
          (it == view_.segments().end()
               ? std::string(" is no longer mapped")
               : " is held by server " + std::to_string(it->primary().server_id()) +
                     " since epoch " + std::to_string(it->placement_epoch())) +
          ": the copy on server " + std::to_string(server_id) + " local " +
          std::to_string(req.local_index()) + " is fenced");
    }
  }
  v1::ClusterView next = view_;
  // A repeated request for a local segment already mapped (a retry, or a
  // restarted server re-announcing its segments' new keys) returns the
  // existing mapping.
  for (auto& m : *next.mutable_segments()) {
    if (m.primary().server_id() == server_id && m.primary().local_index() == req.local_index()) {
      if (m.table() != req.table()) {
        return Status::AlreadyExists("local segment " + std::to_string(req.local_index()) +
                                     " of server " + std::to_string(server_id) +
                                     " is already global segment " + std::to_string(m.segment()) +
                                     " of table " + std::to_string(m.table()));
      }
      if (m.access_key() != req.access_key()) {
        m.set_access_key(req.access_key());
        next.set_epoch(next.epoch() + 1);
        const uint64_t segment = m.segment();
        PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
        log_.Info("segment key changed",
                  {{"segment", segment}, {"server_id", server_id}, {"epoch", view_.epoch()}});
      }
      for (const auto& cur : view_.segments()) {
        if (cur.primary().server_id() == server_id &&
            cur.primary().local_index() == req.local_index()) {
          *resp->mutable_mapping() = cur;
        }
      }
      resp->mutable_mapping()->clear_access_key();
      resp->set_epoch(view_.epoch());
      return Status::OK();
    }
    for (const auto& b : m.backups()) {
      if (b.server_id() == server_id && b.local_index() == req.local_index()) {
        return Status::AlreadyExists("local segment " + std::to_string(req.local_index()) +
                                     " of server " + std::to_string(server_id) +
                                     " holds a backup of global segment " +
                                     std::to_string(m.segment()));
      }
    }
  }
  const auto& server_local = server->server_local_segments();
  if (std::find(server_local.begin(), server_local.end(), req.local_index()) !=
      server_local.end()) {
    return Status::AlreadyExists("local segment " + std::to_string(req.local_index()) +
                                 " of server " + std::to_string(server_id) +
                                 " holds server-local data");
  }

  if (split >= 0 && next.splits(split).child() != 0) {
    return Status::AlreadyExists("the split of segment " + std::to_string(req.split_parent()) +
                                 " already created segment " +
                                 std::to_string(next.splits(split).child()));
  }

  uint64_t number = 0;
  if (req.table() == 0) {
    number = next.next_heap_segment();
    if (number >= dsm::kHeapSegmentLimit || number >= next.next_object_segment()) {
      return Status::ResourceExhausted("the heap half of the global address space is used up");
    }
    next.set_next_heap_segment(number + 1);
  } else {
    number = next.next_object_segment();
    if (number < dsm::kHeapSegmentLimit || number <= next.next_heap_segment()) {
      return Status::ResourceExhausted("the object half of the global address space is used up");
    }
    next.set_next_object_segment(number - 1);
  }

  // Backups: other live servers, each on BackupLocalIndex.
  auto now = Clock::now();
  auto taken = TakenLocalSegments(view_);
  std::vector<PlacementCandidate> candidates;
  PlacementCandidate primary;
  for (const auto& s : view_.servers()) {
    PlacementCandidate c{s.id(),
                         s.segment_count(),
                         static_cast<uint32_t>(taken[s.id()].size()),
                         {s.labels().begin(), s.labels().end()}};
    if (s.id() == server_id) {
      primary = c;
    } else if (s.state() == v1::SERVER_STATE_UP && LiveState(s.id(), now) == v1::SERVER_STATE_UP) {
      candidates.push_back(std::move(c));
    }
  }
  next.set_epoch(next.epoch() + 1);
  v1::SegmentMapping* m = next.add_segments();
  m->set_segment(number);
  m->set_segment_descriptor(
      dsm::Descriptor::Make(dsm::kPermRead | dsm::kPermWrite, view_.replica_count()).bits);
  m->mutable_primary()->set_server_id(server_id);
  m->mutable_primary()->set_local_index(req.local_index());
  // When a backup placed here meets a server's own new segment, the
  // server's AllocateSegment (or ReserveLocalSegment) is refused with
  // kAlreadyExists and it takes another.
  for (uint32_t backup : ChooseBackups(candidates, primary, view_.replica_count() - 1)) {
    uint32_t index = 0;
    if (!BackupLocalIndex(*FindServer(view_, backup), taken[backup], &index)) continue;
    v1::SegmentReplica* r = m->add_backups();
    r->set_server_id(backup);
    r->set_local_index(index);
    r->set_state(v1::REPLICA_STATE_SYNCING);  // the primary fills it (docs/replication.md)
  }
  m->set_table(req.table());
  m->set_access_key(req.access_key());
  m->set_placement_epoch(next.epoch());
  if (split >= 0) {
    v1::PendingSplit* sp = next.mutable_splits(split);
    SetRange(m, {sp->child_range_depth(), sp->child_range_prefix()});
    m->set_split_parent(sp->parent());
    sp->set_child(number);
  }
  v1::SegmentMapping result = *m;
  PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
  result.clear_access_key();
  for (auto& b : *result.mutable_backups()) b.clear_access_key();
  if (static_cast<uint32_t>(result.backups_size()) + 1 < view_.replica_count()) {
    log_.Warn("segment is under-replicated: not enough servers for its backups",
              {{"segment", number},
               {"backups", result.backups_size()},
               {"replicas", view_.replica_count()}});
  }
  log_.Info("segment allocated", {{"segment", number},
                                  {"server_id", server_id},
                                  {"local_index", req.local_index()},
                                  {"table", req.table()},
                                  {"split_parent", req.split_parent()},
                                  {"backups", result.backups_size()},
                                  {"epoch", view_.epoch()}});
  *resp->mutable_mapping() = std::move(result);
  resp->set_epoch(view_.epoch());
  return Status::OK();
}

Status ViewManager::FreeSegment(const v1::FreeSegmentRequest& req, v1::FreeSegmentResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  const v1::ServerInfo* server = nullptr;
  PDPM_RETURN_IF_ERROR(FindMember(req.server_id(), &server));
  Touch(req.server_id());
  v1::ClusterView next = view_;
  int index = 0;
  PDPM_RETURN_IF_ERROR(FindSegmentIndex(next, req.segment(), &index));
  const v1::SegmentMapping& freed = next.segments(index);
  if (freed.primary().server_id() != req.server_id()) {
    return Status::FailedPrecondition(
        "global segment " + std::to_string(req.segment()) + " belongs to server " +
        std::to_string(freed.primary().server_id()) + ", not " + std::to_string(req.server_id()));
  }
  // A freed parent gives its pending split up, and so does a freed new
  // segment of one (AbandonSplit drops the new segment with the record).
  const uint64_t split_parent = freed.split_parent();
  if (int split = FindSplit(next, req.segment()); split >= 0) AbandonSplit(&next, split);
  if (int split = split_parent == 0 ? -1 : FindSplit(next, split_parent); split >= 0) {
    AbandonSplit(&next, split);
  } else {
    PDPM_RETURN_IF_ERROR(FindSegmentIndex(next, req.segment(), &index));
    next.mutable_segments()->erase(next.mutable_segments()->begin() + index);
  }
  next.set_epoch(next.epoch() + 1);
  PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
  log_.Info("segment freed",
            {{"segment", req.segment()}, {"server_id", req.server_id()}, {"epoch", view_.epoch()}});
  resp->set_epoch(view_.epoch());
  return Status::OK();
}

Status ViewManager::GetMapping(const v1::GetMappingRequest& req, v1::GetMappingResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  resp->set_epoch(view_.epoch());
  if (req.known_epoch() == view_.epoch()) {
    resp->set_unchanged(true);
    return Status::OK();
  }
  auto now = Clock::now();
  FillServers(now, resp->mutable_servers());
  for (const auto& m : view_.segments()) {
    v1::SegmentMapping* out = resp->add_segments();
    *out = m;
    out->clear_access_key();
    for (auto& b : *out->mutable_backups()) b.clear_access_key();
  }
  *resp->mutable_tables() = view_.tables();
  *resp->mutable_splits() = view_.splits();
  resp->set_segment_size(view_.segment_size());
  resp->set_table_count(view_.table_count());
  resp->set_replica_count(view_.replica_count());
  resp->set_cluster_uuid(view_.cluster_uuid());
  return Status::OK();
}

Status ViewManager::GetSegmentKeys(const v1::GetSegmentKeysRequest& req,
                                   v1::GetSegmentKeysResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  resp->set_epoch(view_.epoch());
  if (req.segments().empty()) {
    *resp->mutable_segments() = view_.segments();
    return Status::OK();
  }
  for (uint64_t wanted : req.segments()) {
    auto it = std::find_if(view_.segments().begin(), view_.segments().end(),
                           [&](const v1::SegmentMapping& m) { return m.segment() == wanted; });
    if (it == view_.segments().end()) {
      return Status::NotFound("global segment " + std::to_string(wanted) + " is not mapped");
    }
    *resp->add_segments() = *it;
  }
  return Status::OK();
}

Status ViewManager::GetClusterStatus(v1::ClusterStatus* status) {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  status->set_cluster_uuid(view_.cluster_uuid());
  status->set_epoch(view_.epoch());
  status->set_leader(leader_address_);
  status->set_replica_count(view_.replica_count());
  status->set_segments(static_cast<uint32_t>(view_.segments_size()));
  status->set_segment_size(view_.segment_size());
  status->set_table_count(view_.table_count());
  uint32_t up = 0;
  uint64_t capacity = 0, used = 0;
  std::map<uint32_t, v1::ServerState> states;
  std::vector<std::string> problems;
  FillServers(now, status->mutable_servers());
  for (const auto& s : status->servers()) {
    states[s.id()] = s.state();
    // A drained server holds nothing and never takes data again: a planned
    // removal that has completed, neither capacity nor a problem.
    if (s.state() == v1::SERVER_STATE_DRAINED) continue;
    capacity += s.capacity_bytes();
    used += s.used_bytes();
    if (s.state() == v1::SERVER_STATE_UP) {
      ++up;
    } else {
      problems.push_back("server " + std::to_string(s.id()) + " (" + s.address() + ") is " +
                         std::string(StateName(s.state())));
    }
  }
  status->set_servers_up(up);
  status->set_servers_total(static_cast<uint32_t>(view_.servers_size()));
  status->set_capacity_bytes(capacity);
  status->set_used_bytes(used);
  uint32_t unavailable = 0, under_replicated = 0;
  for (const auto& m : view_.segments()) {
    if (states[m.primary().server_id()] == v1::SERVER_STATE_DOWN) ++unavailable;
    uint32_t in_sync = 0;
    for (const auto& b : m.backups()) in_sync += b.state() == v1::REPLICA_STATE_IN_SYNC;
    if (in_sync + 1 < view_.replica_count()) ++under_replicated;
  }
  uint32_t unowned = 0;
  for (const auto& t : view_.tables()) {
    if (t.server_id() == 0 || states[t.server_id()] == v1::SERVER_STATE_DOWN) ++unowned;
  }
  if (unavailable) {
    problems.push_back(std::to_string(unavailable) + " segments on down servers");
  }
  if (unowned) problems.push_back(std::to_string(unowned) + " tables without a live owner");
  if (under_replicated) {
    problems.push_back(std::to_string(under_replicated) + " segments under-replicated");
  }
  v1::Health health = v1::HEALTH_OK;
  if (view_.servers().empty()) {
    health = v1::HEALTH_DOWN;
    problems.insert(problems.begin(), "no servers registered");
  } else if (unavailable || unowned || up == 0) {
    health = v1::HEALTH_DOWN;
  } else if (!problems.empty()) {
    health = v1::HEALTH_DEGRADED;
  }
  status->set_health(health);
  std::string message;
  for (const auto& p : problems) message += (message.empty() ? "" : "; ") + p;
  status->set_message(message);
  return Status::OK();
}

void ViewManager::CheckLiveness() {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  std::unique_lock<std::mutex> live_lock(liveness_mu_);
  for (const auto& s : view_.servers()) {
    Liveness& l = liveness_[s.id()];
    v1::ServerState state = LiveStateLocked(s.id(), now);
    if (state == l.reported) continue;
    auto silent_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - l.last_seen).count();
    const char* msg = state == v1::SERVER_STATE_UP        ? "server is up again"
                      : state == v1::SERVER_STATE_SUSPECT ? "server missed its heartbeats"
                                                          : "server is down";
    LogLevel level = state == v1::SERVER_STATE_UP ? LogLevel::kInfo : LogLevel::kWarn;
    log_.Log(level, msg,
             {{"server_id", s.id()},
              {"addr", s.address()},
              {"state", StateName(state)},
              {"silent_ms", silent_ms}});
    l.reported = state;
  }
  live_lock.unlock();
  Status st = ReconfigureLocked(now);
  if (!st.ok()) log_.Warn("reconfiguration not stored; retried next check", {{"status", st}});
}

Status ViewManager::ReconfigureLocked(Clock::time_point now) {
  ReconfigureInput in;
  in.epoch = view_.epoch() + 1;
  // States are read and the DOWN ones marked in one hold of liveness_mu_:
  // a heartbeat comes either before (and the server is not DOWN) or after
  // (and is refused until the view below is stored and published).
  std::unique_lock<std::mutex> live_lock(liveness_mu_);
  for (const auto& s : view_.servers()) {
    v1::ServerState live = LiveStateLocked(s.id(), now);
    if (live == v1::SERVER_STATE_DOWN) {
      in.dead.insert(s.id());
      liveness_[s.id()].being_declared_down = true;
    }
    if (s.state() == v1::SERVER_STATE_DRAINING || s.state() == v1::SERVER_STATE_DRAINED) {
      in.leaving.insert(s.id());
    } else if (live == v1::SERVER_STATE_UP) {
      // segments_used: Reconfigure counts it from the view it changes.
      in.candidates.push_back(
          {s.id(), s.segment_count(), 0, {s.labels().begin(), s.labels().end()}});
    }
  }
  live_lock.unlock();
  v1::ClusterView next = view_;
  next.set_epoch(in.epoch);
  std::vector<std::string> changes = Reconfigure(in, &next);
  if (RebalanceTables(&next, now)) changes.push_back("empty tables rebalanced");
  for (auto& s : *next.mutable_servers()) {
    if (s.state() == v1::SERVER_STATE_DRAINING && !HoldsData(next, s.id())) {
      s.set_state(v1::SERVER_STATE_DRAINED);
      changes.push_back("server " + std::to_string(s.id()) + " drained");
    }
  }
  if (changes.empty()) {
    // Nothing handed over (the check every heartbeat interval ends here):
    // the marks end, the published view stays.
    std::lock_guard<std::mutex> live(liveness_mu_);
    EndDeclarationsLocked();
    return Status::OK();
  }
  if (Status s = Commit(std::move(next)); !s.ok()) {
    // The old view stays in force, and with it the servers' leases.
    std::lock_guard<std::mutex> live(liveness_mu_);
    EndDeclarationsLocked();
    return s;
  }
  for (const auto& c : changes)
    log_.Info("reconfigured", {{"change", c}, {"epoch", view_.epoch()}});
  return Status::OK();
}

Status ViewManager::ReportReplica(const v1::ReportReplicaRequest& req,
                                  v1::ReportReplicaResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  const v1::ServerInfo* server = nullptr;
  PDPM_RETURN_IF_ERROR(FindMember(req.server_id(), &server));
  Touch(req.server_id());
  v1::ClusterView next = view_;
  int index = 0;
  PDPM_RETURN_IF_ERROR(FindSegmentIndex(next, req.segment(), &index));
  v1::SegmentMapping* m = next.mutable_segments(index);
  auto* backups = m->mutable_backups();
  auto b = std::find_if(backups->begin(), backups->end(), [&](const v1::SegmentReplica& r) {
    return r.server_id() == req.replica_server_id() && r.local_index() == req.local_index();
  });
  if (b == backups->end()) {
    return Status::StaleEpoch("server " + std::to_string(req.replica_server_id()) + " local " +
                              std::to_string(req.local_index()) + " holds no backup of segment " +
                              std::to_string(req.segment()) + " in epoch " +
                              std::to_string(view_.epoch()));
  }
  const bool from_primary = m->primary().server_id() == req.server_id();
  if (!from_primary && req.server_id() != req.replica_server_id()) {
    return Status::FailedPrecondition("server " + std::to_string(req.server_id()) +
                                      " holds neither the primary nor that backup of segment " +
                                      std::to_string(req.segment()));
  }
  if (req.state() == v1::REPLICA_STATE_REFUSED) {
    if (req.server_id() != req.replica_server_id()) {
      return Status::FailedPrecondition("only the backup's own server refuses a backup");
    }
    // Its local segment holds server-local data this view did not show:
    // recorded, so the backup is placed elsewhere now and nothing lands
    // there again.
    backups->erase(b);
    v1::ServerInfo* holder = FindServer(&next, req.replica_server_id());
    holder->add_server_local_segments(req.local_index());
    next.set_epoch(next.epoch() + 1);
    PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
    log_.Warn("backup refused by its server: it holds server-local data there; placed anew",
              {{"segment", req.segment()},
               {"server_id", req.replica_server_id()},
               {"local_index", req.local_index()},
               {"epoch", view_.epoch()}});
    if (Status placed = ReconfigureLocked(Clock::now()); !placed.ok()) {
      log_.Warn("reconfiguration not stored; retried next check", {{"status", placed}});
    }
    resp->set_epoch(view_.epoch());
    return Status::OK();
  }
  v1::ReplicaState state = b->state();
  if (req.state() == v1::REPLICA_STATE_IN_SYNC) {
    if (!from_primary) {
      return Status::FailedPrecondition("only the primary declares a backup in sync");
    }
    state = v1::REPLICA_STATE_IN_SYNC;
  } else if (req.state() == v1::REPLICA_STATE_SYNCING) {
    state = v1::REPLICA_STATE_SYNCING;
  }
  const uint32_t key = req.access_key() != 0 ? req.access_key() : b->access_key();
  if (b->access_key() == key && b->state() == state) {
    resp->set_epoch(view_.epoch());
    return Status::OK();
  }
  b->set_access_key(key);
  b->set_state(state);
  next.set_epoch(next.epoch() + 1);
  PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
  log_.Info("replica reported",
            {{"segment", req.segment()},
             {"server_id", req.replica_server_id()},
             {"local_index", req.local_index()},
             {"state", state == v1::REPLICA_STATE_IN_SYNC ? "in_sync" : "syncing"},
             {"epoch", view_.epoch()}});
  resp->set_epoch(view_.epoch());
  return Status::OK();
}

Status ViewManager::ReportUnreachable(const v1::ReportUnreachableRequest& req,
                                      v1::ReportUnreachableResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::string address;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const v1::ServerInfo* server = nullptr;
    PDPM_RETURN_IF_ERROR(FindMember(req.server_id(), &server));
    if (LiveState(req.server_id(), Clock::now()) == v1::SERVER_STATE_DOWN) {
      resp->set_epoch(view_.epoch());
      resp->set_confirmed(true);
      return Status::OK();
    }
    address = server->address();
  }
  log_.Log(LogLevel::kDebug, "server reported unreachable; probing",
           {{"server_id", req.server_id()}, {"addr", address}});
  const auto probed = Clock::now();
  bool refused = false;
  Status probe = ProbeRefused(address, kProbeTimeout, &refused);
  std::lock_guard<std::mutex> lock(mu_);
  resp->set_epoch(view_.epoch());
  if (!probe.ok() || !refused) return Status::OK();  // heartbeats decide
  auto now = Clock::now();
  {
    std::lock_guard<std::mutex> live_lock(liveness_mu_);
    Liveness& l = liveness_[req.server_id()];
    if (l.last_seen > probed) return Status::OK();  // heard from meanwhile: restarted
    l.refused_at = now;
  }
  log_.Warn("server refuses connections: down",
            {{"server_id", req.server_id()}, {"addr", address}});
  PDPM_RETURN_IF_ERROR(ReconfigureLocked(now));
  resp->set_epoch(view_.epoch());
  resp->set_confirmed(true);
  return Status::OK();
}

Status ViewManager::SplitParentLocked(uint32_t server_id, uint64_t segment, int* index) {
  const v1::ServerInfo* caller = nullptr;
  PDPM_RETURN_IF_ERROR(FindMember(server_id, &caller));
  Touch(server_id);
  PDPM_RETURN_IF_ERROR(FindSegmentIndex(view_, segment, index));
  const v1::SegmentMapping& m = view_.segments(*index);
  const std::string seg = "segment " + std::to_string(segment);
  if (m.table() == 0) return Status::InvalidArgument(seg + " is a heap segment: only tables split");
  if (m.split_parent() != 0) {
    return Status::FailedPrecondition(seg + " is the new half of the pending split of segment " +
                                      std::to_string(m.split_parent()));
  }
  if (m.primary().server_id() != server_id) {
    return Status::FailedPrecondition(seg + "'s primary is server " +
                                      std::to_string(m.primary().server_id()) + ", not " +
                                      std::to_string(server_id) + "; refresh the mapping");
  }
  return Status::OK();
}

Status ViewManager::SplitSegment(const v1::SplitSegmentRequest& req,
                                 v1::SplitSegmentResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  int index = 0;
  PDPM_RETURN_IF_ERROR(SplitParentLocked(req.server_id(), req.segment(), &index));
  const v1::SegmentMapping parent = view_.segments(index);
  if (int split = FindSplit(view_, req.segment()); split >= 0) {
    // A retry after a lost reply: the split reserved then.
    *resp->mutable_split() = view_.splits(split);
    resp->set_epoch(view_.epoch());
    return Status::OK();
  }
  const std::string seg = "segment " + std::to_string(req.segment());
  const dsm::TableRange range = RangeOf(parent);
  if (range.depth >= dsm::kMaxRangeDepth) {
    return Status::ResourceExhausted(seg + " holds range " + range.ToString() + " of table " +
                                     std::to_string(parent.table()) +
                                     ", the smallest there is: it cannot split");
  }
  for (const auto& s : view_.servers()) {
    if (s.state() != v1::SERVER_STATE_DRAINED && (s.features() & v1::SERVER_FEATURE_SPLIT) == 0) {
      return Status::FailedPrecondition("server " + std::to_string(s.id()) +
                                        " runs a version without table splits: " + seg +
                                        " splits once every server is upgraded");
    }
  }
  // The new segment goes to the live server with the most free local
  // segments; a split that has not created its segment yet holds one of
  // its target's.
  const auto now = Clock::now();
  auto taken = TakenLocalSegments(view_);
  std::map<uint32_t, uint32_t> reserved;
  for (const auto& sp : view_.splits()) {
    if (sp.child() == 0) ++reserved[sp.target_server()];
  }
  std::vector<PlacementCandidate> candidates;
  for (const auto& s : view_.servers()) {
    if (s.state() != v1::SERVER_STATE_UP || LiveState(s.id(), now) != v1::SERVER_STATE_UP) continue;
    candidates.push_back({s.id(),
                          s.segment_count(),
                          static_cast<uint32_t>(taken[s.id()].size()) + reserved[s.id()],
                          {s.labels().begin(), s.labels().end()}});
  }
  uint32_t target = 0;
  if (!ChooseSegmentServer(candidates, &target)) {
    return Status::ResourceExhausted("no server has a free segment for a split of " + seg +
                                     ": the cluster is full");
  }
  v1::ClusterView next = view_;
  next.set_epoch(next.epoch() + 1);  // the target learns of the split from the mapping
  v1::PendingSplit* sp = next.add_splits();
  sp->set_table(parent.table());
  sp->set_parent(parent.segment());
  sp->set_child_range_depth(range.Upper().depth);
  sp->set_child_range_prefix(range.Upper().prefix);
  sp->set_target_server(target);
  sp->set_reserved_epoch(next.epoch());
  const v1::PendingSplit result = *sp;
  PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
  log_.Info("split reserved", {{"segment", parent.segment()},
                               {"table", parent.table()},
                               {"range", range.ToString()},
                               {"target", target},
                               {"epoch", view_.epoch()}});
  *resp->mutable_split() = result;
  resp->set_epoch(view_.epoch());
  return Status::OK();
}

Status ViewManager::CommitSplit(const v1::CommitSplitRequest& req, v1::CommitSplitResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  int parent_index = 0;
  PDPM_RETURN_IF_ERROR(SplitParentLocked(req.server_id(), req.segment(), &parent_index));
  const std::string seg = "segment " + std::to_string(req.segment());
  const int split = FindSplit(view_, req.segment());
  int child_index = 0;
  const bool child_mapped = FindSegmentIndex(view_, req.child(), &child_index).ok();
  if (split < 0) {
    // Committed already (a retry after a lost reply) when the child holds
    // the upper buddy of the parent's range.
    const v1::SegmentMapping& parent = view_.segments(parent_index);
    const dsm::TableRange range = RangeOf(parent);
    if (child_mapped && range.depth > 0 && (range.prefix & 1) == 0) {
      const v1::SegmentMapping& child = view_.segments(child_index);
      if (child.table() == parent.table() && child.split_parent() == 0 &&
          RangeOf(child) == range.Buddy()) {
        *resp->mutable_parent() = WithoutKeys(parent);
        *resp->mutable_child() = WithoutKeys(child);
        resp->set_epoch(view_.epoch());
        return Status::OK();
      }
    }
    return Status::FailedPrecondition(seg + " has no pending split into segment " +
                                      std::to_string(req.child()) + " (given up)");
  }
  const v1::PendingSplit& sp = view_.splits(split);
  if (sp.child() == 0) {
    return Status::FailedPrecondition("the new segment of " + seg + "'s split is not created yet");
  }
  if (sp.child() != req.child() || !child_mapped) {
    return Status::FailedPrecondition(seg + " splits into segment " + std::to_string(sp.child()) +
                                      ", not " + std::to_string(req.child()));
  }
  v1::ClusterView next = view_;
  next.set_epoch(next.epoch() + 1);
  v1::SegmentMapping* parent = next.mutable_segments(parent_index);
  v1::SegmentMapping* child = next.mutable_segments(child_index);
  const dsm::TableRange old_range = RangeOf(*parent);
  SetRange(parent, old_range.Lower());
  parent->set_placement_epoch(next.epoch());
  child->set_split_parent(0);
  child->set_placement_epoch(next.epoch());
  v1::SegmentMapping parent_result = WithoutKeys(*parent);
  v1::SegmentMapping child_result = WithoutKeys(*child);
  next.mutable_splits()->erase(next.mutable_splits()->begin() + split);
  PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
  *resp->mutable_parent() = std::move(parent_result);
  *resp->mutable_child() = std::move(child_result);
  log_.Info("split committed", {{"segment", req.segment()},
                                {"child", req.child()},
                                {"table", resp->parent().table()},
                                {"range", old_range.ToString()},
                                {"epoch", view_.epoch()}});
  resp->set_epoch(view_.epoch());
  return Status::OK();
}

Status ViewManager::CancelSplit(const v1::CancelSplitRequest& req, v1::CancelSplitResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  int index = 0;
  PDPM_RETURN_IF_ERROR(SplitParentLocked(req.server_id(), req.segment(), &index));
  const int split = FindSplit(view_, req.segment());
  if (split >= 0) {
    // Otherwise given up already: the cancel is a retry, or came after a
    // reconfiguration did it.
    v1::ClusterView next = view_;
    next.set_epoch(next.epoch() + 1);
    const uint64_t child = next.splits(split).child();
    AbandonSplit(&next, split);
    PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
    log_.Info("split given up",
              {{"segment", req.segment()}, {"child", child}, {"epoch", view_.epoch()}});
  }
  resp->set_epoch(view_.epoch());
  return Status::OK();
}

Status ViewManager::ReserveLocalSegment(const v1::ReserveLocalSegmentRequest& req,
                                        v1::ReserveLocalSegmentResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  const v1::ServerInfo* server = nullptr;
  PDPM_RETURN_IF_ERROR(FindMember(req.server_id(), &server));
  Touch(req.server_id());
  if (req.local_index() >= server->segment_count()) {
    return Status::OutOfRange("local segment " + std::to_string(req.local_index()) +
                              " does not exist: server " + std::to_string(req.server_id()) +
                              " has " + std::to_string(server->segment_count()));
  }
  resp->set_epoch(view_.epoch());
  const auto& reserved = server->server_local_segments();
  if (std::find(reserved.begin(), reserved.end(), req.local_index()) != reserved.end()) {
    return Status::OK();  // a retry
  }
  for (const auto& m : view_.segments()) {
    bool held = m.primary().server_id() == req.server_id() &&
                m.primary().local_index() == req.local_index();
    for (const auto& b : m.backups()) {
      held |= b.server_id() == req.server_id() && b.local_index() == req.local_index();
    }
    if (held) {
      return Status::AlreadyExists(
          "local segment " + std::to_string(req.local_index()) + " of server " +
          std::to_string(req.server_id()) + " holds a copy of global segment " +
          std::to_string(m.segment()) + " in epoch " + std::to_string(view_.epoch()));
    }
  }
  v1::ClusterView next = view_;
  FindServer(&next, req.server_id())->add_server_local_segments(req.local_index());
  next.set_epoch(next.epoch() + 1);
  PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
  log_.Info("server-local segment reserved", {{"server_id", req.server_id()},
                                              {"local_index", req.local_index()},
                                              {"epoch", view_.epoch()}});
  resp->set_epoch(view_.epoch());
  return Status::OK();
}

Status ViewManager::DrainServer(const v1::DrainServerRequest& req, v1::DrainServerResponse* resp) {
  PDPM_RETURN_IF_ERROR(CheckSecret(req.cluster_secret()));
  std::lock_guard<std::mutex> lock(mu_);
  const v1::ServerInfo* server = nullptr;
  PDPM_RETURN_IF_ERROR(FindMember(req.server_id(), &server));
  if (server->state() == v1::SERVER_STATE_UP) {
    v1::ClusterView next = view_;
    FindServer(&next, req.server_id())->set_state(v1::SERVER_STATE_DRAINING);
    next.set_epoch(next.epoch() + 1);
    PDPM_RETURN_IF_ERROR(Commit(std::move(next)));
    log_.Info("server draining", {{"server_id", req.server_id()}, {"epoch", view_.epoch()}});
  }
  PDPM_RETURN_IF_ERROR(ReconfigureLocked(Clock::now()));
  server = FindServer(view_, req.server_id());
  uint32_t primaries = 0, backups = 0, tables = 0;
  for (const auto& m : view_.segments()) {
    primaries += m.primary().server_id() == req.server_id();
    for (const auto& b : m.backups()) backups += b.server_id() == req.server_id();
  }
  for (const auto& t : view_.tables()) tables += t.server_id() == req.server_id();
  resp->set_epoch(view_.epoch());
  resp->set_state(server->state());
  if (server->state() != v1::SERVER_STATE_DRAINED) {
    resp->set_message(std::to_string(primaries) + " primaries, " + std::to_string(backups) +
                      " backups and " + std::to_string(tables) + " tables still to move");
  }
  return Status::OK();
}

}  // namespace pdpm::monitor
