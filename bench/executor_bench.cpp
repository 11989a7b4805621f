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
//   mapped    shm only: the executor again with P's working set in a pdkv shared allocation
//             (pdkv_shared_memory_alloc), which D maps and copies with memcpy.
//   raw UCX, shared  shm only: the raw UCX loop again with P's working set in a pdkv shared
//             allocation too, so that the mapped column has a baseline over the same kind of memory.
//   raw cma   shm only: a plain process_vm_readv loop, one call per piece (cma_raw_read.hpp).
//
// Modes: shm and tcp run P and D on loopback; netns is tcp across two network namespaces joined
// by a veth pair ("two hosts" of one kernel, tests/support/netns.hpp): P's process lives in its
// own namespace, D connects to P's end of the link (placement.hpp), and the bytes each column
// received on D's end of the link must be at least what it moved (else that column fails).
// `--netns` is `--modes netns`; shm cannot cross hosts, so there is no shm column there.
//
// Usage: executor_bench [--sizes 65536,1048576] [--working-set BYTES] [--window 64] [--reps 5]
//                       [--modes shm,tcp,netns | --netns] [--no-plan] [--no-perftest] [--json]
//                       [--cma-threads N]   (the agent's copy threads over shm; default: its own choice)
//                       [--key TEXT]        (tcp rows also run the executor with this pre-shared key on
//                                            both agents, its data connection sealed (AES-256-GCM,
//                                            tcpdp/data_seal.hpp), back to back with the unkeyed run)
// Exit status: 0 every column ran and its first pass moved the right bytes; 1 usage error; 2 a
// column failed or moved wrong bytes (named on stderr); 77 netns mode where the machine does not
// permit network namespaces (not root, no iproute2, no veth: the reason on stderr). The namespace
// and its veth pair are removed at exit, on errors, and on SIGINT / SIGTERM / SIGHUP.
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
#include "plan_setup.hpp"
#include "transfer_pieces.hpp"
#include "ucx_perftest_run.hpp"
#include "agent_get.hpp"
#include "cma_raw_read.hpp"
#include "placement.hpp"
#include "support/netns.hpp"
#include "ucx_raw_get.hpp"

using namespace pdkv;
using namespace pdkv::bench;

namespace {

// P rank 0's reads of the Nemotron-3-Nano 128k request (see the file comment).
PieceList nemotron_pieces() {
  using namespace core;
  const PlanSetup setup = make_plan_setup(false, MambaCacheMode::None);  // FlashAttention geometry
  const Request rq = setup_request(setup, 131072, 0, false, MambaCacheMode::None);
  const auto views = rq.views();
  TransferPlan plan;
  compile_transfer_plan_into(setup.ctx, views, plan);
  if (plan.ranks.empty()) throw std::runtime_error("the Nemotron plan reads nothing");
  return plan_pieces(plan.ranks.front(), "Nemotron-3-Nano 128k, P TP4->D TP2, P rank " +
                                             std::to_string(plan.ranks.front().p_rank) + " reads");
}

struct Row {
  std::string list, mode;  // mode: shm, tcp or netns
  uint64_t pieces, bytes, working_set, median_piece;
  Measurement raw;
  Measurement agent;
  Measurement mapped;  // shm rows only
  Measurement cma;  // shm rows only
  PerftestResult perf;
  Measurement mem;
  uint64_t raw_link_bytes = 0, agent_link_bytes = 0;  // netns: received on D's end of the veth pair
  double load = -1;  // the 1-minute load average when the row was done (a shared machine is noisy)
  Measurement sealed;  // tcp rows with --key: the executor with a key, data connection sealed
  Measurement raw_shared;  // shm rows only: raw UCX with P's working set in a pdkv shared allocation
};

double load_average() {
  double v = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &v) != 1) v = -1;
    std::fclose(f);
  }
  return v;
}

// netns rows: the bytes D's end of the veth pair received while a column ran (its warm-up pass
// and `passes` timed ones) must cover what it moved, else the column did not cross the link.
void check_link(Measurement& m, uint64_t received, uint64_t piece_bytes, int passes) {
  const uint64_t moved = piece_bytes * static_cast<uint64_t>(passes + 1);
  if (m.error.empty() && received < moved) {
    m.error = "only " + std::to_string(received) + " bytes crossed the veth link for " + std::to_string(moved) +
              " bytes moved";
  }
}

std::string json_text(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out;
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "%s (see the usage at the top of bench/executor_bench.cpp)\n", what.c_str());
  return 1;
}

}  // namespace

