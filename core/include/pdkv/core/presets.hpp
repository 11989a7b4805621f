// Built-in model descriptions of real hybrid models, from the published config.json values of
// their Hugging Face checkpoints. Only models whose every needed value is published are here;
// each preset's ModelDesc::source names where its numbers come from.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pdkv/core/model.hpp"

namespace pdkv::core {

struct Preset {
  std::string name;     // short CLI name, e.g. "nemotron-3-nano-30b"
  std::string hf_name;  // Hugging Face repo id, accepted as an alias
  ModelDesc model;      // model.name == hf_name
};

const std::vector<Preset>& presets();

// Looks a preset up by short name or HF name (case-insensitive). NotFound lists the valid names.
ModelDesc preset_model(std::string_view name);

}  // namespace pdkv::core
