#include "pdkvs/gateway/resp.h"

#include <charconv>
#include <cstring>

namespace pdpm::pdkvs {
namespace {

// The line at data[pos..] up to CRLF (exclusive); npos when not complete.
size_t FindCrlf(std::string_view data, size_t pos) {
  size_t cr = data.find("\r\n", pos);
  return cr;
}

// A header integer as Redis reads it: optional '-', digits, nothing else.
bool ParseHeaderInt(std::string_view s, int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size() && s[0] != '+';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f';
}

// Splits an inline line into arguments the way redis-cli and Redis do:
// whitespace separates, "..." takes \n \r \t \b \a \\ \" \xHH escapes,
// '...' takes \'. A closing quote must be followed by space or the end.
// Arguments are appended to *scratch (reserved by the caller, so views
// stay valid) and viewed by *args.
bool SplitInline(std::string_view line, std::vector<std::string_view>* args, std::string* scratch) {
  size_t i = 0;
  const size_t n = line.size();
  for (;;) {
    while (i < n && IsSpace(line[i])) ++i;
    if (i == n) return true;
    const size_t start = scratch->size();
    bool in_dq = false, in_sq = false, done = false;
    while (!done) {
      if (in_dq) {
        if (i == n) return false;
        if (line[i] == '\\' && i + 3 < n && line[i + 1] == 'x' && HexValue(line[i + 2]) >= 0 &&
            HexValue(line[i + 3]) >= 0) {
          scratch->push_back(static_cast<char>(HexValue(line[i + 2]) * 16 + HexValue(line[i + 3])));
          i += 4;
        } else if (line[i] == '\\' && i + 1 < n) {
          char c = line[i + 1];
          switch (c) {
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'b': c = '\b'; break;
            case 'a': c = '\a'; break;
            default: break;
          }
          scratch->push_back(c);
          i += 2;
        } else if (line[i] == '"') {
          if (i + 1 < n && !IsSpace(line[i + 1])) return false;
          done = true;
          ++i;
        } else {
          scratch->push_back(line[i++]);
        }
      } else if (in_sq) {
        if (i == n) return false;
        if (line[i] == '\\' && i + 1 < n && line[i + 1] == '\'') {
          scratch->push_back('\'');
          i += 2;
        } else if (line[i] == '\'') {
          if (i + 1 < n && !IsSpace(line[i + 1])) return false;
          done = true;
          ++i;
        } else {
          scratch->push_back(line[i++]);
        }
      } else if (i == n || IsSpace(line[i])) {
        done = true;
      } else if (line[i] == '"') {
        in_dq = true;
        ++i;
      } else if (line[i] == '\'') {
        in_sq = true;
        ++i;
      } else {
        scratch->push_back(line[i++]);
      }
    }
    args->emplace_back(scratch->data() + start, scratch->size() - start);
  }
}

RespParse ParseInline(std::string_view data, const RespLimits& limits, size_t* consumed,
                      std::vector<std::string_view>* args, std::string* scratch,
                      std::string* error) {
  const size_t nl = data.find('\n');
  if (nl == std::string_view::npos) {
    if (data.size() > limits.max_inline) {
      *error = "Protocol error: too big inline request";
      return RespParse::kError;
    }
    return RespParse::kIncomplete;
  }
  if (nl > limits.max_inline) {
    *error = "Protocol error: too big inline request";
    return RespParse::kError;
  }
  std::string_view line = data.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  scratch->clear();
  scratch->reserve(line.size());
  if (!SplitInline(line, args, scratch)) {
    args->clear();
    *error = "Protocol error: unbalanced quotes in request";
    return RespParse::kError;
  }
  *consumed = nl + 1;
  return RespParse::kRequest;
}

}  // namespace

RespParse ParseRespRequest(std::string_view data, const RespLimits& limits, size_t* consumed,
                           std::vector<std::string_view>* args, std::string* scratch,
                           std::string* error) {
  args->clear();
  if (data.empty()) return RespParse::kIncomplete;
  if (data[0] != '*') return ParseInline(data, limits, consumed, args, scratch, error);

  size_t eol = FindCrlf(data, 1);
  if (eol == std::string_view::npos) {
    if (data.size() > limits.max_inline) {
      *error = "Protocol error: too big mbulk count string";
      return RespParse::kError;
    }
    return RespParse::kIncomplete;
  }
  int64_t count = 0;
  if (!ParseHeaderInt(data.substr(1, eol - 1), &count) ||
      count > static_cast<int64_t>(limits.max_args)) {
    *error = "Protocol error: invalid multibulk length";
    return RespParse::kError;
  }
  size_t pos = eol + 2;
  if (count <= 0) {  // *0 and *-1: nothing to run
    *consumed = pos;
    return RespParse::kRequest;
  }
  args->reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    if (pos >= data.size()) return RespParse::kIncomplete;
    if (data[pos] != '$') {
      *error = std::string("Protocol error: expected '$', got '") + data[pos] + "'";
      args->clear();
      return RespParse::kError;
    }
    eol = FindCrlf(data, pos + 1);
    if (eol == std::string_view::npos) {
      if (data.size() - pos > limits.max_inline) {
        *error = "Protocol error: too big bulk count string";
        args->clear();
        return RespParse::kError;
      }
      return RespParse::kIncomplete;
    }
    int64_t len = 0;
    if (!ParseHeaderInt(data.substr(pos + 1, eol - pos - 1), &len) || len < 0 ||
        static_cast<uint64_t>(len) > limits.max_bulk) {
      *error = "Protocol error: invalid bulk length";
      args->clear();
      return RespParse::kError;
    }
    pos = eol + 2;
    if (data.size() - pos < static_cast<uint64_t>(len) + 2) return RespParse::kIncomplete;
    args->emplace_back(data.data() + pos, static_cast<size_t>(len));
    // The two bytes after the data are skipped unread, as Redis does.
    pos += static_cast<size_t>(len) + 2;
  }
  *consumed = pos;
  return RespParse::kRequest;
}

