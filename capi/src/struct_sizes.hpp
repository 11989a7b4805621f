// The oldest struct_size the library accepts for each options / output struct of pdkv.h: the size
// of the struct as published in pdkv 0.1 ("first published size" in the header's conventions).
//
// Each minimum is computed from the struct's LAST 0.1 FIELD, named explicitly, never from
// sizeof(T): when a field is appended later, sizeof(T) grows but offsetof(T, last 0.1 field) does
// not, so a caller compiled against 0.1 keeps being accepted. The end of that field is rounded up
// to alignof(size_t), which is the alignment of every 0.1 struct (each begins with size_t
// struct_size and none has a member aligned more strictly), i.e. exactly what sizeof(0.1 struct)
// was. Consequences for whoever grows a struct:
//   - a new field must start at or after the 0.1 size, never in the 0.1 tail padding (an old
//     caller's struct_size covers that padding, whose bytes are indeterminate);
//   - inputs are read through read_struct_prefix(), so a field beyond the caller's struct_size
//     reads as zero, and zero must mean "the 0.1 behaviour" for a new field.
// The static_asserts pin the LP64 byte counts of the 0.1 structs: if one fires, a 0.1 field was
// moved or resized, which breaks the ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "boundary.hpp"
#include "pdkv.h"

namespace pdkv::capi {

// Rounds n up to a multiple of a (a power of two).
constexpr size_t round_up_to(size_t n, size_t a) { return (n + a - 1) / a * a; }

// True on LP64 targets, where the literal 0.1 sizes below are checked.
inline constexpr bool kLp64 = sizeof(void*) == 8 && sizeof(size_t) == 8 && alignof(uint64_t) == 8;

}  // namespace pdkv::capi

// Size of the 0.1 layout of T whose last 0.1 field is `last`.
#define PDKV_SIZE_0_1(T, last) \
  ::pdkv::capi::round_up_to(offsetof(T, last) + sizeof(static_cast<T*>(nullptr)->last), alignof(size_t))

