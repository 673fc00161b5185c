#include "net/rpc.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace pdpm::net {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMessageMagic = 0x32435052;     // "RPC2"
constexpr uint32_t kClientBlobMagic = 0x32434352;  // "RCC2"
constexpr uint32_t kServerBlobMagic = 0x53435052;  // "RPCS"
constexpr uint16_t kFlagBulk = 1;
// A server drops the slots it made for a connection whose handshake did
// not complete within this time.
constexpr auto kUnclaimedLifetime = std::chrono::seconds(60);

// Layout (little-endian): 0 magic u32 | 4 method (request) or status
// (reply) u16 | 6 flags u16 | 8 length u32 | 12 bulk_capacity u32 |
// 16 call_id u64 | 24 bulk_key u32 | 28 zero u32 | 32 timeout_ms u32 |
// 36..48 zero. bulk_key names the caller's transfer buffer (its own
// region, from offset 0).
struct MessageHeader {
  uint16_t method_or_status = 0;
  uint16_t flags = 0;
  uint32_t length = 0;
  uint32_t bulk_capacity = 0;
  uint64_t call_id = 0;
  uint32_t bulk_key = 0;
  uint32_t timeout_ms = 0;
};

void EncodeMessage(const MessageHeader& h, char* out) {
  std::memset(out, 0, kRpcHeaderSize);
  std::memcpy(out, &kMessageMagic, 4);
  std::memcpy(out + 4, &h.method_or_status, 2);
  std::memcpy(out + 6, &h.flags, 2);
  std::memcpy(out + 8, &h.length, 4);
  std::memcpy(out + 12, &h.bulk_capacity, 4);
  std::memcpy(out + 16, &h.call_id, 8);
  std::memcpy(out + 24, &h.bulk_key, 4);
  std::memcpy(out + 32, &h.timeout_ms, 4);
}

Status DecodeMessage(const char* in, uint32_t slot_size, MessageHeader* h) {
  uint32_t magic;
  std::memcpy(&magic, in, 4);
  if (magic != kMessageMagic) return Status::Corruption("rpc message: bad magic");
  std::memcpy(&h->method_or_status, in + 4, 2);
  std::memcpy(&h->flags, in + 6, 2);
  std::memcpy(&h->length, in + 8, 4);
  std::memcpy(&h->bulk_capacity, in + 12, 4);
  std::memcpy(&h->call_id, in + 16, 8);
  std::memcpy(&h->bulk_key, in + 24, 4);
  std::memcpy(&h->timeout_ms, in + 32, 4);
  if ((h->flags & ~kFlagBulk) != 0) return Status::Corruption("rpc message: unknown flags");
  if (!(h->flags & kFlagBulk) && h->length > slot_size - kRpcHeaderSize) {
    return Status::Corruption("rpc message: inline payload over the slot");
  }
  return Status::OK();
}

void PutU32s(std::string* out, std::initializer_list<uint32_t> values) {
  for (uint32_t v : values) out->append(reinterpret_cast<const char*>(&v), 4);
}

bool GetU32s(std::span<const uint8_t> in, std::initializer_list<uint32_t*> values) {
  if (in.size() != values.size() * 4) return false;
  size_t i = 0;
  for (uint32_t* v : values) std::memcpy(v, in.data() + 4 * i++, 4);
  return true;
}

Status ValidateOptions(const RpcOptions& o) {
  if (o.slots == 0 || o.slots > 4096) return Status::InvalidArgument("rpc: slots not in 1..4096");
  if (o.slot_size <= kRpcHeaderSize || o.slot_size % 8 != 0) {
    return Status::InvalidArgument("rpc: slot_size must exceed the header, 8-aligned");
  }
  if (o.pool_buffers == 0 || o.server_threads == 0) {
    return Status::InvalidArgument("rpc: pool_buffers and server_threads must be positive");
  }
  if (o.reserved_threads >= o.server_threads) {
    return Status::InvalidArgument("rpc: reserved_threads must leave a serving thread");
  }
  return Status::OK();
}

