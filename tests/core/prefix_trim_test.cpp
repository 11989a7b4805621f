// Prefix-cache trimming: the reference vectors of vLLM's tests that are right, and one test per
// known bug of docs/semantics.md §6.3 showing pdkv's correct result.
#include <gtest/gtest.h>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/prefix_trim.hpp"

using namespace pdkv::core;
using V = std::vector<uint64_t>;
using Runs = std::vector<TokenRun>;
using States = std::vector<StatePair>;
using Z = std::vector<ZeroRange>;

namespace {

GroupTrimInput attention(V local, V remote, uint64_t lbs, uint64_t rbs, uint64_t n, uint64_t hit) {
  GroupTrimInput g;
  g.kind = GroupKind::Attention;
  g.local_blocks = std::move(local);
  g.remote_blocks = std::move(remote);
  g.local_tokens_per_block = lbs;
  g.remote_tokens_per_block = rbs;
  g.remote_computed_tokens = n;
  g.local_hit_tokens = hit;
  return g;
}

GroupTrimInput mamba(MambaCacheMode mode, V local, V remote, uint64_t bd, uint64_t bp, uint64_t n,
                     uint64_t hit) {
  GroupTrimInput g = attention(std::move(local), std::move(remote), bd, bp, n, hit);
  g.kind = GroupKind::Mamba;
  g.cache_mode = mode;
  return g;
}

V iota(uint64_t from, uint64_t to) {
  V v;
  for (uint64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

}  // namespace

// vLLM PR #42554 vector fa_prefix_hit_homo_tp: 4 of 10 blocks still to fill -> the last 4 remote.
TEST(PrefixTrim, PartialAttentionHitSameBlockSize) {
  auto r = trim_group(attention({6, 7, 8, 9}, iota(0, 10), 16, 16, 160, 96));
  Runs expected;
  for (uint64_t b = 6; b < 10; ++b) expected.push_back({b, 0, b, 0, 16});
  EXPECT_EQ(r.runs, expected);
  EXPECT_TRUE(r.zero.empty());
}

// Known bug 1: nd == 0 for one group while another group still needs data. vLLM's x[-0:] returns
// the WHOLE remote list (10 blocks) and the descriptor-count assert fires. pdkv moves nothing.
TEST(PrefixTrim, Bug1_FullHitOnAttentionGroupTransfersNothing) {
  auto r = trim_prefix({attention({}, iota(0, 10), 16, 16, 160, 160),
                        mamba(MambaCacheMode::Align, {42}, {0, 0, 43}, 160, 160, 160, 159)});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].transfers_nothing());
  EXPECT_TRUE(r[0].zero.empty());
  EXPECT_EQ(r[1].states, (States{{42, 43, 160}}));
}

// Known bug 1 on a sliding-window group of a non-Mamba model.
TEST(PrefixTrim, Bug1_FullHitOnSlidingWindowGroup) {
  auto g = attention({}, iota(88, 93), 16, 16, 200, 200);
  g.kind = GroupKind::SlidingWindow;
  g.sliding_window = 64;
  g.remote_first_block = 8;
  EXPECT_TRUE(trim_group(g).transfers_nothing());
}

// Known bug 2a: SSM nd == 0 < np: v0604 asserts "SSM can only have one local block", main reads
// the whole list. pdkv: D has the state, nothing moves.
TEST(PrefixTrim, Bug2_SsmNoLocalBlock) {
  auto r = trim_group(mamba(MambaCacheMode::Align, {}, {0, 0, 14}, 0, 0, 300, 300));
  EXPECT_TRUE(r.transfers_nothing());
  auto all = trim_group(mamba(MambaCacheMode::All, {}, {5, 6, 7}, 16, 16, 48, 48));
  EXPECT_TRUE(all.transfers_nothing());
}

