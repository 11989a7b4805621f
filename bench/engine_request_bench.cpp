// What the engine-level API adds per request (core/engine_request.hpp): deriving the plan groups
// from the schedulers' block tables (N-1 rule, dropping D's hit blocks, logical ids handed on with
// each side's blocks-per-logical, Mamba clipping), alone and followed by the plan compilation it
// feeds, as owned groups (until 2.8) and as views (2.9); then the whole call through the C API,
// a new plan handle per request (pdkv_engine_plan_request) against one reused plan
// (pdkv_engine_plan_request_into). Nemotron-3-Nano-30B-A3B, P TP4 -> D TP2 rank 0, Mamba cache
// mode "align", five KV-cache groups (four Mamba, one attention) as kv_cache_groups forms them.
//
// Rows: backend FlashAttention (kernel block = logical block, ppl 1) or FlashInfer (16-token
// kernel blocks: ppl in the hundreds) x request size in D logical blocks (2: ~4k tokens, 62:
// ~128k) x D's hit (0 or half the blocks) [x into, C rows]. Block ids are consecutive from 1 in
// each engine's pool (one pool shared by the groups).
#include <benchmark/benchmark.h>

#include <vector>

#include "pdkv/core/backends.hpp"
#include "pdkv/core/engine_request.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/kv_cache_groups.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "pdkv.h"

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

/// The derivation as pdkv_engine_plan_request(_into) runs it since 2.9: views into the request's
/// own arrays, written into a reused vector.
void BM_EngineRequestViews(benchmark::State& state) {
  const Setup s = make(state.range(0) == 1, static_cast<uint64_t>(state.range(1)), state.range(2) == 1);
  const EngineSide d{&s.d, 0}, p{&s.p0, 0};
  std::vector<PlanGroupView> views;
  for (auto _ : state) {
    engine_request_views(s.groups, d, p, s.request, views);
    benchmark::DoNotOptimize(views.data());
  }
  counters(state, s);
}

