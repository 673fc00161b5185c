// Leadership: which of several monitors sharing one etcd cluster serves the
// view (docs/monitor.md, "High availability"). Consensus is etcd's; this
// is a client of it.
//
// A campaign thread runs the protocol:
//   standby   every poll (TTL/6) reads P/leader; when it is absent, grants a
//             lease of TTL and creates P/leader = own address under it in
//             one transaction (create_revision == 0), so one candidate wins.
//   leader    loads the view from etcd (ViewManager::Open: every server
//             gets a full liveness timeout of grace) and serves it; keeps
//             the lease alive every TTL/4 and checks that P/leader is still
//             its own. It acts as leader only until (send time of the last
//             successful keep-alive + granted TTL - TTL/3): a leader cut
//             off from etcd stops before its lease can expire there, so two
//             monitors never both serve. On a lapsed deadline, a lost key,
//             an expired lease or any failed view put it drops its view,
//             revokes its lease (best effort) and campaigns again.
// Every view change is in any case guarded by the lease in etcd
// (etcd_view_store.h): a deposed leader cannot write even with a wrong clock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/log.h"
#include "common/status.h"
#include "monitor/etcd/etcd_client.h"
#include "monitor/etcd/etcd_view_store.h"
#include "monitor/view_manager.h"

namespace pdpm::monitor {

struct LeadershipOptions {
  std::string prefix = "/pdpm/default";  // etcd key prefix of this cluster
  std::string self;                      // this monitor's gRPC address
  std::chrono::milliseconds lease_ttl{3000};
  MonitorOptions monitor;  // for the view a new leader opens

  // InvalidArgument naming the bad option.
  Status Validate() const;
};

class Leadership {
 public:
  // `client` is not owned and outlives this.
  Leadership(EtcdClient* client, LeadershipOptions options, const Logger& log);
  // Stop()s.
  ~Leadership();

  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // Starts campaigning.
  void Start();
  // Stops the campaign thread; a leader resigns (revokes its lease) so a
  // standby takes over at once.
  void Stop();

  // The view manager to serve a call from while this monitor is the leader
  // within its local deadline; else kUnavailable "not the leader; leader
  // is ADDRESS" (or "... no leader is elected yet").
  Status Current(std::shared_ptr<ViewManager>* views);
  // ViewManager::CheckLiveness of the current term, if leading.
  void CheckLiveness();

  // An error that keeps this monitor from ever leading (its flags
  // contradict the stored view, the stored view is corrupt); OK otherwise.
  // The campaign thread has stopped when it is set.
  Status fatal();

 private:
  using Clock = std::chrono::steady_clock;
  // What a leader serves from, for one term (one lease).
  struct Term {
    int64_t lease = 0;
    std::unique_ptr<EtcdViewStore> store;
    std::unique_ptr<ViewManager> views;
  };

  void Run();
  // One standby round: returns with term_ set when this monitor won.
  void Campaign();
  // One leader round: keep-alive, check the key, end the term when needed.
  void Renew();
  void EndTerm(const std::string& why);
  // Logs a failed etcd step, once while it keeps failing the same way.
  void Problem(const std::string& what, const Status& s);
  bool WaitFor(std::chrono::milliseconds d);  // false once stopping

  EtcdClient* const client_;
  const LeadershipOptions options_;
  const EtcdKeys keys_;
  const Logger log_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::shared_ptr<Term> term_;
  Clock::time_point valid_until_;  // of term_
  std::string known_leader_;       // last seen value of the leader key
  Status fatal_;
  std::string last_problem_;  // campaign thread only
  std::thread thread_;
};

}  // namespace pdpm::monitor
