#include "pdkvs/loadgen/workload.h"

#include <cmath>
#include <cstring>
#include <numeric>

namespace pdpm::pdkvs::loadgen {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) {
    seed += 0x9e3779b97f4a7c15ull;
    s = Mix64(seed);
  }
}

uint64_t Rng::Next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Uniform(uint64_t n) {
  // Reject the top partial copy of [0, n) so every residue is equally likely.
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return x % n;
}

double Rng::NextDouble() {
  return static_cast<double>(Next() >> 11) * 0x1.0p-53;
}

Status ParseKeyDistribution(std::string_view name, KeyDistribution* out) {
  if (name == "uniform") {
    *out = KeyDistribution::kUniform;
  } else if (name == "zipfian" || name == "zipf") {
    *out = KeyDistribution::kZipfian;
  } else {
    return Status::InvalidArgument("key distribution must be uniform or zipfian, not " +
                                   std::string(name));
  }
  return Status::OK();
}

std::string_view KeyDistributionName(KeyDistribution d) {
  return d == KeyDistribution::kUniform ? "uniform" : "zipfian";
}

namespace {

double Zeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; ++i) sum += std::pow(static_cast<double>(i), -theta);
  return sum;
}

}  // namespace

KeyChooser::KeyChooser(KeyDistribution distribution, uint64_t n, double theta)
    : distribution_(distribution), n_(n == 0 ? 1 : n) {
  if (distribution_ != KeyDistribution::kZipfian) return;
  theta_ = theta;
  zeta_n_ = Zeta(n_, theta_);
  alpha_ = 1.0 / (1.0 - theta_);
  half_pow_theta_ = std::pow(0.5, theta_);
  double zeta2 = Zeta(2, theta_);
  eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n_), 1.0 - theta_)) / (1.0 - zeta2 / zeta_n_);
  // A multiplier coprime with n makes r -> r * m mod n a permutation.
  multiplier_ = n_ == 1 ? 1 : Mix64(n_) % n_;
  while (multiplier_ == 0 || std::gcd(multiplier_, n_) != 1) multiplier_ = (multiplier_ + 1) % n_;
}

uint64_t KeyChooser::NextRank(Rng& rng) const {
  if (distribution_ == KeyDistribution::kUniform) return rng.Uniform(n_);
  double u = rng.NextDouble();
  double uz = u * zeta_n_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + half_pow_theta_) return 1 % n_;
  auto rank =
      static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
  return rank < n_ ? rank : n_ - 1;
}

uint64_t KeyChooser::KeyOfRank(uint64_t rank) const {
  if (distribution_ == KeyDistribution::kUniform) return rank;
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rank) * multiplier_) % n_);
}

uint32_t SizeDistribution::Next(Rng& rng) const {
  double u = rng.NextDouble();
  const SizeRange* pick = &ranges_.back();
  for (const SizeRange& r : ranges_) {
    if (u < r.weight) {
      pick = &r;
      break;
    }
    u -= r.weight;
  }
  return pick->min + static_cast<uint32_t>(rng.Uniform(uint64_t{pick->max} - pick->min + 1));
}

namespace {

// Seeds of the key and value layouts: fixed, so that the key space and the
// value of a write number do not depend on the run's seed.
constexpr uint64_t kKeyLayoutSeed = 0x6b65792d6c61796full;    // "key-layo"
constexpr uint64_t kValueLayoutSeed = 0x76616c75652d6c61ull;  // "value-la"

uint32_t MinSize(const SizeDistribution& d) {
  uint32_t m = UINT32_MAX;
  for (const SizeRange& r : d.ranges()) m = std::min(m, r.min);
  return m;
}

}  // namespace

std::string Workload::Key(uint64_t i) const {
  Rng rng(kKeyLayoutSeed ^ Mix64(i));
  size_t size = key_sizes.Next(rng);
  std::string digits = std::to_string(i);
  std::string key = key_prefix;
  if (size > key.size() + digits.size()) key.append(size - key.size() - digits.size(), '0');
  key += digits;
  return key;
}

Status Workload::CheckRecords(uint64_t n) const {
  size_t room = MinSize(key_sizes) - key_prefix.size();
  if (n == 0 || std::to_string(n - 1).size() > room) {
    return Status::InvalidArgument(name + " takes 1 to 10^" + std::to_string(room) + " records");
  }
  return Status::OK();
}

std::string Workload::Value(uint64_t w) const {
  Rng rng(kValueLayoutSeed ^ Mix64(w));
  std::string value(value_sizes.Next(rng), '\0');
  size_t prefix = std::min<size_t>(8, value.size());
  for (size_t i = 0; i < prefix; ++i) value[i] = static_cast<char>(w >> (8 * i));
  for (size_t i = prefix; i < value.size(); i += 8) {
    uint64_t bytes = rng.Next();
    memcpy(&value[i], &bytes, std::min<size_t>(8, value.size() - i));
  }
  return value;
}

Status Workload::WriteIdOf(std::string_view value, uint64_t* w) {
  if (value.size() < 8) {
    return Status::InvalidArgument("value of " + std::to_string(value.size()) +
                                   " bytes names no write");
  }
  *w = 0;
  for (size_t i = 0; i < 8; ++i) *w |= uint64_t{static_cast<uint8_t>(value[i])} << (8 * i);
  return Status::OK();
}

std::vector<std::string> WorkloadNames() {
  return {"ycsb-a", "ycsb-b", "ycsb-c", "etc", "sys"};
}

Status WorkloadByName(std::string_view name, Workload* out) {
  // YCSB: keys "user" + 19 digits, records of 1000 bytes (the default 10
  // fields of 100 bytes, stored as one value); an update rewrites it.
  auto ycsb = [&](double read_fraction) {
    return Workload{std::string(name),
                    read_fraction,
                    "user",
                    SizeDistribution({{1.0, 23, 23}}),
                    SizeDistribution({{1.0, 1000, 1000}}),
                    KeyDistribution::kZipfian};
  };
  if (name == "ycsb-a") {
    *out = ycsb(0.50);
  } else if (name == "ycsb-b") {
    *out = ycsb(0.95);
  } else if (name == "ycsb-c") {
    *out = ycsb(1.0);
  } else if (name == "etc") {
    // 95% GET; 16-byte keys; 90% of values 16..512 bytes, the other 10%
    // 513..10,000 bytes (seeds/000 leaves them open).
    *out = Workload{"etc",
                    0.95,
                    "etc:",
                    SizeDistribution({{1.0, 16, 16}}),
                    SizeDistribution({{0.90, 16, 512}, {0.10, 513, 10000}}),
                    KeyDistribution::kZipfian};
  } else if (name == "sys") {
    // 75% GET; 40% of keys 16..20 bytes, 60% 21..45; values 8% 16..319
    // bytes, 80% 320..500, 12% 501..10,000.
    *out = Workload{"sys",
                    0.75,
                    "sys:",
                    SizeDistribution({{0.40, 16, 20}, {0.60, 21, 45}}),
                    SizeDistribution({{0.08, 16, 319}, {0.80, 320, 500}, {0.12, 501, 10000}}),
                    KeyDistribution::kZipfian};
  } else {
    return Status::InvalidArgument("unknown workload " + std::string(name) +
                                   " (ycsb-a, ycsb-b, ycsb-c, etc, sys)");
  }
  return Status::OK();
}

}  // namespace pdpm::pdkvs::loadgen
