// dsm_bench: pDSM throughput through libpdpm against a running cluster
// (scripts/bench-dsm.sh starts one with `pdpm up` and adds the iperf3
// reference measured in the same run).
//
//   dsm_bench --monitor HOST:PORT --secret-file FILE [--duration 2s] [--figures all|write]
//
// One client thread, one operation in flight. Prints one line per figure,
// "FIGURE <name> <value> <unit>", bandwidth in MB/s (10^6 bytes/s):
//   write.64KiB.rN   Write of 64 KiB, durable on every one of the N copies
//                    (the cluster's replica count) on return
//   write.64KiB.nopersist  WriteUnpersisted of 64 KiB (in the server's memory,
//                    not yet durable, on return; one copy)
//   read.64KiB       Read of 64 KiB
//   obj.put.4KiB / obj.get.4KiB / obj.put.1MiB / obj.get.1MiB
// and transactions in ops/s (committed transactions per second), each with
// its reference measured here: the same accesses without a transaction
// (one-sided reads and writes), as "FIGURE <name> <value> ops/s <ref> <value>":
//   tx.ro            4 reads of 64-byte items (uniform over 3072 items on every server)
//   tx.w25.uniform   4 reads, 1 of the 4 items written back (uniform)
//   tx.w25.zipf      the same, items chosen by Zipf (0.99)
// Exits 1 with one error line when any operation fails.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/client_flags.h"
#include "common/flags.h"
#include "monitor/monitor_client.h"

namespace pdpm::tools {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "dsm_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// Runs `op(i)` for i = 0, 1, ... until `seconds` passed; MB/s of
// `bytes_per_op`. The first error stops the run.
Status Measure(double seconds, uint64_t bytes_per_op, const std::function<Status(uint64_t)>& op,
               double* mbs) {
  auto start = Clock::now();
  auto end = start + std::chrono::duration<double>(seconds);
  uint64_t ops = 0;
  Clock::time_point now;
  do {
    PDPM_RETURN_IF_ERROR(op(ops));
    ++ops;
    now = Clock::now();
  } while (now < end);
  double elapsed = std::chrono::duration<double>(now - start).count();
  *mbs = static_cast<double>(ops * bytes_per_op) / elapsed / 1e6;
  return Status::OK();
}

void Report(const char* name, double mbs) {
  std::printf("FIGURE %s %.3f MB/s\n", name, mbs);
}

// Item numbers 0..n-1 drawn uniformly or by Zipf (exponent `theta`).
class ItemChooser {
 public:
  ItemChooser(uint64_t n, double theta) {
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) {
      sum += theta == 0 ? 1.0 : 1.0 / std::pow(static_cast<double>(i + 1), theta);
      cdf_.push_back(sum);
    }
    for (double& c : cdf_) c /= sum;
  }
  uint64_t Next(std::mt19937_64& rng) {
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<uint64_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin()) %
           cdf_.size();
  }

 private:
  std::vector<double> cdf_;
};

// Transactions of 4 item reads and `writes` (0 or 1) of them written back,
// against the same accesses without a transaction; committed per second.
Status MeasureTx(client::Client* c, const std::vector<client::GlobalAddress>& items, double seconds,
                 double theta, int writes, double* tx_ops, double* raw_ops, uint64_t* retried) {
  ItemChooser chooser(items.size(), theta);
  std::mt19937_64 rng(7);
  char buf[dsm::kTxGranule];
  auto pick = [&](client::GlobalAddress* a) {
    for (int k = 0; k < 4; k++) a[k] = items[chooser.Next(rng)];
  };
  auto per_second = [&](const std::function<Status()>& op, double* out) {
    double mbs = 0;
    PDPM_RETURN_IF_ERROR(Measure(
        seconds, 1, [&](uint64_t) { return op(); }, &mbs));
    *out = mbs * 1e6;
    return Status::OK();
  };
  PDPM_RETURN_IF_ERROR(per_second(
      [&]() -> Status {
        client::GlobalAddress a[4];
        pick(a);
        for (const auto& x : a) PDPM_RETURN_IF_ERROR(c->Read(x, buf, sizeof(buf)));
        if (writes > 0) PDPM_RETURN_IF_ERROR(c->Write(a[0], buf, sizeof(buf)));
        return Status::OK();
      },
      raw_ops));
  return per_second(
      [&]() -> Status {
        client::GlobalAddress a[4];
        pick(a);
        while (true) {
          std::unique_ptr<client::Transaction> tx;
          PDPM_RETURN_IF_ERROR(c->TxBegin(&tx));
          Status s;
          for (const auto& x : a) {
            s = tx->Read(x, buf, sizeof(buf));
            if (!s.ok()) break;
          }
          if (s.ok() && writes > 0) s = tx->Write(a[0], buf, sizeof(buf));
          if (s.ok()) s = tx->Commit();
          if (s.code() != StatusCode::kAborted) return s;
          ++*retried;
        }
      },
      tx_ops);
}

