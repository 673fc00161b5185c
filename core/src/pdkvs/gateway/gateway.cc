#include "pdkvs/gateway/gateway.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace pdpm::pdkvs {
namespace {

constexpr size_t kReadChunk = 64 << 10;
// Replies pending beyond this stop reading the connection until they drain.
constexpr size_t kMaxPendingOutput = 64 << 20;

std::string SockName(int fd, bool peer) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if ((peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
            : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len)) != 0) {
    return "?";
  }
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// Received bytes: [begin, end) not yet parsed. Unlike a std::string it
// grows without zero-filling what recv will overwrite.
class InputBuffer {
 public:
  std::string_view unparsed() const { return {data_.get() + begin_, end_ - begin_}; }
  void Consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  // Room for at least n more bytes at tail().
  char* Reserve(size_t n) {
    if (cap_ - end_ >= n) return tail();
    const size_t used = end_ - begin_;
    if (used + n <= cap_ && begin_ >= used) {
      memmove(data_.get(), data_.get() + begin_, used);
    } else {
      size_t cap = std::max(cap_ * 2, used + n);
      auto grown = std::make_unique<char[]>(cap);
      if (used > 0) memcpy(grown.get(), data_.get() + begin_, used);
      data_ = std::move(grown);
      cap_ = cap;
    }
    begin_ = 0;
    end_ = used;
    return tail();
  }
  char* tail() { return data_.get() + end_; }
  void Commit(size_t n) { end_ += n; }
  // Gives memory back after a large request.
  void ShrinkIfIdle() {
    if (begin_ == end_ && cap_ > (1u << 20)) {
      data_.reset();
      cap_ = begin_ = end_ = 0;
    }
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t cap_ = 0, begin_ = 0, end_ = 0;
};

// One client connection, owned by the loop that accepted it.
struct Connection {
  ClientState state;
  InputBuffer in;
  std::string out;  // replies; out[out_pos..] not yet sent
  size_t out_pos = 0;
  bool closing = false;  // close once `out` is sent
  bool want_write = false;
  bool reading = true;
  bool eof = false;      // the peer stopped sending
  size_t batched = 0;    // requests in the round's batch, not yet replied
  bool blocked = false;  // a request waits behind the batched ones
  std::vector<std::string_view> args;
  std::string scratch;
};

// A request of the round's batch: its connection; its key, field and value view
// the connection's input buffer (which keeps its bytes until the round
// ends), or copies of them for an inline request (whose arguments view the
// connection's scratch string, reused by the next request).
struct BatchedRequest {
  Connection* c;
  bool copied = false;
  std::string key, field, value;
};

}  // namespace

struct Gateway::Loop {
  int epoll_fd = -1;
  int stop_fd = -1;
  std::unordered_map<int, std::unique_ptr<Connection>> conns;
  ~Loop() {
    for (auto& [fd, c] : conns) close(fd);
    if (epoll_fd >= 0) close(epoll_fd);
    if (stop_fd >= 0) close(stop_fd);
  }
};

Gateway::Gateway(KvStore* store, const GatewayConfig& config, const Logger& log)
    : store_(store), config_(config), log_(log), executor_(store, &config_, &clients_, &stats_) {}

