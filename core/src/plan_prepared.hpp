// What a plan context lets compilation work out once instead of per request (issue 10 item 2):
// region sizes of every rank (the bounds check), which P rank sits where in ctx.remote, and the
// Mamba read template: the reads of one state page, relative to the page bases on both sides,
// coalesced per P rank, with each region's page stride. A request then only multiplies block ids
// by strides and copies the template.
//
// The template is verified when it is built, independently of the emitter: its D ranges must
// tile the D page [0, page_bytes) exactly (no gap, no overlap) and its P ranges stay inside the
// P page. The coverage check leans on that verdict per request: a run of plan reads that equals
// the template at a page base (checked read by read) covers exactly that page, so it only has to
// check the page's bounds and merge one range per page (check_coverage, MambaHint). A template
// that fails verification is not used: compilation and the check take the per-read path, which
// reports whatever is wrong.
// Not installed; not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::core::plan_detail {

// One template read: D's [page base + local_offset, +length) receives P's [page base +
// remote_offset, +length).
struct TemplateRead {
  uint64_t local_offset = 0;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

struct MambaTemplate {
  // Set only by build_mamba_template once verify_mamba_template accepted it.
  bool valid = false;
  uint64_t local_page = 0;   // D's unpadded state bytes (what D needs per page)
  uint64_t remote_page = 0;  // P's unpadded state bytes
  uint64_t pieces = 0;       // reads per page before coalescing (mamba_reads().size())
  uint64_t bytes = 0;        // bytes per page (== local_page once verified)
  struct Rank {
    uint32_t p_rank = 0;
    uint32_t pos = 0;                 // index of the P rank's metadata in ctx.remote
    std::vector<TemplateRead> reads;  // in mamba_reads order, coalesced as PlanBuilder would
    uint64_t remote_extent = 0;       // max remote_offset + length
    uint64_t bytes = 0;               // sum of the reads' lengths
  };
  std::vector<Rank> ranks;  // in order of first appearance in mamba_reads
  // Page stride per D region (block_len * ppl), 0 where the page does not fit (the per-read path
  // reports it); per template rank and P region likewise. max_* bound every stride.
  std::vector<uint64_t> local_stride;
  std::vector<std::vector<uint64_t>> remote_stride;
  uint64_t max_local_stride = 0, max_remote_stride = 0, max_remote_extent = 0;
};

struct Prepared {
  std::vector<uint64_t> d_size;               // D region sizes (block_len * num_blocks)
  std::vector<std::vector<uint64_t>> p_size;  // per ctx.remote index, region sizes
  MambaTemplate mamba;
};

// The precomputation for a context that judge_plan_context accepted; nullptr when a region size
// overflows (compile then takes the per-read path, which reports it). Never throws for a bad
// context: whatever cannot be precomputed is left to the per-request path.
std::shared_ptr<const Prepared> prepare_context(const PlanContext& ctx);

// Builds the template from `reads` (mamba_reads of the context's states) into `out`; `out.valid`
// only when verify_mamba_template accepts it and every read's P rank has metadata.
void build_mamba_template(const PlanContext& ctx, const std::vector<MambaRead>& reads, MambaTemplate& out);

// Whether the template's D ranges tile [0, t.local_page) exactly and every P range lies inside
// [0, t.remote_page) with a non-zero length; `why` (may be null) says what is wrong.
bool verify_mamba_template(const MambaTemplate& t, std::string* why);

// One Mamba group the emitter wrote from the template: every page of group `group` (region by
// region in the group's resolved order, each region's states in order), template rank j's reads
// of them starting at index indices[at + j] of that P rank's read vector, n_j reads per page. A
// hint is only a place to look: check_coverage accepts it only if the reads there equal the
// template at the page bases it derives itself (state block ids x the context's strides).
struct MambaHint {
  uint32_t group = 0;
  size_t at = 0;
};

}  // namespace pdkv::core::plan_detail
