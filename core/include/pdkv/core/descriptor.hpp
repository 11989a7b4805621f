// Registration-level vocabulary shared by descriptor builders, plans and metadata.
#pragma once

#include <cstdint>

namespace pdkv::core {

// One contiguous transfer unit in an engine's registered memory: (address, length).
struct Descriptor {
  uint64_t addr = 0;
  uint64_t len = 0;
  friend bool operator==(const Descriptor&, const Descriptor&) = default;
};

// One registered KV tensor (region) of an engine, as seen by the transfer layer.
// Attention region: num_blocks kernel blocks of block_len bytes each.
// Mamba region: the same tensor viewed as num_blocks / ppl logical pages of block_len * ppl bytes
// (one whole Mamba state per logical block; HMA pads the page to the attention page).
struct Region {
  uint64_t base = 0;        // device/host address of block 0
  uint64_t block_len = 0;   // kernel page bytes
  uint64_t num_blocks = 0;  // kernel blocks
};

}  // namespace pdkv::core
