#include "tools/object_id.h"

#include <gtest/gtest.h>

namespace pdpm::tools {
namespace {

TEST(ObjectIdTest, DecimalAndHexForms) {
  dsm::ObjectId id;
  ASSERT_TRUE(ParseObjectId("42", &id).ok());
  EXPECT_EQ(id, (dsm::ObjectId{0, 42}));
  ASSERT_TRUE(ParseObjectId("18446744073709551615", &id).ok());
  EXPECT_EQ(id, (dsm::ObjectId{0, ~0ull}));
  ASSERT_TRUE(ParseObjectId("0123456789abcdefFEDCBA9876543210", &id).ok());
  EXPECT_EQ(id, (dsm::ObjectId{0x0123456789abcdefull, 0xfedcba9876543210ull}));
  EXPECT_EQ(FormatObjectId(id), "0123456789abcdeffedcba9876543210");
}

TEST(ObjectIdTest, RejectsEverythingElse) {
  dsm::ObjectId id{7, 7};
  for (const char* bad : {"", "-1", "+1", "0x10", "1 ", " 1", "abc", "18446744073709551616",
                          "0123456789abcdef0123456789abcdeg", "0123456789abcdef0123456789abcde",
                          "0123456789abcdef0123456789abcdef0"}) {
    Status s = ParseObjectId(bad, &id);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.ToString().find("bad object id"), std::string::npos) << bad;
  }
  EXPECT_EQ(id, (dsm::ObjectId{7, 7}));
}

}  // namespace
}  // namespace pdpm::tools
