#include "common/path.h"

#include <gtest/gtest.h>

namespace dsfs {
namespace {

TEST(PathTest, PrintableNameEscapesWhatCouldBreakALineOrDriveATerminal) {
  EXPECT_EQ(PrintableName("plain.jpg"), "plain.jpg");
  EXPECT_EQ(PrintableName("caf\xc3\xa9 \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(PrintableName("a\nb"), "a\\012b");
  EXPECT_EQ(PrintableName("\x1b[2J"), "\\033[2J");
  EXPECT_EQ(PrintableName("bad\xff"), "bad\\377");
  EXPECT_EQ(PrintableName("\xc2\x85"), "\\302\\205");  // C1 control (NEL)
  EXPECT_EQ(PrintableName("back\\slash"), "back\\\\slash");
  EXPECT_EQ(PrintableName("back\\slash", false), "back\\slash");
}

TEST(PathTest, SplitListDropsEmptyItems) {
  std::vector<std::string_view> items = SplitList("a,,b,", ',');
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0], "a");
  EXPECT_EQ(items[1], "b");
}

}  // namespace
}  // namespace dsfs
