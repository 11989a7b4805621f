// TP topology: tp_ratio sign convention, handshake targets, compute_tp_mapping on every worked
// example of docs/semantics.md §2.2 / §2.3, and the notification rule of §7.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/tp_topology.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;
using Ranks = std::vector<uint32_t>;

TEST(TpRatio, SignConvention) {
  EXPECT_EQ(tp_ratio(1, 1), 1);
  EXPECT_EQ(tp_ratio(4, 4), 1);
  EXPECT_EQ(tp_ratio(4, 1), 4);
  EXPECT_EQ(tp_ratio(8, 2), 4);
  EXPECT_EQ(tp_ratio(1, 4), -4);
  EXPECT_EQ(tp_ratio(2, 8), -4);
  EXPECT_EQ(tp_ratio(2, 4), -2);
}

TEST(TpRatio, NeverZero) {
  for (uint32_t l : {1u, 2u, 4u, 8u, 16u})
    for (uint32_t r : {1u, 2u, 4u, 8u, 16u}) EXPECT_NE(tp_ratio(l, r), 0) << l << " " << r;
}

TEST(TpRatio, Errors) {
  expect_error([] { tp_ratio(0, 2); }, Status::InvalidArgument, {"local tp_size 0"});
  expect_error([] { tp_ratio(2, 0); }, Status::InvalidArgument, {"remote tp_size 0"});
  expect_error([] { tp_ratio(3, 2); }, Status::TpNotDivisible,
               {"local tp_size 3", "remote tp_size 2", "do not divide"});
  expect_error([] { tp_ratio(4, 6); }, Status::TpNotDivisible, {"4", "6"});
}

TEST(HandshakeTargets, Examples) {
  EXPECT_EQ(handshake_target_ranks(2, 1, 4), (Ranks{2, 3}));   // a = 2
  EXPECT_EQ(handshake_target_ranks(1, 0, 4), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(handshake_target_ranks(4, 3, 1), (Ranks{0}));
  EXPECT_EQ(handshake_target_ranks(8, 5, 4), (Ranks{2}));      // 5 // 2
  EXPECT_EQ(handshake_target_ranks(4, 3, 4), (Ranks{3}));      // homogeneous
  EXPECT_EQ(handshake_target_ranks(2, 1, 8), (Ranks{4, 5, 6, 7}));
}

TEST(HandshakeTargets, Errors) {
  expect_error([] { handshake_target_ranks(4, 4, 2); }, Status::InvalidArgument,
               {"local rank 4", "tp_size 4"});
  expect_error([] { handshake_target_ranks(3, 0, 2); }, Status::TpNotDivisible, {"3", "2"});
}

namespace {

TpMapping map_d(uint32_t d_tp, uint32_t d_rank, uint32_t p_tp, uint32_t k, bool mla = false,
                bool mamba = false) {
  return compute_tp_mapping({d_tp, d_rank, p_tp, k, mla, mamba});
}

// slot of every rank in all_source_ranks, as (rank, slot) pairs.
std::vector<std::pair<uint32_t, uint32_t>> slots(const TpMapping& m) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t r : m.all_source_ranks) out.emplace_back(r, m.attention_slot_of(r));
  return out;
}

}  // namespace

