#include "pdkv/core/metadata_from_geometry.hpp"

#include "pdkv/core/checked_math.hpp"
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
  const uint64_t region_bytes = mul_checked(md.num_kernel_blocks, g.kernel_page_bytes, "region bytes");
  uint64_t base = layout.base;
  for (uint32_t i = 0; i < layout.num_regions; ++i) {
    md.regions.push_back({{base, g.kernel_page_bytes, md.num_kernel_blocks},
                          g.hybrid ? RegionKind::Mamba : RegionKind::Attention, i});
    base = add_checked(base, region_bytes, "region base");
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
  check_metadata(md, Status::InvalidArgument);
  return md;
}

}  // namespace pdkv::core
