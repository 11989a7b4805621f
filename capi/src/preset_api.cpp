// Built-in model presets (core/presets.hpp): enumeration and model construction.
#include "boundary.hpp"
#include "model_geometry_handles.hpp"
#include "pdkv/core/presets.hpp"
#include "structs.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

extern "C" {

PDKV_API pdkv_status_t pdkv_model_from_preset(const char* name, pdkv_model_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(name, "name");
    require_non_null(out, "out");
    *out = nullptr;
    *out = new pdkv_model{core::preset_model(name)};
  });
}

PDKV_API size_t pdkv_preset_count(void) {
  // presets() builds a static table once; nothing in it can throw after that, but the first call
  // allocates, so an allocation failure must not escape into C.
  try {
    return core::presets().size();
  } catch (...) {
    return 0;
  }
}

PDKV_API pdkv_status_t pdkv_preset_at(size_t index, const char** name, const char** hf_name, const char** source,
                                      pdkv_error_t** err) {
  return guard(err, [&] {
    const auto& all = core::presets();
    pdkv::capi::require_index(index, all.size(), "preset");
    // The table is a function-local static: its strings live until the library is unloaded.
    if (name != nullptr) *name = all[index].name.c_str();
    if (hf_name != nullptr) *hf_name = all[index].hf_name.c_str();
    if (source != nullptr) *source = all[index].model.source.c_str();
  });
}

}  // extern "C"
