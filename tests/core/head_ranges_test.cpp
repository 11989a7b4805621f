// GQA head placement (docs/semantics.md §2.1, §2.3).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/head_ranges.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

TEST(HeadRanges, ShardedContiguous) {
  // K=8, tp=4: two consecutive heads per rank.
  EXPECT_EQ(physical_head_range(4, 8, 0), (HeadRange{0, 2}));
  EXPECT_EQ(physical_head_range(4, 8, 3), (HeadRange{6, 8}));
  EXPECT_EQ(physical_head_range(2, 8, 1), (HeadRange{4, 8}));
  EXPECT_EQ(physical_head_range(1, 8, 0), (HeadRange{0, 8}));
  // tp == K: one distinct head each, not replication.
  EXPECT_EQ(physical_head_range(2, 2, 1), (HeadRange{1, 2}));
}

TEST(HeadRanges, ReplicatedConsecutiveRanksShare) {
  // K=2, tp=4: ranks 0,1 hold head 0; ranks 2,3 hold head 1.
  EXPECT_EQ(physical_head_range(4, 2, 0), (HeadRange{0, 1}));
  EXPECT_EQ(physical_head_range(4, 2, 1), (HeadRange{0, 1}));
  EXPECT_EQ(physical_head_range(4, 2, 2), (HeadRange{1, 2}));
  EXPECT_EQ(physical_head_range(4, 2, 3), (HeadRange{1, 2}));
  // K=2, tp=8: rank 5 -> 5*2//8 = 1.
  EXPECT_EQ(physical_head_range(8, 2, 5), (HeadRange{1, 2}));
  // K=1 (MLA-like): every rank holds head 0.
  EXPECT_EQ(physical_head_range(16, 1, 15), (HeadRange{0, 1}));
}

TEST(HeadRanges, PhysicalHeadsAndReplication) {
  EXPECT_EQ(local_physical_heads(4, 8), 2u);
  EXPECT_EQ(local_physical_heads(8, 8), 1u);
  EXPECT_EQ(local_physical_heads(16, 8), 1u);  // max(1, 0)
  EXPECT_FALSE(is_replicated(8, 8));           // equality is not replication (#38179)
  EXPECT_TRUE(is_replicated(16, 8));
  EXPECT_FALSE(is_replicated(1, 8));
}

TEST(HeadRanges, RangesPartitionHeadsOrReplicateEvenly) {
  for (uint32_t k : {1u, 2u, 4u, 8u, 16u, 32u}) {
    for (uint32_t tp : {1u, 2u, 4u, 8u, 16u}) {
      std::vector<uint32_t> holders(k, 0);
      uint32_t prev_begin = 0;
      for (uint32_t r = 0; r < tp; ++r) {
        const HeadRange h = physical_head_range(tp, k, r);
        EXPECT_EQ(h.size(), local_physical_heads(tp, k));
        EXPECT_GE(h.begin, prev_begin);  // contiguous, monotone placement
        prev_begin = h.begin;
        for (uint32_t x = h.begin; x < h.end; ++x) ++holders[x];
      }
      const uint32_t copies = tp > k ? tp / k : 1;
      for (uint32_t x = 0; x < k; ++x) EXPECT_EQ(holders[x], copies) << k << " " << tp;
    }
  }
}

TEST(HeadRanges, Errors) {
  expect_error([] { physical_head_range(4, 6, 0); }, Status::HeadsNotDivisible,
               {"num_kv_heads 6", "tp_size 4"});
  expect_error([] { physical_head_range(4, 3, 0); }, Status::HeadsNotDivisible,
               {"num_kv_heads 3", "tp_size 4"});
  expect_error([] { physical_head_range(0, 8, 0); }, Status::InvalidArgument, {"tp_size 0"});
  expect_error([] { physical_head_range(2, 0, 0); }, Status::InvalidArgument,
               {"num_kv_heads 0"});
  expect_error([] { physical_head_range(2, 8, 2); }, Status::InvalidArgument,
               {"rank 2", "tp_size 2"});
  expect_error([] { local_physical_heads(3, 8); }, Status::HeadsNotDivisible, {"8", "3"});
}