// Defines `name` as the 0.1 size of T (last 0.1 field `last`) and checks it against the literal
// LP64 byte count `lp64_bytes` of the 0.1 struct.
#define PDKV_DEFINE_MIN_SIZE(name, T, last, lp64_bytes)                                             \
  inline constexpr size_t name = PDKV_SIZE_0_1(T, last);                                            \
  static_assert(!::pdkv::capi::kLp64 || name == (lp64_bytes),                                       \
                #T ": the 0.1 layout moved (a 0.1 field changed); first published size must stay " \
                #lp64_bytes " bytes on LP64");                                                      \
  static_assert(name <= sizeof(T), #T ": the 0.1 size cannot exceed the current size")

namespace pdkv::capi {

PDKV_DEFINE_MIN_SIZE(kModelDescMinSize, pdkv_model_desc_t, layer_pattern, 104);
PDKV_DEFINE_MIN_SIZE(kTpMappingParamsMinSize, pdkv_tp_mapping_params_t, has_mamba, 32);
PDKV_DEFINE_MIN_SIZE(kTpMappingInfoMinSize, pdkv_tp_mapping_info_t, notifications_expected, 40);
PDKV_DEFINE_MIN_SIZE(kEngineConfigMinSize, pdkv_engine_config_t, conv_layout, 80);
PDKV_DEFINE_MIN_SIZE(kGeometryInfoMinSize, pdkv_geometry_info_t, num_log_lines, 200);
PDKV_DEFINE_MIN_SIZE(kConvProjectionMinSize, pdkv_conv_projection_t, offset, 56);
PDKV_DEFINE_MIN_SIZE(kDescriptorLayoutMinSize, pdkv_descriptor_layout_t, num_mamba_regions, 48);
PDKV_DEFINE_MIN_SIZE(kExchangeClipParamsMinSize, pdkv_exchange_clip_params_t, num_speculative_blocks, 48);
PDKV_DEFINE_MIN_SIZE(kGroupTrimInputMinSize, pdkv_group_trim_input_t, remote_first_block, 112);
PDKV_DEFINE_MIN_SIZE(kSplitV0604MinSize, pdkv_aligned_split_v0604_input_t, load_kv_async, 72);
PDKV_DEFINE_MIN_SIZE(kSplitMinSize, pdkv_aligned_split_input_t, load_kv_async, 96);
PDKV_DEFINE_MIN_SIZE(kRemoteDecodePrefillMinSize, pdkv_remote_decode_prefill_t, truncated, 32);
PDKV_DEFINE_MIN_SIZE(kRemoteDecodePlanMinSize, pdkv_remote_decode_prefill_plan_t, new_tokens, 32);
PDKV_DEFINE_MIN_SIZE(kOffloadGeometryMinSize, pdkv_offload_geometry_t, hash_blocks_per_block, 24);
PDKV_DEFINE_MIN_SIZE(kEngineLayoutMinSize, pdkv_engine_layout_t, prefix_caching, 64);
PDKV_DEFINE_MIN_SIZE(kMetadataInfoMinSize, pdkv_engine_metadata_info_t, model_fingerprint, 128);
PDKV_DEFINE_MIN_SIZE(kIncompatibilityMinSize, pdkv_incompatibility_t, text, 64);
PDKV_DEFINE_MIN_SIZE(kPlanContextParamsMinSize, pdkv_plan_context_params_t, mapping, 56);
PDKV_DEFINE_MIN_SIZE(kPlanGroupMinSize, pdkv_plan_group_t, num_regions, 32);
PDKV_DEFINE_MIN_SIZE(kPlanInfoMinSize, pdkv_transfer_plan_info_t, empty, 104);
PDKV_DEFINE_MIN_SIZE(kGroupZeroMinSize, pdkv_plan_group_zero_t, num_unfilled_states, 64);

// Fields appended after 0.1 start at or after the 0.1 size (never in the 0.1 tail padding).
static_assert(offsetof(pdkv_model_desc_t, mla_head_size) >= kModelDescMinSize, "mla_head_size in the 0.1 padding");
static_assert(offsetof(pdkv_engine_layout_t, region_kinds) >= kEngineLayoutMinSize, "region_kinds in the 0.1 padding");
static_assert(offsetof(pdkv_geometry_info_t, mla_bytes_per_token) >= kGeometryInfoMinSize,
              "mla_bytes_per_token in the 0.1 padding");
static_assert(offsetof(pdkv_engine_config_t, kv_cache_element_bits) >= kEngineConfigMinSize,
              "kv_cache_element_bits in the 0.1 padding");
static_assert(offsetof(pdkv_engine_layout_t, pp_size) >= kEngineLayoutMinSize, "pp_size in the 0.1 padding");
static_assert(offsetof(pdkv_engine_metadata_info_t, pp_size) >= kMetadataInfoMinSize, "pp_size in the 0.1 padding");
static_assert(offsetof(pdkv_plan_group_t, layers) >= kPlanGroupMinSize, "layers in the 0.1 padding");
static_assert(offsetof(pdkv_transfer_plan_info_t, p_pp_size) >= kPlanInfoMinSize, "p_pp_size in the 0.1 padding");
static_assert(offsetof(pdkv_plan_context_params_t, permute_on_receive) >= kPlanContextParamsMinSize,
              "permute_on_receive in the 0.1 padding");
static_assert(offsetof(pdkv_plan_group_zero_t, permute_blocks) >= kGroupZeroMinSize, "permute_blocks in the 0.1 padding");

// Checks in->struct_size against [min_size, sizeof(T)] (STRUCT_SIZE otherwise) and returns a
// current-size copy of the caller's struct: its first struct_size bytes, the rest zero. Read input
// structs only through this copy, so a field newer than the caller's struct is never read from
// the caller's memory.
template <typename T>
T read_struct_prefix(const T& in, size_t min_size, const char* type_name) {
  require_struct_size(in.struct_size, min_size, sizeof(T), type_name);
  T copy;
  std::memset(static_cast<void*>(&copy), 0, sizeof(T));
  std::memcpy(static_cast<void*>(&copy), &in, in.struct_size);
  return copy;
}

}  // namespace pdkv::capi
