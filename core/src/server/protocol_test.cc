#include "server/protocol.h"

#include <gtest/gtest.h>

#include "server/kv_protocol.h"
#include "server/segment_role.h"

namespace pdpm::server {
namespace {

std::span<const uint8_t> Span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(ProtocolTest, RoundTrip) {
  std::string msg;
  Encoder e(&msg);
  e.Header({7, ClusterCredential("s")});
  e.Id({1, 2});
  e.U64(99);
  dsm::GlobalAddress a{dsm::Descriptor::Make(dsm::kPermRead | dsm::kPermWrite, 1), 5, 4096};
  e.Address(a);
  e.Bytes("tail");
  ASSERT_EQ(msg.size(), kRequestHeaderSize + 16 + 8 + 16 + 4);
  Decoder d(Span(msg));
  RequestHeader h;
  dsm::ObjectId id;
  uint64_t v = 0;
  dsm::GlobalAddress got;
  ASSERT_TRUE(d.Header(&h).ok());
  EXPECT_EQ(h.epoch, 7u);
  EXPECT_EQ(h.credential, ClusterCredential("s"));
  ASSERT_TRUE(d.Id(&id).ok());
  EXPECT_EQ(id, (dsm::ObjectId{1, 2}));
  ASSERT_TRUE(d.U64(&v).ok());
  EXPECT_EQ(v, 99u);
  ASSERT_TRUE(d.Address(&got).ok());
  EXPECT_EQ(got, a);
  EXPECT_EQ(d.Rest(), "tail");
  EXPECT_TRUE(d.Done().ok());
}

TEST(ProtocolTest, RefusesShortLongAndForeignMessages) {
  std::string msg;
  Encoder e(&msg);
  e.Header({1, 2});
  e.U64(3);
  RequestHeader h;
  uint64_t v;
  for (size_t cut = 0; cut < msg.size(); cut++) {
    std::string prefix = msg.substr(0, cut);
    Decoder d(Span(prefix));
    Status s = d.Header(&h);
    if (s.ok()) s = d.U64(&v);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << cut;
  }
  std::string long_msg = msg + "x";
  Decoder longer(Span(long_msg));
  ASSERT_TRUE(longer.Header(&h).ok());
  ASSERT_TRUE(longer.U64(&v).ok());
  EXPECT_EQ(longer.Done().code(), StatusCode::kInvalidArgument);
  std::string v2 = msg;
  v2[0] = 2;
  Decoder foreign(Span(v2));
  EXPECT_EQ(foreign.Header(&h).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ClusterCredential("a"), ClusterCredential("b"));
}

TEST(SegmentRoleTest, EncodeDecode) {
  for (SegmentRole r :
       {SegmentRole{SegmentKind::kHeap, 0, 1}, SegmentRole{SegmentKind::kTable, 17, 0xfffffffe},
        SegmentRole{SegmentKind::kTable, 3, 0}, SegmentRole{SegmentKind::kTxLog, 0, 0},
        SegmentRole{}}) {
    SegmentRole back;
    ASSERT_TRUE(SegmentRole::Decode(r.Encode(), &back).ok());
    EXPECT_EQ(back.kind, r.kind);
    EXPECT_EQ(back.table, r.table);
    EXPECT_EQ(back.global, r.global);
  }
  SegmentRole out;
  EXPECT_EQ(SegmentRole::Decode(uint64_t{9} << 56, &out).code(), StatusCode::kCorruption);
  // A transaction log is server-local: no table, no global number.
  EXPECT_EQ(SegmentRole::Decode((uint64_t{3} << 56) | 5, &out).code(), StatusCode::kCorruption);
  EXPECT_EQ(SegmentRole::Decode((uint64_t{1} << 56) | (uint64_t{4} << 32), &out).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(SegmentRole::Decode(uint64_t{2} << 56, &out).code(), StatusCode::kCorruption);
  EXPECT_EQ(SegmentRole::Decode(5, &out).code(), StatusCode::kCorruption);
  // A segment without a region is free.
  std::string blank(8192, '\0');
  ASSERT_TRUE(ReadSegmentRole({blank.data(), blank.size()}, &out).ok());
  EXPECT_EQ(out.kind, SegmentKind::kFree);
}

// What decoding the encoding of `r` as `method` answers.
StatusCode EncodeThenDecode(uint16_t method, const KvRequest& r) {
  std::string msg;
  Encoder e(&msg);
  EncodeKvRequest(method, r, &e);
  Decoder d(Span(msg));
  KvRequest back;
  return DecodeKvRequest(method, &d, &back).code();
}

TEST(ProtocolTest, KvRequestsRoundTripAndRefuseTruncation) {
  KvRequest set;
  set.table = 3;
  set.key = "key";
  set.value = "value";
  set.arg0 = kKvSetWantOld | (2 << kKvSetExpiryShift) | 1;
  set.arg1 = 12345;
  KvRequest put;
  put.table = 1;
  put.arg0 = 1;
  put.pairs = {{"a", "1"}, {"", ""}};
  KvRequest get;
  get.table = 2;
  get.keys = {"x", "yy"};
  for (auto [method, req] :
       {std::pair{kKvSet, set}, std::pair{kKvMultiPut, put}, std::pair{kKvMultiGet, get},
        std::pair{kKvMultiGetVersioned, get}, std::pair{kKvVersions, get}}) {
    std::string msg;
    Encoder e(&msg);
    EncodeKvRequest(method, req, &e);
    KvRequest got;
    Decoder d(Span(msg));
    ASSERT_TRUE(DecodeKvRequest(method, &d, &got).ok()) << method;
    EXPECT_EQ(got.table, req.table);
    EXPECT_EQ(got.key, req.key);
    EXPECT_EQ(got.value, req.value);
    EXPECT_EQ(got.arg0, req.arg0);
    EXPECT_EQ(got.arg1, req.arg1);
    EXPECT_EQ(got.keys, req.keys);
    EXPECT_EQ(got.pairs, req.pairs);
    for (size_t cut = 0; cut < msg.size(); cut++) {
      std::string prefix = msg.substr(0, cut);
      Decoder short_d(Span(prefix));
      KvRequest r;
      EXPECT_EQ(DecodeKvRequest(method, &short_d, &r).code(), StatusCode::kInvalidArgument)
          << method << " cut " << cut;
    }
    std::string longer = msg + "x";
    Decoder long_d(Span(longer));
    KvRequest r;
    EXPECT_EQ(DecodeKvRequest(method, &long_d, &r).code(), StatusCode::kInvalidArgument);
  }
  // Unknown set flags, table 0, a non-KV method.
  for (uint64_t flags : {uint64_t{3}, uint64_t{3} << kKvSetExpiryShift, uint64_t{1} << 5}) {
    KvRequest bad = set;
    bad.arg0 = flags;
    EXPECT_EQ(EncodeThenDecode(kKvSet, bad), StatusCode::kInvalidArgument) << flags;
  }
  std::string msg;
  Encoder e(&msg);
  KvRequest zero;
  EncodeKvRequest(kKvCount, zero, &e);
  Decoder d(Span(msg));
  KvRequest r;
  EXPECT_EQ(DecodeKvRequest(kKvCount, &d, &r).code(), StatusCode::kInvalidArgument);
  Decoder other(Span(msg));
  EXPECT_EQ(DecodeKvRequest(kPutObj, &other, &r).code(), StatusCode::kInvalidArgument);
}

TEST(ProtocolTest, KvBatchRoundTripsAndRefusesWhatItCannotCarry) {
  KvRequest batch;
  batch.table = 7;
  KvBatchEntry& get = batch.batch.emplace_back();
  get.method = kKvGet;
  get.r.key = "a";
  KvBatchEntry& set = batch.batch.emplace_back();
  set.method = kKvSet;
  set.r.key = "b";
  set.r.value = "value";
  set.r.arg0 = 1;
  KvBatchEntry& incr = batch.batch.emplace_back();
  incr.method = kKvIncrBy;
  incr.r.key = "c";
  incr.r.arg0 = static_cast<uint64_t>(-5);
  std::string msg;
  Encoder e(&msg);
  EncodeKvRequest(kKvBatch, batch, &e);
  KvRequest got;
  Decoder d(Span(msg));
  ASSERT_TRUE(DecodeKvRequest(kKvBatch, &d, &got).ok());
  ASSERT_EQ(got.batch.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got.batch[i].method, batch.batch[i].method);
    EXPECT_EQ(got.batch[i].r.table, 7u);
    EXPECT_EQ(got.batch[i].r.key, batch.batch[i].r.key);
    EXPECT_EQ(got.batch[i].r.value, batch.batch[i].r.value);
    EXPECT_EQ(got.batch[i].r.arg0, batch.batch[i].r.arg0);
  }
  // Conditional set and increment: not idempotent; gets and plain sets are.
  EXPECT_FALSE(IsKvIdempotent(kKvBatch, batch));
  batch.batch[1].r.arg0 = 0;
  batch.batch.pop_back();
  EXPECT_TRUE(IsKvIdempotent(kKvBatch, batch));
  for (size_t cut = 0; cut < msg.size(); cut++) {
    std::string prefix = msg.substr(0, cut);
    Decoder short_d(Span(prefix));
    KvRequest r;
    EXPECT_EQ(DecodeKvRequest(kKvBatch, &short_d, &r).code(), StatusCode::kInvalidArgument)
        << "cut " << cut;
  }
  // Entries a batch cannot carry: a multi-key request, a nested batch, a
  // get-and-delete, a set returning the old value.
  for (auto [method, arg0] :
       {std::pair{kKvMultiGet, uint64_t{0}}, std::pair{kKvBatch, uint64_t{0}},
        std::pair{kKvGetDelete, uint64_t{0}}, std::pair{kKvSet, kKvSetWantOld}}) {
    KvRequest bad;
    bad.table = 1;
    KvBatchEntry& b = bad.batch.emplace_back();
    b.method = method;
    b.r.key = "k";
    b.r.arg0 = arg0;
    EXPECT_EQ(EncodeThenDecode(kKvBatch, bad), StatusCode::kInvalidArgument) << method;
  }
}

}  // namespace
}  // namespace pdpm::server
