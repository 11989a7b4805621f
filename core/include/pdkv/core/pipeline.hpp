// Pipeline parallelism (PP): an engine with pp_size > 1 runs one set of ranks per pipeline stage,
// each stage holding a window of the model's layers and registering regions for those layers
// only (EngineMetadata::pp_size / pp_rank / layer_begin / layer_end). A D stage reads each layer
// it holds from the P stage that holds it, so it pairs with every P stage whose window overlaps
// its own and handshakes each (engine, PP rank) as a separate peer; P and D may differ in PP
// size. One plan context covers one (D rank, P stage) pair and its plan moves only the layers
// both stages hold (transfer_plan.hpp, PlanGroup::layers).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pdkv/core/engine_metadata.hpp"

namespace pdkv::core {

// Model layers [begin, end) of one stage; end kLayerEndOpen means "through the last layer".
struct LayerWindow {
  uint32_t begin = 0;
  uint32_t end = kLayerEndOpen;
  friend bool operator==(const LayerWindow&, const LayerWindow&) = default;
};

// vLLM's default split of num_layers over pp_size stages (its get_pp_indices without
// VLLM_PP_LAYER_PARTITION): num_layers / pp_size layers each, the remainder handed out one layer
// per stage starting from the second-to-last stage and moving towards the first (the last stage
// also runs the LM head). E.g. 5 layers over 3 stages: [0,2) [2,4) [4,5). The window is closed
// (end = its last layer + 1), also for the last stage. Errors: InvalidArgument (pp_size 0,
// pp_rank >= pp_size, fewer layers than stages: names the values).
LayerWindow pipeline_layer_window(uint32_t num_layers, uint32_t pp_rank, uint32_t pp_size);

// One overlapping (D stage, P stage) pair and the layers both hold: D's ranks of stage d_pp_rank
// handshake P's ranks of stage p_pp_rank and read the layers [layer_begin, layer_end) from them.
struct StagePair {
  uint32_t d_pp_rank = 0;
  uint32_t p_pp_rank = 0;
  uint32_t layer_begin = 0;
  uint32_t layer_end = kLayerEndOpen;  // open only when both stages are open-ended
  friend bool operator==(const StagePair&, const StagePair&) = default;
};

// Pairs D stages with P stages. `d_stages`: metadata of one rank of each D stage to pair (any
// subset of D's stages, e.g. only the caller's own); `p_stages`: one rank of EVERY P stage (any
// TP rank: a stage's ranks hold the same window). Returns every overlapping pair, ordered by
// (d_pp_rank, p_pp_rank). Errors: InvalidArgument (an empty side, a side mixing engines or
// pp_sizes, a stage given twice, a P stage missing: names them), Incompatible (P's windows do not
// tile the model from layer 0 stage after stage, or a D stage holds layers past P's last layer:
// names the stages and windows, so that every D layer is read from exactly one P stage).
std::vector<StagePair> pair_pipeline_stages(std::span<const EngineMetadata> d_stages,
                                            std::span<const EngineMetadata> p_stages);

// Notifications one rank of P stage p_pp_rank waits for per request: every D stage paired with
// it notifies it as a whole D engine would without PP (notifications_expected_per_request), so
// the count is the pairs naming p_pp_rank times that. `pairs` must pair EVERY D stage
// (pair_pipeline_stages over all of D's stages). 0 when no D stage reads the stage.
uint32_t pipeline_notifications_expected(std::span<const StagePair> pairs, uint32_t p_pp_rank,
                                         uint32_t p_tp, uint32_t d_tp);

}  // namespace pdkv::core
