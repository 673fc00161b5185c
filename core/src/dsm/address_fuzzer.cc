// Fuzzes GlobalAddress::Decode, which reads addresses off the network: any
// 16 bytes either decode to an address that encodes back to the same bytes,
// or are refused; range checks on what decodes never overflow.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "dsm/address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using pdpm::dsm::GlobalAddress;
  GlobalAddress a;
  if (!GlobalAddress::Decode(data, size, &a).ok()) return 0;
  auto bytes = a.Encode();
  if (std::memcmp(bytes.data(), data, bytes.size()) != 0) std::abort();
  (void)a.ToString();
  (void)a.descriptor.ToString();
  constexpr uint64_t kSegment = 8ULL << 20;
  uint64_t length = a.offset >> 3;
  if (a.CheckRange(length, kSegment).ok() && a.offset + length > kSegment) std::abort();
  GlobalAddress b;
  if (a.Advance(length, kSegment, &b).ok() && b.offset >= kSegment) std::abort();
  return 0;
}
