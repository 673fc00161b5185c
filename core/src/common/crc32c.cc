#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace pdpm {
namespace {

// Reflected form of the Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kPolynomial = 0x82F63B78u;

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

// Works on the inverted register value (no initial/final XOR here).
constexpr uint32_t UpdateTable(uint32_t state, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) state = kTable[(state ^ p[i]) & 0xFF] ^ (state >> 8);
  return state;
}

// The table path is checked at compile time against the standard check
// value; the tests check whichever path the CPU selects.
constexpr uint8_t kCheckInput[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
static_assert(~UpdateTable(~0u, kCheckInput, sizeof(kCheckInput)) == 0xE3069283u);

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t UpdateHardware(uint32_t state, const uint8_t* p,
                                                          size_t n) {
  uint64_t s = state;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    s = _mm_crc32_u64(s, word);
    p += 8;
    n -= 8;
  }
  auto s32 = static_cast<uint32_t>(s);
  while (n > 0) {
    s32 = _mm_crc32_u8(s32, *p++);
    --n;
  }
  return s32;
}

bool HasHardwareCrc() {
  // Evaluated once; the answer cannot change while the process runs.
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

uint32_t Update(uint32_t state, const uint8_t* p, size_t n) {
#if defined(__x86_64__)
  if (HasHardwareCrc()) return UpdateHardware(state, p, n);
#endif
  return UpdateTable(state, p, n);
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  return ~Update(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32c(const void* data, size_t n) {
  return Crc32cExtend(0, data, n);
}

}  // namespace pdpm
