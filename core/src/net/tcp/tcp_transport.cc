#include "net/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "net/tcp/frame_machine.h"
#include "net/tcp/region_table.h"
#include "net/tcp/wire.h"

namespace pdpm::net::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// Answers with at most this much payload are copied; larger ones (READ
// answers) are sent from the range. Either way they go out at the end of a
// receive burst, many in one send.
constexpr size_t kDeferredResponseMax = 4096;
// Bytes read per receive call into the staging buffer.
constexpr size_t kStagingSize = 256 << 10;
// Payloads this large are received in place with one call each, which
// also takes the next frame's header (and nothing more).
constexpr size_t kDirectMin = 16 << 10;
// Receive calls per burst before a connection yields to the others.
constexpr int kReadsPerBurst = 64;
// A poller holds back at most this many bytes of answers.
constexpr size_t kMaxDeferredBytes = 64 << 10;
// A poller that polls again sends answers it held back this long.
constexpr auto kMaxAckDeferral = std::chrono::microseconds(50);
// A connection is attended while its application thread polled it this
// recently, or armed its notify fd this recently (it then sleeps on a set
// that includes the socket). The progress thread leaves an attended
// connection's socket to that thread: no hand-off on the latency path.
constexpr auto kAttendedPolling = std::chrono::milliseconds(2);
constexpr auto kAttendedSleeping = std::chrono::milliseconds(100);
// A poller that found the socket empty this recently does not ask again:
// polling completions and then incoming events costs one receive call.
constexpr auto kFreshlyEmptied =
    std::chrono::duration_cast<Clock::duration>(std::chrono::microseconds(2));

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

Status ResolveAddress(const std::string& address, sockaddr_in* out) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("address '" + address + "' is not host:port");
  }
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? "0.0.0.0" : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::InvalidArgument("cannot resolve '" + address + "': " + gai_strerror(rc));
  }
  std::memcpy(out, res->ai_addr, sizeof(*out));
  freeaddrinfo(res);
  return Status::OK();
}

// strerror, thread-safe.
std::string ErrnoText(int err) {
  char buf[128];
  return strerror_r(err, buf, sizeof(buf));  // the GNU variant returns the text
}

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Waits until `fd` is ready for `events` or the deadline passes.
Status WaitFd(int fd, short events, Clock::time_point deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, RemainingMs(deadline));
    if (rc > 0) return Status::OK();
    if (rc == 0) return Status::Timeout(std::string(what) + " timed out");
    if (errno != EINTR) return Status::FromErrno(what, errno);
  }
}

// Blocking-with-deadline exact send/receive on a non-blocking socket, for
// the handshake only.
Status SendAll(int fd, const void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= w;
    } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      PDPM_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, "handshake send"));
    } else {
      return Status::Unavailable(std::string("handshake send: ") + ErrnoText(errno));
    }
  }
  return Status::OK();
}

Status RecvAll(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= r;
    } else if (r == 0) {
      return Status::Unavailable("peer closed the connection during the handshake");
    } else if (errno == EAGAIN || errno == EINTR) {
      PDPM_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, "handshake receive"));
    } else {
      return Status::Unavailable(std::string("handshake receive: ") + ErrnoText(errno));
    }
  }
  return Status::OK();
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string FormatAddress(const sockaddr_in& a) {
  char host[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(a.sin_port));
}

class ProgressThread;

class TcpRegion final : public MemoryRegion {
 public:
  TcpRegion(std::shared_ptr<RegionTable> table, std::shared_ptr<RegionEntry> entry)
      : MemoryRegion(entry->data, entry->size),
        table_(std::move(table)),
        entry_(std::move(entry)) {}
  ~TcpRegion() override { table_->Remove(entry_); }
  uint32_t key() const override { return entry_->key; }

 private:
  std::shared_ptr<RegionTable> table_;
  std::shared_ptr<RegionEntry> entry_;
};

// One queued piece of outgoing stream: a frame header and its payload,
// which is either borrowed (a posted op's local buffer, alive until the op
// completes) or owned.
struct TxEntry {
  uint8_t header[kFrameHeaderSize];
  const uint8_t* payload = nullptr;
  size_t payload_length = 0;
  std::vector<uint8_t> owned;
  // Set when the payload lies in this registered range (a READ answer).
  std::shared_ptr<RegionEntry> range;
  size_t sent = 0;  // of header + payload
  size_t total() const { return kFrameHeaderSize + payload_length; }
};

struct PendingOp {
  uint64_t seq;
  uint64_t id;
  Opcode opcode;
  bool signaled;
  std::span<uint8_t> result;  // kRead: destination; atomics: 8-byte old value
  Clock::time_point deadline;
};

struct QueuedCompletion {
  Completion completion;
  bool signaled;
};

// The state of one connection, shared by its user-facing Connection, the
// progress thread that watches its socket and any thread polling it.
//
// Locks: rx_mu_ (receive state; held while draining the socket) before
// tx_mu_ (outgoing stream) before state_mu_ (ops, completions, events).
class ConnCore final : public FrameSink, public std::enable_shared_from_this<ConnCore> {
 public:
  // Re-runs the connect handshake for Reconnect; empty on the accepting side.
  using DialFn =
      std::function<Status(UniqueFd* fd, std::string* peer_blob, uint32_t* peer_max_transfer)>;

