#include "client/client_flags.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace pdpm::client {
namespace {

class ClientFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "client_flags_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::string WriteFile(const std::string& name, const std::string& content) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }

  // Parses `args` (after the program name) into flags_ registered on a parser.
  Status Parse(std::vector<std::string> args) {
    FlagParser parser("prog");
    flags_.Register(&parser);
    std::vector<const char*> argv{"prog"};
    for (const auto& a : args) argv.push_back(a.c_str());
    return parser.Parse(static_cast<int>(argv.size()), argv.data());
  }

  std::string dir_;
  ClientFlags flags_;
};

TEST_F(ClientFlagsTest, GivesTheOptionsTheFlagsName) {
  std::string secret = WriteFile("secret", "s3cret\n");
  ASSERT_TRUE(
      Parse({"--monitor", "a:1,b:2", "--secret-file", secret, "--transport", "verbs"}).ok());
  EXPECT_TRUE(flags_.given());
  ClientOptions options;
  options.op_timeout_ms = 777;
  ASSERT_TRUE(flags_.ToOptions(&options).ok());
  EXPECT_EQ(options.monitor, "a:1,b:2");
  EXPECT_EQ(options.cluster_secret, "s3cret");
  EXPECT_EQ(options.transport, net::BackendKind::kVerbs);
  EXPECT_EQ(options.op_timeout_ms, 777u) << "fields the flags do not name are the caller's";
}

TEST_F(ClientFlagsTest, EveryMistakeNamesItsFlag) {
  std::string secret = WriteFile("secret", "s3cret");
  std::string empty = WriteFile("empty", "\n");
  struct Case {
    std::vector<std::string> args;
    std::string flag;
    StatusCode code = StatusCode::kInvalidArgument;
  };
  std::vector<Case> cases = {
      {{"--secret-file", secret}, "--monitor"},
      {{"--monitor", "a:1"}, "--secret-file"},
      {{"--monitor", "a:1", "--secret-file", dir_ + "/missing"},
       "--secret-file",
       StatusCode::kNotFound},
      {{"--monitor", "a:1", "--secret-file", empty}, "--secret-file"},
      {{"--monitor", "a:1", "--secret-file", secret, "--transport", "udp"}, "--transport"},
  };
  for (const auto& c : cases) {
    flags_ = ClientFlags{};
    ASSERT_TRUE(Parse(c.args).ok());
    ClientOptions options;
    Status s = flags_.ToOptions(&options);
    EXPECT_EQ(s.code(), c.code) << c.flag << ": " << s.ToString();
    EXPECT_NE(s.ToString().find(c.flag), std::string::npos) << s.ToString();
  }
}

TEST_F(ClientFlagsTest, WithoutMonitorTheyAreNotGiven) {
  ASSERT_TRUE(Parse({}).ok());
  EXPECT_FALSE(flags_.given());
  EXPECT_EQ(flags_.transport, "tcp");
}

TEST(ClientOptionsFromStrings, TheCAbisArguments) {
  ClientOptions o;
  ASSERT_TRUE(ClientOptionsFromStrings("m:1", "s", nullptr, &o).ok());
  EXPECT_EQ(o.monitor, "m:1");
  EXPECT_EQ(o.cluster_secret, "s");
  EXPECT_EQ(o.transport, net::BackendKind::kTcp);
  ASSERT_TRUE(ClientOptionsFromStrings("m:1", nullptr, "verbs", &o).ok());
  EXPECT_EQ(o.cluster_secret, "") << "no secret: the monitor refuses it, not the parsing";
  EXPECT_EQ(o.transport, net::BackendKind::kVerbs);
  EXPECT_EQ(ClientOptionsFromStrings(nullptr, "s", nullptr, &o).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ClientOptionsFromStrings("", "s", nullptr, &o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ClientOptionsFromStrings("m:1", "s", "udp", &o).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdpm::client
