// A real agent over real memory for the agent's tests: one TP1 rank of the tiny engine
// (agent_fake_peer.hpp's tiny_metadata, 8 KiB blocks) with every region registered, and a READ
// of its blocks. Header-only, shared by agent_*_test.cpp.
#pragma once

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agent_fake_peer.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::exec::testing {

// `blocks` blocks in each of 3 regions, all registered; P's memory holds a pattern (`pattern`),
// D's a constant 0xEE. Tcp transport, heartbeats every 50 ms, lost after `heartbeat_timeout`.
struct TinyRank {
  std::vector<uint8_t> mem;
  core::EngineMetadata md;
  std::unique_ptr<Agent> agent;
  std::vector<std::shared_ptr<Registration>> regs;

  // `control_minor`: the control protocol minor its Hello says (an older pdkv's agent).
  TinyRank(const std::string& engine, uint64_t blocks, ProgressMode progress, bool pattern,
           std::chrono::milliseconds heartbeat_timeout, uint16_t control_minor = kControlProtoMinor) {
    const auto probe = tiny_metadata(engine, 0, 1ull << 40, blocks);
    uint64_t bytes = 0;
    for (const auto& r : probe.regions) bytes += r.region.block_len * r.region.num_blocks;
    mem.resize(bytes);
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = pattern ? static_cast<uint8_t>((i * 131 + 7) % 251) : 0xEE;
    md = tiny_metadata(engine, 0, reinterpret_cast<uint64_t>(mem.data()), blocks);
    AgentOptions o;
    o.metadata = md;
    o.transport = TransportMode::Tcp;
    o.progress = progress;
    o.default_timeout = 5000ms;
    o.heartbeat_interval = 50ms;
    o.heartbeat_timeout = heartbeat_timeout;
    o.max_outstanding = 64;
    o.control_minor = control_minor;
    agent = std::make_unique<Agent>(o);
    for (uint32_t i = 0; i < md.regions.size(); ++i) {
      const auto& r = md.regions[i].region;
      regs.push_back(agent->register_memory(i, r.base, r.block_len * r.num_blocks, MemoryType::Host));
    }
  }
};

// D reads blocks [1, n) of every region of P into the same blocks of its own (block 0 is the
// null block).
inline core::TransferPlan whole_plan(const TinyRank& d, const TinyRank& p, uint64_t n) {
  core::PlanContext ctx = core::make_plan_context(d.md, {p.md});
  core::PlanGroup g;
  g.trim.kind = core::GroupKind::Attention;
  for (uint64_t b = 1; b < n; ++b) {
    g.trim.local_blocks.push_back(b);
    g.trim.remote_blocks.push_back(b);
  }
  g.trim.remote_computed_tokens = (n - 1) * 16;
  return core::compile_transfer_plan(ctx, {g});
}

// A READ of `plan` from engine "pre".
inline PostParams read_of(const core::TransferPlan& plan, const std::string& id, std::chrono::milliseconds timeout) {
  PostParams pp;
  pp.plan = &plan;
  pp.peer_engine_id = "pre";
  pp.request_id = id;
  pp.timeout = timeout;
  return pp;
}

// D's memory equals P's outside block 0 of each region, which holds D's fill.
inline bool read_right(const TinyRank& d, const TinyRank& p) {
  const uint64_t base = reinterpret_cast<uint64_t>(d.mem.data());
  for (const auto& reg : d.md.regions) {
    const auto& r = reg.region;
    const uint64_t at = r.base - base;
    for (uint64_t i = 0; i < r.block_len; ++i) {
      if (d.mem[at + i] != 0xEE) return false;
    }
    if (std::memcmp(d.mem.data() + at + r.block_len, p.mem.data() + at + r.block_len,
                    r.block_len * (r.num_blocks - 1)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace pdkv::exec::testing