  ConnCore(const TransportOptions& options, std::shared_ptr<RegionTable> table, DialFn dial,
           std::string address, uint32_t core, std::string local_blob, UniqueFd fd,
           std::string peer_blob, uint32_t peer_max_transfer, uint64_t id)
      : options_(options),
        table_(std::move(table)),
        dial_(std::move(dial)),
        address_(std::move(address)),
        core_(core),
        local_blob_(std::move(local_blob)),
        id_(id),
        machine_(table_.get(), options.max_transfer, this),
        staging_(kStagingSize),
        fd_(std::move(fd)),
        peer_blob_(std::move(peer_blob)),
        peer_max_transfer_(peer_max_transfer),
        event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        wait_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ::epoll_ctl(wait_fd_.get(), EPOLL_CTL_ADD, event_fd_.get(), &ev);
    WatchSocketForWaiters();
  }

  uint64_t id() const { return id_; }
  int fd_for_epoll() const { return fd_.get(); }  // only by its progress thread, under its lock
  void set_thread(ProgressThread* t) { thread_ = t; }
  ProgressThread* thread() const { return thread_; }

  // Drains the socket. Returns true when it stopped with data left (the
  // caller should come back).
  // `from_poller`: run by the application's polling thread, which leaves
  // small answers queued (see FlushDeferred) so they can share a send with
  // what it posts next.
  enum class Drainer { kProgressThread, kCompletionPoller, kIncomingPoller };
  bool Progress(Drainer drainer = Drainer::kProgressThread);
  // Sends answers a poller left queued if they waited at least `min_age`.
  void FlushDeferred(Clock::duration min_age);
  bool Attended(Clock::time_point now) const {
    Clock::time_point touched{Clock::duration(last_touch_.load())};
    return now - touched < (waiting_.load() ? kAttendedSleeping : kAttendedPolling);
  }
  // The progress thread left the socket to the attending thread (and
  // stopped watching its data); it takes it back on its tick once that
  // thread went away. Touched by the progress thread only.
  std::atomic<bool> skipped{false};
  // Progress for the application's polling thread: leftovers go to the
  // progress thread, which does not get another epoll edge for them.
  void ProgressFromPoller(Drainer drainer);
  void OnWritable();
  // Fails the oldest op (and so the connection) if its deadline passed.
  void CheckTimeout(Clock::time_point now);
  void Close();

  Status Post(std::span<const Op> ops);
  size_t PollCompletions(std::span<Completion> out);
  size_t PollIncoming(std::span<Incoming> out);
  size_t outstanding() const {
    std::lock_guard lock(state_mu_);
    return signaled_outstanding_;
  }
  bool healthy() const { return !broken_.load(); }
  Status Reconnect();
  int notify_fd() const { return wait_fd_.get(); }
  Status ArmNotify();
  void AckNotify();
  std::span<const uint8_t> peer_blob() const {
    return {reinterpret_cast<const uint8_t*>(peer_blob_.data()), peer_blob_.size()};
  }
  std::span<const uint8_t> local_blob() const {
    return {reinterpret_cast<const uint8_t*>(local_blob_.data()), local_blob_.size()};
  }
  std::string peer_address() const { return address_; }
  uint32_t core() const { return core_; }

  // FrameSink.
  void Respond(const FrameHeader& h, std::span<const uint8_t> payload,
               std::shared_ptr<RegionEntry> range) override;
  void DeliverIncoming(uint32_t imm, uint32_t length) override;
  Status BeginResponse(const FrameHeader& h, std::span<uint8_t>* dest) override;
  void EndResponse(const FrameHeader& h, std::string_view error) override;

 private:
  bool DrainLocked(Drainer drainer);
  // Who drains right now; events the draining poller returns itself need
  // no notification. Guarded by rx_mu_.
  Drainer draining_for_ = Drainer::kProgressThread;
  void Fail(const Status& s);
  void FailLocked(const Status& s);             // rx_mu_ held
  Status FlushLocked();                         // tx_mu_ held
  Status QueueLocked(std::span<const Op> ops);  // tx_mu_ held
  void Notify();
  Status ValidateOp(const Op& op) const;

  const TransportOptions options_;
  const std::shared_ptr<RegionTable> table_;
  const DialFn dial_;
  const std::string address_;
  const uint32_t core_;
  const std::string local_blob_;
  const uint64_t id_;
  ProgressThread* thread_ = nullptr;

  std::mutex rx_mu_;
  std::atomic<bool> rx_pending_{false};
  std::atomic<bool> rx_paused_{false};  // tx backlog too large: stop taking requests
  FrameMachine machine_;                // guarded by rx_mu_
  std::vector<uint8_t> staging_;        // guarded by rx_mu_
  bool large_stream_ = false;           // the last payload was large; guarded by rx_mu_
  // The socket; replaced only by Reconnect holding rx_mu_ and tx_mu_.
  UniqueFd fd_;
  std::string peer_blob_;       // replaced by Reconnect
  uint32_t peer_max_transfer_;  // replaced by Reconnect

  std::mutex tx_mu_;
  std::deque<TxEntry> txq_;    // guarded by tx_mu_
  size_t tx_owned_bytes_ = 0;  // guarded by tx_mu_
  bool tx_awaited_ = false;    // txq_ holds an answer its requester awaits; guarded by tx_mu_
  Status tx_error_;            // guarded by tx_mu_
  std::atomic<size_t> tx_backlog_{0};
  // When a poller first left answers queued (steady clock ticks; 0: none).
  std::atomic<int64_t> deferred_since_{0};
  // When the application last polled or armed (steady clock ticks), and
  // whether it armed since it last woke (AckNotify).
  std::atomic<int64_t> last_touch_{0};
  std::atomic<bool> waiting_{false};
  // When a drain last found the socket empty (steady clock ticks).
  std::atomic<int64_t> emptied_at_{0};
  // The poller woke (AckNotify) and has not drained the socket empty since.
  std::atomic<bool> maybe_unread_{true};

  mutable std::mutex state_mu_;
  std::deque<PendingOp> pending_;             // guarded by state_mu_
  std::deque<QueuedCompletion> completions_;  // guarded by state_mu_
  std::deque<Incoming> incoming_;             // guarded by state_mu_
  size_t signaled_outstanding_ = 0;           // guarded by state_mu_
  uint64_t next_seq_ = 1;                     // guarded by state_mu_
  std::atomic<bool> broken_{false};
  std::atomic<bool> closed_{false};

  // A sleeping poller waits on wait_fd_, an epoll set of event_fd_ (written
  // when a progress thread queued news) and the socket itself, so that data
  // for a sleeping poller wakes it directly, without a thread hand-off.
  void WatchSocketForWaiters() {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ::epoll_ctl(wait_fd_.get(), EPOLL_CTL_ADD, fd_.get(), &ev);
  }
  UniqueFd event_fd_;
  UniqueFd wait_fd_;
  std::atomic<bool> armed_{false};
  std::atomic<bool> notified_{false};  // event_fd_ was written since AckNotify
};

