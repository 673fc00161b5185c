#include "pdfs/client/locks.h"

#include <algorithm>
#include <tuple>

namespace pdpm::pdfs {
namespace {

auto Holder(const LockEntry& e) {
  return std::tuple(e.kind, e.session, e.owner);
}

bool Overlap(const LockEntry& a, const LockEntry& b) {
  return a.start <= b.end && b.start <= a.end;
}

}  // namespace

bool LocksConflict(const LockEntry& a, const LockEntry& b) {
  return a.kind == b.kind && Holder(a) != Holder(b) && Overlap(a, b) &&
         (a.type == LockType::kWrite || b.type == LockType::kWrite);
}

const LockEntry* FindConflict(const LockTable& table, const LockEntry& want) {
  if (want.type == LockType::kUnlock) return nullptr;
  for (const LockEntry& e : table.entries) {
    if (LocksConflict(e, want)) return &e;
  }
  return nullptr;
}

void ApplyLock(LockTable* table, const LockEntry& want) {
  std::vector<LockEntry> out;
  out.reserve(table->entries.size() + 2);
  for (const LockEntry& e : table->entries) {
    if (Holder(e) != Holder(want) || !Overlap(e, want)) {
      out.push_back(e);
      continue;
    }
    // What lies outside the new range stays as it was.
    if (e.start < want.start) {
      out.push_back(e);
      out.back().end = want.start - 1;
    }
    if (e.end > want.end) {
      out.push_back(e);
      out.back().start = want.end + 1;
    }
  }
  if (want.type != LockType::kUnlock) out.push_back(want);
  std::sort(out.begin(), out.end(), [](const LockEntry& a, const LockEntry& b) {
    return std::tuple(Holder(a), a.start) < std::tuple(Holder(b), b.start);
  });
  table->entries.clear();
  for (const LockEntry& e : out) {
    if (!table->entries.empty()) {
      LockEntry& last = table->entries.back();
      if (Holder(last) == Holder(e) && last.type == e.type && last.end + 1 == e.start) {
        last.end = e.end;
        last.pid = want.pid;
        continue;
      }
    }
    table->entries.push_back(e);
  }
}

bool DropSession(LockTable* table, uint64_t session) {
  const size_t before = table->entries.size();
  std::erase_if(table->entries, [&](const LockEntry& e) { return e.session == session; });
  return table->entries.size() != before;
}

bool HoldsAny(const LockTable& table, uint64_t session) {
  return std::any_of(table.entries.begin(), table.entries.end(),
                     [&](const LockEntry& e) { return e.session == session; });
}

}  // namespace pdpm::pdfs
