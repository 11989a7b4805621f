#include "deployment_report.hpp"

#include <string>

#include "pdkv/core/attention_descriptors.hpp"
#include "pdkv/core/backends.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/tp_topology.hpp"

namespace pdkv::cli {

using json = nlohmann::json;
using namespace pdkv::core;

namespace {

json error_json(const Error& e, const std::string& where) {
  return json{{"where", where}, {"status", status_name(e.status())}, {"message", e.what()}};
}

json geometry_json(const EngineGeometry& g) {
  json j{{"tp_size", g.tp_size},
         {"kv_heads_per_rank", g.kv_heads_per_rank},
         {"attention_bytes_per_token", g.attn_bytes_per_token},
         {"block_size", g.block_size},
         {"kernel_block_size", g.kernel_block_size},
         {"physical_blocks_per_logical", g.physical_per_logical},
         {"kernel_page_bytes", g.kernel_page_bytes},
         {"attention_page_bytes", g.attn_page_bytes},
         {"log_lines", g.log_lines}};
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
                      {"mamba_block_size", g.mamba_block_size}};
  }
  return j;
}

// How the two kernel block sizes relate, and what vLLM would do with them.
json block_relation_json(const EngineGeometry& p, const EngineGeometry& d, bool prefix_caching) {
  json j{{"prefill_kernel_block_size", p.kernel_block_size},
         {"decode_kernel_block_size", d.kernel_block_size}};
  json notes = json::array();
  if (p.kernel_block_size == d.kernel_block_size) {
    j["relation"] = "equal";
  } else if (d.kernel_block_size % p.kernel_block_size == 0) {
    j["relation"] = "decode block = " + std::to_string(d.kernel_block_size / p.kernel_block_size) +
                    " prefill blocks";
  } else {
    j["relation"] = "not multiples";
    notes.push_back("vLLM refuses this pair (block_size_ratio " + std::to_string(d.kernel_block_size) + "/" +
                    std::to_string(p.kernel_block_size) +
                    " does not divide); pdkv maps token ranges between the block tables, one piece per head "
                    "and token run");
  }
  if (p.hybrid && p.physical_per_logical != d.physical_per_logical && prefix_caching) {
    notes.push_back("physical blocks per logical differ (prefill " + std::to_string(p.physical_per_logical) +
                    ", decode " + std::to_string(d.physical_per_logical) +
                    ") with prefix caching: vLLM rejects this at handshake; pdkv aligns on token offsets");
  }
  j["notes"] = notes;
  return j;
}

json decode_rank_json(const Deployment& dep, const EngineGeometry& pg, const EngineGeometry& dg, uint32_t rank,
                      json& errors) {
  const auto& m = dep.model;
  json r{{"rank", rank}};
  TpMapping map;
  try {
    map = compute_tp_mapping(TpMappingInput{dep.decode.tp_size, rank, dep.prefill.tp_size, m.attention.num_kv_heads,
                                            m.attention.use_mla, m.is_hybrid()});
  } catch (const Error& e) {
    errors.push_back(error_json(e, "decode rank " + std::to_string(rank) + " topology"));
    return r;
  }
  r["tp_ratio"] = map.tp_ratio;
  r["handshake_targets"] = map.handshake_targets;
  r["notify_ranks"] = map.notify_ranks;

  // Attention: reads at one token's granularity (HND: a head's tokens are contiguous, so the
  // per-token head slice scales to any run of tokens), reported per decode kernel block.
  json attn{{"source_ranks", map.attention_source_ranks}};
  try {
    auto reads = attention_reads(map, dg.attn_bytes_per_token, pg.attn_bytes_per_token);
    json rj = json::array();
    for (const auto& rd : reads) {
      rj.push_back(json{{"prefill_rank", rd.p_rank},
                        {"bytes_per_token", rd.length},
                        {"bytes_per_block", rd.length * dg.kernel_block_size},
                        {"local_offset_per_token", rd.local_offset},
                        {"remote_offset_per_token", rd.remote_offset}});
    }
    attn["reads"] = rj;
    const bool multiples = dg.kernel_block_size % pg.kernel_block_size == 0;
    attn["descriptors_per_block_per_layer"] =
        multiples ? json(reads.size() * (dg.kernel_block_size / pg.kernel_block_size))
                  : json("one per head and token run (block sizes are not multiples)");
  } catch (const Error& e) {
    errors.push_back(error_json(e, "decode rank " + std::to_string(rank) + " attention"));
  }
  r["attention"] = attn;

  if (m.is_hybrid()) {
    json mj{{"source_ranks", map.mamba_source_ranks}};
    try {
      auto reads = mamba_reads(pg.mamba, dg.mamba, rank);
      json parts = json::array();
      for (const auto& rd : reads) {
        parts.push_back(json{{"part", rd.part},
                             {"prefill_rank", rd.p_rank},
                             {"remote_offset", rd.remote_offset},
                             {"local_offset", rd.local_offset},
                             {"bytes", rd.length}});
      }
      mj["reads"] = parts;
      mj["descriptors_per_block_per_layer"] = reads.size();
      try {
        if (vllm_mamba_reads(pg.mamba, dg.mamba, rank) != reads) {
          mj["vllm_differs"] =
              "vLLM main reads different bytes for this rank (issue #55208: replicated B/C groups)";
        }
      } catch (const Error&) {
        // vLLM cannot express this pair at all; pdkv's reads above stand on their own.
      }
    } catch (const Error& e) {
      errors.push_back(error_json(e, "decode rank " + std::to_string(rank) + " mamba"));
    }
    r["mamba"] = mj;
  }
  return r;
}

}  // namespace

json build_deployment_report(const Deployment& dep) {
  json report{{"model", json{{"name", dep.model.name}, {"source", dep.model.source},
                             {"mamba_type", mamba_type_name(dep.model.mamba.type)},
                             {"total_kv_heads", dep.model.attention.num_kv_heads},
                             {"use_mla", dep.model.attention.use_mla},
                             {"attention_layers", dep.model.num_attention_layers()},
                             {"mamba_layers", dep.model.num_mamba_layers()}}}};
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
      report[name] = geometry_json(g);
    } catch (const Error& err) {
      errors.push_back(error_json(err, std::string(name) + " geometry"));
      have_geometry = false;
    }
  };
  side("prefill", dep.prefill, dep.prefill_backend, pg);
  side("decode", dep.decode, dep.decode_backend, dg);
  if (have_geometry && errors.empty()) {
    report["blocks"] = block_relation_json(pg, dg, dep.prefix_caching);
    report["notifications_expected_per_prefill_rank"] =
        notifications_expected_per_request(dep.prefill.tp_size, dep.decode.tp_size);
    json ranks = json::array();
    for (uint32_t r = 0; r < dep.decode.tp_size; ++r) ranks.push_back(decode_rank_json(dep, pg, dg, r, errors));
    report["decode_ranks"] = ranks;
  }
  report["errors"] = errors;
  return report;
}

}  // namespace pdkv::cli
