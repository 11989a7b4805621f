// The oldest struct_size the library accepts for each struct of pdkv.h that has one: its size as
// published in pdkv 2.0 (the header's growth rule: "the first published size of every struct is
// its size in pdkv 2.0").
//
// Each minimum is computed from the struct's LAST 2.0 FIELD, named explicitly, never from
// sizeof(T): when a field is appended in a later minor version, sizeof(T) grows but
// offsetof(T, last 2.0 field) does not, so a caller compiled against 2.0 keeps being accepted. The
// end of that field is rounded up to alignof(size_t), the alignment of every such struct (each
// begins with a size_t and none has a member aligned more strictly). The static_asserts pin the
// LP64 byte counts of the 2.0 structs: if one fires, a 2.0 field was moved or resized, which
// breaks the ABI (a new major version). Whoever appends a field gives it a field_mask bit
// (input structs). An input struct's appended field may sit in the 2.0 tail padding (as
// pdkv_agent_options_t.copy_threads does): its bit, which no 2.0 caller can set, says whether it
// was written, not struct_size. One that starts at or after the 2.0 size must be checked with
// PDKV_REQUIRE_APPENDED_FIELD when its bit is set: otherwise a caller whose struct_size stops
// before it would be read as zero from the copy's zeroed tail, silently. Output structs append
// at or after their 2.0 size, so a 2.0 caller's struct_size leaves the new field unwritten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "boundary.hpp"
#include "pdkv.h"

namespace pdkv::capi {

// Rounds n up to a multiple of a (a power of two).
constexpr size_t round_up_to(size_t n, size_t a) { return (n + a - 1) / a * a; }

// True on LP64 targets, where the literal 2.0 sizes below are checked.
inline constexpr bool kLp64 = sizeof(void*) == 8 && sizeof(size_t) == 8 && alignof(uint64_t) == 8;

}  // namespace pdkv::capi

// Size of the 2.0 layout of T whose last 2.0 field is `last`.
#define PDKV_FIRST_PUBLISHED_SIZE(T, last) \
  ::pdkv::capi::round_up_to(offsetof(T, last) + sizeof(static_cast<T*>(nullptr)->last), alignof(size_t))

