// What a `pdkv demo` run found, as the coordinator collects it from its ranks' reports, and the
// two ways it is printed: the text summary and the JSON document (docs/cli-json.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_error.hpp"
#include "demo_layout.hpp"
#include "demo_options.hpp"

namespace pdkv::cli::demo {

struct KillResult {
  uint32_t prefill_rank = 0;
  uint32_t after_requests = 0;               // requests completed when it was killed
  std::vector<uint32_t> affected_decode_ranks;  // D ranks that handshake with it
  uint64_t failed_transfers = 0;             // D transfers that failed after the kill
  std::map<std::string, uint64_t> failure_statuses;
  uint64_t max_failure_ms = 0;               // the slowest of them, from its start to its failure
  uint64_t unaffected_transfers_after_kill = 0;  // transfers of other D ranks completed since
};

struct Result {
  uint64_t memory_bytes = 0;
  double setup_seconds = 0;
  uint32_t requests = 0, completed = 0, failed = 0;
  uint32_t no_hit = 0, partial_hit = 0, full_hit = 0, with_placeholders = 0;
  uint64_t transfers_ok = 0, transfers_failed = 0;
  uint64_t bytes = 0, attention_bytes = 0, mamba_bytes = 0;
  uint64_t descriptors_before = 0, descriptors_after = 0;
  double seconds = 0;                  // first request dispatched -> last request over
  std::vector<double> request_ms;      // per completed request (sorted when reported)
  uint64_t verified_bytes = 0;         // D bytes compared per request (moved and untouched)
  uint64_t mismatches = 0;
  uint64_t scanned_bytes = 0;          // every rank's whole memory at the end
  uint64_t scan_mismatches = 0;
  std::optional<KillResult> kill;
  std::vector<CliError> problems;      // why the demo failed (exit 4); empty when it did not
  std::vector<std::string> rank_messages;  // what the ranks printed (UCX warnings, lost peers)

  // 0, 4 (problems) or 5 (requests failed because --kill-prefill-after killed a P rank).
  int exit_status() const;
  // The errors of the JSON document: the problems, or the kill's one line.
  std::vector<CliError> errors() const;
};

// The summary as text (after the log).
std::string render_text(const Options& o, const Layout& l, const Result& r);
// The demo's fields of the JSON document (the envelope is added by the caller).
nlohmann::json render_json(const Options& o, const Layout& l, const Result& r);
// The demo's fields, all null (a usage or configuration error stopped it before it ran).
nlohmann::json null_demo_fields();

// "1.52 GiB", "233.4 MiB"; "2.41 GB" (decimal) for moved bytes.
std::string gib(uint64_t bytes);
std::string gb(uint64_t bytes);

}  // namespace pdkv::cli::demo
