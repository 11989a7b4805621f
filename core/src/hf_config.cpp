#include "pdkv/core/hf_config.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_kind.hpp"

namespace pdkv::core {

namespace {

using nlohmann::json;

// A JSON object plus what error messages need to point at it.
struct Cfg {
  const json& obj;
  std::string origin;
  std::string prefix;  // "" or "text_config."

  std::string where(const char* key) const { return "'" + prefix + key + "' in " + origin; }

  bool has(const char* key) const { return obj.contains(key) && !obj.at(key).is_null(); }

  uint32_t u32(const char* key) const {
    if (!has(key)) fail(Status::NotFound, "missing key " + where(key));
    return to_u32(obj.at(key), key);
  }
  uint32_t u32_or(const char* key, uint32_t fallback) const { return has(key) ? u32(key) : fallback; }

  // Reads one Mamba kind's keys (core/src/mamba_kinds/) into mb.
  void mamba_keys(MambaType type, const MambaConfigKeys& keys, MambaDesc& mb) const {
    read_mamba_config_keys(
        type, keys, [this](const char* key) { return u32(key); },
        [this](const char* key, uint32_t fallback) { return u32_or(key, fallback); }, mb);
  }

  uint32_t to_u32(const json& v, const char* key) const {
    if (!v.is_number_integer()) {
      fail(Status::InvalidArgument, "key " + where(key) + " must be a non-negative integer, got " + v.dump());
    }
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      if (u <= std::numeric_limits<uint32_t>::max()) return static_cast<uint32_t>(u);
    }
    fail(Status::InvalidArgument, "key " + where(key) + " = " + v.dump() + " is out of range (0..4294967295)");
  }

  double number(const char* key) const {
    if (!has(key)) fail(Status::NotFound, "missing key " + where(key));
    const json& v = obj.at(key);
    if (!v.is_number()) fail(Status::InvalidArgument, "key " + where(key) + " must be a number, got " + v.dump());
    return v.get<double>();
  }

  std::string str(const char* key) const {
    if (!has(key)) fail(Status::NotFound, "missing key " + where(key));
    const json& v = obj.at(key);
    if (!v.is_string()) fail(Status::InvalidArgument, "key " + where(key) + " must be a string, got " + v.dump());
    return v.get<std::string>();
  }