// An epoll loop serving a set of connections (and, for the first one, the
// listening socket and connection handshakes).
class ProgressThread {
 public:
  explicit ProgressThread(class TcpTransport* transport);
  ~ProgressThread();
  Status Start();
  void Add(const std::shared_ptr<ConnCore>& conn);
  void Remove(const std::shared_ptr<ConnCore>& conn);
  // Asks the thread to drain `conn` again (it stopped with data left).
  void Kick(const std::shared_ptr<ConnCore>& conn);
  // Whether this thread hears of incoming data on `conn` (it always hears
  // when the socket can take more).
  void WatchReceive(const std::shared_ptr<ConnCore>& conn, bool watch);
  Status WatchListener(int fd);

 private:
  struct Handshake {
    UniqueFd fd;
    uint8_t hello[kHelloSize];
    std::string blob;
    size_t have = 0;  // bytes of hello + blob received
    Hello decoded;
    Clock::time_point deadline;
  };
  static constexpr uint64_t kWakeTag = ~uint64_t{0};
  static constexpr uint64_t kListenTag = ~uint64_t{0} - 1;
  static constexpr uint64_t kHandshakeBit = uint64_t{1} << 62;

  void Run();
  void AcceptAll();
  void AdvanceHandshake(uint64_t tag);

  class TcpTransport* const transport_;
  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  int listen_fd_ = -1;

  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<ConnCore>> conns_;  // guarded by mu_
  std::vector<std::shared_ptr<ConnCore>> kicked_;        // guarded by mu_
  std::map<uint64_t, Handshake> handshakes_;             // only the thread itself
  uint64_t next_handshake_ = 0;
};

class TcpConnection final : public Connection {
 public:
  explicit TcpConnection(std::shared_ptr<ConnCore> core) : core_(std::move(core)) {}
  ~TcpConnection() override { core_->Close(); }

  Status Post(std::span<const Op> ops) override { return core_->Post(ops); }
  size_t PollCompletions(std::span<Completion> out) override { return core_->PollCompletions(out); }
  size_t PollIncoming(std::span<Incoming> out) override { return core_->PollIncoming(out); }
  size_t outstanding() const override { return core_->outstanding(); }
  bool healthy() const override { return core_->healthy(); }
  Status Reconnect() override { return core_->Reconnect(); }
  int notify_fd() const override { return core_->notify_fd(); }
  Status ArmNotify() override { return core_->ArmNotify(); }
  void AckNotify() override { core_->AckNotify(); }
  std::span<const uint8_t> peer_blob() const override { return core_->peer_blob(); }
  std::span<const uint8_t> local_blob() const override { return core_->local_blob(); }
  std::string peer_address() const override { return core_->peer_address(); }
  uint32_t core() const override { return core_->core(); }

 private:
  std::shared_ptr<ConnCore> core_;
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportOptions& options)
      : options_(options), table_(std::make_shared<RegionTable>(options.remote_access_allowed)) {}
  ~TcpTransport() override {
    threads_.clear();  // joins them before the listener closes
  }

  Status Init() {
    size_t n = std::clamp<uint32_t>(options_.cores, 1, 4);
    for (size_t i = 0; i < n; i++) {
      threads_.push_back(std::make_unique<ProgressThread>(this));
      PDPM_RETURN_IF_ERROR(threads_.back()->Start());
    }
    return Status::OK();
  }

  BackendKind kind() const override { return BackendKind::kTcp; }

  Status RegisterMemory(void* data, size_t size, uint32_t access, PersistFn persist,
                        std::unique_ptr<MemoryRegion>* out) override {
    if (data == nullptr && size != 0) return Status::InvalidArgument("null range");
    if ((access & ~uint32_t{kRemoteAll | kAccessGated}) != 0)
      return Status::InvalidArgument("unknown access bits");
    auto entry = table_->Add(static_cast<char*>(data), size, access, std::move(persist));
    *out = std::make_unique<TcpRegion>(table_, std::move(entry));
    return Status::OK();
  }

  Status Listen(const std::string& address, AcceptHandler handler) override;
  std::string listen_address() const override {
    std::lock_guard lock(mu_);
    return listen_address_;
  }
  Status Connect(const std::string& address, uint32_t core, std::string_view local_blob,
                 std::unique_ptr<Connection>* out) override;

  // Dials `address` and runs the handshake: the connected socket, the
  // peer's blob and max_transfer.
  Status Dial(const std::string& address, uint32_t core, std::string_view local_blob, UniqueFd* fd,
              std::string* peer_blob, uint32_t* peer_max_transfer) const;

  // A handshake finished on the listener: consult the handler, answer, and
  // hand over the connection.
  void Accept(UniqueFd fd, const Hello& hello, const std::string& blob);

  ProgressThread* ThreadFor(uint32_t core) { return threads_[core % threads_.size()].get(); }
  const TransportOptions& options() const { return options_; }
  uint64_t NextConnId() { return next_conn_id_.fetch_add(1); }

 private:
  const TransportOptions options_;
  const std::shared_ptr<RegionTable> table_;
  std::atomic<uint64_t> next_conn_id_{1};
  mutable std::mutex mu_;
  std::string listen_address_;  // guarded by mu_
  AcceptHandler handler_;       // set once by Listen, before the listener is watched
  UniqueFd listen_fd_;
  std::vector<std::unique_ptr<ProgressThread>> threads_;
};

// ---------------------------------------------------------------- ConnCore

