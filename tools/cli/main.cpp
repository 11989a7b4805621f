// pdkv: command-line front end. `pdkv plan` explains a P/D deployment of a model: the geometry
// of each side and, for each decode rank, what it reads from which prefill rank.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
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
exit status: 0 ok, 1 usage error, 2 the deployment has configuration errors
)";

ModelDesc load_model(const std::string& spec) {
  const bool looks_like_path = spec.find('/') != std::string::npos && spec.size() > 5 &&
                               spec.compare(spec.size() - 5, 5, ".json") == 0;
  if (!looks_like_path) return preset_model(spec);
  std::ifstream in(spec, std::ios::binary);
  if (!in) fail(Status::Io, "cannot open config.json '" + spec + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return model_from_hf_config(text.str(), spec);
}

MambaCacheMode cache_mode_from_name(const std::string& s) {
  if (s == "none") return MambaCacheMode::None;
  if (s == "align") return MambaCacheMode::Align;
  if (s == "all") return MambaCacheMode::All;
  fail(Status::InvalidArgument, "--mamba-cache-mode '" + s + "' is not one of none, align, all");
}

std::vector<uint32_t> parse_sizes(const std::string& s) {
  std::vector<uint32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      unsigned long v = std::stoul(item, &used);
      if (used != item.size() || v == 0 || v > 1u << 20) throw std::invalid_argument(item);
      out.push_back(static_cast<uint32_t>(v));
    } catch (const std::exception&) {
      fail(Status::InvalidArgument, "--kernel-block-sizes entry '" + item + "' is not a positive integer");
    }
  }
  return out;
}

EngineConfig engine_config(const Args& a, uint32_t tp, const char* side_backend_flag) {
  EngineConfig e;
  e.tp_size = tp;
  std::string backend = a.get(side_backend_flag).value_or(a.get("--attention-backend").value_or("flash_attn"));
  apply_backend(e, backend_from_name(backend));
  if (auto v = a.get("--kv-cache-dtype")) e.kv_cache_dtype_bytes = dtype_bytes_from_name(*v);
  if (auto v = a.get("--mamba-cache-dtype")) e.conv_state_dtype_bytes = dtype_bytes_from_name(*v);
  if (auto v = a.get("--mamba-ssm-cache-dtype")) e.ssm_state_dtype_bytes = dtype_bytes_from_name(*v);
  if (auto v = a.get_u32("--num-speculative-tokens")) e.num_speculative_tokens = *v;
  if (auto v = a.get_u32("--block-size")) e.user_block_size = *v;
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
  d.model = load_model(*a.get("--model"));
  d.prefill = engine_config(a, *a.get_u32("--prefill-tp"), "--prefill-backend");
  d.decode = engine_config(a, *a.get_u32("--decode-tp"), "--decode-backend");
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
  } catch (const Error& e) {
    std::fprintf(stderr, "pdkv: %s: %s\n", status_name(e.status()), e.what());
    return e.status() == Status::NotFound || e.status() == Status::Io || e.status() == Status::Parse ? 1 : 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "pdkv: %s\n", e.what());
    return 1;
  }
}
