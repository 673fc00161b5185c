// A server's labels, which it registers with the monitor (docs/server.md):
// "zone", "rack" and "host" are the failure domains the monitor keeps a
// segment's replicas apart by (docs/monitor.md); "pod" names the server's
// pod on Kubernetes; any other key is shown, not used.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace pdpm::server {

using Labels = std::map<std::string, std::string>;

// Parses the --label flag, "key=value,key=value", into *out, replacing a
// key already there. An empty text is no label. kInvalidArgument naming
// the item that is not key=value with a non-empty key and value.
Status ParseLabelList(const std::string& text, Labels* out);

// Reads a labels file (what the operator's node-topology step writes):
// the syntax of the cluster configuration file (common/cluster_config.h:
// "key = value" lines, '#' comments, an optional `config_version = 1`),
// every key but config_version a label. Adds the labels to *out, keeping a
// key already there (the command line wins). kNotFound when the file does
// not exist, kInvalidArgument naming the file and line or key when it is
// malformed or a value is empty; *out is unchanged on error.
Status LoadLabelsFile(const std::string& path, Labels* out);

}  // namespace pdpm::server
