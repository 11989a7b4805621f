// Engine metadata handles (core/engine_metadata.hpp, metadata_from_geometry.hpp): build from a
// model + engine config + layout, encode (caller buffer or owned bytes), decode untrusted bytes,
// field accessors; the CRC-32C of the wire header and the model fingerprint (fingerprint.hpp).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "boundary.hpp"
#include "engine_config.hpp"
#include "model_geometry_handles.hpp"
#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/fingerprint.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "plan_handles.hpp"
#include "struct_sizes.hpp"
#include "structs.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
using pdkv::capi::write_struct_prefix;
namespace core = pdkv::core;

using pdkv::capi::kEngineLayoutMinSize;
using pdkv::capi::kMetadataInfoMinSize;

static_assert(static_cast<int>(core::RegionKind::Mla) == PDKV_REGION_MLA, "region kind enums drifted");
static_assert(static_cast<int>(core::RegionKind::Mamba) == PDKV_REGION_MAMBA, "region kind enums drifted");

namespace pdkv::capi {

pdkv_engine_metadata_t* make_metadata(core::EngineMetadata md) {
  auto h = std::make_unique<pdkv_engine_metadata>();
  h->md = std::move(md);
  h->regions.reserve(h->md.regions.size());
  for (const auto& r : h->md.regions) {
    h->regions.push_back(pdkv_metadata_region_t{r.region.base, r.region.block_len, r.region.num_blocks,
                                                static_cast<int32_t>(r.kind), r.layer});
  }
  return h.release();
}

}  // namespace pdkv::capi

extern "C" {

PDKV_API pdkv_status_t pdkv_engine_layout_init(pdkv_engine_layout_t* layout, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(layout, "layout");
    const core::EngineLayout d;
    pdkv_engine_layout_t c{};
    c.struct_size = sizeof(pdkv_engine_layout_t);
    c.engine_id = "engine";
    c.tp_rank = d.tp_rank;
    c.num_logical_blocks = d.num_logical_blocks;
    c.num_regions = d.num_regions;
    c.base = d.base;
    c.region_bases = nullptr;
    c.kv_layout = PDKV_KV_LAYOUT_HND;
    c.field_mask = 0;      // prefix caching derived, one stage holding every layer
    c.prefix_caching = 0;  // read only with PDKV_LAYOUT_FIELD_PREFIX_CACHING
    c.region_kinds = nullptr;
    c.pp_size = d.pp_size;
    c.pp_rank = d.pp_rank;
    c.layer_begin = d.layer_begin;
    c.layer_end = d.layer_end;
    *layout = c;
  });
}

