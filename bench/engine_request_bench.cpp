// What the engine-level API adds per request (core/engine_request.hpp): deriving the plan groups
// from the schedulers' block tables (N-1 rule, dropping D's hit blocks, kernel-id expansion with
// each side's blocks-per-logical, Mamba clipping), alone and followed by the plan compilation it
// feeds. Nemotron-3-Nano-30B-A3B, P TP4 -> D TP2 rank 0, Mamba cache mode "align", five KV-cache
// groups (four Mamba, one attention) as kv_cache_groups forms them.
//
// Rows: backend FlashAttention (kernel block = logical block, ppl 1) or FlashInfer (16-token
// kernel blocks: ppl in the hundreds, so every logical id expands to that many kernel ids) x
// request size in D logical blocks (2: ~4k tokens, 62: ~128k) x D's hit (0 or half the blocks).
// Block ids are consecutive from 1 in each engine's pool (one pool shared by the groups).
#include <benchmark/benchmark.h>

#include <vector>

#include "pdkv/core/backends.hpp"
#include "pdkv/core/engine_request.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/kv_cache_groups.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv::core;

namespace {

constexpr uint64_t kPool = 16384;  ///< logical blocks per region on both engines

struct Setup {
  std::vector<KvCacheGroup> groups;
  EngineMetadata d, p0;
  PlanContext ctx;
  std::vector<std::vector<uint64_t>> local, remote;
  std::vector<EngineRequestGroup> request_groups;
  EngineRequest request;
  uint64_t d_ppl = 1;
};

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

Setup make(bool flashinfer, uint64_t d_blocks, bool half_hit) {
  const ModelDesc m = preset_model("nemotron-3-nano-30b");
  EngineConfig dc, pc;
  dc.tp_size = 2;
  pc.tp_size = 4;
  dc.cache_mode = pc.cache_mode = MambaCacheMode::Align;
  if (flashinfer) {
    apply_backend(dc, Backend::FlashInfer);
    apply_backend(pc, Backend::FlashInfer);
  }
  const EngineGeometry dg = derive_geometry(m, dc), pg = derive_geometry(m, pc);
  Setup s;
  s.groups = kv_cache_groups(m);
  const uint32_t nreg = kv_cache_regions(s.groups);
  s.d = metadata_from_geometry(m, dc, dg, {"d", 0, kPool, nreg, 1ull << 40});
  std::vector<EngineMetadata> remote;
  for (uint32_t r = 0; r < 4; ++r) remote.push_back(metadata_from_geometry(m, pc, pg, {"p", r, kPool, nreg, (2ull + r) << 44}));
  s.p0 = remote[0];
  s.ctx = make_plan_context(s.d, remote, dg.mamba, pg.mamba);
  s.d_ppl = dg.physical_per_logical;

  const uint64_t n = d_blocks * dg.block_size;  // N prompt tokens; P computes N-1
  const uint64_t hit = half_hit ? d_blocks / 2 * dg.block_size : 0;
  const uint64_t dpos = ceil_div(n, dg.block_size), ppos = ceil_div(n - 1, pg.block_size);
  uint64_t dn = 1, pn = 1;
  for (const auto& g : s.groups) {
    std::vector<uint64_t> l, r;
    if (g.kind == GroupKind::Mamba) {
      for (uint64_t i = 0; i < dpos; ++i) l.push_back(i < hit / dg.block_size || i + 1 == dpos ? dn++ : 0);
      r.push_back(pn++);
    } else {
      for (uint64_t i = 0; i < dpos; ++i) l.push_back(dn++);
      for (uint64_t i = 0; i < ppos; ++i) r.push_back(pn++);
    }
    s.local.push_back(std::move(l));
    s.remote.push_back(std::move(r));
  }
  for (size_t g = 0; g < s.groups.size(); ++g) s.request_groups.push_back({s.local[g], s.remote[g]});
  s.request.groups = s.request_groups;
  s.request.num_prompt_tokens = n;
  s.request.num_local_computed_tokens = hit;
  return s;
}

void counters(benchmark::State& state, const Setup& s) {
  state.counters["tokens"] = static_cast<double>(s.request.num_prompt_tokens);
  state.counters["hit_tokens"] = static_cast<double>(s.request.num_local_computed_tokens);
  state.counters["d_ppl"] = static_cast<double>(s.d_ppl);
}

/// The derivation alone: block tables -> plan groups.
void BM_EngineRequestGroups(benchmark::State& state) {
  const Setup s = make(state.range(0) == 1, static_cast<uint64_t>(state.range(1)), state.range(2) == 1);
  const EngineSide d{&s.d, 0}, p{&s.p0, 0};
  for (auto _ : state) {
    std::vector<PlanGroup> g = engine_request_groups(s.groups, d, p, s.request);
    benchmark::DoNotOptimize(g.data());
  }
  counters(state, s);
}

/// The derivation and the plan compilation as pdkv_engine_plan_request runs them per request:
/// the context's checks judged once (as the C API's context handle does), the groups passed as
/// views into a plan whose buffers are reused.
void BM_EngineRequestPlan(benchmark::State& state) {
  const Setup s = make(state.range(0) == 1, static_cast<uint64_t>(state.range(1)), state.range(2) == 1);
  const EngineSide d{&s.d, 0}, p{&s.p0, 0};
  const PlanContextVerdict verdict = judge_plan_context(s.ctx);
  TransferPlan plan;
  std::vector<PlanGroupView> views;
  for (auto _ : state) {
    const std::vector<PlanGroup> groups = engine_request_groups(s.groups, d, p, s.request);
    views.clear();
    for (const PlanGroup& g : groups) views.push_back(view_of(g));
    compile_transfer_plan_into(s.ctx, views, plan, verdict);
    benchmark::DoNotOptimize(plan.stats.bytes);
  }
  counters(state, s);
}

void args(benchmark::internal::Benchmark* b) {
  for (int64_t flashinfer : {0, 1})
    for (int64_t d_blocks : {2, 62})
      for (int64_t half_hit : {0, 1}) b->Args({flashinfer, d_blocks, half_hit});
  b->ArgNames({"flashinfer", "d_blocks", "half_hit"});
}

}  // namespace

BENCHMARK(BM_EngineRequestGroups)->Apply(args);
BENCHMARK(BM_EngineRequestPlan)->Apply(args);
BENCHMARK_MAIN();
