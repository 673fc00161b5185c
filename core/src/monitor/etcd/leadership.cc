#include "monitor/etcd/leadership.h"

#include "monitor/monitor_client.h"

namespace pdpm::monitor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

int64_t WholeSeconds(milliseconds d) {
  return static_cast<int64_t>((d.count() + 999) / 1000);
}

}  // namespace

Status LeadershipOptions::Validate() const {
  if (lease_ttl < seconds(1) || lease_ttl.count() % 1000 != 0) {
    return Status::InvalidArgument(
        "--lease-ttl must be a whole number of seconds, at least 1s (etcd leases are)");
  }
  if (prefix.empty() || prefix.front() != '/' || prefix.back() == '/') {
    return Status::InvalidArgument("--etcd-prefix \"" + prefix +
                                   "\" must start with / and not end with one");
  }
  if (self.empty()) return Status::InvalidArgument("the monitor's own address is not known");
  return monitor.Validate();
}

Leadership::Leadership(EtcdClient* client, LeadershipOptions options, const Logger& log)
    : client_(client),
      options_(std::move(options)),
      keys_(EtcdKeys::ForPrefix(options_.prefix)),
      log_(log) {}

Leadership::~Leadership() {
  Stop();
}

void Leadership::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Leadership::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  EndTerm("the monitor is stopping");
}

Status Leadership::fatal() {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

bool Leadership::WaitFor(milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stopping_; });
}

Status Leadership::Current(std::shared_ptr<ViewManager>* views) {
  std::lock_guard<std::mutex> lock(mu_);
  if (term_ != nullptr && Clock::now() < valid_until_ && !term_->store->broken()) {
    *views = std::shared_ptr<ViewManager>(term_, term_->views.get());
    return Status::OK();
  }
  std::string msg = kNotLeaderMessage;
  if (known_leader_.empty() || known_leader_ == options_.self) {
    msg += "; no leader is elected yet";
  } else {
    msg += kLeaderIsMessage + known_leader_;
  }
  return Status::Unavailable(msg);
}

void Leadership::CheckLiveness() {
  std::shared_ptr<ViewManager> views;
  if (Current(&views).ok()) views->CheckLiveness();
}

void Leadership::Run() {
  const milliseconds poll = options_.lease_ttl / 6;
  const milliseconds keep_alive = options_.lease_ttl / 4;
  while (true) {
    bool leading;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || !fatal_.ok()) return;
      leading = term_ != nullptr;
    }
    if (leading) {
      if (!WaitFor(keep_alive)) return;
      Renew();
      continue;
    }
    Campaign();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (term_ != nullptr) continue;  // won: renew from now on
    }
    if (!WaitFor(poll)) return;
  }
}

