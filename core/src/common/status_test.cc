#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace pdpm {
namespace {

TEST(StatusTest, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "ok");
  EXPECT_TRUE(s.message().empty());
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = Status::PermissionDenied("segment key mismatch");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.ToString(), "permission_denied: segment key mismatch");
}

TEST(StatusTest, ContextIsPrefixed) {
  Status s = Status::Corruption("bad checksum").WithContext("superblock");
  EXPECT_EQ(s.ToString(), "corruption: superblock: bad checksum");
  EXPECT_TRUE(Status::OK().WithContext("x").ok());
}

TEST(StatusTest, FromErrnoNamesTheError) {
  Status s = Status::FromErrno("open", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.ToString().find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace pdpm
