/* The pDFS C ABI (pdfs.h) used from C: every call and the errno values of
 * bad inputs. Returns 0 or the failing line number, with a message in err. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>

#include "pdfs/client/pdfs.h"

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      snprintf(err, errlen, "%s:%d: %s", __FILE__, __LINE__, #cond); \
      if (f) pdfs_close(f);                                          \
      if (fs) pdfs_unmount(fs);                                      \
      return __LINE__;                                               \
    }                                                                \
  } while (0)

int pdfs_c_abi_test(const char* monitor, const char* secret, char* err, size_t errlen) {
  pdfs_fs* fs = NULL;
  pdfs_file* f = NULL;
  CHECK(pdfs_mount(monitor, "not the secret", NULL, 0, 0, &fs) == EACCES);
  CHECK(fs == NULL);
  CHECK(pdfs_mount(monitor, secret, "no such transport", 0, 0, &fs) == EINVAL);
  CHECK(pdfs_mount(NULL, secret, NULL, 0, 0, &fs) == EINVAL);
  CHECK(pdfs_mount(monitor, secret, NULL, 1000, 1000, &fs) == 0);

  /* Directories and files. */
  CHECK(pdfs_mkdir(fs, "/d", 0755) == 0);
  CHECK(pdfs_mkdir(fs, "/d", 0755) == EEXIST);
  CHECK(pdfs_mkdir(fs, "/no/d", 0755) == ENOENT);
  CHECK(pdfs_open(fs, "/d/f", O_CREAT | O_EXCL | O_RDWR, 0640, &f) == 0);
  pdfs_file* again = NULL;
  CHECK(pdfs_open(fs, "/d/f", O_CREAT | O_EXCL | O_RDWR, 0640, &again) == EEXIST);
  CHECK(pdfs_open(fs, "/d", O_RDWR, 0, &again) == EISDIR);
  CHECK(pdfs_pwrite(f, "hello, world", 12, 0) == 0);
  CHECK(pdfs_pwrite(f, "pDFS", 4, 7) == 0);
  char buf[64];
  uint64_t got = 0;
  CHECK(pdfs_pread(f, buf, sizeof(buf), 0, &got) == 0);
  CHECK(got == 12 && memcmp(buf, "hello, pDFSd", 12) == 0);
  CHECK(pdfs_pread(f, buf, sizeof(buf), 100, &got) == 0 && got == 0);
  struct stat st;
  CHECK(pdfs_fstat(f, &st) == 0);
  CHECK(st.st_size == 12 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0640);
  CHECK(st.st_uid == 1000 && st.st_gid == 1000 && st.st_nlink == 1);
  CHECK(pdfs_ftruncate(f, 5) == 0);
  CHECK(pdfs_fallocate(f, 0, 0, 4096) == 0);
  CHECK(pdfs_fallocate(f, FALLOC_FL_KEEP_SIZE, 0, 1 << 20) == 0);
  CHECK(pdfs_fallocate(f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1) == EOPNOTSUPP);
  CHECK(pdfs_fsync(f) == 0);
  CHECK(pdfs_fstat(f, &st) == 0 && st.st_size == 4096);
  CHECK(pdfs_pread(f, buf, 8, 0, &got) == 0 && got == 8 && memcmp(buf, "hello\0\0\0", 8) == 0);
  pdfs_close(f);
  f = NULL;
  CHECK(pdfs_open(fs, "/d/f", O_RDONLY, 0, &f) == 0);
  CHECK(pdfs_pwrite(f, "x", 1, 0) == EBADF);
  pdfs_close(f);
  f = NULL;

  /* Names: links, renames, readdir. */
  CHECK(pdfs_link(fs, "/d/f", "/d/hard") == 0);
  CHECK(pdfs_stat(fs, "/d/hard", &st) == 0 && st.st_nlink == 2);
  CHECK(pdfs_symlink(fs, "f", "/d/sym") == 0);
  size_t len = 0;
  CHECK(pdfs_readlink(fs, "/d/sym", buf, sizeof(buf), &len) == 0 && len == 1 && buf[0] == 'f');
  CHECK(pdfs_readlink(fs, "/d/sym", buf, 0, &len) == ERANGE && len == 1);
  CHECK(pdfs_readlink(fs, "/d/f", buf, sizeof(buf), &len) == EINVAL);
  CHECK(pdfs_stat(fs, "/d/sym", &st) == 0 && S_ISREG(st.st_mode));
  CHECK(pdfs_lstat(fs, "/d/sym", &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(pdfs_rename(fs, "/d/hard", "/d/f", RENAME_NOREPLACE) == EEXIST);
  CHECK(pdfs_rename(fs, "/d/hard", "/moved", 0) == 0);
  CHECK(pdfs_rename(fs, "/d", "/d/below", 0) == EINVAL);
  pdfs_dirent entries[2];
  size_t count = 0, seen = 0;
  int eof = 0;
  uint64_t cookie = 0;
  while (!eof) {
    CHECK(pdfs_readdir(fs, "/d", cookie, entries, 2, &count, &eof) == 0);
    for (size_t i = 0; i < count; i++) {
      CHECK(strcmp(entries[i].name, "f") == 0 || strcmp(entries[i].name, "sym") == 0);
      CHECK(entries[i].type == (strcmp(entries[i].name, "f") == 0 ? DT_REG : DT_LNK));
      cookie = entries[i].next_cookie;
      seen++;
    }
  }
  CHECK(seen == 2);
  CHECK(pdfs_readdir(fs, "/moved", 0, entries, 2, &count, &eof) == ENOTDIR);

  /* Attributes and errors. */
  CHECK(pdfs_chmod(fs, "/moved", 0600) == 0);
  CHECK(pdfs_chown(fs, "/moved", 7, 8) == 0);
  CHECK(pdfs_stat(fs, "/moved", &st) == 0);
  CHECK((st.st_mode & 07777) == 0600 && st.st_uid == 7 && st.st_gid == 8);
  char longname[300];
  memset(longname, 'n', sizeof(longname));
  longname[0] = '/';
  longname[sizeof(longname) - 1] = '\0';
  CHECK(pdfs_mkdir(fs, longname, 0755) == ENAMETOOLONG);
  CHECK(pdfs_rmdir(fs, "/d") == ENOTEMPTY);
  CHECK(pdfs_unlink(fs, "/d") == EISDIR);
  CHECK(pdfs_stat(fs, "/moved/x", &st) == ENOTDIR);
  CHECK(pdfs_unlink(fs, "/d/f") == 0);
  CHECK(pdfs_unlink(fs, "/d/sym") == 0);
  CHECK(pdfs_rmdir(fs, "/d") == 0);
  CHECK(pdfs_stat(fs, "/d", &st) == ENOENT);
  CHECK(pdfs_stat(fs, "/moved", &st) == 0 && st.st_nlink == 1);
  CHECK(pdfs_open(fs, NULL, O_RDONLY, 0, &f) == EINVAL);
  pdfs_unmount(fs);
  return 0;
}
