#include "report_text.hpp"

#include <cstdio>
#include <sstream>
#include <vector>

namespace pdkv::cli {

using json = nlohmann::json;

namespace {

std::string fmt_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%llu B (%.2f MiB)", static_cast<unsigned long long>(b), b / 1048576.0);
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%llu B (%.2f KiB)", static_cast<unsigned long long>(b), b / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  }
  return buf;
}

// "[0,2]"; "-" when the ranks are not known (null).
std::string ranks(const json& a) {
  if (a.is_null()) return "-";
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? "," : "") + std::to_string(a[i].get<uint64_t>());
  return s + "]";
}

// The elements of an array that may be null (not computed).
json items(const json& a) { return a.is_null() ? json::array() : a; }

// {"min", "max", "detail"} as "4", or "2 to 3 (detail)" when the count varies; "-" when null.
std::string descriptors(const json& c) {
  if (c.is_null()) return "-";
  const auto lo = c["min"].get<uint64_t>(), hi = c["max"].get<uint64_t>();
  if (lo == hi) return std::to_string(lo);
  return std::to_string(lo) + " to " + std::to_string(hi) + " (" + c["detail"].get<std::string>() + ")";
}

// A two-column-per-side table: row label, prefill value, decode value.
void geometry_table(std::ostringstream& out, const json& p, const json& d) {
  struct Row {
    std::string label, pv, dv;
  };
  std::vector<Row> rows;
  auto num = [](const json& j, const char* k) { return j.contains(k) ? j[k].dump() : std::string("-"); };
  rows.push_back({"tensor parallel size", num(p, "tp_size"), num(d, "tp_size")});
  if (!p["mamba"].is_null() && !d["mamba"].is_null()) {
    const auto& pm = p["mamba"];
    const auto& dm = d["mamba"];
    rows.push_back({"mamba type", pm["type"].get<std::string>(), dm["type"].get<std::string>()});
    rows.push_back({"conv state bytes / rank", fmt_bytes(pm["conv_bytes"]), fmt_bytes(dm["conv_bytes"])});
    for (size_t i = 0; i < pm["projections"].size(); ++i) {
      const auto& pp = pm["projections"][i];
      const auto& dp = dm["projections"][i];
      std::string suffix = pp["replicated"].get<bool>() || dp["replicated"].get<bool>() ? " (replicated groups)" : "";
      rows.push_back({"  conv projection " + pp["name"].get<std::string>() + suffix, fmt_bytes(pp["bytes"]),
                      fmt_bytes(dp["bytes"])});
    }
    rows.push_back({"SSM state bytes / rank", fmt_bytes(pm["ssm_bytes"]), fmt_bytes(dm["ssm_bytes"])});
    rows.push_back({"mamba page (unpadded)", fmt_bytes(pm["page_bytes"]), fmt_bytes(dm["page_bytes"])});
    char pp[32], dp[32];
    std::snprintf(pp, sizeof pp, "%.2f%%", pm["padding_percent"].get<double>());
    std::snprintf(dp, sizeof dp, "%.2f%%", dm["padding_percent"].get<double>());
    rows.push_back({"mamba page padding", pp, dp});
  }
  // A KV head's bytes per token, with the per-token-head scales packed beside its data.
  auto head = [&](const json& j) {
    if (!j.contains("kv_head_bytes_per_token")) return std::string("-");
    const uint64_t extra = j["kv_head_extra_bytes"].get<uint64_t>();
    return j["kv_head_bytes_per_token"].dump() + (extra ? " (" + std::to_string(extra) + " B scales)" : "");
  };
  rows.push_back({"KV bytes / token / head", head(p), head(d)});
  // Named element formats (only those the dtype flags or the model name; "-" where only a size).
  for (const auto& [key, label] : {std::pair{"kv_cache", "KV cache format"}, std::pair{"conv_state", "conv state format"},
                                   std::pair{"ssm_state", "SSM state format"}}) {
    // The binding copied into the capture: clang 14 cannot capture a structured binding.
    auto fmt = [k = key](const json& j) {
      if (!j.contains("element_formats") || j["element_formats"][k].is_null()) return std::string("-");
      return j["element_formats"][k].get<std::string>();
    };
    if (fmt(p) != "-" || fmt(d) != "-") rows.push_back({label, fmt(p), fmt(d)});
  }
  rows.push_back({"attention bytes / token / rank", num(p, "attention_bytes_per_token"),
                  num(d, "attention_bytes_per_token")});
  rows.push_back({"attention block size (tokens)", num(p, "block_size"), num(d, "block_size")});
  rows.push_back({"kernel block size (tokens)", num(p, "kernel_block_size"), num(d, "kernel_block_size")});
  rows.push_back({"physical blocks per logical", num(p, "physical_blocks_per_logical"),
                  num(d, "physical_blocks_per_logical")});
  rows.push_back({"kernel page bytes", fmt_bytes(p["kernel_page_bytes"]), fmt_bytes(d["kernel_page_bytes"])});
  if (!p["mla_bytes_per_token"].is_null() && !d["mla_bytes_per_token"].is_null()) {
    rows.push_back({"MLA-typed layers bytes / token", num(p, "mla_bytes_per_token"), num(d, "mla_bytes_per_token")});
    rows.push_back({"MLA-typed layers kernel page", fmt_bytes(p["mla_kernel_page_bytes"]),
                    fmt_bytes(d["mla_kernel_page_bytes"])});
  }
  char line[256];
  std::snprintf(line, sizeof line, "  %-34s %-26s %-26s\n", "", "prefill (P)", "decode (D)");
  out << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "  %-34s %-26s %-26s\n", r.label.c_str(), r.pv.c_str(), r.dv.c_str());
    out << line;
  }
}

}  // namespace

