// The request bench/plan_vs_vllm.cpp times, built as ../shared/tools/vllm_plan_baseline.py builds
// its requests (same block counts, same group order and sizes; the id values come from the
// generator below, which bench/plan_vs_vllm.py mirrors for the Python binding). vLLM's side of
// the comparison runs in Python and is never linked here.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pdkv.h"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::bench {

using core::GroupKind;
using core::MambaCacheMode;
using core::PlanGroupView;

constexpr uint64_t kDPool = 5700;  // logical blocks per region on D (H100-80GB, TP2)
constexpr uint64_t kPPool = 8200;  // on P (TP4)
constexpr uint32_t kRegions = 6;     // pooled regions on both sides (vLLM's HMA for this model)

// splitmix64: a small seeded generator both this file and plan_vs_vllm.py implement.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// `total` distinct logical ids from [1, pool): one ascending run after a few other requests'
// blocks (contig), or a partial Fisher-Yates sample (frag).
inline std::vector<uint64_t> logical_ids(uint64_t pool, uint64_t total, bool frag, uint64_t seed) {
  std::vector<uint64_t> out;
  if (!frag) {
    const uint64_t base = 1 + seed % 97;
    for (uint64_t i = 0; i < total; ++i) out.push_back(base + i);
    return out;
  }
  std::vector<uint64_t> all(pool - 1);
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = i + 1;
  SplitMix g{seed};
  for (uint64_t i = 0; i < total; ++i) {
    const uint64_t j = i + g.next() % (all.size() - i);
    std::swap(all[i], all[j]);
    out.push_back(all[i]);
  }
  return out;
}

struct Group {
  GroupKind kind = GroupKind::Attention;
  MambaCacheMode mode = MambaCacheMode::None;
  std::vector<uint64_t> local, remote;
  uint64_t computed = 0, hit = 0;
  std::vector<uint32_t> regions;
  // Kernel blocks per listed id (1: kernel ids; ppl: the logical ids of the block table).
  uint64_t local_k = 1, remote_k = 1;
  // Attention: the logical ids the kernel ids above expand from, with each side's ppl.
  std::vector<uint64_t> local_logical, remote_logical;
  uint64_t d_ppl = 1, p_ppl = 1;
};

struct CGroups {
  std::vector<pdkv_group_trim_input_t> trims;
  std::vector<pdkv_plan_group_t> groups;
};

struct Request {
  std::vector<Group> groups;  // four Mamba groups, then attention (vLLM's group order)

  std::vector<PlanGroupView> views() const {
    std::vector<PlanGroupView> v;
    for (const Group& g : groups) {
      PlanGroupView x;
      x.kind = g.kind;
      x.cache_mode = g.mode;
      x.local_blocks = g.local;
      x.remote_blocks = g.remote;
      x.remote_computed_tokens = g.computed;
      x.local_hit_tokens = g.hit;
      x.regions = g.regions;
      x.local_kernel_blocks_per_id = g.local_k;
      x.remote_kernel_blocks_per_id = g.remote_k;
      v.push_back(x);
    }
    return v;
  }

  CGroups c_groups() const {
    CGroups c;
    c.trims.resize(groups.size());
    c.groups.resize(groups.size());
    for (size_t i = 0; i < groups.size(); ++i) {
      const Group& g = groups[i];
      pdkv_group_trim_input_t& t = c.trims[i];
      t = {};
      t.struct_size = sizeof(t);
      t.kind = static_cast<int32_t>(g.kind);
      t.cache_mode = static_cast<int32_t>(g.mode);
      t.local_blocks = g.local.data();
      t.num_local_blocks = g.local.size();
      t.remote_blocks = g.remote.data();
      t.num_remote_blocks = g.remote.size();
      t.remote_computed_tokens = g.computed;
      t.local_hit_tokens = g.hit;
      t.field_mask |= PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID;
      t.local_kernel_blocks_per_id = g.local_k;
      t.remote_kernel_blocks_per_id = g.remote_k;
      c.groups[i] = {};
      c.groups[i].struct_size = sizeof(pdkv_plan_group_t);
      c.groups[i].trim = &c.trims[i];
      c.groups[i].regions = g.regions.empty() ? nullptr : g.regions.data();
      c.groups[i].num_regions = g.regions.size();
    }
    return c;
  }

  // The same request with the attention ids as the engine's block tables hold them: logical ids
  // and kernel_blocks_per_id = ppl (what vLLM's planning starts from before it expands them).
  Request as_logical() const {
    Request r = *this;
    for (Group& g : r.groups) {
      if (g.kind == GroupKind::Mamba) continue;
      g.local = g.local_logical;
      g.remote = g.remote_logical;
      g.local_k = g.d_ppl;
      g.remote_k = g.p_ppl;
    }
    return r;
  }
};

// T prompt tokens, D loads T-1; hit_pct of D's logical blocks already cached (floored).
inline Request make_request(uint64_t tokens, uint64_t hit_pct, bool frag, uint64_t d_block,
                            uint64_t p_block, uint64_t d_ppl, uint64_t p_ppl, MambaCacheMode mode) {
  const uint64_t n_load = tokens - 1;
  const uint64_t nd_total = (n_load + d_block - 1) / d_block;
  const uint64_t hit = nd_total * hit_pct / 100;
  const uint64_t nd = nd_total - hit;
  const uint64_t npf = (n_load + p_block - 1) / p_block;
  const uint64_t seed = tokens * 31 + hit_pct * 7 + 5;
  const auto local = logical_ids(kDPool, 4 + nd, frag, seed);
  const auto remote = logical_ids(kPPool, 4 + npf, frag, seed * 7 + 3);
  Request rq;
  for (int g = 0; g < 4; ++g) {
    Group m;
    m.kind = GroupKind::Mamba;
    m.mode = mode;
    m.local = {local[static_cast<size_t>(g)]};
    m.remote = {remote[static_cast<size_t>(g)]};
    m.computed = n_load;
    m.hit = hit * d_block;
    if (g == 3) m.regions = {0, 1, 2, 3, 4};  // the 5-layer group
    rq.groups.push_back(m);
  }
  Group a;
  a.computed = n_load;
  a.hit = hit * d_block;
  for (uint64_t i = 4; i < local.size(); ++i)
    for (uint64_t j = 0; j < d_ppl; ++j) a.local.push_back(local[i] * d_ppl + j);
  for (uint64_t i = 4; i < remote.size(); ++i)
    for (uint64_t j = 0; j < p_ppl; ++j) a.remote.push_back(remote[i] * p_ppl + j);
  a.local_logical.assign(local.begin() + 4, local.end());
  a.remote_logical.assign(remote.begin() + 4, remote.end());
  a.d_ppl = d_ppl;
  a.p_ppl = p_ppl;
  rq.groups.push_back(a);
  return rq;
}

}  // namespace pdkv::bench
