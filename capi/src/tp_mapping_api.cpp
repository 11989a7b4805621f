// Head placement, the P-side notification rule and the TP mapping handle (core/head_ranges.hpp,
// core/tp_topology.hpp compute_tp_mapping).
#include "boundary.hpp"
#include "model_geometry_handles.hpp"
#include "plan_handles.hpp"
#include "pdkv/core/head_ranges.hpp"
#include "pdkv/core/tp_topology.hpp"
#include "struct_sizes.hpp"
#include "structs.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

using pdkv::capi::kTpMappingInfoMinSize;
using pdkv::capi::kTpMappingParamsMinSize;

extern "C" {

PDKV_API pdkv_status_t pdkv_physical_head_range(uint32_t tp_size, uint32_t tp_rank, uint32_t total_kv_heads,
                                                uint32_t* begin, uint32_t* end, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(begin, "begin");
    require_non_null(end, "end");
    const core::HeadRange r = core::physical_head_range(tp_size, total_kv_heads, tp_rank);
    *begin = r.begin;
    *end = r.end;
  });
}

PDKV_API pdkv_status_t pdkv_notifications_expected_per_request(uint32_t p_tp_size, uint32_t d_tp_size, uint32_t* out,
                                                              pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = core::notifications_expected_per_request(p_tp_size, d_tp_size);
  });
}

PDKV_API pdkv_status_t pdkv_tp_mapping_new(const pdkv_tp_mapping_params_t* params, pdkv_tp_mapping_t** out,
                                           pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(params, "params");
    require_non_null(out, "out");
    *out = nullptr;
    const pdkv_tp_mapping_params_t copy =
        pdkv::capi::read_options(*params, kTpMappingParamsMinSize, "pdkv_tp_mapping_params_t", 0);
    params = &copy;
    core::TpMappingInput in;
    in.local_tp = params->local_tp_size;
    in.local_rank = params->local_tp_rank;
    in.remote_tp = params->remote_tp_size;
    in.total_kv_heads = params->total_kv_heads;
    in.use_mla = pdkv::capi::flag_from_c(params->use_mla, "pdkv_tp_mapping_params_t.use_mla");
    in.has_mamba = pdkv::capi::flag_from_c(params->has_mamba, "pdkv_tp_mapping_params_t.has_mamba");
    core::TpMapping m = core::compute_tp_mapping(in);
    // The local engine is D when pulling: each remote P rank expects this many notifications.
    const uint32_t expected = core::notifications_expected_per_request(in.remote_tp, in.local_tp);
    *out = new pdkv_tp_mapping{std::move(m), expected};
  });
}

PDKV_API pdkv_status_t pdkv_tp_mapping_get_info(const pdkv_tp_mapping_t* mapping, pdkv_tp_mapping_info_t* out,
                                                pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(mapping, "mapping");
    require_non_null(out, "out");
    const core::TpMapping& m = mapping->mapping;
    pdkv_tp_mapping_info_t i{};
    i.tp_ratio = m.tp_ratio;
    i.rank_offset_factor = m.rank_offset_factor;
    i.local_replicated = m.local_replicated ? 1 : 0;
    i.remote_replicated = m.remote_replicated ? 1 : 0;
    i.local_physical_heads = m.local_physical_heads;
    i.remote_physical_heads = m.remote_physical_heads;
    i.num_attention_reads = m.num_attention_reads();
    i.notifications_expected = mapping->notifications_expected;
    pdkv::capi::write_struct_prefix(out, i, kTpMappingInfoMinSize, "pdkv_tp_mapping_info_t");
  });
}

PDKV_API pdkv_status_t pdkv_tp_mapping_ranks(const pdkv_tp_mapping_t* mapping, int32_t which, const uint32_t** ranks,
                                             size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(mapping, "mapping");
    require_non_null(ranks, "ranks");
    require_non_null(count, "count");
    const core::TpMapping& m = mapping->mapping;
    const std::vector<uint32_t>* list = nullptr;
    switch (which) {
      case PDKV_TP_LIST_HANDSHAKE_TARGETS: list = &m.handshake_targets; break;
      case PDKV_TP_LIST_ATTENTION_SOURCES: list = &m.attention_source_ranks; break;
      case PDKV_TP_LIST_MAMBA_SOURCES: list = &m.mamba_source_ranks; break;
      case PDKV_TP_LIST_ALL_SOURCES: list = &m.all_source_ranks; break;
      case PDKV_TP_LIST_ATTENTION_SLOTS: list = &m.attention_slots; break;
      case PDKV_TP_LIST_NOTIFY_TARGETS: list = &m.notify_ranks; break;
      default:
        core::fail(core::Status::InvalidArgument,
                   "which = " + std::to_string(which) + " is not a pdkv_tp_mapping_list_t value (expected 0..5)");
    }
    *ranks = list->empty() ? nullptr : list->data();
    *count = list->size();
  });
}

PDKV_API pdkv_status_t pdkv_tp_mapping_attention_slot(const pdkv_tp_mapping_t* mapping, uint32_t remote_tp_rank,
                                                      uint32_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(mapping, "mapping");
    require_non_null(out, "out");
    *out = mapping->mapping.attention_slot_of(remote_tp_rank);
  });
}

PDKV_API void pdkv_tp_mapping_free(pdkv_tp_mapping_t* mapping) { delete mapping; }

}  // extern "C"
