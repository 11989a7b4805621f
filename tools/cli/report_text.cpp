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

std::string ranks(const json& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? "," : "") + std::to_string(a[i].get<uint64_t>());
  return s + "]";
}

// A two-column-per-side table: row label, prefill value, decode value.
void geometry_table(std::ostringstream& out, const json& p, const json& d) {
  struct Row {
    std::string label, pv, dv;
  };
  std::vector<Row> rows;
  auto num = [](const json& j, const char* k) { return j.contains(k) ? j[k].dump() : std::string("-"); };
  rows.push_back({"tensor parallel size", num(p, "tp_size"), num(d, "tp_size")});
  if (p.contains("mamba")) {
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
  rows.push_back({"attention bytes / token / rank", num(p, "attention_bytes_per_token"),
                  num(d, "attention_bytes_per_token")});
  rows.push_back({"attention block size (tokens)", num(p, "block_size"), num(d, "block_size")});
  rows.push_back({"kernel block size (tokens)", num(p, "kernel_block_size"), num(d, "kernel_block_size")});
  rows.push_back({"physical blocks per logical", num(p, "physical_blocks_per_logical"),
                  num(d, "physical_blocks_per_logical")});
  rows.push_back({"kernel page bytes", fmt_bytes(p["kernel_page_bytes"]), fmt_bytes(d["kernel_page_bytes"])});
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
      << "\n\n";
  if (r.contains("prefill") && r.contains("decode")) {
    out << "Geometry per rank\n";
    geometry_table(out, r["prefill"], r["decode"]);
    for (const char* side : {"prefill", "decode"}) {
      for (const auto& l : r[side]["log_lines"]) out << "  [" << side << " vLLM log] " << l.get<std::string>() << "\n";
    }
    out << "\n";
  }
  if (r.contains("blocks")) {
    out << "Blocks: prefill kernel " << r["blocks"]["prefill_kernel_block_size"] << " tokens, decode kernel "
        << r["blocks"]["decode_kernel_block_size"] << " tokens: " << r["blocks"]["relation"].get<std::string>() << "\n";
    for (const auto& n : r["blocks"]["notes"]) out << "  note: " << n.get<std::string>() << "\n";
    out << "tp_ratio (decode view): " << r["tp_ratio"] << "; READ notifications each prefill rank waits for: "
        << r["notifications_expected_per_prefill_rank"] << "\n\n";
  }
  if (r.contains("decode_ranks")) {
    for (const auto& d : r["decode_ranks"]) {
      out << "Decode rank " << d["rank"] << ": handshake with prefill ranks " << ranks(d.value("handshake_targets", json::array()))
          << ", notifies " << ranks(d.value("notify_ranks", json::array())) << "\n";
      if (d.contains("attention")) {
        const auto& a = d["attention"];
        out << "  attention from " << ranks(a["source_ranks"]) << ", descriptors per block per layer: "
            << (a.contains("descriptors_per_block_per_layer") ? (a["descriptors_per_block_per_layer"].is_string()
                                                                     ? a["descriptors_per_block_per_layer"].get<std::string>()
                                                                     : a["descriptors_per_block_per_layer"].dump())
                                                                : std::string("-"))
            << "\n";
        for (const auto& rd : a.value("reads", json::array())) {
          out << "    prefill rank " << rd["prefill_rank"] << ": " << rd["bytes_per_token"] << " B/token, "
              << fmt_bytes(rd["bytes_per_block"]) << " per decode block, head slice at +"
              << rd["remote_offset_per_token"] << " B/token in P -> +" << rd["local_offset_per_token"] << " in D\n";
        }
      }
      if (d.contains("mamba")) {
        const auto& m = d["mamba"];
        out << "  mamba state from " << ranks(m["source_ranks"]) << ", descriptors per block per layer: "
            << m.value("descriptors_per_block_per_layer", json(0)) << "\n";
        char line[200];
        std::snprintf(line, sizeof line, "    %-5s %-12s %-14s %-14s %s\n", "part", "prefill rank", "P offset",
                      "D offset", "bytes");
        out << line;
        for (const auto& rd : m.value("reads", json::array())) {
          std::snprintf(line, sizeof line, "    %-5s %-12llu %-14llu %-14llu %llu\n",
                        rd["part"].get<std::string>().c_str(),
                        static_cast<unsigned long long>(rd["prefill_rank"].get<uint64_t>()),
                        static_cast<unsigned long long>(rd["remote_offset"].get<uint64_t>()),
                        static_cast<unsigned long long>(rd["local_offset"].get<uint64_t>()),
                        static_cast<unsigned long long>(rd["bytes"].get<uint64_t>()));
          out << line;
        }
        if (m.contains("vllm_differs")) out << "    note: " << m["vllm_differs"].get<std::string>() << "\n";
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
