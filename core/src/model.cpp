#include "pdkv/core/model.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_kind.hpp"
#include "ascii_lower.hpp"

namespace pdkv::core {

const char* mamba_type_name(MambaType t) noexcept {
  const auto v = static_cast<int32_t>(t);
  if (v < 0 || v > static_cast<int32_t>(last_mamba_type())) return "unknown";
  try {
    return mamba_kind(t).name();
  } catch (...) {  // only if the kind table and the enum disagree (a test guards that)
    return "unknown";
  }
}

uint32_t ModelDesc::num_attention_layers() const {
  return static_cast<uint32_t>(std::count_if(layer_pattern.begin(), layer_pattern.end(), [](char c) {
    return c == kLayerAttention || c == kLayerParallel || c == kLayerMla;
  }));
}

uint32_t ModelDesc::num_mamba_layers() const {
  return static_cast<uint32_t>(std::count_if(layer_pattern.begin(), layer_pattern.end(), [](char c) {
    return c == kLayerMamba || c == kLayerParallel;
  }));
}

static std::string field(const ModelDesc& m, const char* name, uint64_t v) {
  return "model '" + m.name + "': " + name + " = " + std::to_string(v);
}

void validate_model(const ModelDesc& m) {
  const auto& a = m.attention;
  require(a.num_kv_heads > 0, Status::InvalidArgument,
          field(m, "attention.num_kv_heads", a.num_kv_heads) + " must be > 0");
  require(a.head_size > 0, Status::InvalidArgument,
          field(m, "attention.head_size", a.head_size) + " must be > 0");
  if (a.use_mla) {
    require(a.num_kv_heads == 1, Status::InvalidArgument,
            field(m, "attention.num_kv_heads", a.num_kv_heads) + " must be 1 for MLA");
  }
  // The same dtype sizes the engine config accepts (validate_engine_config); the model dtype has
  // no "auto", so 0 is refused there, while default_ssm_dtype_bytes 0 means "the conv dtype".
  require(m.dtype_bytes != 0 && is_valid_dtype_bytes(m.dtype_bytes), Status::InvalidArgument,
          field(m, "dtype_bytes", m.dtype_bytes) + " is not a dtype size (1, 2, 4 or 8 bytes)");
  require(is_valid_dtype_bytes(m.default_ssm_dtype_bytes), Status::InvalidArgument,
          field(m, "default_ssm_dtype_bytes", m.default_ssm_dtype_bytes) +
              " is not a dtype size (0 auto, 1, 2, 4 or 8 bytes)");
  bool mla_layers = false;
  for (char c : m.layer_pattern) {
    require(c == kLayerAttention || c == kLayerMamba || c == kLayerParallel || c == kLayerOther ||
                c == kLayerMla,
            Status::InvalidArgument,
            "model '" + m.name + "': layer_pattern has unknown layer kind '" + std::string(1, c) +
                "' (expected '*', 'M', 'P', 'L' or '-')");
    mla_layers = mla_layers || c == kLayerMla;
  }
  if (mla_layers || m.mla_head_size != 0) {
    require(mla_layers, Status::InvalidArgument,
            field(m, "mla_head_size", m.mla_head_size) +
                " but layer_pattern has no MLA-typed layer 'L'; mark the MLA layers or set it to 0");
    require(m.mla_head_size != 0, Status::InvalidArgument,
            field(m, "mla_head_size", 0) + " but layer_pattern marks MLA-typed layers 'L'; give "
                                           "the width of their latent");
    require(!a.use_mla, Status::InvalidArgument,
            "model '" + m.name + "': attention.use_mla is on and layer_pattern marks MLA-typed "
            "layers 'L': a pure MLA model describes its latent in attention; 'L' marks the MLA "
            "layers of a GQA model");
    require(m.mamba.type == MambaType::None, Status::InvalidArgument,
            "model '" + m.name + "': MLA-typed layers 'L' in a hybrid (Mamba type " +
                mamba_type_name(m.mamba.type) + ") model are not supported: the hybrid block-size "
                "rule for attention pages of two sizes is not derived");
  }
  const auto& mb = m.mamba;
  if (mb.type == MambaType::None) return;
  require(mb.conv_kernel >= 2, Status::InvalidArgument,
          field(m, "mamba.conv_kernel", mb.conv_kernel) + " must be >= 2");
  // The kind's own required fields; a kind pdkv cannot transfer requires none here and is
  // refused by the state derivation with UnsupportedMambaType.
  mamba_kind(mb.type).validate(m);
}

bool is_valid_dtype_bytes(uint32_t bytes) noexcept {
  return bytes == 0 || bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8;
}

void validate_engine_config(const EngineConfig& e) {
  const auto value = [](const char* name, uint64_t v) { return std::string("engine config: ") + name + " = " + std::to_string(v); };
  require(e.tp_size > 0, Status::InvalidArgument, "tp_size 0 is invalid (must be >= 1)");
  require(e.tp_size <= kEngineMaxTpSize, Status::InvalidArgument,
          value("tp_size", e.tp_size) + " exceeds the maximum " + std::to_string(kEngineMaxTpSize));
  const std::pair<const char*, uint32_t> dtypes[] = {{"kv_cache_dtype_bytes", e.kv_cache_dtype_bytes},
                                                     {"conv_state_dtype_bytes", e.conv_state_dtype_bytes},
                                                     {"ssm_state_dtype_bytes", e.ssm_state_dtype_bytes}};
  for (const auto& [name, bytes] : dtypes) {
    require(is_valid_dtype_bytes(bytes), Status::InvalidArgument,
            value(name, bytes) + " is not a dtype size (0 auto, 1, 2, 4 or 8 bytes)");
  }
  require(e.num_speculative_tokens <= kEngineMaxSpeculativeTokens, Status::InvalidArgument,
          value("num_speculative_tokens", e.num_speculative_tokens) + " exceeds " +
              std::to_string(kEngineMaxSpeculativeTokens) + ", vLLM's practical bound on speculative tokens");
  require(e.user_block_size <= kEngineMaxUserBlockSize, Status::InvalidArgument,
          value("user_block_size", e.user_block_size) + " exceeds the maximum " +
              std::to_string(kEngineMaxUserBlockSize) + " tokens");
  const uint32_t bits = e.kv_cache_element_bits;
  require(bits == 0 || bits == 4 || bits == 8 || bits == 16 || bits == 32 || bits == 64, Status::InvalidArgument,
          value("kv_cache_element_bits", bits) + " is not an element size (0 auto, 4, 8, 16, 32 or 64 bits)");
  require(bits == 0 || e.kv_cache_dtype_bytes == 0 || bits == 8 * e.kv_cache_dtype_bytes, Status::InvalidArgument,
          value("kv_cache_element_bits", bits) + " disagrees with kv_cache_dtype_bytes = " +
              std::to_string(e.kv_cache_dtype_bytes) + " (" + std::to_string(8 * e.kv_cache_dtype_bytes) +
              " bits); set one of them, or both alike");
  require(e.kv_cache_head_extra_bytes <= kMaxKvHeadExtraBytes, Status::InvalidArgument,
          value("kv_cache_head_extra_bytes", e.kv_cache_head_extra_bytes) + " exceeds the maximum " +
              std::to_string(kMaxKvHeadExtraBytes) + " bytes per token per KV head");
}

uint32_t resolved_kv_dtype_bytes(const ModelDesc& m, const EngineConfig& e) {
  return e.kv_cache_dtype_bytes != 0 ? e.kv_cache_dtype_bytes : m.dtype_bytes;
}

uint32_t resolved_kv_element_bits(const ModelDesc& m, const EngineConfig& e) {
  return e.kv_cache_element_bits != 0 ? e.kv_cache_element_bits : 8 * resolved_kv_dtype_bytes(m, e);
}

uint64_t kv_head_bytes_per_token(const ModelDesc& m, const EngineConfig& e) {
  const uint64_t bits = resolved_kv_element_bits(m, e);
  const auto whole = [&](const char* field, uint64_t elements) {
    require(elements * bits % 8 == 0, Status::InvalidArgument,
            "model '" + m.name + "': " + field + " = " + std::to_string(elements) + " elements of " +
                std::to_string(bits) + " bits are not a whole number of bytes (kv_cache_element_bits " +
                std::to_string(bits) + ")");
    return elements * bits / 8;
  };
  const uint64_t data = whole("attention.head_size", m.attention.head_size) +
                        whole("attention.head_size_v", m.attention.head_size_v);
  if (e.kv_cache_head_extra_bytes != 0) {
    require(!m.attention.use_mla && !m.mixes_mla(), Status::InvalidArgument,
            "model '" + m.name + "': kv_cache_head_extra_bytes = " + std::to_string(e.kv_cache_head_extra_bytes) +
                " (per-token-head scales) with MLA latents (" +
                (m.attention.use_mla ? std::string("use_mla") : "MLA-typed layers 'L'") +
                "): the per-token-head KV formats scale GQA K/V heads; use a plain KV dtype");
  }
  return data + e.kv_cache_head_extra_bytes;
}

KvCacheFormat kv_cache_format_from_name(const std::string& name) {
  const std::string n = ascii_lower(name);
  if (n == "auto") return {0, 0};
  if (n == "bfloat16" || n == "bf16" || n == "float16" || n == "fp16" || n == "half") return {16, 0};
  if (n == "float32" || n == "fp32" || n == "float") return {32, 0};
  if (n == "fp8" || n == "fp8_e4m3" || n == "fp8_e5m2") return {8, 0};
  // vLLM's per-token-head modes: K and V each carry one fp32 scale per token and head.
  if (n == "int8_per_token_head" || n == "fp8_per_token_head") return {8, 8};
  if (n == "int4_per_token_head") return {4, 8};
  fail(Status::NotFound, "unknown KV cache dtype '" + name +
                             "' (expected one of auto, bfloat16, float16, float32, fp8, fp8_e4m3, fp8_e5m2, "
                             "int8_per_token_head, fp8_per_token_head, int4_per_token_head)");
}

uint32_t resolved_conv_dtype_bytes(const ModelDesc& m, const EngineConfig& e) {
  return e.conv_state_dtype_bytes != 0 ? e.conv_state_dtype_bytes : m.dtype_bytes;
}

uint32_t resolved_ssm_dtype_bytes(const ModelDesc& m, const EngineConfig& e) {
  if (e.ssm_state_dtype_bytes != 0) return e.ssm_state_dtype_bytes;
  if (m.default_ssm_dtype_bytes != 0) return m.default_ssm_dtype_bytes;
  return resolved_conv_dtype_bytes(m, e);
}

uint32_t dtype_bytes_from_name(const std::string& name) {
  const std::string n = ascii_lower(name);
  if (n == "auto") return 0;
  if (n == "bfloat16" || n == "bf16" || n == "float16" || n == "fp16" || n == "half") return 2;
  if (n == "float32" || n == "fp32" || n == "float") return 4;
  if (n == "fp8" || n == "fp8_e4m3" || n == "fp8_e5m2" || n == "float8_e4m3fn" || n == "int8" || n == "uint8")
    return 1;
  if (n == "float64" || n == "fp64") return 8;
  fail(Status::NotFound, "unknown dtype '" + name +
                             "' (expected one of auto, bfloat16, float16, float32, fp8, int8)");
}

}  // namespace pdkv::core

