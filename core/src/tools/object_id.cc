#include "tools/object_id.h"

#include <charconv>
#include <cstdio>

namespace pdpm::tools {
namespace {

bool ParseHex64(std::string_view text, uint64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, 16);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

Status ParseObjectId(std::string_view text, dsm::ObjectId* id) {
  auto bad = [&] {
    return Status::InvalidArgument("bad object id \"" + std::string(text) +
                                   "\": want 32 hex digits or a decimal number below 2^64");
  };
  // from_chars accepts no sign or prefix, so "+1", "0x.." and " 1" fail.
  if (text.size() == 32) {
    dsm::ObjectId v;
    if (!ParseHex64(text.substr(0, 16), &v.hi) || !ParseHex64(text.substr(16), &v.lo)) {
      return bad();
    }
    *id = v;
    return Status::OK();
  }
  uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n, 10);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return bad();
  *id = dsm::ObjectId{0, n};
  return Status::OK();
}

std::string FormatObjectId(const dsm::ObjectId& id) {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(id.hi),
                static_cast<unsigned long long>(id.lo));
  return buf;
}

}  // namespace pdpm::tools
