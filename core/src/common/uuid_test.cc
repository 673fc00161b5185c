#include "common/uuid.h"

#include <gtest/gtest.h>

namespace pdpm {
namespace {

TEST(UuidTest, DefaultIsNil) {
  Uuid u;
  EXPECT_TRUE(u.is_nil());
  EXPECT_EQ(u.ToString(), "00000000-0000-0000-0000-000000000000");
}

TEST(UuidTest, ParseAndFormatRoundTrip) {
  Uuid u;
  ASSERT_TRUE(Uuid::Parse("123E4567-e89b-12d3-A456-426614174000", &u).ok());
  EXPECT_EQ(u.bytes[0], 0x12);
  EXPECT_EQ(u.bytes[15], 0x00);
  EXPECT_EQ(u.ToString(), "123e4567-e89b-12d3-a456-426614174000");
  Uuid again;
  ASSERT_TRUE(Uuid::Parse(u.ToString(), &again).ok());
  EXPECT_EQ(u, again);
  EXPECT_FALSE(u.is_nil());
}

TEST(UuidTest, ParseRejectsMalformedText) {
  Uuid u;
  for (const char* bad : {"", "123e4567e89b12d3a456426614174000",
                          "123e4567-e89b-12d3-a456-42661417400",    // short
                          "123e4567-e89b-12d3-a456-4266141740000",  // long
                          "123e4567-e89b-12d3-a456_426614174000",   // wrong separator
                          "123e4567-e89b-12d3-a456-42661417400g"}) {
    Status s = Uuid::Parse(bad, &u);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(UuidTest, RandomIsVersion4AndDistinct) {
  Uuid a, b;
  ASSERT_TRUE(Uuid::Random(&a).ok());
  ASSERT_TRUE(Uuid::Random(&b).ok());
  EXPECT_NE(a, b);
  EXPECT_EQ(a.bytes[6] >> 4, 4);
  EXPECT_EQ(a.bytes[8] & 0xC0, 0x80);
  EXPECT_EQ(a.ToString()[14], '4');
}

}  // namespace
}  // namespace pdpm
