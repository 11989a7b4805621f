// Transfer-plan compilation cost for realistic requests: Nemotron-3-Nano-30B-A3B, P TP4 (1056-
// token blocks) -> D TP2 rank 0 (2096-token blocks), 6 HMA regions, one attention group and four
// Mamba groups (6, 6, 6, 5 regions).
//
// Every row is a (request, Mamba cache mode, block-id layout) case:
//  * d_blocks: request size in whole D logical blocks. 2 (4192 tokens, "4k") and 62 (129952
//    tokens, "128k"). Both are even, so a 50% hit is a whole number of D blocks. A prefix-cache
//    hit is always whole blocks in vLLM, so any other percentage would have to be rounded, and a
//    rounded hit is not the named one. A case whose hit is not a whole number of D blocks, or
//    that asks for a hit with Mamba cache mode "none", fails with SkipWithError rather than
//    measuring something else. The real hit is reported as the hit_tokens counter.
//  * hit_pct: D's own prefix-cache hit. With mode "none", hybrid prefix caching is off, so only
//    0% exists. With "align" (Mamba prefix caching), D holds the state at the hit and needs the
//    state after all tokens from P. The Mamba block tables are built the way vLLM's align mode
//    fills them (null placeholders, the running state last) and then exchange-clipped
//    (clip_exchange_blocks) as the connector does, outside the timed loop.
//  * ids: 0 = a fixed random permutation of block ids (a fragmented allocator: the worst case for
//    coalescing), 1 = consecutive ids (a fresh allocator: the best case).
//
// Baseline, measured in the same run for every row: vLLM-style per-block descriptor-id lists for
// the same request (descriptor_ids on D's layout and on each read P rank's layout), which is what
// vLLM computes per request before make_prepped_xfer. It neither trims by token nor validates.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/exchange_clip.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv::core;

