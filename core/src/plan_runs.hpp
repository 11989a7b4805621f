// Attention prefix trimming at run granularity, for transfer-plan compilation. trim_group
// (prefix_trim.hpp) returns one TokenRun per block boundary on either side, i.e. one per 16-token
// kernel block with FlashInfer geometry (131 per 2096-token logical block); the planner instead
// walks maximal spans of tokens over which BOTH sides' block ids are consecutive, so its work
// follows the number of id runs, not the number of kernel blocks. Errors and zero ranges are
// those of trim_group on the same input (tests/core/plan_runs_test.cpp checks it differentially).
// Not installed; not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

#include "pdkv/core/transfer_plan.hpp"
#include "pdkv/core/zero_ranges.hpp"
#include "plan_internal.hpp"

namespace pdkv::core::plan_detail {

// Which walk trim_attention_runs may take: Auto takes the aligned walk where it applies (equal
// block sizes and kernel blocks per id on both sides, the two lists' logical blocks starting at
// the same kernel block positions: vLLM's usual request), else the general one; General always
// takes the general one (for the tests comparing both); None appends no spans: for a group the
// planner reads block-indexed (plan_indexed.hpp), whose segment was found to cover every token
// it needs with no null block, only the group's checks run and its zero ranges are derived.
enum class TrimWalk { Auto, General, None };

// Trims one attention group (tokens per block already filled) into spans appended to `spans` and
// its zero ranges into `zero` (cleared first). Errors: those of trim_group, unprefixed. Both walks
// append the same spans.
void trim_attention_runs(const PlanGroupView& g, std::vector<SpanRun>& spans,
                         std::vector<ZeroRange>& zero, TrimWalk walk = TrimWalk::Auto);

// Splits a span into the block-bounded runs trim_group would return, calling f(TokenRun) in
// token order (for byte layouts that are not linear across blocks).
template <class F>
void for_each_block_run(const SpanRun& s, uint64_t lbs, uint64_t rbs, F&& f) {
  uint64_t lb = s.local_block, lo = s.local_token_begin;
  uint64_t rb = s.remote_block, ro = s.remote_token_begin;
  uint64_t left = s.num_tokens;
  while (left > 0) {
    uint64_t len = lbs - lo;
    if (rbs - ro < len) len = rbs - ro;
    if (left < len) len = left;
    f(TokenRun{lb, lo, rb, ro, len});
    left -= len;
    lo += len;
    ro += len;
    if (lo == lbs) {
      lo = 0;
      ++lb;
    }
    if (ro == rbs) {
      ro = 0;
      ++rb;
    }
  }
}

}  // namespace pdkv::core::plan_detail
