#include "net/tcp/wire.h"

#include <gtest/gtest.h>

#include <cstring>

namespace pdpm::net::tcp {
namespace {

TEST(WireTest, HeaderRoundTrips) {
  FrameHeader h;
  h.type = FrameType::kWriteWithImm;
  h.flags = kFlagPersist | kFlagAwaited;
  h.length = 777;
  h.key = 0xdeadbeef;
  h.imm = 42;
  h.seq = 1ull << 40;
  h.offset = 123456789;
  uint8_t b[kFrameHeaderSize];
  EncodeFrameHeader(h, b);
  FrameHeader d;
  ASSERT_TRUE(DecodeFrameHeader(b, 1 << 20, &d).ok());
  EXPECT_EQ(d.type, h.type);
  EXPECT_EQ(d.flags, h.flags);
  EXPECT_EQ(d.length, h.length);
  EXPECT_EQ(d.key, h.key);
  EXPECT_EQ(d.imm, h.imm);
  EXPECT_EQ(d.seq, h.seq);
  EXPECT_EQ(d.offset, h.offset);
}

TEST(WireTest, RejectsMalformedAndOversizeHeaders) {
  FrameHeader h;
  h.type = FrameType::kWrite;
  h.length = 100;
  uint8_t b[kFrameHeaderSize];
  FrameHeader d;
  EncodeFrameHeader(h, b);
  b[0] ^= 1;
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kCorruption);
  EncodeFrameHeader(h, b);
  b[2] = 2;  // a future version
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kCorruption);
  EncodeFrameHeader(h, b);
  b[3] = 9;  // unknown type
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kCorruption);
  h.length = (1 << 20) + 1;
  EncodeFrameHeader(h, b);
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kTooLarge);
  h.type = FrameType::kRead;
  h.length = 0;
  h.read_length = (1 << 20) + 1;
  EncodeFrameHeader(h, b);
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kTooLarge);
  h.type = FrameType::kFetchAdd;
  h.read_length = 0;
  h.length = 8;  // atomics carry no payload
  EncodeFrameHeader(h, b);
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kCorruption);
  h.length = 0;
  h.flags = kFlagAwaited;  // any request may be awaited
  EncodeFrameHeader(h, b);
  EXPECT_TRUE(DecodeFrameHeader(b, 1 << 20, &d).ok());
  h.flags = kFlagPersist;  // only writes persist
  EncodeFrameHeader(h, b);
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kCorruption);
  h.flags = 1u << 2;  // reserved
  EncodeFrameHeader(h, b);
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kCorruption);
  h.type = FrameType::kResponse;
  h.flags = kFlagAwaited;  // flags are for requests
  EncodeFrameHeader(h, b);
  EXPECT_EQ(DecodeFrameHeader(b, 1 << 20, &d).code(), StatusCode::kCorruption);
}

TEST(WireTest, HelloRoundTripsAndRejectsLongBlob) {
  Hello h;
  h.core = 3;
  h.max_transfer = 4096;
  h.blob_length = 20;
  uint8_t b[kHelloSize];
  EncodeHello(h, b);
  Hello d;
  ASSERT_TRUE(DecodeHello(b, &d).ok());
  EXPECT_EQ(d.core, 3u);
  EXPECT_EQ(d.blob_length, 20);
  b[5] = 200;
  EXPECT_EQ(DecodeHello(b, &d).code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace pdpm::net::tcp