int Run(int argc, char** argv) {
  client::ClientFlags cluster;
  std::chrono::milliseconds duration{2000};
  std::string figures = "all";
  FlagParser parser("dsm_bench");
  parser.AddString("figures", &figures, "all, or write (only write.64KiB.rN)");
  cluster.Register(&parser);
  parser.AddDuration("duration", &duration, "time per figure (default 2s)");
  Status s = parser.Parse(argc, argv);
  if (s.ok() && parser.PrintUsageIfAsked()) return 0;
  client::ClientOptions options;
  if (s.ok()) s = cluster.ToOptions(&options);
  if (s.ok() && duration.count() <= 0) s = Status::InvalidArgument("--duration must be positive");
  if (s.ok() && figures != "all" && figures != "write") {
    s = Status::InvalidArgument("--figures must be all or write");
  }
  double seconds = static_cast<double>(duration.count()) / 1000;
  if (!s.ok()) {
    std::fprintf(stderr, "dsm_bench: %s\n%s", s.ToString().c_str(), parser.Usage().c_str());
    return 2;
  }
  std::unique_ptr<client::Client> c;
  s = client::Client::Open(options, &c);
  if (!s.ok()) return Fail("connect", s);

  // Raw 64 KiB transfers over a 4 MiB allocation, so consecutive operations
  // touch different lines of PM.
  constexpr uint64_t kRaw = 64 << 10;
  constexpr uint64_t kRegion = 4 << 20;
  client::GlobalAddress region;
  s = c->PAllocate(kRegion, &region);
  if (!s.ok()) return Fail("pallocate 4 MiB", s);
  std::string buf(kRaw, '\0');
  std::mt19937_64 rng(42);
  for (char& ch : buf) ch = static_cast<char>(rng());
  // Offsets within one allocation stay inside its segment.
  auto at = [&](uint64_t i) {
    client::GlobalAddress a = region;
    a.offset += (i % (kRegion / kRaw)) * kRaw;
    return a;
  };
  double mbs = 0;
  s = Measure(
      seconds, kRaw, [&](uint64_t i) { return c->Write(at(i), buf.data(), kRaw); }, &mbs);
  if (!s.ok()) return Fail("write 64 KiB", s);
  v1::GetMappingResponse mapping;
  s = monitor::MonitorClient(options.monitor, {}).GetMapping(0, &mapping);
  if (!s.ok()) return Fail("mapping", s);
  Report(("write.64KiB.r" + std::to_string(mapping.replica_count())).c_str(), mbs);
  if (figures == "write") return 0;
  s = Measure(
      seconds, kRaw, [&](uint64_t i) { return c->WriteUnpersisted(at(i), buf.data(), kRaw); },
      &mbs);
  if (!s.ok()) return Fail("write 64 KiB without persisting", s);
  Report("write.64KiB.nopersist", mbs);
  s = Measure(
      seconds, kRaw, [&](uint64_t i) { return c->Read(at(i), buf.data(), kRaw); }, &mbs);
  if (!s.ok()) return Fail("read 64 KiB", s);
  Report("read.64KiB", mbs);
  s = c->PFree(region);
  if (!s.ok()) return Fail("pfree", s);

  // Objects: put cycles over 16 ids (so it overwrites, copy-on-write), get
  // reads them back.
  for (uint64_t size : {uint64_t{4} << 10, uint64_t{1} << 20}) {
    std::string data(size, '\0');
    for (char& ch : data) ch = static_cast<char>(rng());
    std::string label = size == 4096 ? "4KiB" : "1MiB";
    auto id = [&](uint64_t i) { return dsm::ObjectId{size, 1 + i % 16}; };
    s = Measure(
        seconds, size, [&](uint64_t i) { return c->PutObj(id(i), data); }, &mbs);
    if (!s.ok()) return Fail("put " + label, s);
    Report(("obj.put." + label).c_str(), mbs);
    // The put phase may have ended before all 16 ids existed.
    std::string out;
    for (uint64_t i = 0; i < 16; ++i) {
      s = c->PutObj(id(i), data);
      if (!s.ok()) return Fail("put " + label, s);
    }
    s = Measure(
        seconds, size,
        [&](uint64_t i) -> Status {
          PDPM_RETURN_IF_ERROR(c->GetObj(id(i), &out));
          if (out.size() != size) return Status::Corruption("object read back with another size");
          return Status::OK();
        },
        &mbs);
    if (!s.ok()) return Fail("get " + label, s);
    Report(("obj.get." + label).c_str(), mbs);
    for (uint64_t i = 0; i < 16; ++i) {
      s = c->DelObj(id(i));
      if (!s.ok()) return Fail("del " + label, s);
    }
  }

  // Transactions over 64-byte items spread over every server.
  constexpr uint64_t kItems = 3072;
  std::vector<client::GlobalAddress> items;
  std::vector<client::GlobalAddress> blocks;
  while (items.size() < kItems) {
    client::GlobalAddress block;
    s = c->PAllocate(1024 * dsm::kTxGranule, &block);  // round-robin over servers
    if (!s.ok()) return Fail("pallocate items", s);
    blocks.push_back(block);
    for (uint64_t i = 0; i < 1024; i++) {
      client::GlobalAddress a = block;
      a.offset += i * dsm::kTxGranule;
      items.push_back(a);
    }
  }
  struct TxFigure {
    const char* name;
    double theta;
    int writes;
  };
  for (const TxFigure& f : {TxFigure{"tx.ro", 0, 0}, TxFigure{"tx.w25.uniform", 0, 1},
                            TxFigure{"tx.w25.zipf", 0.99, 1}}) {
    double tx_ops = 0, raw_ops = 0;
    uint64_t retried = 0;
    s = MeasureTx(c.get(), items, seconds, f.theta, f.writes, &tx_ops, &raw_ops, &retried);
    if (!s.ok()) return Fail(f.name, s);
    std::fprintf(stderr, "dsm_bench: %s: %llu transactions retried\n", f.name,
                 static_cast<unsigned long long>(retried));
    std::printf("FIGURE %s %.1f ops/s raw-one-sided %.1f\n", f.name, tx_ops, raw_ops);
  }
  for (const auto& b : blocks) {
    s = c->PFree(b);
    if (!s.ok()) return Fail("pfree items", s);
  }
  return 0;
}

}  // namespace
}  // namespace pdpm::tools

int main(int argc, char** argv) {
  return pdpm::tools::Run(argc, argv);
}
