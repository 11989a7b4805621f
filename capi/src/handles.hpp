// Definitions of the opaque C handle types. Each handle owns the core value it wraps plus any
// C-facing copies (string pointers, flattened arrays) whose lifetime the header promises to be
// "until the handle is freed". Handles are immutable after construction, hence thread-safe to read.
#pragma once

#include <string>

#include "pdkv.h"
#include "pdkv/core/model.hpp"

struct pdkv_model {
  pdkv::core::ModelDesc desc;
};
