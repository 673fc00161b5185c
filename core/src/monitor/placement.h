// Placement decisions of the monitor, as pure functions of the view so they
// can be tested alone: which servers hold a segment's backups, which server
// owns each object-store table, and which table an object belongs to.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pdpm::monitor {

// What placement needs to know about a server.
struct PlacementCandidate {
  uint32_t server_id = 0;
  uint32_t segment_count = 0;  // local segments of its PM
  uint32_t segments_used = 0;  // holding a primary or a backup
  // Topology labels; "zone", "rack" and "host" define failure domains.
  std::map<std::string, std::string> labels;
};

// Up to `count` servers to hold backups of a segment whose primary is on
// `primary`: never the primary, never twice the same server, only servers
// with a free local segment. Preference, in order: a failure domain apart
// from every replica chosen so far (another zone beats another rack beats
// another host), the smallest used fraction of local segments, the fewest
// used segments, the lowest id. Fewer than `count` when too few servers
// qualify (the segment is then under-replicated and health says so).
std::vector<uint32_t> ChooseBackups(const std::vector<PlacementCandidate>& candidates,
                                    const PlacementCandidate& primary, uint32_t count);

// The server that creates a new table segment (the new half of a split,
// docs/dsm.md "Tables across segments"): the candidate with the most free
// local segments (segment_count - segments_used; all segments of a
// cluster have one size, so the most free PM), the lowest id among equals.
// Its backups are placed afterwards by ChooseBackups, which keeps the
// failure domains apart. False when no candidate has a free local segment.
bool ChooseSegmentServer(const std::vector<PlacementCandidate>& candidates, uint32_t* server_id);

// One object-store table in the table map.
struct TableSlot {
  uint32_t table = 0;
  uint32_t owner = 0;     // server id; 0 = none
  uint32_t segments = 0;  // segments mapped for it (0: empty, free to move)
};

// Spreads tables over `servers` (the servers that may take tables): every
// table without an owner among them or in `keep` that holds no segment is
// given to the server owning the fewest tables, then empty tables move from
// the most to the least loaded server until their counts differ by at most
// one (or no empty table is left to move). Tables of a server in `keep`
// (one that missed heartbeats but is not DOWN: it may be back in a moment)
// stay where they are: moving them churns the view under load, and only a
// DOWN server or a drain moves a table away. Tables holding segments never
// move here (moving data is migration, not placement). Deterministic.
// Returns whether any owner changed.
bool BalanceTables(std::vector<TableSlot>* tables, const std::vector<uint32_t>& servers,
                   const std::vector<uint32_t>& keep = {});

// The table (1..table_count) an object belongs to: jump consistent hashing
// of its 128-bit id, so growing table_count moves only the objects the new
// tables take. table_count must be > 0.
uint32_t TableForObject(uint64_t id_hi, uint64_t id_lo, uint32_t table_count);

// An object's position inside its table (dsm/table_range.h): which of the
// table's segments holds it once a table spans several. A 64-bit digest of
// the id independent of the one TableForObject uses, so the objects of one
// table spread evenly over its ranges.
uint64_t ObjectPosition(uint64_t id_hi, uint64_t id_lo);

// The table (1..table_count) a pDKVS key belongs to, from its hash
// (pdkvs::HashKey): jump consistent hashing of the hash's low 16 bits, its
// residue. Every table thus holds the keys of a fixed set of residues, so a
// hash position names its table by its low bits (the scan cursor of the
// distributed store, docs/pdkvs.md). table_count must be > 0.
inline constexpr uint64_t kKeyResidueMask = 0xffff;
uint32_t TableForKey(uint64_t key_hash, uint32_t table_count);

}  // namespace pdpm::monitor
