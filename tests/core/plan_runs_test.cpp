// The planner's run-granular attention trimming (core/src/plan_runs.*) against trim_group, the
// per-block reference: on random inputs (block lists made of id runs of every length, fragmented
// and consecutive, with null blocks, short lists, hits, sliding windows, clipped fronts, kernel or
// logical ids (kernel_blocks_per_id) on either side) the
// spans must expand to exactly trim_group's runs, count them, and give the same zero ranges, or
// fail with the same status and message.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../../core/src/plan_runs.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/prefix_trim.hpp"

using namespace pdkv::core;
using namespace pdkv::core::plan_detail;

namespace {

// A list of `count` ids made of runs of random lengths (1..max_run) starting at random ids, or
// one consecutive run; occasionally a null block.
std::vector<uint64_t> ids(std::mt19937_64& rng, uint64_t count, uint64_t max_run, bool nulls) {
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  std::vector<uint64_t> out;
  uint64_t next = pick(1, 1000);
  uint64_t left = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (left == 0) {
      left = pick(1, max_run);
      next = pick(0, 3) == 0 ? next + pick(2, 5) : pick(1, 100000);  // jump: a new run
    }
    out.push_back(next++);
    --left;
    if (nulls && pick(0, 40) == 0) out.back() = kNullBlock;
  }
  return out;
}

struct Outcome {
  bool ok = false;
  Status status = Status::Ok;
  std::string message;
  std::vector<TokenRun> runs;
  std::vector<ZeroRange> zero;
  uint64_t counted_runs = 0;
};

Outcome reference(const GroupTrimInput& in) {
  Outcome o;
  try {
    GroupTrim t = trim_group(in);
    o.ok = true;
    o.runs = t.runs;
    o.zero = t.zero;
    o.counted_runs = t.runs.size();
  } catch (const Error& e) {
    o.status = e.status();
    o.message = e.what();
  }
  return o;
}

Outcome by_runs(const GroupTrimInput& in) {
  PlanGroup g;
  g.trim = in;
  const PlanGroupView v = view_of(g);
  Outcome o;
  std::vector<SpanRun> spans;
  try {
    trim_attention_runs(v, spans, o.zero);
    o.ok = true;
  } catch (const Error& e) {
    o.status = e.status();
    o.message = e.what();
    o.zero.clear();
    return o;
  }
  uint64_t t = spans.empty() ? 0 : spans.front().token_begin;
  for (const SpanRun& s : spans) {
    EXPECT_EQ(s.token_begin, t) << "spans must be contiguous in token order";
    t += s.num_tokens;
    o.counted_runs += s.block_runs;
    uint64_t expanded = 0;
    for_each_block_run(s, in.local_tokens_per_block, in.remote_tokens_per_block, [&](const TokenRun& r) {
      o.runs.push_back(r);
      ++expanded;
    });
    EXPECT_EQ(expanded, s.block_runs);
  }
  return o;
}

