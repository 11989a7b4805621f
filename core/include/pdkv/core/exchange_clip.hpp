// Exchange clipping (docs/semantics.md §8, get_exchange_clipped_blocks): which of a request's
// logical block ids are worth exchanging. P clips what it exports as remote_block_ids; D clips its
// unhashed local blocks the same way, so both sides pair the same positions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::core {

struct ExchangeClipParams {
  GroupKind kind = GroupKind::Attention;
  bool hma_enabled = true;             // without the hybrid manager lists pass unchanged
  uint64_t sliding_window = 0;         // tokens (SlidingWindow groups)
  uint64_t block_size = 0;             // tokens per logical block (SlidingWindow groups)
  MambaCacheMode cache_mode = MambaCacheMode::None;  // Mamba groups
  uint64_t num_speculative_blocks = 0;               // Mamba scratch slots at the end
};

// Blocks a sliding-window group keeps: ceil(window / block_size) + 1 (the window may straddle one
// more block than it spans). w=2048, bs=16 -> 129. Zero block_size is InvalidArgument.
uint64_t sliding_window_blocks_to_keep(uint64_t window, uint64_t block_size);

// Clips one group's list:
//  * empty list or HMA off: unchanged;
//  * full attention: unchanged;
//  * sliding window: the last sliding_window_blocks_to_keep() blocks;
//  * Mamba: drop the trailing min(num_speculative_blocks, len-1) scratch slots; single-state modes
//    (none, align) keep only the last remaining slot (never empty); "all" keeps every position.
// NOT idempotent for Mamba "all" with speculative blocks: clip exactly once.
std::vector<uint64_t> clip_exchange_blocks(const std::vector<uint64_t>& ids,
                                           const ExchangeClipParams& p);

// The same clip as a part of `ids` (every clip keeps one contiguous run of the list), for callers
// that must not allocate per request (the engine-level plan_request_into).
std::span<const uint64_t> clip_exchange_span(std::span<const uint64_t> ids, const ExchangeClipParams& p);

}  // namespace pdkv::core
