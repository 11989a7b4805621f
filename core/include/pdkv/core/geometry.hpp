// Per-engine geometry of a (hybrid) model: attention bytes per token, the Mamba page, the
// logical attention block size vLLM picks so one attention page holds one Mamba state
// (Platform._align_hybrid_block_size), the padded pages, and the kernel block each logical block
// is split into (select_common_block_size). See docs/hybrid-geometry.md §2-§4.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/mamba_state.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::core {

// Inputs vLLM reads that EngineConfig does not carry.
struct GeometryOptions {
  uint32_t user_mamba_block_size = 0;  // --mamba-block-size ("all" mode chunk); 0: model chunk size
};

struct EngineGeometry {
  uint32_t tp_size = 1;
  uint32_t kv_heads_per_rank = 0;      // max(1, K/TP); MLA: 1
  // One KV head's entry per token (kv_head_bytes_per_token): its K and V elements plus the
  // per-token-head extras packed beside them (520 for int8_per_token_head at head size 256).
  uint64_t kv_head_bytes_per_token = 0;
  uint64_t attn_bytes_per_token = 0;   // kv_heads_per_rank * kv_head_bytes_per_token
  bool hybrid = false;
  MambaState mamba;                    // type None for pure-attention models
  uint64_t mamba_page_bytes = 0;       // unpadded conv + ssm bytes (0 when not hybrid)
  uint32_t align = 0;                  // rounding unit of the block-size rule (hybrid only)
  uint64_t min_block_size = 0;         // B: smallest block whose attention page holds a Mamba page
  uint64_t block_size = 0;             // logical block size (tokens) the engine ends up with
  bool block_size_raised = false;      // block_size was raised to B (vLLM logs a line)
  // Tokens per Mamba state: "all" -> B, "align" -> block_size, "none" -> 0 (one state per
  // request, vLLM uses max_model_len).
  uint64_t mamba_block_size = 0;
  uint64_t attn_page_bytes = 0;        // block_size * attn_bytes_per_token (logical page)
  uint64_t mamba_page_padded_bytes = 0;  // == attn_page_bytes for hybrids, 0 otherwise
  double padding_percent = 0.0;        // 100 * (padded - page) / page
  uint64_t kernel_block_size = 0;      // select_common_block_size(block_size)
  uint64_t physical_per_logical = 1;   // ppl = block_size / kernel_block_size
  uint64_t kernel_page_bytes = 0;      // attn_page_bytes / ppl (block_len in the handshake)
  // MLA-typed layers of a GQA model (ModelDesc::mla_head_size): bytes per token of their one
  // replicated latent (mla_head_size * kv dtype, the same at every TP) and their kernel page
  // (kernel_block_size * mla_bytes_per_token: one KV cache group, one block size). 0 otherwise.
  // The latent takes the KV element bits (no per-token-head extras: those are refused).
  uint64_t mla_bytes_per_token = 0;
  uint64_t mla_kernel_page_bytes = 0;
  std::vector<std::string> log_lines;  // vLLM's INFO lines for this engine, verbatim
};

// Derives the geometry of `m` on engine `e`. Errors: InvalidArgument (bad model/engine values,
// naming them; a KV element format whose K/V of a head are not whole bytes, or per-token-head
// extras with MLA latents: kv_head_bytes_per_token), HeadsNotDivisible (KV heads vs TP), errors of derive_mamba_state, Overflow,
// Incompatible (no kernel block size divides the logical block).
EngineGeometry derive_geometry(const ModelDesc& m, const EngineConfig& e, const GeometryOptions& opt = {});

// select_common_block_size for one backend: `block_size` itself if the engine's kernel rules
// accept it, else the largest explicitly listed size that divides it. Incompatible otherwise.
uint64_t select_kernel_block_size(const EngineConfig& e, uint64_t block_size);

// vLLM's block_size_ratio = local_kernel_bs / remote_kernel_bs. Both must be > 0 and the remote
// block must divide the local one (only "P blocks <= D blocks" is served): Incompatible naming
// both sizes otherwise.
uint64_t block_size_ratio(uint64_t local_kernel_bs, uint64_t remote_kernel_bs);

// True when one block size is a multiple of the other (either direction); false for 0.
bool block_sizes_are_multiples(uint64_t a, uint64_t b);

}  // namespace pdkv::core
