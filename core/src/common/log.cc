#include "common/log.h"

#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace pdpm {
namespace {

bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

void AppendQuoted(std::string* out, std::string_view v) {
  out->push_back('"');
  for (char c : v) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          static constexpr char kHex[] = "0123456789abcdef";
          out->append("\\x");
          out->push_back(kHex[(c >> 4) & 0xf]);
          out->push_back(kHex[c & 0xf]);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void AppendValue(std::string* out, std::string_view v) {
  if (NeedsQuotes(v)) {
    AppendQuoted(out, v);
  } else {
    out->append(v);
  }
}

void AppendTimestamp(std::string* out, std::chrono::system_clock::time_point ts) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(ts.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  out->append(buf, n);
  char frac[8];
  int len = std::snprintf(frac, sizeof(frac), ".%03dZ", static_cast<int>(ms % 1000));
  out->append(frac, static_cast<size_t>(len));
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "unknown";
}

Status ParseLogLevel(std::string_view name, LogLevel* level) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (name == LogLevelName(l)) {
      *level = l;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown log level \"" + std::string(name) +
                                 "\" (want debug, info, warn or error)");
}

Logger::Logger(std::string component, int fd, LogLevel min_level)
    : component_(std::move(component)), fd_(fd), min_level_(min_level) {}

Logger Logger::WithComponent(std::string component) const {
  return Logger(std::move(component), fd_, min_level_);
}

Logger Logger::WithLevel(LogLevel min_level) const {
  return Logger(component_, fd_, min_level);
}

std::string Logger::FormatLine(std::chrono::system_clock::time_point ts, LogLevel level,
                               std::string_view component, std::string_view msg,
                               std::initializer_list<LogField> fields) {
  std::string line;
  line.reserve(96 + msg.size() + fields.size() * 24);
  line.append("ts=");
  AppendTimestamp(&line, ts);
  line.append(" level=");
  line.append(LogLevelName(level));
  line.append(" component=");
  AppendValue(&line, component);
  line.append(" msg=");
  AppendQuoted(&line, msg);
  for (const LogField& f : fields) {
    line.push_back(' ');
    line.append(f.key);
    line.push_back('=');
    AppendValue(&line, f.value);
  }
  line.push_back('\n');
  return line;
}

void Logger::Log(LogLevel level, std::string_view msg,
                 std::initializer_list<LogField> fields) const {
  if (!Enabled(level)) return;
  std::string line = FormatLine(std::chrono::system_clock::now(), level, component_, msg, fields);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to report a broken log sink
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace pdpm