TEST(PlanRuns, SpansExpandToTrimGroupRunsOnRandomInputs) {
  std::mt19937_64 rng(20261124);
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  size_t ok = 0, failed = 0, multi_block_spans = 0, logical = 0;
  for (int it = 0; it < 30000 && !HasFailure(); ++it) {
    GroupTrimInput in;
    in.kind = pick(0, 3) == 0 ? GroupKind::SlidingWindow : GroupKind::Attention;
    // Equal sizes (FlashInfer / FlashAttention), multiples, and sizes that are not multiples.
    in.local_tokens_per_block = pick(1, 20);
    in.remote_tokens_per_block = pick(0, 2) == 0 ? in.local_tokens_per_block : pick(1, 20);
    const uint64_t lbs = in.local_tokens_per_block, rbs = in.remote_tokens_per_block;
    const uint64_t n = pick(0, 40 * std::max(lbs, rbs));
    in.remote_computed_tokens = n;
    in.local_hit_tokens = pick(0, 3) == 0 ? 0 : pick(0, n / lbs) * lbs;
    if (in.kind == GroupKind::SlidingWindow) in.sliding_window = pick(0, 30) == 0 ? 0 : pick(1, n + 5);
    const uint64_t max_run = pick(0, 2) == 0 ? 1000 : pick(1, 12);  // consecutive or fragmented
    const bool nulls = pick(0, 4) == 0;
    uint64_t lcount = (n + lbs - 1) / lbs - in.local_hit_tokens / lbs;
    uint64_t rcount = (n + rbs - 1) / rbs;
    if (pick(0, 6) == 0) lcount = lcount > 0 ? lcount - 1 : 0;  // too short: Coverage
    if (pick(0, 6) == 0) rcount = rcount > 0 ? rcount - 1 : 0;
    lcount += pick(0, 2);  // extra tail blocks: zero ranges
    // Logical ids (kernel_blocks_per_id k > 1) on either side, one in three: the list holds
    // ceil(count / k) ids; the reference expands them, the walk must not need to.
    if (pick(0, 2) == 0) {
      in.local_kernel_blocks_per_id = pick(1, 6);
      in.remote_kernel_blocks_per_id = pick(0, 1) == 0 ? in.local_kernel_blocks_per_id : pick(1, 6);
      lcount = (lcount + in.local_kernel_blocks_per_id - 1) / in.local_kernel_blocks_per_id;
      rcount = (rcount + in.remote_kernel_blocks_per_id - 1) / in.remote_kernel_blocks_per_id;
      ++logical;
    }
    in.local_blocks = ids(rng, lcount, max_run, nulls);
    in.remote_blocks = ids(rng, rcount, max_run, nulls);
    if (pick(0, 8) == 0 && !in.remote_blocks.empty()) {  // a list clipped at the front (SWA)
      const uint64_t cut = pick(0, in.remote_blocks.size() - 1);
      in.remote_blocks.erase(in.remote_blocks.begin(), in.remote_blocks.begin() + static_cast<std::ptrdiff_t>(cut));
      in.remote_first_block = cut;
    }
    if (pick(0, 8) == 0) in.local_first_block = pick(0, in.local_hit_tokens / lbs + 1);
    if (pick(0, 40) == 0) in.local_tokens_per_block = 0;  // InvalidArgument
    if (pick(0, 200) == 0) in.remote_kernel_blocks_per_id = 0;  // InvalidArgument
    if (pick(0, 200) == 0 && !in.local_blocks.empty()) {  // kernel ids past 64 bits: Overflow
      in.local_kernel_blocks_per_id = 3;
      in.local_blocks[pick(0, in.local_blocks.size() - 1)] = UINT64_MAX / 2;
    }
    const Outcome want = reference(in);
    const Outcome got = by_runs(in);
    ASSERT_EQ(got.ok, want.ok) << "reference: " << want.message << " runs: " << got.message;
    if (!want.ok) {
      EXPECT_EQ(got.status, want.status);
      EXPECT_EQ(got.message, want.message);
      ++failed;
      continue;
    }
    ++ok;
    ASSERT_EQ(got.runs, want.runs) << "iteration " << it;
    EXPECT_EQ(got.counted_runs, want.counted_runs);
    EXPECT_EQ(got.zero, want.zero) << "iteration " << it;
    if (got.runs.size() > 1) ++multi_block_spans;
  }
  EXPECT_GT(ok, 8000u);
  EXPECT_GT(failed, 1000u);
  EXPECT_GT(multi_block_spans, 3000u);
  EXPECT_GT(logical, 8000u);
}

