// KV offloading helpers (docs/semantics.md §9, PR #38554).
#pragma once

#include <cstdint>
#include <vector>

namespace pdkv::core {

// One registered KV tensor: its size and the page (bytes per block) of the layer using it.
struct OffloadLayer {
  uint64_t tensor_bytes = 0;
  uint64_t page_bytes = 0;
};

struct OffloadGeometry {
  uint64_t num_blocks = 0;             // from the KV cache configuration, never a tensor shape
  uint64_t hash_blocks_per_block = 0;  // gpu_block_size / hash_block_size
};

// The block count comes from the cache configuration: with per-layer page sizes (HMA pools a
// Mamba layer and an attention layer in one tensor, or pads pages) tensor_bytes / page_bytes is
// NOT the block count (the bug #38554 fixed). Each layer is only checked to hold num_blocks pages.
// Errors: InvalidArgument when gpu_block_size is not a multiple of hash_block_size (naming both
// and the fix: enable prefix caching so the hybrid block size is aligned), or a size is 0;
// OutOfBounds when a tensor is smaller than num_blocks pages; Overflow.
OffloadGeometry derive_offload_geometry(uint64_t config_num_blocks, uint64_t gpu_block_size,
                                        uint64_t hash_block_size,
                                        const std::vector<OffloadLayer>& layers);

}  // namespace pdkv::core
