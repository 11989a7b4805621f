#include "pdkv/core/geometry.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>

#include "pdkv/core/backends.hpp"
#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

namespace {

// GQA heads held by one rank. vLLM's QKVParallelLinear divides heads by TP when TP < K and
// replicates one head on TP/K ranks otherwise; both need exact divisibility.
uint32_t kv_heads_per_rank(const ModelDesc& m, uint32_t tp) {
  const uint32_t k = m.attention.num_kv_heads;
  if (m.attention.use_mla) return 1;  // one latent head, replicated on every rank
  if (tp >= k) {
    if (tp % k != 0) {
      fail(Status::HeadsNotDivisible, "model '" + m.name + "': tp_size " + std::to_string(tp) +
                                          " is not a multiple of num_kv_heads " + std::to_string(k) +
                                          " (KV heads are replicated only in whole copies; use a tp_size that "
                                          "divides or is a multiple of " + std::to_string(k) + ")");
    }
    return 1;
  }
  if (k % tp != 0) {
    fail(Status::HeadsNotDivisible, "model '" + m.name + "': num_kv_heads " + std::to_string(k) +
                                        " is not divisible by tp_size " + std::to_string(tp) +
                                        " (use a tp_size that divides " + std::to_string(k) + ")");
  }
  return k / tp;
}

uint64_t lcm_checked(uint64_t a, uint64_t b) {
  return mul_checked(a / std::gcd(a, b), b, "lcm of mamba chunk size and block alignment");
}

std::string setting_block_size_line(uint64_t b) {
  return "Setting attention block size to " + std::to_string(b) +
         " tokens to ensure that attention page size is >= mamba page size.";
}

std::string padding_line(double percent) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", percent);
  return std::string("Padding mamba page size by ") + buf +
         "% to ensure that mamba page size and attention page size are exactly equal.";
}

// Platform._align_hybrid_block_size: raises g.block_size so one attention page holds one Mamba
// page, then pads the Mamba page up to the attention page.
void align_hybrid_block_size(const ModelDesc& m, const EngineConfig& e, const GeometryOptions& opt,
                             EngineGeometry& g) {
  const uint64_t a = g.attn_bytes_per_token;
  const uint64_t page = g.mamba_page_bytes;
  // A user --block-size raises the alignment (rounding to the user's size keeps it a multiple).
  g.align = std::max(min_kernel_block_size(e), static_cast<uint32_t>(g.block_size));
  if (m.attention.use_mla) g.align = std::max<uint32_t>(g.align, 128);  // #50000

  const uint64_t align_bytes = mul_checked(g.align, a, "block alignment * attention bytes per token");
  if (e.cache_mode == MambaCacheMode::All) {
    const uint64_t base = opt.user_mamba_block_size != 0 ? opt.user_mamba_block_size
                          : m.mamba.chunk_size != 0      ? m.mamba.chunk_size
                                                         : 2048;
    const uint64_t chunk = lcm_checked(base, g.align);
    g.min_block_size = mul_checked(chunk, ceil_div(ceil_div(page, a), chunk), "chunk-aligned block size");
    g.mamba_block_size = g.min_block_size;
  } else {
    g.min_block_size = mul_checked(g.align, ceil_div(page, align_bytes), "aligned block size");
  }

  if (g.block_size < g.min_block_size) {
    g.block_size = g.min_block_size;
    g.block_size_raised = true;
    g.log_lines.push_back(setting_block_size_line(g.block_size));
  }
  if (e.cache_mode == MambaCacheMode::Align) g.mamba_block_size = g.block_size;

  g.attn_page_bytes = mul_checked(g.block_size, a, "attention page bytes");
  g.mamba_page_padded_bytes = g.attn_page_bytes;
  if (g.attn_page_bytes != page) {
    g.padding_percent = 100.0 * static_cast<double>(g.attn_page_bytes - page) / static_cast<double>(page);
    g.log_lines.push_back(padding_line(g.padding_percent));
  }
}

}  // namespace

