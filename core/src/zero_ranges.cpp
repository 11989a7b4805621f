#include "pdkv/core/zero_ranges.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

std::vector<ZeroRange> receive_zero_ranges(const std::vector<uint64_t>& local_blocks,
                                           uint64_t tokens_per_block, uint64_t block_size_ratio,
                                           uint64_t remote_kernel_len) {
  require(tokens_per_block > 0, Status::InvalidArgument, "tokens_per_block is 0");
  require(block_size_ratio > 0, Status::InvalidArgument, "block_size_ratio is 0");
  if (tokens_per_block % block_size_ratio != 0) {
    fail(Status::InvalidArgument,
         "local tokens_per_block " + std::to_string(tokens_per_block) +
             " is not a multiple of block_size_ratio " + std::to_string(block_size_ratio));
  }
  const uint64_t capacity = mul_checked(local_blocks.size(), block_size_ratio, "sub-blocks");
  const uint64_t covered = std::min(capacity, remote_kernel_len);
  const uint64_t cb = covered / block_size_ratio;
  const uint64_t rem = covered % block_size_ratio;
  std::vector<ZeroRange> out;
  for (uint64_t i = cb; i < local_blocks.size(); ++i) {
    const uint64_t begin = (i == cb) ? rem * (tokens_per_block / block_size_ratio) : 0;
    out.push_back({local_blocks[i], begin, tokens_per_block});
  }
  return out;
}

std::vector<ZeroRange> uncovered_token_ranges(const std::vector<uint64_t>& local_blocks,
                                              uint64_t first_block_index,
                                              uint64_t tokens_per_block, uint64_t held_tokens,
                                              std::vector<TokenInterval> written) {
  require(tokens_per_block > 0, Status::InvalidArgument, "tokens_per_block is 0");
  // A reversed interval would move the walk's cursor backwards past bytes already emitted and
  // return overlapping ranges; an empty one (begin == end) writes nothing and is harmless.
  for (size_t k = 0; k < written.size(); ++k) {
    if (written[k].begin > written[k].end) {
      fail(Status::InvalidArgument,
           "written interval " + std::to_string(k) + " [" + std::to_string(written[k].begin) +
               ", " + std::to_string(written[k].end) + ") is reversed (begin > end)");
    }
  }
  std::sort(written.begin(), written.end(),
            [](const TokenInterval& a, const TokenInterval& b) { return a.begin < b.begin; });
  std::vector<ZeroRange> out;
  for (uint64_t i = 0; i < local_blocks.size(); ++i) {
    if (local_blocks[i] == 0) continue;
    const uint64_t idx = add_checked(first_block_index, i, "block index");
    const uint64_t lo = mul_checked(idx, tokens_per_block, "block token offset");
    const uint64_t hi = add_checked(lo, tokens_per_block, "block token end");
    // Walk [lo, hi) and emit the gaps between D's own prefix and the written intervals.
    uint64_t cur = std::max(lo, std::min(held_tokens, hi));
    for (const auto& w : written) {
      if (cur >= hi) break;
      if (w.begin == w.end || w.end <= cur || w.begin >= hi) continue;  // empty: writes nothing
      if (w.begin > cur) out.push_back({local_blocks[i], cur - lo, w.begin - lo});
      cur = std::max(cur, w.end);
    }
    if (cur < hi) out.push_back({local_blocks[i], cur - lo, hi - lo});
  }
  return out;
}

}  // namespace pdkv::core
