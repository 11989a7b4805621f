// Run-granular attention trimming for the planner (plan_runs.hpp).
#include "plan_runs.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "plan_internal.hpp"

namespace pdkv::core::plan_detail {

namespace {

// End (exclusive) of the run of consecutive ids starting at index i: ids[k] == ids[k-1] + 1.
// A run never continues past an id with the top bit set, so it cannot wrap past UINT64_MAX to
// the null block 0 (such ids are far beyond any registered region and fail the bounds check).
// Eight ids per step, two per 128-bit vector with plain SSE2 operations (subtract, xor, shift,
// or), so the scan over a long list (65k kernel ids for 1M tokens) runs at memory speed.
size_t consecutive_end(std::span<const uint64_t> ids, size_t i) {
  using v2 = uint64_t __attribute__((vector_size(16)));
  size_t j = i + 1;
  // Scattered ids (a run of one) end here, before the vector loop's setup.
  if (j >= ids.size() || ids[j] - ids[j - 1] != 1 || (ids[j - 1] >> 63) != 0) return j;
  ++j;
  constexpr size_t kStep = 8;
  const uint64_t* p = ids.data();
  while (j + kStep <= ids.size()) {
    v2 bad = {0, 0};
    for (size_t k = 0; k < kStep; k += 2) {
      v2 cur, prev;
      std::memcpy(&cur, p + j + k, sizeof(cur));
      std::memcpy(&prev, p + j + k - 1, sizeof(prev));
      const v2 one = {1, 1};
      bad |= ((cur - prev) ^ one) | (prev >> 63);
    }
    if ((bad[0] | bad[1]) != 0) break;
    j += kStep;
  }
  while (j < ids.size() && ids[j] - ids[j - 1] == 1 && (ids[j - 1] >> 63) == 0) ++j;
  return j;
}

// One side's block list, read as kernel ids: where the walk stands and how far the current run
// of consecutive kernel ids reaches, so a run is scanned once however many spans the other side
// cuts it into. With per_id > 1 the list holds logical ids of per_id kernel blocks each: kernel
// index i is kernel id ids[i / per_id] * per_id + i % per_id (the null id 0 stands for per_id
// null blocks), runs are found on the logical ids, and the walk never expands the list.
struct SideCursor {
  std::span<const uint64_t> ids;
  uint64_t per_id = 1;           // kernel blocks per listed id (check_kernel_blocks_per_id)
  uint64_t first = 0;            // block-table (kernel) index of kernel index 0
  uint64_t tokens_per_block = 0;  // per kernel block
  const char* side = "";
  uint64_t size = 0;             // kernel blocks the list stands for
  uint64_t run_end = 0;          // exclusive end (kernel index) of the run holding the cursor
  uint64_t run_begin = 0;
  uint64_t run_end_li = 0;    // run_end / per_id: the list index the next run starts at
  uint64_t run_first_id = 0;  // kernel id at run_begin

  SideCursor(std::span<const uint64_t> list, uint64_t k, uint64_t first_index, uint64_t tpb, const char* name)
      : ids(list), per_id(k), first(first_index), tokens_per_block(tpb), side(name),
        size(mul_checked(list.size(), k, "kernel blocks")) {}

  // Kernel id at kernel index i (< size). No overflow: check_kernel_blocks_per_id bounded the ids.
  uint64_t kernel_id(uint64_t i) const {
    if (per_id == 1) return ids[i];
    const uint64_t id = ids[i / per_id];
    return id == kNullBlock ? kNullBlock : id * per_id + i % per_id;
  }

  [[gnu::noinline, gnu::cold]] void fail_not_covered(uint64_t t, uint64_t idx) const {
    const uint64_t end = first + size;
    fail(Status::Coverage,
         std::string(side) + " blocks do not cover token " + s(t) + ": it lies in block index " +
             s(idx) + " but the " + side + " list holds block indices " + s(first) + ".." +
             s(end) + " (" + s(tokens_per_block) + " tokens per block); the " + side +
             " engine must pass the block ids for every token it is asked to move");
  }
  [[gnu::noinline, gnu::cold]] void fail_null(uint64_t t, uint64_t idx) const {
    fail(Status::Coverage, std::string(side) + " block index " + s(idx) + " holding token " +
                               s(t) + " is the null block 0: that token has no storage");
  }

