// The seed of the pDFS suites' random tests: PDPM_TEST_SEED when set,
// else a fixed one, so `make test` runs the same sequence every time and
// a failure repeats with the seed it printed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace pdpm::pdfs {

inline uint64_t TestSeed() {
  const char* env = std::getenv("PDPM_TEST_SEED");  // NOLINT(concurrency-mt-unsafe)
  const uint64_t seed = env != nullptr ? std::strtoull(env, nullptr, 10) : 17;
  std::printf("seed %llu (PDPM_TEST_SEED=%llu repeats this run)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace pdpm::pdfs
