#include <gtest/gtest.h>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::core;
using V = std::vector<uint64_t>;

TEST(BlockIds, AttentionExpandsWithOwnersRatio) {
  // vLLM test dense_fa_swa: ppl 2, FA [0,1,2] -> [0..5], SWA [3,4] -> [6..9].
  EXPECT_EQ(logical_to_kernel_block_ids({0, 1, 2}, GroupKind::Attention, 2), (V{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(logical_to_kernel_block_ids({3, 4}, GroupKind::SlidingWindow, 2), (V{6, 7, 8, 9}));
}

TEST(BlockIds, RemoteRatioNotLocal_Pr42097) {
  // Nemotron-3-Nano 4P1D: remote ppl 34, local 66. Remote logical [5,6] must expand with 34.
  V expected;
  for (uint64_t i = 170; i < 238; ++i) expected.push_back(i);
  EXPECT_EQ(logical_to_kernel_block_ids({5, 6}, GroupKind::Attention, 34), expected);
  // Mamba passes through: one Mamba block is the whole state.
  EXPECT_EQ(logical_to_kernel_block_ids({2}, GroupKind::Mamba, 34), (V{2}));
}

TEST(BlockIds, RatioOneIsIdentityAndZeroIsError) {
  EXPECT_EQ(logical_to_kernel_block_ids({7, 3}, GroupKind::Attention, 1), (V{7, 3}));
  EXPECT_THROW(logical_to_kernel_block_ids({1}, GroupKind::Attention, 0), Error);
}

TEST(BlockIds, BlockSizeRatioSubBlocksClippedToRemoteLength) {
  EXPECT_EQ(map_block_ids_for_block_size_ratio({2, 5}, GroupKind::Attention, 4, 100),
            (V{8, 9, 10, 11, 20, 21, 22, 23}));
  // P's request ends 2 sub-blocks into D's second block.
  EXPECT_EQ(map_block_ids_for_block_size_ratio({2, 5}, GroupKind::Attention, 4, 6),
            (V{8, 9, 10, 11, 20, 21}));
  EXPECT_EQ(map_block_ids_for_block_size_ratio({2, 5}, GroupKind::Mamba, 4, 1), (V{2, 5}));
  EXPECT_TRUE(map_block_ids_for_block_size_ratio({}, GroupKind::Attention, 4, 6).empty());
}

TEST(BlockIds, DescriptorIdsTwoRegionsHundredBlocks) {
  DescriptorLayout l{100, 1, 1, 2, 4};
  auto ids = descriptor_ids({{GroupKind::Attention, {3, 5}}, {GroupKind::Mamba, {1, 2}}}, l);
  EXPECT_EQ(ids, (V{3, 5, 103, 105, 201, 202, 301, 302, 401, 402, 501, 502}));
}

TEST(BlockIds, DescriptorIdsPpl4With400Blocks) {
  DescriptorLayout l{400, 1, 4, 2, 4};
  auto ids = descriptor_ids({{GroupKind::Attention, {3, 5}}, {GroupKind::Mamba, {1, 2}}}, l);
  EXPECT_EQ(ids, (V{3, 5, 403, 405, 801, 802, 901, 902, 1001, 1002, 1101, 1102}));
}

TEST(BlockIds, DescriptorIdsBsr4) {
  // The reference vector has one SSM block per region: SSM group [1].
  DescriptorLayout l{100, 4, 1, 2, 4};
  auto ids = descriptor_ids({{GroupKind::Attention, {3, 5}}, {GroupKind::Mamba, {1}}}, l);
  EXPECT_EQ(ids, (V{3, 5, 403, 405, 801, 901, 1001, 1101}));
}

TEST(BlockIds, DescriptorIdsWithoutMambaAreRegionMajorOverConcatenatedGroups) {
  DescriptorLayout l{10, 1, 1, 2, 0};
  auto ids = descriptor_ids({{GroupKind::Attention, {1}}, {GroupKind::SlidingWindow, {7, 8}}}, l);
  EXPECT_EQ(ids, (V{1, 7, 8, 11, 17, 18}));
}

TEST(BlockIds, DescriptorIdsRejectOutOfRegionBlocks) {
  DescriptorLayout l{100, 1, 4, 2, 4};
  try {
    descriptor_ids({{GroupKind::Mamba, {25}}}, l);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::OutOfBounds);
    EXPECT_NE(std::string(e.what()).find("25"), std::string::npos);
  }
  try {
    descriptor_ids({{GroupKind::Attention, {100}}}, l);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::OutOfBounds);
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
  }
}
