// The context's precomputed Mamba template (core/src/plan_prepared.*) and the coverage check's
// group-wise acceptance of it (check_coverage with MambaHints):
//  * on random Nemotron-3-Nano requests (P TP4 -> D TP2 and others, both kernel geometries,
//    fragmented and consecutive ids, hits, out-of-range and overflowing Mamba ids) the verdict
//    path compiles the same plan as the per-read path, or fails with the same error;
//  * a malformed template (gap, overlap, a P read outside the page, an empty read) is refused
//    when built and never used: compilation then takes the per-read path;
//  * the check accepts a hint only when the plan's reads equal the template there: a tampered
//    read inside an accepted page, a page read twice, or a wrong / duplicated hint can never make
//    a wrong plan pass.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../../core/src/plan_internal.hpp"
#include "../../core/src/plan_prepared.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "nemotron_pair.hpp"
#include "plan_paths.hpp"

using namespace pdkv::core;
using namespace pdkv::core::plan_detail;
using namespace pdkv::core::test;

namespace {

TEST(PlanTemplate, VerdictPathEqualsPerReadPathOnRandomRequests) {
  std::mt19937_64 rng(20261125);
  size_t compiled = 0, refused = 0;
  struct Topo {
    uint32_t d_tp, d_rank, p_tp;
  };
  for (const Topo topo : {Topo{2, 0, 4}, Topo{2, 1, 4}, Topo{4, 3, 2}, Topo{1, 0, 4}, Topo{2, 1, 2}}) {
    for (bool fi : {true, false}) {
      for (MambaCacheMode mode : {MambaCacheMode::None, MambaCacheMode::Align}) {
        const Pair x = nemotron(topo.d_tp, topo.d_rank, topo.p_tp, fi, mode);
        const PlanContextVerdict v = judge_plan_context(x.ctx);
        ASSERT_NE(v.prepared, nullptr);
        ASSERT_TRUE(v.prepared->mamba.valid);
        for (int it = 0; it < 25 && !HasFailure(); ++it) {
          bool bad = false;
          const auto groups = request(rng, x, mode, bad);
          SCOPED_TRACE("D tp" + std::to_string(topo.d_tp) + " rank " + std::to_string(topo.d_rank) + " P tp" +
                       std::to_string(topo.p_tp) + (fi ? " flashinfer" : " flash_attn") + " it " + std::to_string(it));
          pdkv::core::test::expect_paths_agree(x.ctx, groups);
          try {
            compile_transfer_plan(x.ctx, groups);
            ++compiled;
          } catch (const Error&) {
            ++refused;
            EXPECT_TRUE(bad);
          }
        }
      }
    }
  }
  EXPECT_GT(compiled, 300u);
  EXPECT_GT(refused, 10u);
}

TEST(PlanTemplate, TemplateOfARealContextTilesThePage) {
  const Pair x = nemotron(2, 0, 4, true, MambaCacheMode::None);
  const auto pre = prepare_context(x.ctx);
  ASSERT_NE(pre, nullptr);
  const MambaTemplate& t = pre->mamba;
  ASSERT_TRUE(t.valid);
  EXPECT_EQ(t.ranks.size(), 2u);  // D rank 0 of TP2 reads P ranks 0 and 1 of TP4
  EXPECT_EQ(t.bytes, t.local_page);
  std::string why;
  EXPECT_TRUE(verify_mamba_template(t, &why)) << why;
}

TEST(PlanTemplate, MalformedTemplatesAreRefused) {
  const Pair x = nemotron(2, 0, 4, true, MambaCacheMode::None);
  const MambaTemplate good = prepare_context(x.ctx)->mamba;
  ASSERT_TRUE(good.valid);
  auto refused = [&](const char* what, auto&& edit, const char* expect) {
    MambaTemplate t = good;
    edit(t);
    std::string why;
    EXPECT_FALSE(verify_mamba_template(t, &why)) << what;
    EXPECT_NE(why.find(expect), std::string::npos) << what << ": " << why;
  };
  refused("a gap", [](MambaTemplate& t) { t.ranks[0].reads[0].length -= 1; }, "are not read");
  refused("an overlap", [](MambaTemplate& t) { t.ranks[1].reads[0].local_offset -= 1; }, "read twice");
  refused("a read past the D page", [](MambaTemplate& t) { t.local_page -= 1; }, "");
  refused("a P read outside the page", [](MambaTemplate& t) { t.remote_page = t.ranks[0].remote_extent - 1; },
          "leaves the P page");
  refused("an empty read", [](MambaTemplate& t) { t.ranks[0].reads.push_back({0, 0, 0}); }, "empty");
  refused("a missing rank", [](MambaTemplate& t) { t.ranks.pop_back(); }, "are not read");
  refused("a wrong extent", [](MambaTemplate& t) { t.ranks[0].remote_extent += 1; }, "remote extent");

}

// The coverage check with hints, driven directly: hints derived here from the plan (where each
// Mamba group's template reads start in each P rank's reads), then the plan or the hints
// tampered with.
struct Checked {
  Pair x;
  std::shared_ptr<const Prepared> pre;
  std::vector<PlanGroup> groups;
  TransferPlan plan;
  Trimmed t;
};

// Index in `reads` of the read of D region `region` at D offset `offset`.
size_t find_read(const std::vector<PlanRead>& reads, uint32_t region, uint64_t offset) {
  size_t at = 0;
  while (at < reads.size() && !(reads[at].local_region == region && reads[at].local_offset == offset)) ++at;
  return at;
}

void setup(Checked& c) {
  c.x = nemotron(2, 0, 4, true, MambaCacheMode::None);
  c.pre = prepare_context(c.x.ctx);
  std::mt19937_64 rng(11);
  bool bad = false;
  c.groups = request(rng, c.x, MambaCacheMode::None, bad);
  // Mamba pages apart from each other and from the attention blocks: no read coalesces across
  // pages and every first template read is found by its offset below.
  std::set<uint64_t> taken;
  for (uint64_t k : c.groups[4].trim.local_blocks) taken.insert(k / c.x.dg.physical_per_logical);
  uint64_t next = 1;
  for (size_t g = 0; g < 4; ++g) {
    while (taken.count(next) || taken.count(next + 1) || taken.count(next - 1)) ++next;
    c.groups[g].trim.local_blocks = {next};
    c.groups[g].trim.remote_blocks = {kPPool - 1 - 3 * g};
    next += 3;
  }
  c.plan = compile_transfer_plan(c.x.ctx, c.groups);
  const std::vector<PlanGroupView> views = views_of(c.groups);
  resolve(c.x.ctx, views, c.t);
  trim_groups(c.t);
  const MambaTemplate& m = c.pre->mamba;
  for (uint32_t g = 0; g < 4; ++g) {
    const auto& rg = c.t.groups[g];
    const StatePair& sp = c.t.mamba[g].states.front();
    const uint64_t lpage = sp.local_block * m.local_stride[rg.regions[0]];
    MambaHint h{g, c.t.hint_index.size()};
    for (const auto& k : m.ranks) {
      const auto& reads = c.plan.ranks[k.p_rank].reads;
      const size_t at = find_read(reads, rg.regions[0], lpage + k.reads[0].local_offset);
      ASSERT_LT(at, reads.size());
      c.t.hint_index.push_back(at);
    }
    c.t.hints.push_back(h);
  }
}

TEST(PlanTemplate, AnInvalidTemplateIsNotUsed) {
  // Built from reads that do not tile the page, the template is not valid and compilation takes
  // the per-read path: the same plan as without a verdict.
  Checked c;
  setup(c);
  auto reads = mamba_reads(*c.x.ctx.remote_mamba, *c.x.ctx.local_mamba, 0);
  reads.pop_back();
  auto pre = std::make_shared<Prepared>(*c.pre);
  build_mamba_template(c.x.ctx, reads, pre->mamba);
  EXPECT_FALSE(pre->mamba.valid);
  PlanContextVerdict v = judge_plan_context(c.x.ctx);
  v.prepared = pre;
  const std::vector<PlanGroupView> views = views_of(c.groups);
  TransferPlan got;
  compile_transfer_plan_into(c.x.ctx, views, got, v);
  pdkv::core::test::expect_same_plan(got, c.plan);
}

size_t consumed_reads(const Trimmed& t) {
  size_t n = 0;
  for (const auto& c : t.consumed)
    for (const auto& [b, e] : c) n += e - b;
  return n;
}

// Template rank j's read k of page `page` (region by region, in the group's order) of the Mamba
// group named by hint h.
PlanRead& page_read(Checked& c, size_t h, size_t j, size_t page, size_t k) {
  const MambaTemplate& m = c.pre->mamba;
  auto& reads = c.plan.ranks[m.ranks[j].p_rank].reads;
  return reads[c.t.hint_index[c.t.hints[h].at + j] + page * m.ranks[j].reads.size() + k];
}

TEST(PlanTemplate, CheckAcceptsExactTemplatePagesOnly) {
  Checked c;
  setup(c);
  ASSERT_EQ(c.t.hints.size(), 4u);  // the four Mamba groups: 6 + 6 + 6 + 5 pages, one state each
  check_coverage(c.plan, c.x.ctx, c.t, c.pre.get());
  EXPECT_EQ(consumed_reads(c.t), 23u * 8u);  // every Mamba read came through a verified page

  // A read of an accepted page moved by one byte, shortened, or sent to another region: the
  // hint no longer matches, the group's reads are checked on their own, and the plan is refused.
  for (int edit = 0; edit < 3; ++edit) {
    Checked d = c;
    PlanRead& r = page_read(d, 1, 1, 1, 1);
    if (edit == 0) r.local_offset += 1;
    if (edit == 1) r.length -= 1;
    if (edit == 2) r.local_region = (r.local_region + 1) % 6;
    EXPECT_THROW(check_coverage(d.plan, d.x.ctx, d.t, d.pre.get()), Error) << "edit " << edit;
  }
  // A group's reads issued twice (appended again at the end of each rank's reads), even with a
  // second hint pointing at the copy.
  {
    Checked d = c;
    const MambaTemplate& m = d.pre->mamba;
    const MambaHint h = d.t.hints[2];
    MambaHint copy{h.group, d.t.hint_index.size()};
    const size_t pages = d.t.groups[h.group].regions.size();
    for (size_t j = 0; j < m.ranks.size(); ++j) {
      auto& v = d.plan.ranks[m.ranks[j].p_rank].reads;
      const size_t first = d.t.hint_index[h.at + j], n = pages * m.ranks[j].reads.size();
      d.t.hint_index.push_back(v.size());
      for (size_t k = 0; k < n; ++k) v.push_back(v[first + k]);
    }
    d.t.hints.push_back(copy);
    EXPECT_THROW(check_coverage(d.plan, d.x.ctx, d.t, d.pre.get()), Error);
  }
  // Wrong hints on a correct plan: a duplicated hint, one naming another group than the reads it
  // points at, one with an index past the reads, one naming the attention group. They are not
  // accepted (the reads are then checked one by one) and the correct plan still passes.
  {
    Checked d = c;
    d.t.hints.push_back(d.t.hints[0]);
    d.t.hints[1].at = d.t.hints[0].at;        // group 1's hint at group 0's reads
    d.t.hint_index[d.t.hints[2].at] = 1u << 30;
    d.t.hints.push_back({4, d.t.hints[3].at});  // the attention group has no pages
    check_coverage(d.plan, d.x.ctx, d.t, d.pre.get());
    EXPECT_EQ(consumed_reads(d.t), (23u - 6u - 6u) * 8u);
  }
  // A page past D's region (the state's block id and the group's reads moved past it together):
  // refused with the per-read bounds error.
  {
    Checked d = c;
    const MambaTemplate& m = d.pre->mamba;
    const auto& rg = d.t.groups[0];
    StatePair& sp = d.t.mamba[0].states.front();
    const uint64_t stride = m.local_stride[rg.regions[0]];
    const uint64_t past = d.pre->d_size[rg.regions[0]] / stride;  // the first block past the region
    const uint64_t shift = (past - sp.local_block) * stride;
    for (size_t j = 0; j < m.ranks.size(); ++j)
      for (size_t p = 0; p < rg.regions.size(); ++p)
        for (size_t k = 0; k < m.ranks[j].reads.size(); ++k) page_read(d, 0, j, p, k).local_offset += shift;
    sp.local_block = past;
    try {
      check_coverage(d.plan, d.x.ctx, d.t, d.pre.get());
      ADD_FAILURE() << "a page past the region passed";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::OutOfBounds) << e.what();
    }
  }
}

