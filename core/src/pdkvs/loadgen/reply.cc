#include "pdkvs/loadgen/reply.h"

#include <charconv>

namespace pdpm::pdkvs::loadgen {

ReplyParse ParseReply(std::string_view data, size_t* consumed, Reply* reply) {
  size_t eol = data.find("\r\n");
  if (eol == std::string_view::npos) return ReplyParse::kIncomplete;
  if (eol == 0) return ReplyParse::kError;
  std::string_view line = data.substr(1, eol - 1);
  size_t header = eol + 2;
  auto integer = [&](int64_t* v) {
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), *v);
    return ec == std::errc() && end == line.data() + line.size();
  };
  switch (data[0]) {
    case '+':
    case '-':
      *reply = Reply{data[0] == '+' ? ReplyType::kSimple : ReplyType::kError, line};
      *consumed = header;
      return ReplyParse::kReply;
    case ':':
      *reply = Reply{ReplyType::kInteger, {}};
      if (!integer(&reply->integer)) return ReplyParse::kError;
      *consumed = header;
      return ReplyParse::kReply;
    case '$': {
      int64_t len;
      if (!integer(&len) || len < -1) return ReplyParse::kError;
      if (len == -1) {
        *reply = Reply{ReplyType::kNull, {}};
        *consumed = header;
        return ReplyParse::kReply;
      }
      size_t end = header + static_cast<size_t>(len);
      if (data.size() < end + 2) return ReplyParse::kIncomplete;
      if (data.substr(end, 2) != "\r\n") return ReplyParse::kError;
      *reply = Reply{ReplyType::kBulk, data.substr(header, static_cast<size_t>(len))};
      *consumed = end + 2;
      return ReplyParse::kReply;
    }
    default: return ReplyParse::kError;
  }
}

}  // namespace pdpm::pdkvs::loadgen
