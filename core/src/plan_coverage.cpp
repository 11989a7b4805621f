// The transfer plan's coverage and bounds check. The bytes D must receive are recomputed from the
// trim result and D's own layout (its heads inside a kernel block, its Mamba page), without
// looking at the reads, then compared with the union of the plan's local ranges.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "plan_internal.hpp"

namespace pdkv::core::plan_detail {

namespace {

using Range = Trimmed::Range;
using RangeList = Trimmed::RangeList;

std::string where(uint32_t region, uint64_t begin, uint64_t end) {
  return "D region " + s(region) + " offset " + s(begin) + " length " + s(end - begin);
}

// Appends [b, e) to v, extending the last range when it ends where this one begins (touching
// ranges merge in normalise anyway; merging early keeps the lists short). Overlaps are kept apart
// so that normalise reports them.
[[gnu::always_inline]] inline void push(RangeList& v, uint64_t b, uint64_t e) {
  if (!v.empty() && v.back().end == b) {
    v.back().end = e;
    return;
  }
  v.push_back({b, e});
}

// One range per span where D's tokens lie back to back across blocks (group_ranges): token k of
// the span at local_block * L + (local_token_begin + k) * token. Room made once and written
// through a pointer, the overflow checks folded into one flag; on overflow the spans are walked
// again with the checked arithmetic, which names the offending offset (off the hot path).
[[gnu::noinline, gnu::cold]] void fail_linear_ranges(const SpanRun* spans, size_t n, uint64_t L, uint64_t token) {
  for (size_t k = 0; k < n; ++k) {
    const SpanRun& r = spans[k];
    const uint64_t base = mul_checked(r.local_block, L, "local block offset");
    const uint64_t b = add_checked(base, mul_checked(r.local_token_begin, token, "offset"), "offset");
    add_checked(b, mul_checked(r.num_tokens, token, "offset"), "offset");
  }
  fail(Status::Internal, "expected ranges overflowed without a failing offset");
}

void linear_ranges(const SpanRun* spans, size_t n, uint64_t L, uint64_t token, RangeList& v) {
  size_t used = v.size();
  v.resize(used + n);
  Range* const o = v.data();
  uint64_t bad = 0;
  for (size_t k = 0; k < n; ++k) {
    const SpanRun& r = spans[k];
    uint64_t base = 0, off = 0, b = 0, len = 0, e = 0;
    // One statement each: a later one reads what an earlier one wrote (the operands of one `|`
    // chain would be unsequenced). Accumulated without branches, tested once after the loop.
    bool over = __builtin_mul_overflow(r.local_block, L, &base);
    over |= __builtin_mul_overflow(r.local_token_begin, token, &off);
    over |= __builtin_add_overflow(base, off, &b);
    over |= __builtin_mul_overflow(r.num_tokens, token, &len);
    over |= __builtin_add_overflow(b, len, &e);
    bad |= static_cast<uint64_t>(over);
    if (used > 0 && o[used - 1].end == b) {
      o[used - 1].end = e;
    } else {
      o[used++] = {b, e};
    }
  }
  v.resize(used);
  if (bad != 0) [[unlikely]] fail_linear_ranges(spans, n, L, token);
}

// ---- Block-indexed groups ---------------------------------------------------------------------
// The check's own derivation of where an attention group's needed tokens lie in its lists by
// position (written apart from the emitter's, plan_indexed.cpp): the listed D id holding the
// first needed token and its P counterpart, how many listed ids the tokens reach, and where in
// the first id they start. Used for groups whose trimming walk compile skipped (their expected
// ranges come from here) and to prove an IndexedReads entry.
struct Positions {
  uint64_t d_first = 0, p_first = 0, ids = 0;
  uint64_t first_token = 0, tokens = 0, tokens_per_id = 0;
};

inline uint64_t first_index(const PlanGroupView& v);

// False, with `why` naming the reason, when the group's tokens cannot be named by position.
bool group_positions(const PlanGroupView& v, Positions& q, std::string& why) {
  const uint64_t lbs = v.local_tokens_per_block, k = v.local_kernel_blocks_per_id;
  if (!is_attention_kind(v.kind)) {
    why = "is not an attention group";
    return false;
  }
  if (lbs == 0 || lbs != v.remote_tokens_per_block || k == 0 || k != v.remote_kernel_blocks_per_id) {
    why = "has different tokens per block (" + s(lbs) + " / " + s(v.remote_tokens_per_block) +
          ") or kernel blocks per id (" + s(k) + " / " + s(v.remote_kernel_blocks_per_id) + ") on D and P";
    return false;
  }
  const uint64_t n = v.remote_computed_tokens;
  uint64_t need = v.local_hit_tokens;
  if (v.kind == GroupKind::SlidingWindow && n > v.sliding_window) need = std::max(need, n - v.sliding_window);
  if (need >= n) {
    why = "needs no token (tokens " + s(need) + ".." + s(n) + ")";
    return false;
  }
  // Kernel positions in each list of the first and the last needed token.
  const uint64_t d0 = first_index(v), p0 = v.remote_first_block;
  const uint64_t first = need / lbs, last = (n - 1) / lbs;
  if (first < d0 || first < p0) {
    why = "starts its lists after the first needed token's block " + s(first);
    return false;
  }
  const uint64_t dpos = first - d0, ppos = first - p0;
  if (dpos % k != ppos % k) {
    why = "starts its D and P lists at different kernel blocks within an id";
    return false;
  }
  q.d_first = dpos / k;
  q.p_first = ppos / k;
  q.ids = (last - d0) / k - q.d_first + 1;
  q.first_token = dpos % k * lbs + need % lbs;
  q.tokens = n - need;
  uint64_t dend = 0, pend = 0;
  if (__builtin_mul_overflow(k, lbs, &q.tokens_per_id) || __builtin_add_overflow(q.d_first, q.ids, &dend) ||
      __builtin_add_overflow(q.p_first, q.ids, &pend) || dend > v.local_blocks.size() || pend > v.remote_blocks.size()) {
    why = "lists " + s(v.local_blocks.size()) + " D and " + s(v.remote_blocks.size()) + " P ids, fewer than its tokens " +
          s(need) + ".." + s(n) + " need";
    return false;
  }
  return true;
}

[[gnu::noinline, gnu::cold]] void fail_indexed_ranges(uint64_t id, uint64_t idb) {
  fail(Status::Overflow, "D block id " + s(id) + " times its " + s(idb) + " bytes leaves 64 bits");
}

// D's expected ranges of a group laid out linearly in the region (one token of `token` bytes
// after the other, a listed id's blocks `id_bytes` long): token positions [s, e) of each listed
// id read, merged where consecutive ids continue each other.
void indexed_ranges(const PlanGroupView& v, const Positions& q, uint64_t id_bytes, uint64_t token, RangeList& out) {
  const uint64_t* ids = v.local_blocks.data() + q.d_first;
  const uint64_t end = q.first_token + q.tokens;
  for (uint64_t i = 0; i < q.ids; ++i) {
    const uint64_t sp = i == 0 ? q.first_token : 0;
    const uint64_t ep = std::min(q.tokens_per_id, end - i * q.tokens_per_id);
    uint64_t base = 0, b = 0, e = 0;
    if (__builtin_mul_overflow(ids[i], id_bytes, &base) || __builtin_add_overflow(base, sp * token, &b) ||
        __builtin_add_overflow(base, ep * token, &e)) [[unlikely]] {
      fail_indexed_ranges(ids[i], id_bytes);
    }
    push(out, b, e);
  }
}

// Expected D byte ranges of group g in one region, appended to v, from D's own layout and
// nothing the emitter computed: for every span of tokens (ids consecutive on D over the span),
// the bytes those tokens occupy in D's blocks. Tokens of one kernel block lie back to back when
// D's tokens are whole (NHD: token t of block b at b*L + t*heads*head_bytes) or D holds one head
// (HND with one head, MLA); then the span is one range, since consecutive ids place block b+1
// right after block b. Otherwise (HND, several heads: head h of block b at
// b*L + h*tokens*head_bytes) a kernel block the span covers whole is the whole block
// [b*L, (b+1)*L), and a partly covered one is one range per head.
// Mamba: the whole unpadded state of every paired local page.
void group_ranges(const PlanContext& ctx, const Trimmed& t, size_t g, uint32_t region, RangeList& v) {
  const EngineMetadata& d = ctx.local;
  // The layout D's blocks are written in: D's own, or P's when D permutes on receive (the
  // permutation then brings them into D's); with one head (MLA, or a single KV head per rank)
  // both layouts place the same bytes. Heads per region: an MLA region (pure MLA model, or an
  // MLA-typed region of a GQA model) holds one latent head.
  const bool nhd = t.staging == KvLayout::NHD;
  const ResolvedGroup& rg = t.groups[g];
  if (is_attention_kind(rg.g.kind)) {
    const uint64_t heads = d.region_is_mla(region) ? 1 : ctx.mapping.local_physical_heads;
    const uint64_t L = d.regions[region].region.block_len;
    const uint64_t lbs = rg.g.local_tokens_per_block;
    const uint64_t hb = region_bytes_per_token(d, region, "D") / heads;
    const uint64_t token = heads * hb;  // all of D's heads of one token
    if (t.indexed[g].on) {
      // Compile skipped the group's walk (a block-indexed group: D's layout is linear there).
      Positions q;
      std::string why;
      if (!(nhd || heads == 1) || !group_positions(rg.g, q, why)) [[unlikely]] {
        fail(Status::Internal, "group " + s(g) + " was read block-indexed but its D region " + s(region) +
                                   " or its lists do not allow it" + (why.empty() ? "" : ": it " + why));
      }
      indexed_ranges(rg.g, q, mul_checked(rg.g.local_kernel_blocks_per_id, L, "D id bytes"), token, v);
      return;
    }
    if (nhd || heads == 1) {
      linear_ranges(t.spans.data() + t.span_begin[g], t.span_begin[g + 1] - t.span_begin[g], L, token, v);
      return;
    }
    for (size_t k = t.span_begin[g]; k < t.span_begin[g + 1]; ++k) {
      const SpanRun& r = t.spans[k];
      // Walk D's blocks of the span: [begin, end) tokens of block `block`.
      uint64_t block = r.local_block, begin = r.local_token_begin, left = r.num_tokens;
      while (left > 0) {
        const uint64_t end = std::min(lbs, begin + left);
        const uint64_t base = mul_checked(block, L, "local block offset");
        if (begin == 0 && end == lbs && heads * lbs * hb == L) {
          push(v, base, add_checked(base, L, "offset"));
        } else {
          for (uint64_t h = 0; h < heads; ++h) {
            const uint64_t b = add_checked(base, (h * lbs + begin) * hb, "offset");
            push(v, b, add_checked(b, (end - begin) * hb, "offset"));
          }
        }
        left -= end - begin;
        begin = 0;
        ++block;
      }
    }
  } else if (!t.mamba[g].states.empty()) {
    const uint64_t page = ctx.local_mamba->page_bytes();
    const uint64_t stride = mamba_page_stride(d, region, page, "D");
    for (const StatePair& sp : t.mamba[g].states) {
      const uint64_t b = mul_checked(sp.local_block, stride, "local page");
      push(v, b, add_checked(b, page, "local page end"));
    }
  }
}

// Expected D byte ranges, group by group in group order (so that a derivation error is the one
// the first offending group reports), each region's attention and Mamba parts apart: the
// attention ranges into att[region] for regions whose att_as class entry is unset (the others
// share them: same attention groups, block_len and kind), the Mamba pages into mam[region] for
// regions whose same_as entry is unset (the others share every range).
void expected_ranges(const PlanContext& ctx, const Trimmed& t, std::vector<RangeList>& att,
                     std::vector<RangeList>& mam) {
  const auto& rc = t.region_class;
  for (size_t g = 0; g < t.groups.size(); ++g) {
    const ResolvedGroup& rg = t.groups[g];
    const bool attention = is_attention_kind(rg.g.kind);
    if (attention && t.proofs[g].on) continue;  // proven by its IndexedReads entry (prove_indexed)
    for (uint32_t region : rg.regions) {
      if (attention) {
        if (rc[region].att_as < 0) group_ranges(ctx, t, g, region, att[region]);
      } else if (rc[region].same_as < 0) {
        group_ranges(ctx, t, g, region, mam[region]);
      }
    }
  }
}

// Whether v is ordered by begin.
bool in_order(const RangeList& v) {
  return std::is_sorted(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
}

// Sorts and merges touching ranges in place and drops empty ones. Overlapping ranges: with
// kThrow a Coverage error naming the first overlap in address order (`what` says whose),
// otherwise false (v is then sorted but not merged).
template <bool kThrow>
bool sort_merge(RangeList& v, uint32_t region, const char* what) {
  // Often in order already (one span per region, ascending ids): a linear look saves the sort.
  if (!in_order(v)) std::sort(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  size_t out = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const Range r = v[i];
    if (r.begin == r.end) continue;
    if (out > 0 && r.begin < v[out - 1].end) {
      if constexpr (!kThrow) return false;
      const uint64_t e = std::min(r.end, v[out - 1].end);
      fail(Status::Coverage, std::string(what) + " overlap: " + where(region, r.begin, e) +
                                 " would be written twice");
    }
    if (out > 0 && r.begin == v[out - 1].end) {
      v[out - 1].end = r.end;
    } else {
      v[out++] = r;
    }
  }
  v.resize(out);
  return true;
}

void normalise(RangeList& v, uint32_t region, const char* what) { sort_merge<true>(v, region, what); }

bool normalise_ok(RangeList& v) { return sort_merge<false>(v, 0, ""); }

// First byte range where the two merged lists differ, reported as missing or unexpected.
void compare(const RangeList& want, const RangeList& got, uint32_t region) {
  size_t i = 0;
  for (; i < want.size() && i < got.size(); ++i) {
    const Range& w = want[i];
    const Range& g = got[i];
    if (w.begin == g.begin && w.end == g.end) continue;
    if (g.begin > w.begin) {
      fail(Status::Coverage, "plan misses " + where(region, w.begin, std::min(g.begin, w.end)) +
                                 " that D needs; the request would be marked ready with stale "
                                 "bytes");
    }
    if (g.begin < w.begin) {
      fail(Status::Coverage, "plan writes " + where(region, g.begin, std::min(w.begin, g.end)) +
                                 " that D does not need from P");
    }
    if (g.end < w.end) {
      fail(Status::Coverage, "plan misses " + where(region, g.end, w.end) + " that D needs");
    }
    fail(Status::Coverage, "plan writes " + where(region, w.end, g.end) +
                               " that D does not need from P");
  }
  if (i < want.size()) {
    fail(Status::Coverage, "plan misses " + where(region, want[i].begin, want[i].end) +
                               " that D needs; the request would be marked ready with stale bytes");
  }
  if (i < got.size()) {
    fail(Status::Coverage, "plan writes " + where(region, got[i].begin, got[i].end) +
                               " that D does not need from P");
  }
}

// Whether two range lists are equal (Range is two words, no padding: compared as bytes).
bool same_ranges(const RangeList& a, const RangeList& b) {
  static_assert(sizeof(Range) == 2 * sizeof(uint64_t));
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(Range)) == 0);
}

// Whether v[at, at + part.size()) equals part (compared as bytes, like same_ranges).
bool prefix_is(const RangeList& v, size_t at, const RangeList& part) {
  return part.empty() || std::memcmp(v.data() + at, part.data(), part.size() * sizeof(Range)) == 0;
}

// Whether no range of m overlaps a range of a (both sorted and merged; touching is fine): for
// each of m's ranges (a few Mamba pages), the first range of a ending past its begin must begin
// at or after its end.
bool disjoint(const RangeList& m, const RangeList& a) {
  for (const Range& r : m) {
    const auto it = std::upper_bound(a.begin(), a.end(), r.begin, [](uint64_t b, const Range& x) { return b < x.end; });
    if (it != a.end() && it->begin < r.end) return false;
  }
  return true;
}

// out = the union of m and a (both sorted and merged) as one sorted, merged list; false when
// a range of one overlaps a range of the other.
bool merge_into(const RangeList& m, const RangeList& a, RangeList& out) {
  out.clear();
  size_t i = 0, j = 0;
  while (i < m.size() || j < a.size()) {
    const Range r = j == a.size() || (i < m.size() && m[i].begin < a[j].begin) ? m[i++] : a[j++];
    if (!out.empty() && r.begin < out.back().end) return false;
    push(out, r.begin, r.end);
  }
  return true;
}

// ---- Disjointness without sorting -------------------------------------------------------------
// An attention class whose expected ranges come from ONE attention group needs them sorted only
// to prove that they do not overlap each other or the class's Mamba pages. Both follow from the
// group's D block ids, in one pass over them: the group's ranges lie in the kernel blocks its
// listed ids stand for ([b * L, (b + 1) * L) for kernel id b, L the region's block_len), one list
// position's tokens are split between spans without overlap, and distinct ids are disjoint blocks;
// so when no non-null id is listed twice, no two of its ranges overlap. A Mamba page overlaps
// none of them when none of the ids whose blocks its bytes reach is listed. Both are decided with
// one bit per id (ids up to the region's last block); anything else (an id listed twice, a page
// reaching a listed block, an id past the region, a list too large for the bits) answers false
// and the caller sorts as before, which finds and names any real overlap. A fragmented request's
// ranges follow its random ids, where sorting them cost ~9 ns per range (docs/benchmarks.md).
//
// The ids are marked once per group and geometry and kept marked while the regions of its class
// are checked (Nemotron: region 0 and the region its 5-layer Mamba group leaves out share one
// attention class, so the second region only looks up its pages); IdMarks clears them when it
// goes out of scope, thrown through or not, so the bits are all clear between compiles.
class IdMarks {
 public:
  explicit IdMarks(std::vector<uint64_t>& bits) : bits_(bits) {}
  IdMarks(const IdMarks&) = delete;
  IdMarks& operator=(const IdMarks&) = delete;
  ~IdMarks() { clear(); }

