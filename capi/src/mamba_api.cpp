// Mamba state transfer: vLLM's conv split views and pdkv's byte-exact read lists
// (core/mamba_split.hpp), all derived from a geometry handle's per-rank MambaState.
#include <memory>

#include "boundary.hpp"
#include "plan_handles.hpp"
#include "structs.hpp"
#include "model_geometry_handles.hpp"
#include "pdkv/core/mamba_split.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

namespace {

// The split views only make sense for an engine that has a Mamba state.
const core::MambaState& hybrid_state(const pdkv_geometry_t* g) {
  const core::MambaState& s = g->geometry.mamba;
  if (s.type == core::MambaType::None) {
    core::fail(core::Status::UnsupportedMambaType,
               "the geometry has no Mamba state (pure attention model): there is no conv split to view");
  }
  return s;
}

std::vector<pdkv_byte_range_t> to_c(const std::vector<core::MambaByteRange>& ranges) {
  std::vector<pdkv_byte_range_t> out;
  out.reserve(ranges.size());
  for (const auto& r : ranges) out.push_back(pdkv_byte_range_t{r.offset, r.size});
  return out;
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_mamba_local_conv_offsets(const pdkv_geometry_t* geometry, pdkv_byte_range_list_t** out,
                                                     pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(geometry, "geometry");
    require_non_null(out, "out");
    *out = nullptr;
    auto list = std::make_unique<pdkv_byte_range_list>();
    list->items = to_c(core::local_conv_offsets(hybrid_state(geometry)));
    *out = list.release();
  });
}

PDKV_API pdkv_status_t pdkv_mamba_remote_conv_offsets(const pdkv_geometry_t* geometry, uint32_t local_tp_rank,
                                                      int32_t tp_ratio, pdkv_byte_range_list_t** out,
                                                      pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(geometry, "geometry");
    require_non_null(out, "out");
    *out = nullptr;
    auto list = std::make_unique<pdkv_byte_range_list>();
    list->items = to_c(core::remote_conv_offsets(hybrid_state(geometry), local_tp_rank, tp_ratio));
    *out = list.release();
  });
}

PDKV_API pdkv_status_t pdkv_mamba_ssm_read_range(const pdkv_geometry_t* geometry, uint64_t remote_conv_bytes,
                                                 uint64_t remote_ssm_bytes, uint32_t local_tp_rank, int32_t tp_ratio,
                                                 pdkv_byte_range_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(geometry, "geometry");
    require_non_null(out, "out");
    const core::MambaByteRange r =
        core::ssm_read_range(hybrid_state(geometry), remote_conv_bytes, remote_ssm_bytes, local_tp_rank, tp_ratio);
    *out = pdkv_byte_range_t{r.offset, r.size};
  });
}

PDKV_API pdkv_status_t pdkv_physical_blocks_per_logical(uint64_t conv_bytes, uint64_t ssm_bytes, uint64_t block_len,
                                                        uint64_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = core::compute_physical_blocks_per_logical(conv_bytes, ssm_bytes, block_len);
  });
}

PDKV_API pdkv_status_t pdkv_mamba_reads_new(const pdkv_geometry_t* p_geometry, const pdkv_geometry_t* d_geometry,
                                            uint32_t d_tp_rank, int32_t rule, pdkv_mamba_read_list_t** out,
                                            pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(p_geometry, "p_geometry");
    require_non_null(d_geometry, "d_geometry");
    require_non_null(out, "out");
    *out = nullptr;
    const core::MambaState& p = hybrid_state(p_geometry);
    const core::MambaState& d = hybrid_state(d_geometry);
    auto list = std::make_unique<pdkv_mamba_read_list>();
    switch (rule) {
      case PDKV_MAMBA_READS_PDKV: list->reads = core::mamba_reads(p, d, d_tp_rank); break;
      case PDKV_MAMBA_READS_VLLM: list->reads = core::vllm_mamba_reads(p, d, d_tp_rank); break;
      default:
        core::fail(core::Status::InvalidArgument,
                   "rule = " + std::to_string(rule) + " is not a pdkv_mamba_reads_rule_t value (expected 0 or 1)");
    }
    list->source_ranks = core::mamba_source_ranks(list->reads);
    list->c_reads.reserve(list->reads.size());
    for (const core::MambaRead& r : list->reads) {
      pdkv_mamba_read_t& c = pdkv::capi::append_zeroed(list->c_reads);  // (padding after p_tp_rank)
      c.p_tp_rank = r.p_rank;
      c.part = r.part.c_str();
      c.remote_offset = r.remote_offset;
      c.local_offset = r.local_offset;
      c.length = r.length;
    }
    *out = list.release();
  });
}

PDKV_API pdkv_status_t pdkv_mamba_read_list_items(const pdkv_mamba_read_list_t* list, const pdkv_mamba_read_t** reads,
                                                  size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(reads, "reads");
    require_non_null(count, "count");
    *reads = list->c_reads.empty() ? nullptr : list->c_reads.data();
    *count = list->c_reads.size();
  });
}

PDKV_API pdkv_status_t pdkv_mamba_read_list_source_ranks(const pdkv_mamba_read_list_t* list, const uint32_t** ranks,
                                                         size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(ranks, "ranks");
    require_non_null(count, "count");
    *ranks = list->source_ranks.empty() ? nullptr : list->source_ranks.data();
    *count = list->source_ranks.size();
  });
}

PDKV_API void pdkv_mamba_read_list_free(pdkv_mamba_read_list_t* list) { delete list; }

}  // extern "C"