int run(int argc, char** argv) {
  std::string sizes = "65536,1048576", modes = "shm,tcp";
  bool modes_given = false, netns_flag = false;
  uint64_t working_set = 1ull << 30;
  unsigned window = 64;
  int reps = 5;
  bool plan = true, perftest = true, json = false;
  uint32_t cma_threads = 0;
  std::string key;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    try {
      if (a == "--sizes") sizes = value();
      else if (a == "--working-set") working_set = std::stoull(value());
      else if (a == "--window") window = static_cast<unsigned>(std::stoul(value()));
      else if (a == "--reps") reps = std::stoi(value());
      else if (a == "--modes") modes = value(), modes_given = true;
      else if (a == "--netns") netns_flag = true;
      else if (a == "--no-plan") plan = false;
      else if (a == "--no-perftest") perftest = false;
      else if (a == "--json") json = true;
      else if (a == "--cma-threads") cma_threads = static_cast<uint32_t>(std::stoul(value()));
      else if (a == "--key") key = value();
      else return usage_error("unknown option " + a);
    } catch (const std::exception&) {  // std::stoull and friends
      return usage_error("bad value for " + a);
    }
  }
  if (netns_flag && modes_given) {
    return usage_error("--netns is --modes netns: give one of them (e.g. --modes tcp,netns)");
  }
  if (netns_flag) modes = "netns";
  bool want_netns = false;
  for (const std::string& m : split_list(modes)) {
    if (m != "shm" && m != "tcp" && m != "netns") {
      return usage_error("unknown mode " + m + " in --modes (shm, tcp, netns; shm cannot cross network namespaces)");
    }
    want_netns |= m == "netns";
  }
  if (window == 0 || reps <= 0) return usage_error("--window and --reps must be positive");

  // P's network namespace, made before any process is forked and removed on every way out.
  std::unique_ptr<test_support::VethNamespace> ns;
  Placement across;
  if (want_netns) {
    test_support::VethNamespace::tear_down_on_signals();
    std::string why;
    ns = test_support::VethNamespace::create(test_support::VethUser::Bench, &why);
    if (!ns) {
      std::fprintf(stderr,
                   "executor_bench: mode netns needs P and D in two network namespaces joined by a veth pair, "
                   "which this machine does not permit: %s\n",
                   why.c_str());
      return 77;
    }
    across = netns_placement(*ns);
    if (!json) {
      std::fprintf(stderr, "netns: P in %s at %s (%s), D at %s (%s)\n", ns->name().c_str(), ns->ns_ip().c_str(),
                   ns->ns_if().c_str(), ns->host_ip().c_str(), ns->host_if().c_str());
    }
  }
  std::vector<PieceList> lists;
  for (const std::string& s : split_list(sizes)) {
    try {
      lists.push_back(spread_pieces(std::stoull(s), working_set));
    } catch (const std::exception& e) {
      return usage_error("bad piece size " + s + " for working set " + std::to_string(working_set) + ": " + e.what());
    }
  }
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
    for (const std::string& mode_name : split_list(modes)) {
      const bool netns = mode_name == "netns";
      const exec::TransportMode mode = mode_name == "shm" ? exec::TransportMode::Shm : exec::TransportMode::Tcp;
      const Placement where = netns ? across : loopback_placement();
      Row r{pl.name, mode_name, pl.pieces.size(), pl.bytes, pl.remote_bytes, median_piece, {}, {}, {}, {}, {}, mem, 0, 0, -1, {}, {}};
      const int mode_reps = mode == exec::TransportMode::Tcp ? std::min(reps, 3) : reps;
      // Raw UCX and the agent back to back on the same list, window and working sets.
      const uint64_t rx0 = netns ? ns->host_rx_bytes() : 0;
      r.raw = raw_ucx_get(pl, mode, window, mode_reps, where);
      const uint64_t rx1 = netns ? ns->host_rx_bytes() : 0;
      r.agent = agent_get(pl, mode, window, mode_reps, cma_threads, where);
      if (netns) {
        r.raw_link_bytes = rx1 - rx0;
        r.agent_link_bytes = ns->host_rx_bytes() - rx1;
        check_link(r.raw, r.raw_link_bytes, pl.bytes, mode_reps);
        check_link(r.agent, r.agent_link_bytes, pl.bytes, mode_reps);
      }
      if (mode == exec::TransportMode::Tcp && !key.empty()) {
        r.sealed = agent_get(pl, mode, window, mode_reps, cma_threads, where, false, AgentSecurity{key, true});
      } else {
        r.sealed.error = key.empty() ? "no --key" : "tcp only";
      }
      if (mode == exec::TransportMode::Shm) {
        r.raw_shared = raw_ucx_get(pl, mode, window, mode_reps, where, true);
        r.mapped = agent_get(pl, mode, window, mode_reps, cma_threads, where, true);
        r.cma = raw_cma_read(pl, mode_reps);
      } else {
        r.mapped.error = "shm only";
        r.raw_shared.error = "shm only";
        r.cma.error = "shm only";
      }
      if (perftest) {
        r.perf = run_ucx_perftest(mode, median_piece, window,
                                  mode == exec::TransportMode::Tcp ? (512ull << 20) : (4ull << 30), where);
      } else {
        r.perf.error = "skipped (--no-perftest)";
      }
      r.load = load_average();
      rows.push_back(r);
      if (!json) {
        std::fprintf(stderr, "done: %s %s\n", pl.name.c_str(), mode_name.c_str());
      }
    }
  }

  // Every column that should have run must have moved the right bytes (ucx_perftest, which checks
  // no bytes, only reports).
  bool failed = false;
  for (const Row& r : rows) {
    auto fail = [&](const char* column, const std::string& error) {
      std::fprintf(stderr, "%s %s %s: %s\n", column, r.list.c_str(), r.mode.c_str(), error.c_str());
      failed = true;
    };
    if (r.mode == "shm" && !r.cma.error.empty()) fail("raw cma", r.cma.error);
    if (!r.agent.error.empty()) fail("executor", r.agent.error);
    if (r.mode == "shm" && !r.mapped.error.empty()) fail("executor (mapped)", r.mapped.error);
    if (r.mode == "shm" && !r.raw_shared.error.empty()) fail("raw UCX (P shared)", r.raw_shared.error);
    if (!r.raw.error.empty()) fail("raw UCX", r.raw.error);
    if (!r.mem.error.empty()) fail("memcpy", r.mem.error);
    if (!key.empty() && r.mode != "shm" && !r.sealed.error.empty()) fail("executor (sealed)", r.sealed.error);
    if (!r.perf.ran) {
      std::fprintf(stderr, "ucx_perftest %s %s: %s\n", r.list.c_str(), r.mode.c_str(), r.perf.error.c_str());
    }
  }
  const int status = failed ? 2 : 0;

  if (json) {
    std::printf("{\"window\": %u, \"reps\": %d, \"netns\": ", window, reps);
    if (ns) {
      std::printf("{\"name\": \"%s\", \"p_address\": \"%s\", \"d_address\": \"%s\"}", ns->name().c_str(),
                  ns->ns_ip().c_str(), ns->host_ip().c_str());
    } else {
      std::printf("null");
    }
    std::printf(", \"rows\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("  {\"list\": \"%s\", \"mode\": \"%s\", \"pieces\": %llu, \"bytes\": %llu, \"working_set\": %llu, "
                  "\"median_piece\": %llu, \"raw_ucx_gbps\": %.3f, \"raw_ucx_best_gbps\": %.3f, \"raw_ucx_verified\": %s, "
                  "\"raw_ucx_error\": \"%s\", \"executor_gbps\": %.3f, \"executor_verified\": %s, \"executor_error\": \"%s\", "
                  "\"mapped_gbps\": %.3f, \"mapped_error\": \"%s\", \"raw_ucx_shared_gbps\": %.3f, \"raw_ucx_shared_error\": \"%s\", \"raw_cma_gbps\": %.3f, \"raw_cma_error\": \"%s\", \"perftest_cache_hot_gbps\": %s, \"memcpy_gbps\": %.3f, "
                  "\"memcpy_verified\": %s, "
                  "\"veth_rx_raw_ucx_bytes\": %llu, \"veth_rx_executor_bytes\": %llu, \"load_1min\": %.2f, "
                  "\"sealed_gbps\": %.3f, \"sealed_verified\": %s, \"sealed_error\": \"%s\"}%s\n",
                  r.list.c_str(), r.mode.c_str(), static_cast<unsigned long long>(r.pieces),
                  static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.working_set),
                  static_cast<unsigned long long>(r.median_piece), r.raw.median_gbps, r.raw.best_gbps,
                  r.raw.verified ? "true" : "false", json_text(r.raw.error).c_str(), r.agent.median_gbps,
                  r.agent.verified ? "true" : "false", json_text(r.agent.error).c_str(), r.mapped.median_gbps,
                  json_text(r.mapped.error).c_str(), r.raw_shared.median_gbps, json_text(r.raw_shared.error).c_str(),
                  r.cma.median_gbps,
                  json_text(r.cma.error).c_str(), r.perf.ran ? std::to_string(r.perf.gbps).c_str() : "null",
                  r.mem.median_gbps, r.mem.verified ? "true" : "false",
                  static_cast<unsigned long long>(r.raw_link_bytes),
                  static_cast<unsigned long long>(r.agent_link_bytes), r.load, r.sealed.median_gbps,
                  r.sealed.verified ? "true" : "false", json_text(r.sealed.error).c_str(), i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
    return status;
  }
  std::printf("window %u, %d timed passes (median; tcp: %d), GB/s = 1e9 bytes/s of piece bytes\n\n", window, reps,
              std::min(reps, 3));
  std::printf("| pieces | mode | count | bytes | median piece (by bytes) | raw UCX GET | raw best | pdkv executor | "
              "executor / raw | executor, mapped | mapped / raw | raw UCX GET, P shared | mapped / raw shared | raw process_vm_readv | executor / raw cma | ucx_perftest (cache-hot) | memcpy | "
              "load (1 min) |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  // A measurement's cell ("missing" when it failed or was not taken) and one measurement as a
  // share of another ("-" unless both were taken).
  auto rate = [](const Measurement& m, const char* missing) {
    char cell[64];
    if (m.error.empty()) std::snprintf(cell, sizeof cell, "%.2f GB/s", m.median_gbps);
    return m.error.empty() ? std::string(cell) : std::string(missing);
  };
  auto share = [](const Measurement& num, const Measurement& den) {
    char cell[64];
    if (!num.error.empty() || !den.error.empty() || den.median_gbps <= 0) return std::string("-");
    std::snprintf(cell, sizeof cell, "%.0f%%", 100.0 * num.median_gbps / den.median_gbps);
    return std::string(cell);
  };
  for (const Row& r : rows) {
    const char* shm_only = r.mode == "shm" ? "error" : "-";  // mapped and raw-shared run on shm rows only
    char best[64], perf[64];
    if (r.raw.error.empty()) std::snprintf(best, sizeof best, "%.2f", r.raw.best_gbps);
    else std::snprintf(best, sizeof best, "-");
    if (r.perf.ran) std::snprintf(perf, sizeof perf, "%.2f GB/s", r.perf.gbps);
    else std::snprintf(perf, sizeof perf, "not run");
    std::printf("| %s | %s | %llu | %.1f MiB | %llu | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f GB/s | %.2f |\n",
                r.list.c_str(),
                r.mode == "netns" ? "tcp across netns (veth)" : r.mode.c_str(), static_cast<unsigned long long>(r.pieces),
                static_cast<double>(r.bytes) / 1048576.0, static_cast<unsigned long long>(r.median_piece),
                rate(r.raw, "error").c_str(), best, rate(r.agent, "error").c_str(), share(r.agent, r.raw).c_str(),
                rate(r.mapped, shm_only).c_str(), share(r.mapped, r.raw).c_str(), rate(r.raw_shared, shm_only).c_str(),
                share(r.mapped, r.raw_shared).c_str(), rate(r.cma, "-").c_str(), share(r.agent, r.cma).c_str(), perf,
                r.mem.median_gbps, r.load);
  }
  if (ns) {
    std::printf("\nnetns: P in network namespace %s at %s, D at %s, over a veth pair (tcp; UCX held to the veth "
                "devices)\n",
                ns->name().c_str(), ns->ns_ip().c_str(), ns->host_ip().c_str());
  }
  if (!key.empty()) {
    // The cost of sealing: the same list and window, the unkeyed executor and the sealed one back
    // to back in the same run.
    std::printf("\n| pieces | mode | pdkv executor (no key) | sealed (key, AES-256-GCM) | sealed / clear |\n");
    std::printf("|---|---|---:|---:|---:|\n");
    for (const Row& r : rows) {
      if (r.mode == "shm") continue;
      if (!r.agent.error.empty() || !r.sealed.error.empty()) {
        std::printf("| %s | %s | %s | %s | - |\n", r.list.c_str(), r.mode.c_str(), r.agent.error.empty() ? "ok" : "error",
                    r.sealed.error.empty() ? "ok" : "error");
        continue;
      }
      std::printf("| %s | %s | %.2f GB/s | %.2f GB/s | %.0f%% |\n", r.list.c_str(), r.mode.c_str(), r.agent.median_gbps,
                  r.sealed.median_gbps, 100.0 * r.sealed.median_gbps / r.agent.median_gbps);
    }
  }
  std::printf("\nfirst pass of every column verified byte for byte: %s\n", failed ? "NO (see stderr)" : "yes");
  return status;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // the namespace, if any, is gone by now (unwound)
    std::fprintf(stderr, "executor_bench: %s\n", e.what());
    return 2;
  }
}
