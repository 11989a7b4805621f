#include "deployment_report.hpp"

#include <algorithm>
#include <numeric>
#include <regex>
#include <string>
#include <tuple>
#include <utility>

#include "cli_error.hpp"

#include "pdkv/core/attention_descriptors.hpp"
#include "pdkv/core/backends.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/handshake.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/pipeline.hpp"
#include "pdkv/core/tp_topology.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::cli {

using json = nlohmann::json;
using namespace pdkv::core;

namespace {

// The report always pairs local = decode and remote = prefill (it is D's view), so the library's
// words are translated into the flags' own: "local tp_size 2 and remote tp_size 3" becomes
// "--decode-tp 2 and --prefill-tp 3", any other "local"/"remote" becomes "decode"/"prefill".
std::string in_flag_terms(const std::string& message) {
  static const std::regex local_tp("\\blocal tp_size ([0-9]+)");
  static const std::regex remote_tp("\\bremote tp_size ([0-9]+)");
  static const std::regex local_word("\\blocal(\\b|_)");
  static const std::regex remote_word("\\bremote(\\b|_)");
  static const std::regex local_cap("\\bLocal\\b");
  static const std::regex remote_cap("\\bRemote\\b");
  std::string s = std::regex_replace(message, local_tp, "--decode-tp $1");
  s = std::regex_replace(s, remote_tp, "--prefill-tp $1");
  s = std::regex_replace(s, local_word, "decode$1");
  s = std::regex_replace(s, remote_word, "prefill$1");
  s = std::regex_replace(s, local_cap, "Decode");
  return std::regex_replace(s, remote_cap, "Prefill");
}

json error_json(const Error& e, const std::string& where) {
  return CliError(ErrorKind::Configuration, where, in_flag_terms(e.what()), status_name(e.status())).to_json();
}

// The element formats the engine names (resolved through vLLM's "auto" rules, as its metadata
// advertises them): null where only a size is known, so the handshake compares by size alone.
json formats_json(const ModelDesc& m, const EngineConfig& e) {
  const ResolvedFormats f = resolved_formats(m, e);
  auto name = [](ElementFormat x) { return x == ElementFormat::Unknown ? json(nullptr) : json(element_format_name(x)); };
  return json{{"model", name(f.model_format)},
              {"kv_cache", name(f.kv_cache_format)},
              {"conv_state", name(f.conv_state_format)},
              {"ssm_state", name(f.ssm_state_format)}};
}

json geometry_json(const EngineGeometry& g, uint64_t head_extra_bytes, json formats) {
  json j{{"tp_size", g.tp_size},
         {"element_formats", std::move(formats)},
         {"kv_heads_per_rank", g.kv_heads_per_rank},
         {"kv_head_bytes_per_token", g.kv_head_bytes_per_token},
         {"kv_head_extra_bytes", head_extra_bytes},
         {"attention_bytes_per_token", g.attn_bytes_per_token},
         {"block_size", g.block_size},
         {"kernel_block_size", g.kernel_block_size},
         {"physical_blocks_per_logical", g.physical_per_logical},
         {"kernel_page_bytes", g.kernel_page_bytes},
         {"attention_page_bytes", g.attn_page_bytes},
         {"log_lines", g.log_lines},
         {"mla_bytes_per_token", g.mla_bytes_per_token ? json(g.mla_bytes_per_token) : json(nullptr)},
         {"mla_kernel_page_bytes", g.mla_bytes_per_token ? json(g.mla_kernel_page_bytes) : json(nullptr)},
         {"mamba", nullptr}};
  if (g.hybrid) {
    json projections = json::array();
    for (const auto& p : g.mamba.projections) {
      projections.push_back(json{{"name", p.name}, {"dim_local", p.dim_local}, {"bytes", p.bytes},
                                 {"offset", p.offset}, {"replicated", p.replicated}});
    }
    j["mamba"] = json{{"type", mamba_type_name(g.mamba.type)},
                      {"conv_rows", g.mamba.conv_rows},
                      {"conv_bytes", g.mamba.conv_bytes},
                      {"ssm_bytes", g.mamba.ssm_bytes},
                      {"temporal_shape", g.mamba.temporal_shape},
                      {"projections", projections},
                      {"page_bytes", g.mamba_page_bytes},
                      {"padded_page_bytes", g.mamba_page_padded_bytes},
                      {"padding_percent", g.padding_percent},
                      // 0 means one state per request (--mamba-cache-mode none): no block size.
                      {"mamba_block_size", g.mamba_block_size ? json(g.mamba_block_size) : json(nullptr)}};
  }
  return j;
}

// How the kernel block sizes of the two sides relate (decode view: each D block against P's).
enum class BlockRelation { Equal, DecodeMultiple, PrefillMultiple, NotMultiples };

BlockRelation block_relation(uint64_t p_kernel, uint64_t d_kernel) {
  if (p_kernel == d_kernel) return BlockRelation::Equal;
  if (d_kernel % p_kernel == 0) return BlockRelation::DecodeMultiple;
  if (p_kernel % d_kernel == 0) return BlockRelation::PrefillMultiple;
  return BlockRelation::NotMultiples;
}

// How the two kernel block sizes relate, and what vLLM would do with them. vLLM's
// block_size_ratio is decode / prefill kernel block and must be a whole number, so it serves
// only P blocks <= D blocks with P dividing D ("Only nP < nD supported").
json block_relation_json(const EngineGeometry& p, const EngineGeometry& d, const TpMappingInput& tp,
                         bool prefix_caching) {
  const uint64_t pk = p.kernel_block_size, dk = d.kernel_block_size;
  json j{{"prefill_kernel_block_size", pk}, {"decode_kernel_block_size", dk}};
  json notes = json::array();
  const std::string ratio = "block_size_ratio = decode/prefill kernel block = " + std::to_string(dk) + "/" +
                            std::to_string(pk);
  const std::string pdkv_maps =
      "; pdkv maps token ranges between the block tables, one piece per head and token run";
  switch (block_relation(pk, dk)) {
    case BlockRelation::Equal:
      j["relation"] = "equal";
      j["blocks_per_block"] = 1;
      j["description"] = "equal";
      break;
    case BlockRelation::DecodeMultiple:
      j["relation"] = "decode_multiple";
      j["blocks_per_block"] = dk / pk;
      j["description"] = "decode block = " + std::to_string(dk / pk) + " prefill blocks";
      // P_TP > D_TP with heads split over several P ranks (not replicated) cannot use a
      // block_size_ratio > 1 in vLLM (docs/semantics.md §3, local split handles).
      if (tp.remote_tp > tp.local_tp && !tp.use_mla && tp.remote_tp <= tp.total_kv_heads) {
        notes.push_back("vLLM refuses this pair: heterogeneous block sizes with head-sharded attention reads "
                        "from several prefill ranks (P_TP > D_TP) are not supported" + pdkv_maps);
      }
      break;
    case BlockRelation::PrefillMultiple:
      j["relation"] = "prefill_multiple";
      j["blocks_per_block"] = pk / dk;
      j["description"] = "prefill block = " + std::to_string(pk / dk) + " decode blocks";
      notes.push_back("vLLM refuses this pair (" + ratio +
                      " is below 1; vLLM serves only prefill blocks <= decode blocks with the ratio dividing)" +
                      pdkv_maps);
      break;
    case BlockRelation::NotMultiples:
      j["relation"] = "not_multiples";
      j["blocks_per_block"] = nullptr;
      j["description"] = "not multiples";
      notes.push_back("vLLM refuses this pair (" + ratio +
                      " is not a whole number; vLLM serves only prefill blocks <= decode blocks with the ratio "
                      "dividing)" + pdkv_maps);
      break;
  }
  if (p.hybrid && p.physical_per_logical != d.physical_per_logical && prefix_caching) {
    notes.push_back("physical blocks per logical differ (prefill " + std::to_string(p.physical_per_logical) +
                    ", decode " + std::to_string(d.physical_per_logical) +
                    ") with prefix caching: vLLM rejects this at handshake; pdkv aligns on token offsets");
  }
  j["notes"] = notes;
  return j;
}

// Token runs of one whole D kernel block: how many P kernel blocks it overlaps, fewest and most
// over all D blocks. D block k starts at offset o = k*dk mod pk inside a P block; o takes every
// multiple of gcd(pk, dk) below pk, and the block overlaps ceil((o + dk) / pk) P blocks.
std::pair<uint64_t, uint64_t> runs_per_decode_block(uint64_t pk, uint64_t dk) {
  const uint64_t g = std::gcd(pk, dk);
  return {(dk + pk - 1) / pk, (pk - g + dk + pk - 1) / pk};
}

// {"min", "max", "detail"}: descriptors per whole D kernel block and layer, fewest and most over
// the D blocks (equal unless the block sizes are not multiples), and how they arise. One shape
// for every block relation, so the field never changes type with the input.
json descriptor_count(uint64_t min, uint64_t max, const std::string& detail) {
  return json{{"min", min}, {"max", max}, {"detail", detail}};
}

// Attention pieces (descriptors before coalescing) pdkv's transfer plan issues per whole D kernel
// block and layer, as compile_transfer_plan builds them: a run that is a whole block on both
// sides is one piece per read (a head slice is contiguous in HND); any other run is one piece per
// head read.
json attention_descriptors_per_block(uint64_t pk, uint64_t dk, size_t num_reads, uint64_t heads_read) {
  const std::string heads = std::to_string(heads_read) + " heads x ";
  switch (block_relation(pk, dk)) {
    case BlockRelation::Equal:
      return descriptor_count(num_reads, num_reads, "one per read: the blocks are whole on both sides");
    case BlockRelation::DecodeMultiple:  // dk/pk runs, each a whole P block but part of the D block
      return descriptor_count((dk / pk) * heads_read, (dk / pk) * heads_read,
                              "one per head and token run: " + heads + std::to_string(dk / pk) +
                                  " prefill blocks per decode block");
    case BlockRelation::PrefillMultiple:  // one run, part of a P block
      return descriptor_count(heads_read, heads_read,
                              "one per head and token run: " + heads + "1 prefill block per decode block");
    case BlockRelation::NotMultiples: {
      const auto [lo, hi] = runs_per_decode_block(pk, dk);
      return descriptor_count(lo * heads_read, hi * heads_read,
                              "one per head and token run: " + heads + std::to_string(lo) +
                                  (hi != lo ? " to " + std::to_string(hi) : std::string()) +
                                  " prefill blocks per decode block");
    }
  }
  return nullptr;
}

json decode_rank_json(const Deployment& dep, const EngineGeometry& pg, const EngineGeometry& dg, uint32_t rank,
                      json& errors) {
  const auto& m = dep.model;
  json r{{"rank", rank},           {"tp_ratio", nullptr}, {"handshake_targets", nullptr},
         {"notify_ranks", nullptr}, {"attention", nullptr}, {"mla", nullptr}, {"mamba", nullptr}};
  const std::string where = "decode rank " + std::to_string(rank);
  TpMapping map;
  try {
    map = compute_tp_mapping(TpMappingInput{dep.decode.tp_size, rank, dep.prefill.tp_size, m.attention.num_kv_heads,
                                            m.attention.use_mla, m.is_hybrid()});
  } catch (const Error& e) {
    errors.push_back(error_json(e, where + " topology"));
    return r;
  }
  r["tp_ratio"] = map.tp_ratio;
  r["handshake_targets"] = map.handshake_targets;
  r["notify_ranks"] = map.notify_ranks;

  // Attention: reads at one token's granularity (HND: a head's tokens are contiguous, so the
  // per-token head slice scales to any run of tokens), reported per decode kernel block.
  json attn{{"source_ranks", map.attention_source_ranks}, {"reads", nullptr}, {"descriptors_per_block_per_layer", nullptr}};
  try {
    auto reads = attention_reads(map, dg.attn_bytes_per_token, pg.attn_bytes_per_token);
    json rj = json::array();
    for (const auto& rd : reads) {
      rj.push_back(json{{"prefill_rank", rd.p_rank},
                        {"bytes_per_token", rd.length},
                        {"bytes_per_block", rd.length * dg.kernel_block_size},
                        {"decode_offset_per_token", rd.local_offset},
                        {"prefill_offset_per_token", rd.remote_offset}});
    }
    attn["reads"] = rj;
    // Bytes per token per head on D (MLA: one latent "head"); D reads all its bytes per token.
    const uint64_t heads = m.attention.use_mla ? 1 : map.local_physical_heads;
    const uint64_t head_bytes = dg.attn_bytes_per_token / heads;
    uint64_t heads_read = 0;
    for (const auto& rd : reads) heads_read += rd.length / head_bytes;
    attn["descriptors_per_block_per_layer"] =
        attention_descriptors_per_block(pg.kernel_block_size, dg.kernel_block_size, reads.size(), heads_read);
  } catch (const Error& e) {
    errors.push_back(error_json(e, where + " attention"));
  }
  r["attention"] = attn;

  // MLA-typed layers of a GQA model: the latent is the same on every rank, so it is read whole,
  // once, from one prefill rank (the GQA layers above are split by heads).
  if (m.mixes_mla()) {
    r["mla"] = json{{"source_rank", map.mla_source_rank()},
                    {"bytes_per_token", dg.mla_bytes_per_token},
                    {"bytes_per_block", dg.mla_kernel_page_bytes},
                    {"descriptors_per_block_per_layer",
                     attention_descriptors_per_block(pg.kernel_block_size, dg.kernel_block_size, 1, 1)}};
  }

  if (m.is_hybrid()) {
    json mj{{"source_ranks", map.mamba_source_ranks},
            {"reads", nullptr},
            {"descriptors_per_block_per_layer", nullptr},
            {"vllm_differs", nullptr}};
    try {
      auto reads = mamba_reads(pg.mamba, dg.mamba, rank);
      json parts = json::array();
      for (const auto& rd : reads) {
        parts.push_back(json{{"part", rd.part},
                             {"prefill_rank", rd.p_rank},
                             {"prefill_offset", rd.remote_offset},
                             {"decode_offset", rd.local_offset},
                             {"bytes", rd.length}});
      }
      mj["reads"] = parts;
      mj["descriptors_per_block_per_layer"] =
          descriptor_count(reads.size(), reads.size(), "one per read: a projection's bytes from one prefill rank");
      try {
        if (vllm_mamba_reads(pg.mamba, dg.mamba, rank) != reads) {
          mj["vllm_differs"] =
              "vLLM main reads different bytes for this rank (issue #55208: replicated B/C groups)";
        }
      } catch (const Error&) {
        // vLLM cannot express this pair at all; pdkv's reads above stand on their own.
      }
    } catch (const Error& e) {
      errors.push_back(error_json(e, where + " mamba"));
    }
    r["mamba"] = mj;
  }
  return r;
}

// What a model layer holds, by its layer pattern letter.
const char* layer_kind(char c) {
  switch (c) {
    case kLayerAttention: return "attention";
    case kLayerMamba: return "mamba";
    case kLayerParallel: return "attention+mamba";
    case kLayerMla: return "mla";
    default: return "none";
  }
}

// Layers of each kind in [b, e) of the pattern.
json layer_counts(const std::string& pattern, uint32_t b, uint32_t e) {
  uint64_t attention = 0, mamba = 0, mla = 0;
  for (uint32_t l = b; l < e; ++l) {
    const char c = pattern[l];
    attention += c == kLayerAttention || c == kLayerParallel || c == kLayerMla;
    mamba += c == kLayerMamba || c == kLayerParallel;
    mla += c == kLayerMla;
  }
  return json{{"attention_layers", attention}, {"mamba_layers", mamba}, {"mla_layers", mla}};
}

// One side's stages (vLLM's default split of the pattern's layers) as metadata carrying only
// what pair_pipeline_stages reads: engine, stage and window.
std::vector<EngineMetadata> stages_of(const std::string& engine, uint32_t pp, uint32_t layers) {
  std::vector<EngineMetadata> out;
  for (uint32_t s = 0; s < pp; ++s) {
    const LayerWindow w = pipeline_layer_window(layers, s, pp);
    EngineMetadata m;
    m.engine_id = engine;
    m.pp_size = pp;
    m.pp_rank = s;
    m.layer_begin = pp == 1 ? 0 : w.begin;
    m.layer_end = pp == 1 ? kLayerEndOpen : w.end;
    out.push_back(m);
  }
  return out;
}

// Pipeline stages of both sides, their pairs and what each pair moves; null without PP. A
// pair's decode ranks handshake the pair's prefill stage as a separate peer: its TP ranks are
// each decode rank's handshake targets (decode_ranks), per paired prefill stage.
json pipeline_json(const Deployment& dep, json& errors) {
  if (dep.prefill_pp == 1 && dep.decode_pp == 1) return nullptr;
  const std::string& pattern = dep.model.layer_pattern;
  const auto n = static_cast<uint32_t>(pattern.size());
  if (n == 0) {
    errors.push_back(CliError(ErrorKind::Configuration, "pipeline stages",
                              "the model's layer pattern is unknown, so its layers cannot be split into pipeline stages",
                              status_name(Status::InvalidArgument))
                         .to_json());
    return nullptr;
  }
  std::vector<EngineMetadata> p, d;
  bool ok = true;
  for (const auto& [side, pp, out] : {std::tuple{"prefill", dep.prefill_pp, &p}, std::tuple{"decode", dep.decode_pp, &d}}) {
    try {
      *out = stages_of(side, pp, n);
    } catch (const Error& e) {
      errors.push_back(CliError(ErrorKind::Configuration, std::string("--") + side + "-pp",
                                std::string("--") + side + "-pp " + std::to_string(pp) + ": " + e.what(),
                                status_name(e.status()))
                           .to_json());
      ok = false;
    }
  }
  if (!ok) return nullptr;
  const std::vector<StagePair> pairs = pair_pipeline_stages(d, p);
  auto end_of = [&](uint32_t e) { return e == kLayerEndOpen ? n : e; };
  auto stages = [&](const std::vector<EngineMetadata>& side) {
    json a = json::array();
    for (const EngineMetadata& m : side) {
      json j{{"pp_rank", m.pp_rank}, {"layer_begin", m.layer_begin}, {"layer_end", end_of(m.layer_end)}};
      j.update(layer_counts(pattern, m.layer_begin, end_of(m.layer_end)));
      a.push_back(j);
    }
    return a;
  };
  json pj = json::array();
  for (const StagePair& sp : pairs) {
    json j{{"decode_stage", sp.d_pp_rank},
           {"prefill_stage", sp.p_pp_rank},
           {"layer_begin", sp.layer_begin},
           {"layer_end", end_of(sp.layer_end)}};
    j.update(layer_counts(pattern, sp.layer_begin, end_of(sp.layer_end)));
    pj.push_back(j);
  }
  json notify = json::array();
  try {
    for (uint32_t s = 0; s < dep.prefill_pp; ++s) {
      notify.push_back(pipeline_notifications_expected(pairs, s, dep.prefill.tp_size, dep.decode.tp_size));
    }
  } catch (const Error&) {
    notify = nullptr;  // TP sizes that do not divide: reported under "tensor parallel sizes"
  }
  // Stage boundaries and the layers on each side of them (a hybrid's boundary may fall between
  // a Mamba and an attention layer: each stage then registers its own regions for its layers).
  json boundaries = json::array();
  for (const auto* side : {&p, &d}) {
    for (size_t k = 1; k < side->size(); ++k) {
      const uint32_t b = (*side)[k].layer_begin;
      boundaries.push_back(json{{"side", side == &p ? "prefill" : "decode"},
                                {"layer", b},
                                {"before", layer_kind(pattern[b - 1])},
                                {"after", layer_kind(pattern[b])}});
    }
  }
  return json{{"num_layers", n},
              {"prefill_pp", dep.prefill_pp},
              {"decode_pp", dep.decode_pp},
              {"prefill_stages", stages(p)},
              {"decode_stages", stages(d)},
              {"stage_pairs", pj},
              {"boundaries", boundaries},
              {"notifications_expected_per_prefill_stage_rank", notify}};
}

// The KV layouts of both sides and what decode does with them: read prefill's blocks as they
// lie (the same layout), or write them in prefill's layout and permute each received block into
// its own (different layouts with --permute-on-receive). Decided by compiling a one-token plan
// of decode rank 0, so the report says exactly what the planner does; a refusal is an error
// naming the fix. Null when a geometry is missing.
json kv_layouts_json(const Deployment& dep, const EngineGeometry& pg, const EngineGeometry& dg, json& errors) {
  json j{{"prefill", kv_layout_name(dep.prefill_kv_layout)},
         {"decode", kv_layout_name(dep.decode_kv_layout)},
         {"permute_on_receive", dep.permute_on_receive},
         {"permute", nullptr}};
  try {
    std::vector<EngineMetadata> p;
    for (uint32_t r = 0; r < dep.prefill.tp_size; ++r) {
      p.push_back(metadata_from_geometry(dep.model, dep.prefill, pg, {"prefill", r, 2, 1, (2ull + r) << 40}));
      p.back().kv_layout = dep.prefill_kv_layout;
    }
    EngineMetadata d = metadata_from_geometry(dep.model, dep.decode, dg, {"decode", 0, 2, 1, 1ull << 40});
    d.kv_layout = dep.decode_kv_layout;
    PlanContext ctx = make_plan_context(std::move(d), std::move(p));
    ctx.permute_on_receive = dep.permute_on_receive;
    PlanGroup g;
    g.trim.kind = GroupKind::Attention;
    g.trim.local_blocks = {1};
    g.trim.remote_blocks = {1};
    g.trim.remote_computed_tokens = 1;
    const TransferPlan plan = compile_transfer_plan(ctx, {g});
    if (plan.permute.active()) {
      j["permute"] = json{{"from", kv_layout_name(plan.permute.from)},
                          {"to", kv_layout_name(plan.permute.to)},
                          {"heads", plan.permute.heads},
                          {"tokens", plan.permute.tokens},
                          {"head_bytes", plan.permute.head_bytes},
                          {"block_bytes", plan.permute.block_bytes()}};
    }
  } catch (const Error& e) {
    // The planner's fix in the command line's terms.
    std::string msg = e.what();
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"set permute_on_receive in the plan context",
                                                                       "pass --permute-on-receive"},
                                   {"with permute_on_receive", "with --permute-on-receive"},
                                   {"layout on the prefill engine", "layout on the prefill engine (--prefill-kv-layout HND)"}}) {
      if (const size_t at = msg.find(from); at != std::string::npos) msg.replace(at, from.size(), to);
    }
    errors.push_back(CliError(ErrorKind::Configuration, "kv cache layouts", msg, status_name(e.status())).to_json());
  }
  return j;
}