bool ConnCore::Progress(Drainer drainer) {
  rx_pending_.store(true);
  bool more = false;
  while (rx_pending_.load()) {
    std::unique_lock lock(rx_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;  // the holder sees rx_pending_
    rx_pending_.store(false);
    if (closed_.load() || broken_.load()) return false;
    draining_for_ = drainer;
    more = DrainLocked(drainer);
    draining_for_ = Drainer::kProgressThread;
  }
  return more;
}

bool ConnCore::DrainLocked(Drainer drainer) {
  const bool from_poller = drainer != Drainer::kProgressThread;
  bool more = false;
  for (int i = 0;; i++) {
    if (i == kReadsPerBurst) {
      more = true;  // yield to the other connections; the caller comes back
      break;
    }
    if (tx_backlog_.load() > std::max<size_t>(size_t{4} * options_.max_transfer, 64 << 20)) {
      rx_paused_.store(true);  // OnWritable resumes
      break;
    }
    size_t staged = 0;
    size_t asked = staging_.size();
    ssize_t r = machine_.FillDirect([&](char* dst, size_t max) -> ssize_t {
      // In a stream of large payloads only the next header is staged with
      // a payload: the next payload is then received in place too.
      large_stream_ = machine_.payload_length() >= kDirectMin;
      asked = large_stream_ ? kFrameHeaderSize : staging_.size();
      iovec iov[2] = {{dst, max}, {staging_.data(), asked}};
      asked += max;
      ssize_t n = ::readv(fd_.get(), iov, 2);
      if (n <= 0) return n;
      staged = static_cast<size_t>(n) > max ? n - max : 0;
      return std::min<ssize_t>(n, max);
    });
    if (r == -2) {
      asked = large_stream_ ? kFrameHeaderSize : staging_.size();
      r = ::recv(fd_.get(), staging_.data(), asked, 0);
      staged = r > 0 ? r : 0;
    }
    if (r == 0) {
      FailLocked(Status::Unavailable("peer " + address_ + " closed the connection"));
      return false;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        emptied_at_.store(Clock::now().time_since_epoch().count());
        if (from_poller) maybe_unread_.store(false);
        break;
      }
      FailLocked(Status::Unavailable("connection to " + address_ + ": " + ErrnoText(errno)));
      return false;
    }
    Status s = machine_.Consume(staging_.data(), staged);
    if (!s.ok()) {
      FailLocked(s.WithContext("bad frame from " + address_));
      return false;
    }
    if (r + staged < asked) {
      // A short read took all the socket had; data arriving later raises a
      // new edge for the progress thread and wakes sleeping pollers.
      emptied_at_.store(Clock::now().time_since_epoch().count());
      if (from_poller) maybe_unread_.store(false);
      break;
    }
  }
  Status flushed;
  {
    std::lock_guard lock(tx_mu_);
    // A poller that armed its notify fd is about to sleep: nobody would
    // send what it held back until the progress thread's tick, so answers
    // their requesters await leave now (a READ of an RPC request's bulk
    // data waited a whole tick). Others, e.g. the ack of an RPC reply,
    // still wait for the next post.
    const bool awaited_before_sleep = waiting_.load() && tx_awaited_;
    if (from_poller && !awaited_before_sleep && !txq_.empty() && tx_error_.ok() &&
        tx_backlog_.load() <= kMaxDeferredBytes) {
      // Hold the answers back briefly: an RPC server's reply, or the
      // poller's next post, takes them along in one send.
      if (deferred_since_.load() == 0) {
        deferred_since_.store(Clock::now().time_since_epoch().count());
      }
      return more;
    }
    flushed = FlushLocked();
  }
  if (!flushed.ok()) {
    FailLocked(flushed);
    return false;
  }
  return more;
}

void ConnCore::FlushDeferred(Clock::duration min_age) {
  int64_t since = deferred_since_.load();
  if (since == 0 || Clock::now().time_since_epoch().count() - since < min_age.count()) return;
  Status s;
  {
    std::lock_guard lock(tx_mu_);
    s = FlushLocked();
  }
  if (!s.ok()) Fail(s);
}

void ConnCore::ProgressFromPoller(Drainer drainer) {
  int64_t now = Clock::now().time_since_epoch().count();
  last_touch_.store(now);
  if (now - emptied_at_.load() < kFreshlyEmptied.count() && tx_backlog_.load() == 0 &&
      deferred_since_.load() == 0) {
    return;  // drained an instant ago (e.g. PollCompletions right before PollIncoming)
  }
  if (tx_backlog_.load() > 0 && deferred_since_.load() == 0) OnWritable();  // resume a stalled send
  FlushDeferred(kMaxAckDeferral);
  if (Progress(drainer)) thread_->Kick(shared_from_this());
}

void ConnCore::OnWritable() {
  Status s;
  {
    std::lock_guard lock(tx_mu_);
    s = FlushLocked();
  }
  if (!s.ok()) {
    Fail(s);
    return;
  }
  if (rx_paused_.load() && tx_backlog_.load() == 0) {
    rx_paused_.store(false);
    if (Progress()) thread_->Kick(shared_from_this());
  }
}

