#include "demo_command.hpp"

#include <cstdio>
#include <iostream>

#include "cli_error.hpp"
#include "demo_coordinator.hpp"
#include "demo_layout.hpp"
#include "demo_options.hpp"
#include "demo_result.hpp"
#include "json_document.hpp"
#include "model_arg.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::cli {

using namespace pdkv::cli::demo;
using nlohmann::json;

namespace {

CliError configuration(const std::string& where, const core::Error& e) {
  return CliError(ErrorKind::Configuration, where, e.what(), core::status_name(e.status()));
}

// Everything the ranks would find wrong with the deployment, found before any process starts:
// the KV-cache groups, each side's geometry and every (D rank, P engine) pair's handshake.
Layout checked_layout(const Options& o, const core::ModelDesc& model) {
  LayoutInputs in;
  in.model = model;
  in.prefill_tp = o.prefill_tp;
  in.decode_tp = o.decode_tp;
  in.cache_mode = o.cache_mode;
  in.max_tokens = o.max_tokens;
  in.concurrency = o.concurrency;
  Layout l;
  try {
    l = make_layout(in);
  } catch (const core::Error& e) {
    throw configuration("deployment", e);
  }
  try {
    std::vector<core::EngineMetadata> ps;
    for (uint32_t r = 0; r < o.prefill_tp; ++r) ps.push_back(rank_metadata(l, true, "prefill", r, uint64_t{1} << 40));
    const auto mamba = [&](const Side& s) {
      return model.is_hybrid() ? std::optional<core::MambaState>(s.geo.mamba) : std::nullopt;
    };
    for (uint32_t d = 0; d < o.decode_tp; ++d) {
      const auto ctx = core::make_plan_context(rank_metadata(l, false, "decode", d, uint64_t{1} << 40), ps,
                                               mamba(l.decode), mamba(l.prefill));
      core::validate_plan_context(ctx);
    }
  } catch (const core::Error& e) {
    throw configuration("tensor parallel sizes", e);
  }
  return l;
}

}  // namespace

int run_demo(const std::vector<std::string>& argv) {
  bool as_json = false;
  const Options o = parse_options(argv, as_json);
  const core::ModelDesc model = load_model(o.model);
  const Layout l = checked_layout(o, model);
  const uint64_t need = demo_memory_bytes(o, l), have = available_memory_bytes();
  // Leave a quarter of what is free to everything else on the machine.
  if (have != 0 && need > have / 4 * 3) {
    throw CliError(ErrorKind::Configuration, "--tokens",
                   "the run would register " + gib(need) + " (P " + std::to_string(o.prefill_tp) + " x " +
                       gib(l.prefill.bytes_per_rank) + ", D " + std::to_string(o.decode_tp) + " x " +
                       gib(l.decode.bytes_per_rank) + ") but the machine has " + gib(have) + " available",
                   std::nullopt, "lower the largest prompt of --tokens or --concurrency");
  }
  if (!o.json) {
    std::printf("pdkv demo: %s, P TP%u -> D TP%u, %s over %s, %u requests of %llu-%llu tokens\n", model.name.c_str(),
                o.prefill_tp, o.decode_tp, o.write ? "WRITE" : "READ", transport_name(o.transport), o.requests,
                static_cast<unsigned long long>(o.min_tokens), static_cast<unsigned long long>(o.max_tokens));
    std::printf("memory: %s registered by %u processes (P %u x %s, D %u x %s): blocks for %u requests in flight of "
                "up to %llu tokens; %s available\n",
                gib(need).c_str(), o.prefill_tp + o.decode_tp, o.prefill_tp, gib(l.prefill.bytes_per_rank).c_str(),
                o.decode_tp, gib(l.decode.bytes_per_rank).c_str(), o.concurrency,
                static_cast<unsigned long long>(o.max_tokens), have == 0 ? "unknown" : gib(have).c_str());
    std::fflush(stdout);
  }
  const Result r = run_coordinator(o, l);
  const int status = r.exit_status();
  json errors = json::array();
  for (const auto& e : r.errors()) errors.push_back(e.to_json());
  if (o.json) {
    json doc = envelope("demo", status, errors);
    doc.update(render_json(o, l, r));
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << render_text(o, l, r) << std::flush;
    for (const auto& e : r.errors()) std::fprintf(stderr, "pdkv: %s\n", e.to_text().c_str());
  }
  return status;
}

}  // namespace pdkv::cli
