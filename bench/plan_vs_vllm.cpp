// Per-request plan compilation time for the requests ../shared/tools/vllm_plan_baseline.py times
// in vLLM (bench/plan_vs_vllm.py runs both and prints the ratios). NVIDIA-Nemotron-3-Nano-30B-A3B,
// P TP4 -> D TP2 rank 0, both engines at 2096-token blocks (P started with --block-size 2096, as
// vLLM needs for this pair), 6 pooled regions, groups as vLLM's HMA builds them: four Mamba groups
// (6, 6, 6, 5 layers; one block each) and one full-attention group.
//
// Geometries: "flashinfer" (kernel blocks of 16 tokens: 131 per logical block, the ids are kernel
// ids) and "flash_attn" (one kernel block per logical block). Requests: T prompt tokens, D loads
// T-1 (the N-1 rule); a hit of h% is floor(h% of D's logical blocks) already cached on D; ids
// "contig" (one ascending run) or "frag" (a seeded random sample of the pool).
//
// Paths: "cpp" = pdkv::core::compile_transfer_plan_into with views and one reused plan (what an
// engine written in C++ calls); "c" = pdkv_transfer_plan_compile_into into one reused plan handle
// (what the Python binding calls when given a plan to reuse); "c_new" =
// pdkv_transfer_plan_compile + pdkv_transfer_plan_free (a new handle per request); "cpp_logical"
// and "c_logical" = "cpp" and "c" given the attention ids as the block tables hold them (logical
// ids with kernel_blocks_per_id = ppl, where vLLM's planning starts), checked to give the same plan. Each case prints one JSON line: median and min ns per request over
// samples of repeated calls, plus the plan's read count.
//
// Usage: plan_vs_vllm [--tokens 4096,32768,131072,1048576] [--hits 0,50] [--alloc contig,frag]
//                     [--geometry flashinfer,flash_attn] [--target-s 0.3] [--print-ids CASE]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "pdkv.h"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "c_plan_context.hpp"
#include "plan_setup.hpp"

using namespace pdkv::core;
using pdkv::bench::Request;
using pdkv::bench::time_calls;