// Element formats of equal size that differ (fp8_e4m3 vs fp8_e5m2, bfloat16 vs float16) pass every
// size rule, so nothing else in the report would notice; the handshake refuses them (metadata 1.3).
// Judged by the core's pair check on prefill rank 0 and decode rank 0 (every rank of a side names
// the same formats); its other items are reported below in the report's own terms.
void element_format_errors(const Deployment& dep, const EngineGeometry& pg, const EngineGeometry& dg, json& errors) {
  try {
    const EngineMetadata p = metadata_from_geometry(dep.model, dep.prefill, pg, {"prefill", 0, 2, 1, 2ull << 40});
    const EngineMetadata d = metadata_from_geometry(dep.model, dep.decode, dg, {"decode", 0, 2, 1, 1ull << 40});
    for (const Incompatibility& i : validate_pair(d, p)) {
      if (!i.field.ends_with("_format")) continue;
      // The core says "local vs remote"; here local is decode rank 0 and remote prefill rank 0.
      std::string msg = i.field + ": decode " + i.local_value + ", prefill " + i.remote_value;
      if (const size_t at = i.message.find(": ", i.field.size() + 2); at != std::string::npos) {
        msg += i.message.substr(at);  // what goes wrong, after "FIELD: A vs B"
      }
      if (!i.fix.empty()) msg += "; " + i.fix;
      errors.push_back(
          CliError(ErrorKind::Configuration, "element formats", in_flag_terms(msg), status_name(i.status)).to_json());
    }
  } catch (const Error& e) {
    errors.push_back(error_json(e, "element formats"));
  }
}

}  // namespace

