// CRC-32C (Castagnoli polynomial, reflected, initial value and final XOR
// 0xFFFFFFFF): the checksum of iSCSI, ext4 and SCTP. Used for every
// checksummed structure PDPM keeps on PM or sends on the wire.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise;
// both give the same result. Thread-safe, no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pdpm {

// CRC-32C of data[0, n).
uint32_t Crc32c(const void* data, size_t n);

// The CRC-32C of A followed by data[0, n), given crc = Crc32c(A).
// Crc32cExtend(Crc32c(a), b) == Crc32c(a ++ b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(std::string_view s) {
  return Crc32c(s.data(), s.size());
}

}  // namespace pdpm