// Known bug 2b: SSM nd >= 2 < np ("all" mode, D hit 2 of 4 positions): v0604 asserts. pdkv pairs
// positions 2 and 3 by the token count their states cover.
TEST(PrefixTrim, Bug2_SsmSeveralLocalPositions) {
  auto r = trim_group(mamba(MambaCacheMode::All, {21, 22}, {4, 5, 6, 7}, 16, 16, 64, 32));
  EXPECT_EQ(r.states, (States{{21, 6, 48}, {22, 7, 64}}));
  EXPECT_TRUE(r.unfilled_states.empty());
}

// Align-mode placeholders: [0, 0, 14] -> the running state 14 (and vLLM's ssm_prefix_trim_only:
// local [42], remote [40, 41, 42, 43] -> 43).
TEST(PrefixTrim, AlignPlaceholderNullsKeepRunningState) {
  EXPECT_EQ(trim_group(mamba(MambaCacheMode::Align, {9}, {0, 0, 14}, 0, 0, 100, 64)).states,
            (States{{9, 14, 100}}));
  EXPECT_EQ(trim_group(mamba(MambaCacheMode::Align, {42}, {40, 41, 42, 43}, 0, 0, 100, 0)).states,
            (States{{42, 43, 100}}));
  // Local placeholders too: the last real local slot receives the state.
  EXPECT_EQ(trim_group(mamba(MambaCacheMode::None, {0, 0, 9}, {14}, 0, 0, 100, 0)).states,
            (States{{9, 14, 100}}));
  // P exported only placeholders while D needs the state: Coverage, not a silent no-op.
  try {
    trim_group(mamba(MambaCacheMode::Align, {9}, {0, 0}, 0, 0, 100, 0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Coverage);
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
  }
}

// "all" mode, nd - np = 1 (D allocated one more position because P truncated to N-1):
// vLLM's decode[:n]. pdkv: the extra position lies past P's tokens; D computes it.
TEST(PrefixTrim, AllModeLocalOneLonger) {
  auto r = trim_group(mamba(MambaCacheMode::All, {30, 31}, {50}, 16, 16, 16, 0));
  EXPECT_EQ(r.states, (States{{30, 50, 16}}));
  EXPECT_TRUE(r.unfilled_states.empty());
}

// "all" mode, nd < np (the opposite case): vLLM's Tail(prefill, n).
TEST(PrefixTrim, AllModeRemoteLonger) {
  auto r = trim_group(mamba(MambaCacheMode::All, {33}, {50, 51, 52}, 16, 16, 48, 32));
  EXPECT_EQ(r.states, (States{{33, 52, 48}}));
}

// nd - np = 2: vLLM asserts "unpairable SSM state slots". Positions past P's tokens are D's own.
TEST(PrefixTrim, AllModeLocalTwoLongerIsFine) {
  auto r = trim_group(mamba(MambaCacheMode::All, {30, 31, 32}, {50}, 16, 16, 16, 0));
  EXPECT_EQ(r.states, (States{{30, 50, 16}}));
}

// "all" mode with different Mamba block sizes: intermediate checkpoints pair by token count; a
// D checkpoint P never took is reported unfilled (must not become a cache hit).
TEST(PrefixTrim, AllModeDifferentBlockSizes) {
  auto r = trim_group(mamba(MambaCacheMode::All, {1, 2, 3, 4}, iota(10, 17), 32, 16, 100, 0));
  EXPECT_EQ(r.states, (States{{1, 11, 32}, {2, 13, 64}, {3, 15, 96}, {4, 16, 100}}));
  auto odd = trim_group(mamba(MambaCacheMode::All, {1, 2, 3, 4, 5}, iota(10, 17), 24, 16, 100, 0));
  EXPECT_EQ(odd.states, (States{{2, 12, 48}, {4, 15, 96}, {5, 16, 100}}));
  EXPECT_EQ(odd.unfilled_states, (V{1, 3}));
}

// Known bug 3: different physical blocks per logical with prefix caching (vLLM rejects at
// handshake; its front-trim would pair P's prefix blocks with D's suffix slots). Kernel blocks of
// 16 tokens on both sides, D ppl 4, P ppl 2, D hit one logical block (64 tokens), N = 150.
TEST(PrefixTrim, Bug3_HeterogeneousPplWithPrefixCaching) {
  V local = logical_to_kernel_block_ids({7, 9}, GroupKind::Attention, 4);         // tokens 64..192
  V remote = logical_to_kernel_block_ids({3, 4, 5, 6, 8}, GroupKind::Attention, 2);  // 0..160
  auto r = trim_group(attention(local, remote, 16, 16, 150, 64));
  Runs expected = {{28, 0, 10, 0, 16}, {29, 0, 11, 0, 16}, {30, 0, 12, 0, 16},
                   {31, 0, 13, 0, 16}, {36, 0, 16, 0, 16}, {37, 0, 17, 0, 6}};
  EXPECT_EQ(r.runs, expected);
  // vLLM's front-trim would have read remote block 6 (tokens 0..16) into local block 28.
  EXPECT_NE(r.runs.front().remote_block, 6u);
  // The partly covered tail block and the two blocks past P's tokens are zeroed.
  EXPECT_EQ(r.zero, (Z{{37, 6, 16}, {38, 0, 16}, {39, 0, 16}}));
}

// Kernel block sizes that are not multiples of each other: Nemotron-3-Nano-30B, 1056 tokens at
// P_TP=4 and 2096 at D_TP=2. N = 5000, no hit.
TEST(PrefixTrim, NonMultipleBlockSizesNemotron3Nano) {
  auto r = trim_group(attention({100, 101, 102}, {200, 201, 202, 203, 204}, 2096, 1056, 5000, 0));
  Runs expected = {{100, 0, 200, 0, 1056},    {100, 1056, 201, 0, 1040}, {101, 0, 201, 1040, 16},
                   {101, 16, 202, 0, 1056},   {101, 1072, 203, 0, 1024}, {102, 0, 203, 1024, 32},
                   {102, 32, 204, 0, 776}};
  EXPECT_EQ(r.runs, expected);
  EXPECT_EQ(r.transferred_tokens(), 5000u);
  EXPECT_EQ(r.zero, (Z{{102, 808, 2096}}));
  // D hit its first block (2096 tokens): the runs start at token 2096, inside P block 201.
  auto hit = trim_group(attention({101, 102}, {200, 201, 202, 203, 204}, 2096, 1056, 5000, 2096));
  ASSERT_FALSE(hit.runs.empty());
  EXPECT_EQ(hit.runs.front(), (TokenRun{101, 0, 201, 1040, 16}));
  EXPECT_EQ(hit.transferred_tokens(), 5000u - 2096u);
  // The same pair the other way round (P 2096, D 1056).
  auto rev = trim_group(attention({200, 201, 202, 203, 204}, {100, 101, 102}, 1056, 2096, 5000, 0));
  EXPECT_EQ(rev.transferred_tokens(), 5000u);
  EXPECT_EQ(rev.runs.size(), 7u);
  EXPECT_EQ(rev.zero, (Z{{204, 776, 1056}}));
}

// Sliding window: only the last `window` tokens move; lists are exchange-clipped (5 blocks).
TEST(PrefixTrim, SlidingWindowMovesOnlyTheWindow) {
  auto g = attention(iota(58, 63), iota(88, 93), 16, 16, 200, 0);
  g.kind = GroupKind::SlidingWindow;
  g.sliding_window = 64;
  g.local_first_block = 8;
  g.remote_first_block = 8;
  auto r = trim_group(g);
  Runs expected = {{58, 8, 88, 8, 8},   {59, 0, 89, 0, 16}, {60, 0, 90, 0, 16},
                   {61, 0, 91, 0, 16},  {62, 0, 92, 0, 8}};
  EXPECT_EQ(r.runs, expected);
  EXPECT_EQ(r.transferred_tokens(), 64u);
  EXPECT_EQ(r.zero, (Z{{58, 0, 8}, {62, 8, 16}}));
}

TEST(PrefixTrim, MissingCoverageNamesTokenAndGroup) {
  try {
    trim_prefix({attention({1}, iota(1, 11), 16, 16, 40, 0)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Coverage);
    const std::string m = e.what();
    EXPECT_NE(m.find("group 0 (attention)"), std::string::npos) << m;
    EXPECT_NE(m.find("token 16"), std::string::npos) << m;
  }
  try {
    trim_group(attention({1, 2, 3}, {0, 1}, 16, 16, 40, 0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Coverage);
    EXPECT_NE(std::string(e.what()).find("remote"), std::string::npos);
  }
  EXPECT_THROW(trim_group(attention({1}, {1}, 0, 16, 10, 0)), Error);
}

TEST(PrefixTrim, NeededTokenInNullBlockIsCoverageError) {
  try {
    trim_group(attention({5, 6}, {0, 7}, 16, 16, 32, 0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Coverage);
    EXPECT_NE(std::string(e.what()).find("null block"), std::string::npos);
  }
}

// none / align: D is missing tokens (hit < N) so it needs P's running state. A local list that
// is empty or holds only null placeholders used to return OK with no state: the request would be
// reported complete with D's Mamba state never written. Now Coverage naming N and the hit.
TEST(PrefixTrim, SingleStateNeededWithoutALocalSlotIsCoverage) {
  for (const MambaCacheMode mode : {MambaCacheMode::None, MambaCacheMode::Align}) {
    for (const V& local : {V{}, V{0}, V{0, 0, 0}}) {
      try {
        trim_group(mamba(mode, local, {0, 14}, 0, 0, 300, 288));
        FAIL() << "no Coverage for a needed state without a local slot";
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), Status::Coverage);
        const std::string msg = e.what();
        EXPECT_NE(msg.find("after 300 tokens (it holds 288)"), std::string::npos) << msg;
        EXPECT_NE(msg.find("list of " + std::to_string(local.size()) + " blocks holds no real slot"),
                  std::string::npos) << msg;
      }
    }
    // D holds every token: nothing is needed, with or without a slot.
    EXPECT_TRUE(trim_group(mamba(mode, {}, {0, 14}, 0, 0, 300, 300)).transfers_nothing());
    EXPECT_TRUE(trim_group(mamba(mode, {0}, {0, 14}, 0, 0, 300, 301)).transfers_nothing());
  }
  // Through trim_prefix the error names the group.
  try {
    trim_prefix({attention({}, iota(0, 10), 16, 16, 160, 160),
                 mamba(MambaCacheMode::Align, {}, {0, 0, 43}, 160, 160, 160, 159)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Coverage);
    EXPECT_NE(std::string(e.what()).find("group 1 (mamba)"), std::string::npos) << e.what();
  }
}

// "all": the same for the final state's position: D's list must hold a real block there.
TEST(PrefixTrim, AllModeFinalStateWithoutALocalSlotIsCoverage) {
  // N 48, hit 16, 16-token positions: D needs positions 1 and 2 (the final state at 2).
  const std::vector<V> lists = {V{}, V{21}, V{21, 0}};
  for (const V& local : lists) {
    try {
      trim_group(mamba(MambaCacheMode::All, local, {5, 6, 7}, 16, 16, 48, 16));
      FAIL() << "no Coverage for local list of " << local.size();
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::Coverage);
      EXPECT_NE(std::string(e.what()).find("final Mamba state after 48 tokens (it holds 16) at "
                                           "position 2"),
                std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(trim_group(mamba(MambaCacheMode::All, {21, 22}, {5, 6, 7}, 16, 16, 48, 16)).states,
            (States{{21, 6, 32}, {22, 7, 48}}));
}
