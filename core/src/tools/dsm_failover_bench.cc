// dsm_failover_bench: how long data is unavailable when its server dies
// (scripts/bench-dsm.sh, docs/benchmarks.md). Starts its own cluster —
// a monitor and three servers on file-backed PM, two copies of every
// segment, the heartbeat timing of the replicated cluster test (50 ms
// heartbeats, 500 ms down timeout: no live server is declared DOWN on a
// loaded machine) — then, round after round: waits until
// the segment of a 64 KiB heap block has an in-sync backup, kills its
// primary's server with SIGKILL, and times until a Write of the block
// through libpdpm succeeds again (and reads back); then restarts that
// server (it comes back fenced and becomes a backup). With --data-mib the
// cluster first holds that much data (1 MiB blocks, two copies): a server
// killed with data has that much PM mapped, which the kernel unmaps when
// the process dies. The client that
// loses its connection reports the server, and the monitor fails it over
// once its address refuses connections (docs/replication.md), so the
// figure does not depend on the down timeout.
//
// --freeze stops the server with SIGSTOP instead: it closes nothing, so
// only its silence tells — the monitor's down timeout (its lease has run
// out by then), and the client's wait on the hung server ends once the
// view moved (docs/replication.md "Leases"). After the timed write the
// server is woken, killed and restarted, as after a kill.
//
//   dsm_failover_bench [--rounds 10] [--data-mib 0] [--freeze]
//                      [--heartbeat-interval 50ms] [--suspect-timeout 200ms]
//                      [--down-timeout 500ms]
//
// Prints "FIGURE failover.ms <median> ms" (--freeze: "FIGURE
// failover.freeze.ms <median> ms <worst>"), then "REF down_timeout <ms> ms".
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/cluster_harness.h"
#include "common/flags.h"
#include "monitor/monitor_client.h"

