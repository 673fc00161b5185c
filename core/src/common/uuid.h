// Uuid: a 128-bit identifier (RFC 4122 byte order), e.g. the cluster UUID
// that the PM superblock records. The nil UUID (all zero) means "none".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pdpm {

struct Uuid {
  std::array<uint8_t, 16> bytes{};

  // A random (version 4) UUID from the kernel's random source.
  static Status Random(Uuid* out);

  // Parses the canonical form "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  // (hex digits of either case). kInvalidArgument otherwise.
  static Status Parse(std::string_view text, Uuid* out);

  // The canonical form, lower case.
  std::string ToString() const;

  bool is_nil() const;

  friend bool operator==(const Uuid&, const Uuid&) = default;
};

}  // namespace pdpm
