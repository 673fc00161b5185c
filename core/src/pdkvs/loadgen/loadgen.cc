#include "pdkvs/loadgen/loadgen.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "pdkvs/loadgen/reply.h"
#include "pdkvs/loadgen/verifier.h"

namespace pdpm::pdkvs::loadgen {

size_t LatencyHistogram::BucketOf(uint64_t ns) {
  if (ns < 64) return ns;
  int e = 63 - std::countl_zero(ns);  // >= 6
  return 64 + static_cast<size_t>(e - 6) * 32 + ((ns >> (e - 5)) & 31);
}

uint64_t LatencyHistogram::BucketMiddle(size_t bucket) {
  if (bucket < 64) return bucket;
  int e = static_cast<int>((bucket - 64) / 32) + 6;
  uint64_t sub = (bucket - 64) % 32;
  uint64_t low = (32 + sub) << (e - 5);
  return low + (uint64_t{1} << (e - 5)) / 2;
}

void LatencyHistogram::Record(uint64_t ns) {
  ++buckets_[BucketOf(ns)];
  ++count_;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
}

uint64_t LatencyHistogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  auto rank = static_cast<uint64_t>(p * static_cast<double>(count_));
  if (rank >= count_) rank = count_ - 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen > rank) return BucketMiddle(i);
  }
  return BucketMiddle(kBuckets - 1);
}

namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// One request in flight, in the order of its connection's replies.
struct Pending {
  bool is_read;
  uint64_t key;
  uint64_t write;  // SET: its write number
  uint64_t floor;  // GET: the key's floor when it was sent
  int64_t start_ns;
};

struct Connection {
  int fd = -1;
  std::string out;
  size_t out_sent = 0;
  std::string in;
  size_t in_parsed = 0;
  std::deque<Pending> pending;
  Rng rng;
  explicit Connection(uint64_t seed) : rng(seed) {}
  ~Connection() {
    if (fd >= 0) close(fd);
  }
};

// What the worker threads of one run share.
class Run {
 public:
  explicit Run(const LoadgenOptions& o)
      : opt_(o),
        chooser_(o.distribution, o.records),
        verifier_(o.workload, o.records, o.records + o.ops) {
    run_budget_.store(static_cast<int64_t>(o.ops));
  }

  // Drives `conns` through one phase until its operations are done, the
  // deadline passed (run phase), or the run failed.
  void Drive(std::vector<Connection*> conns, bool load, Clock::time_point deadline,
             PhaseResult* result);

  bool failed() const { return failed_.load(); }
  Status fatal() {
    std::lock_guard lock(mu_);
    return fatal_;
  }
  std::vector<std::string> errors() {
    std::lock_guard lock(mu_);
    return errors_;
  }

 private:
  void Fail(Status status);
  void WrongAnswer(const std::string& what);
  void Issue(Connection* c, bool load, bool time_up);
  void Request(Connection* c, Pending p);
  void Complete(Connection* c, const Reply& reply, PhaseResult* result);

  const LoadgenOptions& opt_;
  KeyChooser chooser_;
  std::atomic<uint64_t> next_record_{0};
  std::atomic<int64_t> run_budget_{0};
  Verifier verifier_;
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  Status fatal_;
  std::vector<std::string> errors_;
};

void Run::Fail(Status status) {
  std::lock_guard lock(mu_);
  if (fatal_.ok()) fatal_ = std::move(status);
  failed_.store(true);
}

void Run::WrongAnswer(const std::string& what) {
  {
    std::lock_guard lock(mu_);
    if (errors_.size() < 20) errors_.push_back(what);
  }
  Fail(Status::Corruption("wrong answer: " + what));
}

void AppendBulk(std::string* out, std::string_view s) {
  *out += '$';
  *out += std::to_string(s.size());
  *out += "\r\n";
  *out += s;
  *out += "\r\n";
}

void Run::Request(Connection* c, Pending p) {
  std::string key = opt_.workload.Key(p.key);
  if (p.is_read) {
    p.floor = verifier_.ReadSent(p.key);
    c->out += "*2\r\n$3\r\nGET\r\n";
    AppendBulk(&c->out, key);
  } else {
    p.write = verifier_.WriteSent(p.key);
    c->out += "*3\r\n$3\r\nSET\r\n";
    AppendBulk(&c->out, key);
    AppendBulk(&c->out, opt_.workload.Value(p.write));
  }
  p.start_ns = NowNs();
  c->pending.push_back(p);
}

void Run::Issue(Connection* c, bool load, bool time_up) {
  if (load) {
    while (c->pending.size() < opt_.load_pipeline) {
      uint64_t record = next_record_.fetch_add(1);
      if (record >= opt_.records) return;
      Request(c, Pending{false, record, 0, 0, 0});
    }
    return;
  }
  while (!time_up && c->pending.size() < opt_.pipeline && run_budget_.fetch_sub(1) > 0) {
    bool is_read = c->rng.NextDouble() < opt_.workload.read_fraction;
    Request(c, Pending{is_read, chooser_.Next(c->rng), 0, 0, 0});
  }
}

void Run::Complete(Connection* c, const Reply& reply, PhaseResult* result) {
  Pending p = c->pending.front();
  c->pending.pop_front();
  result->latency.Record(static_cast<uint64_t>(NowNs() - p.start_ns));
  ++result->ops;
  std::string wrong;
  if (p.is_read) {
    ++result->reads;
    wrong = verifier_.CheckRead(p.key, p.floor, reply);
  } else {
    ++result->writes;
    wrong = verifier_.WriteAnswered(p.key, p.write, reply);
  }
  if (!wrong.empty()) WrongAnswer(wrong);
}