// Defines `name` as the 2.0 size of T (last 2.0 field `last`) and checks it against the literal
// LP64 byte count `lp64_bytes` of the 2.0 struct.
#define PDKV_DEFINE_MIN_SIZE(name, T, last, lp64_bytes)                                             \
  inline constexpr size_t name = PDKV_FIRST_PUBLISHED_SIZE(T, last);                                \
  static_assert(!::pdkv::capi::kLp64 || name == (lp64_bytes),                                       \
                #T ": the 2.0 layout moved (a 2.0 field changed); first published size must stay " \
                #lp64_bytes " bytes on LP64");                                                      \
  static_assert(name <= sizeof(T), #T ": the 2.0 size cannot exceed the current size")

namespace pdkv::capi {

PDKV_DEFINE_MIN_SIZE(kAgentOptionsMinSize, pdkv_agent_options_t, max_outstanding, 80);
PDKV_DEFINE_MIN_SIZE(kAgentInfoMinSize, pdkv_agent_info_t, transfers_in_flight, 64);
PDKV_DEFINE_MIN_SIZE(kMemoryDescMinSize, pdkv_memory_desc_t, device, 48);
PDKV_DEFINE_MIN_SIZE(kConnectOptionsMinSize, pdkv_connect_options_t, timeout_ms, 32);
PDKV_DEFINE_MIN_SIZE(kPeerInfoMinSize, pdkv_peer_info_t, heartbeat_rtt_us, 112);
PDKV_DEFINE_MIN_SIZE(kTransferParamsMinSize, pdkv_transfer_params_t, notify, 64);
PDKV_DEFINE_MIN_SIZE(kTransferInfoMinSize, pdkv_transfer_info_t, elapsed_us, 64);
PDKV_DEFINE_MIN_SIZE(kExchangeClipParamsMinSize, pdkv_exchange_clip_params_t, num_speculative_blocks, 56);
PDKV_DEFINE_MIN_SIZE(kGroupTrimInputMinSize, pdkv_group_trim_input_t, remote_kernel_blocks_per_id, 128);
PDKV_DEFINE_MIN_SIZE(kEngineOptionsMinSize, pdkv_engine_options_t, prefix_caching, 88);
PDKV_DEFINE_MIN_SIZE(kEngineInfoMinSize, pdkv_engine_info_t, prefix_caching, 80);
PDKV_DEFINE_MIN_SIZE(kEngineGroupMinSize, pdkv_engine_group_t, num_regions, 48);
PDKV_DEFINE_MIN_SIZE(kEnginePeerMinSize, pdkv_engine_peer_t, permute_on_receive, 48);
PDKV_DEFINE_MIN_SIZE(kEngineRequestMinSize, pdkv_engine_request_t, num_local_computed_tokens, 48);
PDKV_DEFINE_MIN_SIZE(kTpMappingParamsMinSize, pdkv_tp_mapping_params_t, has_mamba, 40);
PDKV_DEFINE_MIN_SIZE(kTpMappingInfoMinSize, pdkv_tp_mapping_info_t, notifications_expected, 40);
PDKV_DEFINE_MIN_SIZE(kEngineConfigMinSize, pdkv_engine_config_t, kv_cache_head_extra_bytes, 104);
PDKV_DEFINE_MIN_SIZE(kGeometryInfoMinSize, pdkv_geometry_info_t, kv_head_bytes_per_token, 224);
PDKV_DEFINE_MIN_SIZE(kConvProjectionMinSize, pdkv_conv_projection_t, offset, 56);
PDKV_DEFINE_MIN_SIZE(kEngineLayoutMinSize, pdkv_engine_layout_t, layer_end, 96);
PDKV_DEFINE_MIN_SIZE(kMetadataInfoMinSize, pdkv_engine_metadata_info_t, layer_end, 144);
PDKV_DEFINE_MIN_SIZE(kIncompatibilityMinSize, pdkv_incompatibility_t, text, 64);
PDKV_DEFINE_MIN_SIZE(kModelDescMinSize, pdkv_model_desc_t, mla_head_size, 120);
PDKV_DEFINE_MIN_SIZE(kPlanContextParamsMinSize, pdkv_plan_context_params_t, permute_on_receive, 72);
PDKV_DEFINE_MIN_SIZE(kPlanGroupMinSize, pdkv_plan_group_t, num_layers, 56);
PDKV_DEFINE_MIN_SIZE(kPlanInfoMinSize, pdkv_transfer_plan_info_t, permute_head_bytes, 192);
PDKV_DEFINE_MIN_SIZE(kGroupZeroMinSize, pdkv_plan_group_zero_t, num_permute_regions, 96);
PDKV_DEFINE_MIN_SIZE(kSplitMinSize, pdkv_aligned_split_input_t, defer_oversized_block, 112);
PDKV_DEFINE_MIN_SIZE(kRemoteDecodePrefillMinSize, pdkv_remote_decode_prefill_t, truncated, 40);
PDKV_DEFINE_MIN_SIZE(kRemoteDecodePlanMinSize, pdkv_remote_decode_prefill_plan_t, new_tokens, 32);
PDKV_DEFINE_MIN_SIZE(kOffloadGeometryMinSize, pdkv_offload_geometry_t, hash_blocks_per_block, 24);
PDKV_DEFINE_MIN_SIZE(kDescriptorLayoutMinSize, pdkv_descriptor_layout_t, num_mamba_regions, 56);
PDKV_DEFINE_MIN_SIZE(kSplitV0604MinSize, pdkv_aligned_split_v0604_input_t, load_kv_async, 80);
// Since 2.8: its first published size is its 2.8 size.
PDKV_DEFINE_MIN_SIZE(kCompileArgsMinSize, pdkv_compile_args_t, err, 40);

// Input structs begin with struct_size then field_mask (pdkv.h's growth rule).
template <typename T>
inline constexpr bool kHasFieldMask = requires(T t) { t.field_mask; };

// INVALID_ARGUMENT naming the struct and the bits of `mask` outside `known` (the PDKV_*_FIELD_*
// bits of the struct this library knows).
inline void check_field_mask(uint64_t mask, uint64_t known, const char* type_name) {
  if ((mask & ~known) != 0) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(mask & ~known));
    char known_hex[32];
    std::snprintf(known_hex, sizeof known_hex, "0x%llx", static_cast<unsigned long long>(known));
    pdkv::core::fail(pdkv::core::Status::InvalidArgument,
                     std::string(type_name) + ".field_mask has unknown bits " + hex +
                         " (fields this library does not have; the bits it knows: " + known_hex +
                         "): clear them or use a newer libpdkv");
  }
}

// Checks in->struct_size against [min_size, sizeof(T)] (STRUCT_SIZE otherwise) and returns a
// current-size copy of the caller's struct: its first struct_size bytes, the rest zero. Read input
// structs only through this copy (or read_options), so a field newer than the caller's struct is
// never read from the caller's memory.
template <typename T>
T read_struct_prefix(const T& in, size_t min_size, const char* type_name) {
  require_struct_size(in.struct_size, min_size, sizeof(T), type_name);
  T copy;
  std::memset(static_cast<void*>(&copy), 0, sizeof(T));
  std::memcpy(static_cast<void*>(&copy), &in, in.struct_size);
  return copy;
}

// A field appended after 2.0 whose bit is set must lie inside the caller's struct_size: a caller
// that sets the bit of a field its struct does not have is STRUCT_SIZE naming both (never a
// default read silently from the zeroed tail of the copy).
inline void require_appended_field(size_t struct_size, size_t field_end, const char* type_name,
                                   const char* field_name) {
  if (struct_size < field_end) {
    pdkv::core::fail(pdkv::core::Status::StructSize,
                     std::string(type_name) + ".field_mask sets the bit of " + field_name + ", which ends at byte " +
                         std::to_string(field_end) + ", but struct_size is " + std::to_string(struct_size) +
                         ": set struct_size to sizeof(" + type_name + ") of a header that has the field");
  }
}
#define PDKV_REQUIRE_APPENDED_FIELD(copy, T, field)                                                      \
  ::pdkv::capi::require_appended_field((copy).struct_size, offsetof(T, field) + sizeof((copy).field), #T, \
                                       #field)

// read_struct_prefix for an input struct, then refuses field_mask bits outside `known_bits`.
template <typename T>
T read_options(const T& in, size_t min_size, const char* type_name, uint64_t known_bits) {
  static_assert(kHasFieldMask<T>, "read_options is for input structs (struct_size, field_mask)");
  static_assert(offsetof(T, field_mask) == sizeof(size_t), "field_mask must follow struct_size");
  T copy = read_struct_prefix(in, min_size, type_name);
  check_field_mask(copy.field_mask, known_bits, type_name);
  return copy;
}

}  // namespace pdkv::capi
