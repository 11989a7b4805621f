// Tensor-parallel topology between a local engine and a remote one: the tp_ratio sign
// convention and which remote ranks a local rank talks to (docs/semantics.md §2.1, §2.2).
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

struct TpMappingInput {
  uint32_t local_tp = 1;
  uint32_t local_rank = 0;
  uint32_t remote_tp = 1;
  uint32_t total_kv_heads = 1;  // K. MLA: the single latent "head" (pass 1; not sharded)
  bool use_mla = false;         // attention state is an MLA latent, replicated on every rank
  bool has_mamba = false;       // the model has SSM (Mamba) groups, which are always TP-sharded
};

// Which remote ranks one local rank reads from, and where (docs/semantics.md §2.2, main's
// compute_tp_mapping). Rank lists are remote ranks in ascending order.
struct TpMapping {
  TpMappingInput input;
  int32_t tp_ratio = 1;
  std::vector<uint32_t> handshake_targets;
  // Attention reads. GQA dedup when remote_tp > local_tp: of the candidate ranks only the first
  // rank per distinct head is read (replicated twins hold identical bytes). MLA: exactly one
  // read, rank local_rank*remote_tp/local_tp.
  std::vector<uint32_t> attention_source_ranks;
  // SSM reads: every candidate when local_tp < remote_tp (Mamba state is always sharded), else
  // the attention source. Empty when !has_mamba.
  std::vector<uint32_t> mamba_source_ranks;
  std::vector<uint32_t> all_source_ranks;  // sorted union of attention and mamba sources
  // Parallel to all_source_ranks: the index in attention_source_ranks of the source holding the
  // same head. A duplicate-head (dedup'd) rank maps to its twin's slot; MLA and tp_ratio > 0: 0.
  std::vector<uint32_t> attention_slots;
  // Offset of this rank's head slice inside the remote block, in units of the LOCAL per-rank
  // block_len. 0 for MLA or local_tp <= remote_tp; local replicated: local head - first head of
  // the remote rank; else local_rank % (local_tp / remote_tp).
  uint32_t rank_offset_factor = 0;
  bool local_replicated = false;   // local_tp > K (MLA: local_tp > 1)
  bool remote_replicated = false;  // remote_tp > K (MLA: remote_tp > 1)
  uint32_t local_physical_heads = 1;   // max(1, K / local_tp)
  uint32_t remote_physical_heads = 1;  // max(1, K / remote_tp)
  // Remote ranks this (decode) rank sends a READ-done notification to for every request. pdkv
  // notifies EVERY handshake target, including ranks it did not read from (GQA dedup, single
  // MLA read, a full prefix hit). vLLM only notifies ranks it read from, except a broadcast for
  // pure MLA, so a P rank skipped by GQA dedup held its blocks until the lease expired (and vLLM
  // had to reject non-hybrid tp_ratio < 0 with a replicated remote). Each P rank then receives
  // exactly notifications_expected_per_request(P_TP, D_TP) notifications per request.
  std::vector<uint32_t> notify_ranks;

  // The one P rank an MLA latent is read from (MLA models, and the MLA-typed regions of a GQA
  // model): local_rank * remote_tp / local_tp, i.e. the first handshake target (vLLM's MLA rule).
  uint32_t mla_source_rank() const {
    return static_cast<uint32_t>(uint64_t{input.local_rank} * input.remote_tp / input.local_tp);
  }
  uint32_t num_attention_reads() const {
    return static_cast<uint32_t>(attention_source_ranks.size());
  }
  // Slot of remote rank p (see attention_slots); InvalidArgument if p is not a source.
  uint32_t attention_slot_of(uint32_t remote_rank) const;
  bool reads_attention_from(uint32_t remote_rank) const;
};

// Errors: as tp_ratio / handshake_target_ranks; K == 0 -> InvalidArgument; non-MLA with a head
// placement that does not exist on either side -> HeadsNotDivisible (see head_ranges.hpp).
TpMapping compute_tp_mapping(const TpMappingInput& in);

// Notification rule on the P (producer) side, pull mode: how many READ-done notifications each
// P rank must receive for a request before it frees the request's blocks. d_tp / p_tp when
// D_TP > P_TP (that many D ranks read slices of one P rank), else 1 (one D rank per P rank).
uint32_t notifications_expected_per_request(uint32_t p_tp, uint32_t d_tp);

// P ranks that D rank d_rank notifies per request: all of its handshake targets (see
// TpMapping::notify_ranks for why pdkv notifies ranks it did not read from).
std::vector<uint32_t> notification_targets(uint32_t d_tp, uint32_t d_rank, uint32_t p_tp);

}  // namespace pdkv::core