json null_plan_fields() {
  return json{{"model", nullptr},  {"tp_ratio", nullptr},
              {"prefill", nullptr}, {"decode", nullptr},
              {"blocks", nullptr},  {"notifications_expected_per_prefill_rank", nullptr},
              {"decode_ranks", nullptr}, {"pipeline", nullptr}, {"kv_layouts", nullptr}};
}

json build_deployment_report(const Deployment& dep) {
  json report = null_plan_fields();
  report["model"] = json{{"name", dep.model.name},
                         {"source", dep.model.source},
                         {"mamba_type", mamba_type_name(dep.model.mamba.type)},
                         {"total_kv_heads", dep.model.attention.num_kv_heads},
                         {"use_mla", dep.model.attention.use_mla},
                         {"attention_layers", dep.model.num_attention_layers()},
                         {"mla_layers", std::count(dep.model.layer_pattern.begin(), dep.model.layer_pattern.end(), kLayerMla)},
                         {"mla_head_size", dep.model.mla_head_size},
                         {"mamba_layers", dep.model.num_mamba_layers()}};
  json errors = json::array();
  try {
    report["tp_ratio"] = tp_ratio(dep.decode.tp_size, dep.prefill.tp_size);
  } catch (const Error& e) {
    errors.push_back(error_json(e, "tensor parallel sizes"));
  }
  EngineGeometry pg, dg;
  bool have_geometry = true;
  // Like the C API: an MLA backend on a non-MLA model (or the reverse) is a configuration error
  // of that side, and its geometry (which would use the wrong kernel block sizes) is not shown.
  auto side = [&](const char* name, const EngineConfig& e, Backend b, EngineGeometry& g) {
    try {
      check_backend_for_model(dep.model, b);
    } catch (const Error& err) {
      errors.push_back(error_json(err, std::string(name) + " attention backend"));
      have_geometry = false;
      return;
    }
    try {
      g = derive_geometry(dep.model, e);
      report[name] = geometry_json(g, e.kv_cache_head_extra_bytes, formats_json(dep.model, e));
    } catch (const Error& err) {
      errors.push_back(error_json(err, std::string(name) + " geometry"));
      have_geometry = false;
    }
  };
  side("prefill", dep.prefill, dep.prefill_backend, pg);
  side("decode", dep.decode, dep.decode_backend, dg);
  if (have_geometry) element_format_errors(dep, pg, dg, errors);
  if (have_geometry && errors.empty()) {
    const TpMappingInput tp{dep.decode.tp_size, 0, dep.prefill.tp_size, dep.model.attention.num_kv_heads,
                            dep.model.attention.use_mla, dep.model.is_hybrid()};
    report["blocks"] = block_relation_json(pg, dg, tp, dep.prefix_caching);
    report["notifications_expected_per_prefill_rank"] =
        notifications_expected_per_request(dep.prefill.tp_size, dep.decode.tp_size);
    json ranks = json::array();
    for (uint32_t r = 0; r < dep.decode.tp_size; ++r) ranks.push_back(decode_rank_json(dep, pg, dg, r, errors));
    report["decode_ranks"] = ranks;
    report["kv_layouts"] = kv_layouts_json(dep, pg, dg, errors);
  }
  report["pipeline"] = pipeline_json(dep, errors);
  report["errors"] = errors;
  return report;
}

}  // namespace pdkv::cli
