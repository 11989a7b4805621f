#include "pdkv/core/head_ranges.hpp"

#include <string>

#include "pdkv/core/error.hpp"

namespace pdkv::core {

void validate_head_placement(uint32_t tp, uint32_t total_kv_heads) {
  if (tp == 0 || total_kv_heads == 0) {
    fail(Status::InvalidArgument, "tp_size and num_kv_heads must be >= 1, got tp_size " +
                                      std::to_string(tp) + " and num_kv_heads " +
                                      std::to_string(total_kv_heads));
  }
  const uint32_t k = total_kv_heads;
  if (tp <= k && k % tp != 0) {
    fail(Status::HeadsNotDivisible,
         "num_kv_heads " + std::to_string(k) + " is not divisible by tp_size " +
             std::to_string(tp) + "; use a tp_size that divides " + std::to_string(k));
  }
  if (tp > k && tp % k != 0) {
    // vLLM replicates every KV head tp/K times; an uneven replication has no placement.
    fail(Status::HeadsNotDivisible,
         "tp_size " + std::to_string(tp) + " is larger than num_kv_heads " + std::to_string(k) +
             " but not a multiple of it; use a tp_size that is a multiple of " +
             std::to_string(k));
  }
}

HeadRange physical_head_range(uint32_t tp, uint32_t total_kv_heads, uint32_t rank) {
  validate_head_placement(tp, total_kv_heads);
  if (rank >= tp) {
    fail(Status::InvalidArgument, "rank " + std::to_string(rank) +
                                      " is out of range for tp_size " + std::to_string(tp));
  }
  const uint64_t k = total_kv_heads;
  if (tp <= total_kv_heads) {
    const uint64_t per = k / tp;
    return {static_cast<uint32_t>(rank * per), static_cast<uint32_t>((rank + 1) * per)};
  }
  // 64-bit product: rank * K can exceed 32 bits for large tp and K.
  const auto h = static_cast<uint32_t>(uint64_t{rank} * k / tp);
  return {h, h + 1};
}

uint32_t local_physical_heads(uint32_t tp, uint32_t total_kv_heads) {
  validate_head_placement(tp, total_kv_heads);
  const uint32_t per = total_kv_heads / tp;
  return per > 0 ? per : 1;
}

bool is_replicated(uint32_t tp, uint32_t total_kv_heads) { return tp > total_kv_heads; }

}  // namespace pdkv::core
