#include "help_text.hpp"

namespace pdkv::cli {

namespace {

// The exit statuses, shared by every help text so they cannot disagree.
#define PDKV_CLI_EXIT_STATUS                                                                      \
  "exit status:\n"                                                                                \
  "  0  ok\n"                                                                                     \
  "  1  usage error: unknown command or flag (with a \"did you mean\"), an unexpected argument,\n" \
  "     a flag given twice, a missing flag or value, a value that does not parse, or a --model\n"  \
  "     that is neither a preset nor a readable file\n"                                           \
  "  2  configuration error: the command line is valid but the config.json is invalid or\n"     \
  "     unsupported, or the deployment has configuration errors (TP sizes, heads, an MLA\n"       \
  "     backend on a non-MLA model or the reverse, engine settings out of range, ...)\n"          \
  "  3  internal error: a bug in pdkv (please report it with the command line)\n"

#define PDKV_CLI_JSON_NOTE                                                                         \
  "--json prints one JSON document on stdout instead of text, errors included (nothing on\n"     \
  "stderr); its fields and types are versioned by \"schema_version\" (docs/cli-json.md).\n"

constexpr const char* kGeneral =
    "usage: pdkv COMMAND [options]\n"
    "       pdkv --version | --help\n"
    "\n"
    "pdkv explains how prefill (P) and decode (D) engines exchange KV-cache and Mamba state.\n"
    "\n"
    "commands:\n"
    "  plan      explain a P/D deployment: geometry of both sides, and for each decode rank what\n"
    "            it reads from which prefill rank\n"
    "  presets   list the model presets that --model accepts\n"
    "  version   print the pdkv version (also: pdkv --version)\n"
    "  help      print this help, or a command's: pdkv help COMMAND (also: pdkv COMMAND --help)\n"
    "\n" PDKV_CLI_JSON_NOTE "\n" PDKV_CLI_EXIT_STATUS;

constexpr const char* kPlan =
    "usage: pdkv plan --model NAME|config.json --prefill-tp N --decode-tp N [options]\n"
    "\n"
    "Explains a P/D deployment of one model: the geometry of each side and, for each decode\n"
    "rank, the prefill ranks it handshakes with, reads from and notifies.\n"
    "\n"
    "required:\n"
    "  --model NAME|PATH              a preset (pdkv presets) or a Hugging Face config.json: a\n"
    "                                 path when it names an existing file or ends in .json\n"
    "  --prefill-tp N                 tensor parallel size of the prefill engine (N >= 1)\n"
    "  --decode-tp N                  tensor parallel size of the decode engine (N >= 1)\n"
    "\n"
    "options (each applies to both engines unless it names one):\n"
    "  --kv-cache-dtype DT            auto | bfloat16 | float16 | fp8 | float32 |\n"
    "                                 int8_per_token_head | fp8_per_token_head |\n"
    "                                 int4_per_token_head (scales packed beside each head)\n"
    "  --mamba-cache-dtype DT         conv state dtype (auto = model dtype)\n"
    "  --mamba-ssm-cache-dtype DT     SSM temporal state dtype (auto = model default)\n"
    "  --num-speculative-tokens N     speculative tokens (adds conv rows for NemotronH/GDN)\n"
    "  --block-size N                 user --block-size (raised if below the hybrid minimum)\n"
    "  --attention-backend NAME       flash_attn | triton | flashinfer | flashmla | cutlass_mla |\n"
    "                                 flashinfer_mla\n"
    "  --prefill-backend NAME         the prefill engine's backend (overrides --attention-backend)\n"
    "  --decode-backend NAME          the decode engine's backend (overrides --attention-backend)\n"
    "  --kernel-block-sizes A,B,...   supported kernel block sizes (overrides the backend's list)\n"
    "  --mamba-cache-mode MODE        none | align | all\n"
    "  --enable-prefix-caching        note where vLLM would refuse the pair with prefix caching on\n"
    "  --mla-layers I,J,...           mark attention layers I, J (0-based) as MLA-typed: one latent\n"
    "                                 replicated on every rank, read whole from one prefill rank\n"
    "                                 (e.g. an indexer key cache vLLM registers as an MLA spec)\n"
    "  --mla-head-size N              the latent width of those layers in elements (with\n"
    "                                 --mla-layers)\n"
    "  --prefill-pp N                 pipeline parallel size of the prefill engine (default 1)\n"
    "  --decode-pp N                  pipeline parallel size of the decode engine (default 1):\n"
    "                                 each side's stages hold vLLM's default split of the layers;\n"
    "                                 the report pairs every decode stage with the prefill stages\n"
    "                                 holding its layers (each a separate peer)\n"
    "  --prefill-kv-layout L          HND (default) | NHD: the prefill engine's KV cache layout\n"
    "  --decode-kv-layout L           HND (default) | NHD: the decode engine's KV cache layout\n"
    "  --permute-on-receive           when the layouts differ, decode reads prefill's blocks as\n"
    "                                 they lie and permutes each into its own layout (vLLM:\n"
    "                                 enable_permute_local_kv)\n"
    "  --json                         print the report as JSON (see below)\n"
    "  --help, -h                     print this help\n"
    "\n" PDKV_CLI_JSON_NOTE "\n" PDKV_CLI_EXIT_STATUS;

constexpr const char* kPresets =
    "usage: pdkv presets [--json]\n"
    "\n"
    "Lists the model presets that `pdkv plan --model` accepts, with the Hugging Face model each\n"
    "one describes.\n"
    "\n"
    "options:\n"
    "  --json                         print the list as JSON\n"
    "  --help, -h                     print this help\n"
    "\n" PDKV_CLI_JSON_NOTE "\n" PDKV_CLI_EXIT_STATUS;

constexpr const char* kVersion =
    "usage: pdkv version [--json]\n"
    "       pdkv --version\n"
    "\n"
    "Prints the pdkv version (MAJOR.MINOR.PATCH; MAJOR changes break the C ABI).\n"
    "\n"
    "options:\n"
    "  --json                         print {\"pdkv_version\": ...} in the JSON envelope\n"
    "  --help, -h                     print this help\n"
    "\n" PDKV_CLI_JSON_NOTE "\n" PDKV_CLI_EXIT_STATUS;

constexpr const char* kHelp =
    "usage: pdkv help [COMMAND]\n"
    "\n"
    "Prints the general help, or the help of COMMAND (plan, presets, version, help).\n"
    "\n" PDKV_CLI_EXIT_STATUS;

}  // namespace

const std::vector<std::string>& command_names() {
  static const std::vector<std::string> names{"plan", "presets", "version", "help"};
  return names;
}

const char* general_help() { return kGeneral; }

std::optional<const char*> command_help(const std::string& command) {
  if (command == "plan") return kPlan;
  if (command == "presets") return kPresets;
  if (command == "version") return kVersion;
  if (command == "help") return kHelp;
  return std::nullopt;
}

}  // namespace pdkv::cli