  // Whether group g's listed ids are distinct and none of the blocks `pages` reach is one of them,
  // in a region of `block_len` bytes per kernel block and `region_size` bytes.
  bool disjoint(const PlanGroupView& g, uint64_t block_len, uint64_t region_size, const RangeList& pages) {
    const uint64_t k = g.local_kernel_blocks_per_id;
    uint64_t span = 0;  // bytes of one listed id
    if (k == 0 || block_len == 0 || __builtin_mul_overflow(k, block_len, &span)) return false;
    const uint64_t limit = region_size / span + 1;  // ids past this leave the region (bounds-checked elsewhere)
    constexpr uint64_t kMaxIds = uint64_t{1} << 26;  // 8 MiB of bits at most
    if (limit > kMaxIds) return false;
    if (group_ != &g || span_ != span || limit_ != limit) {
      clear();
      mark(g, limit);
      group_ = &g;
      span_ = span;
      limit_ = limit;
    }
    if (!distinct_) return false;
    const uint64_t* b = bits_.data();
    for (const Range& p : pages) {
      const uint64_t first = p.begin / span, last = (p.end - 1) / span;
      for (uint64_t id = first; id <= last && id < limit; ++id)
        if ((b[id >> 6] >> (id & 63)) & 1) return false;
    }
    return true;
  }

