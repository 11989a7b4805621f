#include "pdkv/core/engine_request.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/exchange_clip.hpp"
#include "pdkv/core/scheduler.hpp"

namespace pdkv::core {

namespace {

std::string s(uint64_t v) { return std::to_string(v); }

const char* mode_name(MambaCacheMode m) {
  switch (m) {
    case MambaCacheMode::None:
      return "none";
    case MambaCacheMode::Align:
      return "align";
    case MambaCacheMode::All:
      return "all";
  }
  return "none";
}

[[noreturn]] void bad(const std::string& what) { fail(Status::InvalidArgument, what); }

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// What a caller's ids must satisfy on one side, and how to name that side in errors.
struct SideRules {
  const char* list;         // "local_block_ids" / "remote_block_ids"
  const char* engine;       // "D" / "P"
  uint64_t num_logical = 0; // logical blocks per region: ids must be below
  uint64_t ppl = 1;
  uint64_t block_size = 1;  // logical block size in tokens
  uint64_t max_ids = 0;     // the most logical blocks the request can fill on this side
};

SideRules rules_of(const EngineSide& side, const char* list, const char* engine, uint64_t tokens) {
  const EngineMetadata& m = *side.metadata;
  SideRules r;
  r.list = list;
  r.engine = engine;
  r.ppl = m.physical_blocks_per_logical == 0 ? 1 : m.physical_blocks_per_logical;
  r.num_logical = m.num_kernel_blocks / r.ppl;
  r.block_size = m.logical_block_size == 0 ? 1 : m.logical_block_size;
  // The prompt's tokens, the speculative lookahead and the token being generated.
  r.max_ids = ceil_div(add_checked(add_checked(tokens, side.num_speculative_tokens, "request tokens"), 1,
                                   "request tokens"),
                       r.block_size);
  return r;
}

std::string where(size_t g, const KvCacheGroup& grp, const char* list, const std::string& index = "") {
  return "groups[" + std::to_string(g) + "]." + list + index + " (" + group_kind_name(grp.kind) + " group)";
}

// Every id names a logical block of the side's regions; an id past them is most likely a kernel
// id (a logical id times blocks-per-logical plus an offset).
void check_range(std::span<const uint64_t> ids, size_t g, const KvCacheGroup& grp, const SideRules& r) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= r.num_logical) {
      std::string hint = "pass the logical block ids of " + std::string(r.engine) + "'s block table";
      if (r.ppl > 1) {
        hint += " (kernel id " + s(ids[i]) + " is logical block " + s(ids[i] / r.ppl) + " at " + s(r.ppl) +
                " kernel blocks per logical block; pdkv expands logical ids itself)";
      }
      bad(where(g, grp, r.list, "[" + std::to_string(i) + "]") + " = " + s(ids[i]) + " is not one of " + r.engine +
          "'s " + s(r.num_logical) + " logical blocks: " + hint);
    }
  }
}

void check_count(std::span<const uint64_t> ids, size_t g, const KvCacheGroup& grp, const SideRules& r,
                 uint64_t tokens, uint64_t extra) {
  const uint64_t limit = add_checked(r.max_ids, extra, "list bound");
  if (ids.size() > limit) {
    std::string hint = "pass one logical block id per " + s(r.block_size) + "-token block";
    if (r.ppl > 1) hint += " (not kernel ids: pdkv expands each to " + s(r.ppl) + " kernel ids)";
    bad(where(g, grp, r.list) + " holds " + s(ids.size()) + " ids but " + s(tokens) + " tokens fill at most " +
        s(limit) + " of " + r.engine + "'s logical blocks of " + s(r.block_size) + " tokens: " + hint);
  }
}

}  // namespace

uint64_t engine_remote_computed_tokens(uint64_t num_prompt_tokens, bool hybrid) {
  if (num_prompt_tokens == 0) bad("num_prompt_tokens is 0: pass the request's prompt length (at least 1 token)");
  return d_num_new_matched_tokens(num_prompt_tokens, 0, hybrid);
}

