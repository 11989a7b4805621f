// Scheduler-side helpers (vllm-semantics.md §8): the Mamba align-mode block-aligned chunk split
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

// The main-branch rewrite. Parameters that the reference leaves implicit are explicit here:
//  * floor_unit: the unit a non-final chunk end is floored to when no whole block fits in the
//    chunk (bs > min(max_num_scheduled_tokens, long_prefill_token_threshold)); 0 means block_size;
//  * tail_hash_block_size: fine-grained (partial-tail) prefix hits; 0 means off.
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
};
// New tokens for this step, possibly 0 (defer the request). Rules, with end = start + new and
// prefill_end = max(prompt, num_tokens - 1), last = num_tokens - num_tokens % bs (EAGLE: - bs):
//  1. decode steps (start >= prefill_end) and async loads pass unchanged;
//  2. a non-final chunk end (end < prefill_end) is floored to bs when that floor is > start or
//     bs <= min(max_sched, threshold); otherwise to floor_unit;
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
