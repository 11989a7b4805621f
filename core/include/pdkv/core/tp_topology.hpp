// Tensor-parallel topology between a local engine and a remote one: the tp_ratio sign
// convention and which remote ranks a local rank talks to (vllm-semantics.md §2.1, §2.2).
// "local" is the engine evaluating the function (D when pulling), "remote" is the other side.
#pragma once

#include <cstdint>
#include <vector>

namespace pdkv::core {

// vLLM's sign convention, which every other rule is written against:
//   +local_tp / remote_tp     when local_tp >= remote_tp  (several local ranks share one remote)
//   -(remote_tp / local_tp)   otherwise                    (one local rank spans |r| remote ranks)
// Never 0 (homogeneous TP is +1). Zero sizes -> InvalidArgument; sizes that do not divide each
// other -> TpNotDivisible naming both.
int32_t tp_ratio(uint32_t local_tp, uint32_t remote_tp);

// Remote ranks local_rank handshakes with (and, in pdkv, notifies; see notification_targets):
// tp_ratio > 0 -> [local_rank / tp_ratio]; else [local_rank*a, ..., local_rank*a + a - 1], a=|r|.
// local_rank >= local_tp -> InvalidArgument naming both.
std::vector<uint32_t> handshake_target_ranks(uint32_t local_tp, uint32_t local_rank,
                                             uint32_t remote_tp);

}  // namespace pdkv::core
