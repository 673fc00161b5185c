// pdfs-volume-api against a real cluster: the daemon started as a process,
// real gRPC calls through the generated stub, every operation and every
// error code it answers with.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include "client/cluster_harness.h"
#include "common/file_util.h"
#include "pdfs/client/file_system.h"
#include "pdpm/v1/pdfs.grpc.pb.h"

namespace pdpm::pdfs {
namespace {

using client::LocalCluster;
using client::LocalClusterOptions;

LocalClusterOptions ClusterOptions() {
  LocalClusterOptions o;
  o.segment_size = 64ull << 20;
  o.pm_size = (4 * 64 + 2) * (1ull << 20);
  return o;
}

// A loopback port nothing listens on (bound, then closed).
int ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

class VolumeServiceTest : public ::testing::Test {
 protected:
  VolumeServiceTest() : cluster_(ClusterOptions()) {}

  void SetUp() override {
    Status s = cluster_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::string port_file = cluster_.dir() + "/volume-api.addr";
    s = api_.Start({PDFS_VOLUME_API_BINARY, "--listen", "127.0.0.1:0", "--port-file", port_file},
                   {}, cluster_.dir() + "/volume-api.log");
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::string address;
    for (int i = 0; i < 1000 && !ReadWholeFile(port_file, &address).ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(address.empty()) << "pdfs-volume-api did not start";
    address.pop_back();  // the line end
    stub_ = v1::Volumes::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    ref_.set_monitors(cluster_.monitor_address());
    ref_.set_cluster_secret(cluster_.secret());
    ref_.set_transport(net::testing::TestBackend() == net::BackendKind::kVerbs ? "verbs" : "tcp");
    s = client::Client::Open(
        client::TestClientOptions(cluster_.monitor_address(), cluster_.secret()), &client_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = FileSystem::Open(client_.get(), {}, &fs_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  void TearDown() override {
    if (api_.running()) {
      api_.Signal(SIGTERM);
      int status = 0;
      ASSERT_TRUE(api_.WaitFor(10000, &status)) << "pdfs-volume-api did not stop on SIGTERM";
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
    }
  }

  // One call with a fresh context; the gRPC status code.
  template <typename Req, typename Resp, typename Method>
  grpc::StatusCode Call(Method method, const Req& req, Resp* resp, std::string* message = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status s = (stub_.get()->*method)(&context, req, resp);
    if (message != nullptr) *message = s.error_message();
    return s.error_code();
  }

  grpc::StatusCode Create(const std::string& name, uint64_t bytes, uint64_t inodes,
                          v1::Volume* out = nullptr, const std::string& source = "",
                          std::string* message = nullptr) {
    v1::CreateVolumeRequest req;
    *req.mutable_cluster() = ref_;
    req.set_name(name);
    req.set_byte_limit(bytes);
    req.set_inode_limit(inodes);
    req.set_source_volume(source);
    v1::CreateVolumeResponse resp;
    grpc::StatusCode code = Call(&v1::Volumes::Stub::CreateVolume, req, &resp, message);
    if (out != nullptr) *out = resp.volume();
    return code;
  }
  grpc::StatusCode Get(const std::string& name, v1::Volume* out = nullptr) {
    v1::GetVolumeRequest req;
    *req.mutable_cluster() = ref_;
    req.set_name(name);
    v1::GetVolumeResponse resp;
    grpc::StatusCode code = Call(&v1::Volumes::Stub::GetVolume, req, &resp);
    if (out != nullptr) *out = resp.volume();
    return code;
  }
  grpc::StatusCode Delete(const std::string& name) {
    v1::DeleteVolumeRequest req;
    *req.mutable_cluster() = ref_;
    req.set_name(name);
    v1::DeleteVolumeResponse resp;
    return Call(&v1::Volumes::Stub::DeleteVolume, req, &resp);
  }
  grpc::StatusCode Resize(const std::string& name, uint64_t bytes, uint64_t inodes,
                          v1::Volume* out = nullptr, std::string* message = nullptr) {
    v1::ResizeVolumeRequest req;
    *req.mutable_cluster() = ref_;
    req.set_name(name);
    req.set_byte_limit(bytes);
    req.set_inode_limit(inodes);
    v1::ResizeVolumeResponse resp;
    grpc::StatusCode code = Call(&v1::Volumes::Stub::ResizeVolume, req, &resp, message);
    if (out != nullptr) *out = resp.volume();
    return code;
  }
  grpc::StatusCode List(uint32_t max, const std::string& token, v1::ListVolumesResponse* out) {
    v1::ListVolumesRequest req;
    *req.mutable_cluster() = ref_;
    req.set_max_entries(max);
    req.set_page_token(token);
    return Call(&v1::Volumes::Stub::ListVolumes, req, out);
  }

  // A file of `size` bytes of `fill` at `path` through pDFSLib.
  void WriteFile(const std::string& path, size_t size, char fill) {
    std::unique_ptr<File> f;
    ASSERT_EQ(fs_->OpenPath(path, O_CREAT | O_WRONLY | O_TRUNC, 0640, {1000, 1000}, &f), 0);
    ASSERT_EQ(f->Pwrite(0, std::string(size, fill)), 0);
  }
  std::string ReadFile(const std::string& path) {
    std::unique_ptr<File> f;
    std::string out;
    if (fs_->OpenPath(path, O_RDONLY, 0, {}, &f) != 0) return "<cannot open>";
    EXPECT_EQ(f->Pread(0, 1 << 24, &out), 0);
    return out;
  }

  LocalCluster cluster_;
  client::ChildProcess api_;
  std::unique_ptr<v1::Volumes::Stub> stub_;
  v1::ClusterRef ref_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<FileSystem> fs_;
};

TEST_F(VolumeServiceTest, CreateIsIdempotentByName) {
  v1::Volume v;
  ASSERT_EQ(Create("pvc-1", 1 << 20, 100, &v), grpc::StatusCode::OK);
  EXPECT_EQ(v.name(), "pvc-1");
  EXPECT_EQ(v.byte_limit(), 1u << 20);
  EXPECT_EQ(v.inode_limit(), 100u);
  EXPECT_EQ(v.bytes_used(), 0u);
  WriteFile("/pvc-1/f", 1000, 'a');
  // The same parameters again: OK, the volume as it is (its data kept).
  ASSERT_EQ(Create("pvc-1", 1 << 20, 100, &v), grpc::StatusCode::OK);
  EXPECT_EQ(v.bytes_used(), 1000u);
  EXPECT_EQ(ReadFile("/pvc-1/f"), std::string(1000, 'a'));
  // Other quotas: ALREADY_EXISTS, saying what exists.
  std::string message;
  EXPECT_EQ(Create("pvc-1", 2 << 20, 100, nullptr, "", &message), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(message.find("byte quota 1048576"), std::string::npos) << message;
  EXPECT_EQ(Create("pvc-1", 1 << 20, 0), grpc::StatusCode::ALREADY_EXISTS);
  // A directory of the root without quotas is no volume: the name is taken.
  Attr a;
  ASSERT_EQ(fs_->Mkdir(kRootIno, "plain", 0755, {}, &a), 0);
  EXPECT_EQ(Create("plain", 0, 0), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Get("plain"), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Delete("plain"), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(fs_->Lookup(kRootIno, "plain", &a), 0);
}

TEST_F(VolumeServiceTest, DeleteIsIdempotentAndRemovesTheData) {
  ASSERT_EQ(Create("gone", 0, 0), grpc::StatusCode::OK);
  Attr a;
  ASSERT_EQ(fs_->Mkdir(kRootIno, "x", 0755, {}, &a), 0);  // a neighbour that stays
  ASSERT_EQ(fs_->Lookup(kRootIno, "gone", &a), 0);
  WriteFile("/gone/f", 5000, 'b');
  ASSERT_EQ(Delete("gone"), grpc::StatusCode::OK);
  EXPECT_EQ(fs_->Lookup(kRootIno, "gone", &a), ENOENT);
  EXPECT_EQ(Get("gone"), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Delete("gone"), grpc::StatusCode::OK);
  EXPECT_EQ(Delete("never-made"), grpc::StatusCode::OK);
  EXPECT_EQ(fs_->Lookup(kRootIno, "x", &a), 0);
}

TEST_F(VolumeServiceTest, ResizeGrowsOnlineAndNeverBelowTheUse) {
  ASSERT_EQ(Create("r", 10000, 10), grpc::StatusCode::OK);
  WriteFile("/r/f", 8000, 'c');
  std::unique_ptr<File> f;
  ASSERT_EQ(fs_->OpenPath("/r/f", O_WRONLY, 0, {}, &f), 0);
  EXPECT_EQ(f->Pwrite(8000, std::string(4000, 'd')), EDQUOT);
  v1::Volume v;
  ASSERT_EQ(Resize("r", 20000, 10, &v), grpc::StatusCode::OK);
  EXPECT_EQ(v.byte_limit(), 20000u);
  EXPECT_EQ(v.bytes_used(), 8000u);
  // The open file of this client sees the new quota at once.
  EXPECT_EQ(f->Pwrite(8000, std::string(4000, 'd')), 0);
  std::string message;
  EXPECT_EQ(Resize("r", 11999, 10, nullptr, &message), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(message.find("uses 12000 bytes"), std::string::npos) << message;
  EXPECT_EQ(Resize("r", 20000, 0, &v), grpc::StatusCode::OK);  // 0: no limit
  EXPECT_EQ(Resize("r", 12000, 1, &v), grpc::StatusCode::OK);  // exactly the use
  EXPECT_EQ(v.inodes_used(), 1u);
  EXPECT_EQ(Get("r", &v), grpc::StatusCode::OK);
  EXPECT_EQ(v.byte_limit(), 12000u);
  EXPECT_EQ(v.inode_limit(), 1u);
  EXPECT_EQ(Resize("missing", 1, 1), grpc::StatusCode::NOT_FOUND);
}

TEST_F(VolumeServiceTest, ListPagesInNameOrder) {
  std::set<std::string> made;
  for (int i = 0; i < 7; ++i) {
    const std::string name = "vol-" + std::to_string(6 - i);
    ASSERT_EQ(Create(name, 1 << 20, 0), grpc::StatusCode::OK);
    made.insert(name);
  }
  Attr a;
  ASSERT_EQ(fs_->Mkdir(kRootIno, "not-a-volume", 0755, {}, &a), 0);
  v1::ListVolumesResponse all;
  ASSERT_EQ(List(0, "", &all), grpc::StatusCode::OK);
  ASSERT_EQ(all.volumes_size(), 7);
  EXPECT_EQ(all.next_page_token(), "");
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    v1::ListVolumesResponse page;
    ASSERT_EQ(List(3, token, &page), grpc::StatusCode::OK);
    EXPECT_LE(page.volumes_size(), 3);
    for (const v1::Volume& v : page.volumes()) seen.push_back(v.name());
    token = page.next_page_token();
    if (++pages == 2) {
      ASSERT_EQ(Delete("vol-6"), grpc::StatusCode::OK);  // not yet listed
    }
  } while (!token.empty());
  EXPECT_EQ(seen, (std::vector<std::string>{"vol-0", "vol-1", "vol-2", "vol-3", "vol-4", "vol-5"}));
  // A volume deleted meanwhile does not break the listing after its name.
  ASSERT_EQ(Create("vol-2b", 0, 0), grpc::StatusCode::OK);
  v1::ListVolumesResponse page;
  ASSERT_EQ(List(2, "", &page), grpc::StatusCode::OK);
  ASSERT_EQ(Delete(page.volumes(1).name()), grpc::StatusCode::OK);
  ASSERT_EQ(List(2, page.next_page_token(), &page), grpc::StatusCode::OK);
  ASSERT_EQ(page.volumes_size(), 2);
  EXPECT_EQ(page.volumes(0).name(), "vol-2");
  EXPECT_EQ(List(2, "bogus", &page), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(VolumeServiceTest, CapacityIsTheFreeSpaceOfTheServersUp) {
  v1::GetCapacityRequest req;
  *req.mutable_cluster() = ref_;
  v1::GetCapacityResponse resp;
  ASSERT_EQ(Call(&v1::Volumes::Stub::GetCapacity, req, &resp), grpc::StatusCode::OK);
  EXPECT_EQ(resp.replica_count(), 1u);
  v1::ClusterStatus status;
  monitor::MonitorClient monitor(cluster_.monitor_address(), {cluster_.secret()});
  ASSERT_TRUE(monitor.GetClusterStatus(&status).ok());
  uint64_t capacity = 0;
  for (const v1::ServerInfo& s : status.servers()) capacity += s.capacity_bytes();
  EXPECT_EQ(resp.total_bytes(), capacity);
  EXPECT_GT(resp.available_bytes(), 0u);
  EXPECT_LE(resp.available_bytes(), resp.total_bytes());
}

TEST_F(VolumeServiceTest, CloneCopiesTheSourceVolume) {
  ASSERT_EQ(Create("src", 1 << 22, 100), grpc::StatusCode::OK);
  Attr a;
  uint64_t src = 0;
  ASSERT_EQ(fs_->ResolvePath("/src", true, &src), 0);
  ASSERT_EQ(fs_->Mkdir(src, "dir", 0700, {1000, 1000}, &a), 0);
  WriteFile("/src/dir/big", (1 << 20) * 2 + 123, 'z');
  WriteFile("/src/small", 10, 's');
  ASSERT_EQ(fs_->Symlink(src, "link", "dir/big", {}, &a), 0);
  uint64_t small = 0;
  ASSERT_EQ(fs_->ResolvePath("/src/small", true, &small), 0);
  ASSERT_EQ(fs_->Link(small, src, "hard", &a), 0);
  ASSERT_EQ(fs_->SetXattr(small, "user.k", "v", 0), 0);
  v1::Volume source;
  ASSERT_EQ(Get("src", &source), grpc::StatusCode::OK);

  v1::Volume v;
  ASSERT_EQ(Create("copy", 1 << 22, 100, &v, "src"), grpc::StatusCode::OK);
  EXPECT_EQ(v.bytes_used(), source.bytes_used());
  EXPECT_EQ(v.inodes_used(), source.inodes_used());
  EXPECT_EQ(ReadFile("/copy/dir/big"), std::string((1 << 20) * 2 + 123, 'z'));
  EXPECT_EQ(ReadFile("/copy/link"), ReadFile("/copy/dir/big"));
  ASSERT_EQ(fs_->Stat("/copy/dir", &a), 0);
  EXPECT_EQ(a.mode & 07777, 0700u);
  EXPECT_EQ(a.uid, 1000u);
  Attr s1, s2;
  ASSERT_EQ(fs_->Stat("/copy/small", &s1), 0);
  ASSERT_EQ(fs_->Stat("/copy/hard", &s2), 0);
  EXPECT_EQ(s1.ino, s2.ino);  // still one file with two names
  EXPECT_EQ(s1.nlink, 2u);
  std::string value;
  ASSERT_EQ(fs_->GetXattr(s1.ino, "user.k", &value), 0);
  EXPECT_EQ(value, "v");
  // The copy is its own: changing it leaves the source alone.
  WriteFile("/copy/small", 3, 'n');
  EXPECT_EQ(ReadFile("/src/small"), std::string(10, 's'));
  // Repeated: the same volume. The hidden name it was made under is gone.
  ASSERT_EQ(Create("copy", 1 << 22, 100, &v, "src"), grpc::StatusCode::OK);
  v1::ListVolumesResponse all;
  ASSERT_EQ(List(0, "", &all), grpc::StatusCode::OK);
  ASSERT_EQ(all.volumes_size(), 2);
  std::vector<ReaddirEntry> root;
  bool eof = false;
  ASSERT_EQ(fs_->Readdir(kRootIno, 0, 100, &root, &eof), 0);
  EXPECT_EQ(root.size(), 2u);
  // Errors: a missing source; a source that does not fit the new quotas.
  EXPECT_EQ(Create("c2", 1 << 22, 100, nullptr, "nope"), grpc::StatusCode::NOT_FOUND);
  std::string message;
  EXPECT_EQ(Create("c3", 1 << 20, 100, nullptr, "src", &message),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(message.find("more than the new quotas"), std::string::npos) << message;
  EXPECT_EQ(Get("c3"), grpc::StatusCode::NOT_FOUND);
}

TEST_F(VolumeServiceTest, BadRequestsGetTheirCodes) {
  // Names.
  EXPECT_EQ(Create("", 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Create("a/b", 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Create("..", 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Create(std::string(256, 'n'), 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Create(".pdpm-clone-x", 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Create(std::string(255, 'n'), 0, 0), grpc::StatusCode::OK);
  EXPECT_EQ(Get("a/b"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Get("missing"), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Resize("", 1, 1), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Delete("/"), grpc::StatusCode::INVALID_ARGUMENT);
  // The cluster reference.
  const v1::ClusterRef good = ref_;
  ref_.clear_monitors();
  EXPECT_EQ(Get("x"), grpc::StatusCode::INVALID_ARGUMENT);
  ref_ = good;
  ref_.clear_cluster_secret();
  EXPECT_EQ(Get("x"), grpc::StatusCode::INVALID_ARGUMENT);
  ref_ = good;
  ref_.set_transport("carrier-pigeon");
  EXPECT_EQ(Get("x"), grpc::StatusCode::INVALID_ARGUMENT);
  // A wrong secret: refused, and not served by the client the right one opened.
  ref_ = good;
  ASSERT_EQ(Get("missing"), grpc::StatusCode::NOT_FOUND);
  ref_.set_cluster_secret(good.cluster_secret() + "x");
  EXPECT_EQ(Get("missing"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Create("intruder", 0, 0), grpc::StatusCode::PERMISSION_DENIED);
  // No monitor there.
  ref_ = good;
  ref_.set_monitors("127.0.0.1:" + std::to_string(ClosedPort()));
  EXPECT_EQ(Get("x"), grpc::StatusCode::UNAVAILABLE);
  ref_ = good;
  EXPECT_EQ(Get("intruder"), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace pdpm::pdfs
