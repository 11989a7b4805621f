// Block-indexed attention reads (CompileOptions::indexed_reads, docs/factored-plan.md
// "Block-indexed reads"): a fragmented attention group recorded as one IndexedReads entry over a
// copy of its block ids.
//  * on vLLM's Nemotron-3-Nano request (FlashInfer logical ids, fragmented) the attention group is
//    one entry over the six region pairs, and the plan expands to the listed plan read for read;
//    a consecutive request stays listed (random requests: plan_paths.hpp compares every form on
//    every request the template and property tests compile);
//  * the coverage check proves an entry against the request and refuses a tampered one: another
//    id, count, token, geometry, group or region pairs, an entry dropped or given twice, an id past
//    a region, malformed fields (refused before anything is read);
//  * what the listed path refuses (an id listed twice, a Mamba page or a zero range on a written
//    block) the indexed form refuses with the same error.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "nemotron_pair.hpp"
#include "plan_paths.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

constexpr CompileOptions kIndexed{.region_repeats = true, .indexed_reads = true};

// vLLM's request on Nemotron-3-Nano P TP4 -> D TP2 rank 0 with FlashInfer kernel blocks: four
// Mamba groups and the attention group over LOGICAL ids (kernel_blocks_per_id = ppl on both
// sides), D's ids a shuffled sample of its pool (one run per id), P's likewise.
struct Case {
  Pair x = nemotron(2, 0, 4, true, MambaCacheMode::None);
  std::vector<PlanGroup> groups;
  std::vector<PlanGroupView> views;
  PlanContextVerdict verdict;
  TransferPlan listed, indexed;

  explicit Case(uint64_t seed, bool fragmented = true, uint64_t blocks = 40) {
    std::mt19937_64 rng(seed);
    verdict = judge_plan_context(x.ctx);
    const uint64_t db = x.dg.block_size, pb = x.pg.block_size;
    const uint64_t n = blocks * db - 7;  // the last block partly filled: a zero range on it
    auto sample = [&](uint64_t pool, uint64_t count) {
      std::vector<uint64_t> all(pool - 1);
      std::iota(all.begin(), all.end(), 1);
      if (fragmented) {
        std::shuffle(all.begin(), all.end(), rng);
      } else {
        std::rotate(all.begin(), all.begin() + 100, all.end());
      }
      all.resize(count);
      return all;
    };
    const auto local = sample(kDPool, 4 + (n + db - 1) / db);
    const auto remote = sample(kPPool, 4 + (n + pb - 1) / pb);
    for (int g = 0; g < 4; ++g) {
      PlanGroup m;
      m.trim.kind = GroupKind::Mamba;
      m.trim.local_blocks = {local[static_cast<size_t>(g)]};
      m.trim.remote_blocks = {remote[static_cast<size_t>(g)]};
      m.trim.remote_computed_tokens = n;
      if (g == 3) m.regions = {0, 1, 2, 3, 4};
      groups.push_back(m);
    }
    PlanGroup a;
    a.trim.remote_computed_tokens = n;
    a.trim.local_blocks.assign(local.begin() + 4, local.end());
    a.trim.remote_blocks.assign(remote.begin() + 4, remote.end());
    a.trim.local_kernel_blocks_per_id = x.dg.physical_per_logical;
    a.trim.remote_kernel_blocks_per_id = x.pg.physical_per_logical;
    groups.push_back(a);
    compile();
  }

  void compile() {
    views = views_of(groups);
    listed = compile_transfer_plan(x.ctx, groups);
    compile_transfer_plan_into(x.ctx, views, indexed, verdict, kIndexed);
  }

  // The rank holding the entry.
  RankReads& entry_rank() {
    for (RankReads& rr : indexed.ranks)
      if (!rr.indexed.empty()) return rr;
    throw std::runtime_error("no rank has an indexed entry");
  }

