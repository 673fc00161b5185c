#include "net/transport.h"

#include <chrono>
#include <thread>

namespace pdpm::net {

Status ParseBackendKind(std::string_view name, BackendKind* out) {
  if (name == "tcp") {
    *out = BackendKind::kTcp;
  } else if (name == "verbs") {
    *out = BackendKind::kVerbs;
  } else {
    return Status::InvalidArgument("unknown transport backend '" + std::string(name) +
                                   "' (want tcp or verbs)");
  }
  return Status::OK();
}

std::string_view BackendKindName(BackendKind kind) {
  return kind == BackendKind::kTcp ? "tcp" : "verbs";
}

std::string_view OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kRead: return "read";
    case Opcode::kWrite: return "write";
    case Opcode::kWriteWithImm: return "write_with_imm";
    case Opcode::kCompareSwap: return "compare_swap";
    case Opcode::kFetchAdd: return "fetch_add";
  }
  return "unknown";
}

}  // namespace pdpm::net