// docs/semantics.md §2.2 examples.
TEST(TpMapping, K2_D1FromP4_Hybrid) {
  const TpMapping m = map_d(1, 0, 4, 2, false, true);
  EXPECT_EQ(m.tp_ratio, -4);
  EXPECT_EQ(m.attention_source_ranks, (Ranks{0, 2}));
  EXPECT_EQ(m.mamba_source_ranks, (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(m.all_source_ranks, (Ranks{0, 1, 2, 3}));
  using P = std::pair<uint32_t, uint32_t>;
  EXPECT_EQ(slots(m), (std::vector<P>{{0, 0}, {1, 0}, {2, 1}, {3, 1}}));
  EXPECT_EQ(m.num_attention_reads(), 2u);
  EXPECT_TRUE(m.remote_replicated);
  EXPECT_FALSE(m.local_replicated);
  EXPECT_EQ(m.local_physical_heads, 2u);
  EXPECT_EQ(m.remote_physical_heads, 1u);
  EXPECT_EQ(m.rank_offset_factor, 0u);
  EXPECT_FALSE(m.reads_attention_from(1));
  EXPECT_TRUE(m.reads_attention_from(2));
}

TEST(TpMapping, D3OfTp4FromP1K2_OffsetFactor1) {
  const TpMapping m = map_d(4, 3, 1, 2);
  EXPECT_EQ(m.tp_ratio, 4);
  EXPECT_EQ(m.attention_source_ranks, (Ranks{0}));
  EXPECT_TRUE(m.local_replicated);
  EXPECT_EQ(m.rank_offset_factor, 1u);  // head 3*2//4 = 1, P rank 0 starts at head 0
}

TEST(TpMapping, K8_D3OfTp4FromP2_Offset1) {
  const TpMapping m = map_d(4, 3, 2, 8);
  EXPECT_EQ(m.tp_ratio, 2);
  EXPECT_EQ(m.attention_source_ranks, (Ranks{1}));
  EXPECT_FALSE(m.local_replicated);
  EXPECT_EQ(m.rank_offset_factor, 1u);  // 3 % 2
  EXPECT_EQ(m.local_physical_heads, 2u);
  EXPECT_EQ(m.remote_physical_heads, 4u);
}

TEST(TpMapping, MlaSsm_D1OfTp2FromP8) {
  const TpMapping m = map_d(2, 1, 8, 1, true, true);
  EXPECT_EQ(m.tp_ratio, -4);
  EXPECT_EQ(m.attention_source_ranks, (Ranks{4}));
  EXPECT_EQ(m.mamba_source_ranks, (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(m.all_source_ranks, (Ranks{4, 5, 6, 7}));
  for (uint32_t r : m.all_source_ranks) EXPECT_EQ(m.attention_slot_of(r), 0u);
  EXPECT_EQ(m.rank_offset_factor, 0u);
}

TEST(TpMapping, PureMlaReadsOnceButNotifiesAll) {
  const TpMapping m = map_d(2, 1, 8, 1, true, false);
  EXPECT_EQ(m.attention_source_ranks, (Ranks{4}));
  EXPECT_TRUE(m.mamba_source_ranks.empty());
  EXPECT_EQ(m.all_source_ranks, (Ranks{4}));
  EXPECT_EQ(m.notify_ranks, (Ranks{4, 5, 6, 7}));
  // MLA with D_TP > P_TP: one whole latent, no head offset.
  EXPECT_EQ(map_d(8, 7, 2, 1, true).rank_offset_factor, 0u);
  EXPECT_EQ(map_d(8, 7, 2, 1, true).attention_source_ranks, (Ranks{1}));
}

// docs/semantics.md §2.3 worked table, K=2, hybrid (transfer targets = all_source_ranks).
TEST(TpMapping, Table_2p1d) {
  const TpMapping m = map_d(1, 0, 2, 2, false, true);
  EXPECT_EQ(m.attention_source_ranks, (Ranks{0, 1}));
  EXPECT_EQ(m.all_source_ranks, (Ranks{0, 1}));
  EXPECT_EQ(m.attention_slot_of(0), 0u);
  EXPECT_EQ(m.attention_slot_of(1), 1u);
}

TEST(TpMapping, Table_4p1d) {
  const TpMapping m = map_d(1, 0, 4, 2, false, true);
  EXPECT_EQ(m.attention_source_ranks, (Ranks{0, 2}));
  EXPECT_EQ(m.all_source_ranks, (Ranks{0, 1, 2, 3}));
  EXPECT_FALSE(m.reads_attention_from(1));  // skip FA on 1 and 3
  EXPECT_FALSE(m.reads_attention_from(3));
  EXPECT_EQ(m.attention_slot_of(0), 0u);
  EXPECT_EQ(m.attention_slot_of(2), 1u);
}

TEST(TpMapping, Table_4p2d) {
  const TpMapping d0 = map_d(2, 0, 4, 2, false, true);
  EXPECT_EQ(d0.attention_source_ranks, (Ranks{0}));
  EXPECT_EQ(d0.all_source_ranks, (Ranks{0, 1}));
  const TpMapping d1 = map_d(2, 1, 4, 2, false, true);
  EXPECT_EQ(d1.attention_source_ranks, (Ranks{2}));
  EXPECT_EQ(d1.all_source_ranks, (Ranks{2, 3}));
  EXPECT_EQ(d1.attention_slot_of(3), 0u);
}

TEST(TpMapping, Table_1p4d) {
  const std::vector<uint32_t> offsets = {0, 0, 1, 1};  // head r*2//4 - 0, in units of L
  for (uint32_t r = 0; r < 4; ++r) {
    const TpMapping m = map_d(4, r, 1, 2, false, true);
    EXPECT_EQ(m.attention_source_ranks, (Ranks{0}));
    EXPECT_TRUE(m.local_replicated);
    EXPECT_FALSE(m.remote_replicated);
    EXPECT_EQ(m.rank_offset_factor, offsets[r]) << r;
  }
}

TEST(TpMapping, Table_2p4d) {
  for (uint32_t r = 0; r < 4; ++r) {
    const TpMapping m = map_d(4, r, 2, 2, false, true);
    EXPECT_EQ(m.attention_source_ranks, (Ranks{r / 2}));
    EXPECT_EQ(m.rank_offset_factor, 0u) << r;
  }
}

TEST(TpMapping, Table_4p8d) {
  for (uint32_t r = 0; r < 8; ++r) {
    const TpMapping m = map_d(8, r, 4, 2, false, true);
    EXPECT_EQ(m.attention_source_ranks, (Ranks{r / 2}));
    EXPECT_TRUE(m.local_replicated);
    EXPECT_TRUE(m.remote_replicated);
    EXPECT_EQ(m.rank_offset_factor, r * 2 / 8 - (r / 2) * 2 / 4) << r;
    EXPECT_EQ(m.rank_offset_factor, 0u) << r;
  }
}

TEST(TpMapping, NonHybridHasNoMambaSources) {
  const TpMapping m = map_d(1, 0, 4, 2);
  EXPECT_TRUE(m.mamba_source_ranks.empty());
  EXPECT_EQ(m.all_source_ranks, (Ranks{0, 2}));
  EXPECT_EQ(m.notify_ranks, (Ranks{0, 1, 2, 3}));  // pdkv: dedup'd ranks are still notified
}

TEST(TpMapping, Errors) {
  expect_error([] { map_d(3, 0, 2, 8); }, Status::TpNotDivisible, {"3", "2"});
  expect_error([] { map_d(2, 2, 4, 8); }, Status::InvalidArgument, {"rank 2"});
  expect_error([] { map_d(2, 0, 4, 0); }, Status::InvalidArgument, {"num_kv_heads"});
  expect_error([] { map_d(2, 0, 4, 6); }, Status::HeadsNotDivisible,
               {"num_kv_heads 6", "tp_size 4"});
  expect_error([] { map_d(1, 0, 2, 2).attention_slot_of(5); }, Status::InvalidArgument,
               {"remote rank 5"});
}

TEST(Notifications, ExpectedPerRequest) {
  EXPECT_EQ(notifications_expected_per_request(1, 4), 4u);  // 4 D ranks read one P rank
  EXPECT_EQ(notifications_expected_per_request(2, 8), 4u);
  EXPECT_EQ(notifications_expected_per_request(4, 4), 1u);
  EXPECT_EQ(notifications_expected_per_request(4, 1), 1u);
  EXPECT_EQ(notifications_expected_per_request(8, 2), 1u);
  expect_error([] { notifications_expected_per_request(4, 6); }, Status::TpNotDivisible,
               {"4", "6"});
}

TEST(Notifications, TargetsAreHandshakeTargets) {
  EXPECT_EQ(notification_targets(2, 1, 8), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(notification_targets(8, 5, 2), (Ranks{1}));
}