// Posts `ops` whose last one is signaled and waits for it. Returns the
// first failure among them (an unsignaled op reports only failures).
Status PostAndWait(Connection& conn, std::span<Op> ops) {
  ops.back().signaled = true;
  PDPM_RETURN_IF_ERROR(conn.Post(ops));
  Completion c[8];
  for (;;) {
    size_t n = conn.PollCompletions(c);
    for (size_t i = 0; i < n; i++) {
      if (!c[i].status.ok()) return c[i].status;
      if (c[i].id == ops.back().id) return Status::OK();
    }
    if (n > 0) continue;
    // Sleep until the transport has news (it bounds the wait: a peer that
    // never answers breaks the connection). Yielding instead would take
    // the core from the very peers this waits for on a busy host.
    PDPM_RETURN_IF_ERROR(conn.ArmNotify());
    n = conn.PollCompletions(c);
    for (size_t i = 0; i < n; i++) {
      if (!c[i].status.ok()) return c[i].status;
      if (c[i].id == ops.back().id) return Status::OK();
    }
    if (n == 0) {
      pollfd p{conn.notify_fd(), POLLIN, 0};
      ::poll(&p, 1, 50);
    }
    conn.AckNotify();
  }
}

// Memory for N message slots, registered with `access`.
struct SlotArea {
  std::vector<char> bytes;
  std::unique_ptr<MemoryRegion> region;
  Status Init(Transport* t, const RpcOptions& o, uint32_t access) {
    bytes.assign(size_t{o.slots} * o.slot_size, 0);
    return t->RegisterMemory(bytes.data(), bytes.size(), access, {}, &region);
  }
  char* slot(uint32_t i, uint32_t slot_size) { return bytes.data() + size_t{i} * slot_size; }
};

}  // namespace

// ------------------------------------------------------------------ client

class RpcClient::Impl {
 public:
  Impl(Transport* t, const RpcOptions& o) : transport_(t), options_(o), slots_(o.slots) {}

  Status Init(const std::string& address, uint32_t core) {
    PDPM_RETURN_IF_ERROR(ValidateOptions(options_));
    PDPM_RETURN_IF_ERROR(replies_.Init(transport_, options_, kRemoteWrite));
    PDPM_RETURN_IF_ERROR(sends_.Init(transport_, options_, 0));
    PDPM_RETURN_IF_ERROR(BufferPool::Create(transport_, options_.max_payload, options_.pool_buffers,
                                            kRemoteRead | kRemoteWrite, &pool_));
    std::string blob;
    PutU32s(&blob, {kClientBlobMagic, replies_.region->key(), options_.slots, options_.slot_size});
    PDPM_RETURN_IF_ERROR(transport_->Connect(address, core, blob, &conn_));
    uint32_t magic = 0, slots = 0, slot_size = 0;
    if (!GetU32s(conn_->peer_blob(), {&magic, &server_key_, &slots, &slot_size}) ||
        magic != kServerBlobMagic || slots != options_.slots || slot_size != options_.slot_size) {
      return Status::Corruption("rpc: " + address + " is not an RPC server with these slots");
    }
    return Status::OK();
  }

  Status Call(uint16_t method, std::span<const uint8_t> request, std::string* reply,
              uint32_t timeout_ms, const GiveUpFn& give_up) {
    PDPM_RETURN_IF_ERROR(Start(method, request, timeout_ms));
    return Finish(reply, give_up);
  }

