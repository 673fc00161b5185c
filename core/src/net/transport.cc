#include "net/transport.h"

#include <poll.h>

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

Status ExecuteSync(Connection& conn, const Op& op, const GiveUpFn& give_up) {
  Op signaled = op;
  signaled.signaled = true;
  PDPM_RETURN_IF_ERROR(conn.Post({&signaled, 1}));
  return AwaitCompletion(conn, op.id, give_up);
}

Status AwaitCompletion(Connection& conn, uint64_t id, const GiveUpFn& give_up) {
  // Asked by the clock, not only after a quiet poll: a connection with
  // other traffic (or a transport waking its waiters on a tick) may never
  // be quiet for a whole kGiveUpCheckMs while this op hangs.
  using Clock = std::chrono::steady_clock;
  auto next_ask = Clock::now() + std::chrono::milliseconds(kGiveUpCheckMs);
  Completion c;
  for (;;) {
    if (conn.PollCompletions({&c, 1}) == 1) {
      if (c.id == id) return c.status;
      continue;  // another op's completion: not ours to report
    }
    // The transport fails the op within its op timeout, so this wait ends.
    PDPM_RETURN_IF_ERROR(conn.ArmNotify());
    if (conn.PollCompletions({&c, 1}) == 1) {
      conn.AckNotify();
      if (c.id == id) return c.status;
      continue;
    }
    pollfd p{conn.notify_fd(), POLLIN, 0};
    ::poll(&p, 1, kGiveUpCheckMs);
    conn.AckNotify();
    if (give_up && Clock::now() >= next_ask) {
      if (give_up()) return Status::Unavailable("gave up waiting for " + conn.peer_address());
      next_ask = Clock::now() + std::chrono::milliseconds(kGiveUpCheckMs);
    }
  }
}

}  // namespace pdpm::net
