// Fuzzes transfer-plan compilation. The bytes pick a tiny model (GQA/MLA attention, optionally
// Mamba1 / Mamba2 with possibly replicated groups / GDN), P and D TP sizes, block sizes, kernel
// backends, each side's KV layout (HND / NHD), a cache mode and one request (hit, computed tokens, block ids: random, possibly
// null, repeated or out of range), and sometimes a pair of pipeline stages (random layer windows,
// possibly disjoint) whose groups name random model layers. Oracles: compile either succeeds or throws pdkv::core::Error
// (anything else is a bug); on success the plan is re-checked here without pdkv's own validator:
// every read lies inside its regions on both sides, no two reads write the same D byte, and the
// bytes moved equal what the trim result says D needs (tokens x heads x head bytes per region,
// whole Mamba states per region); and the factored forms of the request (region repeats,
// block-indexed reads) are accepted by the check and expand to the same plan. ASan/UBSan catch
// the rest.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "fuzz_bytes.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv::core;
using pdkv::fuzzing::Bytes;

namespace {

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "plan_fuzz: %s\n", what);
  std::abort();
}

ModelDesc model(Bytes& b) {
  ModelDesc m;
  m.name = "fuzz";
  m.dtype_bytes = static_cast<uint32_t>(1 + b.next(2));
  m.attention.use_mla = b.next(4) == 0;
  m.attention.num_kv_heads = m.attention.use_mla ? 1 : static_cast<uint32_t>(1u << b.next(4));
  m.attention.head_size = static_cast<uint32_t>(1 + b.next(8));
  m.attention.head_size_v = m.attention.use_mla ? 0 : m.attention.head_size;
  const uint64_t kind = b.next(4);
  if (kind == 0) {
    // A GQA model may add MLA-typed layers: one replicated latent read whole from one P rank.
    if (!m.attention.use_mla && b.next(2) == 1) {
      m.mla_head_size = static_cast<uint32_t>(1 + b.next(8));
      m.layer_pattern = "*L";
    }
    return m;
  }
  m.mamba.type = kind == 1 ? MambaType::Mamba1 : kind == 2 ? MambaType::Mamba2 : MambaType::Gdn;
  m.mamba.num_heads = static_cast<uint32_t>(1u << b.next(4));
  m.mamba.head_dim = static_cast<uint32_t>(1 + b.next(3));
  m.mamba.d_state = static_cast<uint32_t>(1 + b.next(3));
  m.mamba.n_groups = static_cast<uint32_t>(1u << b.next(4));
  m.mamba.d_inner = 8 * (1 + b.next(2));
  m.mamba.conv_kernel = static_cast<uint32_t>(2 + b.next(3));
  m.mamba.chunk_size = 16;
  m.layer_pattern = "M*";
  return m;
}

EngineConfig config(Bytes& b, MambaCacheMode mode) {
  EngineConfig e;
  e.tp_size = static_cast<uint32_t>(1u << b.next(4));
  e.user_block_size = static_cast<uint32_t>(16 * b.next(7));
  if (b.next(2)) e.kernel_block_sizes = {16, 32, 64};
  e.cache_mode = mode;
  return e;
}

std::vector<uint64_t> ids(Bytes& b, uint64_t pool) {
  std::vector<uint64_t> v(b.next(6));
  for (auto& x : v) x = b.next(pool + 2);  // 0 is the null block; pool+1 is out of range
  return v;
}

// Bytes D needs per region according to the trim result, computed from D's own geometry.
uint64_t needed_bytes(const PlanContext& ctx, const std::vector<PlanGroup>& groups) {
  std::vector<GroupTrimInput> in;
  for (const auto& g : groups) {
    GroupTrimInput t = g.trim;
    if (is_attention_kind(t.kind)) {
      t.local_tokens_per_block = ctx.local.kernel_block_size;
      t.remote_tokens_per_block = ctx.remote.front().kernel_block_size;
    } else if (t.cache_mode == MambaCacheMode::All) {
      t.local_tokens_per_block = ctx.local.logical_block_size;
      t.remote_tokens_per_block = ctx.remote.front().logical_block_size;
    }
    in.push_back(t);
  }
  const auto trims = trim_prefix(in);
  uint64_t total = 0;
  const EngineMetadata& d = ctx.local;
  const EngineMetadata& p = ctx.remote.front();
  for (size_t g = 0; g < trims.size(); ++g) {
    std::vector<uint32_t> regions = groups[g].regions;
    if (!groups[g].layers.empty()) {
      // Pipeline stages: D's region of every layer both stages hold (its position among the
      // group's layers in D's window).
      uint32_t pos = 0;
      for (uint32_t l : groups[g].layers) {
        if (!d.holds_layer(l)) continue;
        if (p.holds_layer(l)) regions.push_back(pos);
        ++pos;
      }
    } else if (regions.empty()) {
      for (uint32_t r = 0; r < ctx.local.regions.size(); ++r) regions.push_back(r);
    }
    for (uint32_t r : regions) {
      // Per region: an MLA-typed region holds its latent's bytes per token.
      total += is_attention_kind(trims[g].kind)
                   ? trims[g].transferred_tokens() * ctx.local.region_bytes_per_token(r)
                   : trims[g].states.size() * ctx.local_mamba->page_bytes();
    }
  }
  return total;
}

