// The transfer plan's coverage and bounds check. The bytes D must receive are recomputed from the
// trim result and D's own layout (its heads inside a kernel block, its Mamba page), without
// looking at the reads, then compared with the union of the plan's local ranges.
#include <algorithm>
#include <string>
#include <vector>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "plan_internal.hpp"

namespace pdkv::core::plan_detail {

namespace {

struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::string where(uint32_t region, uint64_t begin, uint64_t end) {
  return "D region " + s(region) + " offset " + s(begin) + " length " + s(end - begin);
}

// Appends [b, e) to v, extending the last range when it ends where this one begins (touching
// ranges merge in normalise anyway; merging early keeps the lists short). Overlaps are kept apart
// so that normalise reports them.
void push(std::vector<Range>& v, uint64_t b, uint64_t e) {
  if (!v.empty() && v.back().end == b) {
    v.back().end = e;
    return;
  }
  v.push_back({b, e});
}

// Expected D byte ranges per region, from D's own layout and nothing the emitter computed: for
// every span of tokens (ids consecutive on D over the span), the bytes those tokens occupy in D's
// blocks. Tokens of one kernel block lie back to back when D's tokens are whole (NHD: token t of
// block b at b*L + t*heads*head_bytes) or D holds one head (HND with one head, MLA); then the
// span is one range, since consecutive ids place block b+1 right after block b. Otherwise (HND,
// several heads: head h of block b at b*L + h*tokens*head_bytes) a kernel block the span covers
// whole is the whole block [b*L, (b+1)*L), and a partly covered one is one range per head.
// Mamba: the whole unpadded state of every paired local page.
// Regions whose `same_as` entry is set are skipped (their ranges are those of that region).
void expected_ranges(const PlanContext& ctx, const Trimmed& t, const std::vector<int>& same_as,
                     std::vector<std::vector<Range>>& out) {
  const EngineMetadata& d = ctx.local;
  // The layout D's blocks are written in: D's own, or P's when D permutes on receive (the
  // permutation then brings them into D's); with one head (MLA, or a single KV head per rank)
  // both layouts place the same bytes. Heads per region: an MLA region (pure MLA model, or an
  // MLA-typed region of a GQA model) holds one latent head.
  const bool nhd = t.staging == KvLayout::NHD;
  for (size_t g = 0; g < t.groups.size(); ++g) {
    const ResolvedGroup& rg = t.groups[g];
    for (uint32_t region : rg.regions) {
      if (same_as[region] >= 0) continue;
      auto& v = out[region];
      if (is_attention_kind(rg.g.kind)) {
        const uint64_t heads = d.region_is_mla(region) ? 1 : ctx.mapping.local_physical_heads;
        const uint64_t L = d.regions[region].region.block_len;
        const uint64_t lbs = rg.g.local_tokens_per_block;
        const uint64_t hb = region_bytes_per_token(d, region, "D") / heads;
        const uint64_t token = heads * hb;  // all of D's heads of one token
        for (size_t k = t.span_begin[g]; k < t.span_begin[g + 1]; ++k) {
          const SpanRun& r = t.spans[k];
          if (nhd || heads == 1) {
            const uint64_t base = mul_checked(r.local_block, L, "local block offset");
            const uint64_t b = add_checked(base, mul_checked(r.local_token_begin, token, "offset"), "offset");
            push(v, b, add_checked(b, mul_checked(r.num_tokens, token, "offset"), "offset"));
            continue;
          }
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
  }
}

// Sorts and merges touching ranges in place; overlapping ranges are an error (`what` says
// whose).
void normalise(std::vector<Range>& v, uint32_t region, const char* what) {
  std::sort(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  size_t out = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const Range r = v[i];
    if (r.begin == r.end) continue;
    if (out > 0 && r.begin < v[out - 1].end) {
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
}

// First byte range where the two merged lists differ, reported as missing or unexpected.
void compare(const std::vector<Range>& want, const std::vector<Range>& got, uint32_t region) {
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

// `size` is region_size(m, region) when the region exists (the caller's cache), else unused.
void check_bounds(const EngineMetadata& m, const char* side, uint32_t region, uint64_t offset,
                  uint64_t length, uint64_t size) {
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

}  // namespace

void check_coverage(const TransferPlan& plan, const PlanContext& ctx, const Trimmed& t) {
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
  thread_local std::vector<uint64_t> blocks;
  thread_local std::vector<uint32_t> regions;
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
  // Per-thread buffers: the check allocates nothing once they have grown to a request's size.
  thread_local std::vector<std::vector<Range>> got, want;
  got.resize(d.regions.size());
  want.resize(d.regions.size());
  for (auto& v : got) v.clear();
  for (auto& v : want) v.clear();
  // Region sizes of D and of the P rank at hand, computed once per side (region_size checks the
  // product); an index past the end is reported by check_bounds before any size is used.
  thread_local std::vector<uint64_t> d_size, p_size;
  auto sizes = [](const EngineMetadata& m, std::vector<uint64_t>& out) {
    out.resize(m.regions.size());
    for (uint32_t i = 0; i < out.size(); ++i) out[i] = region_size(m, i);
  };
  sizes(d, d_size);
  for (const RankReads& rr : plan.ranks) {
    const EngineMetadata& p = remote_rank(ctx, rr.p_rank);
    sizes(p, p_size);
    for (const PlanRead& r : rr.reads) {
      const bool dl = r.local_region < d_size.size(), pl = r.remote_region < p_size.size();
      check_bounds(d, "D", r.local_region, r.local_offset, r.length, dl ? d_size[r.local_region] : 0);
      check_bounds(p, "P", r.remote_region, r.remote_offset, r.length, pl ? p_size[r.remote_region] : 0);
      push(got[r.local_region], r.local_offset, r.local_offset + r.length);
    }
  }
  // D's expected bytes in a region depend only on which groups use it and on its block_len
  // (bytes per token and the Mamba page stride follow from it): regions alike in both (under
  // vLLM's HMA, usually all of them) share one derivation and one sort.
  thread_local std::vector<int> same_as;
  thread_local std::vector<uint64_t> groups_of;
  same_as.assign(d.regions.size(), -1);
  groups_of.assign(d.regions.size(), 0);
  const bool comparable = t.groups.size() <= 64;
  for (size_t g = 0; g < t.groups.size() && comparable; ++g) {
    for (uint32_t region : t.groups[g].regions) groups_of[region] |= uint64_t{1} << g;
  }
  for (uint32_t r = 0; r < d.regions.size() && comparable; ++r) {
    for (uint32_t q = 0; q < r; ++q) {
      if (same_as[q] < 0 && groups_of[q] == groups_of[r] &&
          d.regions[q].region.block_len == d.regions[r].region.block_len &&
          d.region_is_mla(q) == d.region_is_mla(r)) {
        same_as[r] = static_cast<int>(q);
        break;
      }
    }
  }
  expected_ranges(ctx, t, same_as, want);
  for (uint32_t region = 0; region < d.regions.size(); ++region) {
    if (same_as[region] >= 0) {
      want[region] = want[static_cast<size_t>(same_as[region])];  // normalised already
    } else {
      normalise(want[region], region, "groups' blocks");
    }
    normalise(got[region], region, "plan reads");
    compare(want[region], got[region], region);
  }
}

}  // namespace pdkv::core::plan_detail
