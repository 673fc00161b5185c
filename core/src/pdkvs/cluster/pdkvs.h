/* pDKVS C ABI: the distributed key-value store of a PDPM cluster for C and
 * other languages, over pdpm::pdkvs::ClusterKvStore (cluster_kv_store.h,
 * whose contract this follows: an operation that returns PDPM_OK is
 * durable on every copy; single-key operations are linearizable;
 * pdkvs_mput is atomic). Every function returns 0 (PDPM_OK) or a code of
 * client/pdpm.h (pdpm_strerror names it); pdkvs_last_error gives the
 * message of the last failed call on a handle. A handle may be shared by
 * threads. Keys and values are byte strings (not NUL-terminated). */
#ifndef PDPM_PDKVS_CLUSTER_PDKVS_H_
#define PDPM_PDKVS_CLUSTER_PDKVS_H_

#include <stddef.h>
#include <stdint.h>

#include "client/pdpm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdkvs_store pdkvs_store;

/* monitor: "host:port" (or every monitor's, comma-separated); secret: the
 * cluster secret; transport: "tcp" or "verbs" (NULL: tcp). */
int pdkvs_open(const char* monitor, const char* secret, const char* transport, pdkvs_store** out);
void pdkvs_close(pdkvs_store* s);

/* *value is allocated with malloc (free it with pdkvs_free) and holds
 * *value_len bytes followed by a NUL (a text value is a C string);
 * PDPM_NOT_FOUND when the key is absent. */
int pdkvs_get(pdkvs_store* s, const void* key, size_t key_len, void** value, size_t* value_len);

/* Conditions of pdkvs_put. */
enum {
  PDKVS_PUT_ALWAYS = 0,
  PDKVS_PUT_IF_ABSENT = 1,  /* PDPM_ALREADY_EXISTS when the key is present */
  PDKVS_PUT_IF_PRESENT = 2, /* PDPM_NOT_FOUND when the key is absent */
};
/* ttl_ms: the key expires that long after the call; 0: never. */
int pdkvs_put(pdkvs_store* s, const void* key, size_t key_len, const void* value, size_t value_len,
              int condition, uint64_t ttl_ms);
/* PDPM_NOT_FOUND when the key is absent. */
int pdkvs_delete(pdkvs_store* s, const void* key, size_t key_len);
int pdkvs_exists(pdkvs_store* s, const void* key, size_t key_len, int* exists);
/* Adds delta to the decimal integer at key (0 when absent). PDPM_INVALID_ARGUMENT:
 * the value is not such an integer; PDPM_OUT_OF_RANGE: overflow. */
int pdkvs_incr(pdkvs_store* s, const void* key, size_t key_len, int64_t delta, int64_t* result);
int pdkvs_append(pdkvs_store* s, const void* key, size_t key_len, const void* suffix,
                 size_t suffix_len, uint64_t* new_len);
/* Sets n pairs atomically. if_none_exist: sets nothing, *applied 0, when any
 * key exists. */
int pdkvs_mput(pdkvs_store* s, size_t n, const void* const* keys, const size_t* key_lens,
               const void* const* values, const size_t* value_lens, int if_none_exist,
               int* applied);

/* One page of a scan: fn is called for each key of the page; start with
 * cursor 0 and go on with *next_cursor until it is 0. Every key present for
 * the whole scan is given exactly once. */
typedef void (*pdkvs_key_fn)(void* arg, const void* key, size_t key_len);
int pdkvs_scan(pdkvs_store* s, uint64_t cursor, size_t count, pdkvs_key_fn fn, void* arg,
               uint64_t* next_cursor);

void pdkvs_free(void* p);
/* Message of the last failed call on this handle (valid until the next
 * failing call on it). */
const char* pdkvs_last_error(pdkvs_store* s);

#ifdef __cplusplus
}
#endif

#endif /* PDPM_PDKVS_CLUSTER_PDKVS_H_ */
