// Builds the EngineMetadata an engine would advertise from its derived geometry: what tests,
// benchmarks, fuzzers and the CLI need to plan for a model without a running engine.
#pragma once

#include <cstdint>
#include <string>

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
};

// Metadata of rank layout.tp_rank of an engine running `m` with `e` (geometry from
// derive_geometry(m, e)): HND layout, kernel block_len for every region, the Mamba sizes of
// g.mamba, prefix caching on iff cache_mode != None. Every region's block_len is
// g.kernel_page_bytes = kernel_block_size * attention_bytes_per_token (hybrids pad the Mamba page
// to the attention page), the relation check_metadata requires of every peer. Errors: those of
// check_metadata (as InvalidArgument), Overflow.
EngineMetadata metadata_from_geometry(const ModelDesc& m, const EngineConfig& e,
                                      const EngineGeometry& g, const EngineLayout& layout);

}  // namespace pdkv::core