// A server that neither reads nor answers for this long fails the run.
constexpr auto kStallTimeout = std::chrono::seconds(10);

void Run::Drive(std::vector<Connection*> conns, bool load, Clock::time_point deadline,
                PhaseResult* result) {
  std::vector<pollfd> fds(conns.size());
  char buf[64 << 10];
  auto progress = Clock::now();  // the last byte sent or received
  while (!failed()) {
    bool time_up = !load && Clock::now() >= deadline;
    size_t busy = 0;
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection* c = conns[i];
      Issue(c, load, time_up);
      fds[i] = pollfd{c->fd, 0, 0};
      if (!c->pending.empty()) fds[i].events |= POLLIN;
      if (c->out_sent < c->out.size()) fds[i].events |= POLLOUT;
      if (fds[i].events) ++busy;
    }
    if (busy == 0) return;
    int n = poll(fds.data(), fds.size(), 1000);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail(Status::FromErrno("poll", errno));
    }
    if (n > 0) {
      progress = Clock::now();
    } else if (Clock::now() - progress > kStallTimeout) {
      return Fail(Status::Timeout("the server sent nothing for 10 s with requests pending"));
    }
    for (size_t i = 0; i < conns.size() && !failed(); ++i) {
      Connection* c = conns[i];
      if (fds[i].revents & POLLOUT) {
        ssize_t w =
            send(c->fd, c->out.data() + c->out_sent, c->out.size() - c->out_sent, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
          return Fail(Status::FromErrno("send", errno));
        if (w > 0) c->out_sent += static_cast<size_t>(w);
        if (c->out_sent == c->out.size()) {
          c->out.clear();
          c->out_sent = 0;
        }
      }
      if (!(fds[i].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
      if (r == 0) return Fail(Status::Unavailable("the server closed a connection"));
      if (r < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return Fail(Status::FromErrno("recv", errno));
      }
      c->in.append(buf, static_cast<size_t>(r));
      while (!failed()) {
        size_t used;
        Reply reply;
        ReplyParse parse = ParseReply(std::string_view(c->in).substr(c->in_parsed), &used, &reply);
        if (parse == ReplyParse::kIncomplete) break;
        if (parse == ReplyParse::kError || c->pending.empty()) {
          return Fail(Status::Corruption("malformed or unrequested reply from the server"));
        }
        Complete(c, reply, result);
        c->in_parsed += used;
      }
      c->in.erase(0, c->in_parsed);
      c->in_parsed = 0;
    }
  }
}

Status Connect(const LoadgenOptions& o, Connection* c) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(o.port));
  if (inet_pton(AF_INET, o.host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("host must be an IPv4 address: " + o.host);
  }
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0) return Status::FromErrno("socket", errno);
  if (connect(c->fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::FromErrno("connect to " + o.host + ":" + std::to_string(o.port), errno);
  }
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int flags = fcntl(c->fd, F_GETFL);
  if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return Status::FromErrno("fcntl", errno);
  }
  return Status::OK();
}

// The write log holds a chunk pointer per 64 Ki possible writes.
constexpr uint64_t kMaxOps = 1'000'000'000'000;

Status CheckOptions(const LoadgenOptions& o) {
  PDPM_RETURN_IF_ERROR(o.workload.CheckRecords(o.records));
  if (o.connections == 0 || o.pipeline == 0 || o.load_pipeline == 0 || o.threads == 0) {
    return Status::InvalidArgument("connections, pipeline, load-pipeline and threads must be > 0");
  }
  if (o.ops > kMaxOps) return Status::InvalidArgument("ops must be at most 10^12");
  if (o.port == 0 || o.port > 65535) return Status::InvalidArgument("port must be 1..65535");
  return Status::OK();
}

}  // namespace

Status RunLoadgen(const LoadgenOptions& options, LoadgenResult* result) {
  PDPM_RETURN_IF_ERROR(CheckOptions(options));
  Run run(options);
  std::vector<std::unique_ptr<Connection>> conns;
  for (uint32_t i = 0; i < options.connections; ++i) {
    conns.push_back(std::make_unique<Connection>(Mix64(options.seed) ^ Mix64(i + 1)));
    PDPM_RETURN_IF_ERROR(Connect(options, conns.back().get()));
  }
  uint32_t threads = std::min(options.threads, options.connections);
  auto phase = [&](bool load, PhaseResult* out) {
    std::vector<PhaseResult> parts(threads);
    std::vector<std::thread> workers;
    auto start = Clock::now();
    auto deadline = start + options.duration;
    for (uint32_t t = 0; t < threads; ++t) {
      std::vector<Connection*> mine;
      for (size_t i = t; i < conns.size(); i += threads) mine.push_back(conns[i].get());
      workers.emplace_back([&run, mine, load, deadline, part = &parts[t]] {
        run.Drive(mine, load, deadline, part);
      });
    }
    for (std::thread& w : workers) w.join();
    out->seconds = std::chrono::duration<double>(Clock::now() - start).count();
    for (const PhaseResult& p : parts) {
      out->ops += p.ops;
      out->reads += p.reads;
      out->writes += p.writes;
      out->latency.Merge(p.latency);
    }
  };
  phase(true, &result->load);
  if (!run.failed()) phase(false, &result->run);
  result->errors = run.errors();
  return run.fatal();
}

}  // namespace pdpm::pdkvs::loadgen
