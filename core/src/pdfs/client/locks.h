// The rules of advisory locks on one file's lock table (records.h
// LockTable), as Linux applies them to fcntl/OFD and flock locks: what
// conflicts, and how a holder's ranges are set, split and merged. Pure
// functions: FileSystem runs them inside the transaction that reads and
// writes the table (docs/pdfs.md "Advisory locks").
#pragma once

#include <cstdint>

#include "pdfs/client/records.h"

namespace pdpm::pdfs {

// Whether `a` and `b` conflict: same kind, different holders (session,
// owner), overlapping ranges, and one of them a write lock.
bool LocksConflict(const LockEntry& a, const LockEntry& b);

// The first lock of the table that conflicts with `want`, or nullptr.
const LockEntry* FindConflict(const LockTable& table, const LockEntry& want);

// Sets the lock of want's holder on [want.start, want.end] to want.type:
// the holder's ranges of that kind inside it are replaced (split where they
// straddle its ends), kUnlock only removes them, and touching ranges of one
// type are merged. Conflicts are not checked (FindConflict first).
void ApplyLock(LockTable* table, const LockEntry& want);

// Drops every lock of `session`; whether there was one.
bool DropSession(LockTable* table, uint64_t session);

// Whether `session` holds any lock in the table.
bool HoldsAny(const LockTable& table, uint64_t session);

}  // namespace pdpm::pdfs
