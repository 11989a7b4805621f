// Builds the explanation of one P/D deployment (what `pdkv plan` prints) as a JSON document.
// It only calls the core; rendering as a table lives in report_text.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include "pdkv/core/backends.hpp"
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
};

// Geometry of both sides, then per decode rank: the prefill ranks it reads, bytes per block and
// descriptors per layer for attention and each Mamba projection, and compatibility notes
// (including where vLLM would refuse or read wrong bytes). Configuration errors are returned in
// an "errors" array, never thrown, so one report can show several.
nlohmann::json build_deployment_report(const Deployment& d);

}  // namespace pdkv::cli
