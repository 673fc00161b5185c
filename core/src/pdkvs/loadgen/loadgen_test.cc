#include "pdkvs/loadgen/loadgen.h"

#include <gtest/gtest.h>

#include "pdkvs/loadgen/reply.h"

namespace pdpm::pdkvs::loadgen {
namespace {

TEST(ParseReply, EveryTypeAndIncompleteInput) {
  size_t used;
  Reply r;
  ASSERT_EQ(ParseReply("+OK\r\n", &used, &r), ReplyParse::kReply);
  EXPECT_EQ(r.type, ReplyType::kSimple);
  EXPECT_EQ(r.text, "OK");
  EXPECT_EQ(used, 5u);
  ASSERT_EQ(ParseReply("-ERR no\r\n+OK\r\n", &used, &r), ReplyParse::kReply);
  EXPECT_EQ(r.type, ReplyType::kError);
  EXPECT_EQ(r.text, "ERR no");
  EXPECT_EQ(used, 9u);
  ASSERT_EQ(ParseReply(":-12\r\n", &used, &r), ReplyParse::kReply);
  EXPECT_EQ(r.integer, -12);
  ASSERT_EQ(ParseReply("$-1\r\n", &used, &r), ReplyParse::kReply);
  EXPECT_EQ(r.type, ReplyType::kNull);
  std::string bulk = std::string("$5\r\na\r\nbc\r\n");
  ASSERT_EQ(ParseReply(bulk, &used, &r), ReplyParse::kReply);
  EXPECT_EQ(r.type, ReplyType::kBulk);
  EXPECT_EQ(r.text, "a\r\nbc");
  EXPECT_EQ(used, bulk.size());
  for (size_t cut = 0; cut < bulk.size(); ++cut) {
    EXPECT_EQ(ParseReply(bulk.substr(0, cut), &used, &r), ReplyParse::kIncomplete) << cut;
  }
  EXPECT_EQ(ParseReply("$0\r\n\r\n", &used, &r), ReplyParse::kReply);
  EXPECT_EQ(r.text, "");
}

TEST(ParseReply, MalformedInput) {
  size_t used;
  Reply r;
  EXPECT_EQ(ParseReply("*1\r\n", &used, &r), ReplyParse::kError);
  EXPECT_EQ(ParseReply("$x\r\n", &used, &r), ReplyParse::kError);
  EXPECT_EQ(ParseReply("$-2\r\n", &used, &r), ReplyParse::kError);
  EXPECT_EQ(ParseReply("$2\r\nabcd", &used, &r), ReplyParse::kError);
  EXPECT_EQ(ParseReply(":1x\r\n", &used, &r), ReplyParse::kError);
  EXPECT_EQ(ParseReply("\r\n", &used, &r), ReplyParse::kError);
}

TEST(LatencyHistogram, PercentilesWithinBucketPrecision) {
  LatencyHistogram h;
  EXPECT_EQ(h.Percentile(0.5), 0u);
  for (uint64_t v = 1; v <= 100000; ++v) h.Record(v * 1000);  // 1 µs .. 100 ms
  EXPECT_EQ(h.count(), 100000u);
  EXPECT_NEAR(static_cast<double>(h.Percentile(0.50)), 50e6, 50e6 / 32);
  EXPECT_NEAR(static_cast<double>(h.Percentile(0.99)), 99e6, 99e6 / 32);
  LatencyHistogram other;
  other.Record(5);
  h.Merge(other);
  EXPECT_EQ(h.count(), 100001u);
  EXPECT_EQ(h.Percentile(0.0), 5u);
}

TEST(LatencyHistogram, BucketsAreMonotonic) {
  size_t last = 0;
  for (uint64_t v = 0; v < (1u << 20); v += 7) {
    size_t b = LatencyHistogram::BucketOf(v);
    ASSERT_GE(b, last);
    last = b;
    uint64_t mid = LatencyHistogram::BucketMiddle(b);
    ASSERT_LE(static_cast<double>(mid > v ? mid - v : v - mid), v / 32.0 + 1) << v;
  }
  EXPECT_LT(LatencyHistogram::BucketOf(UINT64_MAX), 64u + 58 * 32);
}

TEST(RunLoadgen, BadOptionsAreRejectedBeforeConnecting) {
  LoadgenOptions o;
  ASSERT_TRUE(WorkloadByName("etc", &o.workload).ok());
  o.port = 1;
  o.records = 0;
  LoadgenResult r;
  EXPECT_EQ(RunLoadgen(o, &r).code(), StatusCode::kInvalidArgument);
  o.records = 10;
  o.connections = 0;
  EXPECT_EQ(RunLoadgen(o, &r).code(), StatusCode::kInvalidArgument);
  o.connections = 1;
  o.host = "localhost";
  EXPECT_EQ(RunLoadgen(o, &r).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdpm::pdkvs::loadgen
