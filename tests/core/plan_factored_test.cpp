// The factored plan's region repeats (CompileOptions::region_repeats, docs/factored-plan.md
// stage 1): regions laid out alike are recorded as RegionRepeats of the first one's reads.
//  * on vLLM's Nemotron-3-Nano request the five regions after the first are repeats, and the plan
//    expands to the listed plan read for read (random requests: plan_paths.hpp compares the two
//    forms on every request the template and property tests compile);
//  * the coverage check proves a repeat through the region it copies, and refuses a tampered
//    one: malformed, dropped, duplicated, into its own region, shifted, past D's or P's regions.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "nemotron_pair.hpp"
#include "plan_paths.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

// A fragmented request on Nemotron P TP4 -> D TP2 rank 0 (FlashInfer kernel blocks, no Mamba
// cache), drawn until it has Mamba ids in range; with its listed and its factored plans.
struct Case {
  Pair x = nemotron(2, 0, 4, true, MambaCacheMode::None);
  std::vector<PlanGroup> groups;
  std::vector<PlanGroupView> views;
  PlanContextVerdict verdict;
  TransferPlan listed, factored;

  explicit Case(uint64_t seed) {
    std::mt19937_64 rng(seed);
    verdict = judge_plan_context(x.ctx);
    // Fragmented enough that each region's attention reads are several.
    while (source_reads() < 3) {
      bool bad = true;
      while (bad) groups = request(rng, x, MambaCacheMode::None, bad);
      views = views_of(groups);
      listed = compile_transfer_plan(x.ctx, groups);
      compile_transfer_plan_into(x.ctx, views, factored, verdict, CompileOptions{.region_repeats = true});
    }
  }

  uint64_t source_reads() const {
    for (const RankReads& rr : factored.ranks)
      if (!rr.repeats.empty()) return rr.repeats[0].end - rr.repeats[0].begin;
    return 0;
  }

  // The rank whose reads carry the repeats.
  RankReads& repeated() {
    for (RankReads& rr : factored.ranks)
      if (!rr.repeats.empty()) return rr;
    throw std::runtime_error("no rank has region repeats");
  }

  // validate_transfer_plan_views on the (tampered) factored plan: the status it throws, and its
  // message in `msg`; Ok when it accepts the plan.
  Status check(std::string& msg, const PlanContext* ctx = nullptr) {
    try {
      validate_transfer_plan_views(factored, ctx != nullptr ? *ctx : x.ctx, views);
    } catch (const Error& e) {
      msg = e.what();
      return e.status();
    }
    return Status::Ok;
  }
};

TEST(PlanFactored, RegionsAlikeAreRepeatsAndExpandToTheListedPlan) {
  Case c(7);
  RankReads& rr = c.repeated();
  // The attention group's six regions, one head per rank on both sides: region 0 listed, 1..5
  // repeated right after it.
  ASSERT_EQ(rr.repeats.size(), 5u);
  for (size_t k = 0; k < rr.repeats.size(); ++k) {
    EXPECT_EQ(rr.repeats[k].local_region, k + 1);
    EXPECT_EQ(rr.repeats[k].remote_region, k + 1);
    EXPECT_EQ(rr.repeats[k].begin, rr.repeats[0].begin);
    EXPECT_EQ(rr.repeats[k].end, rr.repeats[0].end);
  }
  const uint64_t copied = 5 * (rr.repeats[0].end - rr.repeats[0].begin);
  EXPECT_GT(copied, 5u * 3);  // fragmented: several spans each
  size_t listed_reads = 0, factored_reads = 0;
  for (const RankReads& r : c.listed.ranks) listed_reads += r.reads.size();
  for (const RankReads& r : c.factored.ranks) factored_reads += r.reads.size();
  EXPECT_EQ(factored_reads + copied, listed_reads);
  EXPECT_EQ(read_count(rr), rr.reads.size() + copied);
  // for_each_read walks the issue order of the listed plan.
  for (size_t i = 0; i < c.factored.ranks.size(); ++i) {
    std::vector<PlanRead> walked;
    for_each_read(c.factored.ranks[i], [&](const PlanRead& r) { walked.push_back(r); });
    EXPECT_TRUE(walked == c.listed.ranks[i].reads) << "P rank " << c.factored.ranks[i].p_rank;
  }
  TransferPlan flat = c.factored;
  expand_plan(flat);
  expect_same_plan(flat, c.listed);
  std::string msg;
  EXPECT_EQ(c.check(msg), Status::Ok) << msg;
}

TEST(PlanFactored, RandomRequestsUseRepeatsAndExpandToTheListedPlan) {
  std::mt19937_64 rng(20261129);
  size_t with_repeats = 0;
  for (const bool fi : {true, false}) {
    const Pair x = nemotron(2, 1, 4, fi, MambaCacheMode::Align);
    const PlanContextVerdict v = judge_plan_context(x.ctx);
    for (int it = 0; it < 30; ++it) {
      bool bad = false;
      const auto groups = request(rng, x, MambaCacheMode::Align, bad);
      TransferPlan want;
      try {
        want = compile_transfer_plan(x.ctx, groups);
      } catch (const Error&) {
        continue;  // plan_paths.hpp compares the errors
      }
      TransferPlan got;
      compile_transfer_plan_into(x.ctx, views_of(groups), got, v, CompileOptions{.region_repeats = true});
      for (const RankReads& rr : got.ranks) with_repeats += rr.repeats.empty() ? 0 : 1;
      expect_factored_same(x.ctx, views_of(groups), v, want);
    }
  }
  EXPECT_GT(with_repeats, 30u);
}

