// Block-indexed attention reads, the emitter's segment (plan_indexed.hpp).
#include "plan_indexed.hpp"

#include <algorithm>
#include <cstring>

namespace pdkv::core::plan_detail {

bool indexed_segment(const PlanGroupView& v, uint64_t min_runs, IndexedGroup& x) {
  const uint64_t lbs = v.local_tokens_per_block, k = v.local_kernel_blocks_per_id;
  if (!is_attention_kind(v.kind) || lbs == 0 || lbs != v.remote_tokens_per_block || k == 0 ||
      k != v.remote_kernel_blocks_per_id) {
    return false;
  }
  // The ids times k must stay inside 64 bits (check_kernel_blocks_per_id's rule; it reports them).
  const uint64_t max_id = (UINT64_MAX - (k - 1)) / k;
  const uint64_t n = v.remote_computed_tokens;
  uint64_t need = v.local_hit_tokens;
  if (v.kind == GroupKind::SlidingWindow) {
    if (v.sliding_window == 0) return false;
    if (n > v.sliding_window) need = std::max(need, n - v.sliding_window);
  }
  if (need >= n) return false;
  const uint64_t lf = v.local_first_block.value_or(v.local_hit_tokens / lbs), rf = v.remote_first_block;
  if (lf % k != rf % k) return false;
  uint64_t lsize = 0, rsize = 0, lend = 0, rend = 0, tpi = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(v.local_blocks.size()), k, &lsize) ||
      __builtin_mul_overflow(static_cast<uint64_t>(v.remote_blocks.size()), k, &rsize) ||
      __builtin_add_overflow(lf, lsize, &lend) || __builtin_add_overflow(rf, rsize, &rend) ||
      __builtin_mul_overflow(k, lbs, &tpi)) {
    return false;
  }
  const uint64_t idx0 = need / lbs, idx_last = (n - 1) / lbs;
  if (idx0 < lf || idx0 < rf || idx_last >= lend || idx_last >= rend) return false;  // not covered
  x.a0 = (idx0 - lf) / k;
  x.b0 = (idx0 - rf) / k;
  x.count = (idx_last - lf) / k - x.a0 + 1;
  x.first_token = (idx0 - lf) % k * lbs + need % lbs;
  x.tokens = n - need;
  x.tokens_per_id = tpi;
  x.kernel_blocks = idx_last - idx0 + 1;
  // The runs first (a run breaks where either side's next id is not one more), stopping once
  // there are min_runs: a consecutive request (one run) is told apart in one cheap pass, a
  // fragmented one after min_runs ids.
  const uint64_t* d = v.local_blocks.data() + x.a0;
  const uint64_t* p = v.remote_blocks.data() + x.b0;
  const size_t c = static_cast<size_t>(x.count);
  // A list whose last id is count - 1 past its first on both sides is taken for one run without
  // a look at the others (vLLM's usual fresh allocation; if it is not one, the listed path still
  // plans it exactly, only without this form).
  if (d[c - 1] - d[0] == c - 1 && p[c - 1] - p[0] == c - 1) return false;
  uint64_t runs = 1;
  auto breaks_in = [&](size_t b, size_t e) {
    uint64_t n = 0;
    for (size_t i = b; i < e; ++i) n += static_cast<uint64_t>((d[i] - d[i - 1] != 1) | (p[i] - p[i - 1] != 1));
    return n;
  };
  // The form pays where most ids start a run (logical ids scattered over the pool); where runs are
  // long (kernel ids, one run per logical block) the listed reads are far fewer than the ids. So
  // the first min_runs runs must lie within about the first 4 x min_runs ids (a list fragmented
  // only further on is planned listed). Eight ids a step, two per 128-bit vector (plain SSE2:
  // subtract, xor, or), counted id by id only in a step that holds a break.
  using v2 = uint64_t __attribute__((vector_size(16)));
  constexpr size_t kStep = 8;
  const uint64_t window = 4 * min_runs + kStep;
  size_t i = 1;
  for (; i + kStep <= c && runs < min_runs; i += kStep) {
    if (i > window) return false;
    v2 bad = {0, 0};
    for (size_t j = 0; j < kStep; j += 2) {
      v2 dc, dp, pc, pp;
      std::memcpy(&dc, d + i + j, sizeof(dc));
      std::memcpy(&dp, d + i + j - 1, sizeof(dp));
      std::memcpy(&pc, p + i + j, sizeof(pc));
      std::memcpy(&pp, p + i + j - 1, sizeof(pp));
      const v2 one = {1, 1};
      bad |= ((dc - dp) ^ one) | ((pc - pp) ^ one);
    }
    if ((bad[0] | bad[1]) != 0) runs += breaks_in(i, i + kStep);
  }
  if (runs < min_runs && i <= window) runs += breaks_in(i, std::min<size_t>(c, window + 1));
  if (runs < min_runs) return false;
  // Then the null id and the largest ids, and the runs counted to the end.
  uint64_t dmin = d[0], pmin = p[0], dmax = d[0], pmax = p[0], breaks = 0;
  for (size_t i = 1; i < c; ++i) {
    dmin = std::min(dmin, d[i]);
    pmin = std::min(pmin, p[i]);
    dmax = std::max(dmax, d[i]);
    pmax = std::max(pmax, p[i]);
    breaks += static_cast<uint64_t>((d[i] - d[i - 1] != 1) | (p[i] - p[i - 1] != 1));
  }
  if (dmin == kNullBlock || pmin == kNullBlock || dmax > max_id || pmax > max_id) return false;
  x.runs = breaks + 1;
  x.max_local = dmax;
  x.max_remote = pmax;
  return true;
}

}  // namespace pdkv::core::plan_detail