  // Posts the request of the next Finish.
  Status Start(uint16_t method, std::span<const uint8_t> request, uint32_t timeout_ms) {
    if (started_.pending) return Status::FailedPrecondition("rpc: a started call awaits Finish");
    replied_ = false;
    if (timeout_ms == 0) timeout_ms = options_.timeout_ms;
    Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    if (request.size() > options_.max_payload) {
      return Status::TooLarge("rpc request of " + std::to_string(request.size()) + " bytes");
    }
    if (!conn_->healthy()) return Status::Unavailable("rpc: connection to server is broken");
    uint32_t s = 0;
    while (s < slots_.size() && slots_[s].busy) s++;
    if (s == slots_.size()) {
      PDPM_RETURN_IF_ERROR(Drain(nullptr, 0, nullptr));  // late replies free slots
      s = 0;
      while (s < slots_.size() && slots_[s].busy) s++;
    }
    if (s == slots_.size()) {
      return Status::ResourceExhausted("rpc: every slot awaits the reply of a timed-out call");
    }
    Slot& slot = slots_[s];
    PDPM_RETURN_IF_ERROR(pool_->Acquire(&slot.bulk));
    MessageHeader h;
    h.method_or_status = method;
    h.length = request.size();
    h.call_id = ++next_call_id_;
    h.bulk_key = slot.bulk.key();
    h.bulk_capacity = options_.max_payload;
    h.timeout_ms = timeout_ms;
    char* msg = sends_.slot(s, options_.slot_size);
    uint32_t inline_max = options_.slot_size - kRpcHeaderSize;
    uint32_t inline_bytes = 0;
    if (request.size() > inline_max) {
      h.flags = kFlagBulk;
      std::memcpy(slot.bulk.data(), request.data(), request.size());
    } else {
      if (!request.empty()) std::memcpy(msg + kRpcHeaderSize, request.data(), request.size());
      inline_bytes = request.size();
    }
    EncodeMessage(h, msg);
    Op op;
    op.opcode = Opcode::kWriteWithImm;
    op.id = h.call_id;
    op.local = {sends_.region.get(), uint64_t{s} * options_.slot_size,
                kRpcHeaderSize + inline_bytes};
    op.remote_key = server_key_;
    op.remote_offset = uint64_t{s} * options_.slot_size;
    op.imm = s;
    op.signaled = false;
    Status posted = conn_->Post({&op, 1});
    if (!posted.ok()) {
      slot.bulk.Release();
      return posted;
    }
    slot.busy = true;
    slot.call_id = h.call_id;
    started_ = {true, s, method, timeout_ms, deadline};
    return Status::OK();
  }

