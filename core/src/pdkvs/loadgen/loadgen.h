// pdkvs-loadgen's engine: N connections speaking RESP2 to one server (the
// pDKVS gateway or Redis alike), a load phase that SETs every record once
// and a run phase of GETs and SETs drawn from a Workload, bounded by an
// operation count and a time.
//
// Every reply is checked (verifier.h): a SET must answer +OK, a GET must
// return the exact value of a write to that key that was not superseded.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "pdkvs/loadgen/workload.h"

namespace pdpm::pdkvs::loadgen {

// Latencies in ns: exact below 64, then 32 buckets per power of two (a
// percentile is off by at most 1/64 of its value).
class LatencyHistogram {
 public:
  LatencyHistogram() : buckets_(kBuckets, 0) {}
  void Record(uint64_t ns);
  void Merge(const LatencyHistogram& other);
  // The value below which a fraction p (0..1) of the samples lie (the
  // middle of that sample's bucket); 0 when empty.
  uint64_t Percentile(double p) const;
  uint64_t count() const { return count_; }

  static size_t BucketOf(uint64_t ns);
  static uint64_t BucketMiddle(size_t bucket);

 private:
  static constexpr size_t kBuckets = 64 + 58 * 32;
  std::vector<uint64_t> buckets_;
  uint64_t count_ = 0;
};

struct LoadgenOptions {
  std::string host = "127.0.0.1";
  uint32_t port = 6379;
  Workload workload;
  KeyDistribution distribution = KeyDistribution::kZipfian;
  uint64_t records = 10000;
  uint64_t ops = 100000;                      // run phase: at most this many
  std::chrono::milliseconds duration{10000};  // and at most this long
  uint32_t connections = 50;
  uint32_t pipeline = 1;        // run phase: requests in flight per connection
  uint32_t load_pipeline = 16;  // load phase
  uint32_t threads = 1;         // each drives its share of the connections
  uint64_t seed = 1;            // operation streams (connection c: seed, c)
};

struct PhaseResult {
  uint64_t ops = 0, reads = 0, writes = 0;
  double seconds = 0;
  LatencyHistogram latency;
  double throughput() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

struct LoadgenResult {
  PhaseResult load, run;
  // Wrong answers (at most the first 20); the run stops at the first.
  std::vector<std::string> errors;
};

// Connects, loads and runs. Not OK on a connection or protocol failure, a
// bad option, a wrong answer (kCorruption; result->errors says which), or
// a server that makes no progress for 10 s with requests pending
// (kTimeout).
Status RunLoadgen(const LoadgenOptions& options, LoadgenResult* result);

}  // namespace pdpm::pdkvs::loadgen
