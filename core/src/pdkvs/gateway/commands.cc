#include "pdkvs/gateway/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <set>
#include <thread>

#include "pdkvs/gateway/tx_kv_store.h"
#include "pdkvs/item.h"
#include "pdkvs/tx_overlay.h"
#include "pdkvs/vnode_ops.h"

namespace pdpm::pdkvs {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --- ClientRegistry ---

uint64_t ClientRegistry::Add(ClientState* client) {
  std::lock_guard lock(mu_);
  client->id = next_id_++;
  clients_[client->id] = client;
  return client->id;
}

void ClientRegistry::Remove(ClientState* client) {
  std::lock_guard lock(mu_);
  clients_.erase(client->id);
}

size_t ClientRegistry::size() {
  std::lock_guard lock(mu_);
  return clients_.size();
}

void ClientRegistry::SetName(ClientState* client, std::string name) {
  std::lock_guard lock(mu_);
  client->name = std::move(name);
}

std::string ClientRegistry::GetName(ClientState* client) {
  std::lock_guard lock(mu_);
  return client->name;
}

std::string ClientRegistry::List(int64_t now_ms) {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& [id, c] : clients_) {
    out += "id=" + std::to_string(id) + " addr=" + c->addr + " laddr=" + c->laddr +
           " fd=" + std::to_string(c->fd) + " name=" + c->name +
           " age=" + std::to_string((now_ms - c->created_ms) / 1000) +
           " idle=" + std::to_string((now_ms - c->last_active_ms.load()) / 1000) +
           " flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0"
           " multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=" +
           c->last_command.load() +
           " user=default redir=-1 resp=" + std::to_string(c->protocol.load()) + "\n";
  }
  return out;
}

// --- glob ---

