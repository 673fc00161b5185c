// pdkvs-loadgen: YCSB A/B/C, ETC and SYS against any RESP2 server (the
// pDKVS gateway, Redis), every reply verified (docs/pdkvs.md).
//
// Prints one line of key=value fields on stdout; exits 1 on a wrong answer
// or a connection failure, 2 on a bad command line.
#include <cstdio>

#include "common/flags.h"
#include "pdkvs/loadgen/loadgen.h"

namespace {

using pdpm::pdkvs::loadgen::PhaseResult;

void PrintPhase(const char* name, const PhaseResult& p) {
  printf(" %s_ops=%llu %s_seconds=%.3f %s_ops_per_s=%.1f %s_p50_us=%.1f %s_p99_us=%.1f", name,
         static_cast<unsigned long long>(p.ops), name, p.seconds, name, p.throughput(), name,
         static_cast<double>(p.latency.Percentile(0.50)) / 1e3, name,
         static_cast<double>(p.latency.Percentile(0.99)) / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pdpm::pdkvs::loadgen;
  LoadgenOptions o;
  std::string workload = "ycsb-a", distribution;
  pdpm::FlagParser flags("pdkvs-loadgen");
  flags.AddString("host", &o.host, "IPv4 address of the server");
  flags.AddUint32("port", &o.port, "port of the server");
  flags.AddString("workload", &workload, "ycsb-a, ycsb-b, ycsb-c, etc or sys");
  flags.AddString("distribution", &distribution,
                  "key choice: uniform or zipfian (theta 0.99); default zipfian");
  flags.AddUint64("records", &o.records, "keys the load phase writes");
  flags.AddUint64("ops", &o.ops, "run phase: most operations");
  flags.AddDuration("duration", &o.duration, "run phase: longest time");
  flags.AddUint32("connections", &o.connections, "connections to the server");
  flags.AddUint32("pipeline", &o.pipeline, "run phase: requests in flight per connection");
  flags.AddUint32("load-pipeline", &o.load_pipeline,
                  "load phase: requests in flight per connection");
  flags.AddUint32("threads", &o.threads, "threads driving the connections");
  flags.AddUint64("seed", &o.seed, "seed of the operation streams");
  pdpm::Status s = flags.Parse(argc, argv);
  if (s.ok() && flags.PrintUsageIfAsked()) return 0;
  if (s.ok()) s = WorkloadByName(workload, &o.workload);
  o.distribution = o.workload.default_distribution;
  if (s.ok() && !distribution.empty()) s = ParseKeyDistribution(distribution, &o.distribution);
  if (!s.ok()) {
    fprintf(stderr, "pdkvs-loadgen: %s\n%s", s.ToString().c_str(), flags.Usage().c_str());
    return 2;
  }
  LoadgenResult r;
  s = RunLoadgen(o, &r);
  for (const std::string& e : r.errors) fprintf(stderr, "pdkvs-loadgen: %s\n", e.c_str());
  if (!s.ok()) {
    fprintf(stderr, "pdkvs-loadgen: %s\n", s.ToString().c_str());
    return 1;
  }
  printf("workload=%s distribution=%s records=%llu connections=%u pipeline=%u seed=%llu",
         o.workload.name.c_str(), std::string(KeyDistributionName(o.distribution)).c_str(),
         static_cast<unsigned long long>(o.records), o.connections, o.pipeline,
         static_cast<unsigned long long>(o.seed));
  PrintPhase("load", r.load);
  PrintPhase("run", r.run);
  printf(" run_reads=%llu run_writes=%llu\n", static_cast<unsigned long long>(r.run.reads),
         static_cast<unsigned long long>(r.run.writes));
  return 0;
}
