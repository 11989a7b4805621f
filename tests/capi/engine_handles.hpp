// Engine-level handles for the C API tests (pdkv/engine.h): owning pointers, an engine rank
// described with pdkv_engine_new, and a D rank paired with every rank of a P engine (the plan
// context of pdkv_engine_plan_context_new), as the engine-level tests build them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "capi_helpers.hpp"

struct EngineDeleter { void operator()(pdkv_engine_t* p) const { pdkv_engine_free(p); } };
struct EngineMetadataDeleter { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct PlanContextDeleter { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct TransferPlanDeleter { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
using EnginePtr = std::unique_ptr<pdkv_engine_t, EngineDeleter>;
using EngineMetadataPtr = std::unique_ptr<pdkv_engine_metadata_t, EngineMetadataDeleter>;
using PlanContextPtr = std::unique_ptr<pdkv_plan_context_t, PlanContextDeleter>;
using TransferPlanPtr = std::unique_ptr<pdkv_transfer_plan_t, TransferPlanDeleter>;

// A preset model (pdkv_model_from_preset).
inline ModelPtr preset_model(const char* name) {
  pdkv_model_t* m = nullptr;
  REQUIRE_OK(pdkv_model_from_preset(name, &m, err));
  return ModelPtr(m);
}

// Engine rank `rank` of `m` with settings `c` and `blocks` logical blocks per region.
inline EnginePtr new_engine(const pdkv_model_t* m, const pdkv_engine_config_t& c, const char* id, uint32_t rank,
                            uint64_t blocks) {
  pdkv_engine_options_t o;
  REQUIRE_OK(pdkv_engine_options_init(&o, err));
  o.model = m;
  o.config = &c;
  o.engine_id = id;
  o.tp_rank = rank;
  o.num_logical_blocks = blocks;
  pdkv_engine_t* e = nullptr;
  REQUIRE_OK(pdkv_engine_new(&o, &e, err));
  return EnginePtr(e);
}

inline pdkv_engine_info_t engine_info(const pdkv_engine_t* e) {
  pdkv_engine_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_engine_get_info(e, &i, err));
  return i;
}

// The kind of group g of engine e (pdkv_engine_group): PDKV_GROUP_MAMBA, attention kinds.
inline int32_t group_kind(const pdkv_engine_t* e, size_t g) {
  pdkv_engine_group_t eg{};
  eg.struct_size = sizeof eg;
  REQUIRE_OK(pdkv_engine_group(e, g, &eg, err));
  return eg.kind;
}

// D rank `d_rank` ("decode") of `m` with settings dc, and the plan context pairing it with every
// rank of a P engine ("prefill") with settings pc; p_info is P's engine info (its block size).
struct EnginePair {
  EnginePtr d;
  std::vector<EngineMetadataPtr> p_metadata;
  PlanContextPtr ctx;
  pdkv_engine_info_t d_info{}, p_info{};

  EnginePair(const pdkv_model_t* m, const pdkv_engine_config_t& dc, const pdkv_engine_config_t& pc, uint32_t d_rank,
             uint64_t blocks) {
    d = new_engine(m, dc, "decode", d_rank, blocks);
    d_info = engine_info(d.get());
    std::vector<const pdkv_engine_metadata_t*> remote;
    for (uint32_t r = 0; r < pc.tp_size; ++r) {
      const EnginePtr p = new_engine(m, pc, "prefill", r, blocks);
      if (r == 0) p_info = engine_info(p.get());
      pdkv_engine_metadata_t* md = nullptr;
      REQUIRE_OK(pdkv_engine_get_metadata(p.get(), &md, err));
      p_metadata.emplace_back(md);
      remote.push_back(md);
    }
    pdkv_engine_peer_t peer{};
    peer.struct_size = sizeof peer;
    peer.remote = remote.data();
    peer.num_remote = remote.size();
    peer.remote_config = &pc;
    pdkv_plan_context_t* c = nullptr;
    REQUIRE_OK(pdkv_engine_plan_context_new(d.get(), &peer, &c, err));
    ctx.reset(c);
  }
};

// One request as D's scheduler holds it: per group D's block table and P's exported ids, and
// their C form (pointers into the tables: moving this object keeps them valid, copying does not).
struct EngineRequestTables {
  std::vector<std::vector<uint64_t>> local, remote;
  std::vector<pdkv_engine_request_group_t> groups;
  pdkv_engine_request_t c{};

  // Fills the C form once the tables are complete.
  void seal(uint64_t num_prompt_tokens, uint64_t num_local_computed_tokens) {
    groups.clear();
    for (size_t g = 0; g < local.size(); ++g) {
      groups.push_back({local[g].data(), local[g].size(), remote[g].data(), remote[g].size()});
    }
    c = pdkv_engine_request_t{};
    c.struct_size = sizeof c;
    c.groups = groups.data();
    c.num_groups = groups.size();
    c.num_prompt_tokens = num_prompt_tokens;
    c.num_local_computed_tokens = num_local_computed_tokens;
  }
};
