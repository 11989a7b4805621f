#include "plan_command.hpp"

#include <charconv>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "cli_error.hpp"
#include "deployment_report.hpp"
#include "model_arg.hpp"
#include "pdkv/core/backends.hpp"
#include "pdkv/core/error.hpp"
#include "suggest.hpp"

namespace pdkv::cli {

namespace {

using namespace pdkv::core;

// Runs a parse step of the value of `flag`; a library error it raises is a usage error naming the
// flag, with a "did you mean" among `valid` when the value is a near miss.
template <typename F>
auto as_usage(const std::string& flag, const std::string& value, const std::vector<std::string>& valid, F&& f)
    -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw CliError(ErrorKind::Usage, flag, e.what(), status_name(e.status()), did_you_mean(value, valid));
  }
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const auto& b : backends()) out.push_back(b.name);
  return out;
}

MambaCacheMode cache_mode_from_name(const std::string& s) {
  if (s == "none") return MambaCacheMode::None;
  if (s == "align") return MambaCacheMode::Align;
  if (s == "all") return MambaCacheMode::All;
  throw usage_error("--mamba-cache-mode", "--mamba-cache-mode '" + s + "' is not one of none, align, all",
                    did_you_mean(s, {"none", "align", "all"}));
}

// --kernel-block-sizes A,B,...: each entry a positive integer <= 2^20, no empty entries.
std::vector<uint32_t> parse_sizes(const std::string& s) {
  const std::string flag = "--kernel-block-sizes";
  if (s.empty()) throw usage_error(flag, flag + " is empty (expected A,B,... positive integers)");
  std::vector<uint32_t> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = s.find(',', begin);
    const std::string item = s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    uint32_t v = 0;
    const auto [ptr, err] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || err != std::errc() || ptr != item.data() + item.size() || v == 0 || v > (1u << 20)) {
      throw usage_error(flag, flag + " entry '" + item + "' in '" + s + "' is not a positive integer <= 1048576");
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

// One side's engine settings from the command line. Every value is parsed here, so a value that
// does not parse is a usage error; whether the settings make sense is the report's business.
// The element format a dtype name also names (vLLM's flag values), for the handshake's format
// check; Unknown for auto and for dtypes that name only a size (int8, float64 as a Mamba dtype).
ElementFormat format_named(const std::string& v) {
  try {
    return element_format_from_name(v);
  } catch (const Error&) {
    return ElementFormat::Unknown;
  }
}

EngineConfig engine_config(const Args& a, uint32_t tp, const std::string& side, Backend& backend) {
  EngineConfig e;
  e.tp_size = tp;
  const std::string side_backend_flag = "--" + side + "-backend";
  const std::string flag = a.has(side_backend_flag) ? side_backend_flag : "--attention-backend";
  const std::string name = a.get(flag).value_or("flash_attn");
  backend = as_usage(flag, name, backend_names(), [&] { return backend_from_name(name); });
  apply_backend(e, backend);
  // A dtype flag may name one engine (--prefill-kv-cache-dtype) or both (--kv-cache-dtype): P and
  // D are separate vLLM command lines, and a pair whose formats differ is what the handshake refuses.
  const auto dtype_flag = [&](const std::string& base) -> std::optional<std::string> {
    const std::string one = "--" + side + "-" + base;
    if (a.has(one)) return one;
    if (a.has("--" + base)) return "--" + base;
    return std::nullopt;
  };
  const auto dtype = [&](const std::string& f) {
    const std::string v = *a.get(f);
    return as_usage(f, v, {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "float32"},
                    [&] { return dtype_bytes_from_name(v); });
  };
  if (const auto f = dtype_flag("kv-cache-dtype")) {
    // A described layout: bits per element and bytes packed per token per head (scales).
    const std::string v = *a.get(*f);
    const KvCacheFormat k = as_usage(*f, v,
                                     {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "float32",
                                      "int8_per_token_head", "fp8_per_token_head", "int4_per_token_head"},
                                     [&] { return kv_cache_format_from_name(v); });
    e.kv_cache_element_bits = k.element_bits;
    e.kv_cache_head_extra_bytes = k.head_extra_bytes;
    e.kv_cache_format = format_named(v);
  }
  if (const auto f = dtype_flag("mamba-cache-dtype")) {
    e.conv_state_dtype_bytes = dtype(*f);
    e.conv_state_format = format_named(*a.get(*f));
  }
  if (const auto f = dtype_flag("mamba-ssm-cache-dtype")) {
    e.ssm_state_dtype_bytes = dtype(*f);
    e.ssm_state_format = format_named(*a.get(*f));
  }
  if (auto v = a.get_u32("--num-speculative-tokens")) e.num_speculative_tokens = *v;
  // The core reads user_block_size 0 as "unset", so an explicit 0 would be silently ignored.
  if (auto v = a.get_positive_u32("--block-size")) e.user_block_size = *v;
  if (auto v = a.get("--kernel-block-sizes")) e.kernel_block_sizes = parse_sizes(*v);
  if (auto v = a.get("--mamba-cache-mode")) e.cache_mode = cache_mode_from_name(*v);
  return e;
}

// --mla-layers I,J,...: 0-based layer indices, each a non-negative integer, no empty entries.
std::vector<uint32_t> parse_layers(const std::string& s) {
  const std::string flag = "--mla-layers";
  if (s.empty()) throw usage_error(flag, flag + " is empty (expected I,J,... layer indices)");
  std::vector<uint32_t> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = s.find(',', begin);
    const std::string item = s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    uint32_t v = 0;
    const auto [ptr, err] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || err != std::errc() || ptr != item.data() + item.size()) {
      throw usage_error(flag, flag + " entry '" + item + "' in '" + s + "' is not a layer index");
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

// Turns the listed attention layers of `m` into MLA-typed layers ('L') with a latent of
// `head_size` elements. A layer that is not an attention layer of the model is a configuration
// error naming it (the model decides, not the command line's syntax).
void mark_mla_layers(ModelDesc& m, const std::vector<uint32_t>& layers, uint32_t head_size) {
  const std::string status = status_name(Status::InvalidArgument);
  for (uint32_t l : layers) {
    if (l >= m.layer_pattern.size()) {
      throw CliError(ErrorKind::Configuration, "--mla-layers",
                     "layer " + std::to_string(l) + " is past the model's " +
                         std::to_string(m.layer_pattern.size()) + " layers (layer pattern '" + m.layer_pattern + "')",
                     status);
    }
    if (m.layer_pattern[l] != kLayerAttention) {
      throw CliError(ErrorKind::Configuration, "--mla-layers",
                     "layer " + std::to_string(l) + " is not a GQA attention layer of the model (kind '" +
                         std::string(1, m.layer_pattern[l]) + "' in layer pattern '" + m.layer_pattern + "')",
                     status);
    }
    m.layer_pattern[l] = kLayerMla;
  }
  m.mla_head_size = head_size;
}

}  // namespace

nlohmann::json run_plan(const std::vector<std::string>& argv, bool& json_output) {
  const Args a("plan", argv,
               {{"--model", true},
                {"--prefill-tp", true},
                {"--decode-tp", true},
                {"--prefill-pp", true},
                {"--decode-pp", true},
                {"--prefill-kv-layout", true},
                {"--decode-kv-layout", true},
                {"--permute-on-receive", false},
                {"--kv-cache-dtype", true},
                {"--mamba-cache-dtype", true},
                {"--mamba-ssm-cache-dtype", true},
                {"--prefill-kv-cache-dtype", true},
                {"--decode-kv-cache-dtype", true},
                {"--prefill-mamba-cache-dtype", true},
                {"--decode-mamba-cache-dtype", true},
                {"--prefill-mamba-ssm-cache-dtype", true},
                {"--decode-mamba-ssm-cache-dtype", true},
                {"--num-speculative-tokens", true},
                {"--block-size", true},
                {"--attention-backend", true},
                {"--prefill-backend", true},
                {"--decode-backend", true},
                {"--kernel-block-sizes", true},
                {"--mamba-cache-mode", true},
                {"--enable-prefix-caching", false},
                {"--mla-layers", true},
                {"--mla-head-size", true},
                {"--json", false}});
  json_output = a.has("--json");
  a.require({{"--model", "(a preset or a config.json)"},
             {"--prefill-tp", "(the prefill engine's tensor parallel size)"},
             {"--decode-tp", "(the decode engine's tensor parallel size)"}});
  Deployment d;
  d.prefill = engine_config(a, *a.get_positive_u32("--prefill-tp"), "prefill", d.prefill_backend);
  d.decode = engine_config(a, *a.get_positive_u32("--decode-tp"), "decode", d.decode_backend);
  d.prefix_caching = a.has("--enable-prefix-caching");
  if (auto v = a.get_positive_u32("--prefill-pp")) d.prefill_pp = *v;
  if (auto v = a.get_positive_u32("--decode-pp")) d.decode_pp = *v;
  for (const auto& [flag, out] : {std::pair{"--prefill-kv-layout", &d.prefill_kv_layout},
                                  std::pair{"--decode-kv-layout", &d.decode_kv_layout}}) {
    if (auto v = a.get(flag)) {
      if (*v == "HND") *out = KvLayout::HND;
      else if (*v == "NHD") *out = KvLayout::NHD;
      else throw usage_error(flag, std::string(flag) + " '" + *v + "' is not one of HND, NHD", did_you_mean(*v, {"HND", "NHD"}));
    }
  }
  d.permute_on_receive = a.has("--permute-on-receive");
  std::vector<uint32_t> mla_layers;
  std::optional<uint32_t> mla_head_size;
  if (auto v = a.get("--mla-layers")) mla_layers = parse_layers(*v);
  if (a.has("--mla-head-size")) mla_head_size = a.get_positive_u32("--mla-head-size");
  if (mla_layers.empty() != !mla_head_size) {
    throw usage_error(mla_head_size ? "--mla-head-size" : "--mla-layers",
                      "--mla-layers and --mla-head-size go together: the MLA-typed layers and their latent width");
  }
  d.model = load_model(*a.get("--model"));
  if (mla_head_size) mark_mla_layers(d.model, mla_layers, *mla_head_size);
  return build_deployment_report(d);
}

}  // namespace pdkv::cli
