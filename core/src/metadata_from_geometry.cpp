#include "pdkv/core/metadata_from_geometry.hpp"

#include <string>
#include <vector>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/fingerprint.hpp"

namespace pdkv::core {

EngineMetadata metadata_from_geometry(const ModelDesc& m, const EngineConfig& e,
                                      const EngineGeometry& g, const EngineLayout& layout) {
  EngineMetadata md;
  md.engine_id = layout.engine_id;
  md.tp_size = e.tp_size;
  md.tp_rank = layout.tp_rank;
  md.kv_layout = KvLayout::HND;
  md.conv_layout = e.conv_layout;
  md.logical_block_size = static_cast<uint32_t>(g.block_size);
  md.kernel_block_size = static_cast<uint32_t>(g.kernel_block_size);
  md.physical_blocks_per_logical = static_cast<uint32_t>(g.physical_per_logical);
  md.num_kernel_blocks = mul_checked(layout.num_logical_blocks, g.physical_per_logical, "kernel blocks");
  md.pp_size = layout.pp_size;
  md.pp_rank = layout.pp_rank;
  md.layer_begin = layout.layer_begin;
  md.layer_end = layout.layer_end;
  const uint64_t window_end = md.layer_end_bound();
  // Default kinds: one per region; a model with MLA-typed layers cycles through its attention
  // layers in pattern order so that both kinds are registered, as vLLM registers one region per
  // layer.
  std::vector<RegionKind> kinds = layout.region_kinds;
  std::vector<uint32_t> layers;
  if (kinds.empty()) {
    std::vector<uint32_t> attention_layers;
    if (m.mixes_mla()) {
      // The attention layers this stage holds (every one for a single stage).
      for (uint32_t l = md.layer_begin; l < m.layer_pattern.size() && l < window_end; ++l) {
        const char c = m.layer_pattern[l];
        if (c == kLayerAttention || c == kLayerParallel || c == kLayerMla) attention_layers.push_back(l);
      }
      if (attention_layers.empty()) {
        fail(Status::InvalidArgument, "the stage's layer window [" + std::to_string(md.layer_begin) + ", " +
                                          std::to_string(window_end) + ") holds no attention layer of layer pattern '" +
                                          m.layer_pattern + "'; give the regions' kinds explicitly");
      }
    }
    for (uint32_t i = 0; i < layout.num_regions; ++i) {
      if (!attention_layers.empty()) {
        const uint32_t l = attention_layers[i % attention_layers.size()];
        kinds.push_back(m.layer_pattern[l] == kLayerMla ? RegionKind::Mla : RegionKind::Attention);
        layers.push_back(l);
      } else {
        kinds.push_back(g.hybrid ? RegionKind::Mamba : RegionKind::Attention);
        layers.push_back(md.layer_begin + i);
      }
    }
  } else {
    if (kinds.size() != layout.num_regions) {
      fail(Status::InvalidArgument, "layout region_kinds has " + std::to_string(kinds.size()) +
                                        " entries for num_regions " + std::to_string(layout.num_regions) +
                                        "; give one kind per region (or none)");
    }
    for (uint32_t i = 0; i < layout.num_regions; ++i) {
      const char* why = nullptr;
      if (kinds[i] == RegionKind::Mla && !m.mixes_mla()) {
        why = "is mla but the model has no MLA-typed layers (mla_head_size 0)";
      } else if (kinds[i] == RegionKind::Mamba && !g.hybrid) {
        why = "is mamba but the model has no Mamba layers";
      } else if (static_cast<uint8_t>(kinds[i]) > static_cast<uint8_t>(RegionKind::Mla)) {
        why = "is not a region kind";
      }
      if (why != nullptr) {
        fail(Status::InvalidArgument, "layout region_kinds[" + std::to_string(i) + "] " + why);
      }
      layers.push_back(md.layer_begin + i);
    }
  }
  if (md.layer_begin + uint64_t{layout.num_regions} > window_end && !m.mixes_mla()) {
    fail(Status::InvalidArgument, "layout num_regions " + std::to_string(layout.num_regions) +
                                      " exceeds the " + std::to_string(window_end - md.layer_begin) +
                                      " layers of the stage's window [" + std::to_string(md.layer_begin) + ", " +
                                      std::to_string(window_end) + "); a stage registers one region per layer "
                                      "position at most");
  }
  uint64_t base = layout.base;
  for (uint32_t i = 0; i < layout.num_regions; ++i) {
    const uint64_t block_len = kinds[i] == RegionKind::Mla ? g.mla_kernel_page_bytes : g.kernel_page_bytes;
    md.regions.push_back({{base, block_len, md.num_kernel_blocks}, kinds[i], layers[i]});
    base = add_checked(base, mul_checked(md.num_kernel_blocks, block_len, "region bytes"), "region base");
  }
  if (g.hybrid) {
    md.mamba_type = g.mamba.type;
    md.conv_bytes = g.mamba.conv_bytes;
    md.ssm_bytes = g.mamba.ssm_bytes;
    for (const auto& p : g.mamba.projections) md.conv_projection_bytes.push_back(p.bytes);
  }
  md.attention_bytes_per_token = g.attn_bytes_per_token;
  md.use_mla = m.attention.use_mla;
  md.total_kv_heads = m.attention.use_mla ? 1 : m.attention.num_kv_heads;
  md.cache_mode = e.cache_mode;
  md.prefix_caching = e.cache_mode != MambaCacheMode::None;
  md.model_fingerprint = model_fingerprint(m);
  const ResolvedFormats f = resolved_formats(m, e);
  md.model_format = f.model_format;
  md.kv_cache_format = f.kv_cache_format;
  md.conv_state_format = f.conv_state_format;
  md.ssm_state_format = f.ssm_state_format;
  check_metadata(md, Status::InvalidArgument);
  return md;
}

}  // namespace pdkv::core
