// The fixture of the pDFSLib suites against a real cluster (a pdpm-monitor
// and pdpm-server processes, client/cluster_harness.h): a client, a
// FileSystem on it, path helpers over the inode operations, and fsck.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "client/cluster_harness.h"
#include "pdfs/client/file_system.h"
#include "pdfs/client/fs_check.h"

namespace pdpm::pdfs {

using client::LocalCluster;
using client::LocalClusterOptions;

inline LocalClusterOptions FsClusterOptions(uint32_t replicas) {
  LocalClusterOptions o;
  o.replicas = replicas;
  o.segment_size = 64ull << 20;
  o.pm_size = (4 * 64 + 2) * (1ull << 20);
  o.heartbeat_ms = 100;
  o.suspect_ms = 1000;
  o.down_ms = 2000;
  return o;
}

class FsTest : public ::testing::Test {
 public:
  explicit FsTest(const LocalClusterOptions& options = FsClusterOptions(1)) : cluster_(options) {}

  void SetUp() override {
    Status s = cluster_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_NO_FATAL_FAILURE(Reopen());
  }

  // A fresh client and FileSystem (the old ones closed first).
  void Reopen() {
    fs_.reset();
    client_.reset();
    Status s = client::Client::Open(
        client::TestClientOptions(cluster_.monitor_address(), cluster_.secret()), &client_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = FileSystem::Open(client_.get(), {}, &fs_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  FileSystem* fs() const { return fs_.get(); }

  // Path helpers: the inode operations on the path's parent.
  int Mkdir(const std::string& path, uint32_t mode = 0755, Owner owner = {}) {
    uint64_t parent = 0;
    std::string name;
    int err = fs_->ResolveParent(path, &parent, &name);
    Attr a;
    return err != 0 ? err : fs_->Mkdir(parent, name, mode, owner, &a);
  }
  int Unlink(const std::string& path) {
    uint64_t parent = 0;
    std::string name;
    int err = fs_->ResolveParent(path, &parent, &name);
    return err != 0 ? err : fs_->Unlink(parent, name);
  }
  int Rmdir(const std::string& path) {
    uint64_t parent = 0;
    std::string name;
    int err = fs_->ResolveParent(path, &parent, &name);
    return err != 0 ? err : fs_->Rmdir(parent, name);
  }
  int Rename(const std::string& from, const std::string& to, unsigned flags = 0) {
    uint64_t p1 = 0, p2 = 0;
    std::string n1, n2;
    int err = fs_->ResolveParent(from, &p1, &n1);
    if (err == 0) err = fs_->ResolveParent(to, &p2, &n2);
    return err != 0 ? err : fs_->Rename(p1, n1, p2, n2, flags);
  }
  int Link(const std::string& from, const std::string& to) {
    uint64_t ino = 0, parent = 0;
    std::string name;
    int err = fs_->ResolvePath(from, false, &ino);
    if (err == 0) err = fs_->ResolveParent(to, &parent, &name);
    Attr a;
    return err != 0 ? err : fs_->Link(ino, parent, name, &a);
  }
  int Symlink(const std::string& target, const std::string& path) {
    uint64_t parent = 0;
    std::string name;
    int err = fs_->ResolveParent(path, &parent, &name);
    Attr a;
    return err != 0 ? err : fs_->Symlink(parent, name, target, {}, &a);
  }
  int WriteFile(const std::string& path, const std::string& data, int flags = O_TRUNC) {
    std::unique_ptr<File> f;
    int err = fs_->OpenPath(path, O_CREAT | O_WRONLY | flags, 0644, {}, &f);
    return err != 0 ? err : f->Pwrite(0, data);
  }
  std::string ReadFile(const std::string& path) {
    std::unique_ptr<File> f;
    std::string out;
    int err = fs_->OpenPath(path, O_RDONLY, 0, {}, &f);
    if (err == 0) err = f->Pread(0, 1ull << 30, &out);
    return err == 0 ? out : "<" + std::string(strerror(err)) + ">";
  }
  std::set<std::string> List(const std::string& path) {
    uint64_t dir = 0;
    std::set<std::string> names;
    EXPECT_EQ(fs_->ResolvePath(path, true, &dir), 0) << path;
    uint64_t cookie = 0;
    for (bool eof = false; !eof;) {
      std::vector<ReaddirEntry> page;
      EXPECT_EQ(fs_->Readdir(dir, cookie, 7, &page, &eof), 0);
      for (const ReaddirEntry& e : page) {
        EXPECT_TRUE(names.insert(e.name).second) << e.name << " listed twice";
        cookie = e.next_cookie;
      }
      if (page.empty() && !eof) ADD_FAILURE() << "an empty page before the end";
    }
    return names;
  }
  Attr StatOf(const std::string& path) {
    Attr a;
    EXPECT_EQ(fs_->Lstat(path, &a), 0) << path;
    return a;
  }
  // pdpm fsck --fs: no violation (`clean`: no repairable finding either).
  FsCheckReport Fsck(bool clean = true) {
    FsCheckReport report;
    Status s = CheckFileSystem(client_.get(), &report);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(report.ok()) << report.ToString();
    if (clean) {
      EXPECT_TRUE(report.clean()) << report.ToString();
    }
    return report;
  }

 protected:
  LocalCluster cluster_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<FileSystem> fs_;
};

}  // namespace pdpm::pdfs
