// Scheduler-side helpers (core/scheduler.hpp: Mamba aligned split in both forms, the N-1 rule,
// P-side truncation) and the KV offload geometry (core/offload.hpp).
#include <cstddef>
#include <string>
#include <vector>

#include "boundary.hpp"
#include "pdkv/core/offload.hpp"
#include "pdkv/core/scheduler.hpp"
#include "plan_handles.hpp"
#include "struct_sizes.hpp"
#include "structs.hpp"

using pdkv::capi::flag_from_c;
using pdkv::capi::guard;
using pdkv::capi::require_non_null;
using pdkv::capi::write_struct_prefix;
namespace core = pdkv::core;

using pdkv::capi::kOffloadGeometryMinSize;
using pdkv::capi::kRemoteDecodePlanMinSize;
using pdkv::capi::kRemoteDecodePrefillMinSize;
using pdkv::capi::kSplitMinSize;
using pdkv::capi::kSplitV0604MinSize;
using pdkv::capi::read_options;


namespace {
// A 0/1 flag held in a uint64_t field (pdkv_aligned_split_input_t.defer_oversized_block):
// InvalidArgument naming the field and the value.
bool wide_flag_from_c(uint64_t v, const char* field) {
  if (v > 1) {
    core::fail(core::Status::InvalidArgument,
               std::string(field) + " = " + std::to_string(v) + " is not a boolean: pass 0 or 1");
  }
  return v == 1;
}
}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_mamba_aligned_split_v0604(const pdkv_aligned_split_v0604_input_t* input, uint64_t* out,
                                                      pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(input, "input");
    require_non_null(out, "out");
    const pdkv_aligned_split_v0604_input_t copy =
        read_options(*input, kSplitV0604MinSize, "pdkv_aligned_split_v0604_input_t", 0);
    input = &copy;
    core::AlignedSplitV0604Input in;
    in.num_computed_tokens = input->num_computed_tokens;
    in.num_new_local_computed_tokens = input->num_new_local_computed_tokens;
    in.num_external_computed_tokens = input->num_external_computed_tokens;
    in.num_new_tokens = input->num_new_tokens;
    in.num_prompt_tokens = input->num_prompt_tokens;
    in.num_tokens = input->num_tokens;
    in.block_size = input->block_size;
    in.use_eagle = flag_from_c(input->use_eagle, "pdkv_aligned_split_v0604_input_t.use_eagle");
    in.load_kv_async = flag_from_c(input->load_kv_async, "pdkv_aligned_split_v0604_input_t.load_kv_async");
    *out = core::mamba_aligned_split_v0604(in);
  });
}

PDKV_API pdkv_status_t pdkv_mamba_aligned_split(const pdkv_aligned_split_input_t* input, uint64_t* out,
                                                pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(input, "input");
    require_non_null(out, "out");
    const pdkv_aligned_split_input_t copy = read_options(
        *input, kSplitMinSize, "pdkv_aligned_split_input_t",
        PDKV_SPLIT_FIELD_FLOOR_UNIT | PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE | PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS |
            PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD);
    input = &copy;
    // An optional field: its value when its bit is set (and then > 0), else the core's 0 (off).
    const auto optional = [&](uint64_t bit, uint64_t v, const char* field, const char* bit_name) -> uint64_t {
      if ((input->field_mask & bit) == 0) return 0;
      if (v == 0) {
        core::fail(core::Status::InvalidArgument, std::string("pdkv_aligned_split_input_t.") + field + " = 0 with " +
                                                      bit_name + " set: set a value, or leave the bit unset");
      }
      return v;
    };
    core::AlignedSplitInput in;
    in.start = input->start;
    in.num_new_tokens = input->num_new_tokens;
    in.num_prompt_tokens = input->num_prompt_tokens;
    in.num_tokens = input->num_tokens;
    in.block_size = input->block_size;
    in.floor_unit = optional(PDKV_SPLIT_FIELD_FLOOR_UNIT, input->floor_unit, "floor_unit", "PDKV_SPLIT_FIELD_FLOOR_UNIT");
    in.tail_hash_block_size = optional(PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE, input->tail_hash_block_size,
                                       "tail_hash_block_size", "PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE");
    in.shared_prefix_tokens = input->shared_prefix_tokens;
    in.max_num_scheduled_tokens =
        optional(PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS, input->max_num_scheduled_tokens, "max_num_scheduled_tokens",
                 "PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS");
    in.long_prefill_token_threshold = optional(PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD,
                                               input->long_prefill_token_threshold, "long_prefill_token_threshold",
                                               "PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD");
    in.use_eagle = flag_from_c(input->use_eagle, "pdkv_aligned_split_input_t.use_eagle");
    in.load_kv_async = flag_from_c(input->load_kv_async, "pdkv_aligned_split_input_t.load_kv_async");
    in.defer_oversized_block =
        wide_flag_from_c(input->defer_oversized_block, "pdkv_aligned_split_input_t.defer_oversized_block");
    *out = core::mamba_aligned_split(in);
  });
}

