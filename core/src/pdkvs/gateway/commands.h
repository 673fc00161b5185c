// The commands of the pDKVS gateway: Redis semantics and Redis-format
// replies and errors over a KvStore. One CommandExecutor serves every
// connection of a gateway (it is thread-safe); per-connection state is a
// ClientState. Supported commands and differences from Redis:
// docs/pdkvs.md ("Gateway").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pdkvs/gateway/kv_store.h"
#include "pdkvs/gateway/resp.h"

namespace pdpm::pdkvs {

struct GatewayConfig {
  std::string password;  // empty: no AUTH needed
  bool enable_flushdb = false;
  RespLimits limits;
  std::string bind = "127.0.0.1";
  int port = 0;
  uint64_t max_clients = 10000;
  // The active expiry's pause between two steps (ExpirySweeper); 0: none.
  std::chrono::milliseconds active_expiry_interval{10};
};

// One connection. Fields other threads read (CLIENT LIST, INFO) are atomic
// or guarded by the registry's mutex.
struct ClientState {
  uint64_t id = 0;
  int fd = -1;
  std::string addr, laddr;
  int64_t created_ms = 0;
  std::atomic<int64_t> last_active_ms{0};
  std::atomic<const char*> last_command{"NULL"};
  std::atomic<int> protocol{2};
  bool authenticated = false;
  std::string name;  // guarded by ClientRegistry::mu
  // MULTI/EXEC state, used by the connection's thread only.
  struct Multi {
    bool active = false;  // between MULTI and EXEC or DISCARD
    bool failed = false;  // a command was refused while queueing: EXEC aborts
    std::vector<std::vector<std::string>> queued;
  } multi;
  // WATCHed keys and the version each had then (the first WATCH's).
  std::map<std::string, KvVersion, std::less<>> watched;
};

// Every open connection of a gateway, for CLIENT LIST and INFO.
class ClientRegistry {
 public:
  uint64_t Add(ClientState* client);  // assigns client->id
  void Remove(ClientState* client);
  size_t size();
  void SetName(ClientState* client, std::string name);
  std::string GetName(ClientState* client);
  // One CLIENT LIST line per client, ids ascending.
  std::string List(int64_t now_ms);

 private:
  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, ClientState*> clients_;
};

struct GatewayStats {
  std::atomic<uint64_t> connections_received{0};
  std::atomic<uint64_t> commands_processed{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> expired_keys{0};  // freed by the active expiry
  int64_t started_ms = 0;
};

class CommandExecutor {
 public:
  CommandExecutor(KvStore* store, const GatewayConfig* config, ClientRegistry* clients,
                  GatewayStats* stats);

  // Runs one request (args non-empty) and appends its reply to *out in the
  // client's protocol. Returns false when the connection must close after
  // the reply (QUIT).
  bool Execute(ClientState* client, std::span<const std::string_view> args, std::string* out);

  // Whether the request is a plain GET key, SET key value, HGET key field
  // or HSET key field value of a client that may run it, which a gateway may run among others with
  // KvStore::RunBatch: then fills *op (viewing args). Execute runs every
  // other request.
  bool Batchable(const ClientState& client, std::span<const std::string_view> args, KvOp* op) const;
  // Appends the reply of a batched op, as Execute would have replied.
  void ReplyBatched(ClientState* client, const KvOp& op, std::string* out);

  struct Command;

 private:
  KvStore* const store_;
  const GatewayConfig* const config_;
  ClientRegistry* const clients_;
  GatewayStats* const stats_;
};

// Redis glob matching (* ? [abc] [^a-z] \x) of `s` against `pattern`.
bool GlobMatch(std::string_view pattern, std::string_view s, bool nocase = false);

int64_t NowUnixMs();

}  // namespace pdpm::pdkvs
