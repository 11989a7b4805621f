// Scheduler-side helpers (docs/semantics.md §8): the Mamba align-mode block-aligned chunk split
// and the N-1 rule of P/D with Mamba state.
#pragma once

#include <cstdint>

namespace pdkv::core {

// ---- Block-aligned chunk split (align mode: states are only cached at block boundaries) ----

// The v0604 form (#42554): external computed tokens count as computed, and the split is skipped
// for async connector loads (NIXL), whose first local chunk starts from N-1.
struct AlignedSplitV0604Input {
  uint64_t num_computed_tokens = 0;
  uint64_t num_new_local_computed_tokens = 0;
  uint64_t num_external_computed_tokens = 0;
  uint64_t num_new_tokens = 0;      // proposed by budget / threshold
  uint64_t num_prompt_tokens = 0;
  uint64_t num_tokens = 0;          // prompt + output so far
  uint64_t block_size = 0;          // Mamba block size (tokens)
  bool use_eagle = false;           // EAGLE keeps one block back
  bool load_kv_async = false;       // connector loads asynchronously: no split
};
// Returns the (possibly reduced) number of new tokens. block_size 0 is InvalidArgument.
uint64_t mamba_aligned_split_v0604(const AlignedSplitV0604Input& in);

// The main-branch rewrite, as vLLM main has it: Scheduler._mamba_block_aligned_split in
// vllm/v1/core/sched/scheduler.py at commit 487ecf187 (the rewrite of PR #51113, merged as
// c56f169, shipped in v0.28.0). There a non-final chunk end is floored to the Mamba block only
// when the floor still moves past `start` or when a whole block fits in the largest chunk
// (min(max_num_scheduled_tokens, long_prefill_token_threshold)); a block wider than every chunk
// leaves the end where the budget put it, so the request advances sub-block and re-aligns at the
// next boundary instead of waiting for a budget that can never come. (The older form above, and
// the copies of scheduler.py before that PR, floor unconditionally and return 0 then.)
// Parameters that the reference leaves implicit are explicit here:
//  * floor_unit: a finer unit to floor such a sub-block chunk end to (e.g. the kernel's chunk
//    size), used only when that floor still moves past `start`; 0 means no floor (vLLM main);
//  * tail_hash_block_size: fine-grained (partial-tail) prefix hits; 0 means off;
//  * defer_oversized_block: the pre-#51113 behaviour, for an engine that wants it: when the
//    floor (to floor_unit, or to the block when floor_unit is 0) leaves nothing, return 0 and
//    let the request wait. With a block wider than every chunk such a request waits forever
//    unless the budget changes, which is why it is off by default.
struct AlignedSplitInput {
  uint64_t start = 0;                 // tokens already computed (incl. external)
  uint64_t num_new_tokens = 0;        // proposed by budget / threshold
  uint64_t num_prompt_tokens = 0;
  uint64_t num_tokens = 0;
  uint64_t block_size = 0;
  uint64_t floor_unit = 0;
  uint64_t tail_hash_block_size = 0;
  uint64_t shared_prefix_tokens = 0;  // junction of a shared prefix (0: none)
  uint64_t max_num_scheduled_tokens = 0;      // 0: unlimited
  uint64_t long_prefill_token_threshold = 0;  // 0: none
  bool use_eagle = false;
  bool load_kv_async = false;
  bool defer_oversized_block = false;
};
// New tokens for this step, possibly 0 (the request waits). Rules, with end = start + new and
// prefill_end = max(prompt, num_tokens - 1), last = num_tokens - num_tokens % bs (EAGLE: - bs),
// limit = min(max_sched, threshold) (0s ignored):
//  1. decode steps (start >= prefill_end) and async loads pass unchanged;
//  2. a non-final chunk end (end < prefill_end) is floored to bs when that floor is > start or
//     bs <= limit (then 0 is possible: a later step with more budget reaches the boundary);
//     otherwise the block is wider than every chunk and the end is floored to floor_unit when
//     that is > start, else left as is; with defer_oversized_block the step returns 0 instead
//     of a chunk that no floor keeps;
//  3. the end stops at the earliest point inside (start, end) among: the next block boundary (if
//     start is mid-block), last, the partial-tail hash boundary (prefill_end floored to
//     tail_hash_block_size, when on and > last), the shared-prefix junction floored to bs.
uint64_t mamba_aligned_split(const AlignedSplitInput& in);

// ---- N-1 rule ----

// D: tokens P will provide. Mamba and N > 1: (N-1) - computed (D recomputes the last token, which
// regenerates the state); otherwise N - computed. Never negative.
uint64_t d_num_new_matched_tokens(uint64_t num_prompt_tokens, uint64_t num_computed_tokens,
                                  bool has_mamba);

// P side of a request that will be decoded remotely.
struct RemoteDecodePrefill {
  uint64_t num_prompt_tokens = 0;
  uint64_t max_tokens = 0;
  bool truncated = false;  // the N-1 truncation was applied (makes the step idempotent)
};
// Mamba: truncates the prompt to N-1 (if N > 1) and sets max_tokens to 1, once; applying it again
// changes nothing. Non-Mamba models only get max_tokens = 1.
RemoteDecodePrefill truncate_for_remote_decode(RemoteDecodePrefill req, bool has_mamba);

// What P schedules for that request given its own prefix-cache hit.
struct RemoteDecodePrefillPlan {
  uint64_t num_prompt_tokens = 0;  // after truncation
  uint64_t computed_tokens = 0;    // usable local hit
  uint64_t new_tokens = 0;         // >= 1
};
// vLLM issue #53514: with N+1 prompt tokens the lookup (capped at num_tokens-1 = N BEFORE the
// truncation) hits N tokens, the truncation leaves N, and 0 new tokens trip an assert. pdkv caps
// the hit AFTER truncation at the last whole block strictly before the last prompt token, so at
// least one token (and the state at the end) is always computed. block_size 0 is InvalidArgument;
// a 0-token prompt is InvalidArgument.
RemoteDecodePrefillPlan plan_remote_decode_prefill(uint64_t num_prompt_tokens,
                                                   uint64_t local_hit_tokens,
                                                   uint64_t block_size, bool has_mamba);

}  // namespace pdkv::core
