// Verifier: what pdkvs-loadgen remembers of its writes, and the check of
// every reply against it (docs/pdkvs.md "Verification"). Thread-safe: the
// worker threads of a run share one.
//
// Every value written names its write number w (Workload::Value). For
// each write the verifier keeps its key and the ticks of one logical clock
// at its send and at its acknowledgement; for each key, the latest send
// tick of an acknowledged write (the key's floor). A GET is right when it
// returns the exact value of a write to that key that is not superseded:
// a write W is superseded for a GET if a write to the key sent after W was
// acknowledged was itself acknowledged before the GET was sent (floor at
// the GET's send > W's acknowledgement tick). Sends are stamped before the
// request leaves and acknowledgements after the reply arrived, so a
// correct (linearizable) server is never flagged, whatever the
// concurrency of the writes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "pdkvs/loadgen/reply.h"
#include "pdkvs/loadgen/workload.h"

namespace pdpm::pdkvs::loadgen {

class Verifier {
 public:
  // Keys are indexes in [0, records); at most max_writes writes.
  Verifier(const Workload& workload, uint64_t records, uint64_t max_writes);
  ~Verifier();
  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;

  // Call before sending a SET of `key`: its write number (send the value
  // workload.Value(w)).
  uint64_t WriteSent(uint64_t key);
  // Call when the SET of write w answered; what is wrong with the reply,
  // or "" when it is +OK.
  std::string WriteAnswered(uint64_t key, uint64_t w, const Reply& reply);
  // Call before sending a GET of `key`: the floor to check its reply with.
  uint64_t ReadSent(uint64_t key) const;
  // What is wrong with the reply to a GET of `key` sent with `floor`
  // (every key was loaded, so nil is a lost key), or "" when it is right.
  std::string CheckRead(uint64_t key, uint64_t floor, const Reply& reply) const;

 private:
  struct Entry;
  Entry& At(uint64_t w);
  const Entry* Find(uint64_t w) const;
  uint64_t Tick() { return clock_.fetch_add(1) + 1; }

  const Workload& workload_;
  std::atomic<uint64_t> clock_{0};
  std::atomic<uint64_t> next_write_{0};
  // Per key: the floor.
  std::unique_ptr<std::atomic<uint64_t>[]> key_floor_;
  // Per write: an Entry, in chunks allocated when a write first reaches
  // them, so memory follows the writes made rather than the bound.
  uint64_t num_chunks_;
  std::unique_ptr<std::atomic<Entry*>[]> chunks_;
};

}  // namespace pdpm::pdkvs::loadgen
