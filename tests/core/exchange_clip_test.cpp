#include <gtest/gtest.h>

#include "pdkv/core/error.hpp"
#include "pdkv/core/exchange_clip.hpp"

using namespace pdkv::core;
using V = std::vector<uint64_t>;

namespace {
ExchangeClipParams mamba(MambaCacheMode m, uint64_t spec) {
  ExchangeClipParams p;
  p.kind = GroupKind::Mamba;
  p.cache_mode = m;
  p.num_speculative_blocks = spec;
  return p;
}
}  // namespace

TEST(ExchangeClip, SlidingWindowKeepCount) {
  EXPECT_EQ(sliding_window_blocks_to_keep(2048, 16), 129u);
  EXPECT_EQ(sliding_window_blocks_to_keep(2047, 16), 129u);
  EXPECT_EQ(sliding_window_blocks_to_keep(2049, 16), 130u);
  EXPECT_THROW(sliding_window_blocks_to_keep(2048, 0), Error);
}

TEST(ExchangeClip, SlidingWindowKeepsLastBlocks) {
  ExchangeClipParams p;
  p.kind = GroupKind::SlidingWindow;
  p.sliding_window = 32;
  p.block_size = 16;  // keep 3
  EXPECT_EQ(clip_exchange_blocks({1, 2, 3, 4, 5, 6}, p), (V{4, 5, 6}));
  EXPECT_EQ(clip_exchange_blocks({1, 2}, p), (V{1, 2}));
  V long_list;
  for (uint64_t i = 1; i <= 300; ++i) long_list.push_back(i);
  p.sliding_window = 2048;
  auto clipped = clip_exchange_blocks(long_list, p);
  ASSERT_EQ(clipped.size(), 129u);
  EXPECT_EQ(clipped.front(), 172u);
  EXPECT_EQ(clipped.back(), 300u);
}

TEST(ExchangeClip, SsmReferenceVectors) {
  auto p = mamba(MambaCacheMode::Align, 2);
  EXPECT_EQ(clip_exchange_blocks({0, 0, 7, 8, 9}, p), (V{7}));
  EXPECT_EQ(clip_exchange_blocks({0, 6, 7, 8, 9}, p), (V{7}));
  EXPECT_EQ(clip_exchange_blocks({7, 8, 9}, p), (V{7}));
  EXPECT_EQ(clip_exchange_blocks({5}, p), (V{5}));
  EXPECT_EQ(clip_exchange_blocks({0, 0, 7, 8, 9}, mamba(MambaCacheMode::None, 2)), (V{7}));
  EXPECT_EQ(clip_exchange_blocks({0, 5, 6, 7, 8, 9}, mamba(MambaCacheMode::All, 2)),
            (V{0, 5, 6, 7}));
}

TEST(ExchangeClip, PassThroughCases) {
  auto p = mamba(MambaCacheMode::Align, 2);
  EXPECT_TRUE(clip_exchange_blocks({}, p).empty());
  p.hma_enabled = false;
  EXPECT_EQ(clip_exchange_blocks({0, 0, 7, 8, 9}, p), (V{0, 0, 7, 8, 9}));
  ExchangeClipParams fa;
  EXPECT_EQ(clip_exchange_blocks({1, 2, 3}, fa), (V{1, 2, 3}));
  // No speculative blocks: single-state keeps the last slot, "all" keeps everything.
  EXPECT_EQ(clip_exchange_blocks({0, 0, 14}, mamba(MambaCacheMode::Align, 0)), (V{14}));
  EXPECT_EQ(clip_exchange_blocks({3, 4}, mamba(MambaCacheMode::All, 0)), (V{3, 4}));
}