PDKV_API pdkv_status_t pdkv_engine_metadata_from_model(const pdkv_model_t* model, const pdkv_engine_config_t* config,
                                                       const pdkv_engine_layout_t* layout,
                                                       pdkv_engine_metadata_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(model, "model");
    require_non_null(config, "config");
    require_non_null(layout, "layout");
    require_non_null(out, "out");
    *out = nullptr;
    const pdkv_engine_layout_t copy = pdkv::capi::read_options(
        *layout, kEngineLayoutMinSize, "pdkv_engine_layout_t",
        PDKV_LAYOUT_FIELD_PREFIX_CACHING | PDKV_LAYOUT_FIELD_PIPELINE | PDKV_LAYOUT_FIELD_LAYER_END);
    layout = &copy;
    require_non_null(layout->engine_id, "pdkv_engine_layout_t.engine_id");
    if (layout->kv_layout != PDKV_KV_LAYOUT_HND && layout->kv_layout != PDKV_KV_LAYOUT_NHD) {
      core::fail(core::Status::InvalidArgument, "pdkv_engine_layout_t.kv_layout = " +
                                                    std::to_string(layout->kv_layout) +
                                                    " is not a pdkv_kv_layout_t (0 HND, 1 NHD)");
    }
    const bool set_prefix_caching = (layout->field_mask & PDKV_LAYOUT_FIELD_PREFIX_CACHING) != 0;
    const bool prefix_caching =
        set_prefix_caching && pdkv::capi::flag_from_c(layout->prefix_caching, "pdkv_engine_layout_t.prefix_caching");
    const bool set_pipeline = (layout->field_mask & PDKV_LAYOUT_FIELD_PIPELINE) != 0;
    const bool set_layer_end = (layout->field_mask & PDKV_LAYOUT_FIELD_LAYER_END) != 0;
    if (set_pipeline && layout->pp_size == 0) {
      core::fail(core::Status::InvalidArgument,
                 "pdkv_engine_layout_t.pp_size = 0 with PDKV_LAYOUT_FIELD_PIPELINE set: a pipeline has at least one "
                 "stage (leave the bit unset for one stage holding every layer)");
    }
    if (set_layer_end && layout->layer_end <= (set_pipeline ? layout->layer_begin : 0)) {
      core::fail(core::Status::InvalidArgument,
                 "pdkv_engine_layout_t.layer_end = " + std::to_string(layout->layer_end) +
                     " with PDKV_LAYOUT_FIELD_LAYER_END set must be above layer_begin " +
                     std::to_string(set_pipeline ? layout->layer_begin : 0) +
                     " (leave the bit unset for a stage through the model's last layer)");
    }
    const auto settings = pdkv::capi::engine_from_c(*config, model->desc);
    const core::EngineGeometry g = core::derive_geometry(model->desc, settings.engine, settings.options);
    core::EngineLayout l;
    l.engine_id = layout->engine_id;
    l.tp_rank = layout->tp_rank;
    l.num_logical_blocks = layout->num_logical_blocks;
    l.num_regions = layout->num_regions;
    l.base = layout->base;
    // Unset: one stage holding every layer; the window open at its end.
    l.pp_size = set_pipeline ? layout->pp_size : 1;
    l.pp_rank = set_pipeline ? layout->pp_rank : 0;
    l.layer_begin = set_pipeline ? layout->layer_begin : 0;
    l.layer_end = set_layer_end ? layout->layer_end : core::kLayerEndOpen;
    if (layout->region_kinds != nullptr) {
      for (uint32_t i = 0; i < layout->num_regions; ++i) {
        const int32_t k = layout->region_kinds[i];
        if (k < PDKV_REGION_ATTENTION || k > PDKV_REGION_MLA) {
          core::fail(core::Status::InvalidArgument,
                     "pdkv_engine_layout_t.region_kinds[" + std::to_string(i) + "] = " + std::to_string(k) +
                         " is not a pdkv_region_kind_t (0 attention, 1 mamba, 2 mla)");
        }
        l.region_kinds.push_back(static_cast<core::RegionKind>(k));
      }
    }
    core::EngineMetadata md = core::metadata_from_geometry(model->desc, settings.engine, g, l);
    bool changed = false;
    if (layout->region_bases != nullptr) {
      for (size_t i = 0; i < md.regions.size(); ++i) md.regions[i].region.base = layout->region_bases[i];
      changed = true;
    }
    if (layout->kv_layout != PDKV_KV_LAYOUT_HND) {
      md.kv_layout = static_cast<core::KvLayout>(layout->kv_layout);
      changed = true;
    }
    if (set_prefix_caching) {
      md.prefix_caching = prefix_caching;
      changed = true;
    }
    if (changed) core::check_metadata(md, core::Status::InvalidArgument);
    *out = pdkv::capi::make_metadata(std::move(md));
  });
}

PDKV_API pdkv_status_t pdkv_engine_metadata_get_info(const pdkv_engine_metadata_t* metadata,
                                                     pdkv_engine_metadata_info_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(metadata, "metadata");
    require_non_null(out, "out");
    const core::EngineMetadata& m = metadata->md;
    pdkv_engine_metadata_info_t i{};
    i.engine_id = m.engine_id.c_str();
    i.tp_size = m.tp_size;
    i.tp_rank = m.tp_rank;
    i.kv_layout = static_cast<int32_t>(m.kv_layout);
    i.conv_layout = static_cast<int32_t>(m.conv_layout);
    i.logical_block_size = m.logical_block_size;
    i.kernel_block_size = m.kernel_block_size;
    i.physical_blocks_per_logical = m.physical_blocks_per_logical;
    i.num_kernel_blocks = m.num_kernel_blocks;
    i.num_regions = m.regions.size();
    i.mamba_type = static_cast<int32_t>(m.mamba_type);
    i.conv_bytes = m.conv_bytes;
    i.ssm_bytes = m.ssm_bytes;
    i.num_conv_projections = m.conv_projection_bytes.size();
    i.attention_bytes_per_token = m.attention_bytes_per_token;
    i.use_mla = m.use_mla ? 1 : 0;
    i.total_kv_heads = m.total_kv_heads;
    i.prefix_caching = m.prefix_caching ? 1 : 0;
    i.cache_mode = static_cast<int32_t>(m.cache_mode);
    i.model_fingerprint = m.model_fingerprint;
    i.pp_size = m.pp_size;
    i.pp_rank = m.pp_rank;
    i.layer_begin = m.layer_begin;
    i.layer_end = m.layer_end;
    i.model_format = static_cast<int32_t>(m.model_format);
    i.kv_cache_format = static_cast<int32_t>(m.kv_cache_format);
    i.conv_state_format = static_cast<int32_t>(m.conv_state_format);
    i.ssm_state_format = static_cast<int32_t>(m.ssm_state_format);
    write_struct_prefix(out, i, kMetadataInfoMinSize, "pdkv_engine_metadata_info_t");
  });
}