TEST(PlanFactored, AReadThatCouldExtendARepeatsLastCopyWritesThatRepeatOut) {
  // The attention group first, then the Mamba groups, the first of them on region 5 first: the
  // attention source rank's next read after the repeats is of regions (5, 5), the pair of the
  // last repeat, so the emitter writes that repeat out as listed reads (coalescing stays the
  // listed plan's) and keeps the others.
  Case c(19);
  std::vector<PlanGroup> groups;
  groups.push_back(c.groups.back());
  for (size_t g = 0; g + 1 < c.groups.size(); ++g) groups.push_back(c.groups[g]);
  groups[1].regions = {5, 0, 1, 2, 3, 4};
  const TransferPlan listed = compile_transfer_plan(c.x.ctx, groups);
  const std::vector<PlanGroupView> views = views_of(groups);
  TransferPlan factored;
  compile_transfer_plan_into(c.x.ctx, views, factored, c.verdict, CompileOptions{.region_repeats = true});
  size_t repeats = 0;
  for (const RankReads& rr : factored.ranks) repeats += rr.repeats.size();
  EXPECT_EQ(repeats, 4u);  // regions 1..4; region 5's copies listed
  try {
    validate_transfer_plan_views(factored, c.x.ctx, views);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  TransferPlan flat = factored;
  expand_plan(flat);
  expect_same_plan(flat, listed);
  expect_paths_agree(c.x.ctx, groups);
}

TEST(PlanFactored, MalformedRepeatsAreRefusedNamingTheRepeat) {
  std::string msg;
  {
    Case c(11);
    RankReads& rr = c.repeated();
    rr.repeats[2].end = rr.reads.size() + 1;
    EXPECT_EQ(c.check(msg), Status::InvalidArgument);
    EXPECT_NE(msg.find("region repeat 2"), std::string::npos) << msg;
    // for_each_read refuses it too, before reading anything.
    EXPECT_THROW(for_each_read(rr, [](const PlanRead&) {}), Error);
  }
  {
    Case c(11);
    RankReads& rr = c.repeated();
    rr.repeats[1].begin = rr.repeats[1].end;
    EXPECT_EQ(c.check(msg), Status::InvalidArgument);
    EXPECT_NE(msg.find("region repeat 1"), std::string::npos) << msg;
  }
  {
    Case c(11);
    RankReads& rr = c.repeated();
    rr.repeats[3].end -= 1;
    EXPECT_EQ(c.check(msg), Status::InvalidArgument);
    EXPECT_NE(msg.find("before the previous repeat's position"), std::string::npos) << msg;
  }
}

TEST(PlanFactored, TamperedRepeatsFailTheCoverageCheck) {
  std::string msg;
  {  // a region left out: its bytes are missing
    Case c(13);
    c.repeated().repeats.erase(c.repeated().repeats.begin() + 4);
    EXPECT_EQ(c.check(msg), Status::Coverage);
    EXPECT_NE(msg.find("region 5"), std::string::npos) << msg;
  }
  {  // a region written twice
    Case c(13);
    auto& reps = c.repeated().repeats;
    reps.insert(reps.begin() + 2, reps[2]);
    EXPECT_EQ(c.check(msg), Status::Coverage);
    EXPECT_NE(msg.find("region 3"), std::string::npos) << msg;
  }
  {  // a repeat into the region it copies
    Case c(13);
    c.repeated().repeats[0].local_region = c.repeated().reads[c.repeated().repeats[0].begin].local_region;
    c.repeated().repeats[0].remote_region = c.repeated().reads[c.repeated().repeats[0].begin].remote_region;
    EXPECT_EQ(c.check(msg), Status::Coverage);
  }
  {  // a repeat missing its source's first read
    Case c(13);
    c.repeated().repeats[1].begin += 1;
    EXPECT_EQ(c.check(msg), Status::Coverage);
    EXPECT_NE(msg.find("region 2"), std::string::npos) << msg;
  }
  {  // into a region D does not have
    Case c(13);
    c.repeated().repeats[4].local_region = 6;
    EXPECT_EQ(c.check(msg), Status::OutOfBounds);
    EXPECT_NE(msg.find("D region 6 does not exist"), std::string::npos) << msg;
  }
  {  // from a region P does not have: checked copy by copy on P's side too
    Case c(13);
    c.repeated().repeats[2].remote_region = 9;
    EXPECT_EQ(c.check(msg), Status::OutOfBounds);
    EXPECT_NE(msg.find("P region 9 does not exist"), std::string::npos) << msg;
  }
}

}  // namespace
