#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/scheduler.hpp"

using namespace pdkv::core;
using V = std::vector<uint64_t>;

namespace {
// Runs a prefill to completion; budget(step) is the token budget this request gets that step.
template <typename Budget>
V chunks(AlignedSplitInput base, Budget budget) {
  V out;
  for (int step = 0; base.start < base.num_prompt_tokens && step < 10000; ++step) {
    base.num_new_tokens = std::min<uint64_t>(budget(step), base.num_prompt_tokens - base.start);
    const uint64_t n = mamba_aligned_split(base);
    EXPECT_GT(n, 0u) << "deferred at start " << base.start;
    if (n == 0) break;
    out.push_back(n);
    base.start += n;
  }
  return out;
}
}  // namespace

TEST(AlignedSplitV0604, ExternalTokensCountAsComputed) {
  AlignedSplitV0604Input in;
  in.num_external_computed_tokens = 40;
  in.num_prompt_tokens = in.num_tokens = 100;
  in.block_size = 16;
  in.num_new_tokens = 50;  // ends at 90 < last 96: rounded down to whole blocks
  EXPECT_EQ(mamba_aligned_split_v0604(in), 48u);
  in.num_new_tokens = 60;  // crosses last = 96: stop there so the state at 96 is cached
  EXPECT_EQ(mamba_aligned_split_v0604(in), 56u);
  in.use_eagle = true;     // last = 80
  in.num_new_tokens = 50;
  EXPECT_EQ(mamba_aligned_split_v0604(in), 40u);
  in.load_kv_async = true;  // #42554: no split for async connector loads
  EXPECT_EQ(mamba_aligned_split_v0604(in), 50u);
  in.block_size = 0;
  EXPECT_THROW(mamba_aligned_split_v0604(in), Error);
}

TEST(AlignedSplit, PartialTail) {
  AlignedSplitInput in;
  in.num_prompt_tokens = in.num_tokens = 10000;
  in.block_size = 512;
  in.tail_hash_block_size = 256;
  in.max_num_scheduled_tokens = 8192;
  V got = chunks(in, [](int) { return 8192; });
  V ends;
  uint64_t at = 0;
  for (uint64_t c : got) ends.push_back(at += c);
  EXPECT_EQ(ends, (V{8192, 9728, 9984, 10000}));
  // Without fine-grained hits the tail is one chunk.
  in.tail_hash_block_size = 0;
  EXPECT_EQ(chunks(in, [](int) { return 8192; }), (V{8192, 1536, 272}));
}

TEST(AlignedSplit, Budget) {
  AlignedSplitInput in;
  in.num_prompt_tokens = in.num_tokens = 30000;
  in.block_size = 16;
  in.max_num_scheduled_tokens = 8192;
  // Every other step another request leaves 3210 tokens of budget: floored to 3200.
  EXPECT_EQ(chunks(in, [](int s) { return s % 2 ? 3210 : 8192; }),
            (V{8192, 3200, 8192, 3200, 7216}));
}

TEST(AlignedSplit, LongPrefillThreshold) {
  AlignedSplitInput in;
  in.num_prompt_tokens = in.num_tokens = 1300;
  in.block_size = 512;
  in.floor_unit = 128;
  in.max_num_scheduled_tokens = 8192;
  in.long_prefill_token_threshold = 400;
  EXPECT_EQ(chunks(in, [](int) { return 400; }), (V{384, 128, 384, 128, 276}));
}

TEST(AlignedSplit, SharedPrefixJunction) {
  AlignedSplitInput in;
  in.num_prompt_tokens = in.num_tokens = 100;
  in.block_size = 32;
  in.shared_prefix_tokens = 48;
  in.num_new_tokens = 100;
  EXPECT_EQ(mamba_aligned_split(in), 32u);
}

// Issue 12 item 5: a Mamba block wider than the step budget (8704 > 8192). vLLM main (since PR
// #51113) leaves such a chunk end unfloored, so the request advances 8192, then the rest of the
// block, block by block; every block boundary is still a chunk end (8704, 17408).
TEST(AlignedSplit, OversizedBlockProgressesByDefault) {
  AlignedSplitInput in;
  in.num_prompt_tokens = in.num_tokens = 20000;
  in.block_size = 8704;
  in.max_num_scheduled_tokens = 8192;
  EXPECT_EQ(chunks(in, [](int) { return 8192; }), (V{8192, 512, 8192, 512, 2592}));
  // The long-prefill threshold is a chunk limit too: 1000 < 8704.
  in.max_num_scheduled_tokens = 0;
  in.long_prefill_token_threshold = 1000;
  in.num_prompt_tokens = in.num_tokens = 10000;
  EXPECT_EQ(chunks(in, [](int) { return 1000; }),
            (V{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 704, 1000, 296}));
}

TEST(AlignedSplit, OversizedBlockDefersOnlyWhenAsked) {
  AlignedSplitInput in;
  in.num_prompt_tokens = in.num_tokens = 1300;
  in.block_size = 512;
  in.long_prefill_token_threshold = 400;
  in.num_new_tokens = 400;
  EXPECT_EQ(mamba_aligned_split(in), 400u);  // vLLM main: unfloored
  in.defer_oversized_block = true;
  EXPECT_EQ(mamba_aligned_split(in), 0u);  // the pre-#51113 deferral, on request
  // With a finer floor unit the deferral applies only when that floor leaves nothing.
  in.floor_unit = 128;
  EXPECT_EQ(mamba_aligned_split(in), 384u);
  in.num_new_tokens = 100;
  EXPECT_EQ(mamba_aligned_split(in), 0u);
  in.defer_oversized_block = false;
  EXPECT_EQ(mamba_aligned_split(in), 100u);  // the floor would leave nothing: unfloored
  // A block that fits in a chunk is never split sub-block, flag or not: wait for more budget.
  in.long_prefill_token_threshold = 0;
  in.max_num_scheduled_tokens = 8192;
  EXPECT_EQ(mamba_aligned_split(in), 0u);
  in.defer_oversized_block = true;
  EXPECT_EQ(mamba_aligned_split(in), 0u);
}

