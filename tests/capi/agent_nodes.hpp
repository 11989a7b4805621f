// Engine ranks with real memory and agents, built through the C API only, for the C API's agent
// tests (agent_api_test.cpp) and its thread tests (threads/transfer_threads_test.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi_helpers.hpp"

namespace capi_agent {

struct MetadataDel { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct AgentDel { void operator()(pdkv_agent_t* p) const { pdkv_agent_free(p); } };
struct MemoryDel { void operator()(pdkv_memory_t* p) const { pdkv_memory_free(p); } };
struct PeerDel { void operator()(pdkv_peer_t* p) const { pdkv_peer_free(p); } };
struct TransferDel { void operator()(pdkv_transfer_t* p) const { pdkv_transfer_free(p); } };
struct ContextDel { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct PlanDel { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
struct ListDel { void operator()(pdkv_notification_list_t* p) const { pdkv_notification_list_free(p); } };
using MetadataPtr = std::unique_ptr<pdkv_engine_metadata_t, MetadataDel>;
using AgentPtr = std::unique_ptr<pdkv_agent_t, AgentDel>;
using MemoryPtr = std::unique_ptr<pdkv_memory_t, MemoryDel>;
using PeerPtr = std::unique_ptr<pdkv_peer_t, PeerDel>;
using TransferPtr = std::unique_ptr<pdkv_transfer_t, TransferDel>;
using ContextPtr = std::unique_ptr<pdkv_plan_context_t, ContextDel>;
using PlanPtr = std::unique_ptr<pdkv_transfer_plan_t, PlanDel>;
using ListPtr = std::unique_ptr<pdkv_notification_list_t, ListDel>;

inline constexpr uint32_t kRegions = 2;
inline constexpr uint64_t kBlocks = 8;

inline ModelPtr tiny_model() {
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  d.name = "agent-api-tiny";
  d.num_kv_heads = 2;
  d.head_size = 16;
  d.head_size_v = 16;
  d.dtype_bytes = 2;
  d.layer_pattern = "**";
  return make_model(d);
}

inline MetadataPtr metadata(const pdkv_model_t* m, const char* engine, const uint64_t* bases) {
  pdkv_engine_config_t c;
  REQUIRE(pdkv_engine_config_init(&c, nullptr) == PDKV_OK);
  pdkv_engine_layout_t l;
  REQUIRE(pdkv_engine_layout_init(&l, nullptr) == PDKV_OK);
  l.engine_id = engine;
  l.num_regions = kRegions;
  l.num_logical_blocks = kBlocks;
  l.region_bases = bases;
  pdkv_engine_metadata_t* md = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_from_model(m, &c, &l, &md, err));
  return MetadataPtr(md);
}

inline pdkv_agent_options_t options(const pdkv_engine_metadata_t* md) {
  pdkv_agent_options_t o{};
  o.struct_size = sizeof o;
  o.metadata = md;
  return o;
}

inline AgentPtr new_agent(const pdkv_agent_options_t& o) {
  pdkv_agent_t* a = nullptr;
  REQUIRE_OK(pdkv_agent_new(&o, &a, err));
  return AgentPtr(a);
}

inline CallResult new_agent_fails(const pdkv_agent_options_t& o) {
  pdkv_agent_t* a = reinterpret_cast<pdkv_agent_t*>(0x1);
  const CallResult r = capture([&](pdkv_error_t** e) { return pdkv_agent_new(&o, &a, e); });
  CHECK(a == nullptr);
  return r;
}

struct SharedDel { void operator()(pdkv_shared_memory_t* p) const { pdkv_shared_memory_free(p); } };
using SharedPtr = std::unique_ptr<pdkv_shared_memory_t, SharedDel>;

// One engine rank with real memory behind its regions (`shared`: in one pdkv_shared_memory_t,
// `view` then says where each region lies).
struct Node {
  SharedPtr shared;
  std::vector<std::pair<uint8_t*, size_t>> view;
  ModelPtr model;
  MetadataPtr md;
  std::vector<std::vector<uint8_t>> mem;
  AgentPtr agent;
  std::vector<MemoryPtr> regs;
};

// `shared`: regions in pdkv shared memory; `key`: a pre-shared key (NULL: none); `seal`:
// seal_data with its bit (-1: left unset).
inline std::unique_ptr<Node> node(const char* engine, int32_t transport, int32_t progress, bool shared = false,
                           const char* key = nullptr, int seal = -1) {
  auto n = std::make_unique<Node>();
  n->model = tiny_model();
  auto probe = metadata(n->model.get(), engine, nullptr);
  const pdkv_metadata_region_t* regions = nullptr;
  size_t count = 0;
  REQUIRE_OK(pdkv_engine_metadata_regions(probe.get(), &regions, &count, err));
  REQUIRE(count == kRegions);
  std::vector<uint64_t> bases;
  if (shared) {
    size_t total = 0;
    for (size_t r = 0; r < count; ++r) total += regions[r].block_len * regions[r].num_blocks;
    pdkv_shared_memory_t* sm = nullptr;
    REQUIRE_OK(pdkv_shared_memory_alloc(total, &sm, err));
    n->shared.reset(sm);
    void* at = nullptr;
    size_t bytes = 0;
    REQUIRE_OK(pdkv_shared_memory_address(sm, &at, &bytes, err));
    REQUIRE(bytes == total);
    auto* p = static_cast<uint8_t*>(at);
    for (size_t r = 0; r < count; ++r) {
      const size_t len = regions[r].block_len * regions[r].num_blocks;
      for (size_t i = 0; i < len; ++i) p[i] = static_cast<uint8_t>(i * 7 + r);
      n->view.emplace_back(p, len);
      bases.push_back(reinterpret_cast<uint64_t>(p));
      p += len;
    }
  } else {
    for (size_t r = 0; r < count; ++r) {
      n->mem.emplace_back(regions[r].block_len * regions[r].num_blocks, static_cast<uint8_t>(0x40 + r));
      bases.push_back(reinterpret_cast<uint64_t>(n->mem.back().data()));
      n->view.emplace_back(n->mem.back().data(), n->mem.back().size());
    }
  }
  n->md = metadata(n->model.get(), engine, bases.data());
  auto o = options(n->md.get());
  o.field_mask = PDKV_AGENT_FIELD_TRANSPORT | PDKV_AGENT_FIELD_PROGRESS_MODE | PDKV_AGENT_FIELD_HEARTBEAT;
  o.transport = transport;
  o.progress_mode = progress;
  o.heartbeat_interval_ms = 100;
  o.heartbeat_timeout_ms = 3000;
  if (key != nullptr) {
    o.field_mask |= PDKV_AGENT_FIELD_PRESHARED_KEY;
    o.preshared_key = reinterpret_cast<const uint8_t*>(key);
    o.preshared_key_len = std::strlen(key);
  }
  if (seal >= 0) {
    o.field_mask |= PDKV_AGENT_FIELD_SEAL_DATA;
    o.seal_data = static_cast<uint8_t>(seal);
  }
  n->agent = new_agent(o);
  for (uint32_t r = 0; r < kRegions; ++r) {
    pdkv_memory_desc_t d{};
    d.struct_size = sizeof d;
    d.region = r;
    d.address = bases[r];
    d.length = n->view[r].second;
    pdkv_memory_t* m = nullptr;
    REQUIRE_OK(pdkv_agent_register_memory(n->agent.get(), &d, &m, err));
    n->regs.emplace_back(m);
  }
  return n;
}

inline std::string listen_of(const pdkv_agent_t* a) {
  pdkv_agent_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_agent_get_info(a, &i, err));
  return i.listen_address;
}

inline PeerPtr connect(const pdkv_agent_t* from, const pdkv_agent_t* to) {
  const std::string address = listen_of(to);
  pdkv_connect_options_t c{};
  c.struct_size = sizeof c;
  c.address = address.c_str();
  pdkv_peer_t* p = nullptr;
  REQUIRE_OK(pdkv_agent_connect(const_cast<pdkv_agent_t*>(from), &c, &p, err));
  return PeerPtr(p);
}

// D's plan reading every block but the null block of P's regions.
inline PlanPtr read_plan(const pdkv_engine_metadata_t* d_md, const pdkv_engine_metadata_t* p_md) {
  pdkv_plan_context_params_t params{};
  params.struct_size = sizeof params;
  params.local = d_md;
  params.remote = &p_md;
  params.num_remote = 1;
  pdkv_plan_context_t* ctx = nullptr;
  REQUIRE_OK(pdkv_plan_context_new(&params, &ctx, err));
  ContextPtr c(ctx);
  pdkv_engine_metadata_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE_OK(pdkv_engine_metadata_get_info(d_md, &info, err));
  std::vector<uint64_t> blocks;
  for (uint64_t b = 1; b < kBlocks; ++b) blocks.push_back(b);  // block 0 is the null block
  pdkv_group_trim_input_t trim{};
  trim.struct_size = sizeof trim;
  trim.kind = PDKV_GROUP_ATTENTION;
  trim.local_blocks = blocks.data();
  trim.num_local_blocks = blocks.size();
  trim.remote_blocks = blocks.data();
  trim.num_remote_blocks = blocks.size();
  trim.remote_computed_tokens = blocks.size() * info.logical_block_size;
  pdkv_plan_group_t g{};
  g.struct_size = sizeof g;
  g.trim = &trim;
  pdkv_transfer_plan_t* plan = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_compile(c.get(), &g, 1, &plan, err));
  return PlanPtr(plan);
}

inline pdkv_transfer_params_t transfer_params(const pdkv_transfer_plan_t* plan, const char* request) {
  pdkv_transfer_params_t t{};
  t.struct_size = sizeof t;
  t.op = PDKV_TRANSFER_READ;
  t.plan = plan;
  t.peer_engine_id = "pre";
  t.request_id = request;
  return t;
}
}  // namespace capi_agent