Status ConnCore::FlushLocked() {
  deferred_since_.store(0);
  tx_awaited_ = false;
  if (!tx_error_.ok()) return tx_error_;
  while (!txq_.empty()) {
    // Gather up to 64 pieces. Payloads lying in registered ranges are sent
    // under the ranges' locks (at most two ranges per send), and only while
    // the ranges are registered.
    iovec iov[64];
    int count = 0;
    RegionEntry* ranges[2] = {};
    std::shared_lock<std::shared_mutex> locks[2];
    int locked = 0;
    for (auto it = txq_.begin(); it != txq_.end() && count < 63; ++it) {
      if (RegionEntry* r = it->range.get(); r != nullptr && r != ranges[0] && r != ranges[1]) {
        if (locked == 2) break;
        ranges[locked] = r;
        locks[locked++] = std::shared_lock(r->mu);
        if (r->dead) {
          // As on verbs, deregistering a range under a remote READ breaks
          // the connection.
          tx_error_ = Status::Unavailable("a range was deregistered while the peer read it");
          return tx_error_;
        }
      }
      size_t sent = it->sent;
      if (sent < kFrameHeaderSize) {
        iov[count++] = {it->header + sent, kFrameHeaderSize - sent};
        sent = 0;
      } else {
        sent -= kFrameHeaderSize;
      }
      if (it->payload_length > sent) {
        iov[count++] = {const_cast<uint8_t*>(it->payload) + sent, it->payload_length - sent};
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t w = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    for (int i = 0; i < locked; i++) locks[i].unlock();
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return Status::OK();  // EPOLLOUT brings us back
      tx_error_ = Status::Unavailable("send to " + address_ + ": " + ErrnoText(errno));
      return tx_error_;
    }
    size_t left = w;
    while (left > 0) {
      TxEntry& e = txq_.front();
      size_t take = std::min(left, e.total() - e.sent);
      e.sent += take;
      left -= take;
      tx_backlog_.fetch_sub(take);
      if (e.sent == e.total()) {
        tx_owned_bytes_ -= e.owned.size();
        txq_.pop_front();
      }
    }
  }
  return Status::OK();
}

void ConnCore::Respond(const FrameHeader& h, std::span<const uint8_t> payload,
                       std::shared_ptr<RegionEntry> range) {
  std::lock_guard lock(tx_mu_);
  if (!tx_error_.ok()) return;
  // An error is a completion at the requester even for an unsignaled op.
  if ((machine_.flags() & kFlagAwaited) || h.status != 0) tx_awaited_ = true;
  TxEntry& e = txq_.emplace_back();
  EncodeFrameHeader(h, e.header);
  e.payload_length = payload.size();
  tx_backlog_.fetch_add(e.total());
  if (payload.size() <= kDeferredResponseMax || !range) {
    // Small: copy now, send with the rest of the burst.
    e.owned.assign(payload.begin(), payload.end());
    e.payload = e.owned.data();
    tx_owned_bytes_ += e.owned.size();
    return;
  }
  // A large READ answer goes out from the range itself, without a copy,
  // with the other answers of this receive burst in one send.
  e.payload = payload.data();
  e.range = std::move(range);
}

void ConnCore::DeliverIncoming(uint32_t imm, uint32_t length) {
  {
    std::lock_guard lock(state_mu_);
    incoming_.push_back({imm, length});
  }
  if (draining_for_ != Drainer::kIncomingPoller) Notify();
}

Status ConnCore::BeginResponse(const FrameHeader& h, std::span<uint8_t>* dest) {
  std::lock_guard lock(state_mu_);
  if (pending_.empty() || pending_.front().seq != h.seq) {
    return Status::Corruption("response to op " + std::to_string(h.seq) +
                              ", which is not the oldest outstanding op");
  }
  *dest = pending_.front().result;
  return Status::OK();
}

void ConnCore::EndResponse(const FrameHeader& h, std::string_view error) {
  bool notify = false;
  {
    std::lock_guard lock(state_mu_);
    PendingOp op = pending_.front();
    pending_.pop_front();
    if (h.status != 0 || op.signaled) {
      Status s;
      if (h.status != 0) {
        s = Status(static_cast<StatusCode>(h.status), "peer " + address_ + ": " +
                                                          std::string(OpcodeName(op.opcode)) +
                                                          ": " + std::string(error));
      }
      completions_.push_back({{op.id, op.opcode, s}, op.signaled});
      notify = true;
    }
  }
  if (notify && draining_for_ != Drainer::kCompletionPoller) Notify();
}

void ConnCore::Notify() {
  if (armed_.exchange(false)) {
    notified_.store(true);
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
  }
}

void ConnCore::Fail(const Status& s) {
  std::lock_guard lock(rx_mu_);
  FailLocked(s);
}

void ConnCore::FailLocked(const Status& s) {
  if (broken_.exchange(true)) return;
  ::shutdown(fd_.get(), SHUT_RDWR);
  // A dead socket stays readable: waiters now hear only event_fd_.
  ::epoll_ctl(wait_fd_.get(), EPOLL_CTL_DEL, fd_.get(), nullptr);
  {
    std::lock_guard lock(tx_mu_);
    txq_.clear();
    tx_owned_bytes_ = 0;
    tx_backlog_.store(0);
    if (tx_error_.ok()) tx_error_ = s;
  }
  {
    std::lock_guard lock(state_mu_);
    for (const PendingOp& op : pending_) {
      completions_.push_back({{op.id, op.opcode, s}, op.signaled});
    }
    pending_.clear();
  }
  armed_.store(true);
  Notify();
}

void ConnCore::CheckTimeout(Clock::time_point now) {
  {
    std::lock_guard lock(state_mu_);
    if (pending_.empty() || pending_.front().deadline > now) return;
  }
  Fail(Status::Timeout("no answer from " + address_ + " within " +
                       std::to_string(options_.op_timeout_ms) + " ms"));
}

void ConnCore::Close() {
  closed_.store(true);
  Fail(Status::Unavailable("connection closed"));
  thread_->Remove(shared_from_this());
}

Status ConnCore::ValidateOp(const Op& op) const {
  const LocalBuffer& l = op.local;
  if (l.length > 0 || op.opcode == Opcode::kCompareSwap || op.opcode == Opcode::kFetchAdd) {
    if (l.region == nullptr) return Status::InvalidArgument("op without a local region");
    if (l.offset > l.region->size() || l.length > l.region->size() - l.offset) {
      return Status::InvalidArgument("local buffer outside its region");
    }
  }
  switch (op.opcode) {
    case Opcode::kRead:
    case Opcode::kWrite:
    case Opcode::kWriteWithImm:
      if (l.length > std::min(options_.max_transfer, peer_max_transfer_)) {
        return Status::TooLarge(std::to_string(l.length) + "-byte transfer over max_transfer");
      }
      if (op.persist && op.opcode == Opcode::kRead) {
        return Status::InvalidArgument("persist on a read");
      }
      break;
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd:
      if (l.length != 8) return Status::InvalidArgument("atomic needs an 8-byte local buffer");
      if (op.remote_offset % 8 != 0) return Status::InvalidArgument("atomic on a misaligned word");
      if (op.persist) return Status::InvalidArgument("persist on an atomic");
      break;
    default: return Status::InvalidArgument("unknown opcode");
  }
  return Status::OK();
}

Status ConnCore::Post(std::span<const Op> ops) {
  if (broken_.load()) return Status::Unavailable("connection to " + address_ + " is broken");
  for (const Op& op : ops) PDPM_RETURN_IF_ERROR(ValidateOp(op));
  Status sent;
  {
    std::lock_guard tx_lock(tx_mu_);
    PDPM_RETURN_IF_ERROR(QueueLocked(ops));
    sent = FlushLocked();
  }
  // The ops are queued; a send failure fails them through the connection.
  if (!sent.ok()) Fail(sent);
  return Status::OK();
}

Status ConnCore::QueueLocked(std::span<const Op> ops) {
  {
    std::lock_guard lock(state_mu_);
    if (broken_.load()) return Status::Unavailable("connection to " + address_ + " is broken");
    if (pending_.size() + ops.size() > options_.max_outstanding) {
      return Status::ResourceExhausted("more than " + std::to_string(options_.max_outstanding) +
                                       " ops outstanding");
    }
    Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options_.op_timeout_ms);
    for (const Op& op : ops) {
      uint64_t seq = next_seq_++;
      std::span<uint8_t> result;
      if (op.opcode == Opcode::kRead || op.opcode == Opcode::kCompareSwap ||
          op.opcode == Opcode::kFetchAdd) {
        if (op.local.length > 0) {
          result = {reinterpret_cast<uint8_t*>(op.local.region->data() + op.local.offset),
                    op.local.length};
        }
      }
      pending_.push_back({seq, op.id, op.opcode, op.signaled, result, deadline});
      if (op.signaled) signaled_outstanding_++;

      FrameHeader h;
      h.type = static_cast<FrameType>(op.opcode);
      h.flags = op.signaled ? kFlagAwaited : 0;
      h.seq = seq;
      h.key = op.remote_key;
      h.offset = op.remote_offset;
      TxEntry& e = txq_.emplace_back();
      switch (op.opcode) {
        case Opcode::kRead: h.read_length = op.local.length; break;
        case Opcode::kWriteWithImm: h.imm = op.imm; [[fallthrough]];
        case Opcode::kWrite:
          h.length = op.local.length;
          h.flags |= op.persist ? kFlagPersist : 0;
          if (op.local.length > 0) {
            e.payload = reinterpret_cast<const uint8_t*>(op.local.region->data() + op.local.offset);
            e.payload_length = op.local.length;
          }
          break;
        case Opcode::kCompareSwap:
          h.arg0 = op.compare_or_add;
          h.arg1 = op.swap;
          break;
        case Opcode::kFetchAdd: h.arg0 = op.compare_or_add; break;
      }
      EncodeFrameHeader(h, e.header);
      tx_backlog_.fetch_add(e.total());
    }
  }
  return Status::OK();
}

