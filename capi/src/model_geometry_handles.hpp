// Definitions of the model, geometry, TP-mapping, Mamba-read and descriptor handles (the
// planning handles are in plan_handles.hpp). Each handle owns the core value it wraps plus any
// C-facing copies (string pointers, flattened arrays) whose lifetime the header promises to be
// "until the handle is freed". Handles are immutable after construction, hence thread-safe to read.
#pragma once

#include <string>

#include "pdkv.h"
#include "pdkv/core/model.hpp"

struct pdkv_model {
  pdkv::core::ModelDesc desc;
};

#include "pdkv/core/geometry.hpp"

struct pdkv_geometry {
  pdkv::core::EngineGeometry geometry;
};

#include <vector>

#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/tp_topology.hpp"

struct pdkv_tp_mapping {
  pdkv::core::TpMapping mapping;
  uint32_t notifications_expected = 1;
};

// Flattened C view of the reads; `part` pointers point into `reads[i].part`, which never moves
// because the vector is not modified after construction.
struct pdkv_mamba_read_list {
  std::vector<pdkv::core::MambaRead> reads;
  std::vector<pdkv_mamba_read_t> c_reads;
  std::vector<uint32_t> source_ranks;
};

#include "pdkv/core/descriptor.hpp"

struct pdkv_descriptor_list {
  std::vector<pdkv_descriptor_t> items;
};