bool GlobMatch(std::string_view p, std::string_view s, bool nocase) {
  auto lower = [nocase](char c) {
    return nocase && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  size_t pi = 0, si = 0;
  while (pi < p.size()) {
    switch (p[pi]) {
      case '*': {
        while (pi + 1 < p.size() && p[pi + 1] == '*') ++pi;
        if (pi + 1 == p.size()) return true;
        for (size_t k = si; k <= s.size(); ++k) {
          if (GlobMatch(p.substr(pi + 1), s.substr(k), nocase)) return true;
        }
        return false;
      }
      case '?':
        if (si == s.size()) return false;
        ++si;
        break;
      case '[': {
        if (si == s.size()) return false;
        ++pi;
        const bool negate = pi < p.size() && p[pi] == '^';
        if (negate) ++pi;
        bool match = false;
        while (pi < p.size() && p[pi] != ']') {
          if (p[pi] == '\\' && pi + 1 < p.size()) {
            ++pi;
            if (lower(p[pi]) == lower(s[si])) match = true;
          } else if (pi + 2 < p.size() && p[pi + 1] == '-') {
            char a = lower(p[pi]), b = lower(p[pi + 2]);
            if (a > b) std::swap(a, b);
            const char c = lower(s[si]);
            if (c >= a && c <= b) match = true;
            pi += 2;
          } else if (lower(p[pi]) == lower(s[si])) {
            match = true;
          }
          ++pi;
        }
        if (pi == p.size()) --pi;  // unterminated: the end closes it
        if (negate) match = !match;
        if (!match) return false;
        ++si;
        break;
      }
      case '\\':
        if (pi + 1 < p.size()) ++pi;
        [[fallthrough]];
      default:
        if (si == s.size() || lower(p[pi]) != lower(s[si])) return false;
        ++si;
        break;
    }
    ++pi;
  }
  return si == s.size();
}

// --- commands ---

namespace {

struct Ctx {
  KvStore* store;
  const GatewayConfig* config;
  ClientRegistry* clients;
  GatewayStats* stats;
  ClientState* client;
  std::span<const std::string_view> args;
  RespWriter w;
  bool close = false;
  // Running inside a transaction (EXEC's, or a command's own): c.store is
  // its TxKvStore.
  bool in_transaction = false;
};

// Runs `body` as one transaction of the store over `keys` (defined with
// EXEC below).
void Atomically(Ctx& c, const std::vector<std::string_view>& keys, void (*body)(Ctx&));

constexpr char kSyntaxError[] = "ERR syntax error";
constexpr char kNotInteger[] = "ERR value is not an integer or out of range";
constexpr char kOverflow[] = "ERR increment or decrement would overflow";
constexpr char kTooBig[] = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return out;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (tolower(static_cast<unsigned char>(a[i])) != tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// A store error as Redis would word its nearest equivalent. A failover or
// reconfiguration in progress answers as Redis Cluster does while slots
// move or the cluster is down (-TRYAGAIN, -CLUSTERDOWN), errors client
// libraries know to retry; the servers' own wording stays in the log.
void ReplyStatus(Ctx& c, const Status& s) {
  if (IsWrongType(s)) return c.w.Error(std::string("WRONGTYPE ") + std::string(kWrongTypeMessage));
  switch (s.code()) {
    case StatusCode::kTooLarge: return c.w.Error(kTooBig);
    case StatusCode::kResourceExhausted:
      return c.w.Error("OOM command not allowed: the pDKVS store is full");
    case StatusCode::kAborted:
      return c.w.Error("TRYAGAIN the keys are being written by another multi-key command");
    case StatusCode::kUnavailable:
    case StatusCode::kStaleEpoch:
    case StatusCode::kTimeout:
      return c.w.Error(
          "CLUSTERDOWN the pDKVS cluster is reconfiguring (a server failed or moved): try again");
    default: return c.w.Error("ERR " + s.ToString());
  }
}

bool ParseInt(Ctx& c, std::string_view s, int64_t* v) {
  if (ParseDecimalInt64(s, v)) return true;
  c.w.Error(kNotInteger);
  return false;
}

void Ok(Ctx& c) {
  c.w.Simple("OK");
}

void Ping(Ctx& c) {
  if (c.args.size() > 2) return c.w.Error("ERR wrong number of arguments for 'ping' command");
  if (c.args.size() == 2) return c.w.Bulk(c.args[1]);
  c.w.Simple("PONG");
}

void Echo(Ctx& c) {
  c.w.Bulk(c.args[1]);
}

void Quit(Ctx& c) {
  Ok(c);
  c.close = true;
}

// Checks a password (and user) against the configuration; replies on failure.
bool CheckAuth(Ctx& c, std::string_view user, std::string_view password) {
  if (c.config->password.empty() && user == "default") {
    c.w.Error(
        "ERR AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?");
    return false;
  }
  if (user != "default" || password != c.config->password) {
    c.w.Error("WRONGPASS invalid username-password pair or user is disabled.");
    return false;
  }
  c.client->authenticated = true;
  return true;
}

void Auth(Ctx& c) {
  if (c.args.size() > 3) return c.w.Error(kSyntaxError);
  std::string_view user = c.args.size() == 3 ? c.args[1] : "default";
  if (CheckAuth(c, user, c.args.back())) Ok(c);
}

bool ValidClientName(std::string_view name) {
  for (char ch : name) {
    if (ch < '!' || ch > '~') return false;
  }
  return true;
}

void Hello(Ctx& c) {
  int protocol = c.client->protocol.load();
  size_t i = 1;
  if (c.args.size() >= 2) {
    int64_t v = 0;
    if (!ParseDecimalInt64(c.args[1], &v)) {
      return c.w.Error("ERR Protocol version is not an integer or out of range");
    }
    if (v < 2 || v > 3) return c.w.Error("NOPROTO unsupported protocol version");
    protocol = static_cast<int>(v);
    i = 2;
  }
  std::string_view user, password, name;
  bool auth = false, setname = false;
  for (; i < c.args.size(); ++i) {
    const size_t more = c.args.size() - i - 1;
    if (EqualsNoCase(c.args[i], "AUTH") && more >= 2) {
      user = c.args[i + 1];
      password = c.args[i + 2];
      auth = true;
      i += 2;
    } else if (EqualsNoCase(c.args[i], "SETNAME") && more >= 1) {
      name = c.args[i + 1];
      setname = true;
      i += 1;
    } else {
      return c.w.Error("ERR Syntax error in HELLO option '" + std::string(c.args[i]) + "'");
    }
  }
  if (auth && !CheckAuth(c, user, password)) return;
  if (!c.client->authenticated) {
    return c.w.Error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
        "HELLO AUTH <user> <pass> option can be used to authenticate the client and "
        "select the RESP protocol version at the same time");
  }
  if (setname) {
    if (!ValidClientName(name)) {
      return c.w.Error("ERR Client names cannot contain spaces, newlines or special characters.");
    }
    c.clients->SetName(c.client, std::string(name));
  }
  c.client->protocol = protocol;
  c.w.set_protocol(protocol);
  c.w.Map(7);
  c.w.Bulk("server");
  c.w.Bulk("redis");
  c.w.Bulk("version");
  c.w.Bulk("7.0.15");
  c.w.Bulk("proto");
  c.w.Integer(protocol);
  c.w.Bulk("id");
  c.w.Integer(static_cast<int64_t>(c.client->id));
  c.w.Bulk("mode");
  c.w.Bulk("standalone");
  c.w.Bulk("role");
  c.w.Bulk("master");
  c.w.Bulk("modules");
  c.w.Array(0);
}

void Select(Ctx& c) {
  int64_t db = 0;
  if (!ParseInt(c, c.args[1], &db)) return;
  if (db != 0) return c.w.Error("ERR DB index is out of range");
  Ok(c);
}

void Get(Ctx& c) {
  std::string value;
  Status s = c.store->Get(c.args[1], &value);
  if (s.code() == StatusCode::kNotFound) return c.w.Null();
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Bulk(value);
}

// Milliseconds `amount` of `unit_ms` from now, as Redis checks it: positive
// (unless allow_past) and without overflow. Replies on failure.
bool ExpireAt(Ctx& c, std::string_view arg, int64_t unit_ms, bool absolute, bool allow_past,
              std::string_view command, int64_t* at_ms) {
  int64_t v = 0;
  if (!ParseInt(c, arg, &v)) return false;
  const std::string invalid = "ERR invalid expire time in '" + std::string(command) + "' command";
  if ((!allow_past && v <= 0) || v > INT64_MAX / unit_ms || v < INT64_MIN / unit_ms) {
    c.w.Error(invalid);
    return false;
  }
  int64_t ms = v * unit_ms;
  if (!absolute) {
    const int64_t now = NowUnixMs();
    if (ms > INT64_MAX - now) {
      c.w.Error(invalid);
      return false;
    }
    ms += now;
  }
  *at_ms = ms;
  return true;
}

void SetCommand(Ctx& c) {
  SetOptions o;
  bool get = false, nx = false, xx = false, ttl = false;
  for (size_t i = 3; i < c.args.size(); ++i) {
    std::string_view a = c.args[i];
    const bool has_next = i + 1 < c.args.size();
    if (EqualsNoCase(a, "NX") && !xx) {
      nx = true;
    } else if (EqualsNoCase(a, "XX") && !nx) {
      xx = true;
    } else if (EqualsNoCase(a, "GET")) {
      get = true;
    } else if (EqualsNoCase(a, "KEEPTTL") && !ttl) {
      ttl = true;
      o.expiry = SetOptions::Expiry::kKeep;
    } else if ((EqualsNoCase(a, "EX") || EqualsNoCase(a, "PX") || EqualsNoCase(a, "EXAT") ||
                EqualsNoCase(a, "PXAT")) &&
               !ttl && has_next) {
      ttl = true;
      const bool seconds = a[0] == 'e' || a[0] == 'E';
      const bool absolute = a.size() == 4;
      int64_t at = 0;
      if (!ExpireAt(c, c.args[++i], seconds ? 1000 : 1, absolute, false, "set", &at)) return;
      o.expiry = SetOptions::Expiry::kSet;
      o.expire_at_ms = static_cast<uint64_t>(at);
    } else {
      return c.w.Error(kSyntaxError);
    }
  }
  if (nx) o.condition = SetOptions::Condition::kIfAbsent;
  if (xx) o.condition = SetOptions::Condition::kIfPresent;
  o.want_old = get;
  SetResult r;
  Status s = c.store->Set(c.args[1], c.args[2], o, &r);
  if (!s.ok()) return ReplyStatus(c, s);
  if (get) {
    if (r.old_value) return c.w.Bulk(*r.old_value);
    return c.w.Null();
  }
  if (r.applied) return Ok(c);
  c.w.Null();
}

void SetNx(Ctx& c) {
  SetOptions o;
  o.condition = SetOptions::Condition::kIfAbsent;
  SetResult r;
  Status s = c.store->Set(c.args[1], c.args[2], o, &r);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(r.applied ? 1 : 0);
}

void GetSet(Ctx& c) {
  SetOptions o;
  o.want_old = true;
  SetResult r;
  Status s = c.store->Set(c.args[1], c.args[2], o, &r);
  if (!s.ok()) return ReplyStatus(c, s);
  if (r.old_value) return c.w.Bulk(*r.old_value);
  c.w.Null();
}

void GetDel(Ctx& c) {
  std::string value;
  Status s = c.store->GetDelete(c.args[1], &value);
  if (s.code() == StatusCode::kNotFound) return c.w.Null();
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Bulk(value);
}

void MGet(Ctx& c) {
  std::vector<std::string_view> keys(c.args.begin() + 1, c.args.end());
  std::vector<std::optional<std::string>> values;
  Status s = c.store->MultiGet(keys, &values);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Array(values.size());
  for (const auto& v : values) {
    if (v) {
      c.w.Bulk(*v);
    } else {
      c.w.Null();
    }
  }
}

void MSetCommon(Ctx& c, bool nx) {
  if (c.args.size() % 2 == 0) {
    return c.w.Error(std::string("ERR wrong number of arguments for '") + (nx ? "msetnx" : "mset") +
                     "' command");
  }
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  for (size_t i = 1; i + 1 < c.args.size(); i += 2) pairs.emplace_back(c.args[i], c.args[i + 1]);
  bool applied = false;
  Status s = c.store->MultiPut(pairs, nx, &applied);
  if (!s.ok()) return ReplyStatus(c, s);
  if (nx) return c.w.Integer(applied ? 1 : 0);
  Ok(c);
}

void MSet(Ctx& c) {
  MSetCommon(c, false);
}
void MSetNx(Ctx& c) {
  MSetCommon(c, true);
}

void Del(Ctx& c) {
  int64_t n = 0;
  for (size_t i = 1; i < c.args.size(); ++i) {
    Status s = c.store->Delete(c.args[i]);
    if (s.ok()) {
      ++n;
    } else if (s.code() != StatusCode::kNotFound) {
      return ReplyStatus(c, s);
    }
  }
  c.w.Integer(n);
}

void ExistsCommand(Ctx& c) {
  int64_t n = 0;
  for (size_t i = 1; i < c.args.size(); ++i) {
    bool e = false;
    Status s = c.store->Exists(c.args[i], &e);
    if (!s.ok()) return ReplyStatus(c, s);
    n += e ? 1 : 0;
  }
  c.w.Integer(n);
}

void IncrCommon(Ctx& c, int64_t delta) {
  int64_t result = 0;
  Status s = c.store->IncrBy(c.args[1], delta, &result);
  if (s.code() == StatusCode::kInvalidArgument) return c.w.Error(kNotInteger);
  if (s.code() == StatusCode::kOutOfRange) return c.w.Error(kOverflow);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(result);
}

void Incr(Ctx& c) {
  IncrCommon(c, 1);
}
void Decr(Ctx& c) {
  IncrCommon(c, -1);
}
void IncrBy(Ctx& c) {
  int64_t d = 0;
  if (ParseInt(c, c.args[2], &d)) IncrCommon(c, d);
}
void DecrBy(Ctx& c) {
  int64_t d = 0;
  if (!ParseInt(c, c.args[2], &d)) return;
  if (d == INT64_MIN) return c.w.Error("ERR decrement would overflow");
  IncrCommon(c, -d);
}

void Append(Ctx& c) {
  uint64_t len = 0;
  Status s = c.store->Append(c.args[1], c.args[2], &len);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(static_cast<int64_t>(len));
}

void StrLen(Ctx& c) {
  std::string value;
  Status s = c.store->Get(c.args[1], &value);
  if (s.code() == StatusCode::kNotFound) return c.w.Integer(0);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(static_cast<int64_t>(value.size()));
}

void GetRange(Ctx& c) {
  int64_t start = 0, end = 0;
  if (!ParseInt(c, c.args[2], &start) || !ParseInt(c, c.args[3], &end)) return;
  std::string value;
  Status s = c.store->GetRange(c.args[1], start, end, &value);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Bulk(value);
}

void SetRange(Ctx& c) {
  int64_t offset = 0;
  if (!ParseInt(c, c.args[2], &offset)) return;
  if (offset < 0) return c.w.Error("ERR offset is out of range");
  uint64_t len = 0;
  Status s = c.store->SetRange(c.args[1], static_cast<uint64_t>(offset), c.args[3], &len);
  if (s.code() == StatusCode::kOutOfRange) return c.w.Error(kTooBig);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(static_cast<int64_t>(len));
}

// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT key time [NX | XX | GT | LT]: the
// condition is checked against the key's expiry (none counts as infinite)
// in the store's atomic step that changes it, for strings and hashes
// alike. A time in the past deletes the key.
void Expire(Ctx& c) {
  const std::string_view name = c.args[0];
  const std::string command = Lower(name);
  const bool absolute = command.size() > 7 && command.compare(command.size() - 2, 2, "at") == 0;
  const int64_t unit_ms = command[0] == 'p' ? 1 : 1000;
  bool nx = false, xx = false, gt = false, lt = false;
  for (size_t i = 3; i < c.args.size(); ++i) {
    std::string_view a = c.args[i];
    if (EqualsNoCase(a, "NX")) {
      nx = true;
    } else if (EqualsNoCase(a, "XX")) {
      xx = true;
    } else if (EqualsNoCase(a, "GT")) {
      gt = true;
    } else if (EqualsNoCase(a, "LT")) {
      lt = true;
    } else {
      return c.w.Error("ERR Unsupported option " + std::string(a));
    }
  }
  if (nx && (xx || gt || lt)) {
    return c.w.Error("ERR NX and XX, GT or LT options at the same time are not compatible");
  }
  if (gt && lt) return c.w.Error("ERR GT and LT options at the same time are not compatible");
  int64_t at = 0;
  if (!ExpireAt(c, c.args[2], unit_ms, absolute, true, command, &at)) return;
  const ExpiryCondition condition = nx         ? ExpiryCondition::kIfNone
                                    : gt       ? ExpiryCondition::kIfLater
                                    : lt && xx ? ExpiryCondition::kIfSomeEarlier
                                    : lt       ? ExpiryCondition::kIfEarlier
                                    : xx       ? ExpiryCondition::kIfSome
                                               : ExpiryCondition::kAlways;
  // Every time in the past (a negative one too) compares and deletes as
  // the earliest.
  bool changed = false;
  Status s =
      c.store->SetExpiry(c.args[1], at <= 0 ? 1 : static_cast<uint64_t>(at), condition, &changed);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(changed ? 1 : 0);
}

void TtlCommon(Ctx& c, bool ms) {
  uint64_t at = 0;
  Status s = c.store->GetExpiry(c.args[1], &at);
  if (s.code() == StatusCode::kNotFound) return c.w.Integer(-2);
  if (!s.ok()) return ReplyStatus(c, s);
  if (at == 0) return c.w.Integer(-1);
  int64_t left = static_cast<int64_t>(at) - NowUnixMs();
  if (left < 0) left = 0;
  c.w.Integer(ms ? left : (left + 500) / 1000);
}

void Ttl(Ctx& c) {
  TtlCommon(c, false);
}
void PTtl(Ctx& c) {
  TtlCommon(c, true);
}

void Persist(Ctx& c) {
  bool changed = false;
  Status s = c.store->SetExpiry(c.args[1], 0, ExpiryCondition::kAlways, &changed);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(changed ? 1 : 0);
}

void SetExCommon(Ctx& c, int64_t unit_ms, std::string_view name) {
  int64_t at = 0;
  if (!ExpireAt(c, c.args[2], unit_ms, false, false, name, &at)) return;
  SetOptions o;
  o.expiry = SetOptions::Expiry::kSet;
  o.expire_at_ms = static_cast<uint64_t>(at);
  SetResult r;
  Status s = c.store->Set(c.args[1], c.args[3], o, &r);
  if (!s.ok()) return ReplyStatus(c, s);
  Ok(c);
}

void SetEx(Ctx& c) {
  SetExCommon(c, 1000, "setex");
}
void PSetEx(Ctx& c) {
  SetExCommon(c, 1, "psetex");
}

// GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]: the value, then
// the expiry changed (in one transaction).
void GetExBody(Ctx& c) {
  bool set = false, persist = false;
  int64_t at = 0;
  for (size_t i = 2; i < c.args.size(); ++i) {
    std::string_view a = c.args[i];
    const bool has_next = i + 1 < c.args.size();
    if ((EqualsNoCase(a, "EX") || EqualsNoCase(a, "PX") || EqualsNoCase(a, "EXAT") ||
         EqualsNoCase(a, "PXAT")) &&
        !set && !persist && has_next) {
      const bool seconds = a[0] == 'e' || a[0] == 'E';
      if (!ExpireAt(c, c.args[++i], seconds ? 1000 : 1, a.size() == 4, false, "getex", &at)) {
        return;
      }
      set = true;
    } else if (EqualsNoCase(a, "PERSIST") && !set && !persist) {
      persist = true;
    } else {
      return c.w.Error(kSyntaxError);
    }
  }
  std::string value;
  Status s = c.store->Get(c.args[1], &value);
  if (s.code() == StatusCode::kNotFound) return c.w.Null();
  if (!s.ok()) return ReplyStatus(c, s);
  if (set || persist) {
    bool changed = false;
    s = c.store->SetExpiry(c.args[1], persist ? 0 : static_cast<uint64_t>(at),
                           ExpiryCondition::kAlways, &changed);
    if (!s.ok()) return ReplyStatus(c, s);
  }
  c.w.Bulk(value);
}

void GetEx(Ctx& c) {
  Atomically(c, {c.args[1]}, GetExBody);
}

void IncrByFloatBody(Ctx& c) {
  long double incr = 0;
  if (!ParseLongDouble(c.args[2], &incr)) return c.w.Error("ERR value is not a valid float");
  std::string value;
  Status s = c.store->Get(c.args[1], &value);
  long double current = 0;
  if (s.ok()) {
    if (!ParseLongDouble(value, &current)) return c.w.Error("ERR value is not a valid float");
  } else if (s.code() != StatusCode::kNotFound) {
    return ReplyStatus(c, s);
  }
  const long double result = current + incr;
  if (std::isnan(result) || std::isinf(result)) {
    return c.w.Error("ERR increment would produce NaN or Infinity");
  }
  const std::string text = LongDoubleString(result);
  SetOptions o;
  o.expiry = SetOptions::Expiry::kKeep;
  SetResult r;
  s = c.store->Set(c.args[1], text, o, &r);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Bulk(text);
}

void IncrByFloat(Ctx& c) {
  Atomically(c, {c.args[1]}, IncrByFloatBody);
}

// CopyKey of hash `from`: every field into a new hash `to`, with the
// expiry.
Status CopyHash(KvStore* store, std::string_view from, std::string_view to, bool replace,
                bool* applied) {
  bool exists = false;
  PDPM_RETURN_IF_ERROR(store->Exists(to, &exists));
  if (exists && !replace) return Status::OK();
  std::vector<std::pair<std::string, std::string>> fields;
  uint64_t cursor = 0;
  do {
    KvHashPage page;
    PDPM_RETURN_IF_ERROR(store->HashScan(from, cursor, 1024, &page));
    for (auto& f : page.fields) fields.push_back(std::move(f));
    cursor = page.next_cursor;
  } while (cursor != 0);
  uint64_t at = 0;
  PDPM_RETURN_IF_ERROR(store->GetExpiry(from, &at));
  if (exists) PDPM_RETURN_IF_ERROR(store->Delete(to));
  const std::vector<std::pair<std::string_view, std::string_view>> views(fields.begin(),
                                                                         fields.end());
  uint64_t added = 0;
  PDPM_RETURN_IF_ERROR(store->HashSet(to, views, /*if_absent=*/false, &added));
  if (at != 0) {
    bool changed = false;
    PDPM_RETURN_IF_ERROR(store->SetExpiry(to, at, ExpiryCondition::kAlways, &changed));
  }
  *applied = true;
  return Status::OK();
}

// Sets `to` to the value (a string, or a hash's fields) and expiry of
// `from` (kNotFound when absent); only if `to` is absent unless `replace`.
// *applied: whether it did. Runs inside a transaction (a hash's fields
// are copied one by one: all or none become visible at its commit).
Status CopyKey(KvStore* store, std::string_view from, std::string_view to, bool replace,
               bool* applied) {
  *applied = false;
  std::string value;
  Status s = store->Get(from, &value);
  if (IsWrongType(s)) return CopyHash(store, from, to, replace, applied);
  PDPM_RETURN_IF_ERROR(s);
  uint64_t at = 0;
  PDPM_RETURN_IF_ERROR(store->GetExpiry(from, &at));
  SetOptions o;
  o.condition = replace ? SetOptions::Condition::kAlways : SetOptions::Condition::kIfAbsent;
  o.expiry = at != 0 ? SetOptions::Expiry::kSet : SetOptions::Expiry::kClear;
  o.expire_at_ms = at;
  SetResult r;
  PDPM_RETURN_IF_ERROR(store->Set(to, value, o, &r));
  *applied = r.applied;
  return Status::OK();
}

// RENAME and RENAMENX: the value (or fields) and expiry of args[1] move to
// args[2].
void RenameCommon(Ctx& c, bool nx) {
  if (c.args[1] == c.args[2]) {
    bool exists = false;
    Status s = c.store->Exists(c.args[1], &exists);
    if (!s.ok()) return ReplyStatus(c, s);
    if (!exists) return c.w.Error("ERR no such key");
    return nx ? c.w.Integer(0) : Ok(c);
  }
  bool applied = false;
  Status s = CopyKey(c.store, c.args[1], c.args[2], !nx, &applied);
  if (s.code() == StatusCode::kNotFound) return c.w.Error("ERR no such key");
  if (!s.ok()) return ReplyStatus(c, s);
  if (!applied) return c.w.Integer(0);
  s = c.store->Delete(c.args[1]);
  if (!s.ok()) return ReplyStatus(c, s);
  if (nx) return c.w.Integer(1);
  Ok(c);
}

void RenameBody(Ctx& c) {
  RenameCommon(c, false);
}
void RenameNxBody(Ctx& c) {
  RenameCommon(c, true);
}
void Rename(Ctx& c) {
  Atomically(c, {c.args[1], c.args[2]}, RenameBody);
}
void RenameNx(Ctx& c) {
  Atomically(c, {c.args[1], c.args[2]}, RenameNxBody);
}

// COPY source destination [DB 0] [REPLACE]: value and expiry.
void CopyBody(Ctx& c) {
  bool replace = false;
  for (size_t i = 3; i < c.args.size(); ++i) {
    if (EqualsNoCase(c.args[i], "REPLACE")) {
      replace = true;
    } else if (EqualsNoCase(c.args[i], "DB") && i + 1 < c.args.size()) {
      int64_t db = 0;
      if (!ParseInt(c, c.args[++i], &db)) return;
      if (db != 0) return c.w.Error("ERR DB index is out of range");
    } else {
      return c.w.Error(kSyntaxError);
    }
  }
  if (c.args[1] == c.args[2]) return c.w.Error("ERR source and destination objects are the same");
  bool applied = false;
  Status s = CopyKey(c.store, c.args[1], c.args[2], replace, &applied);
  if (s.code() == StatusCode::kNotFound) return c.w.Integer(0);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(applied ? 1 : 0);
}

void Copy(Ctx& c) {
  Atomically(c, {c.args[1], c.args[2]}, CopyBody);
}

void Touch(Ctx& c) {
  ExistsCommand(c);
}

void ExpireTimeCommon(Ctx& c, bool ms) {
  uint64_t at = 0;
  Status s = c.store->GetExpiry(c.args[1], &at);
  if (s.code() == StatusCode::kNotFound) return c.w.Integer(-2);
  if (!s.ok()) return ReplyStatus(c, s);
  if (at == 0) return c.w.Integer(-1);
  c.w.Integer(ms ? static_cast<int64_t>(at) : static_cast<int64_t>((at + 500) / 1000));
}

void ExpireTime(Ctx& c) {
  ExpireTimeCommon(c, false);
}
void PExpireTime(Ctx& c) {
  ExpireTimeCommon(c, true);
}

// RANDOMKEY: the first key of a scan page from a random position (the
// store's first page when the rest of the scan is empty).
void RandomKey(Ctx& c) {
  uint64_t start =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      (c.client->id * 0x9e3779b97f4a7c15ull);
  start = (start ^ (start >> 31)) * 0xbf58476d1ce4e5b9ull;
  for (uint64_t cursor : {start, uint64_t{0}}) {
    do {
      KvScanPage page;
      Status s = c.store->Scan(cursor, 16, &page);
      if (!s.ok()) return ReplyStatus(c, s);
      if (!page.keys.empty()) return c.w.Bulk(page.keys[page.keys.size() / 2]);
      cursor = page.next_cursor;
    } while (cursor != 0);
  }
  c.w.Null();
}

// OBJECT ENCODING (a string's encoding as Redis chooses it for a value
// SET wrote: int, embstr up to 44 bytes, raw) and FREQ (not tracked: no
// LFU policy, as on a Redis without one).
void ObjectCommand(Ctx& c) {
  const std::string sub = Lower(c.args[1]);
  if ((sub == "encoding" || sub == "freq" || sub == "idletime" || sub == "refcount") &&
      c.args.size() != 3) {
    return c.w.Error("ERR wrong number of arguments for 'object|" + sub + "' command");
  }
  if (sub == "encoding" || sub == "freq") {
    std::string value;
    Status s = c.store->Get(c.args[2], &value);
    if (s.code() == StatusCode::kNotFound) return c.w.Null();
    if (sub == "encoding" && IsWrongType(s)) return c.w.Bulk("hashtable");  // a hash
    if (!s.ok() && !IsWrongType(s)) return ReplyStatus(c, s);
    if (sub == "freq") {
      return c.w.Error(
          "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please "
          "note that when switching between policies at runtime LRU and LFU data will take "
          "some time to adjust.");
    }
    int64_t n = 0;
    if (value.size() <= 20 && ParseDecimalInt64(value, &n)) return c.w.Bulk("int");
    return c.w.Bulk(value.size() <= 44 ? "embstr" : "raw");
  }
  c.w.Error("ERR unknown subcommand '" + std::string(c.args[1]).substr(0, 128) +
            "'. Try OBJECT HELP.");
}

bool ParseCursor(Ctx& c, std::string_view cs, uint64_t* cursor);
const char* TypeName(KvType type);

void Scan(Ctx& c) {
  uint64_t cursor = 0;
  if (!ParseCursor(c, c.args[1], &cursor)) return;
  std::string_view pattern, type;
  bool match = false;
  int64_t count = 10;
  for (size_t i = 2; i < c.args.size(); i += 2) {
    if (i + 1 >= c.args.size()) return c.w.Error(kSyntaxError);
    if (EqualsNoCase(c.args[i], "MATCH")) {
      pattern = c.args[i + 1];
      match = !(pattern == "*");
    } else if (EqualsNoCase(c.args[i], "COUNT")) {
      if (!ParseInt(c, c.args[i + 1], &count)) return;
      if (count < 1) return c.w.Error(kSyntaxError);
    } else if (EqualsNoCase(c.args[i], "TYPE")) {
      type = c.args[i + 1];
    } else {
      return c.w.Error(kSyntaxError);
    }
  }
  KvScanPage page;
  Status s = c.store->Scan(cursor, static_cast<size_t>(count), &page);
  if (!s.ok()) return ReplyStatus(c, s);
  std::vector<std::string*> keys;
  for (std::string& k : page.keys) {
    if (match && !GlobMatch(pattern, k)) continue;
    if (!type.empty()) {
      KvType t = KvType::kNone;
      s = c.store->Type(k, &t);
      if (!s.ok()) return ReplyStatus(c, s);
      if (!EqualsNoCase(type, TypeName(t))) continue;  // none: removed meanwhile
    }
    keys.push_back(&k);
  }
  c.w.Array(2);
  c.w.Bulk(std::to_string(page.next_cursor));
  c.w.Array(keys.size());
  for (const std::string* k : keys) c.w.Bulk(*k);
}

void Keys(Ctx& c) {
  std::vector<std::string> keys;
  const bool all = c.args[1] == "*";
  uint64_t cursor = 0;
  do {
    KvScanPage page;
    Status s = c.store->Scan(cursor, 1024, &page);
    if (!s.ok()) return ReplyStatus(c, s);
    for (std::string& k : page.keys) {
      if (all || GlobMatch(c.args[1], k)) keys.push_back(std::move(k));
    }
    cursor = page.next_cursor;
  } while (cursor != 0);
  c.w.Array(keys.size());
  for (const std::string& k : keys) c.w.Bulk(k);
}

void DbSize(Ctx& c) {
  KvCounts n;
  Status s = c.store->Count(&n);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(static_cast<int64_t>(n.keys));
}

const char* TypeName(KvType type) {
  switch (type) {
    case KvType::kString: return "string";
    case KvType::kHash: return "hash";
    case KvType::kNone: break;
  }
  return "none";
}

void Type(Ctx& c) {
  KvType type = KvType::kNone;
  Status s = c.store->Type(c.args[1], &type);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Simple(TypeName(type));
}

// --- hashes ---

// HSET and HMSET key field value [field value ...].
void HSetCommon(Ctx& c, bool hmset) {
  if (c.args.size() % 2 != 0) {
    return c.w.Error(std::string("ERR wrong number of arguments for '") +
                     (hmset ? "hmset" : "hset") + "' command");
  }
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  for (size_t i = 2; i + 1 < c.args.size(); i += 2) fields.emplace_back(c.args[i], c.args[i + 1]);
  uint64_t added = 0;
  Status s = c.store->HashSet(c.args[1], fields, /*if_absent=*/false, &added);
  if (!s.ok()) return ReplyStatus(c, s);
  if (hmset) return Ok(c);
  c.w.Integer(static_cast<int64_t>(added));
}

void HSet(Ctx& c) {
  HSetCommon(c, false);
}
void HMSet(Ctx& c) {
  HSetCommon(c, true);
}

void HSetNx(Ctx& c) {
  const std::pair<std::string_view, std::string_view> field{c.args[2], c.args[3]};
  uint64_t added = 0;
  Status s = c.store->HashSet(c.args[1], {&field, 1}, /*if_absent=*/true, &added);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(static_cast<int64_t>(added));
}

// The values of fields args[2..] of hash args[1]; replies on failure.
bool HashFields(Ctx& c, std::vector<std::optional<std::string>>* values) {
  std::vector<std::string_view> fields(c.args.begin() + 2, c.args.end());
  Status s = c.store->HashGet(c.args[1], fields, values);
  if (!s.ok()) ReplyStatus(c, s);
  return s.ok();
}

void HGet(Ctx& c) {
  std::vector<std::optional<std::string>> values;
  if (!HashFields(c, &values)) return;
  if (!values[0]) return c.w.Null();
  c.w.Bulk(*values[0]);
}

void HMGet(Ctx& c) {
  std::vector<std::optional<std::string>> values;
  if (!HashFields(c, &values)) return;
  c.w.Array(values.size());
  for (const auto& v : values) {
    if (v) {
      c.w.Bulk(*v);
    } else {
      c.w.Null();
    }
  }
}

void HExists(Ctx& c) {
  std::vector<std::optional<std::string>> values;
  if (HashFields(c, &values)) c.w.Integer(values[0] ? 1 : 0);
}

void HStrLen(Ctx& c) {
  std::vector<std::optional<std::string>> values;
  if (HashFields(c, &values)) c.w.Integer(values[0] ? static_cast<int64_t>(values[0]->size()) : 0);
}

void HDel(Ctx& c) {
  std::vector<std::string_view> fields(c.args.begin() + 2, c.args.end());
  uint64_t removed = 0;
  Status s = c.store->HashDelete(c.args[1], fields, &removed);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(static_cast<int64_t>(removed));
}

void HLen(Ctx& c) {
  uint64_t n = 0;
  Status s = c.store->HashLength(c.args[1], &n);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(static_cast<int64_t>(n));
}

void HIncrBy(Ctx& c) {
  int64_t delta = 0;
  if (!ParseInt(c, c.args[3], &delta)) return;
  int64_t result = 0;
  Status s = c.store->HashIncrBy(c.args[1], c.args[2], delta, &result);
  if (s.code() == StatusCode::kInvalidArgument)
    return c.w.Error("ERR hash value is not an integer");
  if (s.code() == StatusCode::kOutOfRange) return c.w.Error(kOverflow);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Integer(result);
}

void HIncrByFloat(Ctx& c) {
  long double incr = 0;
  if (!ParseLongDouble(c.args[3], &incr)) return c.w.Error("ERR value is not a valid float");
  std::string result;
  Status s = c.store->HashIncrByFloat(c.args[1], c.args[2], c.args[3], &result);
  if (s.code() == StatusCode::kInvalidArgument) return c.w.Error("ERR hash value is not a float");
  if (s.code() == StatusCode::kOutOfRange) {
    return c.w.Error("ERR increment would produce NaN or Infinity");
  }
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Bulk(result);
}

// Every field of hash args[1], page by page; replies on failure.
bool AllFields(Ctx& c, std::vector<std::pair<std::string, std::string>>* fields) {
  uint64_t cursor = 0;
  do {
    KvHashPage page;
    Status s = c.store->HashScan(c.args[1], cursor, 1024, &page);
    if (!s.ok()) {
      ReplyStatus(c, s);
      return false;
    }
    for (auto& f : page.fields) fields->push_back(std::move(f));
    cursor = page.next_cursor;
  } while (cursor != 0);
  return true;
}

void HGetAll(Ctx& c) {
  std::vector<std::pair<std::string, std::string>> fields;
  if (!AllFields(c, &fields)) return;
  c.w.Map(fields.size());
  for (const auto& [f, v] : fields) {
    c.w.Bulk(f);
    c.w.Bulk(v);
  }
}

void HKeysCommon(Ctx& c, bool keys) {
  std::vector<std::pair<std::string, std::string>> fields;
  if (!AllFields(c, &fields)) return;
  c.w.Array(fields.size());
  for (const auto& [f, v] : fields) c.w.Bulk(keys ? f : v);
}

void HKeys(Ctx& c) {
  HKeysCommon(c, true);
}
void HVals(Ctx& c) {
  HKeysCommon(c, false);
}

// HRANDFIELD key [count [WITHVALUES]]: a positive count answers that many
// distinct fields (all of them when the hash has no more), a negative one
// |count| fields that may repeat. Fields are drawn from the pages of a scan
// started at a random position (Redis draws uniformly; so does this when
// the hash fits one page).
void HRandField(Ctx& c) {
  if (c.args.size() > 4) return c.w.Error(kSyntaxError);
  int64_t count = 1;
  const bool single = c.args.size() == 2;
  if (!single && !ParseInt(c, c.args[2], &count)) return;
  const bool with_values = c.args.size() == 4;
  if (with_values && !EqualsNoCase(c.args[3], "WITHVALUES")) return c.w.Error(kSyntaxError);
  if (count < -(INT64_MAX / 2) || count > INT64_MAX / 2) {
    return c.w.Error("ERR value is out of range");
  }
  uint64_t rng =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      (c.client->id * 0x9e3779b97f4a7c15ull);
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  uint64_t length = 0;
  Status s = c.store->HashLength(c.args[1], &length);
  if (!s.ok()) return ReplyStatus(c, s);
  const bool repeat = count < 0;
  const uint64_t wanted = repeat ? static_cast<uint64_t>(-count) : static_cast<uint64_t>(count);
  if (length == 0 || wanted == 0) {
    if (single) return c.w.Null();
    return c.w.Array(0);
  }
  // The fields to draw from: all of them when every one is wanted or the
  // hash is small, else the pages of a scan from a random position, enough
  // for the count.
  std::vector<std::pair<std::string, std::string>> pool;
  constexpr uint64_t kWholeHash = 1024;
  if (length <= kWholeHash || (!repeat && wanted >= length)) {
    if (!AllFields(c, &pool)) return;
  } else {
    const uint64_t enough = std::min<uint64_t>(repeat ? kWholeHash : wanted * 2, length);
    for (uint64_t cursor = next(); pool.size() < enough;) {
      KvHashPage page;
      s = c.store->HashScan(c.args[1], cursor, 256, &page);
      if (!s.ok()) return ReplyStatus(c, s);
      for (auto& f : page.fields) pool.push_back(std::move(f));
      cursor = page.next_cursor;  // 0: wrapped to the start
    }
  }
  if (pool.empty()) {  // removed meanwhile
    if (single) return c.w.Null();
    return c.w.Array(0);
  }
  std::vector<size_t> picked;
  if (repeat || single) {
    for (uint64_t i = 0; i < (single ? 1 : wanted); ++i) picked.push_back(next() % pool.size());
  } else {
    std::vector<size_t> order(pool.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[next() % i]);
    order.resize(std::min<uint64_t>(wanted, order.size()));
    picked = std::move(order);
  }
  if (single) return c.w.Bulk(pool[picked[0]].first);
  if (with_values && c.w.protocol() == 3) {
    c.w.Array(picked.size());
    for (size_t i : picked) {
      c.w.Array(2);
      c.w.Bulk(pool[i].first);
      c.w.Bulk(pool[i].second);
    }
    return;
  }
  c.w.Array(picked.size() * (with_values ? 2 : 1));
  for (size_t i : picked) {
    c.w.Bulk(pool[i].first);
    if (with_values) c.w.Bulk(pool[i].second);
  }
}

// Parses a SCAN-style cursor; replies on failure.
bool ParseCursor(Ctx& c, std::string_view cs, uint64_t* cursor) {
  auto [p, ec] = std::from_chars(cs.data(), cs.data() + cs.size(), *cursor);
  if (cs.empty() || ec != std::errc() || p != cs.data() + cs.size()) {
    c.w.Error("ERR invalid cursor");
    return false;
  }
  return true;
}

// HSCAN key cursor [MATCH pattern] [COUNT count].
void HScan(Ctx& c) {
  uint64_t cursor = 0;
  if (!ParseCursor(c, c.args[2], &cursor)) return;
  std::string_view pattern;
  bool match = false;
  int64_t count = 10;
  for (size_t i = 3; i < c.args.size(); i += 2) {
    if (i + 1 >= c.args.size()) return c.w.Error(kSyntaxError);
    if (EqualsNoCase(c.args[i], "MATCH")) {
      pattern = c.args[i + 1];
      match = pattern != "*";
    } else if (EqualsNoCase(c.args[i], "COUNT")) {
      if (!ParseInt(c, c.args[i + 1], &count)) return;
      if (count < 1) return c.w.Error(kSyntaxError);
    } else {
      return c.w.Error(kSyntaxError);
    }
  }
  KvHashPage page;
  Status s = c.store->HashScan(c.args[1], cursor, static_cast<size_t>(count), &page);
  if (!s.ok()) return ReplyStatus(c, s);
  std::vector<const std::pair<std::string, std::string>*> fields;
  for (const auto& f : page.fields) {
    if (!match || GlobMatch(pattern, f.first)) fields.push_back(&f);
  }
  c.w.Array(2);
  c.w.Bulk(std::to_string(page.next_cursor));
  c.w.Array(fields.size() * 2);
  for (const auto* f : fields) {
    c.w.Bulk(f->first);
    c.w.Bulk(f->second);
  }
}

// FLUSHDB and FLUSHALL (one database: the same), under one switch.
void FlushDb(Ctx& c) {
  if (c.args.size() > 2 || (c.args.size() == 2 && !EqualsNoCase(c.args[1], "ASYNC") &&
                            !EqualsNoCase(c.args[1], "SYNC"))) {
    return c.w.Error(kSyntaxError);
  }
  if (!c.config->enable_flushdb) {
    std::string name = Lower(c.args[0]);
    for (char& ch : name) ch = static_cast<char>(toupper(static_cast<unsigned char>(ch)));
    return c.w.Error("ERR " + name + " is disabled on this pDKVS gateway (see --enable-flushdb)");
  }
  Status s = c.store->Flush();
  if (!s.ok()) return ReplyStatus(c, s);
  Ok(c);
}

// WAIT numreplicas timeout: every acknowledged write is on every backup
// of its segment already, so the answer is the backup count, at once (Redis
// blocks until the timeout when asked for more replicas than it has; more
// never come here).
void Wait(Ctx& c) {
  int64_t replicas = 0, timeout = 0;
  if (!ParseDecimalInt64(c.args[1], &replicas)) return c.w.Error(kNotInteger);
  if (!ParseDecimalInt64(c.args[2], &timeout)) {
    return c.w.Error("ERR timeout is not an integer or out of range");
  }
  if (timeout < 0) return c.w.Error("ERR timeout is negative");
  c.w.Integer(c.store->BackupCount());
}

void Info(Ctx& c) {
  std::set<std::string> sections;
  for (size_t i = 1; i < c.args.size(); ++i) sections.insert(Lower(c.args[i]));
  const bool all = sections.empty() || sections.count("all") || sections.count("everything") ||
                   sections.count("default");
  auto want = [&](const char* name) { return all || sections.count(name) > 0; };
  const int64_t now = NowUnixMs();
  std::string out;
  if (want("server")) {
    out +=
        "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nos:Linux\r\n"
        "arch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:" +
        std::to_string(getpid()) + "\r\ntcp_port:" + std::to_string(c.config->port) +
        "\r\nuptime_in_seconds:" + std::to_string((now - c.stats->started_ms) / 1000) +
        "\r\npdkvs_gateway:1\r\n\r\n";
  }
  if (want("clients")) {
    out += "# Clients\r\nconnected_clients:" + std::to_string(c.clients->size()) +
           "\r\nmaxclients:" + std::to_string(c.config->max_clients) + "\r\n\r\n";
  }
  if (want("persistence")) {
    out += "# Persistence\r\nloading:0\r\npdkvs_durable_writes:1\r\n\r\n";
  }
  if (want("stats")) {
    out += "# Stats\r\ntotal_connections_received:" +
           std::to_string(c.stats->connections_received.load()) +
           "\r\ntotal_commands_processed:" + std::to_string(c.stats->commands_processed.load()) +
           "\r\nrejected_connections:" + std::to_string(c.stats->rejected_connections.load()) +
           "\r\nexpired_keys:" + std::to_string(c.stats->expired_keys.load()) + "\r\n\r\n";
  }
  if (want("replication")) out += "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n";
  if (want("keyspace")) {
    KvCounts n;
    Status s = c.store->Count(&n);
    if (!s.ok()) return ReplyStatus(c, s);
    out += "# Keyspace\r\n";
    if (n.keys > 0) {
      out += "db0:keys=" + std::to_string(n.keys) + ",expires=" + std::to_string(n.expires) +
             ",avg_ttl=0\r\n";
    }
  }
  while (out.size() >= 2 && out.compare(out.size() - 2, 2, "\r\n") == 0 && out.size() >= 4 &&
         out.compare(out.size() - 4, 4, "\r\n\r\n") == 0) {
    out.resize(out.size() - 2);
  }
  c.w.Verbatim(out);
}

void ClientCommand(Ctx& c) {
  std::string sub = Lower(c.args[1]);
  const size_t n = c.args.size();
  if (sub == "setname" && n == 3) {
    if (!ValidClientName(c.args[2])) {
      return c.w.Error("ERR Client names cannot contain spaces, newlines or special characters.");
    }
    c.clients->SetName(c.client, std::string(c.args[2]));
    return Ok(c);
  }
  if (sub == "getname" && n == 2) {
    std::string name = c.clients->GetName(c.client);
    if (name.empty()) return c.w.Null();
    return c.w.Bulk(name);
  }
  if (sub == "id" && n == 2) return c.w.Integer(static_cast<int64_t>(c.client->id));
  if (sub == "list" && n == 2) return c.w.Verbatim(c.clients->List(NowUnixMs()));
  if (sub == "setname" || sub == "getname" || sub == "id" || sub == "list") {
    return c.w.Error("ERR wrong number of arguments for 'client|" + sub + "' command");
  }
  c.w.Error("ERR unknown subcommand '" + std::string(c.args[1]).substr(0, 128) +
            "'. Try CLIENT HELP.");
}

void ConfigCommand(Ctx& c) {
  if (!EqualsNoCase(c.args[1], "GET")) {
    return c.w.Error("ERR unknown subcommand '" + std::string(c.args[1]).substr(0, 128) +
                     "'. Try CONFIG HELP.");
  }
  if (c.args.size() < 3) return c.w.Error("ERR wrong number of arguments for 'config|get' command");
  const std::vector<std::pair<std::string, std::string>> params = {
      {"appendonly", "no"},
      {"bind", c.config->bind},
      {"databases", "1"},
      {"maxclients", std::to_string(c.config->max_clients)},
      {"maxmemory", "0"},
      {"port", std::to_string(c.config->port)},
      {"proto-max-bulk-len", std::to_string(c.config->limits.max_bulk)},
      {"save", ""},
      {"timeout", "0"},
  };
  std::vector<const std::pair<std::string, std::string>*> found;
  for (const auto& p : params) {
    for (size_t i = 2; i < c.args.size(); ++i) {
      if (GlobMatch(c.args[i], p.first, true)) {
        found.push_back(&p);
        break;
      }
    }
  }
  c.w.Map(found.size());
  for (const auto* p : found) {
    c.w.Bulk(p->first);
    c.w.Bulk(p->second);
  }
}

}  // namespace

// The command table: name (lower case), arity as Redis counts it (n: exactly
// n arguments with the name; -n: at least n), whether it runs before AUTH,
// key positions (first, last with -1 = the last argument, step), group.
struct CommandExecutor::Command {
  const char* name;
  int arity;
  bool no_auth;
  int first_key, last_key, step;
  const char* group;
  const char* summary;
  void (*run)(Ctx&);
};

namespace {

void CommandCommand(Ctx& c);
void Exec(Ctx& c);
void Watch(Ctx& c);

void Multi(Ctx& c) {
  if (c.client->multi.active) return c.w.Error("ERR MULTI calls can not be nested");
  c.client->multi.active = true;
  Ok(c);
}

void Discard(Ctx& c) {
  if (!c.client->multi.active) return c.w.Error("ERR DISCARD without MULTI");
  c.client->multi = {};
  c.client->watched.clear();
  Ok(c);
}

void Unwatch(Ctx& c) {
  c.client->watched.clear();
  Ok(c);
}

const CommandExecutor::Command kCommands[] = {
    {"append", 3, false, 1, 1, 1, "string", "Appends a string to the value of a key.", Append},
    {"auth", -2, true, 0, 0, 0, "connection", "Authenticates the connection.", Auth},
    {"client", -2, false, 0, 0, 0, "connection", "Connection commands.", ClientCommand},
    {"command", -1, false, 0, 0, 0, "server", "Details about the commands.", CommandCommand},
    {"config", -2, false, 0, 0, 0, "server", "Configuration (read-only).", ConfigCommand},
    {"copy", -3, false, 1, 2, 1, "generic", "Copies a key.", Copy},
    {"dbsize", 1, false, 0, 0, 0, "server", "Number of keys.", DbSize},
    {"decr", 2, false, 1, 1, 1, "string", "Decrements an integer by one.", Decr},
    {"decrby", 3, false, 1, 1, 1, "string", "Decrements an integer.", DecrBy},
    {"del", -2, false, 1, -1, 1, "generic", "Deletes keys.", Del},
    {"discard", 1, false, 0, 0, 0, "transactions", "Drops the queued commands.", Discard},
    {"echo", 2, false, 0, 0, 0, "connection", "Returns the message.", Echo},
    {"exec", 1, false, 0, 0, 0, "transactions", "Runs the queued commands.", Exec},
    {"exists", -2, false, 1, -1, 1, "generic", "Counts existing keys.", ExistsCommand},
    {"expire", -3, false, 1, 1, 1, "generic", "Sets a timeout in seconds.", Expire},
    {"expireat", -3, false, 1, 1, 1, "generic", "Sets an expiry time in seconds.", Expire},
    {"expiretime", 2, false, 1, 1, 1, "generic", "Expiry time in seconds.", ExpireTime},
    {"flushall", -1, false, 0, 0, 0, "server", "Removes every key.", FlushDb},
    {"flushdb", -1, false, 0, 0, 0, "server", "Removes every key.", FlushDb},
    {"get", 2, false, 1, 1, 1, "string", "Returns the value of a key.", Get},
    {"getdel", 2, false, 1, 1, 1, "string", "Returns and deletes a key.", GetDel},
    {"getex", -2, false, 1, 1, 1, "string", "Returns a value, sets its expiry.", GetEx},
    {"getrange", 4, false, 1, 1, 1, "string", "Returns a substring.", GetRange},
    {"getset", 3, false, 1, 1, 1, "string", "Sets a value, returns the old one.", GetSet},
    {"hdel", -3, false, 1, 1, 1, "hash", "Deletes fields of a hash.", HDel},
    {"hello", -1, true, 0, 0, 0, "connection", "Handshake.", Hello},
    {"hexists", 3, false, 1, 1, 1, "hash", "Whether a field exists.", HExists},
    {"hget", 3, false, 1, 1, 1, "hash", "The value of a field.", HGet},
    {"hgetall", 2, false, 1, 1, 1, "hash", "Every field and value.", HGetAll},
    {"hincrby", 4, false, 1, 1, 1, "hash", "Increments an integer field.", HIncrBy},
    {"hincrbyfloat", 4, false, 1, 1, 1, "hash", "Increments a float field.", HIncrByFloat},
    {"hkeys", 2, false, 1, 1, 1, "hash", "Every field.", HKeys},
    {"hlen", 2, false, 1, 1, 1, "hash", "Number of fields.", HLen},
    {"hmget", -3, false, 1, 1, 1, "hash", "Values of fields.", HMGet},
    {"hmset", -4, false, 1, 1, 1, "hash", "Sets fields (answers OK).", HMSet},
    {"hrandfield", -2, false, 1, 1, 1, "hash", "Random fields.", HRandField},
    {"hscan", -3, false, 1, 1, 1, "hash", "Iterates the fields.", HScan},
    {"hset", -4, false, 1, 1, 1, "hash", "Sets fields.", HSet},
    {"hsetnx", 4, false, 1, 1, 1, "hash", "Sets a field if absent.", HSetNx},
    {"hstrlen", 3, false, 1, 1, 1, "hash", "Length of a field's value.", HStrLen},
    {"hvals", 2, false, 1, 1, 1, "hash", "Every value.", HVals},
    {"incr", 2, false, 1, 1, 1, "string", "Increments an integer by one.", Incr},
    {"incrby", 3, false, 1, 1, 1, "string", "Increments an integer.", IncrBy},
    {"incrbyfloat", 3, false, 1, 1, 1, "string", "Increments a float.", IncrByFloat},
    {"info", -1, false, 0, 0, 0, "server", "Information and statistics.", Info},
    {"keys", 2, false, 0, 0, 0, "generic", "Keys matching a pattern.", Keys},
    {"mget", -2, false, 1, -1, 1, "string", "Values of keys.", MGet},
    {"mset", -3, false, 1, -1, 2, "string", "Sets keys atomically.", MSet},
    {"msetnx", -3, false, 1, -1, 2, "string", "Sets keys if none exists.", MSetNx},
    {"multi", 1, false, 0, 0, 0, "transactions", "Starts a transaction.", Multi},
    {"object", -2, false, 2, 2, 1, "generic", "Encoding of a value.", ObjectCommand},
    {"persist", 2, false, 1, 1, 1, "generic", "Removes the expiry.", Persist},
    {"pexpire", -3, false, 1, 1, 1, "generic", "Sets a timeout in ms.", Expire},
    {"pexpireat", -3, false, 1, 1, 1, "generic", "Sets an expiry time in ms.", Expire},
    {"pexpiretime", 2, false, 1, 1, 1, "generic", "Expiry time in ms.", PExpireTime},
    {"ping", -1, false, 0, 0, 0, "connection", "Returns PONG.", Ping},
    {"psetex", 4, false, 1, 1, 1, "string", "Sets a value with a timeout in ms.", PSetEx},
    {"pttl", 2, false, 1, 1, 1, "generic", "Time to live in ms.", PTtl},
    {"quit", -1, true, 0, 0, 0, "connection", "Closes the connection.", Quit},
    {"randomkey", 1, false, 0, 0, 0, "generic", "A random key.", RandomKey},
    {"rename", 3, false, 1, 2, 1, "generic", "Renames a key.", Rename},
    {"renamenx", 3, false, 1, 2, 1, "generic", "Renames a key if the new one is free.", RenameNx},
    {"scan", -2, false, 0, 0, 0, "generic", "Iterates the keys.", Scan},
    {"select", 2, false, 0, 0, 0, "connection", "Selects database 0.", Select},
    {"set", -3, false, 1, 1, 1, "string", "Sets the value of a key.", SetCommand},
    {"setex", 4, false, 1, 1, 1, "string", "Sets a value with a timeout.", SetEx},
    {"setnx", 3, false, 1, 1, 1, "string", "Sets a key if absent.", SetNx},
    {"setrange", 4, false, 1, 1, 1, "string", "Overwrites part of a value.", SetRange},
    {"strlen", 2, false, 1, 1, 1, "string", "Length of a value.", StrLen},
    {"touch", -2, false, 1, -1, 1, "generic", "Counts existing keys.", Touch},
    {"ttl", 2, false, 1, 1, 1, "generic", "Time to live in seconds.", Ttl},
    {"type", 2, false, 1, 1, 1, "generic", "Type of a key.", Type},
    {"unlink", -2, false, 1, -1, 1, "generic", "Deletes keys.", Del},
    {"unwatch", 1, false, 0, 0, 0, "transactions", "Forgets the watched keys.", Unwatch},
    {"wait", 3, false, 0, 0, 0, "generic", "Replicas every acknowledged write is on.", Wait},
    {"watch", -2, false, 1, -1, 1, "transactions", "Watches keys for EXEC.", Watch},
};

const CommandExecutor::Command* FindCommand(std::string_view name) {
  if (name.size() > 16) return nullptr;
  char lower[17];
  for (size_t i = 0; i < name.size(); ++i) {
    lower[i] = static_cast<char>(tolower(static_cast<unsigned char>(name[i])));
  }
  std::string_view l(lower, name.size());
  auto it = std::lower_bound(std::begin(kCommands), std::end(kCommands), l,
                             [](const CommandExecutor::Command& c, std::string_view n) {
                               return std::string_view(c.name) < n;
                             });
  if (it == std::end(kCommands) || it->name != l) return nullptr;
  return &*it;
}

// How long EXEC and WATCH run again while their keys are being written by
// other transactions (each conflict rereads them), before -TRYAGAIN.
constexpr auto kTxConflictWait = std::chrono::seconds(10);

// Runs `attempt` again, with a random backoff, while it fails with kAborted
// and kTxConflictWait has not passed.
Status RetryConflicts(const std::function<Status()>& attempt) {
  const auto deadline = std::chrono::steady_clock::now() + kTxConflictWait;
  uint32_t backoff_us = 100;
  uint64_t jitter = static_cast<uint64_t>(NowUnixMs());
  for (;;) {
    Status s = attempt();
    if (s.code() != StatusCode::kAborted || std::chrono::steady_clock::now() > deadline) return s;
    jitter = jitter * 6364136223846793005ull + 1442695040888963407ull;
    std::this_thread::sleep_for(std::chrono::microseconds((jitter >> 33) % backoff_us));
    backoff_us = std::min<uint32_t>(backoff_us * 2, 20000);
  }
}

// The keys a request names, by its command's key positions.
void AddKeys(const CommandExecutor::Command& cmd, std::span<const std::string_view> args,
             std::set<std::string_view>* keys) {
  if (cmd.first_key <= 0) return;
  const int n = static_cast<int>(args.size());
  const int last = cmd.last_key < 0 ? n + cmd.last_key : cmd.last_key;
  for (int i = cmd.first_key; i <= last && i < n; i += cmd.step) {
    keys->insert(args[static_cast<size_t>(i)]);
  }
}

void Watch(Ctx& c) {
  if (c.client->multi.active) return c.w.Error("ERR WATCH inside MULTI is not allowed");
  std::vector<std::string_view> keys(c.args.begin() + 1, c.args.end());
  std::vector<KvTxRead> reads;
  Status s = RetryConflicts([&] { return c.store->TxRead(keys, &reads); });
  if (!s.ok()) return ReplyStatus(c, s);
  for (size_t i = 0; i < keys.size(); ++i) {
    c.client->watched.emplace(std::string(keys[i]), reads[i].version);
  }
  Ok(c);
}

// Runs `run` as one optimistic transaction of the store: the keys are read
// first with their versions (a watched key whose version is no longer the
// one WATCH saw sets *watch_failed and runs nothing), `run` works on a
// TxOverlay of them through a Ctx whose store is a TxKvStore and whose
// replies go to *replies, and one KvStore::TxCommit applies what it wrote
// if no key changed since. A conflict runs it all again (replies
// included).
using WatchedKeys = std::map<std::string, KvVersion, std::less<>>;
Status RunTransaction(Ctx& c, const std::vector<std::string_view>& keys, const WatchedKeys& watched,
                      const std::function<void(Ctx& tc)>& run, std::string* replies,
                      bool* watch_failed) {
  *watch_failed = false;
  return RetryConflicts([&] {
    std::vector<KvTxRead> reads;
    PDPM_RETURN_IF_ERROR(c.store->TxRead(keys, &reads));
    for (size_t i = 0; i < keys.size(); ++i) {
      auto w = watched.find(keys[i]);
      if (w != watched.end() && w->second != reads[i].version) {
        *watch_failed = true;
        return Status::OK();
      }
    }
    const auto now = static_cast<uint64_t>(NowUnixMs());
    // A key not named in the key positions (none today) is read when
    // first used; a failed read fails the attempt.
    Status read_error;
    TxOverlay overlay(
        [&](std::string_view key, KvTxRead* out) {
          std::vector<KvTxRead> one;
          Status rs = c.store->TxRead({key}, &one);
          if (rs.ok()) *out = std::move(one.front());
          if (!rs.ok() && read_error.ok()) read_error = rs;
          return rs;
        },
        now);
    for (size_t i = 0; i < keys.size(); ++i) overlay.Preload(keys[i], std::move(reads[i]));
    TxKvStore tx(&overlay, c.store, now);
    replies->clear();
    Ctx tc{&tx,
           c.config,
           c.clients,
           c.stats,
           c.client,
           c.args,
           RespWriter(replies, c.client->protocol.load())};
    tc.in_transaction = true;
    run(tc);
    PDPM_RETURN_IF_ERROR(read_error);
    PDPM_RETURN_IF_ERROR(tx.read_error());
    std::vector<KvTxCheck> checks;
    std::vector<KvTxWrite> writes;
    overlay.Commit(&checks, &writes);
    return c.store->TxCommit(checks, writes);
  });
}

// Runs a command of several steps or keys (RENAME, GETEX, ...) as one
// transaction over `keys` — or as it is inside one already.
void Atomically(Ctx& c, const std::vector<std::string_view>& keys, void (*body)(Ctx&)) {
  if (c.in_transaction) return body(c);
  std::string replies;
  bool watch_failed = false;
  Status s = RunTransaction(c, keys, {}, body, &replies, &watch_failed);
  if (!s.ok()) return ReplyStatus(c, s);
  c.w.Replies(replies);
}

// EXEC: the queued commands, in order, as one transaction over the keys
// they name and the watched keys (RunTransaction).
void Exec(Ctx& c) {
  ClientState* client = c.client;
  if (!client->multi.active) return c.w.Error("ERR EXEC without MULTI");
  ClientState::Multi multi = std::move(client->multi);
  client->multi = {};
  const WatchedKeys watched = std::move(client->watched);
  client->watched.clear();
  if (multi.failed) {
    return c.w.Error("EXECABORT Transaction discarded because of previous errors.");
  }
  std::vector<std::vector<std::string_view>> requests;
  std::vector<const CommandExecutor::Command*> commands;
  std::set<std::string_view> key_set;
  for (const auto& [key, version] : watched) key_set.insert(key);
  for (const auto& q : multi.queued) {
    requests.emplace_back(q.begin(), q.end());
    commands.push_back(FindCommand(q[0]));
    AddKeys(*commands.back(), requests.back(), &key_set);
  }
  const std::vector<std::string_view> keys(key_set.begin(), key_set.end());
  bool watch_failed = false;
  std::string replies;
  Status s = RunTransaction(
      c, keys, watched,
      [&](Ctx& tc) {
        for (size_t i = 0; i < requests.size(); ++i) {
          Ctx qc{tc.store,
                 tc.config,
                 tc.clients,
                 tc.stats,
                 tc.client,
                 requests[i],
                 RespWriter(&replies, client->protocol.load())};
          qc.in_transaction = true;
          commands[i]->run(qc);
        }
      },
      &replies, &watch_failed);
  if (!s.ok()) return ReplyStatus(c, s);
  if (watch_failed) return c.w.NullArray();
  c.w.Array(requests.size());
  c.w.Replies(replies);
}

void CommandInfo(Ctx& c, const CommandExecutor::Command& cmd) {
  c.w.Array(10);
  c.w.Bulk(cmd.name);
  c.w.Integer(cmd.arity);
  c.w.Set(0);
  c.w.Integer(cmd.first_key);
  c.w.Integer(cmd.last_key);
  c.w.Integer(cmd.step);
  c.w.Set(0);
  c.w.Set(0);
  c.w.Array(0);
  c.w.Array(0);
}

void CommandDocs(Ctx& c, const CommandExecutor::Command& cmd) {
  c.w.Bulk(cmd.name);
  c.w.Map(3);
  c.w.Bulk("summary");
  c.w.Bulk(cmd.summary);
  c.w.Bulk("since");
  c.w.Bulk("1.0.0");
  c.w.Bulk("group");
  c.w.Bulk(cmd.group);
}

void CommandCommand(Ctx& c) {
  if (c.args.size() == 1) {
    c.w.Array(std::size(kCommands));
    for (const auto& cmd : kCommands) CommandInfo(c, cmd);
    return;
  }
  std::string sub = Lower(c.args[1]);
  if (sub == "count" && c.args.size() == 2) {
    return c.w.Integer(static_cast<int64_t>(std::size(kCommands)));
  }
  if (sub == "docs") {
    std::vector<const CommandExecutor::Command*> found;
    if (c.args.size() == 2) {
      for (const auto& cmd : kCommands) found.push_back(&cmd);
    } else {
      for (size_t i = 2; i < c.args.size(); ++i) {
        if (const auto* cmd = FindCommand(c.args[i])) found.push_back(cmd);
      }
    }
    c.w.Map(found.size());
    for (const auto* cmd : found) CommandDocs(c, *cmd);
    return;
  }
  if (sub == "count") return c.w.Error("ERR wrong number of arguments for 'command|count' command");
  c.w.Error("ERR unknown subcommand '" + std::string(c.args[1]).substr(0, 128) +
            "'. Try COMMAND HELP.");
}

}  // namespace

CommandExecutor::CommandExecutor(KvStore* store, const GatewayConfig* config,
                                 ClientRegistry* clients, GatewayStats* stats)
    : store_(store), config_(config), clients_(clients), stats_(stats) {}

bool CommandExecutor::Execute(ClientState* client, std::span<const std::string_view> args,
                              std::string* out) {
  Ctx c{store_, config_, clients_, stats_, client, args, RespWriter(out, client->protocol.load())};
  stats_->commands_processed.fetch_add(1, std::memory_order_relaxed);
  // A request refused before it runs makes a transaction being queued
  // fail at EXEC (EXECABORT), as in Redis.
  auto refuse = [&](std::string_view message) {
    c.w.Error(message);
    if (client->multi.active) client->multi.failed = true;
    return true;
  };
  const Command* cmd = FindCommand(args[0]);
  if (cmd == nullptr) {
    std::string list;
    for (size_t i = 1; i < args.size() && list.size() < 128; ++i) {
      list += "'" + std::string(args[i].substr(0, 128 - list.size())) + "' ";
    }
    return refuse("ERR unknown command '" + std::string(args[0].substr(0, 128)) +
                  "', with args beginning with: " + list);
  }
  client->last_command.store(cmd->name, std::memory_order_relaxed);
  const int n = static_cast<int>(args.size());
  if ((cmd->arity > 0 && n != cmd->arity) || (cmd->arity < 0 && n < -cmd->arity)) {
    return refuse(std::string("ERR wrong number of arguments for '") + cmd->name + "' command");
  }
  if (!client->authenticated && !cmd->no_auth) return refuse("NOAUTH Authentication required.");
  if (cmd->first_key > 0) {
    const int last = cmd->last_key < 0 ? n - 1 : cmd->last_key;
    for (int i = cmd->first_key; i <= last; i += cmd->step) {
      if (args[static_cast<size_t>(i)].size() > kMaxKeySize) {
        return refuse("ERR key is longer than the pDKVS limit of " + std::to_string(kMaxKeySize) +
                      " bytes");
      }
    }
  }
  if (client->multi.active && cmd->run != Exec && cmd->run != Discard && cmd->run != Multi &&
      cmd->run != Watch && cmd->run != Quit) {
    if (cmd->run == FlushDb) {
      return refuse(std::string("ERR ") + cmd->name + " inside MULTI is not supported by pDKVS");
    }
    client->multi.queued.emplace_back(args.begin(), args.end());
    c.w.Simple("QUEUED");
    return true;
  }
  cmd->run(c);
  return !c.close;
}

bool CommandExecutor::Batchable(const ClientState& client, std::span<const std::string_view> args,
                                KvOp* op) const {
  if (!client.authenticated || client.multi.active || args.size() < 2 ||
      args[1].size() > kMaxKeySize) {
    return false;
  }
  if (args.size() == 2 && EqualsNoCase(args[0], "get")) {
    op->kind = KvOp::Kind::kGet;
  } else if (args.size() == 3 && EqualsNoCase(args[0], "set")) {
    op->kind = KvOp::Kind::kSet;
    op->value = args[2];
  } else if (args.size() == 3 && EqualsNoCase(args[0], "hget")) {
    op->kind = KvOp::Kind::kHashGet;
    op->field = args[2];
  } else if (args.size() == 4 && EqualsNoCase(args[0], "hset")) {
    op->kind = KvOp::Kind::kHashSet;
    op->field = args[2];
    op->value = args[3];
  } else {
    return false;
  }
  op->key = args[1];
  return true;
}

void CommandExecutor::ReplyBatched(ClientState* client, const KvOp& op, std::string* out) {
  stats_->commands_processed.fetch_add(1, std::memory_order_relaxed);
  static constexpr const char* kNames[] = {"get", "set", "hget", "hset"};
  client->last_command.store(kNames[static_cast<int>(op.kind)], std::memory_order_relaxed);
  Ctx c{store_, config_, clients_, stats_, client, {}, RespWriter(out, client->protocol.load())};
  const bool read = op.kind == KvOp::Kind::kGet || op.kind == KvOp::Kind::kHashGet;
  if (read && op.status.code() == StatusCode::kNotFound) return c.w.Null();
  if (!op.status.ok()) return ReplyStatus(c, op.status);
  switch (op.kind) {
    case KvOp::Kind::kGet:
    case KvOp::Kind::kHashGet: return c.w.Bulk(op.result);
    case KvOp::Kind::kSet: return Ok(c);
    case KvOp::Kind::kHashSet: return c.w.Integer(static_cast<int64_t>(op.added));
  }
}

}  // namespace pdpm::pdkvs
