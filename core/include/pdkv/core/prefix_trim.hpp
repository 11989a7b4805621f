// Prefix-cache trimming (docs/semantics.md §6.3): after D's own prefix-cache hit, which tokens /
// states D still needs from P, and where they live in both block tables.
//
// vLLM pairs *block counts* (x[-n:] tails and front-trims) and breaks whenever counts and tokens
// disagree: a group with 0 local blocks reads the whole remote list (x[-0:]), SSM lists with
// placeholder nulls or several positions trip asserts, and different blocks-per-logical on P and
// D pair the wrong blocks. pdkv pairs *token positions* instead: every attention token D is
// missing is mapped to (local block, offset) and (remote block, offset), so any two block sizes
// work, and every Mamba state is paired by the token count it represents.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/model.hpp"
#include "pdkv/core/zero_ranges.hpp"

namespace pdkv::core {

// num_tokens tokens copied from remote_block (from token offset remote_token_begin) into
// local_block (from local_token_begin). A run never crosses a block boundary on either side.
struct TokenRun {
  uint64_t local_block = 0;
  uint64_t local_token_begin = 0;
  uint64_t remote_block = 0;
  uint64_t remote_token_begin = 0;
  uint64_t num_tokens = 0;
  friend bool operator==(const TokenRun&, const TokenRun&) = default;
};

// One whole Mamba state copied from remote_block into local_block; `tokens` is the number of
// prompt tokens the state has consumed (the same on both sides, by construction).
struct StatePair {
  uint64_t local_block = 0;
  uint64_t remote_block = 0;
  uint64_t tokens = 0;
  friend bool operator==(const StatePair&, const StatePair&) = default;
};

// One group's inputs. Attention kinds use KERNEL block ids of each side (expanded with that
// side's own blocks-per-logical); Mamba groups use logical ids, exchange-clipped (exchange_clip.hpp)
// exactly once. Id 0 is the null block on both kinds: a needed attention token that maps to it is
// a Coverage error (vLLM's logical null block 0 expands to kernel ids 0..ppl-1; only 0 is checked).
struct GroupTrimInput {
  GroupKind kind = GroupKind::Attention;
  MambaCacheMode cache_mode = MambaCacheMode::None;  // Mamba groups only
  std::vector<uint64_t> local_blocks;   // D blocks still to fill (after D's prefix hit)
  std::vector<uint64_t> remote_blocks;  // P blocks of the request
  // Tokens per block on each side: the kernel block size for attention kinds, the Mamba block
  // size (tokens per state checkpoint) for Mamba "all" mode; unused by single-state modes.
  uint64_t local_tokens_per_block = 0;
  uint64_t remote_tokens_per_block = 0;
  uint64_t remote_computed_tokens = 0;  // prompt tokens P computed (N-1 rule already applied)
  uint64_t local_hit_tokens = 0;        // tokens D already holds (its prefix-cache hit)
  uint64_t sliding_window = 0;          // SlidingWindow groups: window in tokens
  // Block-table index of local_blocks[0]. Default: local_hit_tokens / local_tokens_per_block
  // (the unhashed blocks start at the block holding the first missing token).
  std::optional<uint64_t> local_first_block;
  // Block-table index of remote_blocks[0]: 0 unless the list was clipped at the front (SWA).
  uint64_t remote_first_block = 0;
  // Attention kinds: how many consecutive kernel blocks each listed id stands for, per side. 1:
  // the list holds kernel ids. k > 1: it holds LOGICAL ids as the engine's block table keeps
  // them, logical block b being kernel blocks b*k .. b*k+k-1 (vLLM's expansion with k physical
  // blocks per logical), so the planner walks k times fewer ids. Logical id 0 is the null block
  // and so are all k of its kernel blocks (vLLM's expansion checks only kernel id 0). Block-table
  // indexes (local_first_block, remote_first_block) and tokens per block stay in kernel blocks.
  // Mamba groups (logical ids already): must be 1.
  uint64_t local_kernel_blocks_per_id = 1;
  uint64_t remote_kernel_blocks_per_id = 1;
};

// Checks a side's kernel_blocks_per_id for a group of `kind` (`side` is "local" or "remote"):
// 0 is InvalidArgument, so is anything but 1 for a Mamba group; with k > 1 every id must expand
// without overflow (id*k + k-1 < 2^64; Overflow naming the id and its position).
void check_kernel_blocks_per_id(GroupKind kind, std::span<const uint64_t> ids, uint64_t k,
                                const char* side);

// The kernel ids a list of ids stands for with k kernel blocks per id (a copy of ids when k is
// 1); the null id 0 becomes k null ids. Call check_kernel_blocks_per_id first.
std::vector<uint64_t> expand_kernel_ids(std::span<const uint64_t> ids, uint64_t k);

struct GroupTrim {
  GroupKind kind = GroupKind::Attention;
  std::vector<TokenRun> runs;     // attention kinds, in token order
  std::vector<StatePair> states;  // Mamba groups, in position order
  // Attention kinds: tokens of listed local blocks that D neither holds nor receives (a
  // partly-covered tail block, blocks past P's tokens, SWA tokens outside the window): zero them.
  std::vector<ZeroRange> zero;
  // Mamba: listed local slots that no remote state can fill (a checkpoint P never took, e.g.
  // different Mamba block sizes in "all" mode). The engine must not publish them as cache hits.
  std::vector<uint64_t> unfilled_states;

  bool transfers_nothing() const { return runs.empty() && states.empty(); }
  uint64_t transferred_tokens() const;
};

// Trims one group. Errors: InvalidArgument (zero tokens_per_block where needed), Coverage (a
// token or the final state D needs has no local slot or no remote source, naming the token,
// the block index and the list bounds), Overflow. Mamba groups: whenever local_hit_tokens <
// remote_computed_tokens D needs P's final (running) state, so a local list that is empty or
// holds only null placeholders (none / align), or has no real block at the final state's
// position ("all"), is Coverage, never an empty result.
GroupTrim trim_group(const GroupTrimInput& in);

// trim_group into `out`, reusing its vectors' capacity where it can (a planner trimming request
// after request allocates nothing for single-state Mamba groups). On error `out` holds no
// complete trim (cleared or partly filled).
void trim_group_into(const GroupTrimInput& in, GroupTrim& out);

// Trims every group; errors are prefixed with "group <i> (<kind>)".
std::vector<GroupTrim> trim_prefix(const std::vector<GroupTrimInput>& groups);

}  // namespace pdkv::core
