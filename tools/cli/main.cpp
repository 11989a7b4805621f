// pdkv: command-line front end. `pdkv plan` explains a P/D deployment of a model: the geometry
// of each side and, for each decode rank, what it reads from which prefill rank.
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.hpp"
#include "deployment_report.hpp"
#include "pdkv/core/backends.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/hf_config.hpp"
#include "pdkv/core/presets.hpp"
#include "report_text.hpp"

namespace {

using namespace pdkv::core;
using pdkv::cli::Args;

constexpr const char* kUsage = R"(usage:
  pdkv plan --model NAME|config.json --prefill-tp N --decode-tp N [options]
  pdkv presets
  pdkv version

plan options (each changes the geometry of both engines unless prefixed):
  --kv-cache-dtype DT            auto | bfloat16 | float16 | fp8 | float32
  --mamba-cache-dtype DT         conv state dtype (auto = model dtype)
  --mamba-ssm-cache-dtype DT     SSM temporal state dtype (auto = model default)
  --num-speculative-tokens N     speculative tokens (adds conv rows for NemotronH/GDN)
  --block-size N                 user --block-size (raised if below the hybrid minimum)
  --attention-backend NAME       flash_attn | triton | flashinfer | flashmla | cutlass_mla | flashinfer_mla
  --prefill-backend NAME, --decode-backend NAME   per side
  --kernel-block-sizes A,B,...   supported kernel block sizes (overrides the backend's list)
  --mamba-cache-mode MODE        none | align | all
  --enable-prefix-caching        note where vLLM would refuse the pair with prefix caching on
  --json                         print the report as JSON

--model: a path when it names an existing file or ends in .json (read as a Hugging Face
config.json), otherwise a preset name (see `pdkv presets`).

exit status:
  0  ok: the report has no configuration errors
  1  usage error: unknown command or flag, a flag given twice, missing flag or value, a value
     that does not parse (integer, --block-size 0, dtype name, backend name,
     --mamba-cache-mode, an empty or malformed --kernel-block-sizes list), or a --model that
     is neither a preset nor a readable file
  2  configuration error: the config.json is invalid or describes an unsupported model, or the
     deployment has configuration errors (listed in the report: TP sizes, heads, an MLA
     backend on a non-MLA model or the reverse, engine settings out of range, ...)
)";

// A mistake on the command line (exit status 1), as opposed to a configuration error (2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs a parse step of a command-line value; a core error it raises is a usage error.
template <typename F>
auto as_usage(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw UsageError(what + ": " + status_name(e.status()) + ": " + e.what());
  }
}

