// Property test for prefix trimming: random kernel block sizes (including non-multiples), blocks
// per logical, hit lengths, list lengths, window sizes and Mamba cache modes. For every case:
//  * attention runs cover exactly the tokens D is missing, once each, never cross a block on either
//    side, and address each token at the same position in both block tables;
//  * every token of every listed local block is exactly one of: held by D, written, zeroed;
//  * Mamba pairs join states covering the same token count, the final state is always paired,
//    each local slot is used at most once.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/prefix_trim.hpp"

using namespace pdkv::core;
using V = std::vector<uint64_t>;

namespace {

struct Table {  // a side's kernel block list with its first block-table index
  V ids;
  uint64_t first = 0;
  uint64_t tpb = 0;
  std::unordered_map<uint64_t, uint64_t> index;  // id -> block-table index
  void build() {
    for (uint64_t i = 0; i < ids.size(); ++i) index[ids[i]] = first + i;
  }
};

// Distinct, non-null logical ids, expanded to kernel ids with the owner's ppl.
V fresh_ids(std::mt19937_64& rng, std::set<uint64_t>& used, uint64_t count) {
  V out;
  std::uniform_int_distribution<uint64_t> d(1, 1'000'000);
  while (out.size() < count) {
    uint64_t v = d(rng);
    if (used.insert(v).second) out.push_back(v);
  }
  return out;
}

uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace

TEST(TrimProperties, AttentionRunsCoverExactlyTheMissingTokens) {
  std::mt19937_64 rng(20260521);
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  const uint64_t kernel_sizes[] = {1, 3, 16, 32, 48, 64, 100, 1056, 2096};
  int checked = 0, with_runs = 0, with_zero = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const uint64_t lkbs = kernel_sizes[pick(0, 8)] + (iter % 7 == 0 ? pick(1, 40) : 0);
    const uint64_t rkbs = kernel_sizes[pick(0, 8)] + (iter % 5 == 0 ? pick(1, 40) : 0);
    const uint64_t lppl = pick(1, 6), rppl = pick(1, 6);
    const uint64_t ld = lkbs * lppl, lp = rkbs * rppl;  // logical block sizes
    const uint64_t n = pick(1, 3000);
    const bool swa = pick(0, 3) == 0;
    const uint64_t window = swa ? pick(1, 800) : 0;
    // D's hit: usually whole logical blocks, sometimes arbitrary, sometimes everything.
    uint64_t hit = pick(0, n / ld) * ld;
    if (pick(0, 5) == 0) hit = pick(0, n);
    if (pick(0, 9) == 0) hit = n;

    std::set<uint64_t> used;
    // D: logical blocks from the one holding token `hit` up to N+1 tokens (the N-1 rule leaves D
    // one more token), plus maybe one spare; P: blocks for its N tokens plus maybe one spare.
    const uint64_t l_first_logical = hit / ld;
    const uint64_t l_end_logical = std::max(cdiv(n + 1, ld), l_first_logical) + pick(0, 1);
    const uint64_t r_end_logical = cdiv(n, lp) + pick(0, 1);
    uint64_t r_first_logical = 0;
    uint64_t l_first = l_first_logical;
    if (swa && pick(0, 1)) {  // exchange-clipped SWA lists (blocks hold whole windows still)
      const uint64_t keep = cdiv(window, lp) + 1;
      if (r_end_logical > keep) r_first_logical = r_end_logical - keep;
      const uint64_t lkeep = cdiv(window, ld) + 1;
      if (l_end_logical > lkeep) l_first = std::max(l_first, l_end_logical - lkeep);
    }
    Table local, remote;
    local.ids = logical_to_kernel_block_ids(fresh_ids(rng, used, l_end_logical - l_first),
                                            GroupKind::Attention, lppl);
    local.first = l_first * lppl;
    local.tpb = lkbs;
    remote.ids = logical_to_kernel_block_ids(
        fresh_ids(rng, used, r_end_logical - r_first_logical), GroupKind::Attention, rppl);
    remote.first = r_first_logical * rppl;
    remote.tpb = rkbs;
    local.build();
    remote.build();
    // Make the kernel ids disjoint between sides is not needed: lookups are per side.

    GroupTrimInput in;
    in.kind = swa ? GroupKind::SlidingWindow : GroupKind::Attention;
    in.local_blocks = local.ids;
    in.remote_blocks = remote.ids;
    in.local_tokens_per_block = lkbs;
    in.remote_tokens_per_block = rkbs;
    in.remote_computed_tokens = n;
    in.local_hit_tokens = hit;
    in.sliding_window = window;
    in.local_first_block = local.first;
    in.remote_first_block = remote.first;
    const uint64_t need_begin = swa && n > window ? std::max(hit, n - window) : hit;
    SCOPED_TRACE(testing::Message() << "iter " << iter << " lkbs " << lkbs << " rkbs " << rkbs
                                    << " lppl " << lppl << " rppl " << rppl << " n " << n
                                    << " hit " << hit << " window " << window);
    // SWA lists clipped on D before the first needed token cannot happen in vLLM; skip those.
    if (need_begin < n && need_begin / lkbs < local.first) continue;
    if (need_begin < n && need_begin / rkbs < remote.first) continue;

    GroupTrim r = trim_group(in);
    ++checked;
    with_runs += r.runs.empty() ? 0 : 1;
    with_zero += r.zero.empty() ? 0 : 1;
    std::vector<int> written(n, 0);
    for (const auto& run : r.runs) {
      ASSERT_GT(run.num_tokens, 0u);
      ASSERT_LE(run.local_token_begin + run.num_tokens, lkbs);
      ASSERT_LE(run.remote_token_begin + run.num_tokens, rkbs);
      ASSERT_TRUE(local.index.count(run.local_block));
      ASSERT_TRUE(remote.index.count(run.remote_block));
      const uint64_t lt = local.index[run.local_block] * lkbs + run.local_token_begin;
      const uint64_t rt = remote.index[run.remote_block] * rkbs + run.remote_token_begin;
      ASSERT_EQ(lt, rt) << "a run moves a token to a different position";
      for (uint64_t t = lt; t < lt + run.num_tokens; ++t) {
        ASSERT_LT(t, n);
        ++written[t];
      }
    }
    for (uint64_t t = 0; t < n; ++t) {
      ASSERT_EQ(written[t], (t >= need_begin) ? 1 : 0) << "token " << t;
    }
    // Every listed local token: held, written or zeroed, exactly one of them.
    std::map<uint64_t, std::vector<int>> zeroed;
    for (const auto& z : r.zero) {
      ASSERT_TRUE(local.index.count(z.block));
      ASSERT_LT(z.token_begin, z.token_end);
      ASSERT_LE(z.token_end, lkbs);
      auto& v = zeroed[z.block];
      v.resize(lkbs, 0);
      for (uint64_t k = z.token_begin; k < z.token_end; ++k) ++v[k];
    }
    for (uint64_t b : local.ids) {
      const uint64_t base = local.index[b] * lkbs;
      for (uint64_t k = 0; k < lkbs; ++k) {
        const uint64_t t = base + k;
        const int held = t < hit ? 1 : 0;
        const int w = t < n ? written[t] : 0;
        const int z = zeroed.count(b) ? zeroed[b][k] : 0;
        ASSERT_EQ(held + w + z, 1) << "block " << b << " token " << t;
      }
    }
  }
  // The generator must exercise the interesting cases, not skip them.
  EXPECT_GT(checked, 2500);
  EXPECT_GT(with_runs, 2000);
  EXPECT_GT(with_zero, 1000);
}