  // Whether id is one of the marked group's listed ids (after disjoint() returned true for it).
  bool marked(uint64_t id) const { return id < limit_ && ((bits_[id >> 6] >> (id & 63)) & 1) != 0; }

 private:
  void mark(const PlanGroupView& g, uint64_t limit) {
    const size_t words = static_cast<size_t>((limit + 63) / 64);
    if (bits_.size() < words) bits_.resize(words, 0);
    words_ = words;
    ids_ = g.local_blocks.data();
    n_ = g.local_blocks.size();
    uint64_t* b = bits_.data();
    // Branch-free marking: a null id or one past the limit marks nothing (word 0, mask 0) and is
    // only noted; a duplicate shows as a bit already set. No early exit, so every listed id is
    // marked and cleared alike.
    uint64_t dup = 0, over = 0;
    for (size_t i = 0; i < n_; ++i) {
      const uint64_t id = ids_[i];
      const bool in = id < limit;
      over |= static_cast<uint64_t>(!in);
      const uint64_t m = in && id != kNullBlock ? uint64_t{1} << (id & 63) : 0;
      uint64_t& w = b[in ? id >> 6 : 0];
      const uint64_t old = w;
      dup |= old & m;
      w = old | m;
    }
    distinct_ = dup == 0 && over == 0;
  }

  // Back to all clear: the whole array when it is short next to the list, else the words the
  // ids touched.
  void clear() {
    if (group_ == nullptr) return;
    uint64_t* b = bits_.data();
    if (words_ <= 4 * n_) {
      std::memset(b, 0, words_ * sizeof(uint64_t));
    } else {
      for (size_t i = 0; i < n_; ++i) {
        const uint64_t id = ids_[i];
        b[id < limit_ ? id >> 6 : 0] = 0;
      }
    }
    group_ = nullptr;
  }

  std::vector<uint64_t>& bits_;
  const PlanGroupView* group_ = nullptr;  // whose ids are marked (nullptr: none)
  const uint64_t* ids_ = nullptr;
  size_t n_ = 0, words_ = 0;
  uint64_t span_ = 0, limit_ = 0;
  bool distinct_ = false;
};

// Whether [b, e) overlaps a range of v (any order; the few guards of an unsorted list).
bool overlaps_any(const RangeList& v, uint64_t b, uint64_t e) {
  bool hit = false;
  for (const Range& r : v) hit |= r.begin < e && b < r.end;
  return hit;
}

// ---- Blocks two groups share in one region ----------------------------------------------------
// The overlap check above sees only bytes that are written. Two more uses of a D block must not
// meet another group's write in the same region: an attention group's zero ranges (D zeroes them
// after the data arrives, wiping whatever another group wrote there) and the prefix-hit tokens of
// its listed blocks (D's cached tokens, never written: a write there corrupts D's cached prefix).
// Those bytes ("guards") are derived per region class like the expected ranges and looked up by
// binary search in the class's sorted lists: a few per group (the partly filled tail block, the
// block holding the first missing token), nothing when no group zeroes or holds anything.

using Guard = Trimmed::Guard;

// Where the tokens of one attention group's D kernel blocks lie in one region (group_ranges'
// rules): one range per token span when D's tokens are whole or D holds one head, else one per
// head (a whole block: the whole block). In the layout the writes are checked in (P's when D
// permutes on receive), so that a group's own writes and its zeroed or held tokens, disjoint as
// tokens, are disjoint as bytes. A zeroed or held block that no group writes a token of is the
// same bytes in either layout.
// (block_len / kernel block size is whole: check_coverage's derivation checked it.)
struct TokenLayout {
  bool one = true;
  uint64_t heads = 1, L = 0, lbs = 0, token = 0;
};

[[gnu::always_inline]] inline TokenLayout token_layout(const PlanContext& ctx, const Trimmed& t, const ResolvedGroup& rg,
                                                      uint32_t region) {
  const EngineMetadata& d = ctx.local;
  TokenLayout y;
  y.heads = d.region_is_mla(region) ? 1 : ctx.mapping.local_physical_heads;
  y.L = d.regions[region].region.block_len;
  y.lbs = rg.g.local_tokens_per_block;
  y.token = d.region_bytes_per_token(region);
  y.one = t.staging == KvLayout::NHD || y.heads == 1;
  return y;
}

// Appends guard [b, e) of tokens [tb, te) of `block`, extending the last guard instead when it
// ends where this one begins (same group and use): a zeroed tail or a held prefix spans many
// consecutive kernel blocks (FlashInfer: up to 130 of a 2096-token block), which would otherwise
// be as many guards, each looked up in every region class on every compile.
[[gnu::always_inline]] inline void push_guard(std::vector<Guard>& out, uint64_t b, uint64_t e, uint64_t block,
                                              uint64_t tb, uint64_t te, uint32_t g, bool held) {
  if (!out.empty()) {
    Guard& last = out.back();
    if (last.end == b && last.group == g && last.held == held) {
      last.end = e;
      last.last_block = block;
      last.token_end = te;
      return;
    }
  }
  out.push_back({b, e, block, tb, te, block, g, held});
}

// Appends the bytes of tokens [tb, te) (tb < te <= lbs) of D kernel block `block`. A block
// whose bytes would pass 2^64 is left out: no write (each one bounds-checked) can reach it.
[[gnu::always_inline]] inline void add_guard(const TokenLayout& y, uint64_t block, uint64_t tb, uint64_t te, uint32_t g, bool held,
               std::vector<Guard>& out) {
  uint64_t base = 0;
  if (tb >= te || __builtin_mul_overflow(block, y.L, &base) || base > UINT64_MAX - y.L) return;
  if (y.one) {
    push_guard(out, base + tb * y.token, base + te * y.token, block, tb, te, g, held);
    return;
  }
  const uint64_t hb = y.token / y.heads;
  if (tb == 0 && te == y.lbs && y.heads * y.lbs * hb == y.L) {
    push_guard(out, base, base + y.L, block, tb, te, g, held);
  } else {
    for (uint64_t h = 0; h < y.heads; ++h) {
      const uint64_t b = base + (h * y.lbs + tb) * hb;
      out.push_back({b, b + (te - tb) * hb, block, tb, te, block, g, held});
    }
  }
}

// Block-table indexes below this hold tokens of D's prefix hit (local_hit_tokens).
inline uint64_t held_end(const PlanGroupView& v) {
  return v.local_hit_tokens / v.local_tokens_per_block + (v.local_hit_tokens % v.local_tokens_per_block != 0);
}

inline uint64_t first_index(const PlanGroupView& v) {
  return v.local_first_block.value_or(v.local_hit_tokens / v.local_tokens_per_block);
}

// Whether attention group g zeroes or holds any token of its listed blocks. The zero ranges are
// the plan's (what D applies; compile moved the derived ones there).
[[gnu::always_inline]] inline bool guards_any(const TransferPlan& plan, const Trimmed& t, size_t g) {
  const ResolvedGroup& rg = t.groups[g];
  if (!is_attention_kind(rg.g.kind) || rg.g.local_tokens_per_block == 0) return false;
  return !plan.zero[g].zero.empty() ||
         (rg.g.local_hit_tokens != 0 && !rg.g.local_blocks.empty() && first_index(rg.g) < held_end(rg.g));
}

// The guards of every attention group using `region`.
void collect_guards(const TransferPlan& plan, const PlanContext& ctx, const Trimmed& t, uint32_t region,
                    std::vector<Guard>& out) {
  out.clear();
  for (size_t g = 0; g < t.groups.size(); ++g) {
    if (!guards_any(plan, t, g)) continue;
    const ResolvedGroup& rg = t.groups[g];
    if (std::find(rg.regions.begin(), rg.regions.end(), region) == rg.regions.end()) continue;
    const TokenLayout y = token_layout(ctx, t, rg, region);
    const auto gi = static_cast<uint32_t>(g);
    for (const ZeroRange& z : plan.zero[g].zero) add_guard(y, z.block, z.token_begin, std::min(z.token_end, y.lbs), gi, false, out);
    const PlanGroupView& v = rg.g;
    const uint64_t lf = first_index(v), he = held_end(v), k = v.local_kernel_blocks_per_id;
    if (lf >= he) continue;
    const uint64_t held = he - lf;  // listed kernel positions holding hit tokens (at most)
    for (size_t i = 0; i < v.local_blocks.size(); ++i) {
      uint64_t p0 = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(i), k, &p0) || p0 >= held) break;
      const uint64_t id = v.local_blocks[i];
      for (uint64_t j = 0; j < k && p0 + j < held; ++j) {
        if (id == 0) break;  // the null block holds nothing
        const uint64_t x = lf + p0 + j;  // its block-table index: x * lbs < local_hit_tokens
        add_guard(y, id * k + j, 0, std::min(y.lbs, v.local_hit_tokens - x * y.lbs), gi, true, out);
      }
    }
  }
}