namespace pdpm::tools {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "dsm_failover_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// The index of the server holding `segment`'s primary once every segment
// has an in-sync backup (a round never kills the last copy of any data).
Status WaitReplicated(client::LocalCluster& cluster, uint32_t segment, int* primary) {
  monitor::MonitorClient mc(cluster.monitor_address(), {cluster.secret()});
  auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    v1::GetMappingResponse m;
    PDPM_RETURN_IF_ERROR(mc.GetMapping(0, &m));
    bool all_in_sync = true;
    for (const auto& seg : m.segments()) {
      bool in_sync = false;
      for (const auto& b : seg.backups()) in_sync |= b.state() == v1::REPLICA_STATE_IN_SYNC;
      all_in_sync &= in_sync;
    }
    for (const auto& seg : m.segments()) {
      if (seg.segment() != segment || !all_in_sync) continue;
      for (const auto& s : m.servers()) {
        if (s.id() != seg.primary().server_id()) continue;
        for (int i = 0; i < 3; i++) {
          if (cluster.server_address(i) == s.address()) {
            *primary = i;
            return Status::OK();
          }
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Timeout("segment " + std::to_string(segment) + " never had an in-sync backup");
}

int Run(int argc, char** argv) {
  uint32_t rounds = 10;
  uint32_t data_mib = 0;
  bool freeze = false;
  std::chrono::milliseconds heartbeat{50}, suspect{200}, down{500};
  FlagParser parser("dsm_failover_bench");
  parser.AddUint32("rounds", &rounds, "kills to time (default 10)");
  parser.AddUint32("data-mib", &data_mib, "data the cluster holds during the rounds (default 0)");
  parser.AddBool("freeze", &freeze, "stop the server (SIGSTOP) instead of killing it");
  parser.AddDuration("heartbeat-interval", &heartbeat, "monitor heartbeat interval (50ms)");
  parser.AddDuration("suspect-timeout", &suspect, "monitor suspect timeout (200ms)");
  parser.AddDuration("down-timeout", &down, "monitor down timeout (500ms)");
  Status s = parser.Parse(argc, argv);
  if (s.ok() && parser.PrintUsageIfAsked()) return 0;
  if (s.ok() && rounds == 0) s = Status::InvalidArgument("--rounds must be positive");
  if (!s.ok()) {
    std::fprintf(stderr, "dsm_failover_bench: %s\n%s", s.ToString().c_str(),
                 parser.Usage().c_str());
    return 2;
  }
  client::LocalClusterOptions o;
  o.replicas = 2;
  o.segment_size = 64ull << 20;
  // Eight segments, and room for each server's share of the data's two
  // copies (63 blocks of 1 MiB fill a 64 MiB segment).
  const uint64_t data_segments = (uint64_t{data_mib} * 2 / 3 + 62) / 63 + 1;
  o.pm_size = ((8 + (data_mib > 0 ? data_segments : 0)) * 64 + 2) * (1ull << 20);
  o.heartbeat_ms = static_cast<uint32_t>(heartbeat.count());
  o.suspect_ms = static_cast<uint32_t>(suspect.count());
  o.down_ms = static_cast<uint32_t>(down.count());
  client::LocalCluster cluster(o);
  s = cluster.Start();
  if (!s.ok()) return Fail("start the cluster", s);
  client::ClientOptions co;
  co.monitor = cluster.monitor_address();
  co.cluster_secret = cluster.secret();
  std::unique_ptr<client::Client> c;
  s = client::Client::Open(co, &c);
  if (!s.ok()) return Fail("connect", s);
  constexpr uint64_t kBlock = 64 << 10;
  client::GlobalAddress block;
  s = c->PAllocate(kBlock, &block);
  if (!s.ok()) return Fail("pallocate", s);
  std::string filler(1 << 20, 'd');
  for (uint32_t i = 0; i < data_mib; i++) {
    client::GlobalAddress at;
    s = c->PAllocate(filler.size(), &at);
    if (s.ok()) s = c->Write(at, filler.data(), filler.size());
    if (!s.ok()) return Fail("store the data", s);
  }
  std::string data(kBlock, '\0'), back(kBlock, '\0');
  std::vector<double> times;
  for (uint32_t r = 0; r < rounds; r++) {
    for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i * 31 + r);
    int victim = -1;
    s = WaitReplicated(cluster, block.segment, &victim);
    if (!s.ok()) return Fail("round " + std::to_string(r), s);
    auto start = Clock::now();
    if (freeze) {
      s = cluster.server(victim).Freeze();
      if (!s.ok()) return Fail("freeze server " + std::to_string(victim), s);
    } else {
      cluster.KillServer(victim);
    }
    auto reaped = Clock::now();  // killed: the kernel has torn the process down
    s = c->Write(block, data.data(), kBlock);
    auto end = Clock::now();
    if (freeze) {
      cluster.server(victim).Signal(SIGCONT);
      cluster.KillServer(victim);
    }
    if (!s.ok()) return Fail(freeze ? "write after the freeze" : "write after the kill", s);
    s = c->Read(block, back.data(), kBlock);
    if (!s.ok() || back != data)
      return Fail("read back", s.ok() ? Status::Corruption("differs") : s);
    times.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    if (freeze) {
      std::fprintf(stderr, "round %u: server %d stopped, %.1f ms\n", r, victim, times.back());
    } else {
      std::fprintf(stderr, "round %u: server %d killed, %.1f ms (%.1f ms of it until reaped)\n", r,
                   victim, times.back(),
                   std::chrono::duration<double, std::milli>(reaped - start).count());
    }
    s = cluster.StartServer(victim);
    if (!s.ok()) return Fail("restart server " + std::to_string(victim), s);
  }
  std::sort(times.begin(), times.end());
  double median = times.size() % 2 ? times[times.size() / 2]
                                   : (times[times.size() / 2 - 1] + times[times.size() / 2]) / 2;
  if (freeze) {
    std::printf("FIGURE failover.freeze.ms %.1f ms %.1f\n", median, times.back());
  } else {
    std::printf("FIGURE failover.ms %.1f ms\n", median);
  }
  std::printf("REF down_timeout %lld ms\n", static_cast<long long>(down.count()));
  return 0;
}

}  // namespace
}  // namespace pdpm::tools

int main(int argc, char** argv) {
  return pdpm::tools::Run(argc, argv);
}
