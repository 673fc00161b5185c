// FileViewStore: the ViewStore of `pdpm-monitor --embedded` — one file in a
// directory the monitor owns exclusively.
//
// Layout of DIR:
//   view      the current view (format below)
//   view.tmp  a put in progress; never read, removed on open
//   LOCK      flock()ed while a store is open: a second monitor on the same
//             directory is refused (kFailedPrecondition)
//
// View file format 1 (integers little-endian):
//   0  char[8]  magic "PDPMVIEW"
//   8  u32      format version (1)
//   12 u32      flags (0)
//   16 u64      revision
//   24 u64      payload length
//   32 u32      CRC-32C of the payload
//   36 u32      CRC-32C of bytes 0..35
//   40 ...      payload: the serialized pdpm.v1.ClusterView
//
// A put writes view.tmp, fsyncs it, renames it over `view` and fsyncs the
// directory, so after a crash `view` is either the old or the new view,
// complete. A file that is short, long, has a bad magic, an unknown
// version or a checksum mismatch is reported as kCorruption naming the file
// and the defect; it is never overwritten or deleted by the store.
#pragma once

#include <memory>
#include <string>

#include "monitor/view_store.h"

namespace pdpm::monitor {

// Not thread-safe: the monitor serialises view changes itself.
class FileViewStore final : public ViewStore {
 public:
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr size_t kHeaderSize = 40;

  // Opens (creating when missing) the directory and locks it. Errors:
  // IOError when it cannot be created or written, FailedPrecondition when
  // another process holds its lock.
  static Status Open(const std::string& dir, std::unique_ptr<FileViewStore>* store);
  ~FileViewStore() override;

  FileViewStore(const FileViewStore&) = delete;
  FileViewStore& operator=(const FileViewStore&) = delete;

  Status Load(v1::ClusterView* view, uint64_t* revision) override;
  Status CompareAndPut(uint64_t expected_revision, const v1::ClusterView& view,
                       uint64_t* new_revision) override;
  std::string Describe() const override { return "file:" + view_path_; }

  // The file's bytes for `view` at `revision` (exposed for tests).
  static std::string Encode(uint64_t revision, const v1::ClusterView& view);
  // Parses and checks file bytes; `what` names the file in errors.
  static Status Decode(const std::string& bytes, const std::string& what, v1::ClusterView* view,
                       uint64_t* revision);

 private:
  FileViewStore(std::string dir, int dir_fd, int lock_fd);

  const std::string dir_;
  const std::string view_path_;
  const std::string tmp_path_;
  const int dir_fd_;
  const int lock_fd_;
  // Revision of the stored view as of the last Load/CompareAndPut; this
  // process is the only writer while it holds LOCK. 0: none stored.
  uint64_t revision_ = 0;
  bool revision_known_ = false;
};

}  // namespace pdpm::monitor
