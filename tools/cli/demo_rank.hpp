// One engine rank of `pdkv demo`, run as its own process (`pdkv __demo-rank`, started by the
// demo's coordinator, never by hand). It maps and fills its memory, runs a transfer agent, and
// follows the coordinator's messages on fd 3, answering on fd 4 (demo_wire.hpp); its stdout and
// stderr are the coordinator's log pipe.
//
// Messages (coordinator -> rank): init, peers, request, abort, release, finish.
// Replies (rank -> coordinator): ready, connected, done (D: a request's outcome and its
// verification), freed (P: its blocks of a request may be reused), released, final, error.
//
// For the demo's own tests only, PDKV_DEMO_FAULT=flip-byte|stray-write makes D rank 0 corrupt
// one byte (received, or outside every request) so that they can see the checks fail.
#pragma once

namespace pdkv::cli::demo {

inline constexpr const char* kRankCommand = "__demo-rank";
inline constexpr int kRankInFd = 3;
inline constexpr int kRankOutFd = 4;

// The process's exit status: 0 after a clean finish, 3 after an error it reported.
int run_rank_process();

}  // namespace pdkv::cli::demo
