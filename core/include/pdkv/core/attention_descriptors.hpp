// Attention (FA/MLA) transfer geometry: which byte ranges of a P block a D rank reads, and the
// NIXL-style descriptor lists that realise those reads (docs/semantics.md §3: the attention
// local and remote lists and the local split handles).
//
// Layout assumption: HND blocks with K and V packed in the content dim ([H, N, 2D]; vLLM main
// since #44455), so the slice of one KV head inside a block is contiguous and a block_len is
// physical_heads * per-head bytes. "local" is the D (reading) rank, "remote" the P rank.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pdkv/core/descriptor.hpp"
#include "pdkv/core/tp_topology.hpp"

namespace pdkv::core {

// One head-granular read of one block: bytes [remote_offset, remote_offset+length) of the P
// rank's block land at [local_offset, local_offset+length) of the D rank's block.
struct AttentionRead {
  uint32_t p_rank = 0;
  uint64_t remote_offset = 0;
  uint64_t local_offset = 0;
  uint64_t length = 0;
  friend bool operator==(const AttentionRead&, const AttentionRead&) = default;
};

// The remote (P) kernel block_len consistent with a local (D) block_len under mapping m and
// block_size_ratio bsr (= local kernel block size / remote kernel block size):
//   MLA (latent replicated):  L / bsr
//   otherwise:                (L / bsr) * remote_physical_heads / local_physical_heads
// (vLLM #45879 validates the same relation by head ratio). Non-exact divisions and zero inputs
// -> Incompatible / InvalidArgument naming the values.
uint64_t expected_remote_attention_block_len(const TpMapping& m, uint64_t local_block_len,
                                             uint32_t block_size_ratio = 1);

// The attention reads of one block for the D rank described by m (bsr == 1):
//   MLA:           one read of the whole block from attention_source_ranks[0];
//   D_TP >= P_TP:  one read of L bytes at rank_offset_factor * L of the P block;
//   D_TP <  P_TP:  one read per attention source of its whole P block, placed at
//                  slot * (L / num_attention_reads) of the D block.
// remote_block_len must equal expected_remote_attention_block_len (else Incompatible).
std::vector<AttentionRead> attention_reads(const TpMapping& m, uint64_t local_block_len,
                                           uint64_t remote_block_len);
// The same reads written into `out` (cleared first; its capacity is kept, so a caller that keeps
// the vector plans request after request without allocating).
void attention_reads_into(const TpMapping& m, uint64_t local_block_len, uint64_t remote_block_len,
                          std::vector<AttentionRead>& out);

// Local attention descriptors, region-major: for region i and b < num_blocks*bsr,
// (base_i + b * block_len_i/bsr, block_len_i/bsr). With bsr > 1 each local block is cut into
// bsr sub-blocks of the remote block size. bsr == 0 or block_len % bsr != 0 -> error.
std::vector<Descriptor> attention_local_descriptors(std::span<const Region> local_regions,
                                                    uint32_t block_size_ratio = 1);

// Remote attention descriptors for one P rank (its regions), region-major, one per remote block:
//   addr = rbase_i + off + b * remote_block_len_i, len = (L_i / bsr) / n
// where n = 1 for MLA else num_attention_reads, off = 0 for MLA else rank_offset_factor*L_i/bsr.
// Checks: region counts match, remote block_len matches the head ratio, the read stays inside
// the P block (OutOfBounds), no 64-bit overflow. Head-sharded reads (D_TP < P_TP, non-MLA,
// more than one attention source) with bsr > 1 -> Incompatible (as vLLM: the D sub-block
// layout cannot hold a head slice of a different block size).
std::vector<Descriptor> attention_remote_descriptors(std::span<const Region> local_regions,
                                                     std::span<const Region> remote_regions,
                                                     const TpMapping& m,
                                                     uint32_t block_size_ratio = 1);

// Local descriptors to pair with one P rank's remote descriptors when D_TP < P_TP.
struct SplitHandle {
  uint32_t p_rank = 0;
  std::vector<Descriptor> descriptors;
};

// True when D needs per-P-rank local split handles: tp_ratio < 0 and not a pure-MLA single read.
bool needs_split_handles(const TpMapping& m);

// One handle per rank of m.all_source_ranks (in that order) over the local attention
// descriptors (from attention_local_descriptors): MLA keeps each descriptor whole; otherwise
// descriptor j becomes (addr + slot(p) * chunk, chunk) with chunk = len / num_attention_reads.
// A rank that is not an attention source (GQA twin) maps to its twin's slot. tp_ratio > 0 ->
// InvalidArgument; head-sharded with bsr > 1 -> Incompatible.
std::vector<SplitHandle> attention_split_handles(std::span<const Descriptor> local_attention,
                                                 const TpMapping& m,
                                                 uint32_t block_size_ratio = 1);

}  // namespace pdkv::core