  // Positions the cursor at kernel block index idx = t / tokens_per_block, holding token t
  // (checked exactly as trim_group does, with the same messages: in the list and not the null
  // block); returns the kernel id there. Ids grow by one along a run, so the kernel id at any
  // index of the run is the run's first one plus the distance; a walk that continues where the
  // last run ended knows the list index it starts at without dividing.
  uint64_t seek(uint64_t t, uint64_t idx) {
    const uint64_t end = add_checked(first, size, "block index");
    if (idx < first || idx >= end) fail_not_covered(t, idx);
    const uint64_t i = idx - first;
    if (i >= run_begin && i < run_end) return run_first_id + (i - run_begin);  // inside the scanned run
    // A new run starts at i: only its first id can be the null block (ids grow by one along a
    // run, and a run never wraps past UINT64_MAX: consecutive_end).
    size_t li = static_cast<size_t>(run_end_li);
    uint64_t within = 0;
    if (i != run_end) {
      li = static_cast<size_t>(i / per_id);
      within = i - li * per_id;
    }
    const uint64_t id = ids[li];
    if (id == kNullBlock) fail_null(t, idx);
    run_begin = i;
    // Scattered ids (a run of one id) are told apart here, without the scan's call.
    const size_t next = li + 1;
    run_end_li = next >= ids.size() || ids[next] - id != 1 || (id >> 63) != 0 ? next : consecutive_end(ids, li);
    run_end = run_end_li * per_id;
    run_first_id = id * per_id + within;  // no overflow: check_kernel_blocks_per_id bounded the ids
    return run_first_id;
  }

  // Block-table index of the block after the current run (first + size at most: no overflow).
  uint64_t run_end_index() const { return first + run_end; }

