// The emitter's side of block-indexed attention reads (CompileOptions::indexed_reads): where a
// fragmented attention group's tokens lie in its D and P lists, found without walking them into
// spans. Not installed; not part of the public API. The coverage check derives the same segment
// again on its own (plan_coverage.cpp) and compares.
#pragma once

#include "plan_internal.hpp"

namespace pdkv::core::plan_detail {

// Fills x's positions, token fields, kernel_blocks, runs and largest ids for attention group v
// (tokens per block filled) and returns true when its reads can be named by block position and
// its ids form at least min_runs runs (consecutive on both sides), the first of them within about
// 4 x min_runs ids (most ids start a run: logical ids scattered over the pool, not kernel ids):
// equal tokens per kernel block and kernel blocks per id on both sides, both lists starting at
// the same kernel position within an id (so that a listed D id and its P id hold the same
// tokens), some token to read, every needed block-table index inside both lists and no null id
// among the positions read. Returns false otherwise, and wherever trimming the group could fail
// (the walk then runs and reports it). Geometry (bytes, P rank) is the caller's.
bool indexed_segment(const PlanGroupView& v, uint64_t min_runs, IndexedGroup& x);

}  // namespace pdkv::core::plan_detail
