#include "pdkvs/gateway/resp.h"

#include <gtest/gtest.h>

namespace pdpm::pdkvs {
namespace {

struct Parsed {
  RespParse result;
  size_t consumed = 0;
  std::vector<std::string> args;
  std::string error;
};

Parsed Parse(std::string_view data, RespLimits limits = {}) {
  Parsed p;
  std::vector<std::string_view> args;
  std::string scratch;
  p.result = ParseRespRequest(data, limits, &p.consumed, &args, &scratch, &p.error);
  for (auto a : args) p.args.emplace_back(a);
  return p;
}

TEST(RespParser, Multibulk) {
  Parsed p = Parse("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n");
  ASSERT_EQ(p.result, RespParse::kRequest);
  EXPECT_EQ(p.consumed, 20u);
  EXPECT_EQ(p.args, (std::vector<std::string>{"GET", "k"}));
}

TEST(RespParser, BinarySafeAndEmpty) {
  static constexpr char kReq[] = "*2\r\n$3\r\na\0b\r\n$0\r\n\r\n";
  std::string req(kReq, sizeof(kReq) - 1);
  Parsed p = Parse(req);
  ASSERT_EQ(p.result, RespParse::kRequest);
  EXPECT_EQ(p.args[0], std::string("a\0b", 3));
  EXPECT_EQ(p.args[1], "");
}

TEST(RespParser, EveryPrefixIsIncomplete) {
  const std::string req = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
  for (size_t i = 0; i < req.size(); ++i) {
    EXPECT_EQ(Parse(req.substr(0, i)).result, RespParse::kIncomplete) << i;
  }
  EXPECT_EQ(Parse(req).result, RespParse::kRequest);
}

TEST(RespParser, EmptyMultibulkIsSkipped) {
  Parsed p = Parse("*0\r\n");
  EXPECT_EQ(p.result, RespParse::kRequest);
  EXPECT_TRUE(p.args.empty());
  EXPECT_EQ(p.consumed, 4u);
}

TEST(RespParser, ProtocolErrors) {
  EXPECT_EQ(Parse("*x\r\n").error, "Protocol error: invalid multibulk length");
  EXPECT_EQ(Parse("*1\r\n:3\r\n").error, "Protocol error: expected '$', got ':'");
  EXPECT_EQ(Parse("*1\r\n$-2\r\n").error, "Protocol error: invalid bulk length");
  RespLimits small;
  small.max_bulk = 4;
  EXPECT_EQ(Parse("*1\r\n$5\r\n", small).error, "Protocol error: invalid bulk length");
  small.max_args = 2;
  EXPECT_EQ(Parse("*3\r\n", small).result, RespParse::kError);
  small.max_inline = 8;
  EXPECT_EQ(Parse("PING PING PING", small).error, "Protocol error: too big inline request");
  // As Redis: the two bytes after a bulk string are skipped unread.
  Parsed p = Parse("*1\r\n$1\r\nabc\r\n");
  EXPECT_EQ(p.args, std::vector<std::string>{"a"});
  EXPECT_EQ(p.consumed, 11u);
}

TEST(RespParser, Inline) {
  Parsed p = Parse("SET k \"a b\\x41\\n\" 'it\\'s'\r\nPING\r\n");
  ASSERT_EQ(p.result, RespParse::kRequest);
  EXPECT_EQ(p.args, (std::vector<std::string>{"SET", "k", "a bA\n", "it's"}));
  EXPECT_EQ(Parse("PING\n").args, (std::vector<std::string>{"PING"}));
  EXPECT_TRUE(Parse("   \r\n").args.empty());
  EXPECT_EQ(Parse("GET \"k\n").error, "Protocol error: unbalanced quotes in request");
  EXPECT_EQ(Parse("GET \"k\"x\n").result, RespParse::kError);
  EXPECT_EQ(Parse("GET k").result, RespParse::kIncomplete);
}

TEST(RespWriter, Protocols) {
  std::string out;
  RespWriter w(&out, 2);
  w.Null();
  w.Map(1);
  w.Integer(-7);
  w.Bulk("hi");
  w.Error("ERR a\r\nb");
  EXPECT_EQ(out, "$-1\r\n*2\r\n:-7\r\n$2\r\nhi\r\n-ERR a  b\r\n");
  out.clear();
  w.set_protocol(3);
  w.Null();
  w.Map(1);
  w.Verbatim("x");
  w.Set(2);
  EXPECT_EQ(out, "_\r\n%1\r\n=5\r\ntxt:x\r\n~2\r\n");
}

}  // namespace
}  // namespace pdpm::pdkvs