/// The derivation and the plan compilation as pdkv_engine_plan_request ran them until 2.8: owned
/// groups (copied ids and regions) per request, viewed, compiled into a plan whose buffers are
/// reused; the context's checks judged once (as the C API's context handle does).
void BM_EngineRequestPlanOwned(benchmark::State& state) {
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

/// The same with the views of 2.9 (what pdkv_engine_plan_request_into runs per request).
void BM_EngineRequestPlan(benchmark::State& state) {
  const Setup s = make(state.range(0) == 1, static_cast<uint64_t>(state.range(1)), state.range(2) == 1);
  const EngineSide d{&s.d, 0}, p{&s.p0, 0};
  const PlanContextVerdict verdict = judge_plan_context(s.ctx);
  TransferPlan plan;
  std::vector<PlanGroupView> views;
  for (auto _ : state) {
    engine_request_views(s.groups, d, p, s.request, views);
    compile_transfer_plan_into(s.ctx, views, plan, verdict);
    benchmark::DoNotOptimize(plan.stats.bytes);
  }
  counters(state, s);
}

/// The same requests through the C API, engines described once with pdkv_engine_new: the
/// caller's whole cost per request. into = 0: pdkv_engine_plan_request (a new plan handle per
/// request, freed after); into = 1: pdkv_engine_plan_request_into one reused plan.
struct CEngineSetup {
  pdkv_model_t* model = nullptr;
  pdkv_engine_t* d = nullptr;
  std::vector<pdkv_engine_t*> p;
  std::vector<pdkv_engine_metadata_t*> p_md;
  pdkv_plan_context_t* ctx = nullptr;
  std::vector<std::vector<uint64_t>> local, remote;
  std::vector<pdkv_engine_request_group_t> groups;
  pdkv_engine_request_t request{};
  CEngineSetup(const CEngineSetup&) = delete;
  CEngineSetup& operator=(const CEngineSetup&) = delete;
  CEngineSetup() = default;
  ~CEngineSetup() {
    pdkv_plan_context_free(ctx);
    for (auto* m : p_md) pdkv_engine_metadata_free(m);
    for (auto* e : p) pdkv_engine_free(e);
    pdkv_engine_free(d);
    pdkv_model_free(model);
  }
};

void ok(pdkv_status_t st, pdkv_error_t* e, benchmark::State& state) {
  if (st != PDKV_OK) {
    state.SkipWithError(e != nullptr ? pdkv_error_message(e) : pdkv_status_name(st));
    pdkv_error_free(e);
  }
}

void BM_CEnginePlanRequest(benchmark::State& state) {
  const bool flashinfer = state.range(0) == 1, into = state.range(3) == 1;
  const Setup s = make(flashinfer, static_cast<uint64_t>(state.range(1)), state.range(2) == 1);
  CEngineSetup c;
  pdkv_error_t* e = nullptr;
  ok(pdkv_model_from_preset("nemotron-3-nano-30b", &c.model, &e), e, state);
  pdkv_engine_config_t dc, pc;
  pdkv_engine_config_init(&dc, nullptr);
  pdkv_engine_config_init(&pc, nullptr);
  dc.tp_size = 2;
  pc.tp_size = 4;
  dc.mamba_cache_mode = pc.mamba_cache_mode = PDKV_MAMBA_CACHE_ALIGN;
  dc.attention_backend = pc.attention_backend = flashinfer ? PDKV_BACKEND_FLASHINFER : PDKV_BACKEND_FLASH_ATTN;
  auto engine = [&](const pdkv_engine_config_t& cfg, const char* id, uint32_t rank) {
    pdkv_engine_options_t o;
    pdkv_engine_options_init(&o, nullptr);
    o.model = c.model;
    o.config = &cfg;
    o.engine_id = id;
    o.tp_rank = rank;
    o.num_logical_blocks = kPool;
    pdkv_engine_t* out = nullptr;
    ok(pdkv_engine_new(&o, &out, &e), e, state);
    return out;
  };
  c.d = engine(dc, "d", 0);
  for (uint32_t r = 0; r < 4; ++r) {
    c.p.push_back(engine(pc, "p", r));
    c.p_md.push_back(nullptr);
    ok(pdkv_engine_get_metadata(c.p.back(), &c.p_md.back(), &e), e, state);
  }
  std::vector<const pdkv_engine_metadata_t*> remote(c.p_md.begin(), c.p_md.end());
  pdkv_engine_peer_t peer{};
  peer.struct_size = sizeof peer;
  peer.remote = remote.data();
  peer.num_remote = remote.size();
  peer.remote_config = &pc;
  ok(pdkv_engine_plan_context_new(c.d, &peer, &c.ctx, &e), e, state);
  // The core setup's block tables (the same request as the rows above).
  for (size_t g = 0; g < s.local.size(); ++g) {
    c.groups.push_back({s.local[g].data(), s.local[g].size(), s.remote[g].data(), s.remote[g].size()});
  }
  c.request.struct_size = sizeof c.request;
  c.request.groups = c.groups.data();
  c.request.num_groups = c.groups.size();
  c.request.num_prompt_tokens = s.request.num_prompt_tokens;
  c.request.num_local_computed_tokens = s.request.num_local_computed_tokens;
  pdkv_transfer_plan_t* reused = nullptr;
  ok(pdkv_transfer_plan_new(&reused, &e), e, state);
  for (auto _ : state) {
    if (into) {
      ok(pdkv_engine_plan_request_into(c.d, c.ctx, &c.request, reused, &e), e, state);
    } else {
      pdkv_transfer_plan_t* plan = nullptr;
      ok(pdkv_engine_plan_request(c.d, c.ctx, &c.request, &plan, &e), e, state);
      pdkv_transfer_plan_free(plan);
    }
  }
  pdkv_transfer_plan_free(reused);
  counters(state, s);
}

void args(benchmark::internal::Benchmark* b) {
  for (int64_t flashinfer : {0, 1})
    for (int64_t d_blocks : {2, 62})
      for (int64_t half_hit : {0, 1}) b->Args({flashinfer, d_blocks, half_hit});
  b->ArgNames({"flashinfer", "d_blocks", "half_hit"});
}

}  // namespace

void c_args(benchmark::internal::Benchmark* b) {
  for (int64_t flashinfer : {0, 1})
    for (int64_t d_blocks : {2, 62})
      for (int64_t half_hit : {0, 1})
        for (int64_t into : {0, 1}) b->Args({flashinfer, d_blocks, half_hit, into});
  b->ArgNames({"flashinfer", "d_blocks", "half_hit", "into"});
}

BENCHMARK(BM_EngineRequestGroups)->Apply(args);
BENCHMARK(BM_EngineRequestViews)->Apply(args);
BENCHMARK(BM_EngineRequestPlanOwned)->Apply(args);
BENCHMARK(BM_EngineRequestPlan)->Apply(args);
BENCHMARK(BM_CEnginePlanRequest)->Apply(c_args);
BENCHMARK_MAIN();
