#include "server/labels.h"

#include <gtest/gtest.h>

#include <string>

#include "common/file_util.h"
#include "pm/test_util.h"

namespace pdpm::server {
namespace {

using pm::TempDir;

std::string WriteFile(const TempDir& dir, const std::string& text) {
  std::string path = dir.path() + "/labels";
  EXPECT_TRUE(WriteFileAtomically(path, text, 0644).ok());
  return path;
}

TEST(ParseLabelListTest, KeyValueItemsReplaceEarlierValues) {
  Labels labels{{"zone", "old"}, {"pod", "p-0"}};
  ASSERT_TRUE(ParseLabelList("zone=z1,rack=r2,host=h3", &labels).ok());
  EXPECT_EQ(labels, (Labels{{"zone", "z1"}, {"rack", "r2"}, {"host", "h3"}, {"pod", "p-0"}}));
  ASSERT_TRUE(ParseLabelList("", &labels).ok());
  EXPECT_EQ(labels.size(), 4u);
}

TEST(ParseLabelListTest, RejectsItemsThatAreNotKeyValue) {
  for (const char* bad : {"zone", "=z1", "zone=", "zone=z1,,rack=r1", "zone=z1,"}) {
    Labels labels{{"host", "h"}};
    Status s = ParseLabelList(bad, &labels);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad << ": " << s.ToString();
    EXPECT_EQ(labels, (Labels{{"host", "h"}})) << bad << " changed the labels";
  }
}

TEST(LoadLabelsFileTest, ReadsKeyValueLinesAndKeepsLabelsAlreadySet) {
  TempDir dir;
  std::string path = WriteFile(dir,
                               "# topology of node n1\n"
                               "config_version = 1\n"
                               "\n"
                               "zone = z1\n"
                               "rack=r7\n"
                               "host = n1\n");
  Labels labels{{"zone", "from-flag"}};
  ASSERT_TRUE(LoadLabelsFile(path, &labels).ok());
  EXPECT_EQ(labels, (Labels{{"zone", "from-flag"}, {"rack", "r7"}, {"host", "n1"}}));
}

TEST(LoadLabelsFileTest, AnEmptyFileIsNoLabel) {
  TempDir dir;
  Labels labels;
  ASSERT_TRUE(LoadLabelsFile(WriteFile(dir, "# no topology labels on this node\n"), &labels).ok());
  EXPECT_TRUE(labels.empty());
}

TEST(LoadLabelsFileTest, MissingFileIsNotFound) {
  TempDir dir;
  Labels labels;
  Status s = LoadLabelsFile(dir.path() + "/absent", &labels);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("labels file"), std::string::npos) << s.ToString();
}

TEST(LoadLabelsFileTest, MalformedFilesSayWhereAndChangeNothing) {
  struct Case {
    const char* text;
    StatusCode code;
    const char* says;
  };
  for (const Case& c : {
           Case{"zone = z1\nrack r1\n", StatusCode::kInvalidArgument, "line 2"},
           Case{"zone = z1\nzone = z2\n", StatusCode::kInvalidArgument, "zone is given twice"},
           Case{"zone = z1\nrack =\n", StatusCode::kInvalidArgument, "label rack has no value"},
           Case{"config_version = 2\nzone = z1\n", StatusCode::kNotSupported, "config_version 2"},
       }) {
    TempDir dir;
    Labels labels{{"host", "h"}};
    Status s = LoadLabelsFile(WriteFile(dir, c.text), &labels);
    EXPECT_EQ(s.code(), c.code) << c.text << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.ToString();
    EXPECT_EQ(labels, (Labels{{"host", "h"}})) << c.text;
  }
}

}  // namespace
}  // namespace pdpm::server