void RespWriter::Header(char type, uint64_t n) {
  char buf[24];
  buf[0] = type;
  auto [p, ec] = std::to_chars(buf + 1, buf + sizeof(buf) - 2, n);
  *p++ = '\r';
  *p++ = '\n';
  out_->append(buf, static_cast<size_t>(p - buf));
}

void RespWriter::Simple(std::string_view s) {
  out_->push_back('+');
  out_->append(s);
  out_->append("\r\n");
}

void RespWriter::Error(std::string_view message) {
  out_->push_back('-');
  const size_t start = out_->size();
  out_->append(message);
  for (size_t i = start; i < out_->size(); ++i) {
    if ((*out_)[i] == '\r' || (*out_)[i] == '\n') (*out_)[i] = ' ';
  }
  out_->append("\r\n");
}

void RespWriter::Integer(int64_t v) {
  char buf[24];
  buf[0] = ':';
  auto [p, ec] = std::to_chars(buf + 1, buf + sizeof(buf) - 2, v);
  *p++ = '\r';
  *p++ = '\n';
  out_->append(buf, static_cast<size_t>(p - buf));
}

void RespWriter::Bulk(std::string_view s) {
  Header('$', s.size());
  out_->append(s);
  out_->append("\r\n");
}

void RespWriter::Null() {
  out_->append(protocol_ >= 3 ? "_\r\n" : "$-1\r\n");
}

void RespWriter::NullArray() {
  out_->append(protocol_ >= 3 ? "_\r\n" : "*-1\r\n");
}

void RespWriter::Array(size_t n) {
  Header('*', n);
}

void RespWriter::Map(size_t n) {
  if (protocol_ >= 3) {
    Header('%', n);
  } else {
    Header('*', 2 * n);
  }
}

void RespWriter::Set(size_t n) {
  Header(protocol_ >= 3 ? '~' : '*', n);
}

void RespWriter::Verbatim(std::string_view s) {
  if (protocol_ < 3) return Bulk(s);
  Header('=', s.size() + 4);
  out_->append("txt:");
  out_->append(s);
  out_->append("\r\n");
}

}  // namespace pdpm::pdkvs
