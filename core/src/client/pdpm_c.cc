// The C ABI of libpdpm (pdpm.h) over client::Client.
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "client/client.h"
#include "client/client_flags.h"
#include "client/pdpm.h"

struct pdpm_client {
  std::unique_ptr<pdpm::client::Client> client;
  std::mutex mu;
  std::string last_error;  // guarded by mu
};

struct pdpm_tx {
  pdpm_client* client;
  std::unique_ptr<pdpm::client::Transaction> tx;
};

namespace {

using pdpm::Status;
using pdpm::client::GlobalAddress;
using pdpm::client::ObjectId;

int Report(pdpm_client* c, const Status& s) {
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(c->mu);
    c->last_error = s.ToString();
  }
  return static_cast<int>(s.code());
}

GlobalAddress ToAddress(pdpm_addr a) {
  return GlobalAddress::FromWords(a.hi, a.lo);
}
ObjectId ToId(pdpm_oid id) {
  return ObjectId{id.hi, id.lo};
}

}  // namespace

extern "C" {

int pdpm_open(const char* monitor, const char* secret, const char* transport, pdpm_client** out) {
  if (out == nullptr) return PDPM_INVALID_ARGUMENT;
  pdpm::client::ClientOptions o;
  if (Status s = pdpm::client::ClientOptionsFromStrings(monitor, secret, transport, &o); !s.ok()) {
    return static_cast<int>(s.code());
  }
  auto c = std::make_unique<pdpm_client>();
  Status s = pdpm::client::Client::Open(o, &c->client);
  if (!s.ok()) return static_cast<int>(s.code());
  *out = c.release();
  return PDPM_OK;
}

void pdpm_close(pdpm_client* c) {
  delete c;
}

int pdpm_tx_begin(pdpm_client* c, pdpm_tx** out) {
  if (c == nullptr || out == nullptr) return PDPM_INVALID_ARGUMENT;
  auto t = std::make_unique<pdpm_tx>();
  t->client = c;
  int rc = Report(c, c->client->TxBegin(&t->tx));
  if (rc == PDPM_OK) *out = t.release();
  return rc;
}

int pdpm_tx_read(pdpm_tx* t, pdpm_addr addr, void* buf, uint64_t len) {
  if (t == nullptr || (buf == nullptr && len > 0)) return PDPM_INVALID_ARGUMENT;
  return Report(t->client, t->tx->Read(ToAddress(addr), buf, len));
}

int pdpm_tx_write(pdpm_tx* t, pdpm_addr addr, const void* buf, uint64_t len) {
  if (t == nullptr || (buf == nullptr && len > 0)) return PDPM_INVALID_ARGUMENT;
  return Report(t->client, t->tx->Write(ToAddress(addr), buf, len));
}

int pdpm_tx_pallocate(pdpm_tx* t, uint64_t size, pdpm_addr* out) {
  if (t == nullptr || out == nullptr) return PDPM_INVALID_ARGUMENT;
  GlobalAddress a;
  int rc = Report(t->client, t->tx->PAllocate(size, &a));
  if (rc == PDPM_OK) *out = pdpm_addr{a.hi(), a.lo()};
  return rc;
}

int pdpm_tx_pfree(pdpm_tx* t, pdpm_addr addr) {
  if (t == nullptr) return PDPM_INVALID_ARGUMENT;
  return Report(t->client, t->tx->PFree(ToAddress(addr)));
}

int pdpm_tx_commit(pdpm_tx* t) {
  if (t == nullptr) return PDPM_INVALID_ARGUMENT;
  std::unique_ptr<pdpm_tx> owned(t);
  return Report(t->client, t->tx->Commit());
}

void pdpm_tx_abort(pdpm_tx* t) {
  if (t == nullptr) return;
  t->tx->Abort();
  delete t;
}

int pdpm_read(pdpm_client* c, pdpm_addr addr, void* buf, uint64_t len) {
  return Report(c, c->client->Read(ToAddress(addr), buf, len));
}

int pdpm_write(pdpm_client* c, pdpm_addr addr, const void* buf, uint64_t len) {
  return Report(c, c->client->Write(ToAddress(addr), buf, len));
}

int pdpm_write_unpersisted(pdpm_client* c, pdpm_addr addr, const void* buf, uint64_t len) {
  if (c == nullptr || (buf == nullptr && len > 0)) return PDPM_INVALID_ARGUMENT;
  return Report(c, c->client->WriteUnpersisted(ToAddress(addr), buf, len));
}

int pdpm_persist(pdpm_client* c, pdpm_addr addr, uint64_t len) {
  if (c == nullptr) return PDPM_INVALID_ARGUMENT;
  return Report(c, c->client->Persist(ToAddress(addr), len));
}

int pdpm_pallocate(pdpm_client* c, uint64_t size, uint32_t server_id, pdpm_addr* out) {
  GlobalAddress a;
  Status s =
      server_id == 0 ? c->client->PAllocate(size, &a) : c->client->PAllocate(size, server_id, &a);
  if (s.ok()) *out = pdpm_addr{a.hi(), a.lo()};
  return Report(c, s);
}

int pdpm_pfree(pdpm_client* c, pdpm_addr addr) {
  return Report(c, c->client->PFree(ToAddress(addr)));
}

int pdpm_put_obj(pdpm_client* c, pdpm_oid id, const void* data, uint64_t len) {
  return Report(c, c->client->PutObj(ToId(id), {static_cast<const char*>(data), len}));
}

int pdpm_get_obj(pdpm_client* c, pdpm_oid id, void* buf, uint64_t cap, uint64_t* size) {
  std::string data;
  Status s = c->client->GetObj(ToId(id), &data);
  if (s.ok()) {
    *size = data.size();
    if (data.size() > cap) {
      s = Status::OutOfRange("object of " + std::to_string(data.size()) +
                             " bytes does not fit a buffer of " + std::to_string(cap));
    } else {
      std::memcpy(buf, data.data(), data.size());
    }
  }
  return Report(c, s);
}

int pdpm_read_obj(pdpm_client* c, pdpm_oid id, uint64_t offset, void* buf, uint64_t len) {
  std::string data;
  Status s = c->client->ReadObj(ToId(id), offset, len, &data);
  if (s.ok()) std::memcpy(buf, data.data(), data.size());
  return Report(c, s);
}

int pdpm_write_obj(pdpm_client* c, pdpm_oid id, uint64_t offset, const void* data, uint64_t len) {
  return Report(c, c->client->WriteObj(ToId(id), offset, {static_cast<const char*>(data), len}));
}

int pdpm_del_obj(pdpm_client* c, pdpm_oid id) {
  return Report(c, c->client->DelObj(ToId(id)));
}

const char* pdpm_strerror(int code) {
  if (code < 0 || code > static_cast<int>(pdpm::StatusCode::kInternal)) return "unknown";
  // StatusCodeName returns views of string literals: NUL-terminated.
  return pdpm::StatusCodeName(static_cast<pdpm::StatusCode>(code)).data();
}

const char* pdpm_last_error(pdpm_client* c) {
  std::lock_guard<std::mutex> lock(c->mu);
  return c->last_error.c_str();
}

}  // extern "C"
