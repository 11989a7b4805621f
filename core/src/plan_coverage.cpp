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

// Expected D byte ranges per region. Attention, from D's own layout: for every token run, each
// local head's slice of the run under HND (head h of block b starts at b*L + h*tokens*head_bytes),
// or the run's tokens over all heads under NHD (token t of block b starts at
// b*L + t*heads*head_bytes). Mamba: the whole unpadded state of every paired local page.
std::vector<std::vector<Range>> expected_ranges(const PlanContext& ctx,
                                                const std::vector<ResolvedGroup>& groups,
                                                const std::vector<GroupTrim>& trims) {
  const EngineMetadata& d = ctx.local;
  std::vector<std::vector<Range>> out(d.regions.size());
  const uint64_t heads = ctx.mapping.input.use_mla ? 1 : ctx.mapping.local_physical_heads;
  // D's layout as D advertises it; with one head (MLA, or a single KV head per rank) both
  // layouts place the same bytes.
  const bool nhd = d.kv_layout == KvLayout::NHD;
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupTrim& t = trims[g];
    for (uint32_t region : groups[g].regions) {
      auto& v = out[region];
      if (is_attention_kind(t.kind)) {
        const uint64_t L = d.regions[region].region.block_len;
        const uint64_t lbs = groups[g].trim.local_tokens_per_block;
        const uint64_t hb = region_bytes_per_token(d, region, "D") / heads;
        for (const TokenRun& r : t.runs) {
          const uint64_t base = mul_checked(r.local_block, L, "local block offset");
          if (nhd) {
            const uint64_t token = heads * hb;  // all of D's heads of one token
            const uint64_t b = add_checked(base, r.local_token_begin * token, "offset");
            v.push_back({b, add_checked(b, r.num_tokens * token, "offset")});
            continue;
          }
          for (uint64_t h = 0; h < heads; ++h) {
            const uint64_t b = add_checked(base, (h * lbs + r.local_token_begin) * hb, "offset");
            v.push_back({b, add_checked(b, r.num_tokens * hb, "offset")});
          }
        }
      } else if (!t.states.empty()) {
        const uint64_t page = ctx.local_mamba->page_bytes();
        const uint64_t stride = mamba_page_stride(d, region, page, "D");
        for (const StatePair& sp : t.states) {
          const uint64_t b = mul_checked(sp.local_block, stride, "local page");
          v.push_back({b, add_checked(b, page, "local page end")});
        }
      }
    }
  }
  return out;
}

// Sorts and merges touching ranges; overlapping ranges are an error (`what` says whose).
std::vector<Range> normalise(std::vector<Range> v, uint32_t region, const char* what) {
  std::sort(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> out;
  for (const Range& r : v) {
    if (r.begin == r.end) continue;
    if (!out.empty() && r.begin < out.back().end) {
      const uint64_t e = std::min(r.end, out.back().end);
      fail(Status::Coverage, std::string(what) + " overlap: " + where(region, r.begin, e) +
                                 " would be written twice");
    }
    if (!out.empty() && r.begin == out.back().end) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  return out;
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

void check_bounds(const EngineMetadata& m, const char* side, uint32_t region, uint64_t offset,
                  uint64_t length) {
  if (region >= m.regions.size()) {
    fail(Status::OutOfBounds, std::string(side) + " region " + s(region) + " does not exist (" +
                                  s(m.regions.size()) + " regions registered)");
  }
  const uint64_t size = region_size(m, region);
  uint64_t end = 0;
  if (length == 0 || __builtin_add_overflow(offset, length, &end) || end > size) {
    fail(Status::OutOfBounds, std::string(side) + (side[0] == 'P' ? " rank " + s(m.tp_rank) : "") +
                                  " region " + s(region) + ": read at offset " + s(offset) +
                                  " length " + s(length) + " leaves the registered region of " +
                                  s(size) + " bytes");
  }
}

}  // namespace

void check_coverage(const TransferPlan& plan, const PlanContext& ctx,
                    const std::vector<ResolvedGroup>& groups, const std::vector<GroupTrim>& trims) {
  const EngineMetadata& d = ctx.local;
  std::vector<std::vector<Range>> got(d.regions.size());
  for (const RankReads& rr : plan.ranks) {
    const EngineMetadata& p = remote_rank(ctx, rr.p_rank);
    for (const PlanRead& r : rr.reads) {
      check_bounds(d, "D", r.local_region, r.local_offset, r.length);
      check_bounds(p, "P", r.remote_region, r.remote_offset, r.length);
      got[r.local_region].push_back({r.local_offset, r.local_offset + r.length});
    }
  }
  const auto want = expected_ranges(ctx, groups, trims);
  for (uint32_t region = 0; region < d.regions.size(); ++region) {
    compare(normalise(want[region], region, "groups' blocks"),
            normalise(got[region], region, "plan reads"), region);
  }
}

}  // namespace pdkv::core::plan_detail
