// Handshake validation: can a local engine rank and a remote engine rank exchange KV / Mamba
// state? Re-derives vLLM's _validate_remote_agent_handshake (docs/semantics.md §5) but reports
// EVERY problem at once, each with both values and the fix, and accepts what pdkv supports beyond
// vLLM:
//  * heterogeneous physical_blocks_per_logical WITH prefix caching (vLLM raises RuntimeError
//    "Prefix caching with heterogeneous physical_blocks_per_logical is not supported",
//    docs/semantics.md §6.3 bug 3; pdkv aligns transfers by token offset instead of
//    front-trimming block lists);
//  * P and D kernel block sizes that are not multiples of each other (vLLM needs
//    local % remote == 0, "Only nP < nD supported"), including hybrids (vLLM < 07-28: "HMA does
//    not support different remote block size yet");
//  * hybrid block lengths are validated too (vLLM skips them for hybrids, docs/semantics.md §5).
// "local" is the engine running the check (D when pulling); the rules are symmetric except
// where the vLLM rule is phrased with tp_ratio (local_tp vs remote_tp).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

struct Incompatibility {
  Status status = Status::Incompatible;  // TpNotDivisible, HeadsNotDivisible, UnsupportedLayout, ...
  std::string field;                     // metadata field, e.g. "kv_layout", "regions[3].num_blocks"
  std::string local_value;
  std::string remote_value;
  std::string message;                   // what is wrong, naming the values
  std::string fix;                       // what the operator can change
};

// "<STATUS> <field>: <message> (local: <v>, remote: <v>). Fix: <fix>"
std::string to_string(const Incompatibility& item);

// Every incompatibility between `local` and `remote` (empty: the pair can be served). Both inputs
// must have passed check_metadata (decode() guarantees it for remote bytes); overlapping regions
// on either side (hand-built metadata) are still reported, as an Incompatible item on field
// "regions[j].base" naming both regions and their byte ranges. KV layouts may differ (the reader
// permutes received blocks into its own layout: PlanContext::permute_on_receive); when the sides
// hold different numbers of KV heads per rank, at least one side must be HND (MLA: any);
// compile_transfer_plan requires it of the side read from (P) and the permute flag for
// different layouts. Attention bytes per token per KV head must be
// equal on both sides for every model kind (hybrids included, whatever the region kinds), and on
// each side every region's block_len must equal kernel_block_size * attention_bytes_per_token.
// Each region is checked by its own kind: regions are matched by index and must have the same
// kind on both sides, and an `Mla` region (an MLA-typed layer of a GQA model) must hold the same
// bytes per token on both sides whatever the TP sizes (a latent is replicated, never split): one
// whose size scaled with TP is an Incompatible item on "regions[i].block_len" naming the region,
// both sizes and both TP sizes.
// Element formats (metadata 1.3: model_format, kv_cache_format, conv_state_format, ssm_state_format)
// known on both sides must be equal: formats of equal size (fp8_e4m3 vs fp8_e5m2, int8 vs fp8
// per-token-head, bfloat16 vs float16) pass every size rule, yet the receiver would decode the
// bytes wrongly. Each difference is an Incompatible item on that field naming both formats
// ("kv_cache_format: fp8_e4m3 vs fp8_e5m2 ..."). An Unknown format (an engine that gave only byte
// sizes, or metadata from a pdkv before 1.3) is compatible with any format.
// compile_transfer_plan refuses a context in which any P rank fails this check.
std::vector<Incompatibility> validate_pair(const EngineMetadata& local, const EngineMetadata& remote);

// The pair as an executor agent's admission sees it, not knowing which of the two engines will
// read (D) and which will be read (P): either agent may dial the other, and a connected pair may
// READ or WRITE. Empty when validate_pair accepts the pair with either engine as the local (D)
// one; otherwise validate_pair(a, b)'s items. The rules bound to a direction (vLLM's refusal of
// replicated P heads with P_TP > D_TP in a pure attention model) are enforced where the roles are
// known: by compile_transfer_plan on the D rank's plan context, so no transfer in the refused
// direction is ever planned.
std::vector<Incompatibility> validate_pair_either_role(const EngineMetadata& a, const EngineMetadata& b);

// Throws Error(Incompatible) whose message joins every item of validate_pair with "; ".
void require_compatible(const EngineMetadata& local, const EngineMetadata& remote);

// The ranks of ONE remote engine (as gathered by handshakes with several of its ranks) must agree
// with each other: engine id, TP size, block counts (vLLM: dst_num_blocks[engine] ==
// meta.num_blocks), region count, geometry, the element formats two ranks both name; and their
// tp_ranks must be distinct. Items compare
// ranks[0] ("local_value") with the offending rank ("remote_value").
std::vector<Incompatibility> validate_engine_ranks(std::span<const EngineMetadata> ranks);

}  // namespace pdkv::core
