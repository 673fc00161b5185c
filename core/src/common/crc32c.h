// CRC-32C (Castagnoli): the checksum of PDPM's persistent formats. Software
// table-driven; meant for metadata (headers, views), not the data path.
#pragma once

#include <cstdint>
#include <string_view>

namespace pdpm {

// Extends `crc` (the value returned for the bytes before, 0 to start) over
// `data`. Crc32c("123456789") == 0xe3069283.
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);

}  // namespace pdpm
