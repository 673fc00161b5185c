// The replies pdkvs-loadgen reads: RESP2 simple strings, errors, integers
// and bulk strings (null included). Anything else is not a reply to GET or
// SET and counts as a protocol error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pdpm::pdkvs::loadgen {

enum class ReplyType { kSimple, kError, kInteger, kBulk, kNull };

struct Reply {
  ReplyType type;
  std::string_view text;  // simple string, error or bulk (views the input)
  int64_t integer = 0;
};

enum class ReplyParse { kReply, kIncomplete, kError };

// Parses the reply at the start of `data`; kReply sets *consumed and
// *reply (which views `data`).
ReplyParse ParseReply(std::string_view data, size_t* consumed, Reply* reply);

}  // namespace pdpm::pdkvs::loadgen
