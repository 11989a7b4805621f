// What `pdkv demo` runs: the model's KV-cache groups as vLLM's hybrid KV-cache manager forms
// them, each side's geometry, the registered regions and how many blocks each rank registers.
// Both the coordinator and every rank process derive it from the same options, so they agree
// without shipping it over the pipes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/kv_cache_groups.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::cli::demo {

// One KV-cache group: layers of one kind; its i-th layer lives in region (tensor) i. The grouping
// is the core's (core/kv_cache_groups), the same the engine-level C API uses.
using KvGroup = core::KvCacheGroup;

// One side (P or D) of the deployment.
struct Side {
  uint32_t tp = 1;
  core::EngineConfig config;
  core::EngineGeometry geo;
  uint64_t logical_blocks = 0;      // per region, block 0 (vLLM's null block) included
  uint64_t kernel_page_bytes = 0;   // one kernel block of one region (the handshake's block_len)
  uint64_t logical_page_bytes = 0;  // one logical block of one region (ppl kernel blocks)
  uint64_t bytes_per_rank = 0;      // every region of one rank
  // Logical blocks one request can hold at most on this side (attention + one Mamba state per
  // Mamba group).
  uint64_t max_blocks_per_request = 0;
};

struct Layout {
  core::ModelDesc model;
  core::MambaCacheMode cache_mode = core::MambaCacheMode::None;
  std::vector<KvGroup> groups;  // in the order their first layer appears (vLLM's group order)
  uint32_t num_regions = 0;     // tensors: the size of the largest group
  Side prefill, decode;
};

struct LayoutInputs {
  core::ModelDesc model;
  uint32_t prefill_tp = 4;
  uint32_t decode_tp = 2;
  core::MambaCacheMode cache_mode = core::MambaCacheMode::Align;
  uint64_t max_tokens = 0;   // the longest prompt of the run
  uint32_t concurrency = 1;  // requests in flight at once
};

// Geometry of both sides and the block pools: each side registers enough logical blocks for
// `concurrency` requests of max_tokens prompt tokens, plus the null block. Errors: the core's
// (as core::Error).
Layout make_layout(const LayoutInputs& in);

// The metadata rank `rank` of one side advertises with its regions back to back from `base`.
core::EngineMetadata rank_metadata(const Layout& l, bool prefill, const std::string& engine_id, uint32_t rank,
                                   uint64_t base);

}  // namespace pdkv::cli::demo
