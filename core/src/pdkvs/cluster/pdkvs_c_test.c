/* The pDKVS C ABI (pdkvs.h) used from C: every call, and the error codes of
 * bad inputs. Returns 0 or the failing line number, with a message in err.
 * `transport` goes to pdkvs_open (NULL: the default, tcp). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdkvs/cluster/pdkvs.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      snprintf(err, errlen, "%s:%d: %s (last error: %s)", __FILE__, __LINE__, #cond, \
               s ? pdkvs_last_error(s) : "");                                        \
      if (s) pdkvs_close(s);                                                         \
      return __LINE__;                                                               \
    }                                                                                \
  } while (0)

struct seen {
  int keys;
  int found_a;
};

static void count_key(void* arg, const void* key, size_t key_len) {
  struct seen* seen = (struct seen*)arg;
  seen->keys++;
  if (key_len == 5 && memcmp(key, "c-abi", 5) == 0) seen->found_a++;
}

int pdkvs_c_abi_test(const char* monitor, const char* secret, const char* transport, char* err,
                     size_t errlen) {
  pdkvs_store* s = NULL;
  CHECK(pdkvs_open(monitor, "not the secret", "tcp", &s) == PDPM_PERMISSION_DENIED);
  CHECK(s == NULL);
  CHECK(pdkvs_open(monitor, secret, transport, &s) == PDPM_OK);

  void* v = NULL;
  size_t n = 0;
  CHECK(pdkvs_put(s, "c-abi", 5, "one\0two", 7, PDKVS_PUT_ALWAYS, 0) == PDPM_OK);
  CHECK(pdkvs_get(s, "c-abi", 5, &v, &n) == PDPM_OK);
  CHECK(n == 7 && memcmp(v, "one\0two", 7) == 0 && ((const char*)v)[7] == '\0');
  pdkvs_free(v);
  CHECK(pdkvs_put(s, "c-abi", 5, "x", 1, PDKVS_PUT_IF_ABSENT, 0) == PDPM_ALREADY_EXISTS);
  CHECK(strlen(pdkvs_last_error(s)) > 0);
  CHECK(pdkvs_put(s, "c-none", 6, "x", 1, PDKVS_PUT_IF_PRESENT, 0) == PDPM_NOT_FOUND);
  CHECK(pdkvs_put(s, "c-abi", 5, "x", 1, 7, 0) == PDPM_INVALID_ARGUMENT);
  CHECK(pdkvs_get(s, "c-none", 6, &v, &n) == PDPM_NOT_FOUND);
  CHECK(pdkvs_get(s, "c-abi", 5, NULL, &n) == PDPM_INVALID_ARGUMENT);

  int exists = -1;
  CHECK(pdkvs_exists(s, "c-abi", 5, &exists) == PDPM_OK && exists == 1);
  CHECK(pdkvs_exists(s, "c-none", 6, &exists) == PDPM_OK && exists == 0);

  int64_t r = 0;
  CHECK(pdkvs_incr(s, "c-n", 3, 5, &r) == PDPM_OK && r == 5);
  CHECK(pdkvs_incr(s, "c-n", 3, -7, &r) == PDPM_OK && r == -2);
  CHECK(pdkvs_incr(s, "c-abi", 5, 1, &r) == PDPM_INVALID_ARGUMENT);
  CHECK(pdkvs_put(s, "c-max", 5, "9223372036854775807", 19, PDKVS_PUT_ALWAYS, 0) == PDPM_OK);
  CHECK(pdkvs_incr(s, "c-max", 5, 1, &r) == PDPM_OUT_OF_RANGE);

  uint64_t len = 0;
  CHECK(pdkvs_append(s, "c-app", 5, "ab", 2, &len) == PDPM_OK && len == 2);
  CHECK(pdkvs_append(s, "c-app", 5, "cd", 2, &len) == PDPM_OK && len == 4);
  CHECK(pdkvs_get(s, "c-app", 5, &v, &n) == PDPM_OK);
  CHECK(n == 4 && memcmp(v, "abcd", 4) == 0);
  pdkvs_free(v);

  /* Atomic multi-put: NX refuses all when one key exists. */
  const void* keys[] = {"c-m1", "c-m2", "c-abi"};
  const size_t key_lens[] = {4, 4, 5};
  const void* values[] = {"v1", "v2", "v3"};
  const size_t value_lens[] = {2, 2, 2};
  int applied = -1;
  CHECK(pdkvs_mput(s, 3, keys, key_lens, values, value_lens, 1, &applied) == PDPM_OK);
  CHECK(applied == 0);
  CHECK(pdkvs_exists(s, "c-m1", 4, &exists) == PDPM_OK && exists == 0);
  CHECK(pdkvs_mput(s, 2, keys, key_lens, values, value_lens, 1, &applied) == PDPM_OK);
  CHECK(applied == 1);
  CHECK(pdkvs_get(s, "c-m2", 4, &v, &n) == PDPM_OK);
  CHECK(n == 2 && memcmp(v, "v2", 2) == 0);
  pdkvs_free(v);

  /* A short TTL: the key is gone once it passes. */
  CHECK(pdkvs_put(s, "c-ttl", 5, "t", 1, PDKVS_PUT_ALWAYS, 1) == PDPM_OK);
  struct timespec nap = {0, 20 * 1000 * 1000};
  nanosleep(&nap, NULL);
  CHECK(pdkvs_exists(s, "c-ttl", 5, &exists) == PDPM_OK && exists == 0);

  CHECK(pdkvs_delete(s, "c-app", 5) == PDPM_OK);
  CHECK(pdkvs_delete(s, "c-app", 5) == PDPM_NOT_FOUND);

  /* Scan: c-abi c-n c-max c-m1 c-m2, each exactly once. */
  struct seen seen = {0, 0};
  uint64_t cursor = 0;
  int pages = 0;
  do {
    CHECK(pdkvs_scan(s, cursor, 2, count_key, &seen, &cursor) == PDPM_OK);
    CHECK(++pages < 10000);
  } while (cursor != 0);
  CHECK(seen.keys == 5 && seen.found_a == 1);
  CHECK(pdkvs_scan(s, 0, 0, count_key, &seen, &cursor) == PDPM_INVALID_ARGUMENT);
  pdkvs_close(s);
  return 0;
}
