#include "demo_result.hpp"

#include <cmath>
#include <cstdio>

namespace pdkv::cli::demo {

using json = nlohmann::json;

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Nearest-rank percentile of sorted values; 0 for none.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

const char* kind_text(core::GroupKind k) { return k == core::GroupKind::Mamba ? "mamba" : "attention"; }

json side_json(const Side& s) {
  return {{"tp_size", s.tp},
          {"block_size", s.geo.block_size},
          {"kernel_block_size", s.geo.kernel_block_size},
          {"block_bytes", s.logical_page_bytes},
          {"blocks", s.logical_blocks},
          {"bytes_per_rank", s.bytes_per_rank}};
}

std::string side_text(const char* name, const Side& s, uint32_t regions) {
  return std::string(name) + " " + std::to_string(s.geo.block_size) + " tokens (" + gib(s.logical_page_bytes) +
         " per region, " + std::to_string(s.logical_blocks) + " blocks x " + std::to_string(regions) + " regions)";
}

std::string kill_statuses(const KillResult& k) {
  std::string s;
  for (const auto& [status, n] : k.failure_statuses) {
    s += (s.empty() ? "" : ", ") + status + " x " + std::to_string(n);
  }
  return s;
}

std::string ranks_text(const std::vector<uint32_t>& ranks) {
  std::string s;
  for (uint32_t r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

std::string gib(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt("%.2f GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt("%.2f MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt("%.1f KiB", b / 1024.0);
  return std::to_string(bytes) + " B";
}

std::string gb(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return fmt("%.1f MB", b / 1e6);
  if (b >= 1e3) return fmt("%.1f kB", b / 1e3);
  return std::to_string(bytes) + " B";
}

int Result::exit_status() const {
  if (!problems.empty()) return exit_status_of(ErrorKind::Failed);
  if (kill && failed != 0) return exit_status_of(ErrorKind::Killed);
  return 0;
}

std::vector<CliError> Result::errors() const {
  if (!problems.empty()) {
    std::vector<CliError> out(problems.begin(), problems.begin() + std::min<size_t>(problems.size(), 20));
    if (problems.size() > 20) {
      out.emplace_back(ErrorKind::Failed, "demo", std::to_string(problems.size() - 20) + " more problems not listed");
    }
    return out;
  }
  if (kill && failed != 0) {
    return {CliError(ErrorKind::Killed, "--kill-prefill-after",
                     "P rank " + std::to_string(kill->prefill_rank) + " was killed after " +
                         std::to_string(kill->after_requests) + " requests: " + std::to_string(failed) +
                         " requests failed on D rank(s) " + ranks_text(kill->affected_decode_ranks) + " (" +
                         kill_statuses(*kill) + ", each within " + std::to_string(kill->max_failure_ms) +
                         " ms); every other transfer completed and was verified")};
  }
  return {};
}

std::string render_text(const Options& o, const Layout& l, const Result& r) {
  std::string s = "\nsummary\n";
  auto row = [&](const char* k, const std::string& v) {
    char head[32];
    std::snprintf(head, sizeof head, "  %-13s", k);
    s += head + v + "\n";
  };
  size_t mamba_groups = 0;
  for (const auto& g : l.groups) mamba_groups += g.kind == core::GroupKind::Mamba;
  row("model", l.model.name + ": " + std::to_string(l.model.layer_pattern.size()) + " layers (" +
                   std::to_string(l.model.num_attention_layers()) + " attention, " +
                   std::to_string(l.model.num_mamba_layers()) + " Mamba) in " + std::to_string(l.groups.size()) +
                   " KV-cache groups (" + std::to_string(mamba_groups) + " Mamba) over " +
                   std::to_string(l.num_regions) + " regions");
  row("deployment", "P TP" + std::to_string(o.prefill_tp) + " -> D TP" + std::to_string(o.decode_tp) + ", " +
                        (o.write ? "WRITE (P pushes)" : "READ (D pulls)") + " over " + transport_name(o.transport) +
                        ", Mamba cache mode " + cache_mode_name(l.cache_mode));
  row("blocks", side_text("P", l.prefill, l.num_regions) + ", " + side_text("D", l.decode, l.num_regions));
  row("memory", gib(r.memory_bytes) + " registered by " + std::to_string(o.prefill_tp + o.decode_tp) +
                    " processes (P " + std::to_string(o.prefill_tp) + " x " + gib(l.prefill.bytes_per_rank) + ", D " +
                    std::to_string(o.decode_tp) + " x " + gib(l.decode.bytes_per_rank) + "): room for " +
                    std::to_string(o.concurrency) + " requests in flight of up to " + std::to_string(o.max_tokens) +
                    " tokens");
  row("requests", std::to_string(r.requests) + ": " + std::to_string(r.completed) + " completed, " +
                      std::to_string(r.failed) + " failed (" + std::to_string(r.no_hit) + " without a hit, " +
                      std::to_string(r.partial_hit) + " partial hits, " + std::to_string(r.full_hit) + " full hits; " +
                      std::to_string(r.with_placeholders) + " with Mamba placeholders)");
  row("bytes", gb(r.bytes) + " moved (attention " + gb(r.attention_bytes) + ", Mamba " + gb(r.mamba_bytes) + ") by " +
                   std::to_string(r.transfers_ok) + " transfers");
  row("descriptors", std::to_string(r.descriptors_before) + " before coalescing, " +
                         std::to_string(r.descriptors_after) + " after");
  row("throughput", fmt("%.2f GB/s", static_cast<double>(r.bytes) / std::max(1e-9, r.seconds) / 1e9) + " over " +
                        fmt("%.2f s", r.seconds) + " (set-up " + fmt("%.1f s", r.setup_seconds) + " before)");
  if (!r.request_ms.empty()) {
    row("per request", "p50 " + fmt("%.2f ms", percentile(r.request_ms, 0.5)) + ", p99 " +
                           fmt("%.2f ms", percentile(r.request_ms, 0.99)) + ", max " +
                           fmt("%.2f ms", r.request_ms.back()) + " (the slowest D rank's transfer)");
  }
  const bool bytes_ok = r.mismatches == 0 && r.scan_mismatches == 0;
  row("verification", std::string(bytes_ok ? "every byte verified: " : "WRONG BYTES: ") + gb(r.verified_bytes) +
                          " compared in the requests' blocks (" + std::to_string(r.mismatches) +
                          " wrong ranges); final scan of " + gib(r.scanned_bytes) +
                          (r.kill ? " (the ranks still running)" : "") + ": " +
                          (r.scan_mismatches == 0 ? "nothing else changed"
                                                  : std::to_string(r.scan_mismatches) + " regions changed"));
  if (r.kill) {
    const KillResult& k = *r.kill;
    row("kill", "P rank " + std::to_string(k.prefill_rank) + " killed after " + std::to_string(k.after_requests) +
                    " requests; D rank(s) " + ranks_text(k.affected_decode_ranks) + " depend on it: " +
                    std::to_string(k.failed_transfers) + " transfers failed cleanly (" + kill_statuses(k) +
                    "), the slowest after " + std::to_string(k.max_failure_ms) + " ms (deadline " +
                    std::to_string(o.deadline_ms) + " ms); " + std::to_string(k.unaffected_transfers_after_kill) +
                    " transfers of the other D ranks completed since");
  }
  const int status = r.exit_status();
  row("result", status == 0   ? std::string("OK")
                : status == 5 ? "requests failed as --kill-prefill-after asked, cleanly (exit status 5)"
                              : "FAILED (exit status 4): see the errors");
  return s;
}

json render_json(const Options& o, const Layout& l, const Result& r) {
  json groups = json::array();
  for (const auto& g : l.groups) groups.push_back({{"kind", kind_text(g.kind)}, {"layers", g.layers}});
  json kill = nullptr;
  if (r.kill) {
    json statuses = json::array();
    for (const auto& [status, n] : r.kill->failure_statuses) statuses.push_back({{"status", status}, {"count", n}});
    kill = {{"prefill_rank", r.kill->prefill_rank},
            {"after_requests", r.kill->after_requests},
            {"affected_decode_ranks", r.kill->affected_decode_ranks},
            {"failed_transfers", r.kill->failed_transfers},
            {"failure_statuses", statuses},
            {"max_failure_ms", r.kill->max_failure_ms},
            {"unaffected_transfers_after_kill", r.kill->unaffected_transfers_after_kill}};
  }
  json request_ms = nullptr;
  if (!r.request_ms.empty()) {
    request_ms = {{"p50", percentile(r.request_ms, 0.5)},
                  {"p99", percentile(r.request_ms, 0.99)},
                  {"max", r.request_ms.back()}};
  }
  return {
      {"model",
       {{"name", l.model.name},
        {"layers", l.model.layer_pattern.size()},
        {"attention_layers", l.model.num_attention_layers()},
        {"mamba_layers", l.model.num_mamba_layers()}}},
      {"kv_cache_groups", groups},
      {"regions", l.num_regions},
      {"prefill", side_json(l.prefill)},
      {"decode", side_json(l.decode)},
      {"settings",
       {{"transport", transport_name(o.transport)},
        {"op", o.write ? "write" : "read"},
        {"mamba_cache_mode", cache_mode_name(l.cache_mode)},
        {"min_tokens", o.min_tokens},
        {"max_tokens", o.max_tokens},
        {"partial_hit_rate", o.partial_hit_rate},
        {"full_hit_rate", o.full_hit_rate},
        {"concurrency", o.concurrency},
        {"deadline_ms", o.deadline_ms},
        {"seed", o.seed}}},
      {"memory_bytes", r.memory_bytes},
      {"setup_seconds", r.setup_seconds},
      {"requests",
       {{"total", r.requests},
        {"completed", r.completed},
        {"failed", r.failed},
        {"no_hit", r.no_hit},
        {"partial_hit", r.partial_hit},
        {"full_hit", r.full_hit},
        {"with_placeholders", r.with_placeholders}}},
      {"transfers", {{"completed", r.transfers_ok}, {"failed", r.transfers_failed}}},
      {"bytes", r.bytes},
      {"attention_bytes", r.attention_bytes},
      {"mamba_bytes", r.mamba_bytes},
      {"descriptors_before_coalescing", r.descriptors_before},
      {"descriptors_after_coalescing", r.descriptors_after},
      {"seconds", r.seconds},
      {"gb_per_s", static_cast<double>(r.bytes) / std::max(1e-9, r.seconds) / 1e9},
      {"request_ms", request_ms},
      {"verification",
       {{"ok", r.mismatches == 0 && r.scan_mismatches == 0},
        {"verified_bytes", r.verified_bytes},
        {"wrong_ranges", r.mismatches},
        {"scanned_bytes", r.scanned_bytes},
        {"changed_regions", r.scan_mismatches}}},
      {"kill", kill},
      {"rank_messages", r.rank_messages},
  };
}

json null_demo_fields() {
  json out;
  for (const char* k : {"model", "kv_cache_groups", "regions", "prefill", "decode", "settings", "memory_bytes",
                        "setup_seconds", "requests", "transfers", "bytes", "attention_bytes", "mamba_bytes",
                        "descriptors_before_coalescing", "descriptors_after_coalescing", "seconds", "gb_per_s",
                        "request_ms", "verification", "kill", "rank_messages"}) {
    out[k] = nullptr;
  }
  return out;
}

}  // namespace pdkv::cli::demo