namespace {

void check(pdkv_status_t st, pdkv_error_t* err, const char* what) {
  if (st == PDKV_OK) return;
  std::fprintf(stderr, "%s failed: %s\n", what, err ? pdkv_error_message(err) : "?");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokens = "4096,32768,131072,1048576", hits = "0,50", allocs = "contig,frag",
              geometries = "flashinfer,flash_attn";
  double target_s = 0.3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") tokens = argv[i + 1];
    else if (a == "--hits") hits = argv[i + 1];
    else if (a == "--alloc") allocs = argv[i + 1];
    else if (a == "--geometry") geometries = argv[i + 1];
    else if (a == "--target-s") target_s = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 1;
    }
  }
  pdkv_error_t* err = nullptr;
  for (const std::string& geo : pdkv::bench::split_list(geometries)) {
    const bool fi = geo == "flashinfer";
    for (const std::string& hit_s : pdkv::bench::split_list(hits)) {
      const uint64_t hit_pct = std::stoull(hit_s);
      const MambaCacheMode mode = hit_pct ? MambaCacheMode::Align : MambaCacheMode::None;
      // C++ context, validated and judged once per peer, as an engine would.
      const pdkv::bench::PlanSetup setup = pdkv::bench::make_plan_setup(fi, mode);
      const PlanContext& ctx = setup.ctx;
      const PlanContextVerdict& verdict = setup.verdict;
      // C context, built the way a binding builds it.
      pdkv::bench::CPlanContext cplan;
      const char* failed = "";
      check(pdkv::bench::make_c_plan_context(cplan, fi, static_cast<int32_t>(mode), 2, 4, &err, &failed), err,
            failed);
      pdkv_plan_context_t* const cctx = cplan.ctx;

      for (const std::string& tok_s : pdkv::bench::split_list(tokens)) {
        for (const std::string& alloc : pdkv::bench::split_list(allocs)) {
          const uint64_t t = std::stoull(tok_s);
          const Request rq = pdkv::bench::setup_request(setup, t, hit_pct, alloc == "frag", mode);
          const auto views = rq.views();
          TransferPlan plan;
          compile_transfer_plan_into(ctx, views, plan, verdict);
          const auto cpp = time_calls([&] { compile_transfer_plan_into(ctx, views, plan, verdict); }, target_s);
          const auto cgroups = rq.c_groups();
          const auto c_new = time_calls(
              [&] {
                pdkv_transfer_plan_t* p = nullptr;
                pdkv_error_t* e = nullptr;
                check(pdkv_transfer_plan_compile(cctx, cgroups.groups.data(), cgroups.groups.size(), &p, &e), e,
                      "pdkv_transfer_plan_compile");
                pdkv_transfer_plan_free(p);
              },
              target_s);
          pdkv_transfer_plan_t* reused = nullptr;
          check(pdkv_transfer_plan_new(&reused, &err), err, "pdkv_transfer_plan_new");
          const auto c = time_calls(
              [&] {
                pdkv_error_t* e = nullptr;
                check(pdkv_transfer_plan_compile_into(cctx, cgroups.groups.data(), cgroups.groups.size(), reused, &e),
                      e, "pdkv_transfer_plan_compile_into");
              },
              target_s);
          // The same request given as logical ids (kernel_blocks_per_id = ppl): must be the same
          // plan; timed through C++ and C (reused plan).
          const Request lrq = rq.as_logical();
          const auto lviews = lrq.views();
          TransferPlan lplan;
          compile_transfer_plan_into(ctx, lviews, lplan, verdict);
          if (lplan.ranks.size() != plan.ranks.size()) check(PDKV_ERR_INTERNAL, nullptr, "logical ids: rank count");
          for (size_t r = 0; r < plan.ranks.size(); ++r) {
            if (!(lplan.ranks[r].reads == plan.ranks[r].reads)) check(PDKV_ERR_INTERNAL, nullptr, "logical ids: reads differ");
          }
          const auto cpp_logical =
              time_calls([&] { compile_transfer_plan_into(ctx, lviews, lplan, verdict); }, target_s);
          const auto lgroups = lrq.c_groups();
          const auto c_logical = time_calls(
              [&] {
                pdkv_error_t* e = nullptr;
                check(pdkv_transfer_plan_compile_into(cctx, lgroups.groups.data(), lgroups.groups.size(), reused, &e),
                      e, "pdkv_transfer_plan_compile_into (logical ids)");
              },
              target_s);
          pdkv_transfer_plan_free(reused);
          std::printf(
              "{\"case\": \"%s/%llu/hit%llu/%s\", \"geometry\": \"%s\", \"tokens\": %llu, \"hit\": %llu, "
              "\"alloc\": \"%s\", \"cpp_median_ns\": %.0f, \"cpp_min_ns\": %.0f, \"c_median_ns\": %.0f, "
              "\"c_min_ns\": %.0f, \"c_new_median_ns\": %.0f, \"cpp_logical_median_ns\": %.0f, "
              "\"c_logical_median_ns\": %.0f, \"c_logical_min_ns\": %.0f, \"reads\": %llu, \"pieces_before\": %llu, \"kernel_ids\": %zu}\n",
              geo.c_str(), static_cast<unsigned long long>(t), static_cast<unsigned long long>(hit_pct),
              alloc.c_str(), geo.c_str(), static_cast<unsigned long long>(t),
              static_cast<unsigned long long>(hit_pct), alloc.c_str(), cpp.first, cpp.second, c.first, c.second, c_new.first,
              cpp_logical.first, c_logical.first, c_logical.second,
              static_cast<unsigned long long>(plan.stats.pieces_after_coalescing),
              static_cast<unsigned long long>(plan.stats.pieces_before_coalescing), rq.groups.back().local.size());
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