void Leadership::Campaign() {
  etcdserverpb::KeyValue kv;
  bool found = false;
  Status s = client_->Get(keys_.leader, &kv, &found);
  if (!s.ok()) {
    Problem("cannot read the leader key", s);
    return;
  }
  last_problem_.clear();
  if (found) {
    std::lock_guard<std::mutex> lock(mu_);
    if (known_leader_ != kv.value()) {
      log_.Info("following the leader", {{"leader", kv.value()}});
      known_leader_ = kv.value();
    }
    return;
  }

  // The key is free: run for it. The lease's clock starts no earlier than
  // this moment, so a deadline counted from here is conservative.
  const auto sent = Clock::now();
  int64_t lease = 0, granted = 0;
  s = client_->LeaseGrant(WholeSeconds(options_.lease_ttl), &lease, &granted);
  if (!s.ok()) {
    Problem("cannot obtain an etcd lease", s);
    return;
  }
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* free = txn.add_compare();
  free->set_key(keys_.leader);
  free->set_target(etcdserverpb::Compare::CREATE);
  free->set_result(etcdserverpb::Compare::EQUAL);
  free->set_create_revision(0);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(keys_.leader);
  put->set_value(options_.self);
  put->set_lease(lease);
  txn.add_failure()->mutable_request_range()->set_key(keys_.leader);
  etcdserverpb::TxnResponse resp;
  s = client_->Txn(txn, &resp);
  const etcdserverpb::KeyValue* holder = nullptr;
  if (s.ok() && !resp.succeeded() && resp.responses_size() == 1 &&
      resp.responses(0).response_range().kvs_size() == 1) {
    holder = &resp.responses(0).response_range().kvs(0);
  }
  // A repeated transaction whose first attempt won finds the key under its
  // own lease.
  bool won = s.ok() && (resp.succeeded() || (holder != nullptr && holder->lease() == lease));
  if (!won) {
    (void)client_->LeaseRevoke(lease);  // best effort: it expires anyway
    std::lock_guard<std::mutex> lock(mu_);
    if (holder != nullptr) known_leader_ = holder->value();
    if (!s.ok()) Problem("campaign failed", s);
    return;
  }

  auto term = std::make_shared<Term>();
  term->lease = lease;
  term->store = std::make_unique<EtcdViewStore>(client_, keys_, lease);
  s = ViewManager::Open(term->store.get(), options_.monitor, log_, &term->views);
  if (!s.ok()) {
    (void)client_->LeaseRevoke(lease);
    bool hopeless = s.code() == StatusCode::kFailedPrecondition ||
                    s.code() == StatusCode::kCorruption || s.code() == StatusCode::kInvalidArgument;
    log_.Log(hopeless ? LogLevel::kError : LogLevel::kWarn,
             "elected but cannot load the cluster view; resigned", {{"status", s}});
    std::lock_guard<std::mutex> lock(mu_);
    if (hopeless) fatal_ = s;
    return;
  }
  term->views->SetLeaderAddress(options_.self);
  uint64_t epoch = term->views->epoch();
  std::lock_guard<std::mutex> lock(mu_);
  term_ = std::move(term);
  valid_until_ = sent + seconds(granted) - options_.lease_ttl / 3;
  known_leader_ = options_.self;
  log_.Info("elected leader", {{"lease", lease}, {"ttl_s", granted}, {"epoch", epoch}});
}

void Leadership::Renew() {
  std::shared_ptr<Term> term;
  {
    std::lock_guard<std::mutex> lock(mu_);
    term = term_;
  }
  const auto sent = Clock::now();
  int64_t ttl = 0;
  Status s = client_->LeaseKeepAlive(term->lease, &ttl);
  if (s.code() == StatusCode::kNotFound) return EndTerm("the lease expired in etcd");
  if (s.ok()) {
    etcdserverpb::KeyValue kv;
    bool found = false;
    s = client_->Get(keys_.leader, &kv, &found);
    if (s.ok() && (!found || kv.lease() != term->lease)) {
      return EndTerm("the leader key is no longer this monitor's");
    }
    if (s.ok()) {
      last_problem_.clear();
      std::lock_guard<std::mutex> lock(mu_);
      valid_until_ = sent + seconds(ttl) - options_.lease_ttl / 3;
    }
  }
  if (!s.ok()) Problem("cannot renew the leadership", s);
  if (term->store->broken()) return EndTerm("a view change failed to store");
  Clock::time_point until;
  {
    std::lock_guard<std::mutex> lock(mu_);
    until = valid_until_;
  }
  if (Clock::now() >= until) EndTerm("no keep-alive reached etcd within the lease deadline");
}

void Leadership::Problem(const std::string& what, const Status& s) {
  std::string problem = what + ": " + s.ToString();
  if (problem == last_problem_) return;
  last_problem_ = problem;
  log_.Warn(what, {{"status", s}});
}

void Leadership::EndTerm(const std::string& why) {
  std::shared_ptr<Term> term;
  {
    std::lock_guard<std::mutex> lock(mu_);
    term = std::move(term_);
    term_ = nullptr;
    known_leader_.clear();
  }
  if (term == nullptr) return;
  log_.Warn("stepping down as leader", {{"reason", why}, {"lease", term->lease}});
  // Frees the leader key for the standbys at once; when etcd cannot be
  // reached the lease simply expires.
  (void)client_->LeaseRevoke(term->lease);
}

}  // namespace pdpm::monitor