std::string render_report_text(const json& r) {
  std::ostringstream out;
  out << "Model: " << r["model"]["name"].get<std::string>() << "\n";
  out << "  source: " << r["model"]["source"].get<std::string>() << "\n";
  out << "  mamba type: " << r["model"]["mamba_type"].get<std::string>()
      << ", KV heads: " << r["model"]["total_kv_heads"] << (r["model"]["use_mla"].get<bool>() ? " (MLA)" : "")
      << ", attention layers: " << r["model"]["attention_layers"] << ", mamba layers: " << r["model"]["mamba_layers"]
      << "\n";
  if (r["model"]["mla_layers"].get<uint64_t>() != 0) {
    out << "  MLA-typed attention layers: " << r["model"]["mla_layers"] << " (latent of "
        << r["model"]["mla_head_size"] << " elements, replicated on every rank)\n";
  }
  out << "\n";
  if (!r["prefill"].is_null() && !r["decode"].is_null()) {
    out << "Geometry per rank\n";
    geometry_table(out, r["prefill"], r["decode"]);
    for (const char* side : {"prefill", "decode"}) {
      for (const auto& l : r[side]["log_lines"]) out << "  [" << side << " vLLM log] " << l.get<std::string>() << "\n";
    }
    out << "\n";
  }
  if (!r["blocks"].is_null()) {
    out << "Blocks: prefill kernel " << r["blocks"]["prefill_kernel_block_size"] << " tokens, decode kernel "
        << r["blocks"]["decode_kernel_block_size"] << " tokens: " << r["blocks"]["description"].get<std::string>()
        << "\n";
    for (const auto& n : r["blocks"]["notes"]) out << "  note: " << n.get<std::string>() << "\n";
    out << "tp_ratio (decode view): " << r["tp_ratio"] << "; READ notifications each prefill rank waits for: "
        << r["notifications_expected_per_prefill_rank"] << "\n\n";
  }
  if (!r["kv_layouts"].is_null()) {
    const auto& k = r["kv_layouts"];
    out << "KV cache layouts: prefill " << k["prefill"].get<std::string>() << ", decode " << k["decode"].get<std::string>();
    if (!k["permute"].is_null()) {
      const auto& p = k["permute"];
      out << "; decode writes each received block in " << p["from"].get<std::string>() << " and permutes it to "
          << p["to"].get<std::string>() << " (" << p["heads"] << " heads x " << p["tokens"] << " tokens x "
          << p["head_bytes"] << " B = " << fmt_bytes(p["block_bytes"]) << " per block) before zeroing";
    } else if (k["prefill"] == k["decode"]) {
      out << "; read as they lie";
    }
    out << "\n\n";
  }
  if (!r["pipeline"].is_null()) {
    const auto& pp = r["pipeline"];
    out << "Pipeline stages (" << pp["num_layers"] << " layers; prefill PP " << pp["prefill_pp"] << ", decode PP "
        << pp["decode_pp"] << ")\n";
    auto stage_line = [&](const char* side, const json& s) {
      out << "  " << side << " stage " << s["pp_rank"] << ": layers [" << s["layer_begin"] << ", " << s["layer_end"]
          << "): " << s["attention_layers"] << " attention, " << s["mamba_layers"] << " mamba"
          << (s["mla_layers"].get<uint64_t>() ? ", " + s["mla_layers"].dump() + " MLA-typed" : std::string()) << "\n";
    };
    for (const auto& s : pp["prefill_stages"]) stage_line("prefill", s);
    for (const auto& s : pp["decode_stages"]) stage_line("decode", s);
    for (const auto& b : pp["boundaries"]) {
      out << "  " << b["side"].get<std::string>() << " stage boundary before layer " << b["layer"] << ": "
          << b["before"].get<std::string>() << " | " << b["after"].get<std::string>() << "\n";
    }
    for (const auto& sp : pp["stage_pairs"]) {
      out << "  decode stage " << sp["decode_stage"] << " <- prefill stage " << sp["prefill_stage"] << ": layers ["
          << sp["layer_begin"] << ", " << sp["layer_end"] << "), " << sp["attention_layers"] << " attention, "
          << sp["mamba_layers"] << " mamba; each decode rank of the stage handshakes this prefill stage's ranks "
             "below as a separate peer\n";
    }
    if (!pp["notifications_expected_per_prefill_stage_rank"].is_null()) {
      out << "  READ notifications each prefill rank waits for, per prefill stage: "
          << ranks(pp["notifications_expected_per_prefill_stage_rank"]) << "\n";
    }
    out << "\n";
  }
  if (!r["decode_ranks"].is_null()) {
    for (const auto& d : r["decode_ranks"]) {
      out << "Decode rank " << d["rank"] << ": handshake with prefill ranks " << ranks(d["handshake_targets"])
          << ", notifies " << ranks(d["notify_ranks"]) << "\n";
      if (!d["attention"].is_null()) {
        const auto& a = d["attention"];
        out << "  attention from " << ranks(a["source_ranks"])
            << ", descriptors per block per layer: " << descriptors(a["descriptors_per_block_per_layer"]) << "\n";
        for (const auto& rd : items(a["reads"])) {
          out << "    prefill rank " << rd["prefill_rank"] << ": " << rd["bytes_per_token"] << " B/token, "
              << fmt_bytes(rd["bytes_per_block"]) << " per decode block, head slice at +"
              << rd["prefill_offset_per_token"] << " B/token in P -> +" << rd["decode_offset_per_token"] << " in D\n";
        }
      }
      if (!d["mla"].is_null()) {
        const auto& m = d["mla"];
        out << "  MLA-typed layers: the whole latent from prefill rank " << m["source_rank"] << " only, "
            << m["bytes_per_token"] << " B/token, " << fmt_bytes(m["bytes_per_block"])
            << " per decode block, descriptors per block per layer: "
            << descriptors(m["descriptors_per_block_per_layer"]) << "\n";
      }
      if (!d["mamba"].is_null()) {
        const auto& m = d["mamba"];
        out << "  mamba state from " << ranks(m["source_ranks"])
            << ", descriptors per block per layer: " << descriptors(m["descriptors_per_block_per_layer"]) << "\n";
        char line[200];
        std::snprintf(line, sizeof line, "    %-5s %-12s %-14s %-14s %s\n", "part", "prefill rank", "P offset",
                      "D offset", "bytes");
        out << line;
        for (const auto& rd : items(m["reads"])) {
          std::snprintf(line, sizeof line, "    %-5s %-12llu %-14llu %-14llu %llu\n",
                        rd["part"].get<std::string>().c_str(),
                        static_cast<unsigned long long>(rd["prefill_rank"].get<uint64_t>()),
                        static_cast<unsigned long long>(rd["prefill_offset"].get<uint64_t>()),
                        static_cast<unsigned long long>(rd["decode_offset"].get<uint64_t>()),
                        static_cast<unsigned long long>(rd["bytes"].get<uint64_t>()));
          out << line;
        }
        if (!m["vllm_differs"].is_null()) out << "    note: " << m["vllm_differs"].get<std::string>() << "\n";
      }
    }
  }
  if (!r["errors"].empty()) {
    out << "\nConfiguration errors:\n";
    for (const auto& e : r["errors"]) {
      out << "  " << e["where"].get<std::string>() << ": " << e["status"].get<std::string>() << ": "
          << e["message"].get<std::string>() << "\n";
    }
  }
  return out.str();
}

}  // namespace pdkv::cli
