// Test helper: the two compile paths of a context must agree. compile_transfer_plan runs the
// per-read path (every Mamba read derived and checked on its own); compile_transfer_plan_into
// with judge_plan_context's verdict copies the context's verified Mamba template and accepts
// whole template pages in the coverage check. Both must give the same plan, field for field and
// read for read in issue order, or fail with the same status and message.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::core::test {

// The views of owning groups (valid while `groups` lives).
inline std::vector<PlanGroupView> views_of(const std::vector<PlanGroup>& groups) {
  std::vector<PlanGroupView> v;
  for (const PlanGroup& g : groups) v.push_back(view_of(g));
  return v;
}

inline void expect_same_plan(const TransferPlan& a, const TransferPlan& b) {
  EXPECT_EQ(a.d_engine_id, b.d_engine_id);
  EXPECT_EQ(a.p_engine_id, b.p_engine_id);
  EXPECT_EQ(a.d_rank, b.d_rank);
  EXPECT_EQ(a.p_tp, b.p_tp);
  EXPECT_EQ(a.layer_begin, b.layer_begin);
  EXPECT_EQ(a.layer_end, b.layer_end);
  EXPECT_EQ(a.notify_ranks, b.notify_ranks);
  EXPECT_EQ(a.notifications_per_p_rank, b.notifications_per_p_rank);
  EXPECT_TRUE(a.permute == b.permute);
  EXPECT_EQ(a.stats.pieces_before_coalescing, b.stats.pieces_before_coalescing);
  EXPECT_EQ(a.stats.pieces_after_coalescing, b.stats.pieces_after_coalescing);
  EXPECT_EQ(a.stats.bytes, b.stats.bytes);
  EXPECT_EQ(a.stats.attention_bytes, b.stats.attention_bytes);
  EXPECT_EQ(a.stats.mamba_bytes, b.stats.mamba_bytes);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    EXPECT_EQ(a.ranks[i].p_rank, b.ranks[i].p_rank);
    EXPECT_EQ(a.ranks[i].bytes, b.ranks[i].bytes);
    EXPECT_TRUE(a.ranks[i].reads == b.ranks[i].reads) << "reads from P rank " << a.ranks[i].p_rank << " differ";
  }
  ASSERT_EQ(a.zero.size(), b.zero.size());
  for (size_t g = 0; g < a.zero.size(); ++g) {
    EXPECT_EQ(a.zero[g].regions, b.zero[g].regions);
    EXPECT_TRUE(a.zero[g].zero == b.zero[g].zero);
    EXPECT_EQ(a.zero[g].unfilled_states, b.zero[g].unfilled_states);
    EXPECT_EQ(a.zero[g].permute_blocks, b.zero[g].permute_blocks);
    EXPECT_EQ(a.zero[g].permute_regions, b.zero[g].permute_regions);
  }
}

// How many plans expect_factored_same compiled that held an IndexedReads entry (a test program
// driving many requests through it can check that the block-indexed form was exercised).
inline size_t& indexed_plans_seen() {
  static size_t n = 0;
  return n;
}

// The factored forms of the same request: region repeats (CompileOptions::region_repeats),
// block-indexed reads (indexed_reads, with indexed_min_runs 1 so that every fragmented or
// consecutive group that can be is read by position), and both. Each one, expanded, is the
// listed plan read for read (stats included); is accepted as it is by the coverage check (which
// proves region repeats through the region they copy and indexed entries against the request);
// and, compiled into a plan last used by other requests, is the same again.
inline void expect_factored_same(const PlanContext& ctx, const std::vector<PlanGroupView>& views,
                                 const PlanContextVerdict& v, const TransferPlan& want) {
  const CompileOptions forms[] = {{.region_repeats = true},
                                  {.region_repeats = true, .indexed_reads = true, .indexed_min_runs = 1},
                                  {.region_repeats = false, .indexed_reads = true, .indexed_min_runs = 1}};
  static TransferPlan shared;
  for (const CompileOptions& form : forms) {
    TransferPlan fresh;
    for (int i = 0; i < 3; ++i) {
      TransferPlan& got = i < 2 ? fresh : shared;
      try {
        compile_transfer_plan_into(ctx, views, got, v, form);
      } catch (const Error& e) {
        ADD_FAILURE() << "the factored form (repeats " << form.region_repeats << ", indexed " << form.indexed_reads
                      << ") refused what the per-read path planned: " << e.what();
        return;
      }
      bool indexed = false;
      for (const RankReads& rr : got.ranks) indexed = indexed || !rr.indexed.empty();
      if (indexed && i == 0) ++indexed_plans_seen();
      try {
        validate_transfer_plan_views(got, ctx, views);
      } catch (const Error& e) {
        ADD_FAILURE() << "the check refused the factored plan (repeats " << form.region_repeats << ", indexed "
                      << form.indexed_reads << ") it was compiled with: " << e.what();
      }
      TransferPlan flat = got;
      expand_plan(flat);
      expect_same_plan(flat, want);
      for (const RankReads& rr : flat.ranks) EXPECT_FALSE(rr.factored());
    }
  }
}

// Compiles `groups` through the verdict path into a reused plan (twice, so that stale buffers
// would show) and compares with `want` (the per-read path's plan). A third compile goes into
// one plan shared by every call of the test program, last filled by another request (larger or
// smaller, other P ranks, another context): reads or ranks left from it would show.
inline void expect_verdict_path_same(const PlanContext& ctx, const std::vector<PlanGroup>& groups,
                                     const TransferPlan& want) {
  const PlanContextVerdict v = judge_plan_context(ctx);
  const std::vector<PlanGroupView> views = views_of(groups);
  static TransferPlan shared;
  TransferPlan fresh;
  for (int i = 0; i < 3; ++i) {
    TransferPlan& got = i < 2 ? fresh : shared;
    try {
      compile_transfer_plan_into(ctx, views, got, v);
    } catch (const Error& e) {
      ADD_FAILURE() << "the verdict path refused what the per-read path planned: " << e.what();
      return;
    }
    expect_same_plan(got, want);
  }
  expect_factored_same(ctx, views, v, want);
}

// Both paths on one request: equal plans, or the same error.
inline void expect_paths_agree(const PlanContext& ctx, const std::vector<PlanGroup>& groups) {
  TransferPlan want;
  try {
    want = compile_transfer_plan(ctx, groups);
  } catch (const Error& e) {
    const PlanContextVerdict v = judge_plan_context(ctx);
    const std::vector<PlanGroupView> views = views_of(groups);
    TransferPlan got;
    try {
      compile_transfer_plan_into(ctx, views, got, v);
      ADD_FAILURE() << "the verdict path planned what the per-read path refused: " << e.what();
    } catch (const Error& f) {
      EXPECT_EQ(f.status(), e.status());
      EXPECT_EQ(std::string(f.what()), std::string(e.what()));
    }
    // The C API's form refuses it with the same error (a group it would read by position
    // reports what the listed path reports).
    try {
      compile_transfer_plan_into(ctx, views, got, v,
                                 CompileOptions{.region_repeats = true, .indexed_reads = true, .indexed_min_runs = 1});
      ADD_FAILURE() << "the indexed form planned what the per-read path refused: " << e.what();
    } catch (const Error& f) {
      EXPECT_EQ(f.status(), e.status());
      EXPECT_EQ(std::string(f.what()), std::string(e.what()));
    }
    return;
  }
  expect_verdict_path_same(ctx, groups, want);
}

}  // namespace pdkv::core::test
