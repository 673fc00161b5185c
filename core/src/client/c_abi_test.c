/* The C ABI (pdpm.h) used from C: a round trip through every call and the
 * error codes of bad inputs. Returns 0 or the failing line number, with a
 * message in err. `transport` goes to pdpm_open (NULL: the default, tcp). */
#include <stdio.h>
#include <string.h>

#include "client/pdpm.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      snprintf(err, errlen, "%s:%d: %s (last error: %s)", __FILE__, __LINE__, #cond, \
               c ? pdpm_last_error(c) : "");                                         \
      if (c) pdpm_close(c);                                                          \
      return __LINE__;                                                               \
    }                                                                                \
  } while (0)

int pdpm_c_abi_test(const char* monitor, const char* secret, const char* transport, char* err,
                    size_t errlen) {
  pdpm_client* c = NULL;
  CHECK(pdpm_open(monitor, "not the secret", "tcp", &c) == PDPM_PERMISSION_DENIED);
  CHECK(c == NULL);
  CHECK(pdpm_open(monitor, secret, transport, &c) == PDPM_OK);

  pdpm_addr a;
  char in[1000], out[1000];
  for (int i = 0; i < 1000; i++) in[i] = (char)(i * 7);
  CHECK(pdpm_pallocate(c, sizeof(in), 0, &a) == PDPM_OK);
  CHECK(pdpm_write(c, a, in, sizeof(in)) == PDPM_OK);
  CHECK(pdpm_read(c, a, out, sizeof(out)) == PDPM_OK);
  CHECK(memcmp(in, out, sizeof(in)) == 0);
  /* Unpersisted writes, then one persist of the range. */
  CHECK(pdpm_write_unpersisted(c, a, in + 500, 500) == PDPM_OK);
  CHECK(pdpm_write_unpersisted(c, (pdpm_addr){a.hi, a.lo + 500}, in, 500) == PDPM_OK);
  CHECK(pdpm_persist(c, a, sizeof(in)) == PDPM_OK);
  CHECK(pdpm_read(c, a, out, sizeof(out)) == PDPM_OK);
  CHECK(memcmp(out, in + 500, 500) == 0 && memcmp(out + 500, in, 500) == 0);
  CHECK(pdpm_write_unpersisted(c, a, NULL, 8) == PDPM_INVALID_ARGUMENT);
  CHECK(pdpm_persist(NULL, a, 8) == PDPM_INVALID_ARGUMENT);
  CHECK(pdpm_persist(c, (pdpm_addr){0, 0}, 8) == PDPM_INVALID_ARGUMENT);
  CHECK(pdpm_pfree(c, a) == PDPM_OK);
  CHECK(pdpm_pfree(c, a) == PDPM_FAILED_PRECONDITION);
  CHECK(strlen(pdpm_last_error(c)) > 0);
  CHECK(pdpm_pallocate(c, 0, 0, &a) == PDPM_INVALID_ARGUMENT);

  pdpm_oid id = {42, 43};
  uint64_t size = 0;
  CHECK(pdpm_put_obj(c, id, "hello, world", 12) == PDPM_OK);
  CHECK(pdpm_get_obj(c, id, out, sizeof(out), &size) == PDPM_OK);
  CHECK(size == 12 && memcmp(out, "hello, world", 12) == 0);
  CHECK(pdpm_get_obj(c, id, out, 4, &size) == PDPM_OUT_OF_RANGE);
  CHECK(pdpm_write_obj(c, id, 7, "there", 5) == PDPM_OK);
  CHECK(pdpm_read_obj(c, id, 7, out, 5) == PDPM_OK);
  CHECK(memcmp(out, "there", 5) == 0);
  CHECK(pdpm_del_obj(c, id) == PDPM_OK);
  CHECK(pdpm_get_obj(c, id, out, sizeof(out), &size) == PDPM_NOT_FOUND);
  /* A transaction: a conflict is PDPM_ABORTED, an abort leaves nothing. */
  pdpm_tx *t1 = NULL, *t2 = NULL;
  uint64_t v = 7, got = 0;
  CHECK(pdpm_pallocate(c, 64, 0, &a) == PDPM_OK);
  CHECK(pdpm_tx_begin(c, &t1) == PDPM_OK);
  CHECK(pdpm_tx_begin(c, &t2) == PDPM_OK);
  CHECK(pdpm_tx_read(t1, a, &got, 8) == PDPM_OK);
  CHECK(pdpm_tx_read(t2, a, &got, 8) == PDPM_OK);
  CHECK(pdpm_tx_write(t1, a, &v, 8) == PDPM_OK);
  CHECK(pdpm_tx_write(t2, a, &v, 8) == PDPM_OK);
  CHECK(pdpm_tx_commit(t1) == PDPM_OK);
  CHECK(pdpm_tx_commit(t2) == PDPM_ABORTED);
  CHECK(pdpm_read(c, a, &got, 8) == PDPM_OK && got == 7);
  CHECK(pdpm_tx_begin(c, &t1) == PDPM_OK);
  v = 9;
  CHECK(pdpm_tx_write(t1, a, &v, 8) == PDPM_OK);
  pdpm_tx_abort(t1);
  CHECK(pdpm_read(c, a, &got, 8) == PDPM_OK && got == 7);
  CHECK(pdpm_tx_begin(c, &t1) == PDPM_OK);
  CHECK(pdpm_tx_pfree(t1, a) == PDPM_OK);
  CHECK(pdpm_tx_commit(t1) == PDPM_OK);
  CHECK(pdpm_pfree(c, a) == PDPM_FAILED_PRECONDITION);

  CHECK(strcmp(pdpm_strerror(PDPM_NOT_FOUND), "not_found") == 0);
  CHECK(strcmp(pdpm_strerror(PDPM_STALE_EPOCH), "stale_epoch") == 0);
  pdpm_close(c);
  return 0;
}
