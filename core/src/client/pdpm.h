/* libpdpm C ABI: the pDSM client API for C and other languages.
 * Semantics and error codes are those of client/client.h; every function
 * returns 0 (PDPM_OK) or a pdpm StatusCode value (common/status.h), and
 * pdpm_strerror names it. pdpm_last_error gives the message of the last
 * failed call on a handle. A handle may be shared by threads. */
#ifndef PDPM_CLIENT_PDPM_H_
#define PDPM_CLIENT_PDPM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  PDPM_OK = 0,
  PDPM_INVALID_ARGUMENT = 1,
  PDPM_NOT_FOUND = 2,
  PDPM_ALREADY_EXISTS = 3,
  PDPM_PERMISSION_DENIED = 4,
  PDPM_OUT_OF_RANGE = 5,
  PDPM_RESOURCE_EXHAUSTED = 6,
  PDPM_CORRUPTION = 7,
  PDPM_IO_ERROR = 8,
  PDPM_TIMEOUT = 9,
  PDPM_UNAVAILABLE = 10,
  PDPM_STALE_EPOCH = 11,
  PDPM_NOT_SUPPORTED = 12,
  PDPM_FAILED_PRECONDITION = 13,
  PDPM_ABORTED = 14,
  PDPM_TOO_LARGE = 15,
  PDPM_INTERNAL = 16,
};

typedef struct pdpm_client pdpm_client;

/* A 128-bit global address: hi = descriptor << 32 | segment, lo = offset. */
typedef struct {
  uint64_t hi;
  uint64_t lo;
} pdpm_addr;

/* A 128-bit object ID. */
typedef struct {
  uint64_t hi;
  uint64_t lo;
} pdpm_oid;

/* monitor: "host:port"; secret: the cluster secret; transport: "tcp" or
 * "verbs" (NULL: tcp). On success *out is a handle for pdpm_close. */
int pdpm_open(const char* monitor, const char* secret, const char* transport, pdpm_client** out);
void pdpm_close(pdpm_client* c);

int pdpm_read(pdpm_client* c, pdpm_addr addr, void* buf, uint64_t len);
int pdpm_write(pdpm_client* c, pdpm_addr addr, const void* buf, uint64_t len);
/* A write that does not wait for remote persistence (visible to later
 * reads, lost by a server crash until persisted), and the persist of a
 * range that makes earlier writes to it durable: Client::WriteUnpersisted
 * and Client::Persist in client/client.h. */
int pdpm_write_unpersisted(pdpm_client* c, pdpm_addr addr, const void* buf, uint64_t len);
int pdpm_persist(pdpm_client* c, pdpm_addr addr, uint64_t len);
/* server_id 0: any server. */
int pdpm_pallocate(pdpm_client* c, uint64_t size, uint32_t server_id, pdpm_addr* out);
int pdpm_pfree(pdpm_client* c, pdpm_addr addr);

int pdpm_put_obj(pdpm_client* c, pdpm_oid id, const void* data, uint64_t len);
/* Copies up to cap bytes of the object into buf and its size into *size
 * (also when cap is too small: then PDPM_OUT_OF_RANGE, buf untouched). */
int pdpm_get_obj(pdpm_client* c, pdpm_oid id, void* buf, uint64_t cap, uint64_t* size);
int pdpm_read_obj(pdpm_client* c, pdpm_oid id, uint64_t offset, void* buf, uint64_t len);
int pdpm_write_obj(pdpm_client* c, pdpm_oid id, uint64_t offset, const void* data, uint64_t len);
int pdpm_del_obj(pdpm_client* c, pdpm_oid id);

/* Transactions over heap data (client/transaction.h). A transaction is
 * used by one thread; pdpm_tx_commit and pdpm_tx_abort release it. Errors
 * go to the client's pdpm_last_error. */
typedef struct pdpm_tx pdpm_tx;
int pdpm_tx_begin(pdpm_client* c, pdpm_tx** out);
int pdpm_tx_read(pdpm_tx* t, pdpm_addr addr, void* buf, uint64_t len);
int pdpm_tx_write(pdpm_tx* t, pdpm_addr addr, const void* buf, uint64_t len);
int pdpm_tx_pallocate(pdpm_tx* t, uint64_t size, pdpm_addr* out);
int pdpm_tx_pfree(pdpm_tx* t, pdpm_addr addr);
/* PDPM_OK when committed; PDPM_ABORTED on a conflict (retry the
 * transaction); another code after aborting. Releases t. */
int pdpm_tx_commit(pdpm_tx* t);
/* Aborts and releases t. */
void pdpm_tx_abort(pdpm_tx* t);

/* Stable lower-case name of a code ("permission_denied"). */
const char* pdpm_strerror(int code);
/* Message of the last failed call on this handle (valid until the next
 * failing call on it). */
const char* pdpm_last_error(pdpm_client* c);

#ifdef __cplusplus
}
#endif

#endif /* PDPM_CLIENT_PDPM_H_ */
