// What a load client (pdpm_client_load) expects the cluster to hold after
// its run, and the check of it (tests). Every acknowledged operation
// determines the expected state; an operation that failed leaves the old
// and the new state both acceptable (it may or may not have happened).
//
// File format, one line each:
//   obj <hi> <lo> <n> (<present 0|1> <size> <crc32c>) x n   acceptable states
//   mem <hi> <lo> <length> <crc32c>                          a written heap block
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"

namespace pdpm::client {

struct ObjectState {
  bool present = false;
  uint64_t size = 0;
  uint32_t crc = 0;
  bool operator==(const ObjectState&) const = default;
};

struct Expectations {
  std::map<std::pair<uint64_t, uint64_t>, std::vector<ObjectState>> objects;
  struct Block {
    GlobalAddress addr;
    uint64_t length = 0;
    uint32_t crc = 0;
  };
  std::vector<Block> blocks;

  Status Save(const std::string& path) const;
  Status Load(const std::string& path);
  // Reads everything back through `client`; each mismatch becomes a line
  // of *problems. Returns how many objects and blocks were checked.
  size_t Verify(Client* client, std::string* problems) const;
};

}  // namespace pdpm::client
