// The bank workload of the transaction tests (tests only): accounts are
// 8-byte signed balances, each in its own 64-byte granule of heap blocks
// spread over every server; a transfer moves an amount between two
// accounts in one transaction, so the total never changes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"

namespace pdpm::client {

// One line per account: the address's (or object id's) two words, decimal.
Status SaveAccounts(const std::vector<GlobalAddress>& accounts, const std::string& path);
Status LoadAccounts(const std::string& path, std::vector<GlobalAddress>* accounts);

// Moves `amount` from account `from` to account `to` in one transaction;
// kAborted on a conflict (nothing happened), with `abort` the transaction
// is aborted after its writes (nothing happens, returns OK). The same
// transaction allocates a receipt block, writes it and frees it again, so
// the heap holds as many blocks after any number of transfers, committed,
// aborted or cut short.
// Without `receipt` the transaction writes the two accounts only.
Status Transfer(Client* c, const GlobalAddress& from, const GlobalAddress& to, int64_t amount,
                bool abort = false, bool receipt = true);

// The total of every balance read in one read-only transaction, retried on
// conflicts until `timeout_ms` passes (then kAborted or the last error).
Status SumBalances(Client* c, const std::vector<GlobalAddress>& accounts, uint32_t timeout_ms,
                   int64_t* total);

// The same with accounts that are objects (8-byte values) and no receipt:
// an object-only transaction, whose decision holder is a table segment.
Status TransferObjects(Client* c, const ObjectId& from, const ObjectId& to, int64_t amount,
                       bool abort = false);
Status SumObjectBalances(Client* c, const std::vector<ObjectId>& accounts, uint32_t timeout_ms,
                         int64_t* total);

}  // namespace pdpm::client
