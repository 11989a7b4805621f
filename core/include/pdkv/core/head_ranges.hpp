// Which KV heads a TP rank physically holds under vLLM's contiguous GQA placement
// (docs/semantics.md §2.1, §2.3).
//   tp <= K: rank r holds the K/tp consecutive heads [r*K/tp, (r+1)*K/tp).
//   tp >  K: heads are replicated; tp/K consecutive ranks share head h = r*K/tp.
// Heads are the unit of attention transfer: a head's slice of an HND block is contiguous, so
// every byte offset in a read plan is "head index within the block" times the per-head bytes.
#pragma once

#include <cstdint>

namespace pdkv::core {

// Half-open [begin, end) range of KV head indices.
struct HeadRange {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t size() const { return end - begin; }
  friend bool operator==(const HeadRange&, const HeadRange&) = default;
};

// Heads held by `rank` of a TP group of size `tp` for a model with `total_kv_heads` (K) heads.
// Errors: tp == 0, K == 0 or rank >= tp -> InvalidArgument; tp <= K with K % tp != 0, or
// tp > K with tp % K != 0 (vLLM replicates each head exactly tp/K times) -> HeadsNotDivisible
// naming K and tp.
HeadRange physical_head_range(uint32_t tp, uint32_t total_kv_heads, uint32_t rank);

// Heads stored per rank: max(1, K/tp) (a replicated rank still stores one whole head).
uint32_t local_physical_heads(uint32_t tp, uint32_t total_kv_heads);

// True when ranks hold copies of the same head: tp > K. tp == K is NOT replication (each rank
// owns exactly one distinct head; vLLM fix #38179).
bool is_replicated(uint32_t tp, uint32_t total_kv_heads);

// Throws like physical_head_range when (tp, K) admit no valid placement; a cheap up-front check.
void validate_head_placement(uint32_t tp, uint32_t total_kv_heads);

}  // namespace pdkv::core
