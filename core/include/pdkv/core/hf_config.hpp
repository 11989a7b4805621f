// Hugging Face config.json -> ModelDesc. Pure: the caller reads the file and passes its text;
// `origin` (a path or repo id) only labels error messages.
//
// Supported model_type values: nemotron_h, qwen3_next, qwen3_5 / qwen3_5_moe (keys may sit under
// text_config), falcon_h1, jamba, granitemoehybrid, kimi_linear (MLA + KDA: described, rejected
// later as an unsupported Mamba type), and pure-attention models (llama-like, MLA when
// kv_lora_rank is present).
#pragma once

#include <string_view>

#include "pdkv/core/model.hpp"

namespace pdkv::core {

// Errors: Parse (malformed JSON, with the byte position), NotFound (a required key is missing,
// naming the key and origin), InvalidArgument (a key has the wrong type or value, naming it),
// UnsupportedMambaType (a model_type pdkv has no rule for whose config has SSM / linear-attention
// keys, naming the type and the key). An unknown model_type with no such keys is read as a pure
// attention model; guessing there is safe because attention geometry needs only generic keys,
// while a silently dropped Mamba state would plan an incomplete transfer.
ModelDesc model_from_hf_config(std::string_view json_text, std::string_view origin);

}  // namespace pdkv::core
