// Engine settings: defaults and backend names.
#include <limits>
#include <string>

#include "boundary.hpp"
#include "pdkv/core/backends.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/geometry.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

static_assert(static_cast<int>(core::Backend::FlashAttention) == PDKV_BACKEND_FLASH_ATTN, "backend enums drifted");
static_assert(static_cast<int>(core::Backend::Triton) == PDKV_BACKEND_TRITON, "backend enums drifted");
static_assert(static_cast<int>(core::Backend::FlashInfer) == PDKV_BACKEND_FLASHINFER, "backend enums drifted");
static_assert(static_cast<int>(core::Backend::FlashMLA) == PDKV_BACKEND_FLASHMLA, "backend enums drifted");
static_assert(static_cast<int>(core::Backend::CutlassMLA) == PDKV_BACKEND_CUTLASS_MLA, "backend enums drifted");
static_assert(static_cast<int>(core::Backend::FlashInferMLA) == PDKV_BACKEND_FLASHINFER_MLA, "backend enums drifted");
static_assert(static_cast<int>(core::MambaCacheMode::All) == PDKV_MAMBA_CACHE_ALL, "cache mode enums drifted");
static_assert(static_cast<int>(core::ConvLayout::SD) == PDKV_CONV_LAYOUT_SD, "conv layout enums drifted");
static_assert(static_cast<int>(core::ElementFormat::Fp8E5m2) == PDKV_FORMAT_FP8_E5M2 &&
                  static_cast<int>(core::ElementFormat::BFloat16) == PDKV_FORMAT_BFLOAT16 &&
                  static_cast<int>(core::kLastElementFormat) == PDKV_FORMAT_INT4_PER_TOKEN_HEAD,
              "element format enums drifted");

extern "C" {

PDKV_API pdkv_status_t pdkv_engine_config_init(pdkv_engine_config_t* config, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(config, "config");
    // Defaults mirror core::EngineConfig so C and C++ callers start from the same engine.
    const core::EngineConfig d;
    *config = pdkv_engine_config_t{};
    config->struct_size = sizeof(pdkv_engine_config_t);
    config->tp_size = d.tp_size;
    config->attention_backend = PDKV_BACKEND_FLASH_ATTN;
    config->preferred_block_size = d.preferred_block_size;
    config->kernel_block_sizes = nullptr;
    config->num_kernel_block_sizes = 0;
    config->kernel_block_multiple_of = d.kernel_block_multiple_of;
    config->mamba_cache_mode = PDKV_MAMBA_CACHE_NONE;
    config->conv_layout = PDKV_CONV_LAYOUT_DS;
  });
}

PDKV_API const char* pdkv_backend_name(int32_t backend) {
  if (backend == PDKV_BACKEND_CUSTOM) return "custom";
  if (backend < PDKV_BACKEND_FLASH_ATTN || backend > PDKV_BACKEND_FLASHINFER_MLA) return "unknown";
  return core::backend_name(static_cast<core::Backend>(backend));
}

PDKV_API const char* pdkv_element_format_name(int32_t format) {
  if (format < 0 || format > static_cast<int32_t>(core::kLastElementFormat)) return "unknown";
  return core::element_format_name(static_cast<core::ElementFormat>(format));
}

PDKV_API pdkv_status_t pdkv_element_format_from_name(const char* name, int32_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(name, "name");
    require_non_null(out, "out");
    *out = static_cast<int32_t>(core::element_format_from_name(name));
  });
}

PDKV_API pdkv_status_t pdkv_backend_from_name(const char* name, int32_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(name, "name");
    require_non_null(out, "out");
    *out = static_cast<int32_t>(core::backend_from_name(name));
  });
}

PDKV_API pdkv_status_t pdkv_backend_kernel_block_size(int32_t backend, uint64_t block_size, uint64_t* out,
                                                      pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    if (backend < PDKV_BACKEND_FLASH_ATTN || backend > PDKV_BACKEND_FLASHINFER_MLA)
      core::fail(core::Status::InvalidArgument,
                 "backend " + std::to_string(backend) +
                     " is not a named attention backend (custom kernel sizes have no fixed answer)");
    core::EngineConfig e;
    core::apply_backend(e, static_cast<core::Backend>(backend));
    *out = core::select_kernel_block_size(e, block_size);
  });
}

}  // extern "C"
