// ViewStore: where the monitor keeps the cluster view (pdpm.v1.ClusterView).
//
// The contract is that of a versioned register, so both the local file of
// `pdpm-monitor --embedded` (FileViewStore) and an etcd key (part 2: the
// leader holds a lease; every change is one transaction comparing the
// key's revision) implement it the same way:
//
//   Load          → the stored view and its revision;
//   CompareAndPut → replace the view iff the stored revision is still the
//                   one the caller read; the new revision is returned.
//
// A monitor reads once, then applies every change as copy → modify →
// CompareAndPut(revision it holds). A put that loses the race (another
// writer, a deposed leader) fails with kAborted and changes nothing; the
// caller must reload before trying again. A put that returns OK is durable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "pdpm/v1/monitor.pb.h"

namespace pdpm::monitor {

class ViewStore {
 public:
  virtual ~ViewStore() = default;

  // The stored view and its revision (> 0). NotFound when nothing was ever
  // stored (revision 0 is "no view"); Corruption when what is stored cannot
  // be trusted — never silently treated as "no view".
  virtual Status Load(v1::ClusterView* view, uint64_t* revision) = 0;

  // Stores `view` iff the current revision equals `expected_revision` (0:
  // iff nothing is stored yet). On success `*new_revision` is the revision
  // of the stored view. kAborted when the revision moved; any other error
  // leaves the previously stored view in place.
  virtual Status CompareAndPut(uint64_t expected_revision, const v1::ClusterView& view,
                               uint64_t* new_revision) = 0;

  // Where the view lives, for logs and status ("file:/var/lib/pdpm/view").
  virtual std::string Describe() const = 0;
};

// For the stores' value formats: checks `payload` against its CRC-32C and
// parses it. kCorruption naming `what` on a mismatch or an unparsable view.
Status DecodeViewPayload(std::string_view payload, uint32_t crc, const std::string& what,
                         v1::ClusterView* view);

}  // namespace pdpm::monitor
