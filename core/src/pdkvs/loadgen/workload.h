// The workloads of pdkvs-loadgen (docs/pdkvs.md "Load generator"): YCSB
// core workloads A, B and C and the ETC and SYS pools of seeds/000 §5.2,
// their key choosers and the self-describing values the generator writes,
// so that every value read back can be verified.
//
// Everything here is deterministic: the same seed gives the same keys,
// sizes, operation stream and values on every machine (no std::
// distributions, whose output is implementation-defined).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pdpm::pdkvs::loadgen {

// splitmix64's finalizer: a bijective mix of 64 bits (seeds, hashes).
uint64_t Mix64(uint64_t x);

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n), n > 0 (unbiased: rejection sampling).
  uint64_t Uniform(uint64_t n);
  // Uniform in [0, 1) with 53 bits.
  double NextDouble();

 private:
  uint64_t s_[4];
};

enum class KeyDistribution { kUniform, kZipfian };
Status ParseKeyDistribution(std::string_view name, KeyDistribution* out);
std::string_view KeyDistributionName(KeyDistribution d);

// Chooses key indexes in [0, n). Zipfian: rank r (0 = most popular) has
// probability (r+1)^-theta / zeta(n, theta), drawn with the method of Gray
// et al. ("Quickly generating billion-record synthetic databases") as YCSB
// does; ranks are then spread over the key space by a fixed permutation
// (KeyOfRank), so that popular keys are not neighbours.
class KeyChooser {
 public:
  static constexpr double kYcsbTheta = 0.99;
  KeyChooser(KeyDistribution distribution, uint64_t n, double theta = kYcsbTheta);

  uint64_t Next(Rng& rng) const { return KeyOfRank(NextRank(rng)); }
  // Zipfian: the rank drawn; uniform: the key index itself.
  uint64_t NextRank(Rng& rng) const;
  // The permutation of [0, n) from ranks to key indexes (the identity for
  // uniform): r * multiplier mod n, multiplier coprime with n.
  uint64_t KeyOfRank(uint64_t rank) const;
  uint64_t size() const { return n_; }
  // zeta(n, theta) = sum over i in 1..n of i^-theta (zipfian only).
  double zeta() const { return zeta_n_; }

 private:
  KeyDistribution distribution_;
  uint64_t n_;
  double theta_ = 0, alpha_ = 0, eta_ = 0, zeta_n_ = 0, half_pow_theta_ = 0;
  uint64_t multiplier_ = 1;
};

// Sizes drawn from a mixture of uniform ranges [min, max] (inclusive),
// each chosen with its weight (weights sum to 1).
struct SizeRange {
  double weight;
  uint32_t min;
  uint32_t max;
};
class SizeDistribution {
 public:
  SizeDistribution() = default;
  explicit SizeDistribution(std::vector<SizeRange> ranges) : ranges_(std::move(ranges)) {}
  uint32_t Next(Rng& rng) const;
  const std::vector<SizeRange>& ranges() const { return ranges_; }

 private:
  std::vector<SizeRange> ranges_;
};

// One workload: the GET share of the run phase (the rest are SETs of whole
// values), the key space and the size of keys and values.
struct Workload {
  std::string name;
  double read_fraction = 0;
  std::string key_prefix;
  SizeDistribution key_sizes;
  SizeDistribution value_sizes;
  KeyDistribution default_distribution = KeyDistribution::kZipfian;

  // The key of index i: the prefix, then i in decimal zero-padded to the
  // key's length, drawn from key_sizes by i alone (the same key space on
  // every run). Unique for i < 10^(min key size - prefix size).
  std::string Key(uint64_t i) const;
  // Whether n keys fit the padding (Key stays unique).
  Status CheckRecords(uint64_t n) const;
  // The value of write number w: its size drawn from value_sizes by w,
  // w in the first 8 bytes (little-endian), then pseudo-random bytes from w.
  std::string Value(uint64_t w) const;
  // The write number a value names; InvalidArgument for fewer than 8 bytes.
  static Status WriteIdOf(std::string_view value, uint64_t* w);
};

// "ycsb-a", "ycsb-b", "ycsb-c", "etc", "sys" (docs/pdkvs.md defines them).
Status WorkloadByName(std::string_view name, Workload* out);
std::vector<std::string> WorkloadNames();

}  // namespace pdpm::pdkvs::loadgen
