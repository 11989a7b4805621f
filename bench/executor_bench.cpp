// Executor baselines (issue 8, "How it is checked"): for each piece list, in one run,
//   raw UCX   two processes, D posts ucp_get_nbx over exactly the list with a bounded window
//             (bench/ucx_raw_get.hpp), shm and tcp;
//   perftest  ucx_perftest ucp_get at the list's byte-weighted median piece size, same transports and window:
//             one cache-hot buffer, reported but not the reference;
//   memcpy    the same pieces in one process.
// Piece lists: <size> pieces spread over a working set (default 64 KiB and 1 MiB over 1 GiB), and
// the reads of P rank 0 for a real request: NVIDIA-Nemotron-3-Nano-30B-A3B, P TP4 -> D TP2 rank 0,
// 131072 prompt tokens, no prefix hit, contiguous block ids, FlashAttention geometry (2096-token
// blocks), compiled by pdkv's core.
//   executor  pdkv's agent in the same two processes over the same list and window (agent_get.hpp):
//             over shm it copies with process_vm_readv (cross-memory attach), over tcp through
//             pdkv's own data connection (executor/tcpdp/, agent_tcp.cpp).
//   raw cma   shm only: a plain process_vm_readv loop, one call per piece (cma_raw_read.hpp).
//
// Usage: executor_bench [--sizes 65536,1048576] [--working-set BYTES] [--window 64] [--reps 5]
//                       [--modes shm,tcp] [--no-plan] [--no-perftest] [--json]
//                       [--cma-threads N]   (the agent's copy threads over shm; default: its own choice)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "plan_request.hpp"
#include "transfer_pieces.hpp"
#include "ucx_perftest_run.hpp"
#include "agent_get.hpp"
#include "cma_raw_read.hpp"
#include "ucx_raw_get.hpp"

using namespace pdkv;
using namespace pdkv::bench;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    std::string item = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (!item.empty()) out.push_back(item);
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

// P rank 0's reads of the Nemotron-3-Nano 128k request (see the file comment).
PieceList nemotron_pieces() {
  using namespace core;
  constexpr uint32_t kRegions = 6;
  const ModelDesc m = preset_model("nemotron-3-nano-30b");
  EngineConfig dc, pc;
  dc.tp_size = 2;
  pc.tp_size = 4;
  dc.user_block_size = pc.user_block_size = 2096;
  const EngineGeometry dg = derive_geometry(m, dc), pg = derive_geometry(m, pc);
  std::vector<EngineMetadata> remote;
  for (uint32_t r = 0; r < 4; ++r)
    remote.push_back(metadata_from_geometry(m, pc, pg, {"prefill", r, kPPool, kRegions, (2ull + r) << 44}));
  const PlanContext ctx = make_plan_context(
      metadata_from_geometry(m, dc, dg, {"decode", 0, kDPool, kRegions, 1ull << 40}), remote, dg.mamba, pg.mamba);
  validate_plan_context(ctx);
  const Request rq = make_request(131072, 0, false, dg.block_size, pg.block_size, dg.physical_per_logical,
                                  pg.physical_per_logical, MambaCacheMode::None);
  const auto views = rq.views();
  TransferPlan plan;
  compile_transfer_plan_into(ctx, views, plan);
  if (plan.ranks.empty()) throw std::runtime_error("the Nemotron plan reads nothing");
  return plan_pieces(plan.ranks.front(), "Nemotron-3-Nano 128k, P TP4->D TP2, P rank " +
                                             std::to_string(plan.ranks.front().p_rank) + " reads");
}

struct Row {
  std::string list, mode;
  uint64_t pieces, bytes, working_set, median_piece;
  Measurement raw;
  Measurement agent;
  Measurement cma;  // shm rows only
  PerftestResult perf;
  Measurement mem;
};

}  // namespace