namespace {

/// Logical blocks per region on both engines.
constexpr uint64_t kPool = 512;

/// One benchmark case's request, built once outside the timed loop.
struct Setup {
  PlanContext ctx;              ///< D rank 0 reading from P ranks 0..3
  std::vector<PlanGroup> groups;  ///< one attention group, four Mamba groups
  uint64_t tokens = 0;          ///< prompt tokens P computed
  uint64_t hit_tokens = 0;      ///< D's prefix-cache hit (whole D blocks)
};

/// Benchmark arguments, decoded from state.range().
struct Case {
  uint64_t d_blocks = 0;   ///< request size in D logical blocks
  uint64_t hit_pct = 0;    ///< D's prefix hit, in percent of the request
  MambaCacheMode mode = MambaCacheMode::None;
  bool consecutive = false;  ///< consecutive block ids instead of a shuffled pool
};

/// Reads the four arguments of a row.
Case decode(const benchmark::State& state) {
  Case c;
  c.d_blocks = static_cast<uint64_t>(state.range(0));
  c.hit_pct = static_cast<uint64_t>(state.range(1));
  c.mode = state.range(2) == 0 ? MambaCacheMode::None : MambaCacheMode::Align;
  c.consecutive = state.range(3) != 0;
  return c;
}

/// Why a case cannot be measured as named, or nullopt when it can.
std::optional<std::string> invalid_case(const Case& c) {
  if (c.d_blocks * c.hit_pct % 100 != 0)
    return "a " + std::to_string(c.hit_pct) + "% hit of " + std::to_string(c.d_blocks) +
           " D blocks is not a whole number of blocks";
  if (c.hit_pct != 0 && c.mode == MambaCacheMode::None)
    return "Mamba cache mode none has no prefix caching, so no hit";
  return std::nullopt;
}

/// vLLM's align-mode block table for one Mamba group of a request spanning `positions` logical
/// blocks: null placeholders, then the running state in the last slot. The connector exports it
/// exchange-clipped, which for single-state modes keeps the last slot.
std::vector<uint64_t> align_table(uint64_t positions, uint64_t running) {
  std::vector<uint64_t> t(positions, kNullBlock);
  t.back() = running;
  ExchangeClipParams p;
  p.kind = GroupKind::Mamba;
  p.cache_mode = MambaCacheMode::Align;
  return clip_exchange_blocks(t, p);
}

Setup make(const Case& c) {
  const ModelDesc m = preset_model("nemotron-3-nano-30b");
  EngineConfig dc, pc;
  dc.tp_size = 2;
  pc.tp_size = 4;
  dc.cache_mode = pc.cache_mode = c.mode;
  const EngineGeometry dg = derive_geometry(m, dc), pg = derive_geometry(m, pc);
  Setup s;
  s.ctx.local = metadata_from_geometry(m, dc, dg, {"d", 0, kPool, 6, 1ull << 40});
  for (uint32_t r = 0; r < 4; ++r)
    s.ctx.remote.push_back(metadata_from_geometry(m, pc, pg, {"p", r, kPool, 6, (2ull + r) << 40}));
  s.ctx.mapping = compute_tp_mapping({2, 0, 4, 2, false, true});
  s.ctx.local_mamba = dg.mamba;
  s.ctx.remote_mamba = pg.mamba;

  std::vector<uint64_t> dpool(kPool - 1), ppool(kPool - 1);
  std::iota(dpool.begin(), dpool.end(), 1);  // id 0 is the null block
  std::iota(ppool.begin(), ppool.end(), 1);
  if (!c.consecutive) {
    std::mt19937_64 rng(42);
    std::shuffle(dpool.begin(), dpool.end(), rng);
    std::shuffle(ppool.begin(), ppool.end(), rng);
  }
  const uint64_t dbs = dg.block_size, pbs = pg.block_size;
  s.tokens = c.d_blocks * dbs;
  s.hit_tokens = c.d_blocks * c.hit_pct / 100 * dbs;
  const uint64_t d_positions = c.d_blocks, p_positions = (s.tokens + pbs - 1) / pbs;
  PlanGroup a;
  a.trim.kind = GroupKind::Attention;
  a.trim.remote_computed_tokens = s.tokens;
  a.trim.local_hit_tokens = s.hit_tokens;
  size_t di = 0, pi = 0;
  for (uint64_t b = s.hit_tokens / dbs; b < d_positions; ++b) a.trim.local_blocks.push_back(dpool[di++]);
  for (uint64_t b = 0; b < p_positions; ++b) a.trim.remote_blocks.push_back(ppool[pi++]);
  s.groups.push_back(a);
  for (int g = 0; g < 4; ++g) {
    PlanGroup mg;
    mg.trim.kind = GroupKind::Mamba;
    mg.trim.cache_mode = c.mode;
    mg.trim.remote_computed_tokens = s.tokens;
    mg.trim.local_hit_tokens = s.hit_tokens;
    if (c.mode == MambaCacheMode::Align) {
      // D's unhashed blocks start after the hit; P's table spans the whole request.
      mg.trim.local_blocks = align_table(d_positions - s.hit_tokens / dbs, dpool[di++]);
      mg.trim.remote_blocks = align_table(p_positions, ppool[pi++]);
    } else {
      mg.trim.local_blocks = {dpool[di++]};  // "none": one slot per request
      mg.trim.remote_blocks = {ppool[pi++]};
    }
    if (g == 3) mg.regions = {0, 1, 2, 3, 4};
    s.groups.push_back(mg);
  }
  return s;
}

/// Counters every row reports, so the request is visible next to its time.
void set_request_counters(benchmark::State& state, const Setup& s) {
  state.counters["tokens"] = static_cast<double>(s.tokens);
  state.counters["hit_tokens"] = static_cast<double>(s.hit_tokens);
}

/// Compiles and validates the request's plan each iteration.
void BM_CompilePlan(benchmark::State& state) {
  const Case c = decode(state);
  if (auto why = invalid_case(c)) {
    state.SkipWithError(why->c_str());
    return;
  }
  const Setup s = make(c);
  TransferPlan p;
  for (auto _ : state) {
    p = compile_transfer_plan(s.ctx, s.groups);
    benchmark::DoNotOptimize(p);
  }
  set_request_counters(state, s);
  state.counters["pieces_before"] = static_cast<double>(p.stats.pieces_before_coalescing);
  state.counters["pieces_after"] = static_cast<double>(p.stats.pieces_after_coalescing);
  state.counters["MiB_moved"] = static_cast<double>(p.stats.bytes) / (1 << 20);
  state.counters["MiB_mamba"] = static_cast<double>(p.stats.mamba_bytes) / (1 << 20);
}

// vLLM-style descriptor ids: one id per (region, kernel block) for attention and per (Mamba
// region x part, logical block) for Mamba, for D's handle and each read P rank's handle.
void BM_BaselineVllmDescriptorIds(benchmark::State& state) {
  const Case c = decode(state);
  if (auto why = invalid_case(c)) {
    state.SkipWithError(why->c_str());
    return;
  }
  const Setup s = make(c);
  std::vector<GroupBlockIds> local, remote;
  for (const auto& g : s.groups) {
    local.push_back({g.trim.kind, g.trim.local_blocks});
    // vLLM pairs counts: the remote list is cut to the local length (its Tail rule).
    std::vector<uint64_t> r = g.trim.remote_blocks;
    if (r.size() > g.trim.local_blocks.size())
      r.erase(r.begin(), r.end() - static_cast<std::ptrdiff_t>(g.trim.local_blocks.size()));
    remote.push_back({g.trim.kind, r});
  }
  const DescriptorLayout ll{s.ctx.local.num_kernel_blocks, 1, s.ctx.local.physical_blocks_per_logical, 6, 6 * 4};
  const DescriptorLayout rl{s.ctx.remote[0].num_kernel_blocks, 1, s.ctx.remote[0].physical_blocks_per_logical, 6,
                            6 * 4};
  size_t n = 0;
  for (auto _ : state) {
    std::vector<uint64_t> l = descriptor_ids(local, ll);
    n = l.size();
    for (int rank = 0; rank < 2; ++rank) {  // D rank 0 reads P ranks 0 and 1
      std::vector<uint64_t> r = descriptor_ids(remote, rl);
      benchmark::DoNotOptimize(r.data());
      n += r.size();
    }
    benchmark::DoNotOptimize(l.data());
  }
  set_request_counters(state, s);
  state.counters["descriptor_ids"] = static_cast<double>(n);
}

/// The rows: {2, 62} D blocks x (none 0%, align 0%, align 50%) x {shuffled, consecutive} ids.
void args(benchmark::internal::Benchmark* b) {
  for (int64_t d_blocks : {2, 62})
    for (int64_t ids : {0, 1}) {
      b->Args({d_blocks, 0, 0, ids});
      b->Args({d_blocks, 0, 1, ids});
      b->Args({d_blocks, 50, 1, ids});
    }
  b->ArgNames({"d_blocks", "hit_pct", "align", "consecutive"});
}

}  // namespace

BENCHMARK(BM_CompilePlan)->Apply(args);
BENCHMARK(BM_BaselineVllmDescriptorIds)->Apply(args);
BENCHMARK_MAIN();