  const json& array(const char* key) const {
    if (!has(key)) fail(Status::NotFound, "missing key " + where(key));
    const json& v = obj.at(key);
    if (!v.is_array()) fail(Status::InvalidArgument, "key " + where(key) + " must be an array, got " + v.dump());
    return v;
  }
};

uint32_t dtype_key_bytes(const Cfg& c, const char* key) {
  const std::string name = c.str(key);
  try {
    return dtype_bytes_from_name(name);
  } catch (const Error&) {
    fail(Status::InvalidArgument, "key " + c.where(key) + " = \"" + name +
                                      "\" is not a known dtype (bfloat16, float16, float32, ...)");
  }
}

// Model dtype under vLLM's --dtype auto: the config's torch_dtype (newer transformers: dtype),
// except that float32 checkpoints (and configs without a dtype, which torch treats as float32)
// are served in 16 bits.
uint32_t model_dtype_bytes(const Cfg& c) {
  const char* key = c.has("dtype") ? "dtype" : c.has("torch_dtype") ? "torch_dtype" : nullptr;
  if (key == nullptr) return 2;
  const uint32_t b = dtype_key_bytes(c, key);
  return (b == 0 || b == 4) ? 2 : b;
}

uint32_t head_dim_or_hidden_over_heads(const Cfg& c) {
  if (c.has("head_dim")) return c.u32("head_dim");
  const uint32_t heads = c.u32("num_attention_heads");
  if (heads == 0) fail(Status::InvalidArgument, "key " + c.where("num_attention_heads") + " = 0 must be > 0");
  return c.u32("hidden_size") / heads;
}

void gqa_attention(const Cfg& c, ModelDesc& m) {
  m.attention.num_kv_heads = c.u32_or("num_key_value_heads", c.u32("num_attention_heads"));
  m.attention.head_size = head_dim_or_hidden_over_heads(c);
  m.attention.head_size_v = m.attention.head_size;
  // Qwen2-style configs carry a sliding_window value that is switched off by use_sliding_window.
  const bool swa_off = c.has("use_sliding_window") && c.obj.at("use_sliding_window") == false;
  m.attention.sliding_window =
      !swa_off && c.has("sliding_window") && c.obj.at("sliding_window").is_number_integer() ? c.u32("sliding_window")
                                                                                             : 0;
}

// mamba_expand * hidden_size as an exact integer. The product is computed in double (expand may
// be written as 2 or 2.0) and must be finite, > 0, integral and <= 2^53 (exactly representable)
// before it is converted; anything else names the key and the value as written.
uint64_t expand_times_hidden(const Cfg& c) {
  const double expand = c.number("mamba_expand");
  const uint32_t hidden = c.u32("hidden_size");
  const double inner = expand * hidden;
  constexpr double kMaxExact = 9007199254740992.0;  // 2^53
  if (!std::isfinite(expand) || !std::isfinite(inner) || !(inner > 0) || inner > kMaxExact ||
      std::floor(inner) != inner) {
    char product[64];
    std::snprintf(product, sizeof product, "%.17g", inner);
    fail(Status::InvalidArgument, "key " + c.where("mamba_expand") + " = " + c.obj.at("mamba_expand").dump() +
                                      ": mamba_expand * hidden_size = " + c.obj.at("mamba_expand").dump() +
                                      " * " + std::to_string(hidden) + " = " + product +
                                      " must be a finite positive integer <= 2^53");
  }
  return static_cast<uint64_t>(inner);
}

// vLLM's MambaMixer2 takes the conv "x" width as an explicit intermediate size, while pdkv's
// Mamba2 derives it as heads * head_dim. They agree on every published checkpoint; refuse the
// config loudly instead of silently mis-sizing the conv state when they do not.
void require_inner_matches(const Cfg& c, uint64_t inner, const char* inner_from, const MambaDesc& mb) {
  const uint64_t heads_x_dim = uint64_t{mb.num_heads} * mb.head_dim;
  if (inner != heads_x_dim) {
    fail(Status::InvalidArgument, c.origin + ": Mamba2 intermediate size " + std::to_string(inner) + " (" +
                                      inner_from + ") differs from mamba heads * head dim = " +
                                      std::to_string(mb.num_heads) + " * " + std::to_string(mb.head_dim) + " = " +
                                      std::to_string(heads_x_dim) + "; pdkv cannot describe this layer");
  }
}

std::string pattern_from_interval(uint32_t layers, uint32_t interval, const Cfg& c) {
  if (interval == 0) fail(Status::InvalidArgument, "key " + c.where("full_attention_interval") + " = 0 must be > 0");
  std::string p(layers, kLayerMamba);
  for (uint32_t i = 0; i < layers; ++i) {
    if ((i + 1) % interval == 0) p[i] = kLayerAttention;
  }
  return p;
}

// layer_types: one string per layer. `attention_names` / `mamba_names` map them to kinds.
std::string pattern_from_layer_types(const Cfg& c, std::initializer_list<const char*> attention_names,
                                     std::initializer_list<const char*> mamba_names) {
  std::string p;
  size_t i = 0;
  for (const json& t : c.array("layer_types")) {
    if (!t.is_string()) {
      fail(Status::InvalidArgument, "key " + c.where("layer_types") + "[" + std::to_string(i) +
                                        "] must be a string, got " + t.dump());
    }
    const std::string s = t.get<std::string>();
    char kind = 0;
    for (const char* a : attention_names) if (s == a) kind = kLayerAttention;
    for (const char* mname : mamba_names) if (s == mname) kind = kLayerMamba;
    if (kind == 0) {
      fail(Status::InvalidArgument, "key " + c.where("layer_types") + "[" + std::to_string(i) + "] = \"" + s +
                                        "\" is not a known layer type");
    }
    p += kind;
    ++i;
  }
  return p;
}

ModelDesc nemotron_h(const Cfg& c, ModelDesc m) {
  gqa_attention(c, m);
  auto& mb = m.mamba;
  c.mamba_keys(MambaType::Mamba2, kMamba2NemotronHKeys, mb);
  // Absent key -> float32 (vLLM #39032); present -> what it names (#29978).
  m.default_ssm_dtype_bytes = c.has("mamba_ssm_cache_dtype") ? dtype_key_bytes(c, "mamba_ssm_cache_dtype") : 4;
  if (m.default_ssm_dtype_bytes == 0) m.default_ssm_dtype_bytes = 4;
  std::string p = c.str("hybrid_override_pattern");
  for (size_t i = 0; i < p.size(); ++i) {
    switch (p[i]) {
      case 'M': case '*': case '-': break;
      case 'E': p[i] = kLayerOther; break;  // MoE layer: no KV state
      default:
        fail(Status::InvalidArgument, "key " + c.where("hybrid_override_pattern") + " has unknown layer kind '" +
                                          std::string(1, p[i]) + "' at index " + std::to_string(i) +
                                          " (expected M, *, - or E)");
    }
  }
  m.layer_pattern = p;
  return m;
}

// Qwen3-Next and Qwen3.5/3.6: gated delta net + gated full attention.
ModelDesc qwen_gdn(const Cfg& c, ModelDesc m, bool ssm_dtype_from_config) {
  gqa_attention(c, m);
  auto& mb = m.mamba;
  c.mamba_keys(MambaType::Gdn, kGdnQwenKeys, mb);
  if (ssm_dtype_from_config) {
    // Qwen3.5 hook (#34200/#34489): text_config.mamba_ssm_dtype; released checkpoints say float32.
    m.default_ssm_dtype_bytes = c.has("mamba_ssm_dtype") ? dtype_key_bytes(c, "mamba_ssm_dtype") : 4;
  }  // Qwen3-Next: no hook, SSM state in the model dtype (0 = auto).
  if (c.has("layer_types")) {
    m.layer_pattern = pattern_from_layer_types(c, {"full_attention"}, {"linear_attention"});
  } else {
    m.layer_pattern = pattern_from_interval(c.u32("num_hidden_layers"), c.u32_or("full_attention_interval", 4), c);
  }
  return m;
}

ModelDesc falcon_h1(const Cfg& c, ModelDesc m) {
  gqa_attention(c, m);
  auto& mb = m.mamba;
  c.mamba_keys(MambaType::Mamba2, kMamba2MambaPrefixedKeys, mb);
  if (c.has("mamba_d_ssm")) {
    require_inner_matches(c, c.u32("mamba_d_ssm"), "mamba_d_ssm", mb);
  } else {
    require_inner_matches(c, expand_times_hidden(c), "mamba_expand * hidden_size", mb);
  }
  m.layer_pattern = std::string(c.u32("num_hidden_layers"), kLayerParallel);
  return m;
}

ModelDesc jamba(const Cfg& c, ModelDesc m) {
  gqa_attention(c, m);
  auto& mb = m.mamba;
  c.mamba_keys(MambaType::Mamba1, kMamba1JambaKeys, mb);
  mb.d_inner = mul_checked(c.u32("mamba_expand"), c.u32("hidden_size"), "jamba mamba_expand * hidden_size");
  mb.conv_rows_include_spec = false;
  const uint32_t layers = c.u32("num_hidden_layers");
  const uint32_t period = c.u32("attn_layer_period");
  const uint32_t offset = c.u32("attn_layer_offset");
  if (period == 0) fail(Status::InvalidArgument, "key " + c.where("attn_layer_period") + " = 0 must be > 0");
  std::string p(layers, kLayerMamba);
  for (uint32_t i = 0; i < layers; ++i) {
    if (i % period == offset) p[i] = kLayerAttention;
  }
  m.layer_pattern = p;
  return m;
}

ModelDesc granite_hybrid(const Cfg& c, ModelDesc m) {
  gqa_attention(c, m);
  auto& mb = m.mamba;
  c.mamba_keys(MambaType::Mamba2, kMamba2MambaPrefixedKeys, mb);
  require_inner_matches(c, expand_times_hidden(c), "mamba_expand * hidden_size", mb);
  m.layer_pattern = pattern_from_layer_types(c, {"attention"}, {"mamba"});
  return m;
}

void mla_attention(const Cfg& c, ModelDesc& m) {
  // One latent "head" (kv_lora_rank + qk_rope_head_dim), no separate V, the same on every rank.
  m.attention.num_kv_heads = 1;
  m.attention.head_size = c.u32("kv_lora_rank") + c.u32("qk_rope_head_dim");
  m.attention.head_size_v = 0;
  m.attention.use_mla = true;
}

ModelDesc kimi(const Cfg& c, ModelDesc m) {
  mla_attention(c, m);
  if (!c.has("linear_attn_config")) fail(Status::NotFound, "missing key " + c.where("linear_attn_config"));
  if (!c.obj.at("linear_attn_config").is_object()) {
    fail(Status::InvalidArgument, "key " + c.where("linear_attn_config") + " must be an object");
  }
  const Cfg la{c.obj.at("linear_attn_config"), c.origin, c.prefix + "linear_attn_config."};
  auto& mb = m.mamba;
  mb.type = MambaType::Kda;
  mb.num_heads = la.u32("num_heads");
  mb.head_dim = la.u32("head_dim");
  mb.d_state = mb.head_dim;
  mb.conv_kernel = la.u32("short_conv_kernel_size");
  mb.conv_rows_include_spec = true;
  m.default_ssm_dtype_bytes = 4;  // KDA recurrent state is always float32
  const uint32_t layers = c.u32("num_hidden_layers");
  std::string p(layers, kLayerOther);
  auto mark = [&](const char* key, char kind) {
    size_t i = 0;
    for (const json& v : la.array(key)) {
      const uint32_t one_based = la.to_u32(v, key);
      if (one_based == 0 || one_based > layers) {
        fail(Status::InvalidArgument, "key " + la.where(key) + "[" + std::to_string(i) + "] = " +
                                          std::to_string(one_based) + " is not a 1-based layer index <= " +
                                          std::to_string(layers));
      }
      p[one_based - 1] = kind;
      ++i;
    }
  };
  mark("kda_layers", kLayerMamba);
  mark("full_attn_layers", kLayerAttention);
  m.layer_pattern = p;
  return m;
}

ModelDesc pure_attention(const Cfg& c, ModelDesc m) {
  if (c.has("kv_lora_rank")) {
    mla_attention(c, m);
  } else {
    gqa_attention(c, m);
  }
  m.layer_pattern = std::string(c.u32("num_hidden_layers"), kLayerAttention);
  return m;
}

constexpr const char* kSupportedModelTypes =
    "nemotron_h, qwen3_next, qwen3_5, qwen3_5_moe, qwen3_5_text, qwen3_5_moe_text, falcon_h1, jamba, "
    "granitemoehybrid, kimi_linear, or a pure-attention model type (llama, mistral, qwen2, qwen3, "
    "deepseek_v3, ...) whose config has no SSM / linear-attention keys";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A layer_types entry that is some kind of attention ("full_attention", "sliding_attention",
// "attention", "chunked_attention", ...), and not linear attention.
bool is_attention_layer_type(const std::string& s) {
  const std::string suffix = "attention";
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         s.find("linear") == std::string::npos && s.find("lightning") == std::string::npos;
}

// Why a config of an unknown model_type is not a pure-attention model: the first key (or
// layer_types entry) that belongs to an SSM / linear-attention layer, or "" when there is none.
std::string ssm_evidence(const Cfg& c) {
  static const char* const kExact[] = {
      "conv_kernel", "hybrid_override_pattern", "attn_layer_indices", "attn_layer_period",
      "attn_layer_offset", "n_groups", "state_size", "d_state", "d_conv", "expand",
      "hybrid_layer_ids", "layers_block_type", "layer_block_types", "block_types", "full_attn_idxs",
      "full_attention_interval", "conv_L_cache", "chunk_size", "attn_type_list", "rwkv_version"};
  static const char* const kPrefixes[] = {"mamba_", "mamba", "ssm_", "linear_", "time_step_", "conv_", "kda_",
                                          "short_conv", "gdn_", "lightning_"};
  for (const auto& [key, value] : c.obj.items()) {
    if (value.is_null()) continue;
    for (const char* k : kExact) {
      if (key == k) return "key " + c.where(k);
    }
    for (const char* pre : kPrefixes) {
      if (starts_with(key, pre)) return "key " + c.where(key.c_str());
    }
    if (key.find("mamba") != std::string::npos || key.find("ssm") != std::string::npos) {
      return "key " + c.where(key.c_str());
    }
  }
  if (c.has("layer_types") && c.obj.at("layer_types").is_array()) {
    size_t i = 0;
    for (const json& t : c.obj.at("layer_types")) {
      if (!t.is_string() || !is_attention_layer_type(t.get<std::string>())) {
        return "key '" + c.prefix + "layer_types[" + std::to_string(i) + "]' = " + t.dump() + " in " + c.origin +
               " (not an attention layer)";
      }
      ++i;
    }
  }
  if (c.has("text_config") && c.obj.at("text_config").is_object()) {
    const Cfg text{c.obj.at("text_config"), c.origin, c.prefix + "text_config."};
    return ssm_evidence(text);
  }
  return "";
}

}  // namespace

ModelDesc model_from_hf_config(std::string_view json_text, std::string_view origin) {
  const std::string org(origin);
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    fail(Status::Parse, org + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const json::exception& e) {
    // e.g. out_of_range.406: a number literal such as 1e400 overflows a double.
    fail(Status::Parse, org + ": invalid JSON: " + e.what());
  }
  if (!root.is_object()) fail(Status::Parse, org + ": config.json must be a JSON object, got " + root.type_name());

  const Cfg top{root, org, ""};
  const std::string model_type = top.str("model_type");

  ModelDesc m;
  m.name = top.has("_name_or_path") && root.at("_name_or_path").is_string()
               ? root.at("_name_or_path").get<std::string>()
               : org;
  m.source = "config.json: " + org;

  if (model_type == "qwen3_5" || model_type == "qwen3_5_moe" || model_type == "qwen3_5_text" ||
      model_type == "qwen3_5_moe_text") {
    // Multimodal wrapper: the language model's keys live under text_config.
    if (top.has("text_config")) {
      if (!root.at("text_config").is_object()) {
        fail(Status::InvalidArgument, "key 'text_config' in " + org + " must be an object");
      }
      const Cfg text{root.at("text_config"), org, "text_config."};
      m.dtype_bytes = text.has("dtype") || text.has("torch_dtype") ? model_dtype_bytes(text) : model_dtype_bytes(top);
      return qwen_gdn(text, m, true);
    }
    m.dtype_bytes = model_dtype_bytes(top);
    return qwen_gdn(top, m, true);
  }

  m.dtype_bytes = model_dtype_bytes(top);
  if (model_type == "nemotron_h") return nemotron_h(top, m);
  if (model_type == "qwen3_next") return qwen_gdn(top, m, false);
  if (model_type == "falcon_h1") return falcon_h1(top, m);
  if (model_type == "jamba") return jamba(top, m);
  if (model_type == "granitemoehybrid") return granite_hybrid(top, m);
  if (model_type == "kimi_linear") return kimi(top, m);
  // Anything else is read as a pure-attention model (llama, mistral, qwen2/3, deepseek MLA, ...),
  // but only when nothing in the config describes SSM / linear-attention layers: a bamba or
  // zamba2 config read as pure attention would plan without its Mamba state.
  const std::string evidence = ssm_evidence(top);
  if (!evidence.empty()) {
    fail(Status::UnsupportedMambaType, org + ": model_type '" + model_type +
                                           "' is not supported and is not a pure-attention model (" + evidence +
                                           " describes SSM / linear-attention layers); supported model types: " +
                                           kSupportedModelTypes);
  }
  return pure_attention(top, m);
}

}  // namespace pdkv::core
