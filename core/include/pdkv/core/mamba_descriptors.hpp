// Mamba transfer descriptors (docs/semantics.md §3: the Mamba local and remote lists,
// split handles, descriptor ids), built from pdkv's MambaReads so that replicated Mamba2 groups are
// addressed correctly too.
//
// A Mamba region is a Region (descriptor.hpp) whose num_blocks kernel blocks of block_len bytes
// form num_blocks / ppl logical pages; page b starts at base + b * block_len * ppl and holds one
// whole state laid out [conv projections | ssm | padding]. Mamba descriptors never use the
// block-size ratio: a state is indivisible.
//
// Order is always region-major: for each region, for each part (or read), every logical block.
// The remote list for P rank p and the local split list for p have the same length and order,
// so one descriptor id (mamba_descriptor_ids) addresses the matching pair.
#pragma once

#include <cstdint>
#include <vector>

#include "pdkv/core/descriptor.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/mamba_state.hpp"

namespace pdkv::core {

// The engine's full local Mamba descriptors, as registered (vLLM _build_mamba_local): per region,
// all blocks of each conv projection, then all blocks of the ssm state. (projections + 1) * blocks
// descriptors per region.
// Errors: ppl 0 or num_blocks % ppl != 0 -> InvalidArgument; a page that does not fit in
// block_len * ppl -> OutOfBounds naming both; address overflow -> Overflow.
std::vector<Descriptor> mamba_local_descriptors(const std::vector<Region>& regions, uint64_t ppl,
                                                const MambaState& state);

// Descriptors in P rank `p_rank`'s registered memory for the reads of one D rank (the reads
// whose p_rank matches, in order): per region, per read, every logical block at
// remote_offset. Empty when that P rank supplies nothing.
// Errors as above, plus a read leaving the P page [0, p_state.page_bytes()) -> OutOfBounds.
std::vector<Descriptor> mamba_remote_descriptors(const std::vector<Region>& p_regions,
                                                 uint64_t p_ppl, const MambaState& p_state,
                                                 const std::vector<MambaRead>& reads,
                                                 uint32_t p_rank);

// The D rank's local destinations matching mamba_remote_descriptors(..., p_rank) one to one:
// per region, per read from p_rank, every logical block at local_offset. For tp_ratio < 0 these
// are vLLM's split-handle chunks; for tp_ratio >= 1 with sharded groups they equal
// mamba_local_descriptors.
std::vector<Descriptor> mamba_local_split_descriptors(const std::vector<Region>& d_regions,
                                                      uint64_t d_ppl, const MambaState& d_state,
                                                      const std::vector<MambaRead>& reads,
                                                      uint32_t p_rank);

// Descriptor ids of logical blocks in a region-major Mamba list that starts at first_id (vLLM:
// n_fa, the number of attention descriptors before it):
//   id = first_id + (region * descs_per_region + k) * num_logical_blocks + block
// for region < num_regions, k < descs_per_region, block in logical_block_ids (in that order).
// A block id >= num_logical_blocks -> OutOfBounds naming both.
std::vector<uint64_t> mamba_descriptor_ids(const std::vector<uint64_t>& logical_block_ids,
                                           uint64_t num_logical_blocks, uint64_t num_regions,
                                           uint64_t descs_per_region, uint64_t first_id);

}  // namespace pdkv::core