size_t ConnCore::PollCompletions(std::span<Completion> out) {
  ProgressFromPoller(Drainer::kCompletionPoller);
  CheckTimeout(Clock::now());
  std::lock_guard lock(state_mu_);
  size_t n = 0;
  while (n < out.size() && !completions_.empty()) {
    QueuedCompletion& c = completions_.front();
    if (c.signaled) signaled_outstanding_--;
    out[n++] = std::move(c.completion);
    completions_.pop_front();
  }
  return n;
}

size_t ConnCore::PollIncoming(std::span<Incoming> out) {
  ProgressFromPoller(Drainer::kIncomingPoller);
  std::lock_guard lock(state_mu_);
  size_t n = 0;
  while (n < out.size() && !incoming_.empty()) {
    out[n++] = incoming_.front();
    incoming_.pop_front();
  }
  return n;
}

Status ConnCore::ArmNotify() {
  FlushDeferred(Clock::duration::zero());  // nobody else would send them now
  int64_t now = Clock::now().time_since_epoch().count();
  last_touch_.store(now);
  // The socket is in the wait set: if the poller found it empty since it
  // last woke, the "poll once more" after arming need not read it (data
  // arriving wakes the waiter at once); it only looks at what progress
  // threads queued.
  if (!maybe_unread_.load()) emptied_at_.store(now);
  waiting_.store(true);
  armed_.store(true);
  if (broken_.load()) Notify();
  return Status::OK();
}

void ConnCore::AckNotify() {
  waiting_.store(false);
  maybe_unread_.store(true);
  if (!notified_.exchange(false)) return;
  uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(event_fd_.get(), &v, sizeof(v));
}

// ---------------------------------------------------------- ProgressThread

ProgressThread::ProgressThread(TcpTransport* transport)
    : transport_(transport),
      epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

ProgressThread::~ProgressThread() {
  stop_.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

Status ProgressThread::Start() {
  if (epoll_fd_.get() < 0 || wake_fd_.get() < 0) {
    return Status::FromErrno("tcp transport: epoll/eventfd", errno);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) {
    return Status::FromErrno("tcp transport: epoll_ctl", errno);
  }
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void ProgressThread::Add(const std::shared_ptr<ConnCore>& conn) {
  std::lock_guard lock(mu_);
  conn->set_thread(this);
  conns_[conn->id()] = conn;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = conn->id();
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, conn->fd_for_epoll(), &ev);
  // Data may have arrived before the socket was watched.
  kicked_.push_back(conn);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
}

void ProgressThread::Remove(const std::shared_ptr<ConnCore>& conn) {
  std::lock_guard lock(mu_);
  if (conns_.erase(conn->id()) != 0) {
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, conn->fd_for_epoll(), nullptr);
  }
}

void ProgressThread::WatchReceive(const std::shared_ptr<ConnCore>& conn, bool watch) {
  std::lock_guard lock(mu_);
  if (conns_.count(conn->id()) == 0) return;  // removed, maybe reconnecting
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLET | (watch ? EPOLLIN | EPOLLRDHUP : 0);
  ev.data.u64 = conn->id();
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, conn->fd_for_epoll(), &ev);
}

