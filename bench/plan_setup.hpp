// The planning context the benches share: NVIDIA-Nemotron-3-Nano-30B-A3B, P TP4 -> D TP2 rank 0,
// both engines at 2096-token blocks, kRegions pooled regions of kDPool / kPPool logical blocks
// (plan_request.hpp), built through the C++ core; plus the small helpers the bench mains share
// (a comma list parser, a sampling timer). plan_vs_vllm, plan_floor and executor_bench time or
// move the plans of this one context, so their figures are of the same work.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "plan_request.hpp"

namespace pdkv::bench {

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    std::string item = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (!item.empty()) out.push_back(std::move(item));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

// One side's engine config: TP tp, 2096-token blocks, FlashInfer's 16-token kernel blocks when
// flashinfer (else one kernel block per logical block), Mamba cache mode `mode`.
inline core::EngineConfig engine_config(uint32_t tp, bool flashinfer, core::MambaCacheMode mode) {
  core::EngineConfig c;
  c.tp_size = tp;
  c.user_block_size = 2096;
  c.cache_mode = mode;
  if (flashinfer) c.kernel_block_sizes = {16, 32, 64};
  return c;
}

// D rank 0's planning context against the four P ranks, validated and judged once (as an engine
// does per peer), with both sides' geometries.
struct PlanSetup {
  core::EngineGeometry dg, pg;
  core::PlanContext ctx;
  core::PlanContextVerdict verdict;
};

inline PlanSetup make_plan_setup(bool flashinfer, core::MambaCacheMode mode) {
  using namespace core;
  const ModelDesc m = preset_model("nemotron-3-nano-30b");
  const EngineConfig dc = engine_config(2, flashinfer, mode), pc = engine_config(4, flashinfer, mode);
  PlanSetup s{derive_geometry(m, dc), derive_geometry(m, pc), {}, {}};
  std::vector<EngineMetadata> remote;
  for (uint32_t r = 0; r < 4; ++r)
    remote.push_back(metadata_from_geometry(m, pc, s.pg, {"prefill", r, kPPool, kRegions, (2ull + r) << 44}));
  s.ctx = make_plan_context(metadata_from_geometry(m, dc, s.dg, {"decode", 0, kDPool, kRegions, 1ull << 40}),
                            remote, s.dg.mamba, s.pg.mamba);
  validate_plan_context(s.ctx);
  s.verdict = judge_plan_context(s.ctx);
  return s;
}

// The request of `tokens` prompt tokens, hit_pct% of D's blocks hit, consecutive or fragmented
// ids, as make_request builds it for this setup's geometries.
inline Request setup_request(const PlanSetup& s, uint64_t tokens, uint64_t hit_pct, bool frag,
                             core::MambaCacheMode mode) {
  return make_request(tokens, hit_pct, frag, s.dg.block_size, s.pg.block_size, s.dg.physical_per_logical,
                      s.pg.physical_per_logical, mode);
}

// Median and min ns per call of f: samples of enough calls for ~20 us each, for about target_s
// seconds (at least 15 samples), after one warm-up call (buffers reach the request's size).
template <class F>
std::pair<double, double> time_calls(F&& f, double target_s) {
  using clock = std::chrono::steady_clock;
  f();
  const auto t0 = clock::now();
  f();
  const double one = std::chrono::duration<double>(clock::now() - t0).count();
  const int reps = std::max(1, static_cast<int>(20e-6 / std::max(one, 1e-9)));
  std::vector<double> samples;
  const auto start = clock::now();
  while (samples.size() < 15 ||
         (std::chrono::duration<double>(clock::now() - start).count() < target_s && samples.size() < 100000)) {
    const auto a = clock::now();
    for (int i = 0; i < reps; ++i) f();
    samples.push_back(std::chrono::duration<double, std::nano>(clock::now() - a).count() / reps);
  }
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples.front()};
}

}  // namespace pdkv::bench
