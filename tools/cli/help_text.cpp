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
  "  3  internal error: a bug in pdkv (please report it with the command line)\n"             \
  "  4  (pdkv demo) the demo failed: a byte arrived wrong or something changed that no read\n"  \
  "     writes, a transfer failed that no killed rank explains, or a rank died on its own\n"     \
  "  5  (pdkv demo --kill-prefill-after) requests failed because the prefill rank was killed,\n" \
  "     each within its deadline, and every other transfer completed and was verified\n"

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
    "  demo      run a P/D deployment on this machine: P and D ranks as processes move a stream\n"
    "            of requests with the transfer executor, every byte verified\n"
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
    "  --kv-cache-dtype DT            auto | bfloat16 | float16 | fp8 (= fp8_e4m3) | fp8_e4m3 |\n"
    "                                 fp8_e5m2 | float32 | int8_per_token_head |\n"
    "                                 fp8_per_token_head | int4_per_token_head (scales packed\n"
    "                                 beside each head)\n"
    "  --mamba-cache-dtype DT         conv state dtype (auto = model dtype)\n"
    "  --mamba-ssm-cache-dtype DT     SSM temporal state dtype (auto = model default)\n"
    "  --prefill-kv-cache-dtype DT, --decode-kv-cache-dtype DT, --prefill-mamba-cache-dtype DT,\n"
    "  --decode-mamba-cache-dtype DT, --prefill-mamba-ssm-cache-dtype DT,\n"
    "  --decode-mamba-ssm-cache-dtype DT\n"
    "                                 the same for one engine (overrides the flag above). A named\n"
    "                                 format travels in the metadata: formats of equal size that\n"
    "                                 differ (fp8_e4m3 vs fp8_e5m2, bfloat16 vs float16) are an\n"
    "                                 'element formats' error, as the handshake refuses them\n"
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

constexpr const char* kDemo =
    "usage: pdkv demo [options]\n"
    "\n"
    "Runs a P/D deployment of a model on this machine: each prefill (P) and decode (D) rank is its\n"
    "own process with a transfer agent and real memory laid out as the engine's KV cache (the\n"
    "model's layers in its KV-cache groups, the attention and Mamba blocks of the real sizes).\n"
    "P fills its memory with a pattern of (engine, rank, region, offset); a stream of requests\n"
    "of varied lengths arrives, some with prefix-cache hits on D (partial or full) and, in align\n"
    "mode, Mamba block lists with their null placeholders. For each request D compiles its plan,\n"
    "moves it (READ: D pulls; WRITE: P pushes), checks every byte of the request's blocks (what\n"
    "arrived is P's, the rest unchanged) and P frees its blocks when told. The number of blocks\n"
    "each rank registers is sized for --concurrency requests of the longest prompt, and printed.\n"
    "\n"
    "options:\n"
    "  --model NAME|PATH              a preset (pdkv presets) or a config.json\n"
    "                                 (default nemotron-3-nano-30b)\n"
    "  --prefill-tp N                 prefill ranks (default 4)\n"
    "  --decode-tp N                  decode ranks (default 2)\n"
    "  --transport auto|shm|tcp       how the agents move bytes (default auto: cross-memory attach here)\n"
    "  --requests N                   requests to run (default 32)\n"
    "  --tokens MIN-MAX               prompt lengths, drawn uniformly (default 512-12288; or N)\n"
    "  --partial-hit-rate PCT         percent of requests D already holds a prefix of, in whole\n"
    "                                 blocks (default 30; 0 with --mamba-cache-mode none)\n"
    "  --full-hit-rate PCT            percent D holds entirely: nothing moves, P is notified\n"
    "                                 (default 10; 0 with --mamba-cache-mode none)\n"
    "  --mamba-cache-mode none|align  the engines' Mamba prefix caching (default align)\n"
    "  --op read|write                READ (D pulls) or WRITE (P pushes) (default read)\n"
    "  --kill-prefill-after N         SIGKILL the last prefill rank once N requests are over:\n"
    "                                 the requests of the D ranks that read from it fail within\n"
    "                                 the deadline, the others go on (exit status 5)\n"
    "  --concurrency N                requests in flight at once (default 4)\n"
    "  --deadline-ms N                deadline of each transfer (default 5000)\n"
    "  --seed N                       seed of the request stream (default 1)\n"
    "  --json                         print the summary as JSON (see below), no log\n"
    "  --help, -h                     print this help\n"
    "\n"
    "On a terminal the run shows a live line (requests, bytes, GB/s), otherwise one log line per\n"
    "request; then a summary: requests, bytes, descriptors before and after coalescing, GB/s,\n"
    "p50/p99 time per request and the verification result.\n"
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
    "Prints the general help, or the help of COMMAND (plan, demo, presets, version, help).\n"
    "\n" PDKV_CLI_EXIT_STATUS;

}  // namespace

const std::vector<std::string>& command_names() {
  static const std::vector<std::string> names{"plan", "demo", "presets", "version", "help"};
  return names;
}

const char* general_help() { return kGeneral; }

std::optional<const char*> command_help(const std::string& command) {
  if (command == "plan") return kPlan;
  if (command == "demo") return kDemo;
  if (command == "presets") return kPresets;
  if (command == "version") return kVersion;
  if (command == "help") return kHelp;
  return std::nullopt;
}

}  // namespace pdkv::cli