void ProgressThread::Kick(const std::shared_ptr<ConnCore>& conn) {
  std::lock_guard lock(mu_);
  kicked_.push_back(conn);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
}

Status ProgressThread::WatchListener(int fd) {
  listen_fd_ = fd;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return Status::FromErrno("tcp transport: epoll_ctl listener", errno);
  }
  return Status::OK();
}

void ProgressThread::Run() {
  epoll_event events[64];
  std::vector<std::shared_ptr<ConnCore>> ready;
  Clock::time_point next_tick = Clock::now();
  while (!stop_.load()) {
    const int tick_ms = static_cast<int>(transport_->options().progress_tick_ms);
    int timeout = ready.empty() ? tick_ms : 0;
    int n = ::epoll_wait(epoll_fd_.get(), events, 64, timeout);
    std::vector<std::shared_ptr<ConnCore>> work;
    work.swap(ready);
    for (int i = 0; i < n; i++) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_.get(), &v, sizeof(v));
        std::lock_guard lock(mu_);
        for (auto& c : kicked_) work.push_back(std::move(c));
        kicked_.clear();
      } else if (tag == kListenTag) {
        AcceptAll();
      } else if (tag & kHandshakeBit) {
        AdvanceHandshake(tag);
      } else {
        std::shared_ptr<ConnCore> conn;
        {
          std::lock_guard lock(mu_);
          auto it = conns_.find(tag);
          if (it != conns_.end()) conn = it->second;
        }
        if (!conn) continue;
        if (events[i].events & EPOLLOUT) conn->OnWritable();
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          if (conn->Attended(Clock::now())) {
            // Its poller drains it; stop waking up for its data meanwhile.
            conn->skipped.store(true);
            WatchReceive(conn, false);
          } else {
            work.push_back(std::move(conn));
          }
        }
      }
    }
    for (auto& conn : work) {
      if (conn->Progress()) ready.push_back(std::move(conn));
    }
    Clock::time_point now = Clock::now();
    if (now >= next_tick) {
      next_tick = now + std::chrono::milliseconds(tick_ms);
      std::vector<std::shared_ptr<ConnCore>> all;
      {
        std::lock_guard lock(mu_);
        for (auto& [id, c] : conns_) all.push_back(c);
      }
      for (auto& c : all) {
        c->FlushDeferred(Clock::duration::zero());
        c->CheckTimeout(now);
        if (c->skipped.load() && !c->Attended(now)) {
          c->skipped.store(false);
          WatchReceive(c, true);
          if (c->Progress()) ready.push_back(c);
        }
      }
      for (auto it = handshakes_.begin(); it != handshakes_.end();) {
        it = it->second.deadline <= now ? handshakes_.erase(it) : std::next(it);
      }
    }
  }
}

void ProgressThread::AcceptAll() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error: the next event retries
    uint64_t tag = kHandshakeBit | next_handshake_++;
    Handshake& h = handshakes_[tag];
    h.fd.reset(fd);
    h.deadline = Clock::now() + std::chrono::milliseconds(transport_->options().connect_timeout_ms);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = tag;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) handshakes_.erase(tag);
  }
}

void ProgressThread::AdvanceHandshake(uint64_t tag) {
  auto it = handshakes_.find(tag);
  if (it == handshakes_.end()) return;
  Handshake& h = it->second;
  for (;;) {
    size_t want;
    char* dst;
    if (h.have < kHelloSize) {
      want = kHelloSize - h.have;
      dst = reinterpret_cast<char*>(h.hello) + h.have;
    } else {
      want = kHelloSize + h.decoded.blob_length - h.have;
      dst = h.blob.data() + (h.have - kHelloSize);
    }
    if (want == 0) break;
    ssize_t r = ::recv(h.fd.get(), dst, want, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
      handshakes_.erase(it);  // closed or failed before finishing the hello
      return;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      return;  // wait for more
    }
    h.have += r;
    if (h.have == kHelloSize) {
      if (!DecodeHello(h.hello, &h.decoded).ok() || h.decoded.status != 0) {
        handshakes_.erase(it);  // garbage: drop this socket only
        return;
      }
      h.blob.resize(h.decoded.blob_length);
    }
  }
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, h.fd.get(), nullptr);
  UniqueFd fd = std::move(h.fd);
  Hello hello = h.decoded;
  std::string blob = std::move(h.blob);
  handshakes_.erase(it);
  transport_->Accept(std::move(fd), hello, blob);
}

// ------------------------------------------------------------ TcpTransport

Status TcpTransport::Listen(const std::string& address, AcceptHandler handler) {
  if (!handler.on_request || !handler.on_connected) {
    return Status::InvalidArgument("listen: both accept hooks are required");
  }
  std::lock_guard lock(mu_);
  if (listen_fd_.get() >= 0) return Status::FailedPrecondition("already listening");
  sockaddr_in addr;
  PDPM_RETURN_IF_ERROR(ResolveAddress(address, &addr));
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::FromErrno("listen: socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::FromErrno("listen: bind " + address, errno);
  }
  if (::listen(fd.get(), 1024) != 0) return Status::FromErrno("listen", errno);
  socklen_t len = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  listen_address_ = FormatAddress(addr);
  handler_ = std::move(handler);
  listen_fd_ = std::move(fd);
  return threads_[0]->WatchListener(listen_fd_.get());
}

