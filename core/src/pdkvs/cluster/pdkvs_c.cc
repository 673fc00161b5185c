// The pDKVS C ABI (pdkvs.h) over ClusterKvStore.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client_flags.h"
#include "pdkvs/cluster/cluster_kv_store.h"
#include "pdkvs/cluster/pdkvs.h"

struct pdkvs_store {
  std::unique_ptr<pdpm::pdkvs::ClusterKvStore> store;
  std::mutex mu;
  std::string last_error;  // guarded by mu
};

namespace {

using pdpm::Status;

int Report(pdkvs_store* s, const Status& status) {
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->last_error = status.ToString();
  }
  return static_cast<int>(status.code());
}

std::string_view Bytes(const void* p, size_t n) {
  return {static_cast<const char*>(p), n};
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

extern "C" {

int pdkvs_open(const char* monitor, const char* secret, const char* transport, pdkvs_store** out) {
  if (out == nullptr) return PDPM_INVALID_ARGUMENT;
  pdpm::client::ClientOptions o;
  if (Status s = pdpm::client::ClientOptionsFromStrings(monitor, secret, transport, &o); !s.ok()) {
    return static_cast<int>(s.code());
  }
  auto h = std::make_unique<pdkvs_store>();
  Status s = pdpm::pdkvs::ClusterKvStore::Open(o, &h->store);
  if (!s.ok()) return static_cast<int>(s.code());
  *out = h.release();
  return PDPM_OK;
}

void pdkvs_close(pdkvs_store* s) {
  delete s;
}

int pdkvs_get(pdkvs_store* s, const void* key, size_t key_len, void** value, size_t* value_len) {
  if (s == nullptr || (key == nullptr && key_len > 0) || value == nullptr || value_len == nullptr) {
    return PDPM_INVALID_ARGUMENT;
  }
  std::string v;
  int rc = Report(s, s->store->Get(Bytes(key, key_len), &v));
  if (rc != PDPM_OK) return rc;
  // malloc(0) may return NULL: always at least one byte.
  void* p = std::malloc(v.size() + 1);
  if (p == nullptr) return Report(s, Status::ResourceExhausted("out of memory for the value"));
  std::memcpy(p, v.data(), v.size());
  static_cast<char*>(p)[v.size()] = '\0';  // a text value prints as a C string
  *value = p;
  *value_len = v.size();
  return PDPM_OK;
}

int pdkvs_put(pdkvs_store* s, const void* key, size_t key_len, const void* value, size_t value_len,
              int condition, uint64_t ttl_ms) {
  if (s == nullptr || (key == nullptr && key_len > 0) || (value == nullptr && value_len > 0)) {
    return PDPM_INVALID_ARGUMENT;
  }
  pdpm::pdkvs::SetOptions o;
  switch (condition) {
    case PDKVS_PUT_ALWAYS: break;
    case PDKVS_PUT_IF_ABSENT: o.condition = pdpm::pdkvs::SetOptions::Condition::kIfAbsent; break;
    case PDKVS_PUT_IF_PRESENT: o.condition = pdpm::pdkvs::SetOptions::Condition::kIfPresent; break;
    default: return Report(s, Status::InvalidArgument("unknown put condition"));
  }
  if (ttl_ms > 0) {
    o.expiry = pdpm::pdkvs::SetOptions::Expiry::kSet;
    o.expire_at_ms = NowMs() + ttl_ms;
  }
  pdpm::pdkvs::SetResult r;
  int rc = Report(s, s->store->Set(Bytes(key, key_len), Bytes(value, value_len), o, &r));
  if (rc != PDPM_OK || r.applied) return rc;
  return Report(s, condition == PDKVS_PUT_IF_ABSENT ? Status::AlreadyExists("the key exists")
                                                    : Status::NotFound("no such key"));
}

int pdkvs_delete(pdkvs_store* s, const void* key, size_t key_len) {
  if (s == nullptr || (key == nullptr && key_len > 0)) return PDPM_INVALID_ARGUMENT;
  return Report(s, s->store->Delete(Bytes(key, key_len)));
}

int pdkvs_exists(pdkvs_store* s, const void* key, size_t key_len, int* exists) {
  if (s == nullptr || (key == nullptr && key_len > 0) || exists == nullptr) {
    return PDPM_INVALID_ARGUMENT;
  }
  bool e = false;
  int rc = Report(s, s->store->Exists(Bytes(key, key_len), &e));
  if (rc == PDPM_OK) *exists = e ? 1 : 0;
  return rc;
}

int pdkvs_incr(pdkvs_store* s, const void* key, size_t key_len, int64_t delta, int64_t* result) {
  if (s == nullptr || (key == nullptr && key_len > 0) || result == nullptr) {
    return PDPM_INVALID_ARGUMENT;
  }
  return Report(s, s->store->IncrBy(Bytes(key, key_len), delta, result));
}

int pdkvs_append(pdkvs_store* s, const void* key, size_t key_len, const void* suffix,
                 size_t suffix_len, uint64_t* new_len) {
  if (s == nullptr || (key == nullptr && key_len > 0) || (suffix == nullptr && suffix_len > 0) ||
      new_len == nullptr) {
    return PDPM_INVALID_ARGUMENT;
  }
  return Report(s, s->store->Append(Bytes(key, key_len), Bytes(suffix, suffix_len), new_len));
}

int pdkvs_mput(pdkvs_store* s, size_t n, const void* const* keys, const size_t* key_lens,
               const void* const* values, const size_t* value_lens, int if_none_exist,
               int* applied) {
  if (s == nullptr || applied == nullptr ||
      (n > 0 &&
       (keys == nullptr || key_lens == nullptr || values == nullptr || value_lens == nullptr))) {
    return PDPM_INVALID_ARGUMENT;
  }
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if ((keys[i] == nullptr && key_lens[i] > 0) || (values[i] == nullptr && value_lens[i] > 0)) {
      return Report(s, Status::InvalidArgument("pair " + std::to_string(i) + ": null bytes"));
    }
    pairs.emplace_back(Bytes(keys[i], key_lens[i]), Bytes(values[i], value_lens[i]));
  }
  bool a = false;
  int rc = Report(s, s->store->MultiPut(pairs, if_none_exist != 0, &a));
  if (rc == PDPM_OK) *applied = a ? 1 : 0;
  return rc;
}

int pdkvs_scan(pdkvs_store* s, uint64_t cursor, size_t count, pdkvs_key_fn fn, void* arg,
               uint64_t* next_cursor) {
  if (s == nullptr || fn == nullptr || next_cursor == nullptr || count == 0) {
    return PDPM_INVALID_ARGUMENT;
  }
  pdpm::pdkvs::KvScanPage page;
  int rc = Report(s, s->store->Scan(cursor, count, &page));
  if (rc != PDPM_OK) return rc;
  for (const std::string& k : page.keys) fn(arg, k.data(), k.size());
  *next_cursor = page.next_cursor;
  return PDPM_OK;
}

void pdkvs_free(void* p) {
  std::free(p);  // NOLINT(cppcoreguidelines-no-malloc): memory handed to C callers
}

const char* pdkvs_last_error(pdkvs_store* s) {
  if (s == nullptr) return "null handle";
  std::lock_guard<std::mutex> lock(s->mu);
  return s->last_error.c_str();
}

}  // extern "C"