Status Gateway::Start(KvStore* store, const GatewayConfig& config, int threads, const Logger& log,
                      std::unique_ptr<Gateway>* out) {
  if (threads < 1) return Status::InvalidArgument("gateway needs at least one thread");
  std::unique_ptr<Gateway> g(new Gateway(store, config, log));
  g->stats_.started_ms = NowUnixMs();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(config.port));
  if (inet_pton(AF_INET, config.bind.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("listen address is not an IPv4 address: " + config.bind);
  }
  g->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (g->listen_fd_ < 0) return Status::FromErrno("socket", errno);
  int one = 1;
  setsockopt(g->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(g->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::FromErrno("bind " + config.bind + ":" + std::to_string(config.port), errno);
  }
  if (listen(g->listen_fd_, 1024) != 0) return Status::FromErrno("listen", errno);
  socklen_t len = sizeof(addr);
  getsockname(g->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  g->config_.port = ntohs(addr.sin_port);

  for (int i = 0; i < threads; ++i) {
    auto loop = std::make_unique<Loop>();
    loop->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    loop->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->epoll_fd < 0 || loop->stop_fd < 0) return Status::FromErrno("epoll", errno);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.fd = g->listen_fd_;
    if (epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, g->listen_fd_, &ev) != 0) {
      return Status::FromErrno("epoll_ctl listen", errno);
    }
    ev.events = EPOLLIN;
    ev.data.fd = loop->stop_fd;
    if (epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, loop->stop_fd, &ev) != 0) {
      return Status::FromErrno("epoll_ctl stop", errno);
    }
    g->loops_.push_back(std::move(loop));
  }
  for (auto& loop : g->loops_)
    g->threads_.emplace_back([gw = g.get(), l = loop.get()] { gw->Run(l); });
  if (config.active_expiry_interval.count() > 0) {
    ExpirySweeperOptions sweep;
    sweep.interval = config.active_expiry_interval;
    g->sweeper_ = std::make_unique<ExpirySweeper>(store, sweep, g->log_, &g->stats_.expired_keys);
  }
  *out = std::move(g);
  return Status::OK();
}