// --model: a config.json path when `spec` names an existing file or ends in ".json", else a
// preset. A spec that names nothing loadable (unknown preset, missing file, a directory) is a
// usage error; a config.json that is read but invalid or unsupported is a configuration error.
ModelDesc load_model(const std::string& spec) {
  namespace fs = std::filesystem;
  const std::string kModelIo = std::string("--model: ") + status_name(Status::Io) + ": ";
  std::error_code ec;
  const bool exists = fs::exists(spec, ec);
  const bool ends_json = spec.size() >= 5 && spec.compare(spec.size() - 5, 5, ".json") == 0;
  if (!exists && !ends_json) return as_usage("--model", [&] { return preset_model(spec); });
  if (!exists) throw UsageError(kModelIo + "config.json '" + spec + "' does not exist");
  if (fs::is_directory(spec, ec)) {
    throw UsageError(kModelIo + "'" + spec + "' is a directory; pass the path of its config.json file");
  }
  std::ifstream in(spec, std::ios::binary);
  if (!in) throw UsageError(kModelIo + "cannot open config.json '" + spec + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError(kModelIo + "error while reading '" + spec + "'");
  return model_from_hf_config(text.str(), spec);
}

MambaCacheMode cache_mode_from_name(const std::string& s) {
  if (s == "none") return MambaCacheMode::None;
  if (s == "align") return MambaCacheMode::Align;
  if (s == "all") return MambaCacheMode::All;
  throw UsageError("--mamba-cache-mode '" + s + "' is not one of none, align, all");
}

// --kernel-block-sizes A,B,...: each entry a positive integer <= 2^20, no empty entries.
std::vector<uint32_t> parse_sizes(const std::string& s) {
  if (s.empty()) throw UsageError("--kernel-block-sizes is empty (expected A,B,... positive integers)");
  std::vector<uint32_t> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = s.find(',', begin);
    const std::string item = s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    uint32_t v = 0;
    const auto [ptr, err] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || err != std::errc() || ptr != item.data() + item.size() || v == 0 || v > (1u << 20)) {
      throw UsageError("--kernel-block-sizes entry '" + item + "' in '" + s +
                       "' is not a positive integer <= 1048576");
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

// One side's engine settings from the command line. Every value is parsed here, so a value that
// does not parse is a usage error; whether the settings make sense is the report's business.
EngineConfig engine_config(const Args& a, uint32_t tp, const char* side_backend_flag, Backend& backend) {
  EngineConfig e;
  e.tp_size = tp;
  const std::string name = a.get(side_backend_flag).value_or(a.get("--attention-backend").value_or("flash_attn"));
  backend = as_usage(a.has(side_backend_flag) ? side_backend_flag : "--attention-backend",
                     [&] { return backend_from_name(name); });
  apply_backend(e, backend);
  const auto dtype = [&](const char* flag) {
    return as_usage(flag, [&] { return dtype_bytes_from_name(*a.get(flag)); });
  };
  if (a.has("--kv-cache-dtype")) e.kv_cache_dtype_bytes = dtype("--kv-cache-dtype");
  if (a.has("--mamba-cache-dtype")) e.conv_state_dtype_bytes = dtype("--mamba-cache-dtype");
  if (a.has("--mamba-ssm-cache-dtype")) e.ssm_state_dtype_bytes = dtype("--mamba-ssm-cache-dtype");
  if (auto v = a.get_u32("--num-speculative-tokens")) e.num_speculative_tokens = *v;
  // The core reads user_block_size 0 as "unset", so an explicit 0 would be silently ignored.
  if (auto v = a.get_positive_u32("--block-size")) e.user_block_size = *v;
  if (auto v = a.get("--kernel-block-sizes")) e.kernel_block_sizes = parse_sizes(*v);
  if (auto v = a.get("--mamba-cache-mode")) e.cache_mode = cache_mode_from_name(*v);
  return e;
}

int cmd_plan(const std::vector<std::string>& argv) {
  Args a(argv,
         {"--model", "--prefill-tp", "--decode-tp", "--kv-cache-dtype", "--mamba-cache-dtype",
          "--mamba-ssm-cache-dtype", "--num-speculative-tokens", "--block-size", "--attention-backend",
          "--prefill-backend", "--decode-backend", "--kernel-block-sizes", "--mamba-cache-mode"},
         {"--json", "--enable-prefix-caching"});
  if (!a.has("--model") || !a.has("--prefill-tp") || !a.has("--decode-tp")) {
    throw std::invalid_argument("plan needs --model, --prefill-tp and --decode-tp");
  }
  pdkv::cli::Deployment d;
  // Parse every flag before reading the model, so usage errors win over configuration errors.
  d.prefill = engine_config(a, *a.get_u32("--prefill-tp"), "--prefill-backend", d.prefill_backend);
  d.decode = engine_config(a, *a.get_u32("--decode-tp"), "--decode-backend", d.decode_backend);
  d.model = load_model(*a.get("--model"));
  d.prefix_caching = a.has("--enable-prefix-caching");
  auto report = pdkv::cli::build_deployment_report(d);
  if (a.has("--json")) {
    std::cout << report.dump(2) << "\n";
  } else {
    std::cout << pdkv::cli::render_report_text(report);
  }
  return report["errors"].empty() ? 0 : 2;
}

int cmd_presets() {
  for (const auto& p : presets()) {
    std::printf("%-24s %s\n", p.name.c_str(), p.hf_name.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 1 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "plan") return cmd_plan(args);
    if (cmd == "presets") return cmd_presets();
    if (cmd == "version") {
      std::printf("pdkv %d.%d.%d\n", PDKV_VERSION_MAJOR_CLI, PDKV_VERSION_MINOR_CLI, PDKV_VERSION_PATCH_CLI);
      return 0;
    }
    std::fprintf(stderr, "pdkv: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 1;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "pdkv: usage error: %s (see pdkv --help)\n", e.what());
    return 1;
  } catch (const std::invalid_argument& e) {  // Args: unknown flag, missing value, bad integer
    std::fprintf(stderr, "pdkv: usage error: %s\n", e.what());
    return 1;
  } catch (const Error& e) {  // the model config cannot be described: a configuration error
    std::fprintf(stderr, "pdkv: configuration error: %s: %s\n", status_name(e.status()), e.what());
    return 2;
  }
}
