#include "engine_config.hpp"

#include <cstdint>
#include <string>

#include "boundary.hpp"
#include "pdkv/core/backends.hpp"
#include "struct_sizes.hpp"

namespace core = pdkv::core;

namespace pdkv::capi {
namespace {

[[noreturn]] void bad_enum(const char* field, int32_t v, const char* expected) {
  core::fail(core::Status::InvalidArgument, std::string("pdkv_engine_config_t.") + field + " = " +
                                                std::to_string(v) + " is not valid (expected " + expected + ")");
}

// The PDKV_CONFIG_FIELD_* bits this library knows.
constexpr uint64_t kEngineConfigFields = PDKV_CONFIG_FIELD_KV_CACHE_DTYPE | PDKV_CONFIG_FIELD_CONV_STATE_DTYPE |
                                         PDKV_CONFIG_FIELD_SSM_STATE_DTYPE | PDKV_CONFIG_FIELD_BLOCK_SIZE |
                                         PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE | PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS |
                                         PDKV_CONFIG_FIELD_MODEL_FORMAT | PDKV_CONFIG_FIELD_KV_CACHE_FORMAT |
                                         PDKV_CONFIG_FIELD_CONV_STATE_FORMAT | PDKV_CONFIG_FIELD_SSM_STATE_FORMAT;

}  // namespace

EngineSettings engine_from_c(const pdkv_engine_config_t& caller, const core::ModelDesc& model) {
  const pdkv_engine_config_t c = read_options(caller, kEngineConfigMinSize, "pdkv_engine_config_t", kEngineConfigFields);
  // An optional field: its value when its bit is set (and then non-zero), else the core's "auto" (0).
  const auto optional = [&](uint64_t bit, uint64_t v, const char* field, const char* bit_name) -> uint64_t {
    if ((c.field_mask & bit) == 0) return 0;
    if (v == 0) {
      core::fail(core::Status::InvalidArgument, std::string("pdkv_engine_config_t.") + field + " = 0 with " +
                                                    bit_name + " set: set a value, or leave the bit unset for auto");
    }
    return v;
  };
  // The core holds 32 bits, so a larger value is refused here, naming it, instead of being cut.
  const auto narrow = [](uint64_t v, const char* field) {
    if (v > UINT32_MAX) {
      core::fail(core::Status::InvalidArgument, std::string("pdkv_engine_config_t.") + field + " = " +
                                                    std::to_string(v) + " is out of range");
    }
    return static_cast<uint32_t>(v);
  };
  EngineSettings s;
  core::EngineConfig& e = s.engine;
  e.tp_size = c.tp_size;
  e.kv_cache_dtype_bytes = static_cast<uint32_t>(optional(PDKV_CONFIG_FIELD_KV_CACHE_DTYPE, c.kv_cache_dtype_bytes,
                                                          "kv_cache_dtype_bytes", "PDKV_CONFIG_FIELD_KV_CACHE_DTYPE"));
  e.conv_state_dtype_bytes = static_cast<uint32_t>(optional(PDKV_CONFIG_FIELD_CONV_STATE_DTYPE, c.conv_state_dtype_bytes,
                                                            "conv_state_dtype_bytes", "PDKV_CONFIG_FIELD_CONV_STATE_DTYPE"));
  e.ssm_state_dtype_bytes = static_cast<uint32_t>(optional(PDKV_CONFIG_FIELD_SSM_STATE_DTYPE, c.ssm_state_dtype_bytes,
                                                           "ssm_state_dtype_bytes", "PDKV_CONFIG_FIELD_SSM_STATE_DTYPE"));
  e.num_speculative_tokens = c.num_speculative_tokens;
  e.user_block_size = static_cast<uint32_t>(
      optional(PDKV_CONFIG_FIELD_BLOCK_SIZE, c.user_block_size, "user_block_size", "PDKV_CONFIG_FIELD_BLOCK_SIZE"));
  s.options.user_mamba_block_size = static_cast<uint32_t>(optional(
      PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE, c.user_mamba_block_size, "user_mamba_block_size", "PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE"));
  e.kv_cache_element_bits =
      narrow(optional(PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS, c.kv_cache_element_bits, "kv_cache_element_bits",
                      "PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS"),
             "kv_cache_element_bits");
  e.kv_cache_head_extra_bytes = narrow(c.kv_cache_head_extra_bytes, "kv_cache_head_extra_bytes");
  // Named element formats (appended after the 2.0 struct: read only under their bit).
  const auto format = [&](uint64_t bit, int32_t v, const char* field, const char* bit_name) {
    if ((c.field_mask & bit) == 0) return core::ElementFormat::Unknown;
    if (v <= PDKV_FORMAT_UNKNOWN || v > static_cast<int32_t>(core::kLastElementFormat)) {
      core::fail(core::Status::InvalidArgument,
                 std::string("pdkv_engine_config_t.") + field + " = " + std::to_string(v) + " with " + bit_name +
                     " set is not a pdkv_element_format_t (1.." +
                     std::to_string(static_cast<int>(core::kLastElementFormat)) +
                     "); leave the bit unset for an unknown format");
    }
    return static_cast<core::ElementFormat>(v);
  };
  if ((c.field_mask & PDKV_CONFIG_FIELD_MODEL_FORMAT) != 0) PDKV_REQUIRE_APPENDED_FIELD(c, pdkv_engine_config_t, model_format);
  if ((c.field_mask & PDKV_CONFIG_FIELD_KV_CACHE_FORMAT) != 0) PDKV_REQUIRE_APPENDED_FIELD(c, pdkv_engine_config_t, kv_cache_format);
  if ((c.field_mask & PDKV_CONFIG_FIELD_CONV_STATE_FORMAT) != 0) PDKV_REQUIRE_APPENDED_FIELD(c, pdkv_engine_config_t, conv_state_format);
  if ((c.field_mask & PDKV_CONFIG_FIELD_SSM_STATE_FORMAT) != 0) PDKV_REQUIRE_APPENDED_FIELD(c, pdkv_engine_config_t, ssm_state_format);
  e.model_format = format(PDKV_CONFIG_FIELD_MODEL_FORMAT, c.model_format, "model_format", "PDKV_CONFIG_FIELD_MODEL_FORMAT");
  e.kv_cache_format = format(PDKV_CONFIG_FIELD_KV_CACHE_FORMAT, c.kv_cache_format, "kv_cache_format",
                             "PDKV_CONFIG_FIELD_KV_CACHE_FORMAT");
  e.conv_state_format = format(PDKV_CONFIG_FIELD_CONV_STATE_FORMAT, c.conv_state_format, "conv_state_format",
                               "PDKV_CONFIG_FIELD_CONV_STATE_FORMAT");
  e.ssm_state_format = format(PDKV_CONFIG_FIELD_SSM_STATE_FORMAT, c.ssm_state_format, "ssm_state_format",
                              "PDKV_CONFIG_FIELD_SSM_STATE_FORMAT");

  if (c.mamba_cache_mode < PDKV_MAMBA_CACHE_NONE || c.mamba_cache_mode > PDKV_MAMBA_CACHE_ALL) {
    bad_enum("mamba_cache_mode", c.mamba_cache_mode, "a pdkv_mamba_cache_mode_t: 0 none, 1 align, 2 all");
  }
  e.cache_mode = static_cast<core::MambaCacheMode>(c.mamba_cache_mode);
  if (c.conv_layout != PDKV_CONV_LAYOUT_DS && c.conv_layout != PDKV_CONV_LAYOUT_SD) {
    bad_enum("conv_layout", c.conv_layout, "a pdkv_conv_layout_t: 0 DS, 1 SD");
  }
  e.conv_layout = static_cast<core::ConvLayout>(c.conv_layout);

  if (c.attention_backend == PDKV_BACKEND_CUSTOM) {
    e.preferred_block_size = c.preferred_block_size;
    e.kernel_block_multiple_of = c.kernel_block_multiple_of;
    if (c.num_kernel_block_sizes > 0) {
      require_non_null(c.kernel_block_sizes, "pdkv_engine_config_t.kernel_block_sizes");
      e.kernel_block_sizes.assign(c.kernel_block_sizes, c.kernel_block_sizes + c.num_kernel_block_sizes);
    }
  } else {
    if (c.attention_backend < PDKV_BACKEND_FLASH_ATTN || c.attention_backend > PDKV_BACKEND_FLASHINFER_MLA) {
      bad_enum("attention_backend", c.attention_backend, "a pdkv_attention_backend_t: 0..5 or 100 custom");
    }
    const auto b = static_cast<core::Backend>(c.attention_backend);
    core::check_backend_for_model(model, b);
    core::apply_backend(e, b);
  }
  return s;
}

}  // namespace pdkv::capi
