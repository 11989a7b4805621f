// How a decode (D) rank reads its Mamba state out of prefill (P) pages when P and D use
// different tensor parallelism (docs/semantics.md §3, §4).
//
// Two families live here:
//  * vLLM-compatible views (local_conv_offsets, remote_conv_offsets, ssm_read_range,
//    compute_physical_blocks_per_logical, vllm_mamba_reads): vLLM's formulas, reproduced so a
//    pdkv plan can be compared against what a vLLM peer computes. They assume every conv
//    projection is sharded, which is wrong for Mamba2 with n_groups < TP (vLLM bug #55208).
//  * mamba_reads: pdkv's derivation from logical channel ownership, correct for replicated
//    groups too. It equals vllm_mamba_reads wherever vLLM is right.
//
// Offsets are bytes inside one logical Mamba page (one state) of one layer; descriptor builders
// (mamba_descriptors.hpp) add region bases and block strides.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/mamba_state.hpp"

namespace pdkv::core {

// A byte range inside a Mamba page.
struct MambaByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
  friend bool operator==(const MambaByteRange&, const MambaByteRange&) = default;
};

// Cumulative (offset, size) of each conv projection in the local page: [x|B|C], [Q|K|V] or [x].
std::vector<MambaByteRange> local_conv_offsets(const MambaState& local);

// vLLM's remote conv slices for a local rank (main):
//   tp_ratio >= 1: the remote projection is assumed to be size*tp_ratio; the rank reads
//     (base + lo*size, size) with lo = local_rank % tp_ratio and base advancing by size*tp_ratio;
//   tp_ratio < 0: each remote projection is size/|tp_ratio|, read whole at its cumulative offset.
// Argument checks (shared with ssm_read_range), each InvalidArgument naming the values:
//   tp_ratio == 0; local_rank >= local.tp_size; tp_ratio >= 1 not dividing local.tp_size (a
//   positive ratio is local_tp / remote_tp, so it must divide the local TP). A negative ratio
//   means remote_tp = |tp_ratio| * local_tp, which any local TP satisfies: the remote TP is not
//   known here, so every |tp_ratio| is accepted.
// Also InvalidArgument: tp_ratio < 0 with a projection size not divisible by |tp_ratio|.
std::vector<MambaByteRange> remote_conv_offsets(const MambaState& local, uint32_t local_rank,
                                                int32_t tp_ratio);

// vLLM's SSM temporal read in the remote page: tp_ratio >= 1 reads the local ssm bytes at
// remote_conv_bytes + lo*local_ssm_bytes (the temporal state is head-sharded); tp_ratio < 0
// reads the whole remote ssm state at remote_conv_bytes. Errors: the argument checks of
// remote_conv_offsets (tp_ratio 0, local_rank out of range, positive tp_ratio not dividing the
// local TP), Overflow.
MambaByteRange ssm_read_range(const MambaState& local, uint64_t remote_conv_bytes,
                              uint64_t remote_ssm_bytes, uint32_t local_rank, int32_t tp_ratio);

// ceil((conv + ssm) / block_len): kernel blocks per logical Mamba block, as vLLM derived the
// remote ratio before it was sent in the handshake. block_len 0 -> InvalidArgument.
uint64_t compute_physical_blocks_per_logical(uint64_t conv_bytes, uint64_t ssm_bytes,
                                             uint64_t block_len);

// One contiguous copy from a P rank's page into the D rank's page.
struct MambaRead {
  uint32_t p_rank = 0;
  std::string part;            // "x", "B", "C", "Q", "K", "V" or "ssm"
  uint64_t remote_offset = 0;  // in the P rank's page
  uint64_t local_offset = 0;   // in the D rank's page
  uint64_t length = 0;
  friend bool operator==(const MambaRead&, const MambaRead&) = default;
};

// pdkv's reads for D rank `d_rank`: every byte of the D page [0, d_state.page_bytes()) is written
// exactly once, from a P rank that holds the same logical channels. Ownership: rank r of TP t
// holds units [r*U/t, (r+1)*U/t) of a sharded projection (x: channels, B/C: groups, Q/K/V:
// channels, ssm: temporal rows), or its one group r*G/t when groups are replicated (G < t). A
// group held by several P ranks is read from the one holding D's first head of that group, so
// B/C never add a P rank that D does not already read x from.
// Order: by part (page order, ssm last), then local offset; adjacent runs are merged.
// Needs no TP divisibility beyond what derive_mamba_state already enforced per engine.
// Errors: P and D states that describe different models (type, totals, rows, dtypes) ->
// Incompatible naming both values; d_rank >= D tp -> InvalidArgument.
std::vector<MambaRead> mamba_reads(const MambaState& p_state, const MambaState& d_state,
                                   uint32_t d_rank);

// What vLLM main reads for the same pair (remote_conv_offsets + ssm_read_range + the local
// split handle for tp_ratio < 0), in the same order and shape as mamba_reads. Reproduces
// #55208 for replicated groups: use it to diagnose a vLLM peer, never to plan. TP sizes that
// do not divide each other -> TpNotDivisible (from tp_ratio).
std::vector<MambaRead> vllm_mamba_reads(const MambaState& p_state, const MambaState& d_state,
                                        uint32_t d_rank);

// The distinct P ranks that appear in `reads`, ascending.
std::vector<uint32_t> mamba_source_ranks(const std::vector<MambaRead>& reads);

}  // namespace pdkv::core
