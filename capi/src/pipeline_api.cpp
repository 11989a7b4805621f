// Pipeline parallelism (core/pipeline.hpp): vLLM's default layer split, the pairing of D stages
// with P stages and the notifications a P stage waits for.
#include <string>
#include <vector>

#include "boundary.hpp"
#include "plan_handles.hpp"
#include "pdkv/core/pipeline.hpp"
#include "pdkv/core/tp_topology.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

namespace {

// The metadata behind n handles (copies: the pairing reads a few scalars of each).
std::vector<core::EngineMetadata> stages_of(const pdkv_engine_metadata_t* const* stages, size_t n, const char* name) {
  std::vector<core::EngineMetadata> out;
  if (n == 0) return out;
  require_non_null(stages, name);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    require_non_null(stages[i], (std::string(name) + "[" + std::to_string(i) + "]").c_str());
    out.push_back(stages[i]->md);
  }
  return out;
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_pipeline_layer_window(uint32_t num_layers, uint32_t pp_size, uint32_t pp_rank,
                                                  uint32_t* begin, uint32_t* end, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(begin, "begin");
    require_non_null(end, "end");
    const core::LayerWindow w = core::pipeline_layer_window(num_layers, pp_rank, pp_size);
    *begin = w.begin;
    *end = w.end;
  });
}

PDKV_API pdkv_status_t pdkv_pipeline_stage_pairs(const pdkv_engine_metadata_t* const* p_stages, size_t n_p,
                                                 const pdkv_engine_metadata_t* const* d_stages, size_t n_d,
                                                 pdkv_stage_pair_list_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    const std::vector<core::EngineMetadata> p = stages_of(p_stages, n_p, "p_stages");
    const std::vector<core::EngineMetadata> d = stages_of(d_stages, n_d, "d_stages");
    auto list = std::make_unique<pdkv_stage_pair_list>();
    for (const core::StagePair& sp : core::pair_pipeline_stages(d, p)) {
      list->items.push_back(pdkv_stage_pair_t{sp.p_pp_rank, sp.d_pp_rank, sp.layer_begin, sp.layer_end});
    }
    *out = list.release();
  });
}

PDKV_API pdkv_status_t pdkv_pipeline_notifications_expected(const pdkv_stage_pair_t* pairs, size_t n_pairs,
                                                            uint32_t p_pp_rank, uint32_t p_tp_size, uint32_t d_tp_size,
                                                            uint32_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    if (n_pairs > 0) require_non_null(pairs, "pairs");
    std::vector<core::StagePair> v;
    v.reserve(n_pairs);
    for (size_t i = 0; i < n_pairs; ++i) {
      v.push_back(core::StagePair{pairs[i].d_pp_rank, pairs[i].p_pp_rank, pairs[i].layer_begin, pairs[i].layer_end});
    }
    // The TP rule is checked even when no pair names the stage, so a bad pair of sizes is never 0.
    core::notifications_expected_per_request(p_tp_size, d_tp_size);
    *out = core::pipeline_notifications_expected(v, p_pp_rank, p_tp_size, d_tp_size);
  });
}

}  // extern "C"
