// KV-cache grouping of the engine-level API (core/kv_cache_groups.hpp): the hybrid manager's
// uniform-page rule at its 1.25x boundary, parallel layers, kind order, and the refusals.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/kv_cache_groups.hpp"

using namespace pdkv::core;
using L = std::vector<uint32_t>;

namespace {

ModelDesc model(const std::string& pattern, bool hybrid) {
  ModelDesc m;
  m.name = "test";
  m.layer_pattern = pattern;
  if (hybrid) m.mamba.type = MambaType::Mamba2;
  return m;
}

std::string repeat(char c, size_t n) { return std::string(n, c); }

}  // namespace

TEST(KvCacheGroups, CountsWithinAQuarterGiveOneGroupPerKind) {
  // 5 attention vs 6 Mamba layers: 6 < 1.25 * 5, so one group of 6 per kind (attention padded).
  const auto g = kv_cache_groups(model(repeat('*', 5) + repeat('M', 6), true));
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].kind, GroupKind::Attention);
  EXPECT_EQ(g[0].layers, (L{0, 1, 2, 3, 4}));
  EXPECT_EQ(g[1].kind, GroupKind::Mamba);
  EXPECT_EQ(g[1].layers, (L{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(kv_cache_regions(g), 6u);
}

TEST(KvCacheGroups, ExactlyAQuarterMoreSplitsTheLargerKind) {
  // 4 vs 5: 5 is not below 1.25 * 4, so groups of 4; the 5 Mamba layers go round-robin into 2.
  const auto g = kv_cache_groups(model("MMMMM****", true));
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].kind, GroupKind::Mamba);
  EXPECT_EQ(g[0].layers, (L{0, 2, 4}));
  EXPECT_EQ(g[1].layers, (L{1, 3}));
  EXPECT_EQ(g[2].kind, GroupKind::Attention);
  EXPECT_EQ(g[2].layers, (L{5, 6, 7, 8}));
  EXPECT_EQ(g[0].regions, (L{0, 1, 2}));
  EXPECT_EQ(kv_cache_regions(g), 4u);
}

TEST(KvCacheGroups, ParallelLayersCountForBothKindsAttentionFirst) {
  const auto g = kv_cache_groups(model("P-P-P", true));
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].kind, GroupKind::Attention);
  EXPECT_EQ(g[1].kind, GroupKind::Mamba);
  EXPECT_EQ(g[0].layers, (L{0, 2, 4}));
  EXPECT_EQ(g[1].layers, (L{0, 2, 4}));
}

TEST(KvCacheGroups, PureAttentionIsOneGroupOfEveryLayer) {
  const auto g = kv_cache_groups(model("*-*-**", false));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].layers, (L{0, 2, 4, 5}));
  EXPECT_EQ(kv_cache_regions(g), 4u);
}

TEST(KvCacheGroups, RefusalsNameTheReasonAndTheLowLevelCalls) {
  auto message = [](const ModelDesc& m) {
    try {
      kv_cache_groups(m);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidArgument);
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  EXPECT_NE(message(model("", true)).find("no layer pattern"), std::string::npos);
  EXPECT_NE(message(model("MMMM", true)).find("no attention layer"), std::string::npos);
  EXPECT_NE(message(model("**M*", false)).find("disagrees with its Mamba type"), std::string::npos);
  EXPECT_NE(message(model("****", true)).find("disagrees"), std::string::npos);
  ModelDesc swa = model("****", false);
  swa.attention.sliding_window = 4096;
  const std::string m = message(swa);
  EXPECT_NE(m.find("sliding-window"), std::string::npos);
  EXPECT_NE(m.find("4096"), std::string::npos);
  EXPECT_NE(m.find("pdkv_transfer_plan_compile"), std::string::npos);
}