// Whether [b, e) overlaps a range of v (sorted and merged).
[[gnu::always_inline]] inline bool overlaps(const RangeList& v, uint64_t b, uint64_t e) {
  const auto it = std::upper_bound(v.begin(), v.end(), b, [](uint64_t x, const Range& r) { return x < r.end; });
  return it != v.end() && it->begin < e;
}

// Names the group whose write meets guard gd in `region` (derived again: the error path only).
[[gnu::noinline, gnu::cold]] void fail_shared(const PlanContext& ctx, const Trimmed& t, uint32_t region, const Guard& gd) {
  RangeList v;
  const ResolvedGroup& og = t.groups[gd.group];
  for (size_t g = 0; g < t.groups.size(); ++g) {
    const ResolvedGroup& rg = t.groups[g];
    if (std::find(rg.regions.begin(), rg.regions.end(), region) == rg.regions.end()) continue;
    v.clear();
    group_ranges(ctx, t, g, region, v);
    for (const Range& r : v) {
      if (r.end <= gd.begin || gd.end <= r.begin) continue;
      const uint64_t at = std::max(r.begin, gd.begin);
      const bool attention = is_attention_kind(rg.g.kind);
      const uint64_t stride = attention ? ctx.local.regions[region].region.block_len
                                        : mamba_page_stride(ctx.local, region, ctx.local_mamba->page_bytes(), "D");
      const std::string writer = "group " + s(g) + " (" + group_kind_name(rg.g.kind) + ")";
      const std::string owner = "group " + s(gd.group) + " (" + group_kind_name(og.g.kind) + ")";
      const std::string tokens = gd.last_block == gd.block
                                     ? "tokens " + s(gd.token_begin) + ".." + s(gd.token_end) + " of its D block " +
                                           s(gd.block)
                                     : "from token " + s(gd.token_begin) + " of its D block " + s(gd.block) +
                                           " to token " + s(gd.token_end) + " of its D block " + s(gd.last_block);
      const std::string use = gd.held ? " lists as holding D's cached prefix (" + tokens +
                                            ", never written): the write would corrupt D's cached prefix"
                                      : " zeroes after the data arrives (" + tokens +
                                            "): the zeroing would wipe what " + writer + " wrote";
      fail(Status::Coverage, writer + " writes " + (attention ? "" : "its state into ") + "D block " +
                                 s(at / stride) + " of region " + s(region) + " (" +
                                 where(region, at, std::min(r.end, gd.end)) + "), which " + owner + use +
                                 (g == gd.group ? "; a group may not list one D block twice"
                                                : "; two groups may not share a D block in one region"));
    }
  }
  fail(Status::Coverage, "D region " + s(region) + ": block " + s(gd.block) + " of group " + s(gd.group) +
                             " is written by another group");
}

// Names guard z (a zero range) meeting guard h (held prefix tokens) in `region`. The error path only.
[[gnu::noinline, gnu::cold]] void fail_zero_over_held(const PlanContext& ctx, const Trimmed& t, uint32_t region,
                                                      const Guard& z, const Guard& h) {
  auto tokens = [](const Guard& gd) {
    return gd.last_block == gd.block ? "tokens " + s(gd.token_begin) + ".." + s(gd.token_end) + " of its D block " + s(gd.block)
                                     : "from token " + s(gd.token_begin) + " of its D block " + s(gd.block) + " to token " +
                                           s(gd.token_end) + " of its D block " + s(gd.last_block);
  };
  auto name = [&](const Guard& gd) { return "group " + s(gd.group) + " (" + group_kind_name(t.groups[gd.group].g.kind) + ")"; };
  const uint64_t b = std::max(z.begin, h.begin), e = std::min(z.end, h.end);
  fail(Status::Coverage, name(z) + " zeroes D block " + s(b / ctx.local.regions[region].region.block_len) + " of region " +
                             s(region) + " (" + where(region, b, e) + ") after the data arrives (" + tokens(z) + "), which " +
                             name(h) + " lists as holding D's cached prefix (" + tokens(h) +
                             ", never written): the zeroing would wipe D's cached prefix" +
                             (z.group == h.group ? "; a group may not list one D block twice"
                                                 : "; two groups may not share a D block in one region"));
}

// Zero ranges against held prefix tokens (no write involved, so the lookups of writes never see
// them): sorted by where they begin, each guard is compared with the guard of the other use that
// reaches furthest among those before it, which finds an overlapping (zeroed, held) pair if any.
void check_guard_pairs(const PlanContext& ctx, const Trimmed& t, uint32_t region, std::vector<Guard>& guards) {
  std::sort(guards.begin(), guards.end(), [](const Guard& a, const Guard& b) { return a.begin < b.begin; });
  const Guard* far_held = nullptr;
  const Guard* far_zero = nullptr;
  for (const Guard& gd : guards) {
    if (!gd.held && far_held != nullptr && far_held->end > gd.begin) fail_zero_over_held(ctx, t, region, gd, *far_held);
    if (gd.held && far_zero != nullptr && far_zero->end > gd.begin) fail_zero_over_held(ctx, t, region, *far_zero, gd);
    const Guard*& far = gd.held ? far_held : far_zero;
    if (far == nullptr || gd.end > far->end) far = &gd;
  }
}

// Checks the guards of every attention class against its list of expected attention ranges and
// those of every Mamba class against its list of Mamba pages, each list once (all sorted and
// merged by check_coverage by now: a list that was not failed there). The guards depend only on
// the attention class (its groups, block_len and kind): regions of one class share them. Kept
// out of line: check_coverage calls it only when some group zeroes or holds a token.
[[gnu::noinline]] void check_guards(const TransferPlan& plan, const PlanContext& ctx, Trimmed& t) {
  auto& rc = t.region_class;
  const auto& att = t.want;
  const auto& mam = t.mam;
  auto& guards = t.guards;
  uint32_t guards_of = UINT32_MAX;  // the attention class `guards` holds
  for (uint32_t region = 0; region < rc.size(); ++region) {
    // A class this region heads whose list is sorted, or proven disjoint as derived (any other
    // state was refused already).
    const bool att_class = rc[region].att_as < 0 && (rc[region].att_state == 1 || rc[region].att_state == 3);
    const bool mam_class = rc[region].same_as < 0 && rc[region].mam_state == 1;
    if (!att_class && !mam_class) continue;  // an earlier region's classes
    const uint32_t qa = rc[region].att_as < 0 ? region : static_cast<uint32_t>(rc[region].att_as);
    if (guards_of != qa) {
      collect_guards(plan, ctx, t, region, guards);
      check_guard_pairs(ctx, t, region, guards);
      guards_of = qa;
    }
    if (att_class && rc[qa].att_state == 3 && guards.size() * att[qa].size() > 4096) {
      // Many guards (a long prefix hit on fragmented ids): sorted after all, then looked up.
      if (!normalise_ok(t.want[qa])) fail(Status::Internal, "region " + s(qa) + ": disjoint ranges overlap once sorted");
      rc[qa].att_state = 1;
    }
    const bool unsorted = att_class && rc[qa].att_state == 3;
    for (const Guard& gd : guards) {
      const bool att_hit = att_class && (unsorted ? overlaps_any(att[qa], gd.begin, gd.end) : overlaps(att[qa], gd.begin, gd.end));
      if (att_hit || (mam_class && overlaps(mam[region], gd.begin, gd.end))) fail_shared(ctx, t, region, gd);
    }
  }
}

// `size` is region_size(m, region) when the region exists (the caller's cache), else unused.
[[gnu::noinline, gnu::cold]] void fail_bounds(const EngineMetadata& m, const char* side, uint32_t region,
                                               uint64_t offset, uint64_t length, uint64_t size) {
  if (region >= m.regions.size()) {
    fail(Status::OutOfBounds, std::string(side) + " region " + s(region) + " does not exist (" +
                                  s(m.regions.size()) + " regions registered)");
  }
  uint64_t end = 0;
  if (length == 0 || __builtin_add_overflow(offset, length, &end) || end > size) {
    fail(Status::OutOfBounds, std::string(side) + (side[0] == 'P' ? " rank " + s(m.tp_rank) : "") +
                                  " region " + s(region) + ": read at offset " + s(offset) +
                                  " length " + s(length) + " leaves the registered region of " +
                                  s(size) + " bytes");
  }
}

inline void check_bounds(const EngineMetadata& m, const char* side, uint32_t region, uint64_t offset,
                         uint64_t length, uint64_t size) {
  uint64_t end = 0;
  if (region >= m.regions.size() || length == 0 || __builtin_add_overflow(offset, length, &end) || end > size)
      [[unlikely]] {
    fail_bounds(m, side, region, offset, length, size);
  }
}

// Index in plan.ranks of P rank p, or SIZE_MAX.
size_t plan_rank_index(const TransferPlan& plan, uint32_t p) {
  for (size_t i = 0; i < plan.ranks.size(); ++i)
    if (plan.ranks[i].p_rank == p) return i;
  return SIZE_MAX;
}

