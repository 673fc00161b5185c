/* The C ABI of pDFSLib (pdfs/client/file_system.h, docs/pdfs.md): the pDFS
 * file system of a PDPM cluster for C and other languages, by path and by
 * open file. Semantics are those of the C++ API; every function returns 0
 * or a POSIX errno value (ENOENT, EEXIST, EIO, ...), never -1. A file
 * system handle may be shared by threads; a file handle by threads that
 * do not close it meanwhile. Permission checks are the caller's (as for
 * pDFSLib): new inodes belong to the uid/gid given to pdfs_mount. */
#ifndef PDPM_PDFS_CLIENT_PDFS_H_
#define PDPM_PDFS_CLIENT_PDFS_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdfs_fs pdfs_fs;
typedef struct pdfs_file pdfs_file;

/* Connects to the cluster (monitor "host:port", comma-separated for
 * several; secret: the cluster secret; transport "tcp" or "verbs", NULL:
 * tcp) and opens its file system; new inodes belong to uid/gid. EACCES: a
 * wrong secret; EINVAL: bad arguments; EIO: the cluster could not be
 * reached or read (the cause is logged on stderr). */
int pdfs_mount(const char* monitor, const char* secret, const char* transport, uint32_t uid,
               uint32_t gid, pdfs_fs** out);
/* Every file of fs must be closed first. */
void pdfs_unmount(pdfs_fs* fs);

/* open(2) flags (O_RDONLY/O_WRONLY/O_RDWR, O_CREAT, O_EXCL, O_TRUNC,
 * O_APPEND, O_DIRECTORY, O_NOFOLLOW); mode for a new file. */
int pdfs_open(pdfs_fs* fs, const char* path, int flags, uint32_t mode, pdfs_file** out);
void pdfs_close(pdfs_file* f);
/* Reads up to len bytes at offset; *got is how many (fewer at the end). */
int pdfs_pread(pdfs_file* f, void* buf, uint64_t len, uint64_t offset, uint64_t* got);
/* Writes all len bytes at offset (with O_APPEND: at the end). Durable on
 * every copy when it returns. */
int pdfs_pwrite(pdfs_file* f, const void* buf, uint64_t len, uint64_t offset);
int pdfs_ftruncate(pdfs_file* f, uint64_t size);
/* mode 0 or FALLOC_FL_KEEP_SIZE (FileSystem::Fallocate). */
int pdfs_fallocate(pdfs_file* f, int mode, uint64_t offset, uint64_t len);
int pdfs_fsync(pdfs_file* f);
int pdfs_fstat(pdfs_file* f, struct stat* out);

int pdfs_stat(pdfs_fs* fs, const char* path, struct stat* out);
int pdfs_lstat(pdfs_fs* fs, const char* path, struct stat* out);
int pdfs_mkdir(pdfs_fs* fs, const char* path, uint32_t mode);
int pdfs_rmdir(pdfs_fs* fs, const char* path);
int pdfs_unlink(pdfs_fs* fs, const char* path);
/* flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE. */
int pdfs_rename(pdfs_fs* fs, const char* from, const char* to, unsigned flags);
int pdfs_link(pdfs_fs* fs, const char* existing, const char* path);
int pdfs_symlink(pdfs_fs* fs, const char* target, const char* path);
/* Copies the target (not NUL-terminated) into buf; *len is its length.
 * ERANGE (buf untouched) when cap is smaller. */
int pdfs_readlink(pdfs_fs* fs, const char* path, char* buf, size_t cap, size_t* len);
int pdfs_chmod(pdfs_fs* fs, const char* path, uint32_t mode);
int pdfs_chown(pdfs_fs* fs, const char* path, uint32_t uid, uint32_t gid);

typedef struct {
  uint64_t ino;
  uint8_t type; /* DT_* */
  char name[256];
  uint64_t next_cookie; /* where a listing after this entry continues */
} pdfs_dirent;
/* Up to max entries of directory path after cookie (0: from the start;
 * "." and ".." not listed) into out; *count of them, *eof when the
 * directory has no more. An entry present for the whole listing is
 * listed once. */
int pdfs_readdir(pdfs_fs* fs, const char* path, uint64_t cookie, pdfs_dirent* out, size_t max,
                 size_t* count, int* eof);

#ifdef __cplusplus
}
#endif

#endif /* PDPM_PDFS_CLIENT_PDFS_H_ */
