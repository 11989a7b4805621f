#include <gtest/gtest.h>

#include "pdkv/core/error.hpp"
#include "pdkv/core/zero_ranges.hpp"

using namespace pdkv::core;
using Z = std::vector<ZeroRange>;

TEST(ZeroRanges, VllmRuleWithBlockSizeRatio) {
  // 3 local blocks of 64 tokens, bsr 4 (16-token P blocks), P sent 6 sub-blocks: block 11 is
  // covered, block 12 from token 2*16=32, block 13 entirely zeroed.
  EXPECT_EQ(receive_zero_ranges({11, 12, 13}, 64, 4, 6),
            (Z{{12, 32, 64}, {13, 0, 64}}));
  // Fully covered: nothing.
  EXPECT_TRUE(receive_zero_ranges({11, 12}, 64, 4, 8).empty());
  EXPECT_TRUE(receive_zero_ranges({11, 12}, 64, 4, 20).empty());
  // Exactly block-aligned coverage: the next block is zeroed whole.
  EXPECT_EQ(receive_zero_ranges({11, 12}, 64, 4, 4), (Z{{12, 0, 64}}));
  EXPECT_THROW(receive_zero_ranges({1}, 30, 4, 1), Error);
}

TEST(ZeroRanges, TokenCoverageTail) {
  // Blocks of 16 from block index 2 (tokens 32..80); D holds 0..32; P wrote 32..70.
  EXPECT_EQ(uncovered_token_ranges({5, 6, 7}, 2, 16, 32, {{32, 70}}), (Z{{7, 6, 16}}));
  // Nothing written: everything D does not hold.
  EXPECT_EQ(uncovered_token_ranges({5, 6}, 2, 16, 40, {}), (Z{{5, 8, 16}, {6, 0, 16}}));
  // A hole in the middle, two intervals, unsorted input.
  EXPECT_EQ(uncovered_token_ranges({9}, 0, 16, 0, {{10, 16}, {0, 4}}), (Z{{9, 4, 10}}));
  // Null blocks are never zeroed.
  EXPECT_TRUE(uncovered_token_ranges({0}, 0, 16, 0, {}).empty());
}

// A reversed written interval used to be walked as if it covered [begin, ...) and moved the
// cursor backwards, returning overlapping ranges ({9,0,10} and {9,5,16} for {10,5}).
TEST(ZeroRanges, ReversedWrittenIntervalIsRejected) {
  try {
    uncovered_token_ranges({9}, 0, 16, 0, {{0, 2}, {10, 5}});
    FAIL() << "reversed interval accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("written interval 1 [10, 5)"), std::string::npos) << msg;
  }
  // An empty interval writes nothing and stays accepted.
  EXPECT_EQ(uncovered_token_ranges({9}, 0, 16, 0, {{4, 4}}), (Z{{9, 0, 16}}));
}