  // Waits for the reply of the call Start posted.
  Status Finish(std::string* reply, const GiveUpFn& give_up) {
    if (!started_.pending) return Status::FailedPrecondition("rpc: no call started");
    started_.pending = false;
    const uint32_t s = started_.slot;
    const uint16_t method = started_.method;
    const uint32_t timeout_ms = started_.timeout_ms;
    const Clock::time_point deadline = started_.deadline;
    Clock::time_point spin_until = Clock::now() + std::chrono::microseconds(options_.spin_us);
    Clock::time_point next_ask = Clock::now() + std::chrono::milliseconds(kGiveUpCheckMs);
    for (;;) {
      bool done = false;
      Clock::time_point now = Clock::now();
      if (now >= deadline) {
        return Status::Timeout("rpc method " + std::to_string(method) + ": no reply in " +
                               std::to_string(timeout_ms) + " ms");
      }
      if (give_up && now >= next_ask) {
        if (give_up()) {
          return Status::Unavailable("rpc method " + std::to_string(method) +
                                     ": gave up waiting for " + conn_->peer_address());
        }
        next_ask = Clock::now() + std::chrono::milliseconds(kGiveUpCheckMs);
      }
      if (now < spin_until) {
        PDPM_RETURN_IF_ERROR(Drain(&done, s, reply).WithContext("rpc call"));
        if (done) return Replied();
        continue;
      }
      // Sleep until the transport has news or the deadline passes.
      PDPM_RETURN_IF_ERROR(conn_->ArmNotify());
      PDPM_RETURN_IF_ERROR(Drain(&done, s, reply).WithContext("rpc call"));
      if (done) return Replied();
      pollfd p{conn_->notify_fd(), POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 50)));
      conn_->AckNotify();
    }
  }

  Connection& connection() { return *conn_; }
  bool replied() const { return replied_; }

 private:
  // The end of a call the server answered.
  Status Replied() {
    replied_ = true;
    return reply_status_;
  }

  // The call Start posted and Finish has not yet waited for.
  struct Started {
    bool pending = false;
    uint32_t slot = 0;
    uint16_t method = 0;
    uint32_t timeout_ms = 0;
    Clock::time_point deadline;
  };

  struct Slot {
    bool busy = false;  // a call (maybe timed out) awaits its reply here
    uint64_t call_id = 0;
    BufferPool::Buffer bulk;
  };

  // Takes replies (freeing their slots) and failures. When slot `want`'s
  // reply arrives, fills `reply` and reply_status_ and sets *done.
  Status Drain(bool* done, uint32_t want, std::string* reply) {
    // Incoming first: its poll drains the socket, so the reply needs no
    // notification.
    Incoming in[16];
    size_t n;
    while ((n = conn_->PollIncoming(in)) > 0) {
      TakeReplies({in, n}, done, want, reply);
    }
    Completion c[8];
    size_t nc = conn_->PollCompletions(c);
    for (size_t i = 0; i < nc; i++) {
      if (!c[i].status.ok()) return c[i].status;
    }
    if (!conn_->healthy()) return Status::Unavailable("rpc: connection to server broke");
    return Status::OK();
  }

  void TakeReplies(std::span<const Incoming> in, bool* done, uint32_t want, std::string* reply) {
    for (size_t i = 0; i < in.size(); i++) {
      uint32_t s = in[i].imm;
      if (s >= slots_.size() || !slots_[s].busy) continue;  // not ours: ignore
      Slot& slot = slots_[s];
      MessageHeader h;
      const char* msg = replies_.slot(s, options_.slot_size);
      if (!DecodeMessage(msg, options_.slot_size, &h).ok() || h.call_id != slot.call_id) {
        continue;  // damaged or stale: the caller times out
      }
      bool mine = done != nullptr && s == want;
      if (mine) reply_status_ = ParseReply(h, msg, slot, reply);
      slot.busy = false;
      slot.bulk.Release();
      if (mine) *done = true;
    }
  }

  Status ParseReply(const MessageHeader& h, const char* msg, const Slot& slot, std::string* reply) {
    if (h.method_or_status != 0) {
      if (h.method_or_status > static_cast<uint16_t>(StatusCode::kInternal) ||
          (h.flags & kFlagBulk)) {
        return Status::Corruption("rpc reply: bad status");
      }
      return Status(static_cast<StatusCode>(h.method_or_status),
                    std::string_view(msg + kRpcHeaderSize, h.length));
    }
    if (h.flags & kFlagBulk) {
      if (h.length > options_.max_payload) return Status::Corruption("rpc reply: bulk too long");
      reply->assign(slot.bulk.data(), h.length);
    } else {
      reply->assign(msg + kRpcHeaderSize, h.length);
    }
    return Status::OK();
  }

  Transport* const transport_;
  const RpcOptions options_;
  SlotArea replies_, sends_;
  std::unique_ptr<BufferPool> pool_;
  std::unique_ptr<Connection> conn_;
  uint32_t server_key_ = 0;
  std::vector<Slot> slots_;
  uint64_t next_call_id_ = 0;
  Started started_;
  Status reply_status_;
  bool replied_ = false;  // the last call ended with the server's reply
};

RpcClient::RpcClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RpcClient::~RpcClient() = default;

Status RpcClient::Connect(Transport* transport, const std::string& address, uint32_t core,
                          const RpcOptions& options, std::unique_ptr<RpcClient>* out) {
  auto impl = std::make_unique<Impl>(transport, options);
  PDPM_RETURN_IF_ERROR(impl->Init(address, core));
  out->reset(new RpcClient(std::move(impl)));
  return Status::OK();
}

Status RpcClient::Call(uint16_t method, std::span<const uint8_t> request, std::string* reply,
                       uint32_t timeout_ms, const GiveUpFn& give_up) {
  return impl_->Call(method, request, reply, timeout_ms, give_up);
}

Status RpcClient::Start(uint16_t method, std::span<const uint8_t> request, uint32_t timeout_ms) {
  return impl_->Start(method, request, timeout_ms);
}

