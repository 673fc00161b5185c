// EtcdViewStore: the ViewStore of a highly available monitor — the view is
// one etcd key, and only the monitor holding the leader key may change it.
//
// Keys under a prefix P (default "/pdpm/default", docs/monitor.md):
//   P/view    the view (value format below); its mod_revision is the
//             store's revision
//   P/leader  the leader's gRPC address, attached to the leader's lease
//
// Every put is ONE etcd transaction:
//   if   mod_revision(P/view) == expected revision     (nobody wrote since)
//   and  lease(P/leader)      == this term's lease     (still the leader)
//   then put P/view
//   else read P/view and P/leader
// so a deposed leader — its lease expired, the key gone or another's —
// can never write, whatever its clock says. When the compare fails but the
// stored value is byte for byte the one being put, an earlier attempt of
// the same transaction landed (the client repeats a timed-out call): that
// is success. Any failed put marks the store broken(): the view its
// monitor holds in memory may no longer be the stored one, so the term
// must end and the next leader reloads.
//
// Value format 1 (integers little-endian):
//   0   char[8]  magic "PDPMETCD"
//   8   u32      format version (1)
//   12  u32      CRC-32C of the payload
//   16  ...      payload: the serialized pdpm.v1.ClusterView
// A value too short, with another magic, another version or a checksum
// mismatch is kCorruption naming the key; it is never overwritten.
#pragma once

#include <atomic>
#include <string>

#include "monitor/etcd/etcd_client.h"
#include "monitor/view_store.h"

namespace pdpm::monitor {

// The keys of one cluster under `prefix` (no trailing slash).
struct EtcdKeys {
  std::string view;
  std::string leader;
  static EtcdKeys ForPrefix(const std::string& prefix);
};

class EtcdViewStore final : public ViewStore {
 public:
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr size_t kHeaderSize = 16;

  // Puts are allowed while `keys.leader` is attached to `lease`. `client`
  // is not owned and outlives the store.
  EtcdViewStore(EtcdClient* client, EtcdKeys keys, int64_t lease);

  Status Load(v1::ClusterView* view, uint64_t* revision) override;
  Status CompareAndPut(uint64_t expected_revision, const v1::ClusterView& view,
                       uint64_t* new_revision) override;
  std::string Describe() const override;

  // A put failed: this store's user must stop serving from what it holds.
  bool broken() const { return broken_.load(); }

  static std::string Encode(const v1::ClusterView& view);
  // `what` names the key in errors.
  static Status Decode(const std::string& value, const std::string& what, v1::ClusterView* view);

 private:
  EtcdClient* const client_;
  const EtcdKeys keys_;
  const int64_t lease_;
  std::atomic<bool> broken_{false};
};

}  // namespace pdpm::monitor