// The aligned walk (equal block sizes and kernel blocks per id, lists starting at positions that
// agree modulo k) appends exactly the general walk's spans, field for field, and the same zero
// ranges; where it bails out (a null block, a list too short) the general walk's error comes out.
// Random requests shaped for it: every block-size pair equal, k equal on both sides, long and
// short runs, nulls, short lists, SWA-clipped P lists and D lists that start later.
TEST(PlanRuns, AlignedWalkAppendsTheGeneralWalksSpans) {
  std::mt19937_64 rng(20261128);
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  size_t same = 0, errors = 0, multi = 0;
  for (int it = 0; it < 30000 && !HasFailure(); ++it) {
    GroupTrimInput in;
    in.kind = pick(0, 3) == 0 ? GroupKind::SlidingWindow : GroupKind::Attention;
    const uint64_t bs = pick(1, 20), k = pick(0, 1) == 0 ? 1 : pick(2, 7);
    in.local_tokens_per_block = in.remote_tokens_per_block = bs;
    in.local_kernel_blocks_per_id = in.remote_kernel_blocks_per_id = k;
    const uint64_t n = pick(0, 40 * bs * k);
    in.remote_computed_tokens = n;
    in.local_hit_tokens = pick(0, 2) == 0 ? 0 : pick(0, n / (bs * k)) * bs * k;
    if (pick(0, 4) == 0) in.local_hit_tokens = pick(0, n);  // not a whole logical block
    if (in.kind == GroupKind::SlidingWindow) in.sliding_window = pick(1, n + 5);
    const uint64_t max_run = pick(0, 2) == 0 ? 1000 : pick(1, 4);
    const bool nulls = pick(0, 6) == 0;
    const uint64_t kblocks = (n + bs - 1) / bs;
    uint64_t lcount = (kblocks - std::min(kblocks, in.local_hit_tokens / bs) + k - 1) / k + pick(0, 2);
    uint64_t rcount = (kblocks + k - 1) / k;
    if (pick(0, 10) == 0) lcount = lcount > 0 ? lcount - 1 : 0;
    if (pick(0, 10) == 0) rcount = rcount > 0 ? rcount - 1 : 0;
    in.local_blocks = ids(rng, lcount, max_run, nulls);
    in.remote_blocks = ids(rng, rcount, max_run, nulls);
    if (pick(0, 6) == 0 && !in.remote_blocks.empty()) {  // P's list clipped at the front (SWA), by whole ids
      const uint64_t cut = pick(0, in.remote_blocks.size() - 1);
      in.remote_blocks.erase(in.remote_blocks.begin(), in.remote_blocks.begin() + static_cast<std::ptrdiff_t>(cut));
      in.remote_first_block = cut * k + (pick(0, 5) == 0 ? pick(0, k - 1) : 0);  // sometimes misaligned
    }
    if (pick(0, 8) == 0) in.local_first_block = pick(0, in.local_hit_tokens / bs + 1);
    PlanGroup g;
    g.trim = in;
    const PlanGroupView v = view_of(g);
    std::vector<SpanRun> fast{SpanRun(9, 9, 9, 9, 9, 9, 9)}, general{SpanRun(9, 9, 9, 9, 9, 9, 9)};  // appended to
    std::vector<ZeroRange> fz, gz;
    std::string fe, ge;
    try {
      trim_attention_runs(v, fast, fz, TrimWalk::Auto);
    } catch (const Error& e) {
      fe = std::string(status_name(e.status())) + ": " + e.what();
    }
    try {
      trim_attention_runs(v, general, gz, TrimWalk::General);
    } catch (const Error& e) {
      ge = std::string(status_name(e.status())) + ": " + e.what();
    }
    ASSERT_EQ(fe, ge) << "iteration " << it;
    if (!ge.empty()) {
      ++errors;
      continue;
    }
    ASSERT_EQ(fast.size(), general.size()) << "iteration " << it;
    for (size_t i = 0; i < fast.size(); ++i) {
      const SpanRun& a = fast[i];
      const SpanRun& b = general[i];
      ASSERT_TRUE(a.token_begin == b.token_begin && a.num_tokens == b.num_tokens && a.local_block == b.local_block &&
                  a.local_token_begin == b.local_token_begin && a.remote_block == b.remote_block &&
                  a.remote_token_begin == b.remote_token_begin && a.block_runs == b.block_runs)
          << "iteration " << it << " span " << i;
    }
    ASSERT_EQ(fz, gz) << "iteration " << it;
    ++same;
    if (fast.size() > 2) ++multi;
  }
  EXPECT_GT(same, 15000u);
  EXPECT_GT(errors, 1500u);
  EXPECT_GT(multi, 8000u);
}