  // First token after the current run (the run ends at a block boundary or the list's end).
  // Saturates: a run reaching past 2^64 tokens reaches past every request.
  uint64_t run_end_token() const {
    uint64_t r = 0;
    if (__builtin_mul_overflow(first + run_end, tokens_per_block, &r)) return UINT64_MAX;
    return r;
  }
};

uint64_t gcd(uint64_t a, uint64_t b) {
  while (b != 0) {
    const uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// Multiples of m strictly inside (begin, end).
uint64_t multiples_inside(uint64_t begin, uint64_t end, uint64_t m) {
  return (end - 1) / m - begin / m;
}

// How many block-bounded runs [begin, end) splits into at the block boundaries of both sides.
uint64_t block_runs(uint64_t begin, uint64_t end, uint64_t lbs, uint64_t rbs) {
  uint64_t n = 1 + multiples_inside(begin, end, lbs);
  if (rbs == lbs) return n;
  n += multiples_inside(begin, end, rbs);
  uint64_t lcm = 0;  // boundaries both sides share were counted twice
  if (!__builtin_mul_overflow(lbs / gcd(lbs, rbs), rbs, &lcm)) n -= multiples_inside(begin, end, lcm);
  return n;
}

// Zero ranges exactly as uncovered_token_ranges(local, first, lbs, held, {[need_begin, n)}) with
// an empty interval list when need_begin >= n, but jumping over the blocks that yield nothing:
// blocks D holds entirely and blocks inside the written interval.
// Whether the block at index idx and every later block of the list start at or past both `held`
// and `n` (then nothing of them is held or written), with no overflow in their token offsets
// (checked on the last block: the per-block walk reports it otherwise).
bool tail_is_whole(const SideCursor& local, uint64_t idx, uint64_t held, uint64_t n) {
  const uint64_t lbs = local.tokens_per_block;
  uint64_t last = 0, lo = 0, hi = 0;
  if (__builtin_add_overflow(local.first, local.size - 1, &last) || __builtin_mul_overflow(last, lbs, &lo) ||
      __builtin_add_overflow(lo, lbs, &hi)) {
    return false;
  }
  return idx * lbs >= std::max(held, n);
}

// {kernel id, 0, tokens_per_block} for every non-null block from kernel index i to the list's end.
void whole_blocks(const SideCursor& local, uint64_t i, std::vector<ZeroRange>& out) {
  const uint64_t k = local.per_id, lbs = local.tokens_per_block;
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(local.size - i));  // at most this many
  ZeroRange* o = out.data() + at;
  for (size_t li = static_cast<size_t>(i / k); li < local.ids.size(); ++li) {
    const uint64_t id = local.ids[li];
    const uint64_t w0 = li == i / k ? i % k : 0;
    if (id == kNullBlock) continue;
    for (uint64_t w = w0; w < k; ++w) *o++ = {id * k + w, 0, lbs};
  }
  out.resize(static_cast<size_t>(o - out.data()));
}

void zero_ranges(const SideCursor& local, uint64_t held, uint64_t need_begin, uint64_t n,
                 std::vector<ZeroRange>& out) {
  const uint64_t first = local.first, lbs = local.tokens_per_block;
  const bool written = need_begin < n;
  const uint64_t held_blocks = held / lbs;  // block indexes below this are wholly held
  // Block indexes in [covered_begin, covered_end) lie wholly inside what D holds or receives.
  const uint64_t covered_begin = held >= need_begin ? 0 : (need_begin + lbs - 1) / lbs;
  const uint64_t covered_end = written ? n / lbs : 0;
  for (uint64_t i = 0; i < local.size; ++i) {
    const uint64_t idx = add_checked(first, i, "block index");
    if (idx < held_blocks) {
      i = std::min<uint64_t>(held_blocks - first, local.size) - 1;
      continue;
    }
    if (idx >= covered_begin && idx < covered_end) {
      i = std::min<uint64_t>(covered_end - first, local.size) - 1;
      continue;
    }
    const uint64_t block = local.kernel_id(i);
    if (block == kNullBlock) continue;
    if (idx >= covered_end && i + 1 < local.size && tail_is_whole(local, idx, held, n)) {
      // This block and every later one lie wholly past D's hit and the written tokens: each is
      // zeroed whole. Walked id by id (kernel ids of one listed id are consecutive).
      whole_blocks(local, i, out);
      return;
    }
    const uint64_t lo = mul_checked(idx, lbs, "block token offset");
    const uint64_t hi = add_checked(lo, lbs, "block token end");
    uint64_t cur = std::max(lo, std::min(held, hi));
    if (written && cur < hi && n > cur && need_begin < hi) {
      if (need_begin > cur) out.push_back({block, cur - lo, need_begin - lo});
      cur = std::max(cur, n);
    }
    if (cur < hi) out.push_back({block, cur - lo, hi - lo});
  }
}

// The spans of tokens [need_begin, n) (need_begin < n) when both sides have the same tokens per
// kernel block (lbs) and kernel blocks per listed id (k), and their lists' ids start at kernel
// block-table positions that agree modulo k (local.first % k == remote.first % k): then both
// sides' listed ids begin at the same block-table positions, and a span is a maximal range of ids
// consecutive on BOTH sides, walked id by id without cursors. Returns false, leaving `spans` as it
// found it, wherever the general walk could report an error or saturate (a list not covering the
// tokens, a null block, a block-table position or token offset near 2^64): the general walk then
// runs and reports exactly what it reports. The spans are the general walk's, field for field
// (PlanRuns.AlignedWalkAppendsTheGeneralWalksSpans).
// Inlined into trim_attention_runs, the general walk kept out of line: left to the compiler, the
// split cost the fragmented 1M request 0.5 us (measured with plan_floor).
[[gnu::always_inline]] inline bool aligned_spans(const SideCursor& local, const SideCursor& remote, uint64_t need_begin, uint64_t n,
                   std::vector<SpanRun>& spans) {
  const uint64_t lbs = local.tokens_per_block, k = local.per_id;
  const uint64_t lf = local.first, rf = remote.first;
  const uint64_t idx0 = need_begin / lbs, idx_last = (n - 1) / lbs;
  uint64_t lend = 0, rend = 0, tokens = 0;
  if (__builtin_add_overflow(lf, local.size, &lend) || __builtin_add_overflow(rf, remote.size, &rend) ||
      __builtin_mul_overflow(std::max(lend, rend), lbs, &tokens)) {
    return false;
  }
  if (idx0 < lf || idx0 < rf || idx_last >= lend || idx_last >= rend) return false;  // not covered
  const uint64_t* d = local.ids.data();
  const uint64_t* p = remote.ids.data();
  // Listed ids a (D) and b (P) hold block-table position idx; w: idx's kernel block within them.
  size_t a = static_cast<size_t>((idx0 - lf) / k), b = static_cast<size_t>((idx0 - rf) / k);
  uint64_t w = (idx0 - lf) % k;
  const size_t last_a = static_cast<size_t>((idx_last - lf) / k);  // the id holding token n - 1
  const size_t at = spans.size();
  uint64_t t = need_begin, idx = idx0, off = need_begin - idx0 * lbs;
  while (t < n) {
    const uint64_t da = d[a], pb = p[b];
    if (da == kNullBlock || pb == kNullBlock) {
      spans.resize(at);
      return false;
    }
    // The run of ids consecutive on both sides from (a, b); runs never pass an id with the top
    // bit set (consecutive_end's rule) nor, here, the id holding token n - 1.
    size_t e = a;
    while (e < last_a && d[e + 1] - d[e] == 1 && p[b + (e - a) + 1] - p[b + (e - a)] == 1 && ((d[e] | p[b + (e - a)]) >> 63) == 0) ++e;
    const uint64_t run_end_idx = lf + (static_cast<uint64_t>(e) + 1) * k;  // == rf + (b + e - a + 1) * k
    const uint64_t run_end_token = run_end_idx * lbs;                      // < tokens: no overflow
    uint64_t end = run_end_token, next_idx = run_end_idx, next_off = 0;
    if (n < run_end_token) {
      end = n;
      next_idx = n / lbs;
      next_off = n - next_idx * lbs;
    }
    const uint64_t pieces = next_idx - idx + (next_off != 0 ? 1 : 0);
    spans.emplace_back(t, end - t, da * k + w, off, pb * k + w, off, pieces);
    b += e - a + 1;
    a = e + 1;
    w = 0;
    t = end;
    idx = next_idx;
    off = next_off;
  }
  return true;
}

// The spans of tokens [need_begin, n) for any geometry: two cursors, one per side, each knowing
// the run of consecutive ids it stands in. Errors: trim_group's (not covered, null block).
[[gnu::noinline]] void general_spans(SideCursor& local, SideCursor& remote, uint64_t need_begin, uint64_t n,
                   std::vector<SpanRun>& spans) {
  const uint64_t lbs = local.tokens_per_block, rbs = remote.tokens_per_block;
  const bool same_bs = lbs == rbs;
  // FlashInfer's 16-token kernel blocks: divisions by D's block size become shifts.
  const bool pow2 = (lbs & (lbs - 1)) == 0;
  const unsigned shift = static_cast<unsigned>(__builtin_ctzll(lbs));
  auto div_lbs = [&](uint64_t x) { return pow2 ? x >> shift : x / lbs; };
  // Block index and offset of token t on each side. A span ends where a run of either side ends
  // (a block boundary of that side, whose index the cursor knows) or at n: the next span's
  // positions follow without a division except after a span ending inside a block (at n, or on
  // one side when block sizes differ).
  uint64_t lidx = div_lbs(need_begin), loff = need_begin - lidx * lbs;
  uint64_t ridx = lidx, roff = loff;
  if (!same_bs) {
    ridx = need_begin / rbs;
    roff = need_begin - ridx * rbs;
  }
  for (uint64_t t = need_begin; t < n;) {
    const uint64_t lk = local.seek(t, lidx);
    const uint64_t rk = remote.seek(t, ridx);
    const uint64_t lend = local.run_end_token(), rend = remote.run_end_token();
    const uint64_t end = std::min({lend, rend, n});
    // Where token `end` lies on each side (when end < n). run_end_token saturates only past
    // 2^64 tokens: a saturated end is n itself (UINT64_MAX), where the walk stops.
    uint64_t nlidx = 0, nloff = 0, nridx = 0, nroff = 0;
    if (end == lend && lend != UINT64_MAX) {
      nlidx = local.run_end_index();
    } else if (same_bs && end == rend && rend != UINT64_MAX) {
      nlidx = remote.run_end_index();
    } else {
      nlidx = div_lbs(end);
      nloff = end - nlidx * lbs;
    }
    if (same_bs) {
      nridx = nlidx;
      nroff = nloff;
    } else if (end == rend && rend != UINT64_MAX) {
      nridx = remote.run_end_index();
    } else {
      nridx = end / rbs;
      nroff = end - nridx * rbs;
    }
    // Equal block sizes: the span splits at D's block boundaries only (block_runs' first term);
    // its last block is the one before nlidx, or nlidx itself when `end` lies inside it.
    const uint64_t pieces = same_bs ? nlidx - lidx + (nloff != 0 ? 1 : 0) : block_runs(t, end, lbs, rbs);
    // Constructed in place from the fields (a SpanRun built on the stack and copied is reloaded
    // in 16-byte halves of 8-byte stores, a store-forwarding stall per span; a value-initialised
    // one is zeroed before its fields are written).
    spans.emplace_back(t, end - t, lk, loff, rk, roff, pieces);
    t = end;
    lidx = nlidx;
    loff = nloff;
    ridx = nridx;
    roff = nroff;
  }
}

}  // namespace

void trim_attention_runs(const PlanGroupView& g, std::vector<SpanRun>& spans,
                         std::vector<ZeroRange>& zero, TrimWalk walk) {
  // In trim_group's order, so that both report the same first error.
  check_kernel_blocks_per_id(g.kind, g.local_blocks, g.local_kernel_blocks_per_id, "local");
  check_kernel_blocks_per_id(g.kind, g.remote_blocks, g.remote_kernel_blocks_per_id, "remote");
  const uint64_t lbs = g.local_tokens_per_block;
  const uint64_t rbs = g.remote_tokens_per_block;
  if (lbs == 0 || rbs == 0) {
    fail(Status::InvalidArgument, "attention tokens per block must be > 0 (local " + s(lbs) +
                                      ", remote " + s(rbs) + ")");
  }
  const uint64_t n = g.remote_computed_tokens;
  uint64_t need_begin = g.local_hit_tokens;
  if (g.kind == GroupKind::SlidingWindow) {
    if (g.sliding_window == 0) {
      fail(Status::InvalidArgument,
           "sliding-window group with window 0: pass the model's sliding_window in tokens");
    }
    if (n > g.sliding_window) need_begin = std::max(need_begin, n - g.sliding_window);
  }
  const uint64_t lf = g.local_first_block.value_or(g.local_hit_tokens / lbs);
  SideCursor local(g.local_blocks, g.local_kernel_blocks_per_id, lf, lbs, "local");
  SideCursor remote(g.remote_blocks, g.remote_kernel_blocks_per_id, g.remote_first_block, rbs, "remote");
  if (walk != TrimWalk::None) {
    const bool aligned = walk == TrimWalk::Auto && lbs == rbs && local.per_id == remote.per_id && need_begin < n &&
                         lf % local.per_id == remote.first % remote.per_id &&
                         aligned_spans(local, remote, need_begin, n, spans);
    if (!aligned) general_spans(local, remote, need_begin, n, spans);
  }
  zero.clear();
  zero_ranges(local, g.local_hit_tokens, need_begin, n, zero);
}

}  // namespace pdkv::core::plan_detail
