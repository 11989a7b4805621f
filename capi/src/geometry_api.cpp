// Geometry handles: per-engine page and block sizes (core/geometry.hpp).
#include "boundary.hpp"
#include "engine_config.hpp"
#include "model_geometry_handles.hpp"
#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/geometry.hpp"
#include "struct_sizes.hpp"
#include "structs.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_index;
using pdkv::capi::require_non_null;
using pdkv::capi::write_struct_prefix;
namespace core = pdkv::core;

namespace {

using pdkv::capi::kConvProjectionMinSize;
using pdkv::capi::kGeometryInfoMinSize;

// Integer padding in parts per million, so C callers can compare exactly without floats.
uint64_t padding_ppm(const core::EngineGeometry& g) {
  if (g.mamba_page_bytes == 0 || g.mamba_page_padded_bytes <= g.mamba_page_bytes) return 0;
  return core::mul_checked(g.mamba_page_padded_bytes - g.mamba_page_bytes, 1000000, "padding ppm") /
         g.mamba_page_bytes;
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_geometry_new(const pdkv_model_t* model, const pdkv_engine_config_t* config,
                                         pdkv_geometry_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(model, "model");
    require_non_null(config, "config");
    require_non_null(out, "out");
    *out = nullptr;
    const auto settings = pdkv::capi::engine_from_c(*config, model->desc);
    *out = new pdkv_geometry{core::derive_geometry(model->desc, settings.engine, settings.options)};
  });
}

PDKV_API pdkv_status_t pdkv_geometry_get_info(const pdkv_geometry_t* geometry, pdkv_geometry_info_t* out,
                                              pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(geometry, "geometry");
    require_non_null(out, "out");
    const core::EngineGeometry& g = geometry->geometry;
    pdkv_geometry_info_t i{};
    i.tp_size = g.tp_size;
    i.kv_heads_per_rank = g.kv_heads_per_rank;
    i.attn_bytes_per_token = g.attn_bytes_per_token;
    i.hybrid = g.hybrid ? 1 : 0;
    i.mamba_type = static_cast<int32_t>(g.mamba.type);
    i.conv_rows = g.mamba.conv_rows;
    i.conv_dim_local = g.mamba.conv_dim_local;
    i.conv_dtype_bytes = g.mamba.conv_dtype_bytes;
    i.ssm_dtype_bytes = g.mamba.ssm_dtype_bytes;
    i.conv_bytes = g.mamba.conv_bytes;
    i.ssm_bytes = g.mamba.ssm_bytes;
    i.mamba_page_bytes = g.mamba_page_bytes;
    i.align = g.align;
    i.min_block_size = g.min_block_size;
    i.block_size = g.block_size;
    i.block_size_raised = g.block_size_raised ? 1 : 0;
    i.mamba_block_size = g.mamba_block_size;
    i.attn_page_bytes = g.attn_page_bytes;
    i.mamba_page_padded_bytes = g.mamba_page_padded_bytes;
    i.padding_ppm = padding_ppm(g);
    i.padding_percent = g.padding_percent;
    i.kernel_block_size = g.kernel_block_size;
    i.physical_per_logical = g.physical_per_logical;
    i.kernel_page_bytes = g.kernel_page_bytes;
    i.mla_bytes_per_token = g.mla_bytes_per_token;
    i.mla_kernel_page_bytes = g.mla_kernel_page_bytes;
    i.kv_head_bytes_per_token = g.kv_head_bytes_per_token;
    i.num_projections = g.mamba.projections.size();
    i.num_temporal_dims = g.mamba.temporal_shape.size();
    i.num_log_lines = g.log_lines.size();
    write_struct_prefix(out, i, kGeometryInfoMinSize, "pdkv_geometry_info_t");
  });
}

PDKV_API pdkv_status_t pdkv_geometry_projection(const pdkv_geometry_t* geometry, size_t index,
                                                pdkv_conv_projection_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(geometry, "geometry");
    require_non_null(out, "out");
    const auto& projections = geometry->geometry.mamba.projections;
    require_index(index, projections.size(), "conv projection");
    const core::ConvProjection& p = projections[index];
    pdkv_conv_projection_t c{};
    c.name = p.name.c_str();
    c.dim_local = p.dim_local;
    c.dim_total = p.dim_total;
    c.replicated = p.replicated ? 1 : 0;
    c.bytes = p.bytes;
    c.offset = p.offset;
    write_struct_prefix(out, c, kConvProjectionMinSize, "pdkv_conv_projection_t");
  });
}

PDKV_API pdkv_status_t pdkv_geometry_temporal_shape(const pdkv_geometry_t* geometry, const uint64_t** dims,
                                                    size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(geometry, "geometry");
    require_non_null(dims, "dims");
    require_non_null(count, "count");
    const auto& shape = geometry->geometry.mamba.temporal_shape;
    *dims = shape.data();
    *count = shape.size();
  });
}

PDKV_API pdkv_status_t pdkv_geometry_log_line(const pdkv_geometry_t* geometry, size_t index, const char** line,
                                              pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(geometry, "geometry");
    require_non_null(line, "line");
    const auto& lines = geometry->geometry.log_lines;
    require_index(index, lines.size(), "log line");
    *line = lines[index].c_str();
  });
}

PDKV_API void pdkv_geometry_free(pdkv_geometry_t* geometry) { delete geometry; }

PDKV_API pdkv_status_t pdkv_block_size_ratio(uint64_t local_kernel_block_size, uint64_t remote_kernel_block_size,
                                             uint64_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = core::block_size_ratio(local_kernel_block_size, remote_kernel_block_size);
  });
}

}  // extern "C"
