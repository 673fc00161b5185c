// pdpm_tx_bank (tests): one client process of the transaction tests. It
// runs `--txs` transfers between random accounts (tx_bank.h; with
// `--objects` the accounts file names objects), retrying each
// on conflicts, aborts every `--abort-every`-th one on purpose, and
// tolerates a server that dies meanwhile (the transfer then happened or
// not: either keeps the total). Prints "progress N" lines and a summary.
// PDPM_TX_CRASH_AT (client/transaction.h) makes it die mid-commit.
//
//   pdpm_tx_bank --monitor A --secret-file F --accounts FILE --worker N --txs K
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "client/test_client_process.h"
#include "client/tx_bank.h"

namespace pdpm::client {
namespace {

int Run(int argc, char** argv) {
  std::string accounts_file;
  uint32_t worker = 0, txs = 100, abort_every = 10;
  bool objects = false, no_receipt = false;
  std::unique_ptr<Client> c;
  std::optional<int> rc = StartTestClient(
      "pdpm_tx_bank", argc, argv,
      [&](FlagParser* p) {
        p->AddString("accounts", &accounts_file, "the accounts (tx_bank.h)");
        p->AddUint32("worker", &worker, "worker number (seeds the choices)");
        p->AddUint32("txs", &txs, "transfers to run");
        p->AddBool("objects", &objects, "the accounts are objects (TransferObjects)");
        p->AddBool("no-receipt", &no_receipt, "transfers write the two accounts only");
        p->AddUint32("abort-every", &abort_every,
                     "abort every n-th transfer on purpose (0: never)");
      },
      &c);
  if (rc) return *rc;
  std::vector<GlobalAddress> accounts;
  Status s = LoadAccounts(accounts_file, &accounts);
  if (!s.ok() || accounts.size() < 2) {
    std::fprintf(stderr, "accounts: %s\n", s.ToString().c_str());
    return 1;
  }
  std::mt19937_64 rng(worker * 7919 + 17);
  uint64_t committed = 0, conflicts = 0, failed = 0;
  for (uint32_t i = 0; i < txs; i++) {
    if (i % 20 == 0) {
      std::printf("progress %u\n", i);
      std::fflush(stdout);
    }
    size_t from = rng() % accounts.size(), to = rng() % (accounts.size() - 1);
    if (to >= from) to++;
    int64_t amount = static_cast<int64_t>(rng() % 100) + 1;
    bool abort = abort_every != 0 && i % abort_every == abort_every - 1;
    for (int attempt = 0;; attempt++) {
      s = objects ? TransferObjects(c.get(), ObjectId{accounts[from].hi(), accounts[from].lo()},
                                    ObjectId{accounts[to].hi(), accounts[to].lo()}, amount, abort)
                  : Transfer(c.get(), accounts[from], accounts[to], amount, abort, !no_receipt);
      if (s.code() != StatusCode::kAborted || attempt == 200) break;
      conflicts++;
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
    if (s.ok()) {
      committed += abort ? 0 : 1;
    } else {
      // A server down or restarting: the transfer happened entirely or not.
      failed++;
      std::printf("transfer %u: %s\n", i, s.ToString().c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::printf("done %u transfers: %llu committed, %llu conflicts, %llu failed\n", txs,
              static_cast<unsigned long long>(committed),
              static_cast<unsigned long long>(conflicts), static_cast<unsigned long long>(failed));
  return 0;
}

}  // namespace
}  // namespace pdpm::client

int main(int argc, char** argv) {
  return pdpm::client::Run(argc, argv);
}