// Accepts the hints whose reads equal the verified template at every page of their group and
// whose pages lie inside the registered regions on both sides: each page stands for [lpage,
// +page) of its D region (the template tiles the page exactly, verified when the context was
// judged). The page bases are derived here, not taken from the emitter: the trimmed state's
// block ids times the template's page strides (block_len x ppl of each region, from the
// metadata). The group's reads are recorded in t.consumed so that the per-read pass skips them.
// A hint that does not match in every read of every page is ignored, and its reads are checked
// one by one like any other.
void accept_hints(const TransferPlan& plan, const Prepared& pre, Trimmed& t) {
  const MambaTemplate& m = pre.mamba;
  auto& ranks = t.hint_ranks;
  ranks.resize(m.ranks.size());
  for (size_t j = 0; j < m.ranks.size(); ++j) {
    const size_t ri = plan_rank_index(plan, m.ranks[j].p_rank);
    if (ri == SIZE_MAX) return;  // a page needs every template rank: no hint can be accepted
    Trimmed::HintRank& k = ranks[j];
    const auto& reads = plan.ranks[ri].reads;
    const auto& psize = pre.p_size[m.ranks[j].pos];
    k.reads = reads.data();
    k.num_reads = reads.size();
    k.tmpl = m.ranks[j].reads.data();
    k.num_tmpl = m.ranks[j].reads.size();
    k.stride = m.remote_stride[j].data();
    k.num_stride = m.remote_stride[j].size();
    k.psize = psize.data();
    k.num_psize = psize.size();
    k.extent = m.ranks[j].remote_extent;
    k.consumed = &t.consumed[ri];
  }
  const size_t nr = ranks.size();
  const uint64_t page = m.local_page;
  for (const MambaHint& h : t.hints) {
    if (h.group >= t.groups.size() || h.at + nr > t.hint_index.size()) continue;
    const ResolvedGroup& rg = t.groups[h.group];
    const std::vector<StatePair>& states = t.mamba[h.group].states;
    const size_t pages = rg.regions.size() * states.size();
    const size_t* firsts = t.hint_index.data() + h.at;
    bool ok = true;
    for (size_t j = 0; j < nr && ok; ++j) {  // every rank's reads of the group exist, after those consumed
      const Trimmed::HintRank& k = ranks[j];
      ok = firsts[j] <= k.num_reads && (k.num_reads - firsts[j]) / k.num_tmpl >= pages &&
           (k.consumed->empty() || k.consumed->back().second <= firsts[j]);
    }
    uint64_t bad = 0;  // any bit set: a page out of bounds, an overflow, or a read off the template
    for (size_t ri = 0; ri < rg.regions.size() && ok; ++ri) {
      const uint32_t region = rg.regions[ri], rregion = rg.remote_regions[ri];
      if (region >= pre.d_size.size() || region >= m.local_stride.size() || m.local_stride[region] == 0) {
        ok = false;
        break;
      }
      const uint64_t ls = m.local_stride[region], dmax = pre.d_size[region];
      for (size_t j = 0; j < nr && ok; ++j) {
        const Trimmed::HintRank& k = ranks[j];
        ok = rregion < k.num_stride && rregion < k.num_psize && k.stride[rregion] != 0;
      }
      for (size_t si = 0; si < states.size() && ok; ++si) {
        const StatePair& sp = states[si];
        uint64_t lpage = 0, lend = 0;
        bool lover = __builtin_mul_overflow(sp.local_block, ls, &lpage);  // (sequenced: see linear_ranges)
        lover |= __builtin_add_overflow(lpage, page, &lend);
        lover |= lend > dmax;
        bad |= static_cast<uint64_t>(lover);
        const size_t pg = ri * states.size() + si;
        for (size_t j = 0; j < nr; ++j) {
          const Trimmed::HintRank& k = ranks[j];
          uint64_t rpage = 0, rend = 0;
          bool rover = __builtin_mul_overflow(sp.remote_block, k.stride[rregion], &rpage);
          rover |= __builtin_add_overflow(rpage, k.extent, &rend);
          rover |= rend > k.psize[rregion];
          bad |= static_cast<uint64_t>(rover);
          const PlanRead* r = k.reads + firsts[j] + pg * k.num_tmpl;
          for (size_t i = 0; i < k.num_tmpl; ++i) {
            const TemplateRead& x = k.tmpl[i];
            bad |= (r[i].local_region ^ region) | (r[i].remote_region ^ rregion) | (r[i].length ^ x.length) |
                   (r[i].local_offset ^ (lpage + x.local_offset)) | (r[i].remote_offset ^ (rpage + x.remote_offset));
          }
        }
      }
    }
    if (!ok || bad != 0) continue;
    for (size_t j = 0; j < nr; ++j) ranks[j].consumed->push_back({firsts[j], firsts[j] + pages * ranks[j].num_tmpl});
    for (uint32_t region : rg.regions) {
      const uint64_t ls = m.local_stride[region];
      for (const StatePair& sp : states) push(t.got[region], sp.local_block * ls, sp.local_block * ls + page);
    }
  }
}

// Copies region r's alias (a repeat's ranges, logically last in got[r]) into got[r]. The aliased
// ranges stay where they are (got lists only grow at their ends, and an alias is recorded after
// the ranges it names) but the last of them may since have been extended by a merge: the alias
// keeps its own copy of it.
void materialise(std::vector<RangeList>& got, std::vector<Trimmed::Alias>& alias, uint32_t r) {
  Trimmed::Alias& a = alias[r];
  if (!a.set) return;
  a.set = false;
  const RangeList& from = got[a.src];
  RangeList& to = got[r];
  to.reserve(to.size() + (a.end - a.begin));
  to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(a.begin), from.begin() + static_cast<std::ptrdiff_t>(a.end - 1));
  to.push_back(a.tail);
}

// Before got[src] is sorted in place: every alias of its ranges is copied out first.
void release_aliases_of(std::vector<RangeList>& got, std::vector<Trimmed::Alias>& alias, uint32_t src) {
  for (uint32_t r = 0; r < alias.size(); ++r)
    if (alias[r].set && alias[r].src == src) materialise(got, alias, r);
}