// Every field of every template-derived read, in every page of every Mamba group, changed on its
// own (by one, or to another region): the check refuses the plan each time, whether it then
// sees the change as a missing byte, a byte written twice, a byte D does not need or a read
// outside a region. Changing a P offset or a P region moves no D byte: the group's hint is
// refused and the read is bounds-checked on its own, so only a P side that leaves the region
// is an error; those edits must at least take the hint's pages off the accepted ones.
TEST(PlanTemplate, EveryTamperedTemplateReadIsRefusedOrLeftToTheReadByReadCheck) {
  Checked c;
  setup(c);
  const MambaTemplate& m = c.pre->mamba;
  size_t refused = 0, unhinted = 0;
  for (size_t h = 0; h < c.t.hints.size(); ++h) {
    const size_t pages = c.t.groups[c.t.hints[h].group].regions.size();
    for (size_t j = 0; j < m.ranks.size(); ++j) {
      for (size_t p = 0; p < pages; ++p) {
        for (size_t k = 0; k < m.ranks[j].reads.size(); ++k) {
          for (int field = 0; field < 6; ++field) {
            Checked d = c;
            PlanRead& r = page_read(d, h, j, p, k);
            switch (field) {
              case 0: r.local_offset += 1; break;
              case 1: r.local_offset -= 1; break;
              case 2: r.length += 1; break;
              case 3: r.local_region = (r.local_region + 1) % 6; break;
              case 4: r.remote_offset = d.pre->p_size[m.ranks[j].pos][r.remote_region]; break;  // past P's region
              case 5: r.remote_region = 6; break;  // no such P region
            }
            SCOPED_TRACE("hint " + std::to_string(h) + " rank " + std::to_string(j) + " page " + std::to_string(p) +
                         " read " + std::to_string(k) + " field " + std::to_string(field));
            try {
              check_coverage(d.plan, d.x.ctx, d.t, d.pre.get());
              ADD_FAILURE() << "a tampered template read passed";
            } catch (const Error& e) {
              EXPECT_TRUE(e.status() == Status::Coverage || e.status() == Status::OutOfBounds) << e.what();
              ++refused;
            }
            // Whatever the outcome, the tampered group is never taken on trust.
            EXPECT_LT(consumed_reads(d.t), 23u * 8u);
            ++unhinted;
          }
        }
      }
    }
  }
  EXPECT_EQ(refused, 23u * 8u * 6u);
  EXPECT_EQ(unhinted, refused);
}

}  // namespace