void engine_request_views(const std::vector<KvCacheGroup>& groups, const EngineSide& local, const EngineSide& remote,
                          const EngineRequest& request, std::vector<PlanGroupView>& out) {
  out.clear();
  if (local.metadata == nullptr || remote.metadata == nullptr) fail(Status::NullPointer, "engine side metadata is NULL");
  const EngineMetadata& d = *local.metadata;
  const uint64_t n = request.num_prompt_tokens;
  const uint64_t hit = request.num_local_computed_tokens;
  const uint64_t computed = engine_remote_computed_tokens(n, d.is_hybrid());
  if (request.groups.size() != groups.size()) {
    bad("the request has " + std::to_string(request.groups.size()) + " groups but engine '" + d.engine_id + "' has " +
        std::to_string(groups.size()) + " KV-cache groups: pass one entry per group of pdkv_engine_group, in that order");
  }
  if (hit > n) {
    bad("num_local_computed_tokens = " + s(hit) + " exceeds num_prompt_tokens = " + s(n) +
        ": pass the tokens of D's prefix-cache hit, at most the prompt");
  }
  if (hit > 0 && !d.prefix_caching) {
    bad("num_local_computed_tokens = " + s(hit) + " but prefix caching is off on engine '" + d.engine_id +
        "': an engine without prefix caching holds no tokens of a new request; pass 0, or create the engine "
        "with prefix caching on (pdkv_engine_options_t.prefix_caching 1, or Mamba cache mode align/all)");
  }
  const SideRules lr = rules_of(local, "local_block_ids", "D", n);
  const SideRules rr = rules_of(remote, "remote_block_ids", "P", computed);
  if (hit % lr.block_size != 0) {
    bad("num_local_computed_tokens = " + s(hit) + " is not a multiple of engine '" + d.engine_id +
        "''s block size " + s(lr.block_size) + ": a prefix-cache hit covers whole blocks; pass the tokens of the "
        "blocks the KV cache manager hit (" + s(hit / lr.block_size * lr.block_size) + " here)");
  }
  if (hit > 0 && d.is_hybrid() && d.cache_mode == MambaCacheMode::None) {
    bad("num_local_computed_tokens = " + s(hit) + " with Mamba cache mode none on engine '" + d.engine_id +
        "': D caches no Mamba state, so it cannot hold a hit; pass 0, or run cache mode align or all");
  }
  const uint64_t first = hit / lr.block_size;  // block-table position of D's first missing token

  out.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const KvCacheGroup& grp = groups[g];
    const EngineRequestGroup& in = request.groups[g];
    check_range(in.local_block_ids, g, grp, lr);
    check_range(in.remote_block_ids, g, grp, rr);
    PlanGroupView pg;
    pg.kind = grp.kind;
    pg.remote_computed_tokens = computed;
    pg.local_hit_tokens = hit;
    pg.regions = grp.regions;
    const bool attention = grp.kind != GroupKind::Mamba;
    // Mamba lists also carry the speculative scratch slots at their end.
    check_count(in.local_block_ids, g, grp, lr, n, attention ? 0 : local.num_speculative_tokens);
    check_count(in.remote_block_ids, g, grp, rr, computed, 0);
    if (in.local_block_ids.size() < first && hit < computed) {
      bad(where(g, grp, "local_block_ids") + " holds " + s(in.local_block_ids.size()) + " ids but D's hit of " +
          s(hit) + " tokens already spans " + s(first) + " blocks: pass D's whole block table for the request, "
          "hit blocks included");
    }
    const size_t skip = static_cast<size_t>(std::min<uint64_t>(first, in.local_block_ids.size()));
    const std::span<const uint64_t> unhashed = in.local_block_ids.subspan(skip);
    if (attention) {
      // The block tables' logical ids as they are: the planner walks them as the kernel ids
      // they stand for (kernel_blocks_per_id), never expanded.
      pg.local_blocks = unhashed;
      pg.remote_blocks = in.remote_block_ids;
      pg.local_kernel_blocks_per_id = lr.ppl;
      pg.remote_kernel_blocks_per_id = rr.ppl;
      pg.local_first_block = mul_checked(first, lr.ppl, "first kernel block");
    } else {
      const MambaCacheMode mode = d.cache_mode;
      if (remote.metadata->cache_mode != mode) {
        bad("engine '" + d.engine_id + "' runs Mamba cache mode " + mode_name(mode) + " but P engine '" +
            remote.metadata->engine_id + "' runs " + mode_name(remote.metadata->cache_mode) +
            ": both engines must use the same --mamba-cache-mode");
      }
      pg.cache_mode = mode;
      ExchangeClipParams clip;
      clip.kind = GroupKind::Mamba;
      clip.cache_mode = mode;
      clip.num_speculative_blocks = local.num_speculative_tokens;
      pg.local_blocks = clip_exchange_span(unhashed, clip);
      pg.remote_blocks = in.remote_block_ids;
      if (mode == MambaCacheMode::All) {
        pg.local_first_block = first;
      } else {
        size_t real = 0;
        for (uint64_t b : pg.remote_blocks) real += b != kNullBlock ? 1 : 0;
        if (real > 1) {
          bad(where(g, grp, "remote_block_ids") + " holds " + std::to_string(real) +
              " real blocks but Mamba cache mode " + mode_name(mode) +
              " keeps one running state per request: pass P's exported (exchange-clipped) ids, its running "
              "state only");
        }
      }
    }
    out.push_back(pg);
  }
}

std::vector<PlanGroup> engine_request_groups(const std::vector<KvCacheGroup>& groups, const EngineSide& local,
                                             const EngineSide& remote, const EngineRequest& request) {
  std::vector<PlanGroupView> views;
  engine_request_views(groups, local, remote, request, views);
  std::vector<PlanGroup> out;
  out.reserve(views.size());
  for (const PlanGroupView& v : views) out.push_back(owned_copy(v));
  return out;
}

}  // namespace pdkv::core
