// Pipeline stages: vLLM's default layer split and the pairing of D stages with P stages
// (pipeline.hpp).
#include "pdkv/core/pipeline.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/error.hpp"
#include "pdkv/core/tp_topology.hpp"

namespace pdkv::core {
namespace {

std::string num(uint64_t v) { return std::to_string(v); }

std::string window_of(const EngineMetadata& m) {
  return "[" + num(m.layer_begin) + ", " +
         (m.layer_end == kLayerEndOpen ? std::string("open") : num(m.layer_end)) + ")";
}

std::string stage_of(const char* side, const EngineMetadata& m) {
  return std::string(side) + " stage " + num(m.pp_rank) + " of " + num(m.pp_size) + " " + window_of(m);
}

// One metadata per stage of one engine, indexed by pp_rank (nullptr where none was given).
std::vector<const EngineMetadata*> by_stage(std::span<const EngineMetadata> stages, const char* side) {
  if (stages.empty()) {
    fail(Status::InvalidArgument, std::string("no ") + side + " stage given; pass one rank's metadata per stage");
  }
  const EngineMetadata& a = stages.front();
  std::vector<const EngineMetadata*> out(a.pp_size, nullptr);
  for (const EngineMetadata& m : stages) {
    if (m.engine_id != a.engine_id || m.pp_size != a.pp_size) {
      fail(Status::InvalidArgument, std::string(side) + " stages mix engine '" + a.engine_id + "' pp_size " +
                                        num(a.pp_size) + " and engine '" + m.engine_id + "' pp_size " +
                                        num(m.pp_size) + "; pair the stages of one engine per side");
    }
    if (m.pp_rank >= out.size()) {
      fail(Status::InvalidArgument, std::string(side) + " stage pp_rank " + num(m.pp_rank) + " is not below pp_size " +
                                        num(m.pp_size));
    }
    if (out[m.pp_rank] != nullptr) {
      fail(Status::InvalidArgument, std::string(side) + " stage " + num(m.pp_rank) +
                                        " is given twice; pass one rank's metadata per stage");
    }
    out[m.pp_rank] = &m;
  }
  return out;
}

}  // namespace

LayerWindow pipeline_layer_window(uint32_t num_layers, uint32_t pp_rank, uint32_t pp_size) {
  if (pp_size == 0 || pp_rank >= pp_size) {
    fail(Status::InvalidArgument, "pipeline stage " + num(pp_rank) + " of pp_size " + num(pp_size) +
                                      " does not exist (pp_rank must be below pp_size >= 1)");
  }
  if (num_layers < pp_size) {
    fail(Status::InvalidArgument, "pp_size " + num(pp_size) + " exceeds the model's " + num(num_layers) +
                                      " layers; every stage needs at least one layer");
  }
  // Stage k holds base layers plus one when it is among the `extra` stages just before the last
  // one (indexes pp_size-2, pp_size-3, ..., pp_size-1-extra).
  const uint32_t base = num_layers / pp_size, extra = num_layers % pp_size;
  auto size_of = [&](uint32_t k) {
    const bool more = k + 1 < pp_size && pp_size - 1 - k <= extra;
    return base + (more ? 1u : 0u);
  };
  uint32_t begin = 0;
  for (uint32_t k = 0; k < pp_rank; ++k) begin += size_of(k);
  return LayerWindow{begin, begin + size_of(pp_rank)};
}

std::vector<StagePair> pair_pipeline_stages(std::span<const EngineMetadata> d_stages,
                                            std::span<const EngineMetadata> p_stages) {
  const std::vector<const EngineMetadata*> d = by_stage(d_stages, "D");
  const std::vector<const EngineMetadata*> p = by_stage(p_stages, "P");
  for (uint32_t k = 0; k < p.size(); ++k) {
    if (p[k] == nullptr) {
      fail(Status::InvalidArgument, "P stage " + num(k) + " of " + num(p.size()) +
                                        " is missing; every P stage is needed to pair D's layers");
    }
  }
  // P's windows must tile the model stage after stage, so that each layer has one P stage.
  for (uint32_t k = 0; k < p.size(); ++k) {
    const EngineMetadata& s = *p[k];
    if (k == 0 && s.layer_begin != 0) {
      fail(Status::Incompatible, stage_of("P", s) + " does not start at layer 0");
    }
    if (k + 1 < p.size() && p[k + 1]->layer_begin != s.layer_end) {
      fail(Status::Incompatible, stage_of("P", s) + " and " + stage_of("P", *p[k + 1]) +
                                     " do not meet; P's stages must hold consecutive layers");
    }
  }
  const EngineMetadata& last = *p.back();
  std::vector<StagePair> out;
  for (const EngineMetadata* ds : d) {
    if (ds == nullptr) continue;
    // An open D end means "through the model's last layer", which P's last stage holds whatever
    // its end says; a named D end past P's named end would leave layers no P stage holds.
    if (ds->layer_end != kLayerEndOpen && last.layer_end != kLayerEndOpen && ds->layer_end > last.layer_end) {
      fail(Status::Incompatible, stage_of("D", *ds) + " holds layers past P's last layer (" +
                                     stage_of("P", last) + "); P and D must serve the same layers");
    }
    for (const EngineMetadata* ps : p) {
      const uint64_t b = std::max(ds->layer_begin, ps->layer_begin);
      const uint64_t e = std::min(ds->layer_end_bound(), ps->layer_end_bound());
      if (b >= e) continue;
      StagePair sp;
      sp.d_pp_rank = ds->pp_rank;
      sp.p_pp_rank = ps->pp_rank;
      sp.layer_begin = static_cast<uint32_t>(b);
      sp.layer_end = e == (uint64_t{1} << 32) ? kLayerEndOpen : static_cast<uint32_t>(e);
      out.push_back(sp);
    }
  }
  return out;
}

uint32_t pipeline_notifications_expected(std::span<const StagePair> pairs, uint32_t p_pp_rank,
                                         uint32_t p_tp, uint32_t d_tp) {
  const auto stages = static_cast<uint32_t>(
      std::count_if(pairs.begin(), pairs.end(), [&](const StagePair& sp) { return sp.p_pp_rank == p_pp_rank; }));
  return stages == 0 ? 0 : stages * notifications_expected_per_request(p_tp, d_tp);
}

}  // namespace pdkv::core