EngineGeometry derive_geometry(const ModelDesc& m, const EngineConfig& e, const GeometryOptions& opt) {
  validate_model(m);
  validate_engine_config(e);
  validate_engine_formats(m, e);
  require(opt.user_mamba_block_size <= kEngineMaxUserBlockSize, Status::InvalidArgument,
          "engine config: user_mamba_block_size = " + std::to_string(opt.user_mamba_block_size) +
              " exceeds the maximum " + std::to_string(kEngineMaxUserBlockSize) + " tokens");
  require(e.preferred_block_size > 0 || e.user_block_size > 0, Status::InvalidArgument,
          "preferred_block_size 0 with no user block size (apply_backend sets it)");

  EngineGeometry g;
  g.tp_size = e.tp_size;
  g.kv_heads_per_rank = kv_heads_per_rank(m, e.tp_size);
  // The KV element format decides a head's bytes; the block-size rule, its log lines and the
  // head-sliced reads all follow from attn_bytes_per_token.
  g.kv_head_bytes_per_token = kv_head_bytes_per_token(m, e);
  g.attn_bytes_per_token = mul_checked(g.kv_heads_per_rank, g.kv_head_bytes_per_token, "attention bytes per token");
  // Phase 1: the backend's preferred size unless the user chose one.
  g.block_size = e.user_block_size != 0 ? e.user_block_size : e.preferred_block_size;

  g.hybrid = m.is_hybrid();
  if (g.hybrid) {
    g.mamba = derive_mamba_state(m, e);
    g.mamba_page_bytes = add_checked(g.mamba.conv_bytes, g.mamba.ssm_bytes, "mamba page bytes");
    require(g.mamba_page_bytes > 0, Status::Internal, "model '" + m.name + "': mamba page of 0 bytes");
    align_hybrid_block_size(m, e, opt, g);
  } else {
    g.attn_page_bytes = mul_checked(g.block_size, g.attn_bytes_per_token, "attention page bytes");
  }

  g.kernel_block_size = select_kernel_block_size(e, g.block_size);
  g.physical_per_logical = g.block_size / g.kernel_block_size;
  g.kernel_page_bytes = g.attn_page_bytes / g.physical_per_logical;
  if (m.mixes_mla()) {
    const uint64_t bits = resolved_kv_element_bits(m, e);
    require(uint64_t{m.mla_head_size} * bits % 8 == 0, Status::InvalidArgument,
            "model '" + m.name + "': mla_head_size = " + std::to_string(m.mla_head_size) + " elements of " +
                std::to_string(bits) + " bits are not a whole number of bytes");
    g.mla_bytes_per_token = uint64_t{m.mla_head_size} * bits / 8;
    g.mla_kernel_page_bytes = mul_checked(g.kernel_block_size, g.mla_bytes_per_token, "MLA kernel page bytes");
  }
  return g;
}

uint64_t select_kernel_block_size(const EngineConfig& e, uint64_t block_size) {
  require(block_size > 0, Status::InvalidArgument, "block size 0 is invalid");
  if (kernel_block_size_supported(e, block_size)) return block_size;
  std::vector<uint32_t> sizes = e.kernel_block_sizes;
  std::sort(sizes.rbegin(), sizes.rend());
  for (uint32_t s : sizes) {
    if (s != 0 && block_size % s == 0) return s;
  }
  std::string supported;
  for (uint32_t s : e.kernel_block_sizes) supported += (supported.empty() ? "" : ", ") + std::to_string(s);
  if (supported.empty()) supported = "multiples of " + std::to_string(e.kernel_block_multiple_of);
  fail(Status::Incompatible, "no kernel block size of the attention backend divides block size " +
                                 std::to_string(block_size) + " (supported: " + supported +
                                 "); choose a --block-size that is a multiple of one of them");
}

uint64_t block_size_ratio(uint64_t local_kernel_bs, uint64_t remote_kernel_bs) {
  require(local_kernel_bs > 0 && remote_kernel_bs > 0, Status::InvalidArgument,
          "kernel block sizes must be > 0 (local " + std::to_string(local_kernel_bs) + ", remote " +
              std::to_string(remote_kernel_bs) + ")");
  if (local_kernel_bs % remote_kernel_bs != 0) {
    fail(Status::Incompatible, "local kernel block size " + std::to_string(local_kernel_bs) +
                                   " is not a multiple of remote kernel block size " +
                                   std::to_string(remote_kernel_bs) +
                                   " (only remote (prefill) blocks no larger than, and dividing, local (decode) "
                                   "blocks are supported)");
  }
  return local_kernel_bs / remote_kernel_bs;
}

bool block_sizes_are_multiples(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return false;
  return a % b == 0 || b % a == 0;
}

}  // namespace pdkv::core
