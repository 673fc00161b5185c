// FlagParser: the command-line flags of PDPM daemons and tools.
//
// Flags are `--name value` or `--name=value`; booleans are `--name` (or
// `--name=true|false`). Sizes take an optional binary suffix (4096, 64KiB,
// 4MiB, 2GiB); durations a unit (250ms, 3s; a bare number is milliseconds).
// Every mistake — unknown flag, missing or malformed value, stray argument,
// a flag given twice — is an InvalidArgument naming the flag, so a daemon
// can print it with Usage() and exit non-zero. `--help` (or `-h`) anywhere
// is no mistake: Parse stops there, and PrintUsageIfAsked prints the usage
// on stdout for the program to exit 0.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pdpm {

class FlagParser {
 public:
  explicit FlagParser(std::string program) : program_(std::move(program)) {}

  // Each Add* binds a flag to a variable that already holds its default.
  void AddString(std::string name, std::string* out, std::string help);
  void AddUint64(std::string name, uint64_t* out, std::string help);
  void AddUint32(std::string name, uint32_t* out, std::string help);
  void AddSize(std::string name, uint64_t* bytes, std::string help);
  void AddDuration(std::string name, std::chrono::milliseconds* out, std::string help);
  void AddBool(std::string name, bool* out, std::string help);

  // Parses argv[1..argc). On error the bound variables may be partly set.
  Status Parse(int argc, const char* const* argv);
  // After Parse: whether the command line asked for --help, and if so the
  // usage is printed on stdout (the program then exits 0).
  bool PrintUsageIfAsked() const;
  // Whether the command line set the flag (as opposed to its default).
  bool IsSet(std::string_view name) const;
  // "usage: <program> [flags]" and one line per flag with its help.
  std::string Usage() const;

 private:
  enum class Kind { kString, kUint64, kUint32, kSize, kDuration, kBool };
  struct Flag {
    std::string name;
    Kind kind;
    void* out;
    std::string help;
    bool set = false;
  };
  void Add(std::string name, Kind kind, void* out, std::string help);
  static Status Assign(const Flag& flag, std::string_view value);

  std::string program_;
  std::vector<Flag> flags_;
  bool help_asked_ = false;
};

// "4MiB" → 4194304. Accepts a plain byte count or a K/M/G/T suffix with
// optional "iB"/"B" (all binary). InvalidArgument on anything else or overflow.
Status ParseSize(std::string_view text, uint64_t* bytes);
// "250ms", "3s", "2m", or a bare number of milliseconds.
Status ParseDuration(std::string_view text, std::chrono::milliseconds* out);

}  // namespace pdpm