void check(const TransferPlan& plan, const PlanContext& ctx, const std::vector<PlanGroup>& groups) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> local(ctx.local.regions.size());
  uint64_t moved = 0;
  for (const RankReads& rr : plan.ranks) {
    const EngineMetadata* p = nullptr;
    for (const auto& m : ctx.remote)
      if (m.tp_rank == rr.p_rank) p = &m;
    if (!p) bug("read from a P rank without metadata");
    for (const PlanRead& r : rr.reads) {
      if (r.length == 0) bug("empty read");
      if (r.local_region >= ctx.local.regions.size() || r.remote_region >= p->regions.size())
        bug("region index out of range");
      const Region& lr = ctx.local.regions[r.local_region].region;
      const Region& pr = p->regions[r.remote_region].region;
      if (r.local_offset > lr.block_len * lr.num_blocks - r.length) bug("local read out of bounds");
      if (r.remote_offset > pr.block_len * pr.num_blocks - r.length) bug("remote read out of bounds");
      local[r.local_region].push_back({r.local_offset, r.local_offset + r.length});
      moved += r.length;
    }
  }
  for (auto& v : local) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i].first < v[i - 1].second) bug("two reads write the same D byte");
  }
  if (moved != plan.stats.bytes) bug("stats.bytes differs from the reads");
  if (moved != needed_bytes(ctx, groups)) bug("bytes moved differ from the bytes D needs");
}

