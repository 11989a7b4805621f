// One request of an engine described once (pdkv/engine.h): from what the D engine's scheduler
// holds per KV-cache group (logical block ids as its block table has them, P's exported ids, the
// prompt length and D's own prefix-cache hit) to the per-group inputs of compile_transfer_plan.
// This is where the rules a caller of the low-level calls must apply by hand live:
//  * the N-1 rule: with Mamba state P computes N-1 of N prompt tokens (D recomputes the last,
//    which regenerates the state), else all N;
//  * attention groups: D's blocks past its hit and P's blocks, logical -> kernel ids with each
//    side's own blocks-per-logical, D's first listed block named explicitly;
//  * Mamba groups, per cache mode: D's block table past its hit, exchange-clipped (speculative
//    scratch slots dropped; "none"/"align" keep the running state only); P's list as P exported it
//    (already clipped: one running state, or one slot per position in "all" mode).
// Requests that do not fit the engine (a hit with prefix caching off, ids past the engine's
// blocks, more ids than the prompt can fill, which is what kernel ids look like) are
// InvalidArgument errors naming the value and what to pass instead.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/kv_cache_groups.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::core {

// One side of the pair: its metadata (block sizes, block counts, cache mode, prefix caching) and
// its speculative tokens (Mamba scratch slots at the end of each Mamba list).
struct EngineSide {
  const EngineMetadata* metadata = nullptr;
  uint64_t num_speculative_tokens = 0;
};

// One group of the request, in the engine's group order.
struct EngineRequestGroup {
  // D's block table for the group: logical ids from the request's first block (its prefix-cache
  // hit included), Mamba lists with their null placeholders and speculative slots.
  std::span<const uint64_t> local_block_ids;
  // P's logical ids of the group as P exported them (vLLM's remote_block_ids: exchange-clipped).
  std::span<const uint64_t> remote_block_ids;
};

struct EngineRequest {
  std::span<const EngineRequestGroup> groups;
  uint64_t num_prompt_tokens = 0;          // N
  uint64_t num_local_computed_tokens = 0;  // D's prefix-cache hit, whole blocks
};

// Tokens P computes of an N-token prompt (the N-1 rule). N 0 is InvalidArgument.
uint64_t engine_remote_computed_tokens(uint64_t num_prompt_tokens, bool hybrid);

// The plan groups of one request (see the header comment). `groups` are the engine's
// (kv_cache_groups of its model); local is the D rank, remote any P rank of the peer engine.
// Errors: InvalidArgument as above, naming the group, the value and what to pass instead;
// Overflow.
std::vector<PlanGroup> engine_request_groups(const std::vector<KvCacheGroup>& groups, const EngineSide& local,
                                             const EngineSide& remote, const EngineRequest& request);

// The same groups without copying anything, for the per-request hot path: `out` is cleared and
// refilled with views whose ids are parts of the request's own arrays (D's table past its hit, a
// Mamba list's clipped run) and whose regions are `groups`' own, valid while both live. Given
// `out` with the capacity of one earlier call, nothing is allocated unless the request is
// refused. engine_request_groups is this plus owned copies (one derivation, not two).
void engine_request_views(const std::vector<KvCacheGroup>& groups, const EngineSide& local, const EngineSide& remote,
                          const EngineRequest& request, std::vector<PlanGroupView>& out);

}  // namespace pdkv::core