// Bounds-checks one P rank's reads and adds their D ranges to `got`, skipping the reads in
// `skip` (pages accept_hints verified). The reads are walked in segments, runs of reads of one
// (D region, P region) pair. A segment whose reads equal the previous segment's read for read
// (same offsets and lengths, another D region) is in bounds when its regions are at least as
// large as that segment's regions (whose reads are all in bounds), and adds the same ranges to
// its region's list as that segment added to its own (when neither one's first range merged
// into an earlier range): it is compared, not re-checked read by read. Anything else is checked
// read by read.
//
// A factored plan's region repeats are taken at their positions in issue order. A repeat of
// exactly the previous segment into regions at least as large (vLLM's regions alike) is in bounds
// for the same reason, and its ranges are recorded as an alias of that segment's in `got` instead
// of being copied (materialise copies them when something else needs the list); any other repeat
// is checked copy by copy like listed reads.
void check_rank_reads(const RankReads& rank, const std::vector<std::pair<size_t, size_t>>& skip,
                      const EngineMetadata& d, const EngineMetadata& p, const std::vector<uint64_t>& d_size,
                      const std::vector<uint64_t>& p_size, std::vector<RangeList>& got,
                      std::vector<Trimmed::Alias>& alias) {
  const std::vector<PlanRead>& reads = rank.reads;
  const size_t n = reads.size();
  const PlanRead* rd = reads.data();
  const RegionRepeat* reps = rank.repeats.data();
  const size_t num_reps = rank.repeats.size();
  size_t next_rep = 0;
  const uint64_t* dsz = d_size.data();
  const uint64_t* psz = p_size.data();
  const size_t dn = d_size.size(), pn = p_size.size();
  // The previous segment: reads [begin, end) of regions (lr, rr), which added got[lr][got_begin,
  // got_end) and nothing else (`fresh`: its first range did not merge into an earlier one).
  bool have_prev = false;
  size_t prev_begin = 0, prev_end = 0, prev_got_begin = 0, prev_got_end = 0;
  uint32_t prev_lr = 0, prev_rr = 0;
  bool prev_fresh = false;
  size_t next_skip = 0;
  // The repeats issued before listed read i (at i == n: the rest).
  const auto repeats_before = [&](size_t i) {
    for (; next_rep < num_reps && reps[next_rep].end <= i; ++next_rep) {
      const RegionRepeat& x = reps[next_rep];
      const uint32_t lr = x.local_region, rr = x.remote_region;
      if (have_prev && prev_fresh && x.begin == prev_begin && x.end == prev_end && lr != prev_lr && lr < dn &&
          rr < pn && dsz[lr] >= dsz[prev_lr] && psz[rr] >= psz[prev_rr] && !alias[lr].set && !alias[prev_lr].set &&
          (got[lr].empty() || got[lr].back().end != rd[prev_begin].local_offset)) {
        alias[lr] = {true, prev_lr, prev_got_begin, prev_got_end, got[prev_lr][prev_got_end - 1]};
        continue;  // the previous segment stays the one later repeats and segments compare with
      }
      if (lr < dn) materialise(got, alias, lr);
      for (uint64_t j = x.begin; j < x.end; ++j) {  // check_repeats bounded begin < end <= n
        const PlanRead& r = rd[j];
        check_bounds(d, "D", lr, r.local_offset, r.length, lr < dn ? dsz[lr] : 0);
        check_bounds(p, "P", rr, r.remote_offset, r.length, rr < pn ? psz[rr] : 0);
        push(got[lr], r.local_offset, r.local_offset + r.length);
      }
      have_prev = false;
    }
  };
  for (size_t i = 0; i < n;) {
    if (next_rep < num_reps && reps[next_rep].end <= i) repeats_before(i);
    if (next_skip < skip.size() && skip[next_skip].first == i) {  // a page accept_hints verified
      i = skip[next_skip++].second;
      continue;
    }
    // Reads before the next skipped page and the next repeat: a segment never reaches past one.
    size_t limit = next_skip < skip.size() ? std::min(skip[next_skip].first, n) : n;
    if (next_rep < num_reps) limit = std::min<size_t>(limit, reps[next_rep].end);
    const PlanRead& f = rd[i];
    if (have_prev && prev_fresh) {
      const size_t len = prev_end - prev_begin;
      const uint32_t lr = f.local_region, rr = f.remote_region;
      if (lr != prev_lr && lr < dn && rr < pn && len <= limit - i && !alias[lr].set && dsz[lr] >= dsz[prev_lr] &&
          psz[rr] >= psz[prev_rr] && (got[lr].empty() || got[lr].back().end != f.local_offset)) {
        const PlanRead* a = rd + i;
        const PlanRead* b = rd + prev_begin;
        uint64_t diff = 0;  // any bit set: some field differs
        for (size_t k = 0; k < len; ++k) {
          diff |= (a[k].local_offset ^ b[k].local_offset) | (a[k].remote_offset ^ b[k].remote_offset) |
                  (a[k].length ^ b[k].length) | (a[k].local_region ^ lr) | (a[k].remote_region ^ rr);
        }
        if (diff == 0) {
          materialise(got, alias, lr);
          RangeList& to = got[lr];
          const RangeList& from = got[prev_lr];
          const size_t at = to.size();
          to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(prev_got_begin),
                    from.begin() + static_cast<std::ptrdiff_t>(prev_got_end));
          prev_begin = i;
          prev_end = i + len;
          prev_lr = lr;
          prev_rr = rr;
          prev_got_begin = at;
          prev_got_end = to.size();
          i += len;
          continue;
        }
      }
    }
    // A segment read by read.
    const uint32_t lr = f.local_region, rr = f.remote_region;
    check_bounds(d, "D", lr, f.local_offset, f.length, lr < dn ? dsz[lr] : 0);
    check_bounds(p, "P", rr, f.remote_offset, f.length, rr < pn ? psz[rr] : 0);
    const uint64_t dmax = dsz[lr], pmax = psz[rr];
    materialise(got, alias, lr);
    RangeList& to = got[lr];
    const bool fresh = to.empty() || to.back().end != f.local_offset;
    const size_t at = to.size();
    push(to, f.local_offset, f.local_offset + f.length);
    size_t j = i + 1;
    while (j < limit && rd[j].local_region == lr && rd[j].remote_region == rr) ++j;
    // The segment's other reads: room made once and written through a pointer (push_back would
    // store the list's end after every range), their bounds folded into one flag; a read out of
    // bounds is found and named again read by read, off the hot path.
    size_t used = to.size();
    to.resize(used + (j - i - 1));
    Range* const o = to.data();
    uint64_t bad = 0;
    for (size_t k = i + 1; k < j; ++k) {
      const PlanRead& r = rd[k];
      uint64_t le = 0, pe = 0;
      bool over = r.length == 0;  // one statement each, in order (see linear_ranges)
      over |= __builtin_add_overflow(r.local_offset, r.length, &le);
      over |= le > dmax;
      over |= __builtin_add_overflow(r.remote_offset, r.length, &pe);
      over |= pe > pmax;
      bad |= static_cast<uint64_t>(over);
      if (o[used - 1].end == r.local_offset) {
        o[used - 1].end = le;
      } else {
        o[used++] = {r.local_offset, le};
      }
    }
    to.resize(used);
    if (bad != 0) [[unlikely]] {
      for (size_t k = i + 1; k < j; ++k) {
        check_bounds(d, "D", lr, rd[k].local_offset, rd[k].length, dmax);
        check_bounds(p, "P", rr, rd[k].remote_offset, rd[k].length, pmax);
      }
      fail(Status::Internal, "D region " + s(lr) + ": a read failed the folded bounds check but none read by read");
    }
    have_prev = true;
    prev_begin = i;
    prev_end = j;
    prev_lr = lr;
    prev_rr = rr;
    prev_fresh = fresh;
    prev_got_begin = at;
    prev_got_end = to.size();
    i = j;
  }
  repeats_before(n);
}

// ---- Proving IndexedReads entries ------------------------------------------------------------
// An entry stands for exactly the reads D's layout needs for its group when it is the group's
// position derivation (group_positions) field for field, its ids are the request's at those
// positions, its region pairs are the group's, and its byte geometry is D's linear layout of
// each region; its reads then write exactly the ranges indexed_ranges derives, which are left
// out of both lists rather than derived twice. Its reads stay inside every region when the
// largest id's blocks do (P: its last token position), and they write nothing twice when the
// group's listed ids are distinct; they meet no Mamba page, zero range or held prefix when
// those reach no written token of a listed id (IdMarks, and a lookup of the few guards' ids).
// Where that cannot be shown cheaply the entry's ranges are added to both lists (materialised)
// and the comparison below decides as for listed reads.

[[noreturn, gnu::cold, gnu::noinline]] void fail_entry(Status st, const RankReads& rr, size_t e, const std::string& why) {
  fail(st, "P rank " + s(rr.p_rank) + " indexed reads " + s(e) + " (group " + s(rr.indexed[e].group) + "): " + why);
}

// Proves entry e of plan rank ri against its group (see above) and records it in t.proofs; p_size:
// that P rank's region sizes. Errors: Coverage naming the field that differs, OutOfBounds naming
// the region and the id.
void match_entry(const TransferPlan& plan, const PlanContext& ctx, Trimmed& t, size_t ri, size_t e,
                 const std::vector<uint64_t>& d_size, const std::vector<uint64_t>& p_size, bool permute) {
  const RankReads& rr = plan.ranks[ri];
  const IndexedReads& x = rr.indexed[e];
  if (x.group >= t.groups.size()) fail_entry(Status::Coverage, rr, e, "names no group of the request's " + s(t.groups.size()));
  if (t.proofs[x.group].on) fail_entry(Status::Coverage, rr, e, "reads a group another indexed entry reads already");
  const ResolvedGroup& rg = t.groups[x.group];
  Positions q;
  std::string why;
  if (!group_positions(rg.g, q, why)) fail_entry(Status::Coverage, rr, e, "the group cannot be read by position: it " + why);
  if (permute) fail_entry(Status::Coverage, rr, e, "D permutes the group's blocks on receive: its reads must be listed");
  if (x.count != q.ids || x.first_token != q.first_token || x.tokens != q.tokens || x.tokens_per_id != q.tokens_per_id) {
    fail_entry(Status::Coverage, rr, e,
               "reads " + s(x.count) + " ids per side from token " + s(x.first_token) + " of the first, " + s(x.tokens) +
                   " tokens of " + s(x.tokens_per_id) + " per id, but the group's needed tokens lie in " + s(q.ids) +
                   " ids from token " + s(q.first_token) + ", " + s(q.tokens) + " tokens of " + s(q.tokens_per_id) + " per id");
  }
  const uint64_t npairs = x.pairs_end - x.pairs_begin;  // check_repeats: pairs_begin < pairs_end <= size
  bool pairs_ok = npairs == rg.regions.size();
  for (uint64_t i = 0; i < npairs && pairs_ok; ++i) {
    const RegionPair rp = rr.region_pairs[x.pairs_begin + i];
    pairs_ok = rp.local_region == rg.regions[i] && rp.remote_region == rg.remote_regions[i];
  }
  if (!pairs_ok) {
    fail_entry(Status::Coverage, rr, e, "reads " + s(npairs) + " region pairs, not the group's " + s(rg.regions.size()) +
                                            " (D region, P region) pairs in the group's order");
  }
  // Its ids are the request's at the derived positions (check_repeats bounded them in rr.ids).
  const uint64_t* dids = rr.ids.data() + x.ids_begin;
  const uint64_t* pids = dids + x.count;
  const uint64_t* dreq = rg.g.local_blocks.data() + q.d_first;
  const uint64_t* preq = rg.g.remote_blocks.data() + q.p_first;
  const size_t c = static_cast<size_t>(x.count);
  if (std::memcmp(dids, dreq, c * sizeof(uint64_t)) != 0 || std::memcmp(pids, preq, c * sizeof(uint64_t)) != 0) {
    for (size_t i = 0; i < c; ++i) {
      if (dids[i] != dreq[i]) {
        fail_entry(Status::Coverage, rr, e, "D id " + s(i) + " is " + s(dids[i]) + " but the request lists " + s(dreq[i]) +
                                                " at position " + s(q.d_first + i));
      }
      if (pids[i] != preq[i]) {
        fail_entry(Status::Coverage, rr, e, "P id " + s(i) + " is " + s(pids[i]) + " but the request lists " + s(preq[i]) +
                                                " at position " + s(q.p_first + i));
      }
    }
  }
  uint64_t dmin = dids[0], dmax = dids[0], pmax = pids[0], pmin = pids[0];
  for (size_t i = 1; i < c; ++i) {
    dmin = std::min(dmin, dids[i]);
    dmax = std::max(dmax, dids[i]);
    pmin = std::min(pmin, pids[i]);
    pmax = std::max(pmax, pids[i]);
  }
  if (dmin == kNullBlock || pmin == kNullBlock) {
    fail_entry(Status::Coverage, rr, e, "reads the null block 0 (a needed token has no storage)");
  }
  const EngineMetadata& d = ctx.local;
  const uint64_t k = rg.g.local_kernel_blocks_per_id;
  for (uint64_t i = 0; i < npairs; ++i) {
    const uint32_t region = rg.regions[i], rregion = rg.remote_regions[i];
    if (region >= d.regions.size()) fail_entry(Status::OutOfBounds, rr, e, "D region " + s(region) + " does not exist");
    const uint64_t L = d.regions[region].region.block_len;
    const uint64_t heads = d.region_is_mla(region) ? 1 : ctx.mapping.local_physical_heads;
    const uint64_t token = region_bytes_per_token(d, region, "D");
    uint64_t idb = 0;
    if (__builtin_mul_overflow(k, L, &idb) || x.local_id_bytes != idb || x.token_bytes != token ||
        !(t.staging == KvLayout::NHD || heads == 1)) {
      fail_entry(Status::Coverage, rr, e,
                 "reads D region " + s(region) + " as ids of " + s(x.local_id_bytes) + " bytes, tokens of " +
                     s(x.token_bytes) + ", but D lays it out " +
                     (t.staging == KvLayout::NHD || heads == 1 ? "linearly" : "by head (HND, " + s(heads) + " heads)") +
                     " in " + s(k) + " x " + s(L) + "-byte blocks of " + s(token) + " bytes per token");
    }
    uint64_t dend = 0;
    if (__builtin_mul_overflow(dmax + 1, idb, &dend) || dend > d_size[region]) {
      fail_entry(Status::OutOfBounds, rr, e, "D id " + s(dmax) + " of " + s(idb) + " bytes leaves D region " + s(region) +
                                                 " of " + s(d_size[region]) + " bytes");
    }
    uint64_t pbase = 0, pend = 0, last = 0;
    if (rregion >= p_size.size() || __builtin_mul_overflow(pmax, x.remote_id_bytes, &pbase) ||
        __builtin_mul_overflow(x.tokens_per_id, x.token_bytes, &last) || __builtin_add_overflow(pbase, last, &pend) ||
        pend > p_size[rregion]) {
      fail_entry(Status::OutOfBounds, rr, e,
                 "P id " + s(pmax) + " of " + s(x.remote_id_bytes) + " bytes leaves P region " + s(rregion) +
                     (rregion < p_size.size() ? " of " + s(p_size[rregion]) + " bytes" : " (no such region)"));
    }
  }
  t.proofs[x.group] = {true, ri, e};
}

