#include "common/cluster_config.h"

#include <cctype>

#include "common/file_util.h"

namespace pdpm {
namespace {

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  return std::string(s);
}

}  // namespace

Status ClusterConfig::Load(const std::string& path, ClusterConfig* out) {
  std::string text;
  PDPM_RETURN_IF_ERROR(ReadWholeFile(path, &text).WithContext("cluster configuration"));
  return Parse(path, text, out);
}

Status ClusterConfig::Parse(const std::string& path, const std::string& text, ClusterConfig* out) {
  ClusterConfig c;
  c.path_ = path;
  size_t pos = 0;
  int number = 1;
  auto invalid = [&](const std::string& what) {
    return Status::InvalidArgument(path + " line " + std::to_string(number) + ": " + what);
  };
  for (; pos < text.size(); number++) {
    size_t nl = text.find('\n', pos);
    std::string_view raw(text.data() + pos, (nl == std::string::npos ? text.size() : nl) - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos || Trim(line.substr(0, eq)).empty()) {
      return invalid("not a key = value line: " + line);
    }
    std::string key = Trim(line.substr(0, eq));
    if (!c.values_.emplace(key, Trim(line.substr(eq + 1))).second) {
      return invalid(key + " is given twice");
    }
  }
  if (c.Has("config_version") && c.Get("config_version") != "1") {
    return Status::NotSupported(path + ": config_version " + c.Get("config_version") +
                                " (this build reads version 1)");
  }
  *out = std::move(c);
  return Status::OK();
}

std::string ClusterConfig::Get(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? std::string() : it->second;
}

Status ClusterConfig::Require(const std::string& key, std::string* value) const {
  *value = Get(key);
  if (value->empty()) return Status::InvalidArgument(path_ + ": " + key + " is missing or empty");
  return Status::OK();
}

}  // namespace pdpm
