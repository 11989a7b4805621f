#include "pdkv/core/offload.hpp"

#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

OffloadGeometry derive_offload_geometry(uint64_t config_num_blocks, uint64_t gpu_block_size,
                                        uint64_t hash_block_size,
                                        const std::vector<OffloadLayer>& layers) {
  require(config_num_blocks > 0, Status::InvalidArgument, "KV cache config num_blocks is 0");
  if (gpu_block_size == 0 || hash_block_size == 0) {
    fail(Status::InvalidArgument, "gpu_block_size " + std::to_string(gpu_block_size) +
                                      " and hash_block_size " + std::to_string(hash_block_size) +
                                      " must both be > 0");
  }
  if (gpu_block_size % hash_block_size != 0) {
    fail(Status::InvalidArgument,
         "gpu_block_size " + std::to_string(gpu_block_size) +
             " is not a multiple of hash_block_size " + std::to_string(hash_block_size) +
             ": hybrid models (Mamba+Attention) need --enable-prefix-caching so the hybrid "
             "block size is aligned to the hash block size");
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    const uint64_t need = mul_checked(config_num_blocks, l.page_bytes, "offload layer bytes");
    if (l.page_bytes == 0 || l.tensor_bytes < need) {
      fail(Status::OutOfBounds,
           "layer " + std::to_string(i) + " tensor of " + std::to_string(l.tensor_bytes) +
               " bytes cannot hold num_blocks " + std::to_string(config_num_blocks) +
               " pages of " + std::to_string(l.page_bytes) + " bytes");
    }
  }
  return {config_num_blocks, gpu_block_size / hash_block_size};
}

}  // namespace pdkv::core
