// Builds the EngineMetadata an engine would advertise from its derived geometry: what tests,
// benchmarks, fuzzers and the CLI need to plan for a model without a running engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::core {

struct EngineLayout {
  std::string engine_id = "engine";
  uint32_t tp_rank = 0;
  uint64_t num_logical_blocks = 64;  // per region; num_kernel_blocks = this * ppl
  uint32_t num_regions = 1;          // registered KV tensors (HMA: layers per group)
  uint64_t base = uint64_t{1} << 40; // address of region 0; regions follow back to back
  // Kind of each region (num_regions entries), or empty: `mamba` for hybrids, `attention`
  // otherwise, and for a model with MLA-typed layers (ModelDesc::mla_head_size) the kinds of its
  // attention layers in layer_pattern order ('*' attention, 'L' mla), repeated when there are
  // more regions than attention layers, each region's `layer` that layer's index.
  std::vector<RegionKind> region_kinds = {};
  // Pipeline stage (EngineMetadata's fields of the same names): stage pp_rank of pp_size holding
  // the model layers [layer_begin, layer_end) (kLayerEndOpen: through the last layer). Region i's
  // `layer` is layer_begin + i (or, for a model with MLA-typed layers, the i-th attention layer of
  // the window, repeated), so a stage registers at most as many regions as its window has layers.
  uint32_t pp_size = 1;
  uint32_t pp_rank = 0;
  uint32_t layer_begin = 0;
  uint32_t layer_end = kLayerEndOpen;
};

// Metadata of rank layout.tp_rank of an engine running `m` with `e` (geometry from
// derive_geometry(m, e)): HND layout, kernel block_len for every region, the Mamba sizes of
// g.mamba, prefix caching on iff cache_mode != None. Every region's block_len is
// g.kernel_page_bytes = kernel_block_size * attention_bytes_per_token (hybrids pad the Mamba page
// to the attention page), the relation check_metadata requires of every peer, except an `mla`
// region's, which is g.mla_kernel_page_bytes. Errors: InvalidArgument (region_kinds with a count
// other than num_regions, an `mla` region for a model without MLA-typed layers, a `mamba` region
// for a model without Mamba layers, a stage window without an attention layer of a model with
// MLA-typed layers, more regions than the window has layers), those of check_metadata (as
// InvalidArgument: pipeline fields out of range, ...), Overflow.
EngineMetadata metadata_from_geometry(const ModelDesc& m, const EngineConfig& e,
                                      const EngineGeometry& g, const EngineLayout& layout);

}  // namespace pdkv::core
