#include "common/uuid.h"

#include <sys/random.h>

#include <cerrno>

namespace pdpm {
namespace {

// Offsets in the canonical text form where a dash separates groups.
bool IsDashPosition(size_t i) {
  return i == 8 || i == 13 || i == 18 || i == 23;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Status Uuid::Random(Uuid* out) {
  Uuid u;
  size_t filled = 0;
  while (filled < u.bytes.size()) {
    ssize_t n = getrandom(u.bytes.data() + filled, u.bytes.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("getrandom", errno);
    }
    filled += static_cast<size_t>(n);
  }
  u.bytes[6] = static_cast<uint8_t>((u.bytes[6] & 0x0F) | 0x40);  // version 4
  u.bytes[8] = static_cast<uint8_t>((u.bytes[8] & 0x3F) | 0x80);  // RFC 4122 variant
  *out = u;
  return Status::OK();
}

Status Uuid::Parse(std::string_view text, Uuid* out) {
  constexpr size_t kTextLength = 36;
  if (text.size() != kTextLength) {
    return Status::InvalidArgument("uuid \"" + std::string(text) + "\": expected 36 characters");
  }
  Uuid u;
  size_t nibble = 0;
  for (size_t i = 0; i < kTextLength; ++i) {
    if (IsDashPosition(i)) {
      if (text[i] != '-') {
        return Status::InvalidArgument("uuid \"" + std::string(text) + "\": expected '-' at " +
                                       std::to_string(i));
      }
      continue;
    }
    int v = HexValue(text[i]);
    if (v < 0) {
      return Status::InvalidArgument("uuid \"" + std::string(text) + "\": not a hex digit at " +
                                     std::to_string(i));
    }
    uint8_t& byte = u.bytes[nibble / 2];
    byte = static_cast<uint8_t>(nibble % 2 == 0 ? v << 4 : byte | v);
    ++nibble;
  }
  *out = u;
  return Status::OK();
}

std::string Uuid::ToString() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(36);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s.push_back('-');
    s.push_back(kDigits[bytes[i] >> 4]);
    s.push_back(kDigits[bytes[i] & 0x0F]);
  }
  return s;
}

bool Uuid::is_nil() const {
  for (uint8_t b : bytes) {
    if (b != 0) return false;
  }
  return true;
}

}  // namespace pdpm
