#include "pdkv/core/scheduler.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

namespace {
uint64_t floor_to(uint64_t v, uint64_t unit) { return v - v % unit; }

uint64_t last_block_boundary(uint64_t num_tokens, uint64_t bs, bool eagle) {
  uint64_t last = floor_to(num_tokens, bs);
  // EAGLE drafts against one more block, so the last cacheable state is one block earlier.
  if (eagle) last = last > bs ? last - bs : 0;
  return last;
}
}  // namespace

uint64_t mamba_aligned_split_v0604(const AlignedSplitV0604Input& in) {
  if (in.block_size == 0) {
    fail(Status::InvalidArgument, "Mamba block split with block_size 0");
  }
  if (in.load_kv_async) return in.num_new_tokens;
  const uint64_t bs = in.block_size;
  uint64_t nc = add_checked(in.num_computed_tokens, in.num_new_local_computed_tokens, "tokens");
  nc = add_checked(nc, in.num_external_computed_tokens, "tokens");
  const uint64_t prefill_end = std::max(in.num_prompt_tokens,
                                        in.num_tokens > 0 ? in.num_tokens - 1 : 0);
  uint64_t n = in.num_new_tokens;
  if (nc < prefill_end) {
    const uint64_t last = last_block_boundary(in.num_tokens, bs, in.use_eagle);
    const uint64_t end = add_checked(nc, n, "tokens");
    if (end < last) {
      n = floor_to(n, bs);
    } else if (nc < last && last < end) {
      n = last - nc;
    }
  }
  return n;
}

uint64_t mamba_aligned_split(const AlignedSplitInput& in) {
  if (in.block_size == 0) {
    fail(Status::InvalidArgument, "Mamba block split with block_size 0");
  }
  const uint64_t bs = in.block_size;
  const uint64_t start = in.start;
  const uint64_t prefill_end = std::max(in.num_prompt_tokens,
                                        in.num_tokens > 0 ? in.num_tokens - 1 : 0);
  if (in.load_kv_async || start >= prefill_end) return in.num_new_tokens;
  uint64_t end = add_checked(start, in.num_new_tokens, "tokens");

  if (end < prefill_end) {
    uint64_t limit = UINT64_MAX;
    if (in.max_num_scheduled_tokens > 0) limit = in.max_num_scheduled_tokens;
    if (in.long_prefill_token_threshold > 0) {
      limit = std::min(limit, in.long_prefill_token_threshold);
    }
    const uint64_t f = floor_to(end, bs);
    if (f > start || bs <= limit) {
      // A whole block fits in some chunk: only ever stop at block boundaries, even if that
      // means nothing this step (a later step with more budget reaches the boundary).
      end = f;
      if (end <= start) return 0;
    } else {
      // The block is wider than every chunk, so no step can reach a boundary from here: stop
      // at the finer unit if one was asked for and it still advances, else where the budget
      // ends. Waiting instead is the caller's explicit choice.
      const uint64_t fine = in.floor_unit > 0 ? floor_to(end, in.floor_unit) : start;
      if (fine > start) {
        end = fine;
      } else if (in.defer_oversized_block) {
        return 0;
      }
    }
  }

  uint64_t stop = end;
  auto consider = [&](uint64_t p) {
    if (p > start && p < stop) stop = p;
  };
  if (start % bs != 0) consider(floor_to(start, bs) + bs);
  const uint64_t last = last_block_boundary(in.num_tokens, bs, in.use_eagle);
  consider(last);
  if (in.tail_hash_block_size > 0) {
    const uint64_t tail = floor_to(prefill_end, in.tail_hash_block_size);
    if (tail > last) consider(tail);
  }
  if (in.shared_prefix_tokens > 0) consider(floor_to(in.shared_prefix_tokens, bs));
  return stop - start;
}

uint64_t d_num_new_matched_tokens(uint64_t num_prompt_tokens, uint64_t num_computed_tokens,
                                  bool has_mamba) {
  const uint64_t target =
      (has_mamba && num_prompt_tokens > 1) ? num_prompt_tokens - 1 : num_prompt_tokens;
  return target > num_computed_tokens ? target - num_computed_tokens : 0;
}

RemoteDecodePrefill truncate_for_remote_decode(RemoteDecodePrefill req, bool has_mamba) {
  req.max_tokens = 1;
  if (!has_mamba || req.truncated) return req;
  if (req.num_prompt_tokens > 1) req.num_prompt_tokens -= 1;
  req.truncated = true;
  return req;
}

RemoteDecodePrefillPlan plan_remote_decode_prefill(uint64_t num_prompt_tokens,
                                                   uint64_t local_hit_tokens,
                                                   uint64_t block_size, bool has_mamba) {
  if (block_size == 0) {
    fail(Status::InvalidArgument, "remote-decode prefill plan with block_size 0");
  }
  if (num_prompt_tokens == 0) {
    fail(Status::InvalidArgument, "remote-decode prefill plan for a prompt of 0 tokens");
  }
  RemoteDecodePrefillPlan plan;
  plan.num_prompt_tokens =
      truncate_for_remote_decode({num_prompt_tokens, 0, false}, has_mamba).num_prompt_tokens;
  // The hit must leave at least the last (truncated) prompt token to compute: cap it at the last
  // whole block that ends at or before token N'-1.
  const uint64_t cap = floor_to(plan.num_prompt_tokens - 1, block_size);
  plan.computed_tokens = std::min(floor_to(local_hit_tokens, block_size), cap);
  plan.new_tokens = plan.num_prompt_tokens - plan.computed_tokens;
  return plan;
}

}  // namespace pdkv::core
