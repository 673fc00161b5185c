#include "client/tx_bank.h"

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

namespace pdpm::client {

Status SaveAccounts(const std::vector<GlobalAddress>& accounts, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  for (const auto& a : accounts) out << a.hi() << ' ' << a.lo() << '\n';
  out.close();
  return out ? Status::OK() : Status::IOError("cannot write " + path);
}

Status LoadAccounts(const std::string& path, std::vector<GlobalAddress>* accounts) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  accounts->clear();
  uint64_t hi = 0, lo = 0;
  while (in >> hi >> lo) accounts->push_back(GlobalAddress::FromWords(hi, lo));
  if (accounts->empty()) return Status::InvalidArgument(path + ": no accounts");
  return Status::OK();
}

Status Transfer(Client* c, const GlobalAddress& from, const GlobalAddress& to, int64_t amount,
                bool abort, bool receipt) {
  std::unique_ptr<Transaction> tx;
  PDPM_RETURN_IF_ERROR(c->TxBegin(&tx));
  int64_t a = 0, b = 0;
  PDPM_RETURN_IF_ERROR(tx->Read(from, &a, sizeof(a)));
  PDPM_RETURN_IF_ERROR(tx->Read(to, &b, sizeof(b)));
  a -= amount;
  b += amount;
  PDPM_RETURN_IF_ERROR(tx->Write(from, &a, sizeof(a)));
  PDPM_RETURN_IF_ERROR(tx->Write(to, &b, sizeof(b)));
  if (receipt) {
    GlobalAddress block;
    PDPM_RETURN_IF_ERROR(tx->PAllocate(64, &block));
    PDPM_RETURN_IF_ERROR(tx->Write(block, &amount, sizeof(amount)));
    PDPM_RETURN_IF_ERROR(tx->PFree(block));
  }
  if (abort) {
    tx->Abort();
    return Status::OK();
  }
  return tx->Commit();
}

namespace {

Status GetBalance(Transaction* tx, const ObjectId& id, int64_t* v) {
  std::string data;
  PDPM_RETURN_IF_ERROR(tx->GetObj(id, &data));
  if (data.size() != sizeof(*v))
    return Status::Corruption("an account object of " + std::to_string(data.size()) + " bytes");
  std::memcpy(v, data.data(), sizeof(*v));
  return Status::OK();
}

Status PutBalance(Transaction* tx, const ObjectId& id, int64_t v) {
  return tx->PutObj(id, std::string_view(reinterpret_cast<const char*>(&v), sizeof(v)));
}

// The total of `accounts`, each read by `read`, in one read-only
// transaction, run again until one commits or `timeout_ms` passes.
template <typename Account>
Status SumRetried(Client* c, const std::vector<Account>& accounts, uint32_t timeout_ms,
                  int64_t* total,
                  const std::function<Status(Transaction*, const Account&, int64_t*)>& read) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Status s;
  do {
    std::unique_ptr<Transaction> tx;
    PDPM_RETURN_IF_ERROR(c->TxBegin(&tx));
    int64_t sum = 0;
    s = Status::OK();
    for (size_t i = 0; i < accounts.size() && s.ok(); i++) {
      int64_t v = 0;
      s = read(tx.get(), accounts[i], &v);
      sum += v;
    }
    if (s.ok()) s = tx->Commit();
    if (s.ok()) {
      *total = sum;
      return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  return s;
}

}  // namespace

Status TransferObjects(Client* c, const ObjectId& from, const ObjectId& to, int64_t amount,
                       bool abort) {
  std::unique_ptr<Transaction> tx;
  PDPM_RETURN_IF_ERROR(c->TxBegin(&tx));
  int64_t a = 0, b = 0;
  PDPM_RETURN_IF_ERROR(GetBalance(tx.get(), from, &a));
  PDPM_RETURN_IF_ERROR(GetBalance(tx.get(), to, &b));
  PDPM_RETURN_IF_ERROR(PutBalance(tx.get(), from, a - amount));
  PDPM_RETURN_IF_ERROR(PutBalance(tx.get(), to, b + amount));
  if (abort) {
    tx->Abort();
    return Status::OK();
  }
  return tx->Commit();
}

Status SumObjectBalances(Client* c, const std::vector<ObjectId>& accounts, uint32_t timeout_ms,
                         int64_t* total) {
  return SumRetried<ObjectId>(c, accounts, timeout_ms, total, GetBalance);
}

Status SumBalances(Client* c, const std::vector<GlobalAddress>& accounts, uint32_t timeout_ms,
                   int64_t* total) {
  return SumRetried<GlobalAddress>(c, accounts, timeout_ms, total,
                                   [](Transaction* tx, const GlobalAddress& a, int64_t* v) {
                                     return tx->Read(a, v, sizeof(*v));
                                   });
}

}  // namespace pdpm::client