  // validate_transfer_plan_views on the (tampered) plan: the status it throws, its message in
  // `msg`; Ok when it accepts the plan.
  Status check(std::string& msg) {
    try {
      validate_transfer_plan_views(indexed, x.ctx, views);
    } catch (const Error& e) {
      msg = e.what();
      return e.status();
    }
    return Status::Ok;
  }
};

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(PlanIndexed, AFragmentedAttentionGroupIsOneEntryAndExpandsToTheListedPlan) {
  Case c(1);
  const RankReads& rr = c.entry_rank();
  ASSERT_EQ(rr.indexed.size(), 1u);
  const IndexedReads& x = rr.indexed[0];
  EXPECT_EQ(x.group, 4u);
  EXPECT_EQ(x.count, 40u);  // one listed id per logical block
  EXPECT_EQ(x.pairs_end - x.pairs_begin, 6u);
  EXPECT_EQ(x.tokens, 40 * c.x.dg.block_size - 7);
  EXPECT_EQ(rr.ids.size(), 80u);  // D's and P's ids, copied
  for (const RankReads& r : c.indexed.ranks) EXPECT_TRUE(r.repeats.empty() || &r != &rr);
  // The plan is the listed plan, read for read and in issue order; its stats count those reads.
  TransferPlan flat = c.indexed;
  expand_plan(flat);
  expect_same_plan(flat, c.listed);
  size_t reads = 0;
  for (const RankReads& r : c.indexed.ranks) reads += read_count(r);
  EXPECT_EQ(reads, c.indexed.stats.pieces_after_coalescing);
  std::vector<PlanRead> walked;
  for_each_read(rr, [&](const PlanRead& r) { walked.push_back(r); });
  for (const RankReads& r : c.listed.ranks)
    if (r.p_rank == rr.p_rank) EXPECT_EQ(walked, r.reads);
  std::string msg;
  EXPECT_EQ(c.check(msg), Status::Ok) << msg;
  expect_paths_agree(c.x.ctx, c.groups);
}

TEST(PlanIndexed, AConsecutiveRequestStaysListed) {
  Case c(2, false);
  for (const RankReads& rr : c.indexed.ranks) EXPECT_TRUE(rr.indexed.empty());
  // And one below the runs threshold too (15 ids, 15 runs, fewer than the default 16).
  Case d(3, true, 15);
  for (const RankReads& rr : d.indexed.ranks) EXPECT_TRUE(rr.indexed.empty());
  // The fragmented request given as KERNEL ids (each logical id expanded to its ppl kernel ids):
  // runs of ppl ids, far fewer reads than ids, so it is planned listed; with every run taken
  // (indexed_min_runs 1) it is one entry over the kernel ids and still the listed plan.
  Case e(4);
  PlanGroup& a = e.groups[4];
  const uint64_t k = a.trim.local_kernel_blocks_per_id;
  ASSERT_GT(k, 1u);
  std::vector<uint64_t> dk, pk;
  for (uint64_t id : a.trim.local_blocks)
    for (uint64_t j = 0; j < k; ++j) dk.push_back(id * k + j);
  for (uint64_t id : a.trim.remote_blocks)
    for (uint64_t j = 0; j < k; ++j) pk.push_back(id * k + j);
  a.trim.local_blocks = dk;
  a.trim.remote_blocks = pk;
  a.trim.local_kernel_blocks_per_id = a.trim.remote_kernel_blocks_per_id = 1;
  e.compile();
  for (const RankReads& rr : e.indexed.ranks) EXPECT_TRUE(rr.indexed.empty());
  TransferPlan every;
  compile_transfer_plan_into(e.x.ctx, e.views, every, e.verdict,
                             CompileOptions{.region_repeats = true, .indexed_reads = true, .indexed_min_runs = 1});
  size_t entries = 0;
  for (const RankReads& rr : every.ranks) entries += rr.indexed.size();
  EXPECT_EQ(entries, 1u);
  expand_plan(every);
  expect_same_plan(every, e.listed);
}

