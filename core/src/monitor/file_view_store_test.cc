#include "monitor/file_view_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/crc32c.h"

namespace pdpm::monitor {
namespace {

namespace fs = std::filesystem;

class FileViewStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pdpm-viewstore-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static v1::ClusterView SampleView(uint64_t epoch) {
    v1::ClusterView v;
    v.set_cluster_uuid("c0ffee00-0000-4000-8000-000000000001");
    v.set_epoch(epoch);
    v.set_segment_size(8 << 20);
    v.add_servers()->set_address("127.0.0.1:7001");
    return v;
  }

  std::string ReadAll() {
    std::ifstream in(dir_ + "/view", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void WriteAll(const std::string& bytes) {
    std::ofstream out(dir_ + "/view", std::ios::binary | std::ios::trunc);
    out << bytes;
  }

  std::string dir_;
};

TEST_F(FileViewStoreTest, EmptyThenCompareAndPut) {
  std::unique_ptr<FileViewStore> store;
  ASSERT_TRUE(FileViewStore::Open(dir_, &store).ok());
  v1::ClusterView v;
  uint64_t rev = 99;
  EXPECT_EQ(store->Load(&v, &rev).code(), StatusCode::kNotFound);
  EXPECT_EQ(rev, 0u);
  uint64_t r1 = 0;
  ASSERT_TRUE(store->CompareAndPut(0, SampleView(1), &r1).ok());
  EXPECT_EQ(r1, 1u);
  // A writer holding an old revision loses and changes nothing.
  uint64_t ignored = 0;
  EXPECT_EQ(store->CompareAndPut(0, SampleView(7), &ignored).code(), StatusCode::kAborted);
  uint64_t r2 = 0;
  ASSERT_TRUE(store->CompareAndPut(r1, SampleView(2), &r2).ok());
  EXPECT_EQ(r2, 2u);
  store.reset();

  ASSERT_TRUE(FileViewStore::Open(dir_, &store).ok());
  ASSERT_TRUE(store->Load(&v, &rev).ok());
  EXPECT_EQ(rev, 2u);
  EXPECT_EQ(v.epoch(), 2u);
  EXPECT_EQ(v.servers(0).address(), "127.0.0.1:7001");
  EXPECT_FALSE(fs::exists(dir_ + "/view.tmp"));
}

TEST_F(FileViewStoreTest, SecondOpenerIsRefused) {
  std::unique_ptr<FileViewStore> a, b;
  ASSERT_TRUE(FileViewStore::Open(dir_, &a).ok());
  Status s = FileViewStore::Open(dir_, &b);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("in use by another monitor"), std::string::npos);
  a.reset();
  EXPECT_TRUE(FileViewStore::Open(dir_, &b).ok());
}

TEST_F(FileViewStoreTest, LeftoverTempFileIsDropped) {
  {
    std::unique_ptr<FileViewStore> store;
    ASSERT_TRUE(FileViewStore::Open(dir_, &store).ok());
    uint64_t r = 0;
    ASSERT_TRUE(store->CompareAndPut(0, SampleView(1), &r).ok());
  }
  // A put that crashed before its rename.
  std::ofstream(dir_ + "/view.tmp") << "half a view";
  std::unique_ptr<FileViewStore> store;
  ASSERT_TRUE(FileViewStore::Open(dir_, &store).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/view.tmp"));
  v1::ClusterView v;
  uint64_t rev = 0;
  ASSERT_TRUE(store->Load(&v, &rev).ok());
  EXPECT_EQ(v.epoch(), 1u);
}

TEST_F(FileViewStoreTest, EveryDefectIsCorruptionAndTheFileIsKept) {
  const std::string good = FileViewStore::Encode(5, SampleView(3));
  struct Case {
    const char* name;
    std::string bytes;
    const char* expect;
  };
  std::string flipped_payload = good;
  flipped_payload.back() ^= 0x01;
  std::string flipped_header = good;
  flipped_header[17] ^= 0x01;  // inside the revision
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  std::vector<Case> cases = {
      {"truncated header", good.substr(0, 20), "truncated"},
      {"torn payload", good.substr(0, good.size() - 3), "torn"},
      {"trailing garbage", good + "xx", "torn"},
      {"payload bit flip", flipped_payload, "payload checksum"},
      {"header bit flip", flipped_header, "header checksum"},
      {"bad magic", bad_magic, "bad magic"},
      {"empty file", "", "truncated"},
  };
  for (const Case& c : cases) {
    WriteAll(c.bytes);
    std::unique_ptr<FileViewStore> store;
    ASSERT_TRUE(FileViewStore::Open(dir_, &store).ok()) << c.name;
    v1::ClusterView v;
    uint64_t rev = 0;
    Status s = store->Load(&v, &rev);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << c.name << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.name << ": " << s.ToString();
    // A store that cannot read its view refuses to overwrite it.
    uint64_t r = 0;
    EXPECT_EQ(store->CompareAndPut(0, SampleView(1), &r).code(), StatusCode::kCorruption) << c.name;
    EXPECT_EQ(ReadAll(), c.bytes) << c.name;
  }
}

TEST_F(FileViewStoreTest, UnknownVersionIsNamed) {
  std::string bytes = FileViewStore::Encode(1, SampleView(1));
  // Rewrite the version field and re-seal the header so only the version is wrong.
  bytes[8] = 2;
  uint32_t crc = Crc32c(std::string_view(bytes.data(), 36));
  for (int i = 0; i < 4; ++i) bytes[36 + i] = static_cast<char>(crc >> (8 * i));
  v1::ClusterView v;
  uint64_t rev = 0;
  Status s = FileViewStore::Decode(bytes, "view", &v, &rev);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("format version 2"), std::string::npos) << s.ToString();
}

TEST_F(FileViewStoreTest, UnusableDirectory) {
  std::unique_ptr<FileViewStore> store;
  std::string file = dir_ + "/plain-file";
  std::ofstream(file) << "x";
  Status s = FileViewStore::Open(file + "/sub", &store);
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_EQ(FileViewStore::Open("", &store).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdpm::monitor