TEST(TrimProperties, MambaStatesPairByTokenCount) {
  std::mt19937_64 rng(5318008);
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  int without_slot = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const MambaCacheMode mode = static_cast<MambaCacheMode>(pick(0, 2));
    const uint64_t bd = pick(1, 5) * (pick(0, 1) ? 16 : 7), bp = pick(1, 5) * (pick(0, 1) ? 16 : 7);
    const uint64_t n = pick(1, 600);
    uint64_t hit = pick(0, n / bd) * bd;
    if (pick(0, 6) == 0) hit = n;
    std::set<uint64_t> used;
    GroupTrimInput in;
    in.kind = GroupKind::Mamba;
    in.cache_mode = mode;
    in.local_tokens_per_block = bd;
    in.remote_tokens_per_block = bp;
    in.remote_computed_tokens = n;
    in.local_hit_tokens = hit;
    SCOPED_TRACE(testing::Message() << "iter " << iter << " mode " << int(mode) << " bd " << bd
                                    << " bp " << bp << " n " << n << " hit " << hit);
    if (mode == MambaCacheMode::All) {
      const uint64_t lcount = std::max(cdiv(n + 1, bd), hit / bd) - hit / bd + pick(0, 2);
      in.local_blocks = fresh_ids(rng, used, lcount);
      in.remote_blocks = fresh_ids(rng, used, cdiv(n, bp) + pick(0, 1));
    } else {
      // Exchange-clipped single state, sometimes with leading placeholders on either side, and
      // sometimes no real local slot at all (empty or only placeholders), whatever the hit.
      const uint64_t shape = pick(0, 5);
      in.local_blocks = shape == 0 ? V{} : shape == 1 ? V(pick(1, 3), kNullBlock) : fresh_ids(rng, used, 1);
      if (shape > 1 && pick(0, 1)) in.local_blocks.insert(in.local_blocks.begin(), pick(1, 2), kNullBlock);
      in.remote_blocks = fresh_ids(rng, used, 1);
      if (pick(0, 1)) in.remote_blocks.insert(in.remote_blocks.begin(), pick(0, 3), kNullBlock);
    }
    // D needs P's final state iff it is missing tokens; it must then have a real slot for it
    // (in "all" mode at the final position, which the generator always lists).
    const bool needs = hit < n;
    const bool has_slot = std::any_of(in.local_blocks.begin(), in.local_blocks.end(),
                                      [](uint64_t b) { return b != kNullBlock; });
    if (needs && !has_slot) {
      ++without_slot;
      try {
        trim_group(in);
        FAIL() << "a needed state without a local slot was silently skipped";
      } catch (const Error& e) {
        ASSERT_EQ(e.status(), Status::Coverage) << e.what();
      }
      continue;
    }
    GroupTrim r = trim_group(in);
    ASSERT_TRUE(r.runs.empty());
    std::set<uint64_t> seen;
    bool final_paired = false;
    for (const auto& s : r.states) {
      ASSERT_TRUE(seen.insert(s.local_block).second);
      ASSERT_GT(s.tokens, hit);
      ASSERT_LE(s.tokens, n);
      final_paired = final_paired || s.tokens == n;
      if (mode == MambaCacheMode::All) {
        auto li = std::find(in.local_blocks.begin(), in.local_blocks.end(), s.local_block) -
                  in.local_blocks.begin();
        auto ri = std::find(in.remote_blocks.begin(), in.remote_blocks.end(), s.remote_block) -
                  in.remote_blocks.begin();
        ASSERT_LT(uint64_t(li), in.local_blocks.size());
        ASSERT_LT(uint64_t(ri), in.remote_blocks.size());
        const uint64_t p = hit / bd + li;
        ASSERT_EQ(std::min((p + 1) * bd, n), s.tokens);
        ASSERT_EQ(std::min((ri + 1) * bp, n), s.tokens);
      } else {
        ASSERT_EQ(s.remote_block, in.remote_blocks.back());
      }
    }
    ASSERT_EQ(final_paired, needs);
    ASSERT_EQ(r.states.empty(), !needs);
    for (uint64_t u : r.unfilled_states) ASSERT_FALSE(seen.count(u));
  }
  EXPECT_GT(without_slot, 100);  // the generator reaches the refusal, not only the happy path
}