TEST(PlanIndexed, MalformedEntriesAreRefusedNamingTheEntry) {
  std::string msg;
  const auto refused = [&](auto&& tamper, const std::string& part) {
    Case c(5);
    tamper(c.entry_rank());
    EXPECT_EQ(c.check(msg), Status::InvalidArgument) << part;
    EXPECT_TRUE(has(msg, "indexed reads ")) << msg;
    EXPECT_TRUE(has(msg, part)) << msg;
    // for_each_read and read_count refuse it too, before reading anything.
    EXPECT_THROW(for_each_read(c.entry_rank(), [](const PlanRead&) {}), Error);
    EXPECT_THROW(read_count(c.entry_rank()), Error);
  };
  refused([](RankReads& rr) { rr.indexed[0].count = 0; }, "names ids past");
  refused([](RankReads& rr) { rr.indexed[0].count += 1; }, "names ids past");
  refused([](RankReads& rr) { rr.ids.pop_back(); }, "names ids past");
  refused([](RankReads& rr) { rr.indexed[0].ids_begin = UINT64_MAX - 3; }, "names ids past");
  refused([](RankReads& rr) { rr.indexed[0].pairs_end = rr.indexed[0].pairs_begin; }, "region pairs");
  refused([](RankReads& rr) { rr.indexed[0].pairs_end += 1; }, "region pairs");
  refused([](RankReads& rr) { rr.indexed[0].first_token = rr.indexed[0].tokens_per_id; }, "every id must read");
  refused([](RankReads& rr) { rr.indexed[0].tokens += rr.indexed[0].tokens_per_id; }, "every id must read");
  refused([](RankReads& rr) { rr.indexed[0].tokens -= rr.indexed[0].tokens_per_id; }, "every id must read");
  refused([](RankReads& rr) { rr.indexed[0].tokens = 0; }, "every id must read");
  refused([](RankReads& rr) { rr.indexed[0].token_bytes = 0; }, "every id must read");
  refused([](RankReads& rr) { rr.indexed[0].at = rr.reads.size() + 1; }, "is issued at listed read");
  refused(
      [](RankReads& rr) {
        rr.indexed.push_back(rr.indexed[0]);
        rr.indexed[1].at = rr.indexed[0].at - 1;
      },
      "indexed reads 1 (group 4");
}

TEST(PlanIndexed, TamperedEntriesFailTheCoverageCheck) {
  std::string msg;
  const auto refused = [&](auto&& tamper, Status want, const std::string& part) {
    Case c(7);
    tamper(c);
    EXPECT_EQ(c.check(msg), want) << part << ": " << msg;
    EXPECT_TRUE(has(msg, part)) << msg;
  };
  // Another D id, free in the pool (D would receive into a block it did not ask for).
  refused([](Case& c) { c.entry_rank().ids[3] = kDPool - 1; }, Status::Coverage, "D id 3 is");
  refused([](Case& c) { c.entry_rank().ids[40 + 5] ^= 1; }, Status::Coverage, "P id 5 is");
  // The positions or tokens shifted, the geometry or the group changed.
  refused([](Case& c) { c.entry_rank().indexed[0].first_token += 1; c.entry_rank().indexed[0].tokens -= 1; },
          Status::Coverage, "but the group's needed tokens lie in");
  refused([](Case& c) { c.entry_rank().indexed[0].local_id_bytes *= 2; }, Status::Coverage, "reads D region 0 as ids of");
  refused([](Case& c) { c.entry_rank().indexed[0].token_bytes /= 2; }, Status::Coverage, "reads D region 0 as ids of");
  refused([](Case& c) { c.entry_rank().indexed[0].group = 3; }, Status::Coverage, "cannot be read by position");
  refused([](Case& c) { c.entry_rank().indexed[0].group = 9; }, Status::Coverage, "names no group");
  // Region pairs: one left out, two swapped, one into a P region of another layer.
  refused(
      [](Case& c) {
        RankReads& rr = c.entry_rank();
        rr.region_pairs.erase(rr.region_pairs.begin() + static_cast<std::ptrdiff_t>(rr.indexed[0].pairs_end) - 1);
        rr.indexed[0].pairs_end -= 1;
      },
      Status::Coverage, "region pairs, not the group's");
  refused([](Case& c) { std::swap(c.entry_rank().region_pairs[0], c.entry_rank().region_pairs[1]); }, Status::Coverage,
          "region pairs, not the group's");
  refused([](Case& c) { c.entry_rank().region_pairs[2].remote_region = 3; }, Status::Coverage, "region pairs, not the group's");
  // The entry given twice (the same group read twice), or dropped (its bytes missing).
  refused(
      [](Case& c) {
        RankReads& rr = c.entry_rank();
        rr.indexed.push_back(rr.indexed[0]);
      },
      Status::Coverage, "another indexed entry reads already");
  refused([](Case& c) { c.entry_rank().indexed.clear(); }, Status::Coverage, "plan misses D region 0");
  // An id past the region on either side: the request and the entry agree, the bounds do not.
  refused(
      [](Case& c) {
        c.groups[4].trim.local_blocks[7] = kDPool + 3;
        c.views = views_of(c.groups);
        c.entry_rank().ids[7] = kDPool + 3;
      },
      Status::OutOfBounds, "leaves D region 0");
  refused(
      [](Case& c) {
        c.groups[4].trim.remote_blocks[9] = kPPool + 3;
        c.views = views_of(c.groups);
        c.entry_rank().ids[40 + 9] = kPPool + 3;
      },
      Status::OutOfBounds, "leaves P region 0");
}

