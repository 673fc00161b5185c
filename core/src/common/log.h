// Logger: the structured log format every PDPM daemon writes, one line per
// event:
//
//   ts=2026-01-02T03:04:05.678Z level=info component=monitor msg="server joined" server_id=3
//
// Values with spaces, quotes, '=' or control characters are quoted and
// escaped (\" \\ \n \t), `msg` is always quoted. A Logger is immutable after
// construction and safe to use from many threads: each line is formatted
// into one buffer and handed to the kernel with a single write(2), so lines
// of different threads never interleave on a pipe (below PIPE_BUF) or an
// O_APPEND file. There is no process-wide logger: whoever needs to log is
// given a Logger.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pdpm {

enum class LogLevel : uint8_t { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// "debug" | "info" | "warn" | "error".
std::string_view LogLevelName(LogLevel level);
// Parses a LogLevelName; InvalidArgument otherwise.
Status ParseLogLevel(std::string_view name, LogLevel* level);

// One key=value pair of a log line; the value is rendered at construction.
struct LogField {
  LogField(std::string_view k, std::string_view v) : key(k), value(v) {}
  LogField(std::string_view k, const char* v) : key(k), value(v) {}
  LogField(std::string_view k, const std::string& v) : key(k), value(v) {}
  template <std::integral T>
  LogField(std::string_view k, T v) : key(k), value(std::to_string(v)) {}
  LogField(std::string_view k, bool v) : key(k), value(v ? "true" : "false") {}
  // The status as "code: message" ("ok" when ok).
  LogField(std::string_view k, const Status& s) : key(k), value(s.ToString()) {}

  std::string_view key;
  std::string value;
};

class Logger {
 public:
  // Writes to `fd`, which the caller keeps open for the logger's lifetime
  // (stderr by default). Lines below `min_level` are dropped.
  explicit Logger(std::string component, int fd = 2, LogLevel min_level = LogLevel::kInfo);

  // The same sink and level for another component.
  Logger WithComponent(std::string component) const;
  // The same sink and component with another minimum level.
  Logger WithLevel(LogLevel min_level) const;

  bool Enabled(LogLevel level) const { return level >= min_level_; }
  void Log(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields = {}) const;
  void Debug(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kDebug, msg, fields);
  }
  void Info(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kInfo, msg, fields);
  }
  void Warn(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kWarn, msg, fields);
  }
  void Error(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kError, msg, fields);
  }

  // One complete line, newline included; exposed so tests and other sinks
  // produce exactly what Log writes.
  static std::string FormatLine(std::chrono::system_clock::time_point ts, LogLevel level,
                                std::string_view component, std::string_view msg,
                                std::initializer_list<LogField> fields);

 private:
  std::string component_;
  int fd_;
  LogLevel min_level_;
};

}  // namespace pdpm