// Any block wider than the budget: the request never stalls, and every block boundary up to the
// last cacheable one is a chunk end (the align-mode invariant the split exists for).
TEST(AlignedSplit, OversizedBlockNeverStallsAndHitsEveryBoundary) {
  for (uint64_t bs : {513u, 1000u, 2096u, 8704u}) {
    for (uint64_t budget : {128u, 400u, 511u}) {
      for (uint64_t prompt : {1u, 700u, 4200u, 20000u}) {
        for (bool eagle : {false, true}) {
          AlignedSplitInput in;
          in.num_prompt_tokens = in.num_tokens = prompt;
          in.block_size = bs;
          in.max_num_scheduled_tokens = budget;
          in.use_eagle = eagle;
          V ends;
          uint64_t at = 0;
          for (uint64_t c : chunks(in, [&](int) { return budget; })) ends.push_back(at += c);
          ASSERT_FALSE(ends.empty());
          ASSERT_EQ(ends.back(), prompt) << bs << " " << budget << " " << prompt;
          uint64_t last = prompt - prompt % bs;
          if (eagle) last = last > bs ? last - bs : 0;
          for (uint64_t b = bs; b <= last; b += bs) {
            EXPECT_NE(std::find(ends.begin(), ends.end(), b), ends.end())
                << "boundary " << b << " bs " << bs << " budget " << budget << " prompt " << prompt;
          }
        }
      }
    }
  }
}

TEST(AlignedSplit, SkipsAsyncLoadsAndDecode) {
  AlignedSplitInput in;
  in.num_prompt_tokens = in.num_tokens = 1300;
  in.block_size = 512;
  in.max_num_scheduled_tokens = 8192;
  in.num_new_tokens = 400;
  in.defer_oversized_block = true;
  EXPECT_EQ(mamba_aligned_split(in), 0u);
  in.load_kv_async = true;
  EXPECT_EQ(mamba_aligned_split(in), 400u);
  in.load_kv_async = false;
  in.start = 1300;
  in.num_tokens = 1301;
  in.num_new_tokens = 1;
  EXPECT_EQ(mamba_aligned_split(in), 1u);
}

TEST(NMinusOne, DecodeSideMatchedTokens) {
  EXPECT_EQ(d_num_new_matched_tokens(100, 0, true), 99u);
  EXPECT_EQ(d_num_new_matched_tokens(100, 32, true), 67u);
  EXPECT_EQ(d_num_new_matched_tokens(100, 0, false), 100u);
  EXPECT_EQ(d_num_new_matched_tokens(1, 0, true), 1u);
  EXPECT_EQ(d_num_new_matched_tokens(100, 120, true), 0u);
}

TEST(NMinusOne, PrefillTruncationIsIdempotent) {
  auto once = truncate_for_remote_decode({100, 16, false}, true);
  EXPECT_EQ(once.num_prompt_tokens, 99u);
  EXPECT_EQ(once.max_tokens, 1u);
  EXPECT_TRUE(once.truncated);
  auto twice = truncate_for_remote_decode(once, true);
  EXPECT_EQ(twice.num_prompt_tokens, 99u);
  EXPECT_TRUE(twice.truncated);
  auto dense = truncate_for_remote_decode({100, 16, false}, false);
  EXPECT_EQ(dense.num_prompt_tokens, 100u);
  EXPECT_EQ(dense.max_tokens, 1u);
}

// vLLM issue #53514: N+1 = 65 prompt tokens, lookup hits N = 64, truncation leaves 64, 0 new
// tokens. pdkv caps the hit after truncation: 48 computed, 16 new.
TEST(NMinusOne, Issue53514NeverZeroNewTokens) {
  auto p = plan_remote_decode_prefill(65, 64, 16, true);
  EXPECT_EQ(p.num_prompt_tokens, 64u);
  EXPECT_EQ(p.computed_tokens, 48u);
  EXPECT_EQ(p.new_tokens, 16u);
  for (uint64_t bs : {1u, 3u, 16u, 528u}) {
    for (uint64_t n = 1; n <= 200; ++n) {
      for (uint64_t hit = 0; hit <= n + 1; ++hit) {
        for (bool mamba : {false, true}) {
          auto q = plan_remote_decode_prefill(n, hit, bs, mamba);
          ASSERT_GE(q.new_tokens, 1u) << n << " " << hit << " " << bs;
          ASSERT_EQ(q.computed_tokens + q.new_tokens, q.num_prompt_tokens);
          ASSERT_EQ(q.computed_tokens % bs, 0u);
          ASSERT_LE(q.computed_tokens, hit);
          ASSERT_EQ(q.num_prompt_tokens, (mamba && n > 1) ? n - 1 : n);
        }
      }
    }
  }
  EXPECT_THROW(plan_remote_decode_prefill(0, 0, 16, true), Error);
  EXPECT_THROW(plan_remote_decode_prefill(10, 0, 0, true), Error);
}
