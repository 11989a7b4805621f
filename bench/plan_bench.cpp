// Transfer-plan compilation cost for realistic requests: Nemotron-3-Nano-30B-A3B, P TP4 (1056-
// token blocks) -> D TP2 rank 0 (2096-token blocks), 6 HMA regions, one attention group and four
// Mamba groups (6, 6, 6, 5 regions), 4k and 128k tokens, 0% and 50% prefix hit. Block ids are a
// fixed random permutation (a fragmented allocator: the worst case for coalescing).
//
// Baseline, measured in the same run: vLLM-style per-block descriptor-id lists for the same
// request (descriptor_ids on D's layout and on each read P rank's layout), which is what vLLM
// computes per request before make_prepped_xfer; it neither trims by token nor validates.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv::core;

namespace {

constexpr uint64_t kPool = 512;  // logical blocks per region

struct Setup {
  PlanContext ctx;
  std::vector<PlanGroup> groups;
};

Setup make(uint64_t tokens, uint64_t hit_percent) {
  const ModelDesc m = preset_model("nemotron-3-nano-30b");
  EngineConfig dc, pc;
  dc.tp_size = 2;
  pc.tp_size = 4;
  const EngineGeometry dg = derive_geometry(m, dc), pg = derive_geometry(m, pc);
  Setup s;
  s.ctx.local = metadata_from_geometry(m, dc, dg, {"d", 0, kPool, 6, 1ull << 40});
  for (uint32_t r = 0; r < 4; ++r)
    s.ctx.remote.push_back(metadata_from_geometry(m, pc, pg, {"p", r, kPool, 6, (2ull + r) << 40}));
  s.ctx.mapping = compute_tp_mapping({2, 0, 4, 2, false, true});
  s.ctx.local_mamba = dg.mamba;
  s.ctx.remote_mamba = pg.mamba;

  std::mt19937_64 rng(42);
  std::vector<uint64_t> dpool(kPool - 1), ppool(kPool - 1);
  std::iota(dpool.begin(), dpool.end(), 1);
  std::iota(ppool.begin(), ppool.end(), 1);
  std::shuffle(dpool.begin(), dpool.end(), rng);
  std::shuffle(ppool.begin(), ppool.end(), rng);
  const uint64_t dbs = dg.block_size, pbs = pg.block_size;
  const uint64_t hit = (tokens * hit_percent / 100) / dbs * dbs;
  PlanGroup a;
  a.trim.kind = GroupKind::Attention;
  a.trim.remote_computed_tokens = tokens;
  a.trim.local_hit_tokens = hit;
  size_t di = 0, pi = 0;
  for (uint64_t b = hit / dbs; b < (tokens + dbs - 1) / dbs; ++b) a.trim.local_blocks.push_back(dpool[di++]);
  for (uint64_t b = 0; b < (tokens + pbs - 1) / pbs; ++b) a.trim.remote_blocks.push_back(ppool[pi++]);
  s.groups.push_back(a);
  for (int g = 0; g < 4; ++g) {
    PlanGroup mg;
    mg.trim.kind = GroupKind::Mamba;
    mg.trim.remote_computed_tokens = tokens;
    mg.trim.local_hit_tokens = hit;
    mg.trim.local_blocks = {dpool[di++]};
    mg.trim.remote_blocks = {ppool[pi++]};
    if (g == 3) mg.regions = {0, 1, 2, 3, 4};
    s.groups.push_back(mg);
  }
  return s;
}

void set_counters(benchmark::State& state, const TransferPlan& p) {
  state.counters["pieces_before"] = static_cast<double>(p.stats.pieces_before_coalescing);
  state.counters["pieces_after"] = static_cast<double>(p.stats.pieces_after_coalescing);
  state.counters["MiB_moved"] = static_cast<double>(p.stats.bytes) / (1 << 20);
}

void BM_CompilePlan(benchmark::State& state) {
  const Setup s = make(static_cast<uint64_t>(state.range(0)), static_cast<uint64_t>(state.range(1)));
  TransferPlan p;
  for (auto _ : state) {
    p = compile_transfer_plan(s.ctx, s.groups);
    benchmark::DoNotOptimize(p);
  }
  set_counters(state, p);
}

// vLLM-style descriptor ids: one id per (region, kernel block) for attention and per (Mamba
// region x part, logical block) for Mamba, for D's handle and each read P rank's handle.
void BM_BaselineVllmDescriptorIds(benchmark::State& state) {
  const Setup s = make(static_cast<uint64_t>(state.range(0)), static_cast<uint64_t>(state.range(1)));
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
  state.counters["descriptor_ids"] = static_cast<double>(n);
}

void args(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {4096, 131072})
    for (int64_t hit : {0, 50}) b->Args({tokens, hit});
  b->ArgNames({"tokens", "hit_pct"});
}

}  // namespace

BENCHMARK(BM_CompilePlan)->Apply(args);
BENCHMARK(BM_BaselineVllmDescriptorIds)->Apply(args);
BENCHMARK_MAIN();
