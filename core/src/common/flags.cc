#include "common/flags.h"

#include <charconv>
#include <cstdio>
#include <limits>

namespace pdpm {
namespace {

// Parses the leading decimal digits of `text`; `rest` receives the suffix.
bool ParseLeadingUint(std::string_view text, uint64_t* value, std::string_view* rest) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  if (ec != std::errc() || ptr == text.data()) return false;
  *rest = std::string_view(ptr, static_cast<size_t>(end - ptr));
  return true;
}

bool MultiplyChecked(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

}  // namespace

Status ParseSize(std::string_view text, uint64_t* bytes) {
  uint64_t n = 0;
  std::string_view suffix;
  if (!ParseLeadingUint(text, &n, &suffix)) {
    return Status::InvalidArgument("\"" + std::string(text) + "\" is not a size");
  }
  uint64_t unit = 1;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'K':
      case 'k': unit = 1ULL << 10; break;
      case 'M':
      case 'm': unit = 1ULL << 20; break;
      case 'G':
      case 'g': unit = 1ULL << 30; break;
      case 'T':
      case 't': unit = 1ULL << 40; break;
      case 'B': unit = 1; break;
      default: unit = 0;
    }
    std::string_view tail = suffix.substr(suffix[0] == 'B' ? 0 : 1);
    if (unit == 0 || !(tail.empty() || tail == "B" || tail == "iB")) {
      return Status::InvalidArgument("\"" + std::string(text) +
                                     "\" has an unknown size unit (use KiB, MiB, GiB, TiB)");
    }
  }
  if (!MultiplyChecked(n, unit, bytes)) {
    return Status::InvalidArgument("size \"" + std::string(text) + "\" overflows 64 bits");
  }
  return Status::OK();
}

Status ParseDuration(std::string_view text, std::chrono::milliseconds* out) {
  uint64_t n = 0;
  std::string_view suffix;
  if (!ParseLeadingUint(text, &n, &suffix)) {
    return Status::InvalidArgument("\"" + std::string(text) + "\" is not a duration");
  }
  uint64_t ms_per_unit = 0;
  if (suffix.empty() || suffix == "ms") {
    ms_per_unit = 1;
  } else if (suffix == "s") {
    ms_per_unit = 1000;
  } else if (suffix == "m") {
    ms_per_unit = 60'000;
  } else {
    return Status::InvalidArgument("\"" + std::string(text) +
                                   "\" has an unknown duration unit (use ms, s or m)");
  }
  uint64_t ms = 0;
  if (!MultiplyChecked(n, ms_per_unit, &ms) ||
      ms > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::InvalidArgument("duration \"" + std::string(text) + "\" is too long");
  }
  *out = std::chrono::milliseconds(static_cast<int64_t>(ms));
  return Status::OK();
}

void FlagParser::Add(std::string name, Kind kind, void* out, std::string help) {
  flags_.push_back(Flag{std::move(name), kind, out, std::move(help)});
}
void FlagParser::AddString(std::string name, std::string* out, std::string help) {
  Add(std::move(name), Kind::kString, out, std::move(help));
}
void FlagParser::AddUint64(std::string name, uint64_t* out, std::string help) {
  Add(std::move(name), Kind::kUint64, out, std::move(help));
}
void FlagParser::AddUint32(std::string name, uint32_t* out, std::string help) {
  Add(std::move(name), Kind::kUint32, out, std::move(help));
}
void FlagParser::AddSize(std::string name, uint64_t* bytes, std::string help) {
  Add(std::move(name), Kind::kSize, bytes, std::move(help));
}
void FlagParser::AddDuration(std::string name, std::chrono::milliseconds* out, std::string help) {
  Add(std::move(name), Kind::kDuration, out, std::move(help));
}
void FlagParser::AddBool(std::string name, bool* out, std::string help) {
  Add(std::move(name), Kind::kBool, out, std::move(help));
}

Status FlagParser::Assign(const Flag& flag, std::string_view value) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("--" + flag.name + "=" + std::string(value) + ": " +
                                   std::string(why));
  };
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.out) = std::string(value);
      return Status::OK();
    case Kind::kUint64:
    case Kind::kUint32: {
      uint64_t n = 0;
      std::string_view rest;
      if (!ParseLeadingUint(value, &n, &rest) || !rest.empty()) return bad("not a number");
      if (flag.kind == Kind::kUint32) {
        if (n > std::numeric_limits<uint32_t>::max()) return bad("too large");
        *static_cast<uint32_t*>(flag.out) = static_cast<uint32_t>(n);
      } else {
        *static_cast<uint64_t*>(flag.out) = n;
      }
      return Status::OK();
    }
    case Kind::kSize: {
      Status s = ParseSize(value, static_cast<uint64_t*>(flag.out));
      return s.ok() ? s : bad(s.message());
    }
    case Kind::kDuration: {
      Status s = ParseDuration(value, static_cast<std::chrono::milliseconds*>(flag.out));
      return s.ok() ? s : bad(s.message());
    }
    case Kind::kBool:
      if (value == "true" || value == "1") {
        *static_cast<bool*>(flag.out) = true;
      } else if (value == "false" || value == "0") {
        *static_cast<bool*>(flag.out) = false;
      } else {
        return bad("want true or false");
      }
      return Status::OK();
  }
  return Status::Internal("unknown flag kind");
}

Status FlagParser::Parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_asked_ = true;
      return Status::OK();
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      return Status::InvalidArgument("unexpected argument \"" + std::string(arg) + "\"");
    }
    arg.remove_prefix(2);
    std::string_view name = arg;
    std::string_view value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    Flag* flag = nullptr;
    for (Flag& f : flags_) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return Status::InvalidArgument("unknown flag --" + std::string(name));
    }
    if (flag->set) return Status::InvalidArgument("--" + flag->name + " given twice");
    if (!has_value) {
      if (flag->kind == Kind::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return Status::InvalidArgument("--" + flag->name + " needs a value");
      }
    }
    PDPM_RETURN_IF_ERROR(Assign(*flag, value));
    flag->set = true;
  }
  return Status::OK();
}

bool FlagParser::PrintUsageIfAsked() const {
  if (help_asked_) std::fputs(Usage().c_str(), stdout);
  return help_asked_;
}

bool FlagParser::IsSet(std::string_view name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

std::string FlagParser::Usage() const {
  std::string out = "usage: " + program_ + " [flags]\n";
  for (const Flag& f : flags_) {
    std::string left = "  --" + f.name;
    if (f.kind != Kind::kBool) left += " VALUE";
    if (left.size() < 28) left.resize(28, ' ');
    out += left + " " + f.help + "\n";
  }
  return out;
}

}  // namespace pdpm
