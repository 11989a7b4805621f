#include "pdkv/core/exchange_clip.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

uint64_t sliding_window_blocks_to_keep(uint64_t window, uint64_t block_size) {
  if (block_size == 0) {
    fail(Status::InvalidArgument, "sliding window " + std::to_string(window) +
                                      " with block_size 0: a block holds at least one token");
  }
  return add_checked(ceil_div(window, block_size), 1, "sliding window blocks");
}

std::span<const uint64_t> clip_exchange_span(std::span<const uint64_t> ids, const ExchangeClipParams& p) {
  if (ids.empty() || !p.hma_enabled) return ids;
  switch (p.kind) {
    case GroupKind::Attention:
      return ids;
    case GroupKind::SlidingWindow: {
      if (p.sliding_window == 0) {
        fail(Status::InvalidArgument,
             "sliding-window group with window 0: pass the model's sliding_window in tokens");
      }
      const uint64_t keep = sliding_window_blocks_to_keep(p.sliding_window, p.block_size);
      if (ids.size() <= keep) return ids;
      return ids.last(static_cast<size_t>(keep));
    }
    case GroupKind::Mamba: {
      // Speculative-decoding scratch slots sit at the end; they never carry a finished state.
      const uint64_t drop = std::min<uint64_t>(p.num_speculative_blocks, ids.size() - 1);
      const std::span<const uint64_t> kept = ids.first(ids.size() - static_cast<size_t>(drop));
      if (p.cache_mode == MambaCacheMode::All) return kept;
      return kept.last(1);  // the running state
    }
  }
  fail(Status::Internal, "unknown group kind " + std::to_string(static_cast<int>(p.kind)));
}

std::vector<uint64_t> clip_exchange_blocks(const std::vector<uint64_t>& ids,
                                           const ExchangeClipParams& p) {
  const std::span<const uint64_t> kept = clip_exchange_span(ids, p);
  return {kept.begin(), kept.end()};
}

}  // namespace pdkv::core
