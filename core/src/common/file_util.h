// Small whole-file helpers shared by the daemons and the `pdpm` CLI.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace pdpm {

// Reads the whole file (kNotFound when it does not exist).
Status ReadWholeFile(const std::string& path, std::string* out);

// A secret file (a cluster secret, a password): its content without the
// trailing line ends; kInvalidArgument when that is empty.
Status ReadSecretFile(const std::string& path, std::string* secret);

// Replaces `path` with `data` durably: temp file, fsync, rename, fsync of
// the directory. A crash leaves the old or the new content, never a mix.
Status WriteFileAtomically(const std::string& path, const std::string& data, mode_t mode);

// mkdir -p with `mode` for the directories it creates.
Status MakeDirs(const std::string& path, mode_t mode);

bool FileExists(const std::string& path);

}  // namespace pdpm
