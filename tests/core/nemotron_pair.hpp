// Test helper: NVIDIA-Nemotron-3-Nano-30B-A3B engine pairs (any TP sizes, FlashInfer or
// FlashAttention kernel blocks, a Mamba cache mode) and random requests as vLLM's hybrid KV cache
// manager builds them for this model (four Mamba groups, one full-attention group over kernel
// ids; fragmented or consecutive ids, hits, now and then a Mamba id out of range). Shared by the
// template and factored-plan tests.
#pragma once

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::core::test {

constexpr uint64_t kDPool = 700, kPPool = 900;

struct Pair {
  ModelDesc m;
  EngineConfig dc, pc;
  EngineGeometry dg, pg;
  PlanContext ctx;
};

inline EngineConfig config(uint32_t tp, bool flashinfer, MambaCacheMode mode) {
  EngineConfig c;
  c.tp_size = tp;
  c.user_block_size = 2096;
  c.cache_mode = mode;
  if (flashinfer) c.kernel_block_sizes = {16, 32, 64};
  return c;
}

inline Pair nemotron(uint32_t d_tp, uint32_t d_rank, uint32_t p_tp, bool flashinfer, MambaCacheMode mode) {
  Pair x;
  x.m = preset_model("nemotron-3-nano-30b");
  x.dc = config(d_tp, flashinfer, mode);
  x.pc = config(p_tp, flashinfer, mode);
  x.dg = derive_geometry(x.m, x.dc);
  x.pg = derive_geometry(x.m, x.pc);
  std::vector<EngineMetadata> remote;
  for (uint32_t r = 0; r < p_tp; ++r)
    remote.push_back(metadata_from_geometry(x.m, x.pc, x.pg, {"prefill", r, kPPool, 6, (2ull + r) << 44}));
  x.ctx = make_plan_context(metadata_from_geometry(x.m, x.dc, x.dg, {"decode", d_rank, kDPool, 6, 1ull << 40}),
                            remote, x.dg.mamba, x.pg.mamba);
  return x;
}

// A request as vLLM's HMA builds it for this model: four Mamba groups (one state each; the
// last one on 5 regions) and one full-attention group over kernel ids.
inline std::vector<PlanGroup> request(std::mt19937_64& rng, const Pair& x, MambaCacheMode mode, bool& bad_ids) {
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  const uint64_t db = x.dg.block_size, pb = x.pg.block_size;
  const uint64_t dppl = x.dg.physical_per_logical, pppl = x.pg.physical_per_logical;
  const uint64_t n = pick(1, 60 * db);
  const uint64_t nd_total = (n + db - 1) / db;
  const uint64_t hit = mode == MambaCacheMode::None ? 0 : pick(0, nd_total - 1);
  const bool frag = pick(0, 1) == 1;
  // Distinct logical ids: runs of random lengths (frag) or one run, from [1, pool).
  auto ids = [&](uint64_t pool, uint64_t count) {
    std::vector<uint64_t> out;
    std::set<uint64_t> used;
    uint64_t next = pick(1, pool / 2);
    for (uint64_t i = 0; i < count; ++i) {
      if (frag && pick(0, 3) == 0) next = pick(1, pool - 1);
      while (used.count(next)) next = pick(1, pool - 1);
      used.insert(next);
      out.push_back(next);
      next = next + 1 < pool ? next + 1 : 1;
    }
    return out;
  };
  const auto local = ids(kDPool, 4 + nd_total - hit);
  const auto remote = ids(kPPool, 4 + (n + pb - 1) / pb);
  std::vector<PlanGroup> groups;
  bad_ids = false;
  for (int g = 0; g < 4; ++g) {
    PlanGroup m;
    m.trim.kind = GroupKind::Mamba;
    m.trim.cache_mode = mode;
    uint64_t l = local[static_cast<size_t>(g)], r = remote[static_cast<size_t>(g)];
    switch (pick(0, 40)) {  // now and then an id past the region, or one whose page overflows
      case 0: l = kDPool + pick(0, 5); bad_ids = true; break;
      case 1: r = kPPool + pick(0, 5); bad_ids = true; break;
      case 2: l = UINT64_MAX / pick(2, 1000); bad_ids = true; break;
      case 3: r = UINT64_MAX - pick(0, 3); bad_ids = true; break;
      default: break;
    }
    m.trim.local_blocks = {l};
    m.trim.remote_blocks = {r};
    m.trim.remote_computed_tokens = n;
    m.trim.local_hit_tokens = hit * db;
    if (g == 3) m.regions = {0, 1, 2, 3, 4};
    groups.push_back(m);
  }
  PlanGroup a;
  a.trim.remote_computed_tokens = n;
  a.trim.local_hit_tokens = hit * db;
  for (size_t i = 4; i < local.size(); ++i)
    for (uint64_t j = 0; j < dppl; ++j) a.trim.local_blocks.push_back(local[i] * dppl + j);
  for (size_t i = 4; i < remote.size(); ++i)
    for (uint64_t j = 0; j < pppl; ++j) a.trim.remote_blocks.push_back(remote[i] * pppl + j);
  groups.push_back(a);
  return groups;
}

}  // namespace pdkv::core::test
