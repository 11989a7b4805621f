#include "demo_layout.hpp"

#include <algorithm>

#include "pdkv/core/backends.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"

namespace pdkv::cli::demo {

using core::GroupKind;
using core::Status;

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// `tokens_held`: the most prompt tokens one request keeps in this side's blocks.
Side make_side(const core::ModelDesc& m, uint32_t tp, core::MambaCacheMode mode, size_t mamba_groups,
               uint64_t tokens_held, uint32_t concurrency, uint32_t num_regions) {
  Side s;
  s.tp = tp;
  s.config.tp_size = tp;
  s.config.cache_mode = m.is_hybrid() ? mode : core::MambaCacheMode::None;
  // The attention backend vLLM would pick by default for the model's attention kind.
  core::apply_backend(s.config, m.attention.use_mla ? core::Backend::FlashMLA : core::Backend::FlashAttention);
  s.geo = core::derive_geometry(m, s.config);
  s.kernel_page_bytes = s.geo.kernel_page_bytes;
  s.logical_page_bytes = s.geo.kernel_page_bytes * s.geo.physical_per_logical;
  s.max_blocks_per_request = ceil_div(tokens_held, s.geo.block_size) + mamba_groups;
  s.logical_blocks = s.max_blocks_per_request * concurrency + 1;
  s.bytes_per_rank = s.logical_page_bytes * s.logical_blocks * num_regions;
  return s;
}

}  // namespace

Layout make_layout(const LayoutInputs& in) {
  Layout l;
  l.model = in.model;
  l.cache_mode = in.model.is_hybrid() ? in.cache_mode : core::MambaCacheMode::None;
  l.groups = core::kv_cache_groups(in.model);  // errors name the model and the unsupported part
  size_t mamba_groups = 0;
  for (const auto& g : l.groups) {
    l.num_regions = std::max<uint32_t>(l.num_regions, static_cast<uint32_t>(g.layers.size()));
    if (g.kind == GroupKind::Mamba) ++mamba_groups;
  }
  // P computes the prompt but its last token (the N-1 rule of hybrids), D holds every token.
  const uint64_t p_tokens = in.model.is_hybrid() ? in.max_tokens - 1 : in.max_tokens;
  l.prefill = make_side(in.model, in.prefill_tp, l.cache_mode, mamba_groups, p_tokens, in.concurrency,
                        l.num_regions);
  l.decode = make_side(in.model, in.decode_tp, l.cache_mode, mamba_groups, in.max_tokens, in.concurrency,
                       l.num_regions);
  return l;
}

core::EngineMetadata rank_metadata(const Layout& l, bool prefill, const std::string& engine_id, uint32_t rank,
                                   uint64_t base) {
  const Side& s = prefill ? l.prefill : l.decode;
  core::EngineLayout el;
  el.engine_id = engine_id;
  el.tp_rank = rank;
  el.num_logical_blocks = s.logical_blocks;
  el.num_regions = l.num_regions;
  el.base = base;
  return core::metadata_from_geometry(l.model, s.config, s.geo, el);
}

}  // namespace pdkv::cli::demo
