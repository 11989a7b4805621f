// The executor's column of bench/executor_bench: the same piece list, the same two processes and
// working sets as raw_ucx_get (ucx_raw_get.hpp), but moved by pdkv's agent: P is a forked child
// running an Agent with its working set registered; D runs an Agent, connects (handshake, keys),
// and posts the pieces as one READ transfer (a TransferPlan whose reads are the pieces, in the
// list's order), with the agent's window equal to the raw loop's. Timed per pass: post -> final
// state (the agent's range checks, posting, completions, and its one notification included).
// Over shm the agent copies with process_vm_readv in batches (executor/cma/), over tcp on its own
// data connection (agent_tcp.cpp); the window is the agent's max_outstanding: the pieces in
// flight per peer (tcp: in at most 4 unanswered batches; shm: in the batch being copied).
//
// With `shared` (shm only: the "mapped" column) P's working set lies in a pdkv shared allocation
// (executor/cma/shared_memory.hpp), which D's agent maps at connect and copies with memcpy; the
// column is an error unless every byte went through the mapping (the peer's bytes_mapped).
//
// The engine geometry is a stand-in that only shapes the regions: a one-region pure-attention
// model whose 16-token kernel block is 4 KiB, with as many blocks as the working set needs; the
// handshake validates it like any other pair.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent.hpp"
#include "cma/shared_memory.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "ucx_raw_get.hpp"

namespace pdkv::bench {

inline core::EngineMetadata bench_metadata(const std::string& engine, uint64_t base, uint64_t bytes) {
  core::ModelDesc m;
  m.name = "bench-flat";
  m.attention.num_kv_heads = 1;
  m.attention.head_size = 128;
  m.attention.head_size_v = 128;
  m.dtype_bytes = 1;  // 256 B per token: a 16-token block is 4 KiB
  core::EngineConfig cfg;
  cfg.tp_size = 1;
  cfg.user_block_size = 16;
  const auto geo = core::derive_geometry(m, cfg);
  const uint64_t blocks = (bytes + 4095) / 4096;
  return core::metadata_from_geometry(m, cfg, geo, {engine, 0, blocks, 1, base});
}

inline uint64_t round_page(uint64_t n) { return (n + 4095) / 4096 * 4096; }

// A pre-shared key for both agents (empty: none) and whether they seal the tcp data connection.
struct AgentSecurity {
  std::string key;
  bool seal = true;
  void apply(exec::AgentOptions& o) const {
    if (key.empty()) return;
    o.key.emplace(exec::PresharedKey::from_string(key));
    o.seal_data = seal;
  }
};

[[noreturn]] inline void run_agent_target(exec::TransportMode mode, uint64_t bytes, const std::string& listen, int out,
                                          int in, bool shared = false,
                                          const AgentSecurity& security = {}) {
  int rc = 0;
  try {
    std::optional<Buffer> own;
    std::unique_ptr<exec::cma::SharedMemory> shm;
    uint8_t* data = nullptr;
    const uint64_t size = round_page(bytes);
    if (shared) {
      shm = exec::cma::SharedMemory::allocate(size);
      data = static_cast<uint8_t*>(shm->data());
    } else {
      own.emplace(size);
      data = own->data;
    }
    fill_pattern(data, bytes);
    exec::AgentOptions o;
    o.metadata = bench_metadata("bench-p", reinterpret_cast<uint64_t>(data), size);
    o.transport = mode;
    o.listen = exec::HostPort{listen, 0};
    security.apply(o);
    exec::Agent agent(o);
    agent.register_memory(0, reinterpret_cast<uint64_t>(data), size, exec::MemoryType::Host);
    const uint16_t port = agent.info().listen.port;
    if (!detail::write_all(out, &port, sizeof port)) std::_Exit(3);
    char c;
    (void)detail::read_all(in, &c, 1);  // the parent closes the pipe when done
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agent target: %s\n", e.what());
    rc = 2;
  }
  std::_Exit(rc);
}

// P in another network namespace where `where` says so (placement.hpp): it listens on its end of
// the veth pair and D connects there.
inline Measurement agent_get(const PieceList& pl, exec::TransportMode mode, unsigned window, int reps,
                             uint32_t cma_copy_threads = 0, const Placement& where = loopback_placement(),
                             bool shared = false, const AgentSecurity& security = {}) {
  Measurement m;
  int to_parent[2], to_child[2];
  if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0) {
    m.error = "pipe failed";
    return m;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    m.error = "fork failed";
    return m;
  }
  if (pid == 0) {
    ::close(to_parent[0]);
    ::close(to_child[1]);
    enter_p_side(where);
    run_agent_target(mode, pl.remote_bytes, where.p_address, to_parent[1], to_child[0], shared, security);
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  try {
    uint16_t port = 0;
    if (!detail::read_all(to_parent[0], &port, sizeof port)) throw std::runtime_error("the P agent did not start");
    Buffer local(round_page(pl.local_bytes));
    exec::AgentOptions o;
    o.metadata = bench_metadata("bench-d", reinterpret_cast<uint64_t>(local.data), local.size);
    o.transport = mode;
    o.max_outstanding = window;
    o.cma_copy_threads = cma_copy_threads;
    o.default_timeout = std::chrono::seconds(120);
    security.apply(o);
    exec::Agent agent(o);
    agent.register_memory(0, reinterpret_cast<uint64_t>(local.data), local.size, exec::MemoryType::Host);
    const auto peer = agent.connect(exec::HostPort{where.p_address, port}, std::chrono::seconds(10));
    if (shared && peer->mapped_regions == 0) throw std::runtime_error("P's memory was not mapped: " + peer->mapping_note);
    core::TransferPlan plan;
    plan.d_engine_id = "bench-d";
    plan.p_engine_id = "bench-p";
    plan.d_rank = 0;
    plan.d_tp = 1;
    plan.p_tp = 1;
    core::RankReads rr;
    rr.p_rank = 0;
    for (const Piece& p : pl.pieces) {
      rr.reads.push_back({0, p.local_offset, 0, p.remote_offset, p.length});
      rr.bytes += p.length;
    }
    plan.ranks.push_back(std::move(rr));
    plan.notify_ranks = {0};
    auto pass = [&](int i) {
      exec::PostParams pp;
      pp.plan = &plan;
      pp.peer_engine_id = "bench-p";
      pp.request_id = "bench-" + std::to_string(i);
      auto t = agent.post(pp);
      t.wait(std::chrono::milliseconds::max());
      const auto s = t.status();
      if (s.status != core::Status::Ok) throw std::runtime_error("agent transfer failed: " + s.message);
    };
    pass(-1);
    const bool ok = first_wrong_piece(pl, local.data) < 0;
    std::vector<double> secs;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      pass(r);
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    m = summarize(secs, pl.bytes);
    m.verified = ok;
    if (shared && peer->bytes_mapped.load() != pl.bytes * static_cast<uint64_t>(reps + 1)) {
      m.error = "not every byte went through the mapping";
    }
    if (!ok) m.error = "the agent moved wrong bytes";
  } catch (const std::exception& e) {
    m.error = e.what();
  }
  ::close(to_child[1]);
  ::close(to_parent[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return m;
}

}  // namespace pdkv::bench
