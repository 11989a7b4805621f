// The --model argument shared by `pdkv plan` and `pdkv demo`: a preset name or a Hugging Face
// config.json path.
#pragma once

#include <string>
#include <vector>

#include "pdkv/core/model.hpp"

namespace pdkv::cli {

// The preset names --model accepts (for "did you mean").
std::vector<std::string> preset_names();

// --model: a config.json path when `spec` names an existing file or ends in ".json", else a
// preset. A spec that names nothing loadable (unknown preset, missing file, a directory) is a
// usage error naming --model; a config.json that is read but invalid or unsupported is a
// configuration error. Throws CliError.
pdkv::core::ModelDesc load_model(const std::string& spec);

}  // namespace pdkv::cli