// What the listed path refuses, the indexed form refuses the same way (plan_paths.hpp compares
// status and message, compiled with indexed_min_runs 1); and the check refuses a plan whose
// zero ranges would wipe a block the entry writes.
TEST(PlanIndexed, SharedBlocksAreRefusedAsTheListedPathRefusesThem) {
  {  // a D id listed twice
    Case c(9);
    c.groups[4].trim.local_blocks[12] = c.groups[4].trim.local_blocks[30];
    std::string msg;
    EXPECT_EQ(status_of([&] { compile_transfer_plan(c.x.ctx, c.groups); }, &msg), Status::Coverage);
    EXPECT_TRUE(has(msg, "written twice")) << msg;
    expect_paths_agree(c.x.ctx, c.groups);
  }
  {  // a Mamba state in a block the attention group writes (the group's 20th id)
    Case c(9);
    const uint64_t id = c.groups[4].trim.local_blocks[20];
    c.groups[1].trim.local_blocks = {id};
    std::string msg;
    EXPECT_EQ(status_of([&] { compile_transfer_plan(c.x.ctx, c.groups); }, &msg), Status::Coverage);
    expect_paths_agree(c.x.ctx, c.groups);
  }
  {  // a zero range moved onto a written block: the zeroing would wipe received bytes
    Case c(9);
    std::string msg;
    ASSERT_EQ(c.check(msg), Status::Ok) << msg;
    auto& zero = c.indexed.zero[4].zero;
    ASSERT_FALSE(zero.empty());  // the partly filled last block's tail
    const uint64_t k = c.x.dg.physical_per_logical;
    zero[0].block = c.groups[4].trim.local_blocks[17] * k + 3;
    EXPECT_EQ(c.check(msg), Status::Coverage);
    EXPECT_TRUE(has(msg, "zeroes after the data arrives")) << msg;
  }
}

// D's list may start before its prefix hit (local_first_block 0: the cached blocks listed too):
// the entry reads from the first missing token on, and the cached blocks' tokens (guards) are
// found in the list at positions the entry does not read, so the plan is proven without lists;
// a zero range moved onto a cached block is refused (zeroing would wipe D's cached prefix).
TEST(PlanIndexed, AListThatHoldsTheCachedPrefixIsReadFromTheFirstMissingToken) {
  Case c(31);
  PlanGroup& a = c.groups[4];
  const uint64_t tpi = c.x.dg.block_size;  // tokens per listed (logical) id
  a.trim.local_hit_tokens = 9 * tpi + 100;   // nine ids cached, the tenth partly
  a.trim.local_first_block = 0;
  c.compile();
  const RankReads& rr = c.entry_rank();
  ASSERT_EQ(rr.indexed.size(), 1u);
  EXPECT_EQ(rr.indexed[0].count, 40u - 9);
  EXPECT_EQ(rr.indexed[0].first_token, 100u);
  TransferPlan flat = c.indexed;
  expand_plan(flat);
  expect_same_plan(flat, c.listed);
  std::string msg;
  EXPECT_EQ(c.check(msg), Status::Ok) << msg;
  expect_paths_agree(c.x.ctx, c.groups);
  auto& zero = c.indexed.zero[4].zero;
  ASSERT_FALSE(zero.empty());
  zero[0].block = a.trim.local_blocks[4] * c.x.dg.physical_per_logical;  // a cached block
  zero[0].token_begin = 0;
  EXPECT_EQ(c.check(msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "cached prefix")) << msg;
}

// The entry's reads are issued at their place among the rank's other reads: an entry that the
// listed plan would merge into the read before it is written out as listed reads instead.
TEST(PlanIndexed, ReadsIssueInTheListedOrderAmongOtherGroups) {
  for (uint64_t seed = 20; seed < 30; ++seed) {
    Case c(seed);
    TransferPlan flat = c.indexed;
    expand_plan(flat);
    expect_same_plan(flat, c.listed);
  }
}

}  // namespace
