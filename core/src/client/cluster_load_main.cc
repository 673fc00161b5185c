// pdpm_client_load (tests): one client process of the cluster tests. It
// runs a deterministic mix of object puts, partial writes and deletes on
// its own objects and heap allocations, writes and frees, and saves what
// the cluster must hold afterwards (cluster_journal.h). Failed operations
// (a server killed meanwhile) are expected and leave both states allowed.
// Transport and timeouts come from the test environment (cluster_harness.h).
//
//   pdpm_client_load --monitor A --secret-file F --worker N --ops K --out FILE
#include <cstdio>
#include <random>
#include <sstream>
#include <string>

#include "client/client.h"
#include "client/cluster_journal.h"
#include "client/test_client_process.h"
#include "common/crc32c.h"

namespace pdpm::client {
namespace {

struct Model {
  // The content when certain; nullopt-like `known` false when uncertain.
  bool known = true;
  bool present = false;
  std::string content;
  std::vector<ObjectState> states() const {
    return {ObjectState{present, content.size(), present ? Crc32c(content) : 0}};
  }
};

int Run(int argc, char** argv) {
  std::string out;
  uint32_t worker = 0, ops = 200, objects = 24;
  std::unique_ptr<Client> c;
  std::optional<int> rc = StartTestClient(
      "pdpm_client_load", argc, argv,
      [&](FlagParser* p) {
        p->AddUint32("worker", &worker, "worker number (object IDs hi = worker + 1)");
        p->AddUint32("ops", &ops, "operations to run");
        p->AddUint32("objects", &objects, "objects of this worker");
        p->AddString("out", &out, "where to save the expectations");
      },
      &c);
  if (rc) return *rc;
  std::mt19937_64 rng(worker * 7919 + 1);
  auto bytes = [&](size_t n) {
    std::string d(n, '\0');
    for (auto& ch : d) ch = static_cast<char>(rng());
    return d;
  };
  std::vector<Model> model(objects);
  // Every state an object may be in; replaced by one state on success.
  std::vector<std::vector<ObjectState>> allowed(objects, std::vector<ObjectState>{ObjectState{}});
  Expectations exp;
  std::vector<Expectations::Block> live;
  uint64_t failures = 0;
  for (uint32_t i = 0; i < ops; i++) {
    if (i % 50 == 0) {
      std::printf("progress %u failures %llu\n", i, static_cast<unsigned long long>(failures));
      std::fflush(stdout);
    }
    uint32_t k = static_cast<uint32_t>(rng() % objects);
    ObjectId id{worker + 1, k};
    Model& m = model[k];
    int choice = static_cast<int>(rng() % 100);
    Status st;
    if (choice < 40 || (choice < 60 && !(m.known && m.present))) {
      // Mostly small; now and then over an RPC slot and over 1 MiB.
      size_t size = rng() % 40 == 0 ? (1u << 20) + rng() % 300000 : rng() % 40000;
      std::string d = bytes(size);
      st = c->PutObj(id, d);
      Model next{true, true, d};
      if (st.ok()) {
        m = next;
        allowed[k] = m.states();
      } else {
        allowed[k].push_back(next.states()[0]);
        m.known = false;
      }
    } else if (choice < 60) {
      uint64_t off = rng() % (m.content.size() + 1);
      std::string d = bytes(1 + rng() % 9000);
      st = c->WriteObj(id, off, d);
      Model next = m;
      if (next.content.size() < off + d.size()) next.content.resize(off + d.size(), '\0');
      next.content.replace(off, d.size(), d);
      if (st.ok()) {
        m = next;
        allowed[k] = m.states();
      } else {
        allowed[k].push_back(next.states()[0]);
        m.known = false;
      }
    } else if (choice < 75) {
      st = c->DelObj(id);
      if (st.ok() || st.code() == StatusCode::kNotFound) {  // absent either way
        m = Model{true, false, ""};
        allowed[k] = m.states();
        st = Status::OK();
      } else {
        allowed[k].push_back(ObjectState{});
        m.known = false;
      }
    } else if (choice < 92 || live.empty()) {
      GlobalAddress a;
      uint64_t len = 1 + rng() % 20000;
      st = c->PAllocate(len, &a);
      if (st.ok()) {
        std::string d = bytes(len);
        st = c->Write(a, d.data(), len);
        if (st.ok()) live.push_back({a, len, Crc32c(d)});
      }
    } else {
      size_t j = rng() % live.size();
      Expectations::Block b = live[j];
      live.erase(live.begin() + static_cast<long>(j));
      st = c->PFree(b.addr);  // gone from the expectations either way
    }
    if (!st.ok()) {
      failures++;
      std::printf("failed op %u: %s\n", i, st.ToString().c_str());
    }
  }
  for (uint32_t k = 0; k < objects; k++) exp.objects[{worker + 1, k}] = allowed[k];
  exp.blocks = live;
  Status s = exp.Save(out);
  std::printf("done %u ops, %llu failed\n", ops, static_cast<unsigned long long>(failures));
  return s.ok() ? 0 : 1;
}

}  // namespace
}  // namespace pdpm::client

int main(int argc, char** argv) {
  return pdpm::client::Run(argc, argv);
}
