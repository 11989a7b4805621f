// Attention and Mamba transfer descriptors (core/attention_descriptors.hpp,
// core/mamba_descriptors.hpp) into descriptor list handles.
#include <memory>
#include <vector>

#include "boundary.hpp"
#include "model_geometry_handles.hpp"
#include "pdkv/core/attention_descriptors.hpp"
#include "pdkv/core/mamba_descriptors.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

static_assert(sizeof(pdkv_descriptor_t) == sizeof(core::Descriptor), "descriptor layouts drifted");

namespace {

std::vector<core::Region> regions_from_c(const pdkv_region_t* regions, size_t count, const char* arg) {
  if (count > 0) require_non_null(regions, arg);
  std::vector<core::Region> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) out.push_back(core::Region{regions[i].base, regions[i].block_len, regions[i].num_blocks});
  return out;
}

pdkv_descriptor_list_t* to_list(const std::vector<core::Descriptor>& descs) {
  auto list = std::make_unique<pdkv_descriptor_list>();
  list->items.reserve(descs.size());
  for (const auto& d : descs) list->items.push_back(pdkv_descriptor_t{d.addr, d.len});
  return list.release();
}

const core::MambaState& mamba_state_of(const pdkv_geometry_t* g) {
  const core::MambaState& s = g->geometry.mamba;
  if (s.type == core::MambaType::None) {
    core::fail(core::Status::UnsupportedMambaType,
               "the geometry has no Mamba state (pure attention model): there are no Mamba descriptors");
  }
  return s;
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_descriptor_list_items(const pdkv_descriptor_list_t* list, const pdkv_descriptor_t** items,
                                                  size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(items, "items");
    require_non_null(count, "count");
    *items = list->items.empty() ? nullptr : list->items.data();
    *count = list->items.size();
  });
}

PDKV_API void pdkv_descriptor_list_free(pdkv_descriptor_list_t* list) { delete list; }

PDKV_API pdkv_status_t pdkv_attention_local_descriptors(const pdkv_region_t* regions, size_t num_regions,
                                                        uint32_t block_size_ratio, pdkv_descriptor_list_t** out,
                                                        pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    const auto r = regions_from_c(regions, num_regions, "regions");
    *out = to_list(core::attention_local_descriptors(r, block_size_ratio));
  });
}

PDKV_API pdkv_status_t pdkv_attention_remote_descriptors(const pdkv_region_t* local_regions, size_t num_local_regions,
                                                         const pdkv_region_t* remote_regions,
                                                         size_t num_remote_regions, const pdkv_tp_mapping_t* mapping,
                                                         uint32_t block_size_ratio, pdkv_descriptor_list_t** out,
                                                         pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(mapping, "mapping");
    require_non_null(out, "out");
    *out = nullptr;
    const auto local = regions_from_c(local_regions, num_local_regions, "local_regions");
    const auto remote = regions_from_c(remote_regions, num_remote_regions, "remote_regions");
    *out = to_list(core::attention_remote_descriptors(local, remote, mapping->mapping, block_size_ratio));
  });
}

PDKV_API pdkv_status_t pdkv_attention_split_descriptors(const pdkv_descriptor_list_t* local_attention,
                                                        const pdkv_tp_mapping_t* mapping, uint32_t block_size_ratio,
                                                        uint32_t p_tp_rank, pdkv_descriptor_list_t** out,
                                                        pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(local_attention, "local_attention");
    require_non_null(mapping, "mapping");
    require_non_null(out, "out");
    *out = nullptr;
    std::vector<core::Descriptor> local;
    local.reserve(local_attention->items.size());
    for (const auto& d : local_attention->items) local.push_back(core::Descriptor{d.addr, d.len});
    const auto handles = core::attention_split_handles(local, mapping->mapping, block_size_ratio);
    for (const auto& h : handles) {
      if (h.p_rank == p_tp_rank) {
        *out = to_list(h.descriptors);
        return;
      }
    }
    core::fail(core::Status::InvalidArgument, "remote rank " + std::to_string(p_tp_rank) +
                                                  " is not a source rank of this mapping (see "
                                                  "PDKV_TP_LIST_ALL_SOURCES)");
  });
}

PDKV_API pdkv_status_t pdkv_mamba_local_descriptors(const pdkv_region_t* regions, size_t num_regions, uint64_t ppl,
                                                    const pdkv_geometry_t* geometry, pdkv_descriptor_list_t** out,
                                                    pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(geometry, "geometry");
    require_non_null(out, "out");
    *out = nullptr;
    const auto r = regions_from_c(regions, num_regions, "regions");
    *out = to_list(core::mamba_local_descriptors(r, ppl, mamba_state_of(geometry)));
  });
}

PDKV_API pdkv_status_t pdkv_mamba_remote_descriptors(const pdkv_region_t* p_regions, size_t num_p_regions,
                                                     uint64_t p_ppl, const pdkv_geometry_t* p_geometry,
                                                     const pdkv_mamba_read_list_t* reads, uint32_t p_tp_rank,
                                                     pdkv_descriptor_list_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(p_geometry, "p_geometry");
    require_non_null(reads, "reads");
    require_non_null(out, "out");
    *out = nullptr;
    const auto r = regions_from_c(p_regions, num_p_regions, "p_regions");
    *out = to_list(core::mamba_remote_descriptors(r, p_ppl, mamba_state_of(p_geometry), reads->reads, p_tp_rank));
  });
}

PDKV_API pdkv_status_t pdkv_mamba_local_split_descriptors(const pdkv_region_t* d_regions, size_t num_d_regions,
                                                          uint64_t d_ppl, const pdkv_geometry_t* d_geometry,
                                                          const pdkv_mamba_read_list_t* reads, uint32_t p_tp_rank,
                                                          pdkv_descriptor_list_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(d_geometry, "d_geometry");
    require_non_null(reads, "reads");
    require_non_null(out, "out");
    *out = nullptr;
    const auto r = regions_from_c(d_regions, num_d_regions, "d_regions");
    *out = to_list(core::mamba_local_split_descriptors(r, d_ppl, mamba_state_of(d_geometry), reads->reads, p_tp_rank));
  });
}

}  // extern "C"
