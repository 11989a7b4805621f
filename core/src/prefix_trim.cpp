#include "pdkv/core/prefix_trim.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

namespace {

std::string s(uint64_t v) { return std::to_string(v); }

// Locates token `t` in one side's block list; fails with Coverage naming the bounds.
uint64_t block_for_token(uint64_t t, const std::vector<uint64_t>& blocks, uint64_t first,
                         uint64_t tokens_per_block, const char* side) {
  const uint64_t idx = t / tokens_per_block;
  const uint64_t end = add_checked(first, blocks.size(), "block index");
  if (idx < first || idx >= end) {
    fail(Status::Coverage,
         std::string(side) + " blocks do not cover token " + s(t) + ": it lies in block index " +
             s(idx) + " but the " + side + " list holds block indices " + s(first) + ".." +
             s(end) + " (" + s(tokens_per_block) + " tokens per block); the " + side +
             " engine must pass the block ids for every token it is asked to move");
  }
  const uint64_t b = blocks[idx - first];
  if (b == kNullBlock) {
    fail(Status::Coverage, std::string(side) + " block index " + s(idx) + " holding token " +
                               s(t) + " is the null block 0: that token has no storage");
  }
  return b;
}

GroupTrim trim_attention(const GroupTrimInput& kernel_in) {
  // Logical ids (kernel_blocks_per_id > 1) are expanded to kernel ids: this is the reference
  // trimming the planner's run-granular walk (plan_runs.cpp) is tested against.
  const GroupTrimInput* pin = &kernel_in;
  GroupTrimInput expanded;
  if (kernel_in.local_kernel_blocks_per_id != 1 || kernel_in.remote_kernel_blocks_per_id != 1) {
    expanded = kernel_in;
    expanded.local_blocks = expand_kernel_ids(kernel_in.local_blocks, kernel_in.local_kernel_blocks_per_id);
    expanded.remote_blocks = expand_kernel_ids(kernel_in.remote_blocks, kernel_in.remote_kernel_blocks_per_id);
    expanded.local_kernel_blocks_per_id = expanded.remote_kernel_blocks_per_id = 1;
    pin = &expanded;
  }
  const GroupTrimInput& in = *pin;
  const uint64_t lbs = in.local_tokens_per_block;
  const uint64_t rbs = in.remote_tokens_per_block;
  if (lbs == 0 || rbs == 0) {
    fail(Status::InvalidArgument, "attention tokens per block must be > 0 (local " + s(lbs) +
                                      ", remote " + s(rbs) + ")");
  }
  const uint64_t n = in.remote_computed_tokens;
  uint64_t need_begin = in.local_hit_tokens;
  if (in.kind == GroupKind::SlidingWindow) {
    if (in.sliding_window == 0) {
      fail(Status::InvalidArgument,
           "sliding-window group with window 0: pass the model's sliding_window in tokens");
    }
    // Only the last `window` tokens can ever be attended to again.
    if (n > in.sliding_window) need_begin = std::max(need_begin, n - in.sliding_window);
  }
  const uint64_t lf = in.local_first_block.value_or(in.local_hit_tokens / lbs);

  GroupTrim out;
  out.kind = in.kind;
  // need_begin >= n is a full hit for this group: nothing moves (vLLM's x[-0:] moved everything).
  for (uint64_t t = need_begin; t < n;) {
    const uint64_t lb = block_for_token(t, in.local_blocks, lf, lbs, "local");
    const uint64_t rb = block_for_token(t, in.remote_blocks, in.remote_first_block, rbs, "remote");
    const uint64_t lo = t % lbs;
    const uint64_t ro = t % rbs;
    const uint64_t len = std::min({lbs - lo, rbs - ro, n - t});
    out.runs.push_back({lb, lo, rb, ro, len});
    t += len;
  }
  std::vector<TokenInterval> written;
  if (need_begin < n) written.push_back({need_begin, n});
  out.zero = uncovered_token_ranges(in.local_blocks, lf, lbs, in.local_hit_tokens, written);
  return out;
}

uint64_t last_non_null(const std::vector<uint64_t>& v, bool* found) {
  for (auto it = v.rbegin(); it != v.rend(); ++it) {
    if (*it != kNullBlock) {
      *found = true;
      return *it;
    }
  }
  *found = false;
  return 0;
}

// none / align: one running state per request. Placeholder nulls ([0, 0, 14]) are skipped; the
// last real slot on each side is the running state.
// Fills `out` (emptied by the caller, its vectors' capacity kept).
void trim_single_state(const GroupTrimInput& in, GroupTrim& out) {
  const uint64_t n = in.remote_computed_tokens;
  if (in.local_hit_tokens >= n) return;  // D holds the state already: nothing moves
  bool have_local = false;
  const uint64_t local = last_non_null(in.local_blocks, &have_local);
  if (!have_local) {
    // D is missing tokens, so it needs P's running state; without a slot the request would be
    // reported complete with D's Mamba state never written.
    fail(Status::Coverage, "D needs the Mamba state after " + s(n) + " tokens (it holds " +
                               s(in.local_hit_tokens) + ") but its list of " +
                               s(in.local_blocks.size()) +
                               " blocks holds no real slot (empty or only null placeholders); "
                               "pass the block D allocated for the running state");
  }
  bool have_remote = false;
  const uint64_t remote = last_non_null(in.remote_blocks, &have_remote);
  if (!have_remote) {
    fail(Status::Coverage, "D needs the Mamba state after " + s(n) + " tokens in local block " +
                               s(local) + " but P's list of " + s(in.remote_blocks.size()) +
                               " blocks holds no real state (only null placeholders)");
  }
  out.states.push_back({local, remote, n});
  // Any other real local slot is a checkpoint P did not export.
  for (uint64_t b : in.local_blocks) {
    if (b != kNullBlock && b != local) out.unfilled_states.push_back(b);
  }
}

// "all": position p holds the state after min((p+1)*B, N) tokens. Pair local and remote slots
// whose states cover the same token count.
GroupTrim trim_all_positions(const GroupTrimInput& in) {
  const uint64_t bd = in.local_tokens_per_block;
  const uint64_t bp = in.remote_tokens_per_block;
  if (bd == 0 || bp == 0) {
    fail(Status::InvalidArgument, "Mamba \"all\" mode needs tokens per block on both sides (local " +
                                      s(bd) + ", remote " + s(bp) + ")");
  }
  GroupTrim out;
  out.kind = in.kind;
  const uint64_t n = in.remote_computed_tokens;
  const uint64_t hit = in.local_hit_tokens;
  if (hit >= n) return out;
  const uint64_t lf = in.local_first_block.value_or(hit / bd);
  const uint64_t rf = in.remote_first_block;
  bool final_paired = false;
  for (uint64_t i = 0; i < in.local_blocks.size(); ++i) {
    const uint64_t lb = in.local_blocks[i];
    if (lb == kNullBlock) continue;
    const uint64_t p = add_checked(lf, i, "Mamba position");
    const uint64_t start = mul_checked(p, bd, "Mamba position token");
    if (start >= n) continue;  // past P's tokens: D computes this state itself
    const uint64_t e = std::min(add_checked(start, bd, "Mamba position token"), n);
    if (e <= hit) continue;  // D already holds this checkpoint
    bool matched = false;
    uint64_t j = 0;
    if (e == n) {  // the running state: P's last position, whatever its size
      j = (n - 1) / bp;
      matched = true;
    } else if (e % bp == 0) {  // an intermediate checkpoint P took at the same token count
      j = e / bp - 1;
      matched = true;
    }
    if (matched && j >= rf && j - rf < in.remote_blocks.size() &&
        in.remote_blocks[j - rf] != kNullBlock) {
      out.states.push_back({lb, in.remote_blocks[j - rf], e});
      final_paired = final_paired || e == n;
    } else if (e == n) {
      fail(Status::Coverage,
           "D needs the final Mamba state after " + s(n) + " tokens (local block " + s(lb) +
               ") but P's position " + s(j) + " is not a real block in its list of " +
               s(in.remote_blocks.size()) + " starting at position " + s(rf));
    } else {
      out.unfilled_states.push_back(lb);
    }
  }
  if (!final_paired) {
    // hit < n: D must end up with the running state, but its list has no real slot at the
    // position holding it (missing or a null placeholder).
    const uint64_t pos = (n - 1) / bd;
    fail(Status::Coverage,
         "D needs the final Mamba state after " + s(n) + " tokens (it holds " + s(hit) +
             ") at position " + s(pos) + " but its list of " + s(in.local_blocks.size()) +
             " blocks starting at position " + s(lf) +
             " holds no real block there; pass the block D allocated for that position");
  }
  return out;
}

}  // namespace

