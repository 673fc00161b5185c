#include "monitor/reconfigure.h"

#include <algorithm>
#include <map>

namespace pdpm::monitor {
namespace {

std::string Seg(const v1::SegmentMapping& m) {
  return "segment " + std::to_string(m.segment());
}

}  // namespace

std::map<uint32_t, std::set<uint32_t>> TakenLocalSegments(const v1::ClusterView& view) {
  std::map<uint32_t, std::set<uint32_t>> taken;
  for (const auto& m : view.segments()) {
    taken[m.primary().server_id()].insert(m.primary().local_index());
    for (const auto& b : m.backups()) taken[b.server_id()].insert(b.local_index());
  }
  for (const auto& s : view.servers()) {
    taken[s.id()].insert(s.server_local_segments().begin(), s.server_local_segments().end());
  }
  return taken;
}

bool BackupLocalIndex(const v1::ServerInfo& holder, const std::set<uint32_t>& taken,
                      uint32_t* index) {
  for (uint32_t i = holder.segment_count(); i > 0; --i) {
    if (taken.count(i - 1) == 0) {
      *index = i - 1;
      return true;
    }
  }
  return false;
}

std::vector<std::string> Reconfigure(const ReconfigureInput& in, v1::ClusterView* view) {
  std::vector<std::string> changes;
  auto gone = [&](uint32_t id) { return in.dead.count(id) || in.leaving.count(id); };
  std::map<uint32_t, std::set<uint32_t>> server_local;
  for (const auto& s : view->servers()) {
    server_local[s.id()].insert(s.server_local_segments().begin(), s.server_local_segments().end());
  }
  // 0. Splits that lost a party: before a commit the parent still holds
  // every item, so giving the split up loses nothing.
  auto primary_of = [&](uint64_t segment) -> const v1::SegmentReplica* {
    for (const auto& m : view->segments()) {
      if (m.segment() == segment) return &m.primary();
    }
    return nullptr;
  };
  for (int i = view->splits_size() - 1; i >= 0; --i) {
    const v1::PendingSplit& sp = view->splits(i);
    const v1::SegmentReplica* parent = primary_of(sp.parent());
    const v1::SegmentReplica* child = sp.child() == 0 ? nullptr : primary_of(sp.child());
    if (parent == nullptr || gone(parent->server_id()) || gone(sp.target_server()) ||
        (sp.child() != 0 && (child == nullptr || gone(child->server_id())))) {
      changes.push_back("split of segment " + std::to_string(sp.parent()) + " (table " +
                        std::to_string(sp.table()) + ") abandoned: a party left");
      AbandonSplit(view, i);
    }
  }
  for (auto& m : *view->mutable_segments()) {
    auto* backups = m.mutable_backups();
    // 2. Promotion first, while the leaving primary's in-sync backups are
    // still listed.
    if (gone(m.primary().server_id())) {
      auto it = std::find_if(backups->begin(), backups->end(), [&](const v1::SegmentReplica& b) {
        return b.state() == v1::REPLICA_STATE_IN_SYNC && !gone(b.server_id());
      });
      if (it != backups->end()) {
        changes.push_back(Seg(m) + ": server " + std::to_string(it->server_id()) +
                          " promoted, replacing server " + std::to_string(m.primary().server_id()));
        m.mutable_primary()->set_server_id(it->server_id());
        m.mutable_primary()->set_local_index(it->local_index());
        m.set_access_key(it->access_key());
        m.set_placement_epoch(in.epoch);
        backups->erase(it);
      }
    }
    // 1. Dropped backups. One on a server-local segment never got its copy
    // (the server refuses the fill): it is placed anew below.
    for (auto it = backups->begin(); it != backups->end();) {
      if (gone(it->server_id())) {
        changes.push_back(Seg(m) + ": backup on server " + std::to_string(it->server_id()) +
                          " dropped");
        it = backups->erase(it);
      } else if (server_local[it->server_id()].count(it->local_index())) {
        changes.push_back(Seg(m) + ": backup on server " + std::to_string(it->server_id()) +
                          " local " + std::to_string(it->local_index()) +
                          " dropped: the server holds server-local data there");
        it = backups->erase(it);
      } else {
        ++it;
      }
    }
  }
  // 3. Missing backups, placed one segment at a time so each choice sees
  // the local segments the previous ones took.
  const uint32_t wanted = view->replica_count() > 0 ? view->replica_count() - 1 : 0;
  for (int i = 0; i < view->segments_size(); i++) {
    v1::SegmentMapping* m = view->mutable_segments(i);
    // A leaving primary without an in-sync backup needs one to move to,
    // even in a cluster without replication.
    const uint32_t p = m->primary().server_id();
    uint32_t target = in.leaving.count(p) && !in.dead.count(p) ? std::max(wanted, 1u) : wanted;
    if (static_cast<uint32_t>(m->backups_size()) >= target) continue;
    auto taken = TakenLocalSegments(*view);
    std::set<uint32_t> holders{m->primary().server_id()};
    for (const auto& b : m->backups()) holders.insert(b.server_id());
    std::vector<PlacementCandidate> candidates;
    PlacementCandidate primary{m->primary().server_id(), 0, 0, {}};
    for (const auto& c : in.candidates) {
      PlacementCandidate cc = c;
      cc.segments_used = static_cast<uint32_t>(taken[c.server_id].size());
      if (c.server_id == primary.server_id) primary = cc;
      if (holders.count(c.server_id) == 0) candidates.push_back(std::move(cc));
    }
    for (const auto& s : view->servers()) {
      if (s.id() == primary.server_id) {
        primary.labels = {s.labels().begin(), s.labels().end()};
        primary.segment_count = s.segment_count();
      }
    }
    uint32_t missing = target - static_cast<uint32_t>(m->backups_size());
    for (uint32_t id : ChooseBackups(candidates, primary, missing)) {
      auto holder = std::find_if(view->servers().begin(), view->servers().end(),
                                 [&](const v1::ServerInfo& s) { return s.id() == id; });
      uint32_t index = 0;
      if (holder == view->servers().end() || !BackupLocalIndex(*holder, taken[id], &index)) {
        continue;
      }
      v1::SegmentReplica* r = m->add_backups();
      r->set_server_id(id);
      r->set_local_index(index);
      r->set_state(v1::REPLICA_STATE_SYNCING);
      taken[id].insert(index);
      changes.push_back(Seg(*m) + ": new backup on server " + std::to_string(id) + " local " +
                        std::to_string(index) + " (syncing)");
    }
  }
  // 4. Tables follow their first segment's primary.
  for (const auto& m : view->segments()) {
    if (m.table() == 0 || m.table() > static_cast<uint32_t>(view->tables_size())) continue;
    if (m.split_parent() != 0 || m.range_prefix() != 0) continue;
    v1::TableAssignment* t = view->mutable_tables(static_cast<int>(m.table()) - 1);
    if (t->server_id() != m.primary().server_id()) {
      changes.push_back("table " + std::to_string(m.table()) + " follows " + Seg(m) +
                        " to server " + std::to_string(m.primary().server_id()));
      t->set_server_id(m.primary().server_id());
      t->set_assigned_epoch(in.epoch);
    }
  }
  return changes;
}

int FindSplit(const v1::ClusterView& view, uint64_t parent) {
  for (int i = 0; i < view.splits_size(); ++i) {
    if (view.splits(i).parent() == parent) return i;
  }
  return -1;
}

void AbandonSplit(v1::ClusterView* view, int index) {
  const uint64_t child = view->splits(index).child();
  view->mutable_splits()->erase(view->mutable_splits()->begin() + index);
  if (child == 0) return;
  auto* segments = view->mutable_segments();
  for (auto it = segments->begin(); it != segments->end(); ++it) {
    if (it->segment() == child) {
      segments->erase(it);
      return;
    }
  }
}

bool HoldsData(const v1::ClusterView& view, uint32_t server_id) {
  for (const auto& m : view.segments()) {
    if (m.primary().server_id() == server_id) return true;
    for (const auto& b : m.backups()) {
      if (b.server_id() == server_id) return true;
    }
  }
  for (const auto& t : view.tables()) {
    if (t.server_id() == server_id) return true;
  }
  return false;
}

}  // namespace pdpm::monitor