// Whether guard gd meets a byte proven group g writes in a region of `id_bytes`-long ids and
// `token`-byte tokens (marks hold g's listed ids, distinct): each listed id the guard reaches is
// found in g's list, and it meets a write only at a position the entry reads. A guard over
// consecutive blocks (a zeroed tail of several kernel blocks, a held prefix) finds them at
// consecutive positions: the next id is looked for after the last one found first, then at the
// first and last positions read, then in the whole list. `budget` counts the ids looked at; when
// it runs out, `over` is set (the caller then compares lists instead).
bool guard_meets_entry(const Trimmed::Guard& gd, const PlanGroupView& v, const Positions& q, uint64_t id_bytes,
                       uint64_t token, const IdMarks& marks, uint64_t& budget, bool& over) {
  const uint64_t* list = v.local_blocks.data();
  const size_t n = v.local_blocks.size();
  const size_t first = static_cast<size_t>(q.d_first), last = static_cast<size_t>(q.d_first + q.ids - 1);
  const uint64_t end = q.first_token + q.tokens;
  size_t hint = SIZE_MAX;
  for (uint64_t x = gd.begin / id_bytes; x <= (gd.end - 1) / id_bytes; ++x) {
    if (budget == 0) {
      over = true;
      return false;
    }
    --budget;
    if (!marks.marked(x)) {
      hint = SIZE_MAX;
      continue;
    }
    size_t j = SIZE_MAX;
    if (hint < n && list[hint] == x) {
      j = hint;
    } else if (list[last] == x) {
      j = last;
    } else if (list[first] == x) {
      j = first;
    } else {
      if (budget < n) {
        over = true;
        return false;
      }
      budget -= n;
      for (size_t i = 0; i < n && j == SIZE_MAX; ++i)
        if (list[i] == x) j = i;
    }
    if (j == SIZE_MAX) continue;  // not listed after all (marks hold listed ids only)
    hint = j + 1;
    if (j < first || j > last) continue;  // listed, not read: the ids are distinct
    const uint64_t i = j - first;
    const uint64_t sp = i == 0 ? q.first_token : 0;
    const uint64_t ep = std::min(q.tokens_per_id, end - i * q.tokens_per_id);
    const uint64_t b = x * id_bytes + sp * token, e = x * id_bytes + ep * token;  // bounded: match_entry
    if (b < gd.end && gd.begin < e) return true;
  }
  return false;
}

}  // namespace

