// Builds the explanation of one P/D deployment (what `pdkv plan` prints) as a JSON document.
// It only calls the core; rendering as a table lives in report_text.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include "pdkv/core/backends.hpp"
#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::cli {

struct Deployment {
  pdkv::core::ModelDesc model;
  pdkv::core::EngineConfig prefill;
  pdkv::core::EngineConfig decode;
  // The attention backend each side was configured with (apply_backend already copied its block
  // sizes into prefill/decode); the report checks it against the model (MLA or not).
  pdkv::core::Backend prefill_backend = pdkv::core::Backend::FlashAttention;
  pdkv::core::Backend decode_backend = pdkv::core::Backend::FlashAttention;
  bool prefix_caching = false;
  // Pipeline parallel sizes (--prefill-pp / --decode-pp): each side's stages hold vLLM's default
  // split of the model's layers.
  uint32_t prefill_pp = 1;
  uint32_t decode_pp = 1;
  // KV cache layouts (--prefill-kv-layout / --decode-kv-layout) and whether D permutes received
  // blocks into its own layout when they differ (--permute-on-receive).
  pdkv::core::KvLayout prefill_kv_layout = pdkv::core::KvLayout::HND;
  pdkv::core::KvLayout decode_kv_layout = pdkv::core::KvLayout::HND;
  bool permute_on_receive = false;
};

// Geometry of both sides, then per decode rank: the prefill ranks it reads, bytes per block and
// descriptors per layer for attention and each Mamba projection, and compatibility notes
// (including where vLLM would refuse or read wrong bytes). Configuration errors are returned in
// an "errors" array (CliError::to_json objects of kind "configuration"), never thrown, so one
// report can show several; their messages speak of prefill and decode (the flags' terms), never
// of the library's local and remote. Every field of null_plan_fields() is present, null when it
// does not apply (the geometry of a side that failed, Mamba fields of a model without Mamba).
nlohmann::json build_deployment_report(const Deployment& d);

// The plan fields of the JSON document (schema_version 1), all null: model, tp_ratio, prefill,
// decode, blocks, notifications_expected_per_prefill_rank, decode_ranks, pipeline, kv_layouts.
nlohmann::json null_plan_fields();

}  // namespace pdkv::cli