uint64_t GroupTrim::transferred_tokens() const {
  uint64_t total = 0;
  for (const auto& r : runs) total += r.num_tokens;
  return total;
}

void check_kernel_blocks_per_id(GroupKind kind, std::span<const uint64_t> ids, uint64_t k,
                                const char* side) {
  if (k == 0) {
    fail(Status::InvalidArgument, std::string(side) +
                                      "_kernel_blocks_per_id = 0: pass 1 for kernel block ids, or the "
                                      "kernel blocks per logical block for logical ids");
  }
  if (!is_attention_kind(kind) && k != 1) {
    fail(Status::InvalidArgument, std::string(side) + "_kernel_blocks_per_id = " + s(k) +
                                      " for a Mamba group: its ids are logical already (pass 1)");
  }
  if (k == 1) return;
  const uint64_t max_id = (UINT64_MAX - (k - 1)) / k;
  uint64_t bits = 0;
  for (uint64_t id : ids) bits |= id;  // at least every id; one vectorised pass, usually all in range
  if (bits <= max_id) return;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] > max_id) {
      fail(Status::Overflow, std::string(side) + " block id " + s(ids[i]) + " at position " + s(i) +
                                 " times " + side + "_kernel_blocks_per_id " + s(k) +
                                 " leaves 64 bits");
    }
  }
}

