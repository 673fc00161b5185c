#include "monitor/placement.h"

#include <algorithm>
#include <set>

namespace pdpm::monitor {
namespace {

std::string Label(const PlacementCandidate& c, const char* key) {
  auto it = c.labels.find(key);
  return it == c.labels.end() ? std::string() : it->second;
}

// How far apart two servers' failure domains are: 3 other zone, 2 other
// rack, 1 other host, 0 no known difference.
int DomainDistance(const PlacementCandidate& a, const PlacementCandidate& b) {
  static constexpr const char* kLevels[] = {"zone", "rack", "host"};
  for (int i = 0; i < 3; ++i) {
    if (Label(a, kLevels[i]) != Label(b, kLevels[i])) return 3 - i;
  }
  return 0;
}

// a uses a smaller fraction of its local segments than b.
bool LessUsedFraction(const PlacementCandidate& a, const PlacementCandidate& b) {
  return uint64_t{a.segments_used} * b.segment_count < uint64_t{b.segments_used} * a.segment_count;
}

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

bool ChooseSegmentServer(const std::vector<PlacementCandidate>& candidates, uint32_t* server_id) {
  const PlacementCandidate* best = nullptr;
  auto free_segments = [](const PlacementCandidate& c) {
    return c.segments_used >= c.segment_count ? 0u : c.segment_count - c.segments_used;
  };
  for (const PlacementCandidate& c : candidates) {
    if (free_segments(c) == 0) continue;
    if (best == nullptr || free_segments(c) > free_segments(*best) ||
        (free_segments(c) == free_segments(*best) && c.server_id < best->server_id)) {
      best = &c;
    }
  }
  if (best == nullptr) return false;
  *server_id = best->server_id;
  return true;
}

std::vector<uint32_t> ChooseBackups(const std::vector<PlacementCandidate>& candidates,
                                    const PlacementCandidate& primary, uint32_t count) {
  std::vector<const PlacementCandidate*> chosen = {&primary};
  std::vector<uint32_t> result;
  while (result.size() < count) {
    const PlacementCandidate* best = nullptr;
    int best_distance = -1;
    for (const PlacementCandidate& c : candidates) {
      if (c.segments_used >= c.segment_count) continue;
      bool taken = std::any_of(chosen.begin(), chosen.end(), [&](const PlacementCandidate* x) {
        return x->server_id == c.server_id;
      });
      if (taken) continue;
      int distance = 3;
      for (const PlacementCandidate* x : chosen)
        distance = std::min(distance, DomainDistance(c, *x));
      bool better = best == nullptr || distance > best_distance;
      if (!better && distance == best_distance) {
        if (LessUsedFraction(c, *best)) {
          better = true;
        } else if (!LessUsedFraction(*best, c)) {
          better = c.segments_used < best->segments_used ||
                   (c.segments_used == best->segments_used && c.server_id < best->server_id);
        }
      }
      if (better) {
        best = &c;
        best_distance = distance;
      }
    }
    if (best == nullptr) break;
    chosen.push_back(best);
    result.push_back(best->server_id);
  }
  return result;
}

bool BalanceTables(std::vector<TableSlot>* tables, const std::vector<uint32_t>& servers,
                   const std::vector<uint32_t>& keep) {
  if (servers.empty()) return false;
  const std::set<uint32_t> kept(keep.begin(), keep.end());
  std::map<uint32_t, uint32_t> owned;  // server → tables, over `servers` only
  for (uint32_t s : servers) owned[s] = 0;
  for (const TableSlot& t : *tables) {
    if (owned.count(t.owner)) ++owned[t.owner];
  }
  auto least_loaded = [&] {
    return std::min_element(owned.begin(), owned.end(),
                            [](const auto& a, const auto& b) {
                              return a.second < b.second ||
                                     (a.second == b.second && a.first < b.first);
                            })
        ->first;
  };
  bool changed = false;
  for (TableSlot& t : *tables) {
    if (owned.count(t.owner) || kept.count(t.owner) || t.segments != 0) continue;
    uint32_t to = least_loaded();
    t.owner = to;
    ++owned[to];
    changed = true;
  }
  while (true) {
    // The most loaded server that still owns an empty table, and its
    // highest-numbered empty table.
    TableSlot* move = nullptr;
    uint32_t from_count = 0;
    for (TableSlot& t : *tables) {
      if (t.segments != 0 || !owned.count(t.owner)) continue;
      uint32_t c = owned[t.owner];
      if (move == nullptr || c > from_count ||
          (c == from_count &&
           (t.owner < move->owner || (t.owner == move->owner && t.table > move->table)))) {
        move = &t;
        from_count = c;
      }
    }
    if (move == nullptr) break;
    uint32_t to = least_loaded();
    if (from_count <= owned[to] + 1) break;
    --owned[move->owner];
    ++owned[to];
    move->owner = to;
    changed = true;
  }
  return changed;
}

uint32_t TableForObject(uint64_t id_hi, uint64_t id_lo, uint32_t table_count) {
  // Jump consistent hash (Lamping & Veach) over a 64-bit digest of the id.
  uint64_t key = Mix64(id_hi ^ Mix64(id_lo));
  int64_t bucket = -1;
  int64_t next = 0;
  while (next < static_cast<int64_t>(table_count)) {
    bucket = next;
    key = key * 2862933555777941757ULL + 1;
    next = static_cast<int64_t>(
        static_cast<double>(bucket + 1) *
        (static_cast<double>(1LL << 31) / static_cast<double>((key >> 33) + 1)));
  }
  return static_cast<uint32_t>(bucket) + 1;
}

uint64_t ObjectPosition(uint64_t id_hi, uint64_t id_lo) {
  // Another composition than TableForObject's digest, seeded apart from it.
  constexpr uint64_t kPositionSeed = 0x7461'626c'6552'6e67;  // "tableRng"
  return Mix64(Mix64(id_hi ^ kPositionSeed) ^ id_lo);
}

uint32_t TableForKey(uint64_t key_hash, uint32_t table_count) {
  // A constant high word keeps keys' digests apart from small object ids'.
  constexpr uint64_t kKeyDomain = 0x7064'6b76'7300'0000;  // "pdkvs"
  return TableForObject(kKeyDomain, key_hash & kKeyResidueMask, table_count);
}

}  // namespace pdpm::monitor