void check_coverage(const TransferPlan& plan, const PlanContext& ctx, Trimmed& t, const Prepared* pre) {
  const EngineMetadata& d = ctx.local;
  // The receive-side permutation: the one D's layouts need, on exactly the blocks that receive
  // bytes, in every head-split region of each attention group (a block left out would keep P's
  // layout; one too many would scramble D's own bytes).
  const BlockPermute want_permute = block_permute(ctx, {t.staging, t.permute});
  if (!(plan.permute == want_permute)) {
    fail(Status::Coverage, std::string("plan permutes received blocks from ") + kv_layout_name(plan.permute.from) + " to " +
                               kv_layout_name(plan.permute.to) + " but D needs " + kv_layout_name(want_permute.from) +
                               " to " + kv_layout_name(want_permute.to) + " (" + s(want_permute.heads) + " heads x " +
                               s(want_permute.tokens) + " tokens x " + s(want_permute.head_bytes) + " bytes)");
  }
  if (plan.zero.size() != t.groups.size()) {
    fail(Status::Coverage, "plan has " + s(plan.zero.size()) + " groups of receive-side work for " + s(t.groups.size()) +
                               " groups");
  }
  auto& blocks = t.blocks;
  auto& regions = t.regions;
  for (size_t g = 0; g < t.groups.size(); ++g) {
    const ResolvedGroup& rg = t.groups[g];
    blocks.clear();
    regions.clear();
    if (want_permute.active() && is_attention_kind(rg.g.kind)) {
      for (uint32_t region : rg.regions)
        if (!d.region_is_mla(region)) regions.push_back(region);
      if (!regions.empty()) {
        const std::span<const SpanRun> spans(t.spans.data() + t.span_begin[g], t.span_begin[g + 1] - t.span_begin[g]);
        received_blocks(spans, rg.g.local_tokens_per_block, rg.g.local_hit_tokens, want_permute, blocks);
      }
    }
    if (plan.zero[g].permute_blocks != blocks || plan.zero[g].permute_regions != regions) {
      fail(Status::Coverage, "group " + s(g) + ": plan permutes " + s(plan.zero[g].permute_blocks.size()) +
                                 " D blocks in " + s(plan.zero[g].permute_regions.size()) + " regions but D needs " +
                                 s(blocks.size()) + " blocks in " + s(regions.size()) +
                                 " regions permuted after receipt");
    }
  }
  // Scratch buffers: the check allocates nothing once they have grown to a request's size.
  auto& got = t.got;
  auto& want = t.want;
  got.resize(d.regions.size());
  want.resize(d.regions.size());
  for (auto& v : got) v.clear();
  for (auto& v : want) v.clear();
  auto& alias = t.alias;
  alias.assign(d.regions.size(), Trimmed::Alias{});
  for (const RankReads& rr : plan.ranks) check_repeats(rr);
  t.proofs.assign(t.groups.size(), Trimmed::IndexedProof{});
  t.consumed.resize(plan.ranks.size());
  for (auto& c : t.consumed) c.clear();
  if (pre != nullptr && pre->mamba.valid && !t.hints.empty()) accept_hints(plan, *pre, t);
  // Region sizes of D and of the P rank at hand, computed once per side (region_size checks the
  // product) or taken from the context's precomputation; an index past the end is reported by
  // check_bounds before any size is used.
  auto& d_size = t.d_size;
  auto& p_size = t.p_size;
  auto sizes = [](const EngineMetadata& m, std::vector<uint64_t>& out) {
    out.resize(m.regions.size());
    for (uint32_t i = 0; i < out.size(); ++i) out[i] = region_size(m, i);
  };
  if (pre != nullptr) {
    d_size = pre->d_size;
  } else {
    sizes(d, d_size);
  }
  for (size_t ri = 0; ri < plan.ranks.size(); ++ri) {
    const RankReads& rr = plan.ranks[ri];
    const EngineMetadata& p = remote_rank(ctx, rr.p_rank);
    if (pre != nullptr) {
      p_size = pre->p_size[static_cast<size_t>(&p - ctx.remote.data())];
    } else {
      sizes(p, p_size);
    }
    check_rank_reads(rr, t.consumed[ri], d, p, d_size, p_size, got, alias);
    for (size_t e = 0; e < rr.indexed.size(); ++e) match_entry(plan, ctx, t, ri, e, d_size, p_size, want_permute.active());
  }
  // D's expected bytes in a region depend only on which groups use it and on its block_len
  // (bytes per token and the Mamba page stride follow from it): regions alike in both (under
  // vLLM's HMA, usually all of them) share one derivation (same_as). The attention part depends
  // only on the attention groups using the region and its block_len and kind: regions alike in
  // those share one attention derivation and one sort (att_as), even when their Mamba groups
  // differ (Nemotron's 5-layer Mamba group leaves one region out).
  using RC = Trimmed::RegionClass;
  const size_t nreg = d.regions.size();
  auto& rc = t.region_class;
  rc.assign(nreg, RC{});
  const bool comparable = t.groups.size() <= 64;
  for (size_t g = 0; g < t.groups.size() && comparable; ++g) {
    const uint64_t bit = uint64_t{1} << g;
    const uint64_t att_bit = is_attention_kind(t.groups[g].g.kind) ? bit : 0;
    for (uint32_t region : t.groups[g].regions) {
      rc[region].groups |= bit;
      rc[region].att_groups |= att_bit;
    }
  }
  for (uint32_t r = 0; r < nreg && comparable; ++r) {
    const uint64_t len = d.regions[r].region.block_len;
    const bool mla = d.region_is_mla(r);
    for (uint32_t q = 0; q < r && (rc[r].same_as < 0 || rc[r].att_as < 0); ++q) {
      if (d.regions[q].region.block_len != len || d.region_is_mla(q) != mla) continue;
      if (rc[r].same_as < 0 && rc[q].same_as < 0 && rc[q].groups == rc[r].groups) rc[r].same_as = static_cast<int>(q);
      if (rc[r].att_as < 0 && rc[q].att_as < 0 && rc[q].att_groups == rc[r].att_groups) rc[r].att_as = static_cast<int>(q);
    }
  }
  auto& att = t.want;  // attention ranges per attention class
  auto& mam = t.mam;   // Mamba pages per region class
  mam.resize(nreg);
  for (auto& v : mam) v.clear();
  expected_ranges(ctx, t, att, mam);
  const auto att_rep = [&](uint32_t r) { return rc[r].att_as < 0 ? r : static_cast<uint32_t>(rc[r].att_as); };
  const auto mam_rep = [&](uint32_t r) { return rc[r].same_as < 0 ? r : static_cast<uint32_t>(rc[r].same_as); };
  // Groups proven by an IndexedReads entry: their writes are left out of both lists when they are
  // shown to meet nothing else (see match_entry), else added to both (materialised).
  IdMarks marks(t.id_bits);
  for (size_t g = 0; g < t.groups.size(); ++g) {
    Trimmed::IndexedProof& pf = t.proofs[g];
    if (!pf.on) continue;
    const ResolvedGroup& rg = t.groups[g];
    Positions q;
    std::string why;
    bool ok = comparable && group_positions(rg.g, q, why);  // true: match_entry derived the same
    for (uint32_t region : rg.regions) ok = ok && rc[region].att_groups == (uint64_t{1} << g);  // no other attention group
    const bool guarded = guards_any(plan, t, g);
    uint64_t budget = 4 * rg.g.local_blocks.size() + 4096;  // ids looked at for the guards, at most
    int guards_of = -1;                  // the attention class whose guards were looked up
    for (size_t i = 0; i < rg.regions.size() && ok; ++i) {
      const uint32_t region = rg.regions[i];
      const uint64_t L = d.regions[region].region.block_len;
      if (!marks.disjoint(rg.g, L, d_size[region], mam[mam_rep(region)])) {
        ok = false;
        break;
      }
      if (!guarded || guards_of == static_cast<int>(att_rep(region))) continue;  // a class shares its guards
      guards_of = static_cast<int>(att_rep(region));
      collect_guards(plan, ctx, t, region, t.guards);
      const uint64_t idb = rg.g.local_kernel_blocks_per_id * L;  // match_entry checked the product
      const uint64_t token = d.region_bytes_per_token(region);
      bool over = false;
      for (const Trimmed::Guard& gd : t.guards) {
        if (guard_meets_entry(gd, rg.g, q, idb, token, marks, budget, over)) fail_shared(ctx, t, region, gd);
        if (over) break;
      }
      ok = !over;
    }
    if (ok) continue;
    for (uint32_t region : rg.regions) {
      materialise(got, alias, region);
      group_ranges(ctx, t, g, region, got[region]);
      if (rc[region].att_as < 0) group_ranges(ctx, t, g, region, att[region]);
    }
  }
  // A region alike an earlier one whose plan ranges, as the reads list them, are exactly that
  // region's needs no sort of its own: the same list normalises to the same ranges, and those
  // were compared with the same expected bytes (its reads were bounds-checked one by one above).
  // A region whose plan ranges are listed exactly as its expected ones (its Mamba pages, then its
  // attention ranges: the emitter walks the pages and the spans in the order they are derived)
  // needs only its expected ranges sorted (which finds overlaps among them): both lists
  // normalise alike. Both are decided on the lists as derived and as read, before any sort.
  // A region whose list ends with an alias (a factored plan's region repeat) is decided on the
  // list it aliases when that one settles the question: the same list as its same_as region's
  // (its own ranges equal that region's up to the aliased part, which is the rest of it), or its
  // Mamba pages followed by the aliased ranges where those were the attention ranges of an alike
  // region of the same attention class. Otherwise the alias is copied in and compared as listed.
  for (uint32_t region = 0; region < nreg; ++region) {
    RC& c = rc[region];
    const Trimmed::Alias& al = alias[region];
    if (al.set) {
      const auto& g = got[region];
      const auto& src = got[al.src];
      const bool whole_tail = !alias[al.src].set && al.end == src.size() && src[al.end - 1] == al.tail;
      if (whole_tail && c.same_as == static_cast<int>(al.src) && g.size() == al.begin && prefix_is(src, 0, g)) {
        c.verified = true;
        continue;
      }
      const auto& m = mam[mam_rep(region)];
      const RC& sc = rc[al.src];
      if (whole_tail && al.src < region && !sc.verified && sc.alike && att_rep(al.src) == att_rep(region) &&
          mam[mam_rep(al.src)].size() == al.begin && g.size() == m.size() && prefix_is(g, 0, m)) {
        c.alike = true;
        continue;
      }
      materialise(got, alias, region);
    }
    if (c.same_as >= 0) materialise(got, alias, static_cast<uint32_t>(c.same_as));  // compared whole
    c.verified = c.same_as >= 0 && same_ranges(got[region], got[static_cast<size_t>(c.same_as)]);
    if (c.verified) continue;
    const auto& m = mam[mam_rep(region)];
    const auto& a = att[att_rep(region)];
    const auto& g = got[region];
    c.alike = g.size() == m.size() + a.size() && prefix_is(g, 0, m) && prefix_is(g, m.size(), a);
  }
  // Each shared list is sorted once, when a region first needs it (0: as derived, 1: sorted and
  // merged, 2: it overlaps itself).
  const auto sorted = [](RangeList& v, uint8_t& state) {
    if (state == 0) state = normalise_ok(v) ? 1 : 2;
    return state == 1;
  };
  auto& merged = t.merged;
  for (uint32_t region = 0; region < nreg; ++region) {
    if (rc[region].verified) continue;
    const uint32_t qa = att_rep(region), qm = mam_rep(region);
    // A region whose reads list exactly its expected ranges, of one attention group (and Mamba
    // pages), out of order (fragmented ids; in order, sorting costs one look): disjointness from
    // the group's ids, without sorting (IdMarks).
    if (rc[region].alike && (rc[qa].att_state == 3 || (rc[qa].att_state == 0 && !in_order(att[qa]))) &&
        rc[qa].att_groups != 0 && (rc[qa].att_groups & (rc[qa].att_groups - 1)) == 0 &&
        sorted(mam[qm], rc[qm].mam_state)) {
      const ResolvedGroup& ag = t.groups[static_cast<size_t>(__builtin_ctzll(rc[qa].att_groups))];
      if (marks.disjoint(ag.g, d.regions[region].region.block_len, d_size[region], mam[qm])) {
        if (rc[qa].att_state == 0) rc[qa].att_state = 3;
        continue;
      }
    }
    if (rc[qa].att_state == 3) rc[qa].att_state = 0;  // sorted below after all
    if (sorted(att[qa], rc[qa].att_state) && sorted(mam[qm], rc[qm].mam_state)) {
      const auto& a = att[qa];
      const auto& m = mam[qm];
      if (rc[region].alike) {
        if (disjoint(m, a)) continue;
      } else if (merge_into(m, a, merged)) {
        materialise(got, alias, region);
        release_aliases_of(got, alias, region);
        normalise(got[region], region, "plan reads");
        compare(merged, got[region], region);
        continue;
      }
    }
    // Some expected ranges overlap: derived again for this region alone, as one list in group
    // order, and normalised, which reports the overlap.
    merged.clear();
    for (size_t g = 0; g < t.groups.size(); ++g) {
      const auto& regs = t.groups[g].regions;
      if (std::find(regs.begin(), regs.end(), region) != regs.end()) group_ranges(ctx, t, g, region, merged);
    }
    normalise(merged, region, "groups' blocks");
    materialise(got, alias, region);
    release_aliases_of(got, alias, region);
    normalise(got[region], region, "plan reads");
    compare(merged, got[region], region);
  }
  // No group's zero ranges or prefix-hit tokens may meet a write (see check_guards).
  for (size_t g = 0; g < t.groups.size(); ++g) {
    if (guards_any(plan, t, g)) {
      check_guards(plan, ctx, t);
      break;
    }
  }
}

}  // namespace pdkv::core::plan_detail
