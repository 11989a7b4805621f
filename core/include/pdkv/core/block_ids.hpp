// Block-id vocabulary of the transfer path: group kinds, logical -> kernel expansion, the P/D
// block-size-ratio mapping and descriptor ids (docs/semantics.md §1, §3, §6.1-6.2).
//
// Attention blocks are token containers and can be split into kernel blocks; a Mamba block is one
// whole state and never splits. Every function here keeps that distinction explicit.
#pragma once

#include <cstdint>
#include <vector>

namespace pdkv::core {

// Kind of one KV cache group (one block-id list per group under the hybrid KV cache manager).
enum class GroupKind : int32_t {
  Attention = 0,      // full attention (incl. MLA): one slot per token
  SlidingWindow = 1,  // attention that only needs the last `window` tokens
  Mamba = 2,          // SSM state: one block is the whole state, never split
};

const char* group_kind_name(GroupKind k) noexcept;
inline bool is_attention_kind(GroupKind k) { return k != GroupKind::Mamba; }

// Block id 0 is vLLM's null block: a placeholder for a slot that holds nothing (e.g. the
// align-mode Mamba list [0, 0, 14], or SWA blocks that left the window).
constexpr uint64_t kNullBlock = 0;

// Logical -> kernel ids with `blocks_per_logical` (ppl) of the engine that OWNS the ids (use the
// remote ppl for remote ids: #42097 fixed vLLM expanding remote ids with the local width).
// Attention kinds: L -> [L*ppl .. L*ppl+ppl-1]. Mamba: unchanged. ppl 0 is InvalidArgument.
std::vector<uint64_t> logical_to_kernel_block_ids(const std::vector<uint64_t>& logical,
                                                  GroupKind kind, uint64_t blocks_per_logical);

// Local (D) kernel ids -> ids at the remote (P) kernel granularity, when the D kernel block holds
// `block_size_ratio` P kernel blocks. Attention: b -> [b*bsr .. b*bsr+bsr-1], the concatenation
// clipped to `remote_len` entries (P's last block may be the only partial one). Mamba: 1:1.
std::vector<uint64_t> map_block_ids_for_block_size_ratio(const std::vector<uint64_t>& local,
                                                         GroupKind kind,
                                                         uint64_t block_size_ratio,
                                                         uint64_t remote_len);

// One group's block ids, as fed to descriptor-id computation.
struct GroupBlockIds {
  GroupKind kind = GroupKind::Attention;
  std::vector<uint64_t> ids;  // kernel ids (attention kinds) or logical ids (Mamba)
};

// How an engine's descriptors are laid out (docs/semantics.md §3): all attention descriptors
// region-major, then all Mamba descriptors region-major (regions = Mamba layers x (conv
// projections + 1)).
struct DescriptorLayout {
  uint64_t num_blocks = 0;          // kernel blocks of the engine whose handle is addressed
  uint64_t block_size_ratio = 1;    // bsr (local handle only; the remote uses 1)
  uint64_t blocks_per_logical = 1;  // ppl of that engine
  uint64_t num_attention_regions = 0;
  uint64_t num_mamba_regions = 0;
};

// Descriptor ids for the given groups. Without Mamba groups: id = r*nb + b over regions x the
// concatenated blocks (region-major), nb = num_blocks*bsr. With Mamba groups, per group in order:
// attention r*nb + b; Mamba r*(num_blocks/ppl) + b + num_attention_regions*nb.
// Errors: InvalidArgument (zero sizes, num_blocks not a multiple of ppl), OutOfBounds (a block id
// outside its region, naming it), Overflow.
std::vector<uint64_t> descriptor_ids(const std::vector<GroupBlockIds>& groups,
                                     const DescriptorLayout& layout);

}  // namespace pdkv::core
