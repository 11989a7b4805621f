// How fast a plan of a given size can be produced at all, beside how fast pdkv produces it: a
// floor for the aim "fragmented ids within 2x of consecutive ones" of issue 10.
//
// For each request of bench/plan_vs_vllm.cpp (the same generator, geometry and context), this
// compiles the plan once through the C++ core (logical ids, one reused plan, the context's
// verdict judged once, as plan_vs_vllm's "C++" column) and then times, on the reads of that very
// plan, the work any planner that hands out those reads must do at least:
//   * write:     store every read into a reused buffer of the plan's size (a copy of the reads:
//                no arithmetic, no check), the floor of producing the plan's bytes;
//   * write+read: the same, then read every read back once (the least a check of the plan can
//                look at: one pass over it);
//   * sort:      the D ranges of every read (region, offset, length) sorted, which is what a
//                check that finds overlapping D ranges by sorting pays on top (informative).
// So a fragmented request whose write+read floor already exceeds twice the consecutive request's
// whole compile cannot meet the 2x aim with a plan that lists its reads. Beside them, the other
// form (bench/factored_floor.hpp): the attention group's token extents emitted once and checked,
// timed only after its check has refused six wrong plans.
//
// Usage: plan_floor [--tokens 131072,1048576] [--hits 0,50] [--geometry flashinfer,flash_attn]
//                   [--alloc contig,frag] [--target-s 0.3] [--attention-regions N]
//                   [--form listed|factored|indexed] [--profile-compile (only pdkv's compile, nothing printed)]
// --attention-regions N gives the attention group only regions 0..N-1 (default: all 6): with 1,
// the plan holds one region's attention reads, which is what a plan that stored one region's
// reads and a list of the regions alike would emit and check (docs/benchmarks.md: what such a
// fan-out would and would not save). --form factored compiles with CompileOptions::region_repeats
// (the factored plan: regions alike recorded as repeats, docs/factored-plan.md stage 1) and also
// times that compile followed by expanding every rank's reads into reused buffers (what a caller
// of the listed reads pays: the C API's pdkv_transfer_plan_rank_reads on each rank). --form indexed
// adds CompileOptions::indexed_reads (block-indexed reads, the C API's form).
// Prints one JSON line per request (times in ns: medians, and the *_min_ns minima; moved_bytes:
// the bytes the plan moves, D rank 0 from its P ranks, to set the planning time against).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "pdkv/core/transfer_plan.hpp"
#include "factored_floor.hpp"
#include "plan_setup.hpp"

using namespace pdkv::core;
using namespace pdkv::bench;

