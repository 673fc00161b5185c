// The cluster configuration file the Kubernetes operator renders for every
// daemon (docs/operator.md): one "key = value" per line, '#' comments,
// blank lines ignored, `config_version = 1`. Daemons started with
// --config=FILE take their settings from it; flags given on the command
// line win.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace pdpm {

class ClusterConfig {
 public:
  // Reads and checks `path`: kNotFound when it does not exist,
  // kInvalidArgument naming the line that is not "key = value" or a key
  // given twice, kNotSupported for another config_version.
  static Status Load(const std::string& path, ClusterConfig* out);
  // The same for text already read; `path` names it in errors.
  static Status Parse(const std::string& path, const std::string& text, ClusterConfig* out);

  bool Has(const std::string& key) const { return values_.count(key) != 0; }
  // The value of `key`, or "" when absent.
  std::string Get(const std::string& key) const;
  // kInvalidArgument naming the file and key when `key` is absent or empty.
  Status Require(const std::string& key, std::string* value) const;
  // Every key with its value, config_version included.
  const std::map<std::string, std::string>& values() const { return values_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, std::string> values_;
};

}  // namespace pdpm
