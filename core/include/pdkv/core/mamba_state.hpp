// Per-rank Mamba state of one layer on one engine: conv projections (in DS layout), temporal
// (SSM) state shape, byte sizes. Geometry (page and block sizes) and the transfer reads are
// both derived from this one description.
//
// Implemented in core/src/mamba_state.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/model.hpp"

namespace pdkv::core {

// One projection of the conv channels, e.g. Mamba2's x, B or C, GDN's Q, K or V.
struct ConvProjection {
  std::string name;          // "x", "B", "C", "Q", "K", "V"
  uint64_t dim_local = 0;    // channels held by one rank
  uint64_t dim_total = 0;    // logical channels of the whole model for this projection
  bool replicated = false;   // true when each rank holds a copy of a shared slice (Mamba2
                             // B/C with n_groups < TP) instead of a disjoint shard
  uint64_t bytes = 0;        // dim_local * conv_rows * conv_dtype_bytes
  uint64_t offset = 0;       // byte offset of this projection in the page (DS layout)
};

struct MambaState {
  MambaType type = MambaType::None;
  uint32_t tp_size = 1;
  uint64_t conv_rows = 0;                    // conv_kernel - 1 (+ speculative tokens)
  uint64_t conv_dim_local = 0;               // sum of projection dim_local
  std::vector<ConvProjection> projections;   // page order: [x|B|C], [Q|K|V] or [x]
  std::vector<uint64_t> temporal_shape;      // per rank, e.g. (heads/TP, head_dim, d_state)
  uint32_t conv_dtype_bytes = 0;
  uint32_t ssm_dtype_bytes = 0;
  uint64_t conv_bytes = 0;                   // per rank, per block (all projections)
  uint64_t ssm_bytes = 0;                    // per rank, per block (temporal state)
  uint64_t page_bytes() const { return conv_bytes + ssm_bytes; }  // unpadded
};

// Derives the per-rank state for engine `e`. Errors: UnsupportedMambaType (ShortConv, Linear,
// Kda, None), UnsupportedLayout (conv layout other than DS), HeadsNotDivisible (heads, groups
// or d_inner not divisible by TP, naming both values), Overflow.
MambaState derive_mamba_state(const ModelDesc& m, const EngineConfig& e);

}  // namespace pdkv::core