namespace {

// Keeps the compiler from dropping stores and loads whose results are otherwise unused.
inline void keep(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

}  // namespace

int main(int argc, char** argv) {
  std::string tokens = "131072,1048576", hits = "0,50", geometries = "flashinfer,flash_attn", allocs = "contig,frag";
  double target_s = 0.3;
  bool profile = false;
  uint32_t attention_regions = 0;  // 0: the group's default (every region)
  bool factored_form = false, indexed_form = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--profile-compile") {  // only pdkv's compile, in a loop, for perf record
      profile = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 1;
    }
    if (a == "--tokens") tokens = argv[i + 1];
    else if (a == "--hits") hits = argv[i + 1];
    else if (a == "--geometry") geometries = argv[i + 1];
    else if (a == "--alloc") allocs = argv[i + 1];
    else if (a == "--target-s") target_s = std::atof(argv[i + 1]);
    else if (a == "--form") {
      const std::string f = argv[i + 1];
      if (f != "listed" && f != "factored" && f != "indexed") {
        std::fprintf(stderr, "--form must be listed, factored or indexed\n");
        return 1;
      }
      factored_form = f != "listed";
      indexed_form = f == "indexed";
    }
    else if (a == "--attention-regions") {
      attention_regions = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
      if (attention_regions == 0 || attention_regions > kRegions) {
        std::fprintf(stderr, "--attention-regions must be 1..%u\n", kRegions);
        return 1;
      }
    }
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 1;
    }
  }
  for (const std::string& geo : split_list(geometries)) {
    const bool fi = geo == "flashinfer";
    for (const std::string& hit_s : split_list(hits)) {
      const uint64_t hit_pct = std::stoull(hit_s);
      const MambaCacheMode mode = hit_pct ? MambaCacheMode::Align : MambaCacheMode::None;
      const PlanSetup setup = make_plan_setup(fi, mode);  // plan_vs_vllm's context
      const PlanContext& ctx = setup.ctx;
      const PlanContextVerdict& verdict = setup.verdict;
      for (const std::string& tok_s : split_list(tokens)) {
        for (const std::string& alloc : split_list(allocs)) {
          const bool frag = alloc == "frag";
          const uint64_t t = std::stoull(tok_s);
          auto request = setup_request(setup, t, hit_pct, frag, mode);
          if (attention_regions != 0) {
            auto& regions = request.groups.back().regions;  // the attention group (make_request)
            regions.clear();
            for (uint32_t r = 0; r < attention_regions; ++r) regions.push_back(r);
          }
          const auto rq = request.as_logical();
          const auto views = rq.views();
          TransferPlan plan;
          const CompileOptions options{.region_repeats = factored_form, .indexed_reads = indexed_form};
          auto compile_once = [&] { compile_transfer_plan_into(ctx, views, plan, verdict, options); };
          compile_once();
          if (profile) {
            time_calls(compile_once, target_s);
            continue;
          }
          const auto [compile, compile_min] = time_calls(compile_once, target_s);
          // The compile and then every rank's reads in issue order, into buffers kept between calls.
          std::vector<std::vector<PlanRead>> expanded(plan.ranks.size());
          const auto [compile_expand, compile_expand_min] = time_calls(
              [&] {
                compile_once();
                for (size_t i = 0; i < plan.ranks.size(); ++i) expand_reads(plan.ranks[i], expanded[i]);
                keep(expanded.data());
              },
              target_s);

          std::vector<PlanRead> reads;  // every read of the plan, rank after rank, in issue order
          for (const RankReads& rr : plan.ranks) for_each_read(rr, [&](const PlanRead& r) { reads.push_back(r); });
          std::vector<PlanRead> out(reads.size());
          const double write = time_calls(
              [&] {
                std::copy(reads.begin(), reads.end(), out.begin());
                keep(out.data());
              },
              target_s)
              .first;
          const double write_read = time_calls(
              [&] {
                std::copy(reads.begin(), reads.end(), out.begin());
                keep(out.data());
                uint64_t sum = 0;
                for (const PlanRead& r : out) sum += r.local_region + r.local_offset + r.remote_offset + r.length;
                keep(&sum);
              },
              target_s)
              .first;
          std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> ranges(reads.size());
          const double sort = time_calls(
              [&] {
                for (size_t i = 0; i < reads.size(); ++i)
                  ranges[i] = {reads[i].local_region, reads[i].local_offset, reads[i].length};
                std::sort(ranges.begin(), ranges.end());
                keep(ranges.data());
              },
              target_s)
              .first;
          // The attention group's extents in factored form (bench/factored_floor.hpp), emitted and
          // checked on this request's logical ids.
          const Group& att = rq.groups.back();
          FactoredFloor ff(kDPool, kPPool);
          std::vector<TokenExtent> extents;
          const uint64_t db = setup.dg.block_size, pb = setup.pg.block_size;
          auto factored = [&] {
            if (!ff.compile(att.local, att.remote, db, pb, att.hit, att.computed, extents) ||
                !ff.check(att.local, att.remote, db, pb, att.hit, att.computed, extents)) {
              std::fprintf(stderr, "factored floor refused its own request\n");
              std::exit(1);
            }
            keep(extents.data());
          };
          factored();
          // The floor is only a floor if its check is a real one: each of these must be refused.
          {
            uint64_t unlisted = 0;  // a D block the request does not list
            while (std::find(att.local.begin(), att.local.end(), unlisted) != att.local.end()) ++unlisted;
            std::vector<uint64_t> dup(att.local);
            if (dup.size() > 1) dup[1] = dup[0];
            auto refused = [&](const std::vector<TokenExtent>& e, const std::vector<uint64_t>& d_ids) {
              return !ff.check(d_ids, att.remote, db, pb, att.hit, att.computed, e);
            };
            auto changed = [&](auto&& f) {
              std::vector<TokenExtent> e(extents);
              f(e);
              return e;
            };
            const bool strict =
                refused(changed([](auto& e) { e.front().tokens += 1; }), att.local) &&
                refused(changed([](auto& e) { e.back().tokens -= 1; }), att.local) &&
                refused(changed([](auto& e) { e.front().p_token += 1; }), att.local) &&
                refused(changed([&](auto& e) { e.front().d_block = unlisted; }), att.local) &&
                refused(changed([](auto& e) { e.pop_back(); }), att.local) &&
                (dup.size() < 2 || refused(extents, dup));
            if (!strict) {
              std::fprintf(stderr, "factored floor's check accepted a wrong plan\n");
              return 1;
            }
          }
          const auto [fact, fact_min] = time_calls(factored, target_s);
          std::printf(
              "{\"case\": \"%s/%llu/hit%llu/%s\", \"reads\": %zu, \"read_bytes\": %zu, \"compile_ns\": %.0f, "
              "\"write_ns\": %.0f, \"write_read_ns\": %.0f, \"sort_d_ranges_ns\": %.0f, \"factored_extents\": %zu, "
              "\"factored_attention_ns\": %.0f, \"compile_min_ns\": %.0f, \"factored_attention_min_ns\": %.0f, "
              "\"moved_bytes\": %llu, \"form\": \"%s\", \"compile_expand_min_ns\": %.0f}\n",
              geo.c_str(), static_cast<unsigned long long>(t), static_cast<unsigned long long>(hit_pct),
              frag ? "frag" : "contig", reads.size(), reads.size() * sizeof(PlanRead), compile, write, write_read, sort,
              extents.size(), fact, compile_min, fact_min, static_cast<unsigned long long>(plan.stats.bytes),
              indexed_form ? "indexed" : factored_form ? "factored" : "listed", compile_expand_min);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
