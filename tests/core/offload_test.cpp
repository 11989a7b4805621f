#include <gtest/gtest.h>

#include "pdkv/core/error.hpp"
#include "pdkv/core/offload.hpp"

using namespace pdkv::core;

TEST(Offload, BlockCountComesFromConfigNotTensorShape) {
  // Two layers share the block count 1000 but have different pages; the second tensor is padded
  // (its shape would suggest 1250 blocks). PR #38554: use the config value.
  auto g = derive_offload_geometry(1000, 2096, 16,
                                   {{1000ull * 8192, 8192}, {1000ull * 8192, 6553}});
  EXPECT_EQ(g.num_blocks, 1000u);
  EXPECT_EQ(g.hash_blocks_per_block, 131u);
}

TEST(Offload, UnalignedBlockSizeNamesBothValuesAndTheFix) {
  try {
    derive_offload_geometry(1000, 1000, 16, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    const std::string m = e.what();
    EXPECT_NE(m.find("1000"), std::string::npos) << m;
    EXPECT_NE(m.find("16"), std::string::npos) << m;
    EXPECT_NE(m.find("--enable-prefix-caching"), std::string::npos) << m;
  }
}

TEST(Offload, TensorTooSmallAndZeroSizes) {
  try {
    derive_offload_geometry(1000, 32, 16, {{999ull * 4096, 4096}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::OutOfBounds);
    EXPECT_NE(std::string(e.what()).find("layer 0"), std::string::npos);
  }
  EXPECT_THROW(derive_offload_geometry(0, 32, 16, {}), Error);
  EXPECT_THROW(derive_offload_geometry(10, 32, 0, {}), Error);
  try {
    derive_offload_geometry(UINT64_MAX, 32, 16, {{1, 4096}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Overflow);
  }
}