int main(int argc, char** argv) {
  std::string sizes = "65536,1048576", modes = "shm,tcp";
  uint64_t working_set = 1ull << 30;
  unsigned window = 64;
  int reps = 5;
  bool plan = true, perftest = true, json = false;
  uint32_t cma_threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--sizes") sizes = value();
    else if (a == "--working-set") working_set = std::stoull(value());
    else if (a == "--window") window = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--reps") reps = std::stoi(value());
    else if (a == "--modes") modes = value();
    else if (a == "--no-plan") plan = false;
    else if (a == "--no-perftest") perftest = false;
    else if (a == "--json") json = true;
    else if (a == "--cma-threads") cma_threads = static_cast<uint32_t>(std::stoul(value()));
    else {
      std::fprintf(stderr, "unknown option %s (see the usage at the top of bench/executor_bench.cpp)\n", a.c_str());
      return 1;
    }
  }
  std::vector<PieceList> lists;
  for (const std::string& s : split(sizes)) lists.push_back(spread_pieces(std::stoull(s), working_set));
  if (plan) lists.push_back(nemotron_pieces());

  std::vector<Row> rows;
  for (const PieceList& pl : lists) {
    // The byte-weighted median piece (half the bytes travel in pieces at least this large): a
    // plan's many small Mamba pieces would otherwise hide the large attention runs.
    std::vector<uint64_t> lens;
    for (const Piece& p : pl.pieces) lens.push_back(p.length);
    std::sort(lens.begin(), lens.end());
    uint64_t median_piece = lens.back(), acc = 0;
    for (uint64_t len : lens) {
      acc += len;
      if (acc * 2 >= pl.bytes) {
        median_piece = len;
        break;
      }
    }
    const Measurement mem = memcpy_pieces(pl, reps);
    for (const std::string& mode_name : split(modes)) {
      const exec::TransportMode mode = mode_name == "tcp" ? exec::TransportMode::Tcp : exec::TransportMode::Shm;
      Row r{pl.name, mode_name, pl.pieces.size(), pl.bytes, pl.remote_bytes, median_piece, {}, {}, {}, {}, mem};
      const int mode_reps = mode == exec::TransportMode::Tcp ? std::min(reps, 3) : reps;
      // Raw UCX and the agent back to back on the same list, window and working sets.
      r.raw = raw_ucx_get(pl, mode, window, mode_reps);
      r.agent = agent_get(pl, mode, window, mode_reps, cma_threads);
      if (mode == exec::TransportMode::Shm) {
        r.cma = raw_cma_read(pl, mode_reps);
      } else {
        r.cma.error = "shm only";
      }
      if (perftest) {
        r.perf = run_ucx_perftest(mode, median_piece, window,
                                  mode == exec::TransportMode::Tcp ? (512ull << 20) : (4ull << 30));
      } else {
        r.perf.error = "skipped (--no-perftest)";
      }
      rows.push_back(r);
      if (!json) {
        std::fprintf(stderr, "done: %s %s\n", pl.name.c_str(), mode_name.c_str());
      }
    }
  }

  if (json) {
    std::printf("{\"window\": %u, \"reps\": %d, \"rows\": [\n", window, reps);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("  {\"list\": \"%s\", \"mode\": \"%s\", \"pieces\": %llu, \"bytes\": %llu, \"working_set\": %llu, "
                  "\"median_piece\": %llu, \"raw_ucx_gbps\": %.3f, \"raw_ucx_best_gbps\": %.3f, \"raw_ucx_verified\": %s, "
                  "\"raw_ucx_error\": \"%s\", \"executor_gbps\": %.3f, \"executor_verified\": %s, \"executor_error\": \"%s\", \"raw_cma_gbps\": %.3f, \"raw_cma_error\": \"%s\", \"perftest_cache_hot_gbps\": %s, \"memcpy_gbps\": %.3f, \"memcpy_verified\": %s}%s\n",
                  r.list.c_str(), r.mode.c_str(), static_cast<unsigned long long>(r.pieces),
                  static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.working_set),
                  static_cast<unsigned long long>(r.median_piece), r.raw.median_gbps, r.raw.best_gbps,
                  r.raw.verified ? "true" : "false", r.raw.error.c_str(), r.agent.median_gbps,
                  r.agent.verified ? "true" : "false", r.agent.error.c_str(), r.cma.median_gbps, r.cma.error.c_str(),
                  r.perf.ran ? std::to_string(r.perf.gbps).c_str() : "null", r.mem.median_gbps,
                  r.mem.verified ? "true" : "false", i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("window %u, %d timed passes (median; tcp: %d), GB/s = 1e9 bytes/s of piece bytes\n\n", window, reps,
              std::min(reps, 3));
  std::printf("| pieces | mode | count | bytes | median piece (by bytes) | raw UCX GET | raw best | pdkv executor | executor / raw | raw process_vm_readv | executor / raw cma | ucx_perftest (cache-hot) | memcpy |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    char raw[64], best[64], perf[64], agent[64], ratio[64], cma[64], cma_ratio[64];
    if (r.cma.error.empty()) {
      std::snprintf(cma, sizeof cma, "%.2f GB/s", r.cma.median_gbps);
      std::snprintf(cma_ratio, sizeof cma_ratio, "%.0f%%",
                    r.agent.error.empty() ? 100.0 * r.agent.median_gbps / r.cma.median_gbps : 0.0);
    } else {
      std::snprintf(cma, sizeof cma, "-");
      std::snprintf(cma_ratio, sizeof cma_ratio, "-");
    }
    if (r.agent.error.empty()) {
      std::snprintf(agent, sizeof agent, "%.2f GB/s", r.agent.median_gbps);
    } else {
      std::snprintf(agent, sizeof agent, "error");
    }
    if (r.agent.error.empty() && r.raw.error.empty() && r.raw.median_gbps > 0) {
      std::snprintf(ratio, sizeof ratio, "%.0f%%", 100.0 * r.agent.median_gbps / r.raw.median_gbps);
    } else {
      std::snprintf(ratio, sizeof ratio, "-");
    }
    if (r.raw.error.empty()) {
      std::snprintf(raw, sizeof raw, "%.2f GB/s", r.raw.median_gbps);
      std::snprintf(best, sizeof best, "%.2f", r.raw.best_gbps);
    } else {
      std::snprintf(raw, sizeof raw, "error");
      std::snprintf(best, sizeof best, "-");
    }
    if (r.perf.ran) std::snprintf(perf, sizeof perf, "%.2f GB/s", r.perf.gbps);
    else std::snprintf(perf, sizeof perf, "not run");
    std::printf("| %s | %s | %llu | %.1f MiB | %llu | %s | %s | %s | %s | %s | %s | %s | %.2f GB/s |\n", r.list.c_str(),
                r.mode.c_str(), static_cast<unsigned long long>(r.pieces), static_cast<double>(r.bytes) / 1048576.0,
                static_cast<unsigned long long>(r.median_piece), raw, best, agent, ratio, cma, cma_ratio, perf,
                r.mem.median_gbps);
    if (!r.cma.error.empty() && r.mode == "shm") std::fprintf(stderr, "raw cma %s: %s\n", r.list.c_str(), r.cma.error.c_str());
    if (!r.agent.error.empty()) std::fprintf(stderr, "executor %s %s: %s\n", r.list.c_str(), r.mode.c_str(), r.agent.error.c_str());
    if (!r.raw.error.empty()) std::fprintf(stderr, "raw UCX %s %s: %s\n", r.list.c_str(), r.mode.c_str(), r.raw.error.c_str());
    if (!r.perf.ran) std::fprintf(stderr, "ucx_perftest %s %s: %s\n", r.list.c_str(), r.mode.c_str(), r.perf.error.c_str());
    if (!r.mem.verified) std::fprintf(stderr, "memcpy %s: wrong bytes\n", r.list.c_str());
  }
  return 0;
}