// The factored forms of the same request (region repeats, the C API's form with block-indexed
// reads, and block-indexed reads alone with every group that can be read by position read so),
// compiled with the context's verdict, must be planned too, accepted by the standalone check, and
// expand to the same plan read for read.
void same_when_factored(const TransferPlan& plan, const PlanContext& ctx, const std::vector<PlanGroup>& groups) {
  std::vector<PlanGroupView> views;
  for (const PlanGroup& g : groups) views.push_back(view_of(g));
  const PlanContextVerdict verdict = judge_plan_context(ctx);
  const CompileOptions forms[] = {{.region_repeats = true},
                                  {.region_repeats = true, .indexed_reads = true},
                                  {.region_repeats = false, .indexed_reads = true, .indexed_min_runs = 1}};
  for (const CompileOptions& form : forms) {
    TransferPlan factored;
    try {
      compile_transfer_plan_into(ctx, views, factored, verdict, form);
    } catch (const Error&) {
      bug("the factored compile refused a request the listed compile planned");
    }
    try {
      validate_transfer_plan_views(factored, ctx, views);
    } catch (const Error&) {
      bug("the check refused a factored plan it accepted when it was compiled");
    }
    expand_plan(factored);
    if (factored.ranks.size() != plan.ranks.size()) bug("the factored plan reads from other P ranks");
    for (size_t i = 0; i < plan.ranks.size(); ++i) {
      if (factored.ranks[i].p_rank != plan.ranks[i].p_rank || factored.ranks[i].bytes != plan.ranks[i].bytes ||
          !(factored.ranks[i].reads == plan.ranks[i].reads)) {
        bug("the factored plan expands to other reads than the listed plan's");
      }
    }
    if (factored.stats.pieces_after_coalescing != plan.stats.pieces_after_coalescing ||
        factored.stats.pieces_before_coalescing != plan.stats.pieces_before_coalescing ||
        factored.stats.bytes != plan.stats.bytes) {
      bug("the factored plan's stats differ from the listed plan's");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes b{data, size};
  try {
    const ModelDesc m = model(b);
    const MambaCacheMode mode = m.is_hybrid() ? static_cast<MambaCacheMode>(b.next(3)) : MambaCacheMode::None;
    EngineConfig dc = config(b, mode), pc = config(b, mode);
    // The KV element format, the same on both sides: the model dtype, or 8- / 4-bit elements
    // with bytes packed per token per head (per-token-head scales; refused for MLA latents).
    const uint64_t format = b.next(3);
    for (EngineConfig* c : {&dc, &pc}) {
      c->kv_cache_element_bits = format == 0 ? 0 : format == 1 ? 8 : 4;
      c->kv_cache_head_extra_bytes = format == 0 ? 0 : static_cast<uint32_t>(b.next(9));
    }
    const EngineGeometry dg = derive_geometry(m, dc), pg = derive_geometry(m, pc);
    const uint64_t pool = 8;
    uint32_t regions = static_cast<uint32_t>(1 + b.next(2));
    const uint32_t d_rank = static_cast<uint32_t>(b.next(dc.tp_size));
    // Pipeline stages (sometimes): each side one stage of two over `layers` model layers, windows
    // drawn independently (they may not overlap: the handshake must then refuse the pair).
    const uint32_t layers = b.next(3) == 0 ? static_cast<uint32_t>(2 + b.next(5)) : 0;
    EngineLayout dl{"d", d_rank, pool, regions, 1ull << 40}, pl{"p", 0, pool, regions, 2ull << 40};
    if (layers != 0) {
      for (EngineLayout* l : {&dl, &pl}) {
        l->pp_size = 2;
        l->layer_begin = static_cast<uint32_t>(b.next(layers));
        l->pp_rank = l->layer_begin == 0 ? 0 : 1;
        const uint32_t end = l->layer_begin + 1 + static_cast<uint32_t>(b.next(layers - l->layer_begin));
        l->layer_end = l->pp_rank == 1 && b.next(2) ? kLayerEndOpen : end;
        l->num_regions = std::min(end - l->layer_begin, 1 + static_cast<uint32_t>(b.next(3)));
      }
      regions = dl.num_regions;
    }
    PlanContext ctx;
    ctx.local = metadata_from_geometry(m, dc, dg, dl);
    for (uint32_t r = 0; r < pc.tp_size; ++r) {
      pl.tp_rank = r;
      pl.base = (2ull + r) << 40;
      ctx.remote.push_back(metadata_from_geometry(m, pc, pg, pl));
    }

    // Either layout on either side: NHD head subsets must be refused with an Error, NHD with
    // equal heads per rank planned (and pass the same oracle).
    const uint64_t layouts = b.next(4);
    if (layouts & 1) ctx.local.kv_layout = KvLayout::NHD;
    if (layouts & 2)
      for (auto& p : ctx.remote) p.kv_layout = KvLayout::NHD;
    // Different layouts are planned in P's layout with D permuting on receive (same oracle: the
    // bytes land once, in bounds), or refused without the flag.
    ctx.permute_on_receive = b.next(2) == 1;
    ctx.mapping = compute_tp_mapping({dc.tp_size, d_rank, pc.tp_size,
                                      m.attention.use_mla ? 1u : m.attention.num_kv_heads,
                                      m.attention.use_mla, m.is_hybrid()});
    if (m.is_hybrid()) {
      ctx.local_mamba = dg.mamba;
      ctx.remote_mamba = pg.mamba;
    }
    std::vector<PlanGroup> groups(1 + b.next(3));
    for (PlanGroup& g : groups) {
      g.trim.kind = static_cast<GroupKind>(b.next(m.is_hybrid() ? 3 : 2));
      g.trim.cache_mode = mode;
      g.trim.remote_computed_tokens = b.next(256) * (1 + b.next(16));
      g.trim.local_hit_tokens = b.next(2) ? 0 : b.next(256) * (1 + b.next(16));
      g.trim.sliding_window = b.next(300);
      const bool attention = is_attention_kind(g.trim.kind);
      g.trim.local_blocks = ids(b, attention ? pool * dg.physical_per_logical : pool);
      g.trim.remote_blocks = ids(b, attention ? pool * pg.physical_per_logical : pool);
      if (layers != 0) {
        for (uint32_t l = 0; l < layers; ++l)
          if (b.next(2)) g.layers.push_back(l);
      } else if (b.next(4) == 0) {
        g.regions = {static_cast<uint32_t>(b.next(regions + 1))};
      }
    }
    const TransferPlan plan = compile_transfer_plan(ctx, groups);
    check(plan, ctx, groups);
    (void)plan_to_json(plan);
    same_when_factored(plan, ctx, groups);
  } catch (const Error&) {
    // A refused configuration or request: fine, as long as it is a pdkv Error.
  }
  return 0;
}