Status TcpTransport::Dial(const std::string& address, uint32_t core, std::string_view local_blob,
                          UniqueFd* out_fd, std::string* peer_blob,
                          uint32_t* peer_max_transfer) const {
  if (local_blob.size() > kMaxConnectBlob) {
    return Status::InvalidArgument("connect blob over " + std::to_string(kMaxConnectBlob) +
                                   " bytes");
  }
  sockaddr_in addr;
  PDPM_RETURN_IF_ERROR(ResolveAddress(address, &addr));
  Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(options_.connect_timeout_ms);
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::FromErrno("connect: socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      return Status::Unavailable("connect to " + address + ": " + ErrnoText(errno));
    }
    PDPM_RETURN_IF_ERROR(WaitFd(fd.get(), POLLOUT, deadline, "connect").WithContext(address));
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Status::Unavailable("connect to " + address + ": " + ErrnoText(err));
  }
  SetNoDelay(fd.get());
  uint8_t hello_bytes[kHelloSize];
  Hello hello;
  hello.core = core;
  hello.max_transfer = options_.max_transfer;
  hello.blob_length = local_blob.size();
  EncodeHello(hello, hello_bytes);
  std::string out(reinterpret_cast<char*>(hello_bytes), kHelloSize);
  out.append(local_blob);
  PDPM_RETURN_IF_ERROR(SendAll(fd.get(), out.data(), out.size(), deadline).WithContext(address));
  uint8_t reply_bytes[kHelloReplySize];
  PDPM_RETURN_IF_ERROR(
      RecvAll(fd.get(), reply_bytes, sizeof(reply_bytes), deadline).WithContext(address));
  Hello reply;
  PDPM_RETURN_IF_ERROR(DecodeHello(reply_bytes, &reply).WithContext(address));
  std::string blob(reply.blob_length, '\0');
  PDPM_RETURN_IF_ERROR(RecvAll(fd.get(), blob.data(), blob.size(), deadline).WithContext(address));
  if (reply.status != 0) {
    return Status(static_cast<StatusCode>(reply.status), address + " refused: " + blob);
  }
  *out_fd = std::move(fd);
  *peer_blob = std::move(blob);
  *peer_max_transfer = reply.max_transfer;
  return Status::OK();
}

Status TcpTransport::Connect(const std::string& address, uint32_t core, std::string_view local_blob,
                             std::unique_ptr<Connection>* out) {
  UniqueFd fd;
  std::string peer_blob;
  uint32_t peer_max_transfer;
  PDPM_RETURN_IF_ERROR(Dial(address, core, local_blob, &fd, &peer_blob, &peer_max_transfer));
  ConnCore::DialFn dial = [this, address, core, blob = std::string(local_blob)](
                              UniqueFd* fd, std::string* peer_blob, uint32_t* max_transfer) {
    return Dial(address, core, blob, fd, peer_blob, max_transfer);
  };
  auto conn = std::make_shared<ConnCore>(options_, table_, std::move(dial), address, core,
                                         std::string(local_blob), std::move(fd),
                                         std::move(peer_blob), peer_max_transfer, NextConnId());
  ThreadFor(core)->Add(conn);
  *out = std::make_unique<TcpConnection>(std::move(conn));
  return Status::OK();
}

void TcpTransport::Accept(UniqueFd fd, const Hello& hello, const std::string& blob) {
  uint32_t core = hello.core % std::max<uint32_t>(options_.cores, 1);
  std::string reply_blob;
  Status s = handler_.on_request(core, {reinterpret_cast<const uint8_t*>(blob.data()), blob.size()},
                                 &reply_blob);
  if (s.ok() && reply_blob.size() > kMaxConnectBlob) {
    s = Status::Internal("accept handler produced an oversize reply blob");
  }
  Hello reply;
  reply.core = options_.cores;
  reply.max_transfer = options_.max_transfer;
  if (!s.ok()) {
    reply.status = static_cast<uint16_t>(s.code());
    reply_blob = std::string(s.message().substr(0, kMaxConnectBlob));
  }
  reply.blob_length = reply_blob.size();
  uint8_t bytes[kHelloReplySize];
  EncodeHello(reply, bytes);
  std::string out(reinterpret_cast<char*>(bytes), sizeof(bytes));
  out.append(reply_blob);
  // A fresh socket's send buffer takes the short reply at once.
  ssize_t w = ::send(fd.get(), out.data(), out.size(), MSG_NOSIGNAL);
  if (!s.ok() || w != static_cast<ssize_t>(out.size())) return;
  SetNoDelay(fd.get());
  sockaddr_in peer{};
  socklen_t len = sizeof(peer);
  ::getpeername(fd.get(), reinterpret_cast<sockaddr*>(&peer), &len);
  auto conn = std::make_shared<ConnCore>(options_, table_, ConnCore::DialFn(), FormatAddress(peer),
                                         core, std::move(reply_blob), std::move(fd), blob,
                                         hello.max_transfer, NextConnId());
  ThreadFor(core)->Add(conn);
  handler_.on_connected(std::make_unique<TcpConnection>(std::move(conn)));
}

Status ConnCore::Reconnect() {
  if (!dial_) {
    return Status::FailedPrecondition(
        "an accepted connection cannot reconnect; its peer reconnects");
  }
  {
    std::lock_guard lock(rx_mu_);
    FailLocked(Status::Unavailable("connection to " + address_ + " is reconnecting"));
  }
  thread_->Remove(shared_from_this());
  UniqueFd fd;
  std::string blob;
  uint32_t max_transfer;
  PDPM_RETURN_IF_ERROR(dial_(&fd, &blob, &max_transfer));
  {
    std::lock_guard rx_lock(rx_mu_);
    std::lock_guard tx_lock(tx_mu_);
    fd_ = std::move(fd);
    WatchSocketForWaiters();
    peer_blob_ = std::move(blob);
    peer_max_transfer_ = max_transfer;
    machine_.Reset();
    tx_error_ = Status::OK();
    rx_paused_.store(false);
    broken_.store(false);
  }
  thread_->Add(shared_from_this());
  return Status::OK();
}

}  // namespace

Status CreateTcpTransport(const TransportOptions& options, std::unique_ptr<Transport>* out) {
  if (options.max_transfer == 0 || options.max_outstanding == 0 || options.progress_tick_ms == 0) {
    return Status::InvalidArgument(
        "max_transfer, max_outstanding and progress_tick_ms must be positive");
  }
  auto t = std::make_unique<TcpTransport>(options);
  PDPM_RETURN_IF_ERROR(t->Init());
  *out = std::move(t);
  return Status::OK();
}

}  // namespace pdpm::net::tcp
