// Attention backends and the block sizes their kernels accept. The hybrid block-size rule
// (geometry.hpp) rounds to the backend's smallest kernel block, and the kernel block a logical
// block is split into (physical blocks per logical) depends on the sizes listed here.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "pdkv/core/model.hpp"

namespace pdkv::core {

enum class Backend : int32_t {
  FlashAttention = 0,  // vLLM FLASH_ATTN: MultipleOf(16)
  Triton = 1,          // vLLM TRITON_ATTN: MultipleOf(16)
  FlashInfer = 2,      // vLLM FLASHINFER: [16, 32, 64] (no Blackwell trtllm-gen extras)
  FlashMLA = 3,        // vLLM FLASHMLA: [64]
  CutlassMLA = 4,      // vLLM CUTLASS_MLA: [128]
  FlashInferMLA = 5,   // vLLM FLASHINFER_MLA: [32, 64]
};

struct BackendInfo {
  Backend backend;
  const char* name;                   // pdkv spelling, e.g. "flash_attn"
  const char* vllm_name;              // vLLM enum spelling, e.g. "FLASH_ATTN" (also accepted)
  uint32_t preferred_block_size;      // get_preferred_block_size(16)
  std::vector<uint32_t> kernel_block_sizes;  // explicit sizes; empty means MultipleOf(multiple_of)
  uint32_t multiple_of;               // only meaningful when kernel_block_sizes is empty
  bool mla;                           // an MLA backend (only for MLA models)
};

// All backends, in enum order.
const std::vector<BackendInfo>& backends();
const BackendInfo& backend_info(Backend b);
const char* backend_name(Backend b) noexcept;

// Case-insensitive; accepts the pdkv name or the vLLM enum name ("flashinfer", "FLASHINFER",
// "flash_attn", "FLASH_ATTN", ...). Unknown names: NotFound listing the valid names.
Backend backend_from_name(std::string_view name);

// Copies the backend's preferred block size and supported kernel block sizes into `e`.
void apply_backend(EngineConfig& e, Backend b);

// Throws Incompatible when an MLA backend is paired with a non-MLA model or the reverse.
void check_backend_for_model(const ModelDesc& m, Backend b);

// Kernel-size rules of an engine config (what apply_backend wrote, or set by hand).
// An explicit kernel_block_sizes list wins over kernel_block_multiple_of.
bool kernel_block_size_supported(const EngineConfig& e, uint64_t block_size);
uint32_t min_kernel_block_size(const EngineConfig& e);

}  // namespace pdkv::core
