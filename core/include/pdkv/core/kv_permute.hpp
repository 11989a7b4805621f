// Receive-side permutation of attention KV blocks between the two layouts (engine_metadata.hpp
// KvLayout): HND holds a kernel block as heads x tokens x head bytes, NHD as tokens x heads x
// head bytes. When P and D use different layouts, D reads P's bytes into its blocks as P lays
// them out and permutes each such block into its own layout after receipt (vLLM's
// enable_permute_local_kv); the transfer plan lists those blocks (transfer_plan.hpp).
#pragma once

#include <cstdint>
#include <span>

#include "pdkv/core/engine_metadata.hpp"

namespace pdkv::core {

// The permutation of one D kernel block: its `heads` KV heads (D's heads per rank) of `tokens`
// tokens (D's kernel block size) of `head_bytes` bytes each (one head's K and V of one token,
// scales included), from the layout the received bytes lie in (P's) to D's own. Inactive
// (from == to) when the layouts agree.
struct BlockPermute {
  KvLayout from = KvLayout::HND;
  KvLayout to = KvLayout::HND;
  uint64_t heads = 0;
  uint64_t tokens = 0;
  uint64_t head_bytes = 0;
  bool active() const { return from != to; }
  uint64_t block_bytes() const { return heads * tokens * head_bytes; }
  friend bool operator==(const BlockPermute&, const BlockPermute&) = default;
};

// Permutes one kernel block in place: byte j of head h of token t moves from its `from` position
// to its `to` position (HND: (h * tokens + t) * head_bytes + j; NHD: (t * heads + h) *
// head_bytes + j). A no-op when the permutation is inactive. Errors: InvalidArgument (a shape with
// a zero dimension, or a block whose size is not heads x tokens x head_bytes: names both),
// Overflow.
void permute_kv_block(std::span<uint8_t> block, const BlockPermute& p);

}  // namespace pdkv::core