Gateway::~Gateway() {
  sweeper_.reset();
  for (auto& loop : loops_) {
    uint64_t one = 1;
    if (loop->stop_fd >= 0) (void)!write(loop->stop_fd, &one, sizeof(one));
  }
  for (auto& t : threads_) t.join();
  for (auto& loop : loops_) {
    for (auto& [fd, c] : loop->conns) clients_.Remove(&c->state);
  }
  loops_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void Gateway::Run(Loop* loop) {
  std::vector<epoll_event> events(256);
  auto update_events = [loop](Connection* c) {
    epoll_event ev{};
    ev.events = (c->reading ? uint32_t{EPOLLIN} : 0u) | (c->want_write ? uint32_t{EPOLLOUT} : 0u);
    ev.data.fd = c->state.fd;
    epoll_ctl(loop->epoll_fd, EPOLL_CTL_MOD, c->state.fd, &ev);
  };
  auto drop = [this, loop](Connection* c) {
    const int fd = c->state.fd;
    epoll_ctl(loop->epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    clients_.Remove(&c->state);
    close(fd);
    loop->conns.erase(fd);
  };
  // Sends pending replies; false when the connection is gone.
  auto flush = [&](Connection* c) {
    while (c->out_pos < c->out.size()) {
      ssize_t n =
          send(c->state.fd, c->out.data() + c->out_pos, c->out.size() - c->out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c->out_pos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      drop(c);
      return false;
    }
    if (c->out_pos == c->out.size()) {
      c->out.clear();
      c->out_pos = 0;
      if (c->closing) {
        drop(c);
        return false;
      }
    }
    const bool want_write = c->out_pos < c->out.size();
    const bool reading = !c->closing && c->out.size() - c->out_pos < kMaxPendingOutput;
    if (want_write != c->want_write || reading != c->reading) {
      c->want_write = want_write;
      c->reading = reading;
      update_events(c);
    }
    return true;
  };
  // Runs the complete requests received: plain GETs and SETs, and HGETs
  // and HSETs of one field, join the round's batch; any other runs at once, unless requests of its
  // connection are in the batch: then it waits (c->blocked) for their
  // replies, which keeps the connection's replies in request order.
  std::vector<BatchedRequest> batched;
  std::vector<KvOp> ops;
  auto process = [&](Connection* c) {
    c->blocked = false;
    while (!c->closing && !c->in.unparsed().empty()) {
      size_t consumed = 0;
      std::string error;
      std::string_view data = c->in.unparsed();
      RespParse r =
          ParseRespRequest(data, config_.limits, &consumed, &c->args, &c->scratch, &error);
      if (r == RespParse::kIncomplete) break;
      KvOp op;
      const bool batchable = r == RespParse::kRequest && !c->args.empty() &&
                             executor_.Batchable(c->state, c->args, &op);
      if (!batchable && c->batched > 0) {
        c->blocked = true;
        break;
      }
      if (r == RespParse::kError) {
        RespWriter(&c->out, c->state.protocol.load()).Error("ERR " + error);
        c->closing = true;
        log_.Info("protocol error, closing client", {{"client", c->state.addr}, {"error", error}});
        break;
      }
      if (batchable) {
        if (data.front() == '*') {
          batched.push_back({c, false, {}, {}, {}});
        } else {
          batched.push_back(
              {c, true, std::string(op.key), std::string(op.field), std::string(op.value)});
        }
        ops.push_back(op);
        ++c->batched;
      } else if (!c->args.empty() && !executor_.Execute(&c->state, c->args, &c->out)) {
        c->closing = true;
      }
      // Only now: args view the buffer (which keeps the bytes until the
      // round ends: no read, nor ShrinkIfIdle, before).
      c->in.Consume(consumed);
    }
  };
  // Runs the requests of `ready` connections: the batchable ones of every
  // connection as one KvStore::RunBatch (the store groups them by vnode),
  // then what waited behind them, until no connection has a complete
  // request left.
  auto run_round = [&](const std::vector<Connection*>& ready) {
    std::vector<Connection*> active = ready;
    while (!active.empty()) {
      for (Connection* c : active) process(c);
      if (!ops.empty()) {
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!batched[i].copied) continue;
          ops[i].key = batched[i].key;
          ops[i].field = batched[i].field;
          ops[i].value = batched[i].value;
        }
        store_->RunBatch(ops);
        for (size_t i = 0; i < ops.size(); ++i) {
          Connection* c = batched[i].c;
          executor_.ReplyBatched(&c->state, ops[i], &c->out);
          c->batched = 0;
        }
        batched.clear();
        ops.clear();
      }
      std::erase_if(active, [](const Connection* c) { return !c->blocked; });
    }
    for (Connection* c : ready) c->in.ShrinkIfIdle();
  };
  auto accept_all = [&] {
    for (;;) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: another loop took it, or none left
      stats_.connections_received.fetch_add(1, std::memory_order_relaxed);
      if (clients_.size() >= config_.max_clients) {
        stats_.rejected_connections.fetch_add(1, std::memory_order_relaxed);
        static constexpr char kMax[] = "-ERR max number of clients reached\r\n";
        (void)!send(fd, kMax, sizeof(kMax) - 1, MSG_NOSIGNAL);
        close(fd);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Connection>();
      c->state.fd = fd;
      c->state.addr = SockName(fd, true);
      c->state.laddr = SockName(fd, false);
      c->state.created_ms = NowUnixMs();
      c->state.last_active_ms = c->state.created_ms;
      c->state.authenticated = config_.password.empty();
      clients_.Add(&c->state);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        clients_.Remove(&c->state);
        close(fd);
        continue;
      }
      loop->conns.emplace(fd, std::move(c));
    }
  };

  std::vector<Connection*> ready;
  for (;;) {
    int n = epoll_wait(loop->epoll_fd, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log_.Error("epoll_wait failed", {{"error", Status::FromErrno("epoll_wait", errno)}});
      return;
    }
    ready.clear();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == loop->stop_fd) return;
      if (fd == listen_fd_) {
        accept_all();
        continue;
      }
      auto it = loop->conns.find(fd);
      if (it == loop->conns.end()) continue;
      Connection* c = it->second.get();
      if ((events[i].events & EPOLLOUT) && !flush(c)) continue;
      if (!(events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) || !c->reading) continue;
      // Read what is there (bounded, for fairness); every ready
      // connection's requests then run in one round.
      for (size_t total = 0; total < 4 * kReadChunk;) {
        ssize_t r = recv(fd, c->in.Reserve(kReadChunk), kReadChunk, 0);
        if (r > 0) {
          c->in.Commit(static_cast<size_t>(r));
          total += static_cast<size_t>(r);
          if (static_cast<size_t>(r) < kReadChunk) break;
          continue;
        }
        if (r == 0) c->eof = true;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c->eof = true;
        break;
      }
      c->state.last_active_ms.store(NowUnixMs(), std::memory_order_relaxed);
      ready.push_back(c);
    }
    run_round(ready);
    for (Connection* c : ready) {
      if (!flush(c)) continue;
      if (c->eof && c->out_pos == c->out.size()) {
        drop(c);
      } else if (c->eof) {
        // The peer stopped sending: deliver what is pending, then close.
        c->closing = true;
        c->reading = false;
        update_events(c);
      }
    }
  }
}

}  // namespace pdpm::pdkvs
