// `pdkv demo`: runs a P/D deployment of a model on this machine, one process per rank, moves a
// stream of requests with the transfer executor and verifies every byte (demo_coordinator.hpp).
#pragma once

#include <string>
#include <vector>

namespace pdkv::cli {

// Runs `pdkv demo ARGS`, prints the log and the summary (or the JSON document), returns the exit
// status: 0 ok, 4 the demo failed (wrong bytes, an unexpected failure), 5 requests failed because
// --kill-prefill-after killed a P rank and everything else verified. Throws CliError for usage
// (1), configuration (2) and internal (3) errors, which main() reports.
int run_demo(const std::vector<std::string>& argv);

}  // namespace pdkv::cli
