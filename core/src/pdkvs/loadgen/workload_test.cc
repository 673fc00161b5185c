#include "pdkvs/loadgen/workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace pdpm::pdkvs::loadgen {
namespace {

TEST(Rng, SameSeedSameStreamOtherSeedOther) {
  Rng a(42), b(42), c(43);
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differ += x != c.Next();
  }
  EXPECT_GT(differ, 990);
}

TEST(Rng, FixedStreamAcrossBuilds) {
  // The streams are part of what "fixed seed" promises: pin the first
  // values so a change of generator shows up.
  Rng rng(1);
  uint64_t first = rng.Next();
  Rng again(1);
  EXPECT_EQ(first, again.Next());
  EXPECT_EQ(Mix64(0), 0xe220a8397b1dcdafull);
}

TEST(Rng, UniformCoversRangeEvenly) {
  Rng rng(7);
  std::vector<int> counts(10);
  for (int i = 0; i < 100000; ++i) {
    uint64_t v = rng.Uniform(10);
    ASSERT_LT(v, 10u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  for (int i = 0; i < 1000; ++i) {
    double d = rng.NextDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

TEST(KeyChooser, UniformIsFlat) {
  KeyChooser chooser(KeyDistribution::kUniform, 100);
  Rng rng(3);
  std::vector<int> counts(100);
  for (int i = 0; i < 200000; ++i) ++counts[chooser.Next(rng)];
  for (int c : counts) EXPECT_NEAR(c, 2000, 250);
}

TEST(KeyChooser, ZipfianRanksFollowTheDistribution) {
  constexpr uint64_t n = 1000;
  constexpr int samples = 1000000;
  const double theta = KeyChooser::kYcsbTheta;
  KeyChooser chooser(KeyDistribution::kZipfian, n);
  double zeta = 0;
  for (uint64_t i = 1; i <= n; ++i) zeta += std::pow(static_cast<double>(i), -theta);
  EXPECT_NEAR(chooser.zeta(), zeta, 1e-9);
  Rng rng(11);
  std::vector<int> counts(n);
  for (int i = 0; i < samples; ++i) {
    uint64_t r = chooser.NextRank(rng);
    ASSERT_LT(r, n);
    ++counts[r];
  }
  auto expected = [&](uint64_t r) { return std::pow(static_cast<double>(r + 1), -theta) / zeta; };
  // Ranks 0 and 1 are exact in the method; the others follow a continuous
  // approximation that overweights low ranks a little (rank 2 by about
  // 18%) and converges as the rank grows.
  EXPECT_NEAR(counts[0] / double(samples), expected(0), 0.003);
  EXPECT_NEAR(counts[1] / double(samples), expected(1), 0.003);
  for (uint64_t r = 2; r < 10; ++r) {
    double ratio = counts[r] / double(samples) / expected(r);
    EXPECT_GT(ratio, 0.98) << "rank " << r;
    EXPECT_LT(ratio, 1.0 + 0.4 / static_cast<double>(r)) << "rank " << r;
  }
  // Mass of the head and of the tail.
  double head = 0, head_expected = 0;
  for (uint64_t r = 0; r < 100; ++r) {
    head += counts[r] / double(samples);
    head_expected += expected(r);
  }
  EXPECT_NEAR(head, head_expected, 0.02);
  // Skewed: the top 10% of ranks take most of the requests.
  EXPECT_GT(head, 0.6);
}

TEST(KeyChooser, ZipfianSpreadsRanksByAPermutation) {
  for (uint64_t n : {1ull, 2ull, 10ull, 1000ull, 100000ull}) {
    KeyChooser chooser(KeyDistribution::kZipfian, n);
    std::set<uint64_t> keys;
    for (uint64_t r = 0; r < n; ++r) keys.insert(chooser.KeyOfRank(r));
    EXPECT_EQ(keys.size(), n) << "n=" << n;
    EXPECT_LT(*keys.rbegin(), n);
  }
  // The most popular keys are not neighbours.
  KeyChooser chooser(KeyDistribution::kZipfian, 100000);
  EXPECT_GT(std::llabs(static_cast<long long>(chooser.KeyOfRank(1)) -
                       static_cast<long long>(chooser.KeyOfRank(0))),
            1);
}

TEST(KeyChooser, SameSeedSameKeys) {
  KeyChooser chooser(KeyDistribution::kZipfian, 5000);
  Rng a(99), b(99);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(chooser.Next(a), chooser.Next(b));
}

TEST(SizeDistribution, WeightsAndBounds) {
  SizeDistribution d({{0.08, 16, 319}, {0.80, 320, 500}, {0.12, 501, 10000}});
  Rng rng(5);
  int small = 0, middle = 0, large = 0;
  constexpr int samples = 200000;
  for (int i = 0; i < samples; ++i) {
    uint32_t s = d.Next(rng);
    ASSERT_GE(s, 16u);
    ASSERT_LE(s, 10000u);
    (s < 320 ? small : s <= 500 ? middle : large)++;
  }
  EXPECT_NEAR(small / double(samples), 0.08, 0.005);
  EXPECT_NEAR(middle / double(samples), 0.80, 0.005);
  EXPECT_NEAR(large / double(samples), 0.12, 0.005);
}

TEST(Workload, Definitions) {
  Workload w;
  ASSERT_TRUE(WorkloadByName("ycsb-a", &w).ok());
  EXPECT_EQ(w.read_fraction, 0.50);
  ASSERT_TRUE(WorkloadByName("ycsb-b", &w).ok());
  EXPECT_EQ(w.read_fraction, 0.95);
  ASSERT_TRUE(WorkloadByName("ycsb-c", &w).ok());
  EXPECT_EQ(w.read_fraction, 1.0);
  EXPECT_EQ(w.Key(42), "user0000000000000000042");
  EXPECT_EQ(w.Value(3).size(), 1000u);
  ASSERT_TRUE(WorkloadByName("etc", &w).ok());
  EXPECT_EQ(w.read_fraction, 0.95);
  EXPECT_EQ(w.Key(7), "etc:000000000007");
  ASSERT_TRUE(WorkloadByName("sys", &w).ok());
  EXPECT_EQ(w.read_fraction, 0.75);
  EXPECT_FALSE(WorkloadByName("ycsb-z", &w).ok());
  EXPECT_EQ(WorkloadNames().size(), 5u);
}

TEST(Workload, KeysAreUniqueAndSized) {
  Workload w;
  ASSERT_TRUE(WorkloadByName("sys", &w).ok());
  std::set<std::string> keys;
  int short_keys = 0;
  for (uint64_t i = 0; i < 20000; ++i) {
    std::string k = w.Key(i);
    ASSERT_GE(k.size(), 16u);
    ASSERT_LE(k.size(), 45u);
    short_keys += k.size() <= 20;
    ASSERT_EQ(k, w.Key(i));
    keys.insert(k);
  }
  EXPECT_EQ(keys.size(), 20000u);
  EXPECT_NEAR(short_keys / 20000.0, 0.40, 0.02);
  EXPECT_TRUE(w.CheckRecords(1000000000000ull).ok());
  EXPECT_FALSE(w.CheckRecords(1000000000001ull).ok());
  EXPECT_FALSE(w.CheckRecords(0).ok());
}

TEST(Workload, ValuesNameTheirWrite) {
  Workload w;
  ASSERT_TRUE(WorkloadByName("etc", &w).ok());
  int within = 0;
  for (uint64_t id = 0; id < 10000; ++id) {
    std::string v = w.Value(id);
    ASSERT_GE(v.size(), 16u);
    ASSERT_LE(v.size(), 10000u);
    within += v.size() <= 512;
    uint64_t named;
    ASSERT_TRUE(Workload::WriteIdOf(v, &named).ok());
    ASSERT_EQ(named, id);
    ASSERT_EQ(v, w.Value(id));
  }
  EXPECT_NEAR(within / 10000.0, 0.90, 0.015);
  // Two writes of the same size still differ in their bytes past the id.
  EXPECT_NE(w.Value(1).substr(8, 8), w.Value(2).substr(8, 8));
  uint64_t id;
  EXPECT_FALSE(Workload::WriteIdOf("short", &id).ok());
}

TEST(KeyDistribution, Names) {
  KeyDistribution d;
  ASSERT_TRUE(ParseKeyDistribution("zipfian", &d).ok());
  EXPECT_EQ(d, KeyDistribution::kZipfian);
  ASSERT_TRUE(ParseKeyDistribution("uniform", &d).ok());
  EXPECT_EQ(KeyDistributionName(d), "uniform");
  EXPECT_FALSE(ParseKeyDistribution("latest", &d).ok());
}

}  // namespace
}  // namespace pdpm::pdkvs::loadgen