std::vector<uint64_t> expand_kernel_ids(std::span<const uint64_t> ids, uint64_t k) {
  std::vector<uint64_t> out;
  out.reserve(mul_checked(ids.size(), k, "kernel block ids"));
  for (uint64_t id : ids) {
    for (uint64_t j = 0; j < k; ++j) out.push_back(id == kNullBlock ? kNullBlock : id * k + j);
  }
  return out;
}

void trim_group_into(const GroupTrimInput& in, GroupTrim& out) {
  out.kind = in.kind;
  out.runs.clear();
  out.states.clear();
  out.zero.clear();
  out.unfilled_states.clear();
  check_kernel_blocks_per_id(in.kind, in.local_blocks, in.local_kernel_blocks_per_id, "local");
  check_kernel_blocks_per_id(in.kind, in.remote_blocks, in.remote_kernel_blocks_per_id, "remote");
  if (is_attention_kind(in.kind)) {
    out = trim_attention(in);
  } else if (in.cache_mode == MambaCacheMode::All) {
    out = trim_all_positions(in);
  } else {
    trim_single_state(in, out);
  }
}

GroupTrim trim_group(const GroupTrimInput& in) {
  GroupTrim out;
  trim_group_into(in, out);
  return out;
}

std::vector<GroupTrim> trim_prefix(const std::vector<GroupTrimInput>& groups) {
  std::vector<GroupTrim> out;
  out.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    try {
      out.push_back(trim_group(groups[g]));
    } catch (const Error& e) {
      fail(e.status(), "group " + std::to_string(g) + " (" + group_kind_name(groups[g].kind) +
                           "): " + e.what());
    }
  }
  return out;
}

}  // namespace pdkv::core
