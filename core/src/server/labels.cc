#include "server/labels.h"

#include <algorithm>

#include "common/cluster_config.h"
#include "common/file_util.h"

namespace pdpm::server {

Status ParseLabelList(const std::string& text, Labels* out) {
  Labels parsed;
  // Every item between commas, the empty ones too ("a=1,", "a=1,,b=2").
  for (size_t pos = 0; !text.empty() && pos <= text.size();) {
    size_t comma = std::min(text.find(',', pos), text.size());
    std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      return Status::InvalidArgument("--label: \"" + item + "\" is not key=value");
    }
    parsed[item.substr(0, eq)] = item.substr(eq + 1);
  }
  for (auto& [key, value] : parsed) (*out)[key] = value;
  return Status::OK();
}

Status LoadLabelsFile(const std::string& path, Labels* out) {
  std::string text;
  PDPM_RETURN_IF_ERROR(ReadWholeFile(path, &text).WithContext("labels file"));
  ClusterConfig file;
  PDPM_RETURN_IF_ERROR(ClusterConfig::Parse(path, text, &file));
  Labels parsed;
  for (const auto& [key, value] : file.values()) {
    if (key == "config_version") continue;
    if (value.empty()) {
      return Status::InvalidArgument("labels file " + path + ": label " + key + " has no value");
    }
    parsed.emplace(key, value);
  }
  for (auto& [key, value] : parsed) out->emplace(key, value);
  return Status::OK();
}

}  // namespace pdpm::server