namespace pdkv::core {

namespace {
struct FormatInfo {
  ElementFormat format;
  const char* name;
  uint32_t bits;
  uint32_t head_extra_bytes;
};
constexpr FormatInfo kFormats[] = {
    {ElementFormat::BFloat16, "bfloat16", 16, 0},       {ElementFormat::Float16, "float16", 16, 0},
    {ElementFormat::Float32, "float32", 32, 0},         {ElementFormat::Fp8E4m3, "fp8_e4m3", 8, 0},
    {ElementFormat::Fp8E5m2, "fp8_e5m2", 8, 0},         {ElementFormat::Int8PerTokenHead, "int8_per_token_head", 8, 8},
    {ElementFormat::Fp8PerTokenHead, "fp8_per_token_head", 8, 8},
    {ElementFormat::Int4PerTokenHead, "int4_per_token_head", 4, 8},
};
const FormatInfo* format_info(ElementFormat f) noexcept {
  for (const FormatInfo& i : kFormats) {
    if (i.format == f) return &i;
  }
  return nullptr;
}
}  // namespace

const char* element_format_name(ElementFormat f) noexcept {
  const FormatInfo* i = format_info(f);
  return i ? i->name : "unknown";
}

ElementFormat element_format_from_name(const std::string& name) {
  const std::string n = ascii_lower(name);
  if (n == "auto" || n == "unknown") return ElementFormat::Unknown;
  if (n == "bf16") return ElementFormat::BFloat16;
  if (n == "fp16" || n == "half") return ElementFormat::Float16;
  if (n == "fp32" || n == "float") return ElementFormat::Float32;
  if (n == "fp8") return ElementFormat::Fp8E4m3;
  std::string names;
  for (const FormatInfo& i : kFormats) {
    if (n == i.name) return i.format;
    names += std::string(names.empty() ? "" : ", ") + i.name;
  }
  fail(Status::NotFound, "unknown element format '" + name + "' (expected auto or one of " + names + ")");
}

bool is_per_token_head_format(ElementFormat f) noexcept {
  const FormatInfo* i = format_info(f);
  return i && i->head_extra_bytes != 0;
}

KvCacheFormat kv_cache_format_of(ElementFormat f) noexcept {
  const FormatInfo* i = format_info(f);
  return i ? KvCacheFormat{i->bits, i->head_extra_bytes} : KvCacheFormat{};
}

void validate_engine_formats(const ModelDesc& m, const EngineConfig& e) {
  const ElementFormat named[] = {e.model_format, e.kv_cache_format, e.conv_state_format, e.ssm_state_format};
  const char* fields[] = {"model_format", "kv_cache_format", "conv_state_format", "ssm_state_format"};
  for (size_t k = 0; k < 4; ++k) {
    require(named[k] == ElementFormat::Unknown || format_info(named[k]) != nullptr, Status::InvalidArgument,
            std::string("engine config: ") + fields[k] + " = " +
                std::to_string(static_cast<unsigned>(named[k])) + " is not an element format");
    require(k == 1 || !is_per_token_head_format(named[k]), Status::InvalidArgument,
            std::string("engine config: ") + fields[k] + " = " + element_format_name(named[k]) +
                " is a KV cache format (per-token-head scales); name a plain dtype");
  }
  const auto disagree = [](const char* field, ElementFormat f, const std::string& what, const std::string& fix) {
    fail(Status::InvalidArgument, std::string("engine config: ") + field + " = " + element_format_name(f) +
                                      " (" + std::to_string(kv_cache_format_of(f).element_bits) +
                                      " bits) disagrees with " + what + "; " + fix);
  };
  if (e.model_format != ElementFormat::Unknown && kv_cache_format_of(e.model_format).element_bits != 8 * m.dtype_bytes) {
    disagree("model_format", e.model_format, "the model's dtype_bytes = " + std::to_string(m.dtype_bytes),
             "name the model's dtype");
  }
  if (e.kv_cache_format != ElementFormat::Unknown) {
    const KvCacheFormat f = kv_cache_format_of(e.kv_cache_format);
    const uint32_t bits = resolved_kv_element_bits(m, e);
    if (f.element_bits != bits) {
      disagree("kv_cache_format", e.kv_cache_format,
               "the KV element size " + std::to_string(bits) + " bits (kv_cache_element_bits = " +
                   std::to_string(e.kv_cache_element_bits) + ", kv_cache_dtype_bytes = " +
                   std::to_string(e.kv_cache_dtype_bytes) + ", 0 meaning the model dtype of " +
                   std::to_string(m.dtype_bytes) + " bytes)",
               "set kv_cache_element_bits = " + std::to_string(f.element_bits) + " as well");
    }
    if (f.head_extra_bytes != e.kv_cache_head_extra_bytes) {
      disagree("kv_cache_format", e.kv_cache_format,
               "kv_cache_head_extra_bytes = " + std::to_string(e.kv_cache_head_extra_bytes),
               "set kv_cache_head_extra_bytes = " + std::to_string(f.head_extra_bytes) + " as well");
    }
  }
  struct State {
    const char* field;
    const char* size_field;
    ElementFormat format;
    uint32_t bytes;
  };
  const State states[] = {
      {"conv_state_format", "conv_state_dtype_bytes", e.conv_state_format, resolved_conv_dtype_bytes(m, e)},
      {"ssm_state_format", "ssm_state_dtype_bytes", e.ssm_state_format, resolved_ssm_dtype_bytes(m, e)}};
  for (const State& st : states) {
    const uint32_t bits = kv_cache_format_of(st.format).element_bits;
    if (st.format != ElementFormat::Unknown && bits != 8 * st.bytes) {
      disagree(st.field, st.format, "the resolved state dtype of " + std::to_string(st.bytes) + " bytes",
               std::string("set ") + st.size_field + " = " + std::to_string(bits / 8) + " as well");
    }
  }
}

ResolvedFormats resolved_formats(const ModelDesc& m, const EngineConfig& e) {
  ResolvedFormats r;
  r.model_format = e.model_format;
  const bool kv_auto = e.kv_cache_dtype_bytes == 0 && e.kv_cache_element_bits == 0 && e.kv_cache_head_extra_bytes == 0;
  r.kv_cache_format = e.kv_cache_format != ElementFormat::Unknown ? e.kv_cache_format
                     : kv_auto                                  ? e.model_format
                                                                : ElementFormat::Unknown;
  if (m.is_hybrid()) {
    r.conv_state_format = e.conv_state_format != ElementFormat::Unknown ? e.conv_state_format
                         : e.conv_state_dtype_bytes == 0                ? e.model_format
                                                                        : ElementFormat::Unknown;
    r.ssm_state_format = e.ssm_state_format != ElementFormat::Unknown                          ? e.ssm_state_format
                        : e.ssm_state_dtype_bytes == 0 && m.default_ssm_dtype_bytes == 0 ? r.conv_state_format
                                                                                            : ElementFormat::Unknown;
  }
  return r;
}

}  // namespace pdkv::core