PDKV_API pdkv_status_t pdkv_engine_metadata_regions(const pdkv_engine_metadata_t* metadata,
                                                    const pdkv_metadata_region_t** regions, size_t* count,
                                                    pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(metadata, "metadata");
    require_non_null(regions, "regions");
    require_non_null(count, "count");
    *regions = metadata->regions.empty() ? nullptr : metadata->regions.data();
    *count = metadata->regions.size();
  });
}

PDKV_API pdkv_status_t pdkv_engine_metadata_conv_projection_bytes(const pdkv_engine_metadata_t* metadata,
                                                                  const uint64_t** bytes, size_t* count,
                                                                  pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(metadata, "metadata");
    require_non_null(bytes, "bytes");
    require_non_null(count, "count");
    const auto& p = metadata->md.conv_projection_bytes;
    *bytes = p.empty() ? nullptr : p.data();
    *count = p.size();
  });
}

PDKV_API pdkv_status_t pdkv_engine_metadata_encode(const pdkv_engine_metadata_t* metadata, uint8_t* buf,
                                                   size_t capacity, size_t* out_len, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(metadata, "metadata");
    require_non_null(out_len, "out_len");
    const std::vector<uint8_t> bytes = core::encode(metadata->md);
    *out_len = bytes.size();
    if (bytes.size() > capacity) {
      core::fail(core::Status::BufferTooSmall, "the encoded metadata needs " + std::to_string(bytes.size()) +
                                                   " bytes but the buffer holds " + std::to_string(capacity) +
                                                   ": pass a capacity of at least " + std::to_string(bytes.size()));
    }
    require_non_null(buf, "buf");
    std::copy(bytes.begin(), bytes.end(), buf);
  });
}

PDKV_API pdkv_status_t pdkv_engine_metadata_encode_bytes(const pdkv_engine_metadata_t* metadata, pdkv_bytes_t** out,
                                                         pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(metadata, "metadata");
    require_non_null(out, "out");
    *out = nullptr;
    auto b = std::make_unique<pdkv_bytes>();
    b->data = core::encode(metadata->md);
    *out = b.release();
  });
}

PDKV_API pdkv_status_t pdkv_engine_metadata_decode(const uint8_t* bytes, size_t len, pdkv_engine_metadata_t** out,
                                                   pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    if (len > 0) require_non_null(bytes, "bytes");
    const std::span<const uint8_t> s = len == 0 ? std::span<const uint8_t>() : std::span<const uint8_t>(bytes, len);
    *out = pdkv::capi::make_metadata(core::decode(s));
  });
}

PDKV_API pdkv_status_t pdkv_engine_metadata_equal(const pdkv_engine_metadata_t* a, const pdkv_engine_metadata_t* b,
                                                  uint8_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(a, "a");
    require_non_null(b, "b");
    require_non_null(out, "out");
    *out = a->md == b->md ? 1 : 0;
  });
}

PDKV_API void pdkv_engine_metadata_free(pdkv_engine_metadata_t* metadata) { delete metadata; }

PDKV_API void pdkv_metadata_wire_version(uint16_t* major, uint16_t* minor) {
  if (major != nullptr) *major = core::kMetadataMajorVersion;
  if (minor != nullptr) *minor = core::kMetadataMinorVersion;
}

PDKV_API pdkv_status_t pdkv_crc32c(const uint8_t* bytes, size_t len, uint32_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    if (len > 0) require_non_null(bytes, "bytes");
    *out = len == 0 ? core::crc32c(std::span<const uint8_t>()) : core::crc32c(std::span<const uint8_t>(bytes, len));
  });
}

PDKV_API pdkv_status_t pdkv_model_fingerprint(const pdkv_model_t* model, uint64_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(model, "model");
    require_non_null(out, "out");
    *out = core::model_fingerprint(model->desc);
  });
}

}  // extern "C"
