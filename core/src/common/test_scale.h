// The size of long tests: PDPM_TEST_SCALE, a fraction in (0, 1], shrinks
// the op counts, rounds and fault points of soak, kill and model tests
// (unset: 1, their full size). `make test` sets it for the sanitizer passes
// only: a sanitizer finds its defects in the code paths a test reaches, and
// the paths are the same in the first quarter of a long loop; the release
// pass runs every test at full size (docs/e2e.md "Times").
#pragma once

#include <cstdio>
#include <cstdlib>

namespace pdpm {

// The scale in force. A value that is not a number in (0, 1] ends the test
// program with a message: a typo must not silently run the full size.
inline double TestScale() {
  const char* text = std::getenv("PDPM_TEST_SCALE");  // NOLINT(concurrency-mt-unsafe)
  if (text == nullptr || *text == '\0') return 1.0;
  char* end = nullptr;
  const double scale = std::strtod(text, &end);
  if (*end != '\0' || !(scale > 0.0 && scale <= 1.0)) {
    std::fprintf(stderr, "PDPM_TEST_SCALE=%s: not a fraction in (0, 1]\n", text);
    std::abort();
  }
  return scale;
}

// `full` scaled, never below `least` (the smallest size at which the test
// still reaches what it is about, e.g. a fault landing mid-load) nor above
// `full`.
inline long ScaledForTest(long full, long least) {
  const long scaled = static_cast<long>(static_cast<double>(full) * TestScale());
  if (scaled < least) return least < full ? least : full;
  return scaled;
}

}  // namespace pdpm
