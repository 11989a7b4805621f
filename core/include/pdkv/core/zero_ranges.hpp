// Receive-side zeroing (docs/semantics.md §6.4): after a transfer that filled only part of the
// local attention blocks, the rest of those blocks still holds a previous request's KV. The
// engine zeroes it so no kernel ever reads stale bytes as valid context.
#pragma once

#include <cstdint>
#include <vector>

namespace pdkv::core {

// Tokens [token_begin, token_end) inside kernel block `block` (offsets within the block).
struct ZeroRange {
  uint64_t block = 0;
  uint64_t token_begin = 0;
  uint64_t token_end = 0;
  friend bool operator==(const ZeroRange&, const ZeroRange&) = default;
};

// Absolute token positions [begin, end) of a request.
struct TokenInterval {
  uint64_t begin = 0;
  uint64_t end = 0;
};

// vLLM's rule, for one attention group: covered = min(len(local)*bsr, remote_kernel_len) remote
// sub-blocks; (cb, rem) = divmod(covered, bsr); zero local[cb] from token rem*tokens/bsr onward,
// then every later local block whole. Needs tokens_per_block % bsr == 0 (InvalidArgument).
std::vector<ZeroRange> receive_zero_ranges(const std::vector<uint64_t>& local_blocks,
                                           uint64_t tokens_per_block, uint64_t block_size_ratio,
                                           uint64_t remote_kernel_len);

// Generalised to token-run coverage: local_blocks[i] holds the request's tokens from
// (first_block_index + i) * tokens_per_block. Every token of a listed block that D does not
// already hold (position < held_tokens) and that no written interval covers is returned, merged
// per block, in list order. Null blocks (id 0) are never zeroed: they hold nothing.
// Errors: InvalidArgument for tokens_per_block 0 or a reversed written interval (begin > end,
// naming its index and bounds; empty intervals are allowed), Overflow.
std::vector<ZeroRange> uncovered_token_ranges(const std::vector<uint64_t>& local_blocks,
                                              uint64_t first_block_index,
                                              uint64_t tokens_per_block, uint64_t held_tokens,
                                              std::vector<TokenInterval> written);

}  // namespace pdkv::core
