// `pdkv demo`'s coordinator: starts one process per P and D rank (the same binary, hidden
// subcommand, demo_rank.hpp), plays both engines' schedulers (block pools, the request stream)
// and the router between them, kills a P rank when asked, and collects every rank's report.
// It never touches KV memory itself: the ranks fill, move and verify it.
#pragma once

#include "demo_layout.hpp"
#include "demo_options.hpp"
#include "demo_result.hpp"

namespace pdkv::cli::demo {

// Runs the demo. Progress goes to stdout (a live line on a terminal, a plain log otherwise; nothing
// under --json), the ranks' own messages to stderr (collected instead under --json). Throws
// CliError for what stops it before any request runs: a configuration error for a rank that
// cannot set up (its error), an internal error for a rank that dies or never answers.
Result run_coordinator(const Options& o, const Layout& l);

// Bytes the run registers in all its processes, and the memory the machine has available
// (MemAvailable, 0 when unknown).
uint64_t demo_memory_bytes(const Options& o, const Layout& l);
uint64_t available_memory_bytes();

}  // namespace pdkv::cli::demo