PDKV_API pdkv_status_t pdkv_d_num_new_matched_tokens(uint64_t num_prompt_tokens, uint64_t num_computed_tokens,
                                                     uint8_t has_mamba, uint64_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = core::d_num_new_matched_tokens(num_prompt_tokens, num_computed_tokens, flag_from_c(has_mamba, "has_mamba"));
  });
}

PDKV_API pdkv_status_t pdkv_truncate_for_remote_decode(const pdkv_remote_decode_prefill_t* in, uint8_t has_mamba,
                                                       pdkv_remote_decode_prefill_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(in, "in");
    require_non_null(out, "out");
    const pdkv_remote_decode_prefill_t copy =
        read_options(*in, kRemoteDecodePrefillMinSize, "pdkv_remote_decode_prefill_t", 0);
    in = &copy;  // in and out may be the same struct: read it completely before writing out
    core::RemoteDecodePrefill r;
    r.num_prompt_tokens = in->num_prompt_tokens;
    r.max_tokens = in->max_tokens;
    r.truncated = flag_from_c(in->truncated, "pdkv_remote_decode_prefill_t.truncated");
    const core::RemoteDecodePrefill t = core::truncate_for_remote_decode(r, flag_from_c(has_mamba, "has_mamba"));
    pdkv_remote_decode_prefill_t c{};
    c.num_prompt_tokens = t.num_prompt_tokens;
    c.max_tokens = t.max_tokens;
    c.truncated = t.truncated ? 1 : 0;
    write_struct_prefix(out, c, kRemoteDecodePrefillMinSize, "pdkv_remote_decode_prefill_t");
  });
}

PDKV_API pdkv_status_t pdkv_plan_remote_decode_prefill(uint64_t num_prompt_tokens, uint64_t local_hit_tokens,
                                                       uint64_t block_size, uint8_t has_mamba,
                                                       pdkv_remote_decode_prefill_plan_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    pdkv::capi::require_struct_size(out->struct_size, kRemoteDecodePlanMinSize,
                                    sizeof(pdkv_remote_decode_prefill_plan_t), "pdkv_remote_decode_prefill_plan_t");
    const core::RemoteDecodePrefillPlan p = core::plan_remote_decode_prefill(
        num_prompt_tokens, local_hit_tokens, block_size, flag_from_c(has_mamba, "has_mamba"));
    pdkv_remote_decode_prefill_plan_t c{};
    c.num_prompt_tokens = p.num_prompt_tokens;
    c.computed_tokens = p.computed_tokens;
    c.new_tokens = p.new_tokens;
    write_struct_prefix(out, c, kRemoteDecodePlanMinSize, "pdkv_remote_decode_prefill_plan_t");
  });
}

PDKV_API pdkv_status_t pdkv_derive_offload_geometry(uint64_t config_num_blocks, uint64_t gpu_block_size,
                                                    uint64_t hash_block_size, const pdkv_offload_layer_t* layers,
                                                    size_t num_layers, pdkv_offload_geometry_t* out,
                                                    pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    pdkv::capi::require_struct_size(out->struct_size, kOffloadGeometryMinSize, sizeof(pdkv_offload_geometry_t),
                                    "pdkv_offload_geometry_t");
    if (num_layers > 0) require_non_null(layers, "layers");
    std::vector<core::OffloadLayer> l;
    l.reserve(num_layers);
    for (size_t i = 0; i < num_layers; ++i) l.push_back(core::OffloadLayer{layers[i].tensor_bytes, layers[i].page_bytes});
    const core::OffloadGeometry g = core::derive_offload_geometry(config_num_blocks, gpu_block_size, hash_block_size, l);
    pdkv_offload_geometry_t c{};
    c.num_blocks = g.num_blocks;
    c.hash_blocks_per_block = g.hash_blocks_per_block;
    write_struct_prefix(out, c, kOffloadGeometryMinSize, "pdkv_offload_geometry_t");
  });
}

}  // extern "C"