// FlashInfer geometry: 2096-token logical blocks of 131 kernel blocks; consecutive logical ids
// make one span for the whole request, fragmented ones one span per logical block.
TEST(PlanRuns, FlashInferLogicalBlocksBecomeOneSpanPerIdRun) {
  GroupTrimInput in;
  in.kind = GroupKind::Attention;
  in.local_tokens_per_block = in.remote_tokens_per_block = 16;
  in.remote_computed_tokens = 3 * 2096 - 1;
  auto expand = [](std::initializer_list<uint64_t> logical) {
    std::vector<uint64_t> k;
    for (uint64_t l : logical)
      for (uint64_t j = 0; j < 131; ++j) k.push_back(l * 131 + j);
    return k;
  };
  in.local_blocks = expand({7, 8, 9});
  in.remote_blocks = expand({40, 41, 42});
  PlanGroup g;
  g.trim = in;
  std::vector<SpanRun> spans;
  std::vector<ZeroRange> zero;
  trim_attention_runs(view_of(g), spans, zero);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].num_tokens, 3 * 2096 - 1);
  EXPECT_EQ(spans[0].block_runs, 3 * 131u);
  EXPECT_EQ(zero, (std::vector<ZeroRange>{{9 * 131 + 130, 15, 16}}));

  g.trim.local_blocks = expand({7, 3, 9});
  spans.clear();
  trim_attention_runs(view_of(g), spans, zero);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[1].local_block, 3 * 131u);
  EXPECT_EQ(spans[1].remote_block, 41 * 131u);
}

// The same request given as logical ids (kernel_blocks_per_id = 131): the same spans and zero
// ranges as its expanded kernel ids, and the null logical block stands for 131 null blocks.
TEST(PlanRuns, LogicalIdsWalkLikeTheirKernelIds) {
  GroupTrimInput in;
  in.kind = GroupKind::Attention;
  in.local_tokens_per_block = in.remote_tokens_per_block = 16;
  in.remote_computed_tokens = 3 * 2096 - 1;
  in.local_blocks = {7, 3, 9};
  in.remote_blocks = {40, 41, 42};
  in.local_kernel_blocks_per_id = in.remote_kernel_blocks_per_id = 131;
  PlanGroup g;
  g.trim = in;
  std::vector<SpanRun> spans;
  std::vector<ZeroRange> zero;
  trim_attention_runs(view_of(g), spans, zero);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[1].local_block, 3 * 131u);
  EXPECT_EQ(spans[1].remote_block, 41 * 131u);
  EXPECT_EQ(spans[2].local_block, 9 * 131u);
  EXPECT_EQ(zero, (std::vector<ZeroRange>{{9 * 131 + 130, 15, 16}}));

  g.trim.local_blocks = {7, 0, 9};  // token 2096 lies in kernel block 131: the null logical block
  spans.clear();
  try {
    trim_attention_runs(view_of(g), spans, zero);
    FAIL() << "a needed token in the null logical block must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Coverage);
    EXPECT_NE(std::string(e.what()).find("local block index 131 holding token 2096 is the null block"),
              std::string::npos) << e.what();
  }
  g.trim.local_kernel_blocks_per_id = 0;
  EXPECT_THROW(trim_attention_runs(view_of(g), spans, zero), Error);
}

}  // namespace
