#include "pdkv/core/backends.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "pdkv/core/error.hpp"
#include "ascii_lower.hpp"

namespace pdkv::core {

const std::vector<BackendInfo>& backends() {
  // Preferred size follows vLLM's get_preferred_block_size(16): 16 when the backend accepts it,
  // else its smallest kernel size (FlashMLA 64, CUTLASS-MLA 128, FlashInfer-MLA 32).
  static const std::vector<BackendInfo> kBackends = {
      {Backend::FlashAttention, "flash_attn", "FLASH_ATTN", 16, {}, 16, false},
      {Backend::Triton, "triton", "TRITON_ATTN", 16, {}, 16, false},
      {Backend::FlashInfer, "flashinfer", "FLASHINFER", 16, {16, 32, 64}, 0, false},
      {Backend::FlashMLA, "flashmla", "FLASHMLA", 64, {64}, 0, true},
      {Backend::CutlassMLA, "cutlass_mla", "CUTLASS_MLA", 128, {128}, 0, true},
      {Backend::FlashInferMLA, "flashinfer_mla", "FLASHINFER_MLA", 32, {32, 64}, 0, true},
  };
  return kBackends;
}

const BackendInfo& backend_info(Backend b) {
  for (const auto& info : backends()) {
    if (info.backend == b) return info;
  }
  fail(Status::InvalidArgument, "unknown backend value " + std::to_string(static_cast<int32_t>(b)));
}

const char* backend_name(Backend b) noexcept {
  for (const auto& info : backends()) {
    if (info.backend == b) return info.name;
  }
  return "unknown";
}


Backend backend_from_name(std::string_view name) {
  const std::string n = ascii_lower(name);
  std::string valid;
  for (const auto& info : backends()) {
    if (n == info.name || n == ascii_lower(info.vllm_name)) return info.backend;
    valid += (valid.empty() ? "" : ", ") + std::string(info.name);
  }
  fail(Status::NotFound, "unknown attention backend '" + std::string(name) + "' (valid: " + valid + ")");
}

void apply_backend(EngineConfig& e, Backend b) {
  const BackendInfo& info = backend_info(b);
  e.preferred_block_size = info.preferred_block_size;
  e.kernel_block_sizes = info.kernel_block_sizes;
  // Keep multiple_of meaningful even for list backends so no reader ever divides by zero.
  e.kernel_block_multiple_of = info.kernel_block_sizes.empty() ? info.multiple_of
                                                               : info.kernel_block_sizes.front();
}

void check_backend_for_model(const ModelDesc& m, Backend b) {
  const BackendInfo& info = backend_info(b);
  if (info.mla && !m.attention.use_mla) {
    fail(Status::Incompatible, "backend '" + std::string(info.name) + "' is an MLA backend but model '" +
                                   m.name + "' does not use MLA (use flash_attn, triton or flashinfer)");
  }
  if (!info.mla && m.attention.use_mla) {
    fail(Status::Incompatible, "backend '" + std::string(info.name) + "' is not an MLA backend but model '" +
                                   m.name + "' uses MLA (use flashmla, cutlass_mla or flashinfer_mla)");
  }
}

bool kernel_block_size_supported(const EngineConfig& e, uint64_t block_size) {
  if (block_size == 0) return false;
  if (!e.kernel_block_sizes.empty()) {
    return std::find(e.kernel_block_sizes.begin(), e.kernel_block_sizes.end(), block_size) !=
           e.kernel_block_sizes.end();
  }
  require(e.kernel_block_multiple_of > 0, Status::InvalidArgument,
          "kernel_block_multiple_of is 0 and kernel_block_sizes is empty: no kernel block size is supported");
  return block_size % e.kernel_block_multiple_of == 0;
}

uint32_t min_kernel_block_size(const EngineConfig& e) {
  if (!e.kernel_block_sizes.empty()) {
    const uint32_t m = *std::min_element(e.kernel_block_sizes.begin(), e.kernel_block_sizes.end());
    require(m > 0, Status::InvalidArgument, "kernel_block_sizes contains 0");
    return m;
  }
  require(e.kernel_block_multiple_of > 0, Status::InvalidArgument,
          "kernel_block_multiple_of is 0 and kernel_block_sizes is empty: no kernel block size is supported");
  return e.kernel_block_multiple_of;
}

}  // namespace pdkv::core
