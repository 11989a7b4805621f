// Conversion of the C engine settings struct into the core EngineConfig (+ GeometryOptions).
#pragma once

#include "pdkv.h"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::capi {

struct EngineSettings {
  pdkv::core::EngineConfig engine;
  pdkv::core::GeometryOptions options;
};

// Checks struct_size and every enum value (InvalidArgument naming the field and the value), copies
// the explicit kernel list, applies a named backend and checks it against the model (an MLA
// backend on a non-MLA model is Incompatible).
EngineSettings engine_from_c(const pdkv_engine_config_t& c, const pdkv::core::ModelDesc& model);

}  // namespace pdkv::capi