Status RpcClient::Finish(std::string* reply, const GiveUpFn& give_up) {
  return impl_->Finish(reply, give_up);
}

Connection& RpcClient::connection() {
  return impl_->connection();
}

bool RpcClient::replied() const {
  return impl_->replied();
}

// ------------------------------------------------------------------ server

class RpcServer::Impl {
 public:
  Impl(Transport* t, const RpcOptions& o) : transport_(t), options_(o) {}

  ~Impl() {
    {
      // The transport may outlive us: its hooks must stop reaching us.
      std::lock_guard lock(gate_->mu);
      gate_->impl = nullptr;
    }
    stop_.store(true);
    for (auto& w : workers_) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(w->wake_fd, &one, sizeof(one));
    }
    for (auto& w : workers_) w->thread.join();
    for (auto& w : workers_) ::close(w->wake_fd);
  }

  Status Init() {
    PDPM_RETURN_IF_ERROR(ValidateOptions(options_));
    PDPM_RETURN_IF_ERROR(
        BufferPool::Create(transport_, options_.max_payload, options_.pool_buffers, 0, &pool_));
    for (uint32_t i = 0; i < options_.server_threads; i++) {
      auto w = std::make_unique<Worker>();
      w->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (w->wake_fd < 0) return Status::FromErrno("rpc: eventfd", errno);
      workers_.push_back(std::move(w));
    }
    for (auto& w : workers_) {
      Worker* raw = w.get();
      raw->thread = std::thread([this, raw] { Run(raw); });
    }
    return Status::OK();
  }

  void Register(uint16_t method, RpcHandler handler) { handlers_[method] = std::move(handler); }

  Status Listen(const std::string& address) {
    AcceptHandler accept;
    accept.on_request = [gate = gate_](uint32_t, std::span<const uint8_t> blob,
                                       std::string* reply) {
      std::lock_guard lock(gate->mu);
      if (gate->impl == nullptr) return Status::Unavailable("rpc server stopped");
      return gate->impl->OnRequest(blob, reply);
    };
    accept.on_connected = [gate = gate_](std::unique_ptr<Connection> conn) {
      std::lock_guard lock(gate->mu);
      if (gate->impl != nullptr) gate->impl->OnConnected(std::move(conn));
    };
    return transport_->Listen(address, std::move(accept));
  }

 private:
  struct ServerConn {
    SlotArea requests, sends;
    uint32_t reply_key = 0;
    Clock::time_point accepted;        // when the connect request arrived
    std::unique_ptr<Connection> conn;  // closed before its slots go
  };
  struct Worker {
    std::thread thread;
    int wake_fd = -1;
    std::mutex mu;
    std::vector<std::unique_ptr<ServerConn>> arrivals;  // guarded by mu
  };

  Status OnRequest(std::span<const uint8_t> blob, std::string* reply) {
    uint32_t magic = 0, reply_key = 0, slots = 0, slot_size = 0;
    if (!GetU32s(blob, {&magic, &reply_key, &slots, &slot_size}) || magic != kClientBlobMagic) {
      return Status::InvalidArgument("rpc: not an RPC client");
    }
    if (slots != options_.slots || slot_size != options_.slot_size) {
      return Status::InvalidArgument("rpc: client slots differ from the server's");
    }
    auto sc = std::make_unique<ServerConn>();
    sc->reply_key = reply_key;
    PDPM_RETURN_IF_ERROR(sc->requests.Init(transport_, options_, kRemoteWrite));
    PDPM_RETURN_IF_ERROR(sc->sends.Init(transport_, options_, 0));
    uint32_t key = sc->requests.region->key();
    PutU32s(reply, {kServerBlobMagic, key, options_.slots, options_.slot_size});
    sc->accepted = Clock::now();
    std::lock_guard lock(mu_);
    // Slots of handshakes that never completed are dropped after a while.
    std::erase_if(unclaimed_, [&](const auto& kv) {
      return sc->accepted - kv.second->accepted > kUnclaimedLifetime;
    });
    unclaimed_[key] = std::move(sc);
    return Status::OK();
  }

  void OnConnected(std::unique_ptr<Connection> conn) {
    uint32_t magic = 0, key = 0, slots = 0, slot_size = 0;
    if (!GetU32s(conn->local_blob(), {&magic, &key, &slots, &slot_size})) return;
    std::unique_ptr<ServerConn> sc;
    {
      std::lock_guard lock(mu_);
      auto it = unclaimed_.find(key);
      if (it == unclaimed_.end()) return;
      sc = std::move(it->second);
      unclaimed_.erase(it);
    }
    sc->conn = std::move(conn);
    // Connections spread round-robin over the general threads, or over the
    // reserved ones when bound to a reserved core.
    const uint64_t general = workers_.size() - options_.reserved_threads;
    Worker* w =
        options_.reserved_threads > 0 && sc->conn->core() >= general
            ? workers_[general + next_reserved_.fetch_add(1) % options_.reserved_threads].get()
            : workers_[next_worker_.fetch_add(1) % general].get();
    {
      std::lock_guard lock(w->mu);
      w->arrivals.push_back(std::move(sc));
    }
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(w->wake_fd, &one, sizeof(one));
  }

  void Run(Worker* w) {
    std::vector<std::unique_ptr<ServerConn>> conns;
    const auto spin = std::chrono::microseconds(options_.spin_us);
    Clock::time_point spin_until = Clock::now() + spin;
    while (!stop_.load()) {
      {
        std::lock_guard lock(w->mu);
        for (auto& sc : w->arrivals) conns.push_back(std::move(sc));
        w->arrivals.clear();
      }
      bool busy = false;
      for (auto& sc : conns) busy |= Serve(*sc);
      std::erase_if(conns, [](auto& sc) { return !sc->conn->healthy(); });
      Clock::time_point now = Clock::now();
      if (busy) spin_until = now + spin;
      if (now < spin_until) continue;
      // Sleep until a connection has news.
      std::vector<pollfd> fds{{w->wake_fd, POLLIN, 0}};
      bool news = false;
      for (auto& sc : conns) {
        (void)sc->conn->ArmNotify();
        fds.push_back({sc->conn->notify_fd(), POLLIN, 0});
      }
      for (auto& sc : conns) news |= Serve(*sc);
      if (!news && ::poll(fds.data(), fds.size(), 50) > 0 && (fds[0].revents & POLLIN)) {
        uint64_t v;
        [[maybe_unused]] ssize_t n = ::read(w->wake_fd, &v, sizeof(v));
      }
      for (auto& sc : conns) sc->conn->AckNotify();
      spin_until = Clock::now() + spin;
    }
  }

  // Answers every request waiting on `sc`; true if there was any.
  bool Serve(ServerConn& sc) {
    Incoming in[16];
    size_t total = 0, n;
    while ((n = sc.conn->PollIncoming(in)) > 0) {
      for (size_t i = 0; i < n && sc.conn->healthy(); i++) {
        if (in[i].imm < options_.slots) Handle(sc, in[i].imm);
      }
      total += n;
    }
    Completion c[16];
    size_t nc = sc.conn->PollCompletions(c);
    return total > 0 || nc > 0;
  }

  void Handle(ServerConn& sc, uint32_t s) {
    const char* msg = sc.requests.slot(s, options_.slot_size);
    MessageHeader req;
    if (!DecodeMessage(msg, options_.slot_size, &req).ok()) return;  // not a request: drop
    uint32_t inline_max = options_.slot_size - kRpcHeaderSize;
    std::string reply;
    Status status;
    BufferPool::Buffer buffer;
    std::span<const uint8_t> request(reinterpret_cast<const uint8_t*>(msg + kRpcHeaderSize),
                                     req.length);
    if (req.flags & kFlagBulk) {
      if (req.length > options_.max_payload || req.length > req.bulk_capacity) {
        status = Status::TooLarge("rpc request over max_payload");
      } else if (status = pool_->Acquire(&buffer); status.ok()) {
        Op read;
        read.opcode = Opcode::kRead;
        read.id = req.call_id;
        read.local = buffer.local(req.length);
        read.remote_key = req.bulk_key;
        read.remote_offset = 0;
        status = PostAndWait(*sc.conn, {&read, 1}).WithContext("rpc: fetching the request");
        if (!sc.conn->healthy()) return;
        request = {reinterpret_cast<const uint8_t*>(buffer.data()), req.length};
      }
    }
    if (status.ok()) {
      auto it = handlers_.find(req.method_or_status);
      status = it == handlers_.end()
                   ? Status::NotFound("no rpc method " + std::to_string(req.method_or_status))
                   : it->second(request, &reply);
    }
    MessageHeader rep;
    rep.call_id = req.call_id;
    char* out = sc.sends.slot(s, options_.slot_size);
    Op ops[2];
    size_t count = 0;
    uint32_t inline_bytes = 0;
    if (status.ok() && reply.size() > inline_max) {
      if (reply.size() > req.bulk_capacity || reply.size() > options_.max_payload) {
        status = Status::TooLarge("rpc reply of " + std::to_string(reply.size()) + " bytes");
      } else if (buffer.valid() || (status = pool_->Acquire(&buffer)).ok()) {
        std::memcpy(buffer.data(), reply.data(), reply.size());
        Op& write = ops[count++];
        write.opcode = Opcode::kWrite;
        write.id = req.call_id;
        write.local = buffer.local(reply.size());
        write.remote_key = req.bulk_key;
        write.remote_offset = 0;
        write.signaled = false;
        rep.flags = kFlagBulk;
        rep.length = reply.size();
      }
    }
    if (!status.ok()) {
      rep.flags = 0;
      rep.method_or_status = static_cast<uint16_t>(status.code());
      std::string_view m = status.message().substr(0, inline_max);
      std::copy(m.begin(), m.end(), out + kRpcHeaderSize);
      rep.length = inline_bytes = m.size();
      count = 0;
    } else if (!(rep.flags & kFlagBulk)) {
      std::copy(reply.begin(), reply.end(), out + kRpcHeaderSize);
      rep.length = inline_bytes = reply.size();
    }
    EncodeMessage(rep, out);
    Op& send = ops[count++];
    send.opcode = Opcode::kWriteWithImm;
    send.id = req.call_id;
    send.local = {sc.sends.region.get(), uint64_t{s} * options_.slot_size,
                  kRpcHeaderSize + inline_bytes};
    send.remote_key = sc.reply_key;
    send.remote_offset = uint64_t{s} * options_.slot_size;
    send.imm = s;
    send.signaled = false;
    if (count == 2) {
      // The bulk buffer goes back to the pool only once the peer has it.
      (void)PostAndWait(*sc.conn, {ops, 2});
    } else {
      (void)sc.conn->Post({ops, 1});  // a failure breaks the connection: dropped by Run
    }
  }

  // What the transport's accept hooks hold: lets them outlive the server.
  struct Gate {
    explicit Gate(Impl* i) : impl(i) {}
    std::mutex mu;
    Impl* impl;
  };

  Transport* const transport_;
  const RpcOptions options_;
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>(this);
  std::map<uint16_t, RpcHandler> handlers_;  // fixed once Listen is called
  std::unique_ptr<BufferPool> pool_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint64_t> next_worker_{0};
  std::atomic<uint64_t> next_reserved_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<uint32_t, std::unique_ptr<ServerConn>> unclaimed_;  // by request key; guarded by mu_
};

RpcServer::RpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RpcServer::~RpcServer() = default;

Status RpcServer::Create(Transport* transport, const RpcOptions& options,
                         std::unique_ptr<RpcServer>* out) {
  auto impl = std::make_unique<Impl>(transport, options);
  PDPM_RETURN_IF_ERROR(impl->Init());
  out->reset(new RpcServer(std::move(impl)));
  return Status::OK();
}

void RpcServer::Register(uint16_t method, RpcHandler handler) {
  impl_->Register(method, std::move(handler));
}

Status RpcServer::Listen(const std::string& address) {
  return impl_->Listen(address);
}

}  // namespace pdpm::net
