// Transfer-plan compilation: hand-computed small plans (homogeneous TP, D_TP > P_TP head slices,
// P_TP > D_TP slots with every SSM shard, Nemotron-3-Nano P TP4 -> D TP2 with block sizes 1056 /
// 2096, a full attention hit with Mamba still moving, MLA), the validation errors (#52516's
// partial block, overlaps, out-of-bounds ids, missing P metadata) and the JSON dump.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "../../core/src/plan_internal.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/handshake.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

// Pure attention: K heads of head_size (+ the same for V), 1-byte dtype, so a head costs
// 2*head_size bytes per token.
ModelDesc attention_model(uint32_t k, uint32_t head_size, bool mla = false) {
  ModelDesc m;
  m.name = mla ? "tiny-mla" : "tiny-gqa";
  m.attention.num_kv_heads = k;
  m.attention.head_size = head_size;
  m.attention.head_size_v = mla ? 0 : head_size;
  m.attention.use_mla = mla;
  m.dtype_bytes = 1;
  return m;
}

// Tiny Mamba2 hybrid: K=4 heads of 4+4 bytes per token; Mamba2 4 heads x 2 x d_state 2, 4 groups,
// conv kernel 2 (one row), 1-byte dtypes. TP1: x 8 | B 8 | C 8 | ssm 16 = 40 B; TP2: half.
ModelDesc tiny_hybrid() {
  ModelDesc m = attention_model(4, 4);
  m.name = "tiny-hybrid";
  m.mamba.type = MambaType::Mamba2;
  m.mamba.num_heads = 4;
  m.mamba.head_dim = 2;
  m.mamba.d_state = 2;
  m.mamba.n_groups = 4;
  m.mamba.conv_kernel = 2;
  m.default_ssm_dtype_bytes = 1;
  m.layer_pattern = "M*";
  return m;
}

EngineConfig config(uint32_t tp, uint32_t block_size = 0) {
  EngineConfig e;
  e.tp_size = tp;
  e.user_block_size = block_size;
  return e;
}

// D rank d_rank of d_cfg reading from every rank of an engine with p_cfg.
PlanContext context(const ModelDesc& m, const EngineConfig& d_cfg, const EngineConfig& p_cfg,
                    uint32_t d_rank, uint32_t regions, uint64_t blocks = 64) {
  PlanContext ctx;
  const EngineGeometry dg = derive_geometry(m, d_cfg);
  const EngineGeometry pg = derive_geometry(m, p_cfg);
  ctx.local = metadata_from_geometry(m, d_cfg, dg, {"d", d_rank, blocks, regions, 1ull << 40});
  for (uint32_t r = 0; r < p_cfg.tp_size; ++r) {
    ctx.remote.push_back(
        metadata_from_geometry(m, p_cfg, pg, {"p", r, blocks, regions, (2ull + r) << 40}));
  }
  TpMappingInput in;
  in.local_tp = d_cfg.tp_size;
  in.local_rank = d_rank;
  in.remote_tp = p_cfg.tp_size;
  in.total_kv_heads = m.attention.use_mla ? 1 : m.attention.num_kv_heads;
  in.use_mla = m.attention.use_mla;
  in.has_mamba = m.is_hybrid();
  ctx.mapping = compute_tp_mapping(in);
  if (m.is_hybrid()) {
    ctx.local_mamba = dg.mamba;
    ctx.remote_mamba = pg.mamba;
  }
  return ctx;
}

PlanGroup attention_group(std::vector<uint64_t> local, std::vector<uint64_t> remote,
                          uint64_t computed, uint64_t hit = 0) {
  PlanGroup g;
  g.trim.kind = GroupKind::Attention;
  g.trim.local_blocks = std::move(local);
  g.trim.remote_blocks = std::move(remote);
  g.trim.remote_computed_tokens = computed;
  g.trim.local_hit_tokens = hit;
  return g;
}

PlanGroup mamba_group(std::vector<uint64_t> local, std::vector<uint64_t> remote, uint64_t computed,
                      uint64_t hit = 0) {
  PlanGroup g = attention_group(std::move(local), std::move(remote), computed, hit);
  g.trim.kind = GroupKind::Mamba;
  g.trim.cache_mode = MambaCacheMode::None;
  return g;
}

const RankReads& rank(const TransferPlan& p, uint32_t r) {
  for (const auto& rr : p.ranks)
    if (rr.p_rank == r) return rr;
  throw std::runtime_error("no reads from P rank " + std::to_string(r));
}

// --- homogeneous TP -------------------------------------------------------------------------

// K=8 heads of 128+128 bytes, TP2/TP2: 4 heads per rank, 1024 B per token, 16-token blocks of
// 16384 B. 40 tokens: blocks 3,4 whole (consecutive on both sides -> one read), block 5 partly,
// one piece per head; head 0 of block 5 continues block 4 on both sides and joins the first read.
TEST(TransferPlan, HomogeneousTpWholeBlocksCoalesceAndTailIsPerHead) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext ctx = context(m, config(2, 16), config(2, 16), 1, 2);
  const TransferPlan p = compile_transfer_plan(ctx, {attention_group({3, 4, 5}, {7, 8, 9}, 40)});
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_EQ(p.ranks[0].p_rank, 1u);
  const uint64_t L = 16384, hb = 256;
  std::vector<PlanRead> want;
  for (uint32_t r = 0; r < 2; ++r) {
    want.push_back({r, 3 * L, r, 7 * L, 2 * L + 8 * hb});
    for (uint64_t h = 1; h < 4; ++h) want.push_back({r, 5 * L + h * 16 * hb, r, 9 * L + h * 16 * hb, 8 * hb});
  }
  EXPECT_EQ(p.ranks[0].reads, want);
  EXPECT_EQ(p.stats.pieces_before_coalescing, 12u);
  EXPECT_EQ(p.stats.pieces_after_coalescing, 8u);
  EXPECT_EQ(p.stats.bytes, 2 * 40 * 1024u);
  EXPECT_EQ(p.stats.attention_bytes, p.stats.bytes);
  EXPECT_EQ(p.notify_ranks, std::vector<uint32_t>{1});
  EXPECT_EQ(p.notifications_per_p_rank, 1u);
  ASSERT_EQ(p.zero.size(), 1u);
  EXPECT_EQ(p.zero[0].zero, (std::vector<ZeroRange>{{5, 8, 16}}));
  EXPECT_EQ(p.zero[0].regions, (std::vector<uint32_t>{0, 1}));
}

// --- D_TP > P_TP: D reads its head slice ---------------------------------------------------

// P TP1 holds 8 heads (block 32768 B), D TP2 rank 1 holds heads 4..7 (block 16384 B) and reads
// them at offset 4 heads * 16 tokens * 256 B = 16384 of each P block.
TEST(TransferPlan, DecodeTpLargerReadsHeadSliceOfEachBlock) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext ctx = context(m, config(2, 16), config(1, 16), 1, 1);
  const TransferPlan p = compile_transfer_plan(ctx, {attention_group({3, 4}, {7, 8}, 32)});
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_EQ(p.ranks[0].p_rank, 0u);
  EXPECT_EQ(p.ranks[0].reads, (std::vector<PlanRead>{{0, 3 * 16384, 0, 7 * 32768 + 16384, 16384},
                                                      {0, 4 * 16384, 0, 8 * 32768 + 16384, 16384}}));
  EXPECT_EQ(p.notifications_per_p_rank, 2u);  // both D ranks read slices of P rank 0
  EXPECT_EQ(p.notify_ranks, std::vector<uint32_t>{0});
  EXPECT_TRUE(p.zero[0].zero.empty());
}

// --- P_TP > D_TP: slots and every SSM shard ------------------------------------------------

// tiny_hybrid, P TP2 -> D TP1, 16-token blocks. D block 512 B (4 heads x 16 tokens x 8 B),
// P block 256 B (2 heads). 20 tokens: D [2,3] <- P [4,6]; Mamba state D 5 <- P 1.
TEST(TransferPlan, PrefillTpLargerFillsSlotsAndReadsEverySsmShard) {
  const ModelDesc m = tiny_hybrid();
  const PlanContext ctx = context(m, config(1, 16), config(2, 16), 0, 1);
  ASSERT_EQ(ctx.local.regions[0].region.block_len, 512u);
  ASSERT_EQ(ctx.remote[0].regions[0].region.block_len, 256u);
  const TransferPlan p = compile_transfer_plan(
      ctx, {attention_group({2, 3}, {4, 6}, 20), mamba_group({5}, {1}, 20)});
  ASSERT_EQ(p.ranks.size(), 2u);
  // D page [x 0..8 | B 8..16 | C 16..24 | ssm 24..40] at 5*512; P page [x 4 | B 4 | C 4 | ssm 8]
  // at 1*256. Rank r owns x/B/C channels r*4.. and ssm heads r*2.. (8 bytes).
  const uint64_t lp = 5 * 512, rp = 256;
  EXPECT_EQ(rank(p, 0).reads,
            (std::vector<PlanRead>{{0, 1024, 0, 1024, 256},          // heads 0,1 of D block 2
                                   {0, 1536, 0, 1536, 32},           // head 0, tokens 16..20
                                   {0, 1664, 0, 1664, 32},           // head 1
                                   {0, lp + 0, 0, rp + 0, 4},        // x
                                   {0, lp + 8, 0, rp + 4, 4},        // B
                                   {0, lp + 16, 0, rp + 8, 4},       // C
                                   {0, lp + 24, 0, rp + 12, 8}}));   // ssm
  EXPECT_EQ(rank(p, 1).reads,
            (std::vector<PlanRead>{{0, 1280, 0, 1024, 256},          // heads 2,3 into slot 1
                                   {0, 1792, 0, 1536, 32},
                                   {0, 1920, 0, 1664, 32},
                                   {0, lp + 4, 0, rp + 0, 4},
                                   {0, lp + 12, 0, rp + 4, 4},
                                   {0, lp + 20, 0, rp + 8, 4},
                                   {0, lp + 32, 0, rp + 12, 8}}));
  EXPECT_EQ(p.stats.mamba_bytes, 40u);
  EXPECT_EQ(p.stats.attention_bytes, 20u * 32);
  EXPECT_EQ(p.notify_ranks, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(p.notifications_per_p_rank, 1u);
  EXPECT_EQ(p.zero[0].zero, (std::vector<ZeroRange>{{3, 4, 16}}));
}

// --- Nemotron-3-Nano-30B: P TP4 (1056-token blocks) -> D TP2 (2096-token blocks) ------------

struct Nano {
  ModelDesc m = preset_model("nemotron-3-nano-30b");
  PlanContext ctx = context(m, config(2), config(4), 0, 6);
};

TEST(TransferPlan, NemotronNanoNonMultipleBlockSizesBecomeTokenRunsPerHead) {
  const Nano n;
  ASSERT_EQ(n.ctx.local.kernel_block_size, 2096u);
  ASSERT_EQ(n.ctx.remote[0].kernel_block_size, 1056u);
  const uint64_t Ld = 2096 * 512, Lp = 1056 * 512;  // one KV head of 128+128 bf16 per rank
  ASSERT_EQ(n.ctx.local.regions[0].region.block_len, Ld);
  // 3000 tokens: runs (10,0|20,0,1056) (10,1056|25,0,1040) (12,0|25,1040,16) (12,16|22,0,888).
  const TransferPlan p =
      compile_transfer_plan(n.ctx, {attention_group({10, 12}, {20, 25, 22}, 3000)});
  ASSERT_EQ(p.ranks.size(), 1u);  // P rank 1 holds the same head (GQA twin): not read
  EXPECT_EQ(p.ranks[0].p_rank, 0u);
  std::vector<PlanRead> want;
  for (uint32_t r = 0; r < 6; ++r) {
    want.push_back({r, 10 * Ld, r, 20 * Lp, 1056 * 512});
    want.push_back({r, 10 * Ld + 1056 * 512, r, 25 * Lp, 1040 * 512});
    want.push_back({r, 12 * Ld, r, 25 * Lp + 1040 * 512, 16 * 512});
    want.push_back({r, 12 * Ld + 16 * 512, r, 22 * Lp, 888 * 512});
  }
  EXPECT_EQ(p.ranks[0].reads, want);
  EXPECT_EQ(p.stats.bytes, 6u * 3000 * 512);
  // Both GQA twins are notified, once each (pdkv notifies every handshake target).
  EXPECT_EQ(p.notify_ranks, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(p.zero[0].zero, (std::vector<ZeroRange>{{12, 904, 2096}}));
}

TEST(TransferPlan, NemotronNanoConsecutiveIdsCoalesceToOneReadPerRegion) {
  const Nano n;
  const TransferPlan p = compile_transfer_plan(n.ctx, {attention_group({10, 11}, {20, 21, 22}, 3000)});
  const uint64_t Ld = 2096 * 512, Lp = 1056 * 512;
  ASSERT_EQ(p.ranks[0].reads.size(), 6u);
  EXPECT_EQ(p.ranks[0].reads[0], (PlanRead{0, 10 * Ld, 0, 20 * Lp, 3000 * 512}));
  EXPECT_EQ(p.stats.pieces_before_coalescing, 6u * 4);  // runs split at 1056, 2096, 2112
  EXPECT_EQ(p.stats.pieces_after_coalescing, 6u);
}

// Regions laid out alike get the same reads (the planner copies the first region's), and the
// coverage check skips sorting a region whose reads repeat an alike region's: a read changed,
// dropped or added in any one of those regions must still be refused, naming that region.
TEST(TransferPlan, RegionsAlikeAreEachCheckedWhenTheirReadsDiffer) {
  const Nano n;
  const std::vector<PlanGroup> groups = {attention_group({10, 3, 12}, {20, 9, 25, 22, 30}, 5000),
                                         mamba_group({40}, {50}, 5000)};
  const TransferPlan p = compile_transfer_plan(n.ctx, groups);
  ASSERT_NO_THROW(validate_transfer_plan(p, n.ctx, groups));
  // Every region holds the same offsets (region 0's reads with the region index replaced).
  std::vector<std::vector<PlanRead>> by_region(6);
  for (const PlanRead& r : p.ranks[0].reads) by_region[r.local_region].push_back(r);
  for (uint32_t region = 1; region < 6; ++region) {
    ASSERT_EQ(by_region[region].size(), by_region[0].size());
    for (size_t i = 0; i < by_region[0].size(); ++i) {
      EXPECT_EQ(by_region[region][i].local_offset, by_region[0][i].local_offset);
      EXPECT_EQ(by_region[region][i].remote_offset, by_region[0][i].remote_offset);
      EXPECT_EQ(by_region[region][i].length, by_region[0][i].length);
      EXPECT_EQ(by_region[region][i].remote_region, region);
    }
  }
  for (uint32_t region : {0u, 3u, 5u}) {
    size_t at = 0;
    while (p.ranks[0].reads[at].local_region != region) ++at;
    std::string msg;
    TransferPlan shorter = p;
    shorter.ranks[0].reads[at].length -= 512;
    EXPECT_EQ(status_of([&] { validate_transfer_plan(shorter, n.ctx, groups); }, &msg), Status::Coverage);
    EXPECT_NE(msg.find("D region " + std::to_string(region) + " "), std::string::npos) << msg;
    TransferPlan dropped = p;
    dropped.ranks[0].reads.erase(dropped.ranks[0].reads.begin() + static_cast<std::ptrdiff_t>(at));
    EXPECT_EQ(status_of([&] { validate_transfer_plan(dropped, n.ctx, groups); }, &msg), Status::Coverage);
    EXPECT_NE(msg.find("misses D region " + std::to_string(region) + " "), std::string::npos) << msg;
    TransferPlan twice = p;
    twice.ranks[0].reads.push_back(p.ranks[0].reads[at]);
    EXPECT_EQ(status_of([&] { validate_transfer_plan(twice, n.ctx, groups); }, &msg), Status::Coverage);
    EXPECT_NE(msg.find("overlap: D region " + std::to_string(region) + " "), std::string::npos) << msg;
  }
}

// The coverage check compares a run of reads that repeats the previous region's run read for
// read instead of checking each read: that stands only where the run's own regions are at least
// as large on both sides and every read matches. A repeated run into a smaller region, a read of
// it moved out of bounds or into another region must still be refused; the same reads split and
// reordered (runs that no longer repeat, ranges that touch) must still pass.
TEST(TransferPlan, RepeatedRegionRunsAreCheckedAgainstTheirOwnRegions) {
  const Nano n;
  const std::vector<PlanGroup> groups = {attention_group({10, 3, 12}, {20, 9, 25, 22, 30}, 5000)};
  const TransferPlan p = compile_transfer_plan(n.ctx, groups);
  ASSERT_NO_THROW(validate_transfer_plan(p, n.ctx, groups));
  const uint64_t Ld = 2096 * 512, Lp = 1056 * 512;
  auto first_of = [&](const TransferPlan& plan, uint32_t region) {
    size_t at = 0;
    while (plan.ranks[0].reads[at].local_region != region) ++at;
    return at;
  };
  std::string msg;
  // A region smaller than the others fails the handshake first (every region holds the same
  // number of blocks), so the check itself is called on such contexts.
  const std::vector<PlanGroupView> views = {view_of(groups[0])};
  auto check = [&](const PlanContext& ctx) {
    EXPECT_EQ(status_of([&] { validate_transfer_plan(p, ctx, groups); }), Status::Incompatible);
    plan_detail::Trimmed t;
    plan_detail::resolve(ctx, views, t);
    plan_detail::trim_groups(t);
    return status_of([&] { plan_detail::check_coverage(p, ctx, t); }, &msg);
  };
  // D region 3 holding 12 blocks (the others 64): its read of D block 12 lies past its end.
  PlanContext small_d = n.ctx;
  small_d.local.regions[3].region.num_blocks = 12;
  EXPECT_EQ(check(small_d), Status::OutOfBounds);
  EXPECT_NE(msg.find("D region 3: read at offset " + std::to_string(12 * Ld)), std::string::npos) << msg;
  // P region 4 holding 25 blocks on every rank: its read of P block 25 lies past its end.
  PlanContext small_p = n.ctx;
  for (EngineMetadata& m : small_p.remote) m.regions[4].region.num_blocks = 25;
  EXPECT_EQ(check(small_p), Status::OutOfBounds);
  EXPECT_NE(msg.find("P rank 0 region 4: read at offset " + std::to_string(25 * Lp)), std::string::npos) << msg;
  // The last read of region 2's run moved past P's region (its D side unchanged).
  TransferPlan far = p;
  const size_t last2 = first_of(far, 3) - 1;
  ASSERT_EQ(far.ranks[0].reads[last2].local_region, 2u);
  far.ranks[0].reads[last2].remote_offset = 64 * Lp;
  EXPECT_EQ(status_of([&] { validate_transfer_plan(far, n.ctx, groups); }, &msg), Status::OutOfBounds);
  EXPECT_NE(msg.find("P rank 0 region 2: read at offset " + std::to_string(64 * Lp)), std::string::npos) << msg;
  // The last read of region 5's run written into region 4 instead.
  TransferPlan moved = p;
  moved.ranks[0].reads.back().local_region = 4;
  moved.ranks[0].reads.back().remote_region = 4;
  EXPECT_EQ(status_of([&] { validate_transfer_plan(moved, n.ctx, groups); }, &msg), Status::Coverage);
  EXPECT_NE(msg.find("D region 4 "), std::string::npos) << msg;
  // Every read split at 512 tokens, the first parts in reverse order, then the second parts:
  // the same bytes, in runs that touch and do not repeat one another.
  TransferPlan split = p;
  auto& reads = split.ranks[0].reads;
  std::vector<PlanRead> heads, tails;
  for (const PlanRead& r : reads) {
    const uint64_t cut = std::min<uint64_t>(r.length / 2, 512 * 512);
    heads.push_back({r.local_region, r.local_offset, r.remote_region, r.remote_offset, cut});
    tails.push_back({r.local_region, r.local_offset + cut, r.remote_region, r.remote_offset + cut, r.length - cut});
  }
  std::reverse(heads.begin(), heads.end());
  reads = heads;
  reads.insert(reads.end(), tails.begin(), tails.end());
  EXPECT_NO_THROW(validate_transfer_plan(split, n.ctx, groups));
  // A run whose first range continues an earlier one of its region (region 0's tail after its
  // head), then a run repeating it in region 1 ahead of that region's head: still the same bytes.
  TransferPlan merged = p;
  {
    auto& v = merged.ranks[0].reads;
    const PlanRead x = v[first_of(p, 0)], y = v[first_of(p, 1)], z = v[first_of(p, 2)];
    const uint64_t cut = 512 * 512;
    ASSERT_GT(x.length, cut);
    auto part = [&](const PlanRead& r, bool head) {
      return head ? PlanRead{r.local_region, r.local_offset, r.remote_region, r.remote_offset, cut}
                  : PlanRead{r.local_region, r.local_offset + cut, r.remote_region, r.remote_offset + cut,
                             r.length - cut};
    };
    std::vector<PlanRead> out = {part(x, true), z, part(x, false), part(y, false), part(y, true)};
    for (const PlanRead& r : v)
      if (!(r == x) && !(r == y) && !(r == z)) out.push_back(r);
    v = out;
  }
  EXPECT_NO_THROW(validate_transfer_plan(merged, n.ctx, groups));
  // Region 1's run repeated as region 1 again: its bytes written twice.
  TransferPlan twice = p;
  const size_t b1 = first_of(twice, 1), e1 = first_of(twice, 2);
  twice.ranks[0].reads.insert(twice.ranks[0].reads.begin() + static_cast<std::ptrdiff_t>(e1),
                              p.ranks[0].reads.begin() + static_cast<std::ptrdiff_t>(b1),
                              p.ranks[0].reads.begin() + static_cast<std::ptrdiff_t>(e1));
  EXPECT_EQ(status_of([&] { validate_transfer_plan(twice, n.ctx, groups); }, &msg), Status::Coverage);
  EXPECT_NE(msg.find("overlap: D region 1 "), std::string::npos) << msg;
}

TEST(TransferPlan, NemotronNanoMambaGroupsReadBothShardsPerHmaRegions) {
  const Nano n;
  // HMA: 6 attention layers -> group size 6; 23 Mamba layers -> 4 groups (6,6,6,5 regions).
  std::vector<PlanGroup> groups = {attention_group({10, 11}, {20, 21, 22}, 3000)};
  for (uint64_t g = 0; g < 4; ++g) {
    PlanGroup mg = mamba_group({40 + g}, {50 + g}, 3000);
    if (g == 3) mg.regions = {0, 1, 2, 3, 4};
    groups.push_back(mg);
  }
  const TransferPlan p = compile_transfer_plan(n.ctx, groups);
  ASSERT_EQ(p.ranks.size(), 2u);
  const auto reads = mamba_reads(*n.ctx.remote_mamba, *n.ctx.local_mamba, 0);
  // D page: x 12288 | B 3072 | C 3072 | ssm 1048576 (fp32); P page halves each part.
  ASSERT_EQ(n.ctx.local_mamba->conv_bytes, 18432u);
  ASSERT_EQ(n.ctx.remote_mamba->conv_bytes, 9216u);
  ASSERT_EQ(reads.size(), 8u);
  const uint64_t Ld = 2096 * 512, Lp = 1056 * 512;
  // P rank 1's Mamba reads: 23 layers' states, each the 4 parts of its shard.
  const RankReads& r1 = rank(p, 1);
  EXPECT_EQ(r1.reads.size(), 23u * 4);
  EXPECT_EQ(r1.reads[0], (PlanRead{0, 40 * Ld + 6144, 0, 50 * Lp, 6144}));  // x channels 1024..
  EXPECT_EQ(r1.reads[3], (PlanRead{0, 40 * Ld + 18432 + 524288, 0, 50 * Lp + 9216, 524288}));
  EXPECT_EQ(p.stats.mamba_bytes, 23u * (18432 + 1048576));
  EXPECT_EQ(p.stats.attention_bytes, 6u * 3000 * 512);
  EXPECT_EQ(rank(p, 0).bytes + r1.bytes, p.stats.bytes);
}

// --- divergent hits: attention fully cached, Mamba state still moves -----------------------

TEST(TransferPlan, FullAttentionHitStillMovesMambaStateAndNothingElse) {
  const Nano n;
  // vLLM's x[-0:] would read all of P's attention list here (docs/semantics.md §6.3 bug 1).
  const TransferPlan p = compile_transfer_plan(
      n.ctx, {attention_group({}, {20, 21, 22}, 3000, /*hit=*/3000), mamba_group({40}, {50}, 3000)});
  EXPECT_EQ(p.stats.attention_bytes, 0u);
  EXPECT_EQ(p.stats.mamba_bytes, 6u * (18432 + 1048576));
  EXPECT_TRUE(p.zero[0].zero.empty());
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(rank(p, 0).reads.size(), 6u * 4);
}

TEST(TransferPlan, FullHitOnEveryGroupIsAnEmptyPlanThatStillNotifies) {
  const Nano n;
  const TransferPlan p = compile_transfer_plan(
      n.ctx, {attention_group({}, {20}, 1000, 1000), mamba_group({40}, {50}, 1000, 1000)});
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(p.stats.bytes, 0u);
  EXPECT_EQ(p.notify_ranks, (std::vector<uint32_t>{0, 1}));
}

// --- one D block used by two groups of a region --------------------------------------------
// vLLM hands each group its own ids from the pool. A caller that passes one D id to two groups
// sharing a region is refused (naming both groups, the block and the region) when one group's
// receive-side work or cached prefix meets the other's write: the overlap of two writes was
// refused already, but a zero range or prefix-hit tokens of one group under another's write
// planned and corrupted D's memory.

bool has(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

// The zeroed tail of consecutive D blocks is one guard (one lookup per region, however many
// kernel blocks it spans): a write into any block of it is refused, the message naming the span.
TEST(TransferPlanSharedBlocks, AWriteIntoAZeroedRunOfConsecutiveBlocksIsRefused) {
  const Nano n;
  const std::vector<PlanGroup> groups = {attention_group({10, 11, 12}, {20, 25, 22}, 2000),
                                         mamba_group({11}, {50}, 2000)};
  std::string msg;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, groups); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "group 1 (mamba) writes its state into D block 11 of region 0")) << msg;
  EXPECT_TRUE(has(msg, "which group 0 (attention) zeroes after the data arrives (from token 2000 of its D block 10 "
                       "to token 2096 of its D block 12)")) << msg;
  std::vector<PlanGroup> apart = groups;  // block 13 lies past the zeroed run: planned
  apart[1] = mamba_group({13}, {50}, 2000);
  EXPECT_NO_THROW(compile_transfer_plan(n.ctx, apart));
}

TEST(TransferPlanSharedBlocks, MambaStateInABlockAnAttentionGroupZeroesIsRefused) {
  const Nano n;
  // 2000 tokens into D block 10; block 12, listed past P's tokens, is zeroed whole after the data
  // arrives, over the Mamba state written into it (no write of the two overlaps the other).
  const std::vector<PlanGroup> groups = {attention_group({10, 12}, {20, 25, 22}, 2000),
                                         mamba_group({12}, {50}, 2000)};
  std::string msg;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, groups); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "group 1 (mamba) writes its state into D block 12 of region 0 (D region 0 offset " +
                           std::to_string(12 * 2096 * 512) + " ")) << msg;
  EXPECT_TRUE(has(msg, "which group 0 (attention) zeroes after the data arrives (tokens 0..2096 of its D block 12)"))
      << msg;
  EXPECT_TRUE(has(msg, "two groups may not share a D block in one region")) << msg;
  // The same ids in disjoint regions are different memory: planned.
  std::vector<PlanGroup> apart = groups;
  apart[0].regions = {0, 1, 2};
  apart[1].regions = {3, 4, 5};
  const TransferPlan p = compile_transfer_plan(n.ctx, apart);
  EXPECT_EQ(p.zero[0].zero, (std::vector<ZeroRange>{{10, 2000, 2096}, {12, 0, 2096}}));
  EXPECT_NO_THROW(validate_transfer_plan(p, n.ctx, apart));
  // Distinct ids in one region: planned.
  const std::vector<PlanGroup> distinct = {attention_group({10, 12}, {20, 25, 22}, 2000),
                                           mamba_group({13}, {50}, 2000)};
  TransferPlan ok = compile_transfer_plan(n.ctx, distinct);
  EXPECT_NO_THROW(validate_transfer_plan(ok, n.ctx, distinct));
  // validate_transfer_plan checks the zero ranges a plan carries (what D applies): one altered to
  // zero the Mamba group's block is refused.
  ok.zero[0].zero.push_back({13, 0, 2096});
  EXPECT_EQ(status_of([&] { validate_transfer_plan(ok, n.ctx, distinct); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "group 1 (mamba) writes its state into D block 13 of region 0")) << msg;
}

TEST(TransferPlanSharedBlocks, WriteIntoAnotherGroupsCachedPrefixBlockIsRefused) {
  const Nano n;
  // D holds tokens 0..2096 (all of block 10, listed first) and receives 2096..3000 into block 12.
  PlanGroup att = attention_group({10, 12}, {20, 25, 22}, 3000, /*hit=*/2096);
  att.trim.local_first_block = 0;
  std::string msg;
  // A Mamba state written into block 10.
  const std::vector<PlanGroup> mamba = {att, mamba_group({10}, {50}, 3000)};
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, mamba); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "group 1 (mamba) writes its state into D block 10 of region 0 (D region 0 offset " +
                           std::to_string(10 * 2096 * 512) + " ")) << msg;
  EXPECT_TRUE(has(msg, "which group 0 (attention) lists as holding D's cached prefix (tokens 0..2096 of its D block "
                       "10, never written)")) << msg;
  // Another attention group's tokens written into block 10 (the partly held case: tokens 0..1000
  // of block 10 held when the hit ends inside it).
  PlanGroup part = attention_group({10, 12}, {20, 25, 22}, 3000, /*hit=*/1000);
  const std::vector<PlanGroup> attention = {part, attention_group({10}, {20}, 1000)};
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, attention); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "group 1 (attention) writes D block 10 of region 0 (D region 0 offset " +
                           std::to_string(10 * 2096 * 512) + " length " + std::to_string(1000 * 512) + ")"))
      << msg;
  EXPECT_TRUE(has(msg, "which group 0 (attention) lists as holding D's cached prefix (tokens 0..1000 of its D block 10"))
      << msg;
  // The same ids in disjoint regions, or distinct ids: planned.
  std::vector<PlanGroup> apart = mamba;
  apart[0].regions = {0, 1};
  apart[1].regions = {2, 3, 4, 5};
  EXPECT_NO_THROW(validate_transfer_plan(compile_transfer_plan(n.ctx, apart), n.ctx, apart));
  const std::vector<PlanGroup> distinct = {att, mamba_group({11}, {50}, 3000)};
  EXPECT_NO_THROW(validate_transfer_plan(compile_transfer_plan(n.ctx, distinct), n.ctx, distinct));
}

// No write involved: one group zeroes a D block (listed past P's tokens) that another group lists
// as holding D's cached prefix. D's zeroing would wipe those cached tokens; the checks of writes
// against zeroed or held bytes never see it.
TEST(TransferPlanSharedBlocks, AZeroRangeOverAnotherGroupsCachedPrefixIsRefused) {
  const Nano n;
  // Group 0: 2000 tokens into D block 10; block 12, listed past them, is zeroed whole.
  // Group 1: D holds tokens 0..2096 in block 12 (its first listed block) and receives the rest
  // into block 14.
  PlanGroup held = attention_group({12, 14}, {20, 25, 22}, 3000, /*hit=*/2096);
  held.trim.local_first_block = 0;
  const std::vector<PlanGroup> groups = {attention_group({10, 12}, {20, 25, 22}, 2000), held};
  std::string msg;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, groups); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "group 0 (attention) zeroes D block 12 of region 0 (D region 0 offset " +
                           std::to_string(12 * 2096 * 512) + " ")) << msg;
  EXPECT_TRUE(has(msg, "after the data arrives (tokens 0..2096 of its D block 12), which group 1 (attention) lists "
                       "as holding D's cached prefix (tokens 0..2096 of its D block 12, never written): the "
                       "zeroing would wipe D's cached prefix; two groups may not share a D block in one region"))
      << msg;
  // The same ids in disjoint regions, or distinct ids: planned.
  std::vector<PlanGroup> apart = groups;
  apart[0].regions = {0, 1, 2};
  apart[1].regions = {3, 4, 5};
  EXPECT_NO_THROW(validate_transfer_plan(compile_transfer_plan(n.ctx, apart), n.ctx, apart));
  PlanGroup other = held;
  other.trim.local_blocks = {13, 14};
  const std::vector<PlanGroup> distinct = {groups[0], other};
  EXPECT_NO_THROW(validate_transfer_plan(compile_transfer_plan(n.ctx, distinct), n.ctx, distinct));
}

TEST(TransferPlanSharedBlocks, OneGroupListingABlockTwiceOverItsOwnZeroRangeIsRefused) {
  const Nano n;
  // 2000 tokens fill block 10 from token 0; its second listing lies past P's tokens and would be
  // zeroed whole after the data arrives.
  const std::vector<PlanGroup> groups = {attention_group({10, 10}, {20, 25}, 2000)};
  std::string msg;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, groups); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "group 0 (attention) writes D block 10 of region 0")) << msg;
  EXPECT_TRUE(has(msg, "a group may not list one D block twice")) << msg;
}

// Fragmented D ids (their ranges out of order) take the check's path without a sort: one
// attention group's ranges are disjoint when its ids are distinct, and a Mamba page is clear of
// them when it reaches none of its listed blocks (plan_coverage.cpp, IdMarks). Anything
// that path cannot prove falls back to the sorted check: each refusal below is the same one the
// sorted check gives, and the plans it lets through are those the byte-level property tests
// accept.
TEST(TransferPlanSharedBlocks, FragmentedIdsAreCheckedAsStrictlyWithoutASort) {
  const ModelDesc m = preset_model("nemotron-3-nano-30b");
  const PlanContext ctx = context(m, config(2), config(4), 0, 6, 256);
  const uint64_t Ld = 2096 * 512;
  std::string msg;
  // The Mamba group first, as vLLM orders Nemotron's groups: a region's reads then list its
  // Mamba page and its attention ranges in the order the check derives them.
  // Planned: ids out of order, the Mamba state in a block of its own; validate agrees.
  const std::vector<PlanGroup> ok = {mamba_group({30}, {50}, 5000), attention_group({12, 10, 14}, {20, 25, 22, 21, 23}, 5000)};
  const TransferPlan p = compile_transfer_plan(ctx, ok);
  EXPECT_EQ(p.stats.attention_bytes, 6u * 5000 * 512);
  EXPECT_NO_THROW(validate_transfer_plan(p, ctx, ok));
  // The Mamba state written into block 10, which the attention group writes (out of order).
  std::vector<PlanGroup> bad = ok;
  bad[0] = mamba_group({10}, {50}, 5000);
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, bad); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "D region 0 offset " + std::to_string(10 * Ld))) << msg;
  EXPECT_TRUE(has(msg, "written twice")) << msg;
  // The same through the context's verdict (the C API's path): the Mamba template's pages are
  // listed first, so the region's reads are exactly its expected ranges and only the page's check
  // against the listed blocks stands between them and a plan.
  const PlanContextVerdict verdict = judge_plan_context(ctx);
  auto compile_judged = [&](const std::vector<PlanGroup>& groups) {
    std::vector<PlanGroupView> views;
    for (const PlanGroup& g : groups) views.push_back(view_of(g));
    TransferPlan out;
    compile_transfer_plan_into(ctx, views, out, verdict);
    return out;
  };
  const TransferPlan judged = compile_judged(ok);
  ASSERT_EQ(judged.ranks.size(), p.ranks.size());
  for (size_t i = 0; i < p.ranks.size(); ++i) EXPECT_EQ(judged.ranks[i].reads, p.ranks[i].reads);
  EXPECT_EQ(status_of([&] { compile_judged(bad); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "D region 0 offset " + std::to_string(10 * Ld))) << msg;
  EXPECT_TRUE(has(msg, "written twice")) << msg;
  // Two Mamba groups, the second only on region 5 (Nemotron's 5-layer group leaves it out of the
  // first): regions 0 and 5 share one attention class, whose ids are marked once while region 0
  // is checked and kept for region 5. A page clear in region 0 passes there; region 5's page in
  // block 10, which the attention group writes, must still be refused, in region 5. And the marks
  // left by a refused compile must not outlive it: the same plan without the conflict is planned,
  // then the conflict refused again.
  std::vector<PlanGroup> split = {mamba_group({30}, {50}, 5000), mamba_group({31}, {51}, 5000), ok[1]};
  split[0].regions = {0, 1, 2, 3, 4};
  split[1].regions = {5};
  for (int round = 0; round < 2; ++round) {
    EXPECT_NO_THROW(compile_judged(split));
    std::vector<PlanGroup> into5 = split;
    into5[1] = mamba_group({10}, {51}, 5000);
    into5[1].regions = {5};
    EXPECT_EQ(status_of([&] { compile_judged(into5); }, &msg), Status::Coverage);
    EXPECT_TRUE(has(msg, "D region 5 offset " + std::to_string(10 * Ld))) << msg;
    EXPECT_TRUE(has(msg, "written twice")) << msg;
  }
  // One block listed twice, both written.
  bad = {attention_group({12, 10, 12}, {20, 25, 22, 21, 23}, 5000)};
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, bad); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "D region 0 offset " + std::to_string(12 * Ld))) << msg;
  EXPECT_TRUE(has(msg, "written twice")) << msg;
  // A block listed past P's tokens (zeroed whole) that the Mamba group writes.
  bad = {mamba_group({14}, {50}, 3000), attention_group({12, 10, 14}, {20, 25, 22}, 3000)};
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, bad); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "which group 1 (attention) zeroes after the data arrives (tokens 0..2096 of its D block 14)"))
      << msg;
  // A plan whose zero ranges were edited to wipe bytes the group itself writes (block 12, out of
  // order in the list): validate_transfer_plan refuses it, naming the block.
  const std::vector<PlanGroup> one = {attention_group({12, 10, 14}, {20, 25, 22, 21, 23}, 5000)};
  TransferPlan edited = compile_transfer_plan(ctx, one);
  edited.zero[0].zero.push_back({12, 100, 200});
  EXPECT_EQ(status_of([&] { validate_transfer_plan(edited, ctx, one); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "group 0 (attention) writes D block 12 of region 0")) << msg;
  // A long prefix hit on fragmented ids: many held blocks (one guard each) against many written
  // ranges, which the check sorts after all; a Mamba state in a held block is refused.
  std::vector<uint64_t> d_ids, p_ids;
  for (uint64_t i = 0; i < 120; ++i) d_ids.push_back(200 - ((i * 37) % 120));  // 81..200, scattered
  for (uint64_t i = 0; i < 240; ++i) p_ids.push_back(10 + ((i * 53) % 240));
  const uint64_t tokens = 119 * 2096 + 1000, hit = 60 * 2096;
  PlanGroup held = attention_group(d_ids, p_ids, tokens, hit);
  held.trim.local_first_block = 0;
  const std::vector<PlanGroup> long_hit = {mamba_group({20}, {5}, tokens, hit), held};
  const TransferPlan q = compile_transfer_plan(ctx, long_hit);
  EXPECT_NO_THROW(validate_transfer_plan(q, ctx, long_hit));
  std::vector<PlanGroup> into_held = long_hit;
  into_held[0] = mamba_group({d_ids[7]}, {5}, tokens, hit);  // the 8th listed block: D's cached prefix
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, into_held); }, &msg), Status::Coverage);
  EXPECT_TRUE(has(msg, "lists as holding D's cached prefix (tokens 0..2096 of its D block " + std::to_string(d_ids[7])))
      << msg;
}

// --- MLA -------------------------------------------------------------------------------------

// One 576-byte latent per token, replicated: D TP2 rank 1 reads whole blocks from P TP4 rank 2
// only, and notifies both of its handshake targets.
TEST(TransferPlan, MlaReadsWholeBlocksFromOneRank) {
  const ModelDesc m = attention_model(1, 576, /*mla=*/true);
  const PlanContext ctx = context(m, config(2, 16), config(4, 16), 1, 1);
  const TransferPlan p = compile_transfer_plan(ctx, {attention_group({1, 9}, {2, 3}, 24)});
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_EQ(p.ranks[0].p_rank, 2u);
  const uint64_t L = 16 * 576;
  EXPECT_EQ(p.ranks[0].reads,
            (std::vector<PlanRead>{{0, 1 * L, 0, 2 * L, L}, {0, 9 * L, 0, 3 * L, 8 * 576}}));
  EXPECT_EQ(p.notify_ranks, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(p.notifications_per_p_rank, 1u);
}

// --- validation ------------------------------------------------------------------------------

// vLLM #52516: a request was reported ready after 64 KiB of a 256 KiB block had moved. Shape: D
// TP1 with 4 heads of 2*1024*2 B... here 4 heads x 16 tokens x 4096 B = 256 KiB blocks, P TP4 with
// 64 KiB blocks. A plan that only reads P rank 0 must be refused, naming the missing bytes.
TEST(TransferPlan, RefusesAPlanThatMoves64KiBOfA256KiBBlock) {
  ModelDesc m = attention_model(4, 1024);
  m.dtype_bytes = 2;
  const PlanContext ctx = context(m, config(1, 16), config(4, 16), 0, 1);
  ASSERT_EQ(ctx.local.regions[0].region.block_len, 256u * 1024);
  ASSERT_EQ(ctx.remote[0].regions[0].region.block_len, 64u * 1024);
  const std::vector<PlanGroup> groups = {attention_group({3}, {5}, 16)};
  TransferPlan p = compile_transfer_plan(ctx, groups);
  ASSERT_EQ(p.ranks.size(), 4u);
  EXPECT_NO_THROW(validate_transfer_plan(p, ctx, groups));
  p.ranks.resize(1);  // what vLLM moved
  std::string msg;
  EXPECT_EQ(status_of([&] { validate_transfer_plan(p, ctx, groups); }, &msg), Status::Coverage);
  EXPECT_NE(msg.find("misses D region 0 offset " + std::to_string(3 * 262144 + 65536) +
                     " length 196608"), std::string::npos) << msg;
}

TEST(TransferPlan, RefusesDuplicatedAndStrayReads) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext ctx = context(m, config(2, 16), config(2, 16), 0, 1);
  const std::vector<PlanGroup> groups = {attention_group({3}, {7}, 16)};
  TransferPlan p = compile_transfer_plan(ctx, groups);
  TransferPlan dup = p;
  dup.ranks[0].reads.push_back({0, 3 * 16384 + 100, 0, 0, 10});
  std::string msg;
  EXPECT_EQ(status_of([&] { validate_transfer_plan(dup, ctx, groups); }, &msg), Status::Coverage);
  EXPECT_NE(msg.find("overlap: D region 0 offset 49252 length 10"), std::string::npos) << msg;
  TransferPlan stray = p;
  stray.ranks[0].reads.push_back({0, 0, 0, 0, 10});
  EXPECT_EQ(status_of([&] { validate_transfer_plan(stray, ctx, groups); }, &msg), Status::Coverage);
  EXPECT_NE(msg.find("writes D region 0 offset 0 length 10"), std::string::npos) << msg;
}

TEST(TransferPlan, TwoGroupsWritingTheSameBlockAreACoverageError) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext ctx = context(m, config(2, 16), config(2, 16), 0, 1);
  EXPECT_EQ(status_of([&] {
              compile_transfer_plan(ctx, {attention_group({3}, {7}, 16), attention_group({3}, {8}, 16)});
            }),
            Status::Coverage);
}

TEST(TransferPlan, BlockIdsOutsideTheRegionAreOutOfBounds) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext ctx = context(m, config(2, 16), config(2, 16), 0, 1, /*blocks=*/64);
  std::string msg;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, {attention_group({64}, {7}, 16)}); }, &msg),
            Status::OutOfBounds);
  EXPECT_NE(msg.find("D region 0: read at offset 1048576 length 16384 leaves the registered "
                     "region of 1048576 bytes"), std::string::npos) << msg;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, {attention_group({3}, {100}, 16)}); }, &msg),
            Status::OutOfBounds);
  EXPECT_NE(msg.find("P rank 0 region 0"), std::string::npos) << msg;
}

TEST(TransferPlan, ContextErrorsNameTheValues) {
  const Nano n;
  std::string msg;
  PlanContext missing = n.ctx;
  missing.remote.pop_back();  // P rank 3 (not read by D rank 0) may be absent ...
  EXPECT_NO_THROW(compile_transfer_plan(missing, {mamba_group({40}, {50}, 100)}));
  missing.remote.erase(missing.remote.begin() + 1);  // ... P rank 1 may not
  EXPECT_EQ(status_of([&] { compile_transfer_plan(missing, {mamba_group({40}, {50}, 100)}); }, &msg),
            Status::NotFound);
  EXPECT_NE(msg.find("P rank 1"), std::string::npos) << msg;

  PlanContext no_state = n.ctx;
  no_state.local_mamba.reset();
  EXPECT_EQ(status_of([&] { compile_transfer_plan(no_state, {mamba_group({40}, {50}, 100)}); }, &msg),
            Status::InvalidArgument);
  EXPECT_NE(msg.find("D MambaState"), std::string::npos) << msg;

  PlanGroup bad_region = attention_group({1}, {1}, 100);
  bad_region.regions = {6};
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, {bad_region}); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("region index 6 is out of range; the engines register 6 regions"),
            std::string::npos) << msg;

  PlanGroup wrong_bs = attention_group({1}, {1}, 100);
  wrong_bs.trim.local_tokens_per_block = 16;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, {wrong_bs}); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("16 disagrees with the metadata's 2096"), std::string::npos) << msg;

  PlanContext wrong_rank = n.ctx;
  wrong_rank.local.tp_rank = 1;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(wrong_rank, {}); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("D rank 0 of 2 but the D metadata is rank 1 of 2"), std::string::npos) << msg;
}

TEST(TransferPlan, TrimCoverageErrorsPropagateWithTheGroup) {
  const Nano n;
  std::string msg;
  // D holds blocks for 2096 tokens but P computed 3000: D's list cannot hold the rest.
  EXPECT_EQ(status_of([&] { compile_transfer_plan(n.ctx, {attention_group({10}, {20, 21, 22}, 3000)}); },
                      &msg),
            Status::Coverage);
  EXPECT_NE(msg.find("group 0 (attention)"), std::string::npos) << msg;
}

// --- JSON --------------------------------------------------------------------------------------

TEST(TransferPlan, JsonDumpHoldsEveryReadAndTheStats) {
  const ModelDesc m = tiny_hybrid();
  const PlanContext ctx = context(m, config(1, 16), config(2, 16), 0, 1);
  const TransferPlan p = compile_transfer_plan(
      ctx, {attention_group({2, 3}, {4, 6}, 20), mamba_group({5}, {1}, 20)});
  const auto j = nlohmann::json::parse(plan_to_json(p));
  EXPECT_EQ(j["d_tp_size"], 1);
  EXPECT_EQ(j["p_tp_size"], 2);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["p_tp_rank"], 1);
  EXPECT_EQ(j["ranks"][1]["reads"][0]["local_offset"], 1280);
  EXPECT_EQ(j["ranks"][1]["reads"][0]["remote_offset"], 1024);
  EXPECT_EQ(j["ranks"][1]["reads"][0]["length"], 256);
  EXPECT_EQ(j["ranks"][0]["reads"].size(), 7u);
  EXPECT_EQ(j["stats"]["bytes"], p.stats.bytes);
  EXPECT_EQ(j["zero"][0]["kind"], "attention");
  EXPECT_EQ(j["zero"][0]["zero"][0]["token_begin"], 4);
  EXPECT_EQ(j["notify_ranks"], nlohmann::json::array({0, 1}));
}

}  // namespace

// --- KV layout (NHD) -------------------------------------------------------------------------

namespace {

PlanContext with_layout(PlanContext ctx, KvLayout d, KvLayout p) {
  ctx.local.kv_layout = d;
  for (auto& r : ctx.remote) r.kv_layout = p;
  return ctx;
}

}  // namespace

// NHD (tokens x heads x bytes) on both engines with 4 heads per rank: a token run over all the
// rank's heads is ONE piece at t0 * 4 * 256, also when it is not a whole block. D blocks of 16
// tokens (16384 B), P blocks of 32 tokens (32768 B), shuffled ids so nothing coalesces. The old
// code cut the runs into per-head pieces at HND offsets: wrong bytes on both sides.
TEST(TransferPlan, NhdTokenRunsAreOneContiguousPieceAtTokenOffsets) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext ctx =
      with_layout(context(m, config(2, 16), config(2, 32), 1, 1), KvLayout::NHD, KvLayout::NHD);
  const std::vector<PlanGroup> groups = {attention_group({5, 3, 9}, {8, 2}, 40)};
  const TransferPlan p = compile_transfer_plan(ctx, groups);
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_EQ(p.ranks[0].p_rank, 1u);
  const uint64_t Ld = 16384, Lp = 32768, tok = 4 * 256;
  const std::vector<PlanRead> want = {
      {0, 5 * Ld, 0, 8 * Lp, 16 * tok},             // tokens 0..16: P block 8, tokens 0..16
      {0, 3 * Ld, 0, 8 * Lp + 16 * tok, 16 * tok},  // tokens 16..32: P block 8, tokens 16..32
      {0, 9 * Ld, 0, 2 * Lp, 8 * tok},              // tokens 32..40: P block 2, tokens 0..8
  };
  EXPECT_EQ(p.ranks[0].reads, want);
  EXPECT_EQ(p.stats.pieces_before_coalescing, 3u);
  EXPECT_EQ(p.stats.bytes, 40 * tok);
  EXPECT_NO_THROW(validate_transfer_plan(p, ctx, groups));
  // Consecutive ids on both sides coalesce into one read, as under HND.
  const TransferPlan c = compile_transfer_plan(ctx, {attention_group({3, 4, 5}, {7, 8}, 40)});
  EXPECT_EQ(c.ranks[0].reads, (std::vector<PlanRead>{{0, 3 * Ld, 0, 7 * Lp, 40 * tok}}));
}

// The coverage oracle reads D's layout on its own: the HND plan of a partial block (per-head
// pieces at h * 16 tokens * 256 B) does not cover what an NHD D block needs.
TEST(TransferPlan, CoverageCheckIsLayoutAware) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext hnd = context(m, config(2, 16), config(2, 16), 0, 1);
  const PlanContext nhd = with_layout(hnd, KvLayout::NHD, KvLayout::NHD);
  const std::vector<PlanGroup> groups = {attention_group({3}, {7}, 10)};
  const TransferPlan hp = compile_transfer_plan(hnd, groups);
  const TransferPlan np = compile_transfer_plan(nhd, groups);
  EXPECT_EQ(hp.ranks[0].reads.size(), 4u);  // one piece per head
  EXPECT_EQ(np.ranks[0].reads, (std::vector<PlanRead>{{0, 3 * 16384, 0, 7 * 16384, 10 * 1024}}));
  std::string msg;
  EXPECT_EQ(status_of([&] { validate_transfer_plan(hp, nhd, groups); }, &msg), Status::Coverage);
  EXPECT_NE(msg.find("D region 0 offset " + std::to_string(3 * 16384 + 2560)), std::string::npos) << msg;
  EXPECT_EQ(status_of([&] { validate_transfer_plan(np, hnd, groups); }), Status::Coverage);
  EXPECT_NO_THROW(validate_transfer_plan(np, nhd, groups));
  EXPECT_NO_THROW(validate_transfer_plan(hp, hnd, groups));
}

// NHD with different heads per rank (D TP2 holds 4 of 8 heads, P TP4 holds 2, and the reverse):
// a head subset of an NHD block is not contiguous. Refused like the handshake refuses it.
TEST(TransferPlan, NhdWithHeterogeneousHeadsPerRankIsUnsupportedLayout) {
  const ModelDesc m = attention_model(8, 128);
  for (const auto& [dtp, ptp] : {std::pair{2u, 4u}, std::pair{4u, 2u}}) {
    const PlanContext ctx = with_layout(context(m, config(dtp, 16), config(ptp, 16), 0, 1),
                                        KvLayout::NHD, KvLayout::NHD);
    const std::vector<PlanGroup> groups = {attention_group({3}, {7}, 10)};
    std::string msg;
    EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, groups); }, &msg), Status::UnsupportedLayout);
    EXPECT_NE(msg.find("NHD"), std::string::npos) << msg;
    EXPECT_NE(msg.find("use the HND KV cache layout on the prefill engine"), std::string::npos) << msg;
    EXPECT_EQ(status_of([&] { validate_transfer_plan(TransferPlan{}, ctx, groups); }),
              Status::UnsupportedLayout);
  }
}

// Different layouts on D and P need the plan context's permute_on_receive (named by the error);
// the P ranks of one engine must agree with each other.
TEST(TransferPlan, LayoutsMustMatch) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext base = context(m, config(2, 16), config(2, 16), 0, 1);
  std::string msg;
  EXPECT_EQ(status_of([&] {
              compile_transfer_plan(with_layout(base, KvLayout::NHD, KvLayout::HND),
                                    {attention_group({3}, {7}, 16)});
            }, &msg),
            Status::UnsupportedLayout);
  EXPECT_NE(msg.find("D NHD, P HND"), std::string::npos) << msg;
  EXPECT_NE(msg.find("set permute_on_receive"), std::string::npos) << msg;
  PlanContext mixed = with_layout(base, KvLayout::NHD, KvLayout::NHD);
  mixed.remote[1].kv_layout = KvLayout::HND;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(mixed, {attention_group({3}, {7}, 16)}); }, &msg),
            Status::Incompatible);
  EXPECT_NE(msg.find("P ranks 0 and 1 disagree on the KV cache layout (NHD vs HND)"),
            std::string::npos) << msg;
}

// MLA has one latent head: NHD and HND are the same bytes, so any layouts plan alike.
TEST(TransferPlan, MlaPlansAlikeUnderEveryLayout) {
  const ModelDesc m = attention_model(1, 64, /*mla=*/true);
  const PlanContext base = context(m, config(2, 16), config(4, 16), 1, 1);
  const std::vector<PlanGroup> groups = {attention_group({3, 9}, {7, 2}, 20)};
  const TransferPlan want = compile_transfer_plan(base, groups);
  for (KvLayout d : {KvLayout::HND, KvLayout::NHD}) {
    for (KvLayout p : {KvLayout::HND, KvLayout::NHD}) {
      const PlanContext ctx = with_layout(base, d, p);
      const TransferPlan got = compile_transfer_plan(ctx, groups);
      ASSERT_EQ(got.ranks.size(), want.ranks.size());
      for (size_t i = 0; i < got.ranks.size(); ++i) EXPECT_EQ(got.ranks[i].reads, want.ranks[i].reads);
      EXPECT_NO_THROW(validate_transfer_plan(want, ctx, groups));
    }
  }
}

// --- overlapping regions ---------------------------------------------------------------------

// Two regions sharing bytes on either side: a plan would write one layer's KV into another's.
TEST(TransferPlan, OverlappingRegionsAreRefused) {
  const ModelDesc m = attention_model(8, 128);
  const PlanContext base = context(m, config(2, 16), config(2, 16), 0, 2);
  const uint64_t size = 64 * 16384;
  std::string msg;
  PlanContext local = base;
  local.local.regions[1].region.base = local.local.regions[0].region.base + size - 16384;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(local, {attention_group({3}, {7}, 16)}); }, &msg),
            Status::InvalidArgument);
  const uint64_t b0 = base.local.regions[0].region.base;
  EXPECT_NE(msg.find("D metadata: regions[0] [" + std::to_string(b0) + ", " +
                     std::to_string(b0 + size) + ") overlaps regions[1] [" +
                     std::to_string(b0 + size - 16384) + ", " + std::to_string(b0 + 2 * size - 16384) + ")"),
            std::string::npos) << msg;
  EXPECT_EQ(status_of([&] { validate_transfer_plan(TransferPlan{}, local, {}); }), Status::InvalidArgument);
  PlanContext remote = base;
  remote.remote[1].regions[0].region.base = remote.remote[1].regions[1].region.base;  // same tensor twice
  EXPECT_EQ(status_of([&] { compile_transfer_plan(remote, {attention_group({3}, {7}, 16)}); }, &msg),
            Status::InvalidArgument);
  EXPECT_NE(msg.find("P rank 1 metadata: regions[0]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlaps regions[1]"), std::string::npos) << msg;
}

// The plan's layout rule is the handshake's: for every TP pair and layout pair, compile refuses
// with UnsupportedLayout exactly when validate_pair reports a kv_layout item; otherwise the plan
// compiles and passes its own coverage check.
// The handshake accepts a pair of layouts when some plan can serve it (different layouts by
// permuting on receive; heterogeneous heads with HND on a side); compile then requires the flag
// for different layouts and HND on P itself when the heads differ, and refuses whatever the
// handshake refuses.
TEST(TransferPlan, LayoutRuleAgreesWithTheHandshake) {
  size_t refused = 0, compiled_nhd = 0, permuted = 0, needs_flag = 0, p_nhd_split = 0;
  for (const bool mla : {false, true}) {
    const ModelDesc m = mla ? attention_model(1, 64, true) : attention_model(4, 64);
    for (uint32_t dtp : {1u, 2u, 4u, 8u}) {
      for (uint32_t ptp : {1u, 2u, 4u, 8u}) {
        if (!mla && ptp > dtp && ptp > 4) continue;  // replicated P with more ranks: refused anyway
        for (KvLayout dl : {KvLayout::HND, KvLayout::NHD}) {
          for (KvLayout pl : {KvLayout::HND, KvLayout::NHD}) {
            for (const bool flag : {false, true}) {
              PlanContext ctx = with_layout(context(m, config(dtp, 16), config(ptp, 32), 0, 1), dl, pl);
              ctx.permute_on_receive = flag;
              bool layout_item = false;
              for (const auto& it : validate_pair(ctx.local, ctx.remote[0]))
                layout_item = layout_item || it.field == "kv_layout";
              const std::vector<PlanGroup> groups = {attention_group({3, 5, 4}, {7, 2}, 40)};
              SCOPED_TRACE(testing::Message() << "mla " << mla << " D tp" << dtp << " P tp" << ptp << " "
                                              << kv_layout_name(dl) << "/" << kv_layout_name(pl) << " flag " << flag);
              std::string msg;
              const Status st = status_of([&] { compile_transfer_plan(ctx, groups); }, &msg);
              const bool heads_differ = ctx.mapping.local_physical_heads != ctx.mapping.remote_physical_heads;
              if (layout_item) {
                EXPECT_EQ(st, Status::UnsupportedLayout) << msg;
                ++refused;
              } else if (!mla && pl == KvLayout::NHD && heads_differ) {
                // Accepted by the handshake (D is HND: it could be the side read from), but P's
                // NHD blocks cannot be read by head: HND on P is the fix.
                EXPECT_EQ(st, Status::UnsupportedLayout) << msg;
                EXPECT_NE(msg.find("HND KV cache layout on the prefill engine"), std::string::npos) << msg;
                ++p_nhd_split;
              } else if (!mla && dl != pl && !flag) {
                EXPECT_EQ(st, Status::UnsupportedLayout) << msg;
                EXPECT_NE(msg.find("permute_on_receive"), std::string::npos) << msg;
                ++needs_flag;
              } else {
                EXPECT_EQ(st, Status::Ok) << msg;
                if (dl == KvLayout::NHD && !mla) ++compiled_nhd;
                if (dl != pl && !mla) ++permuted;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(refused, 16u);
  EXPECT_GE(compiled_nhd, 4u);  // NHD with equal heads per rank (e.g. same TP) plans
  EXPECT_GE(permuted, 18u);
  EXPECT_GE(needs_flag, 18u);
  EXPECT_GE(p_nhd_split, 10u);
}

// --- a peer that fails the handshake ----------------------------------------------------------

namespace {

// Nano P TP4 -> D TP2 rank 0 with an attention and a Mamba group.
std::vector<PlanGroup> nano_groups() {
  return {attention_group({10, 12}, {20, 25, 22}, 3000), mamba_group({40}, {50}, 3000)};
}

// Mutates P metadata as a peer would send it: the bytes are re-encoded (CRC re-sealed) and
// decoded, so every mutation here passes decode() on its own.
PlanContext with_peer(PlanContext ctx, const std::function<void(EngineMetadata&)>& mutate,
                      std::vector<uint32_t> ranks = {0, 1, 2, 3}) {
  for (uint32_t r : ranks) {
    mutate(ctx.remote[r]);
    ctx.remote[r] = decode(encode(ctx.remote[r]));
  }
  return ctx;
}

// Expects compile and validate to refuse `ctx` with Incompatible naming every needle.
void expect_refused(const PlanContext& ctx, const TransferPlan& baseline,
                    std::initializer_list<std::string> needles) {
  std::string msg;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, nano_groups()); }, &msg),
            Status::Incompatible)
      << msg;
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << n << " in: " << msg;
  EXPECT_EQ(status_of([&] { validate_transfer_plan(baseline, ctx, nano_groups()); }, &msg),
            Status::Incompatible)
      << msg;
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << n << " in: " << msg;
  EXPECT_EQ(status_of([&] { validate_plan_context(ctx); }, &msg), Status::Incompatible) << msg;
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << n << " in: " << msg;
  // A verdict judged once reports the same error, word for word.
  const PlanContextVerdict v = judge_plan_context(ctx);
  EXPECT_EQ(v.context_status, Status::Ok);
  EXPECT_EQ(v.peer_status, Status::Incompatible);
  std::string with_verdict;
  TransferPlan out;
  const auto groups = nano_groups();
  std::vector<PlanGroupView> views;
  for (const auto& g : groups) views.push_back(view_of(g));
  EXPECT_EQ(status_of([&] { compile_transfer_plan_into(ctx, views, out, v); }, &with_verdict),
            Status::Incompatible);
  std::string without;
  status_of([&] { compile_transfer_plan(ctx, groups); }, &without);
  EXPECT_EQ(with_verdict, without);
}

}  // namespace

// Each mutation below passes decode() but fails validate_pair(D, P); compile used to return the
// baseline plan unchanged (it compared only tp_size, conv_bytes and ssm_bytes of the states).
TEST(TransferPlanPeer, PlanIsRefusedWhenThePeerFailsTheHandshake) {
  const Nano n;
  EXPECT_NO_THROW(validate_plan_context(n.ctx));
  const TransferPlan baseline = compile_transfer_plan(n.ctx, nano_groups());
  EXPECT_NO_THROW(validate_transfer_plan(baseline, n.ctx, nano_groups()));
  ASSERT_EQ(n.ctx.remote[0].conv_projection_bytes, (std::vector<uint64_t>{6144, 1536, 1536}));

  // Projection split changed with the same total (x grows by what B loses).
  expect_refused(with_peer(n.ctx, [](EngineMetadata& m) {
                   m.conv_projection_bytes[0] += 512;
                   m.conv_projection_bytes[1] -= 512;
                 }),
                 baseline,
                 {"plan context refused", "D vs P rank 0: PDKV_ERR_INCOMPATIBLE conv_projection_bytes[0]",
                  "D vs P rank 3: PDKV_ERR_INCOMPATIBLE conv_projection_bytes[0]",
                  "P rank 0: MambaState conv_projection_bytes[0] (x) 6144 != metadata "
                  "conv_projection_bytes[0] (x) 6656",
                  "P rank 2: MambaState conv_projection_bytes[1] (B) 1536 != metadata"});
  // Mamba type changed (GDN has three projections too, so the metadata stays well-formed).
  expect_refused(with_peer(n.ctx, [](EngineMetadata& m) { m.mamba_type = MambaType::Gdn; }),
                 baseline,
                 {"INCOMPATIBLE mamba_type: Mamba layer types differ (mamba2 vs gdn)",
                  "P rank 1: MambaState mamba_type mamba2 != metadata mamba_type gdn"});
  // Total KV heads changed (4 heads at TP4: still one head per rank, same bytes).
  expect_refused(with_peer(n.ctx, [](EngineMetadata& m) { m.total_kv_heads = 4; }), baseline,
                 {"INCOMPATIBLE total_kv_heads: total KV heads differ (2 vs 4)"});
  // A region's kind changed.
  expect_refused(with_peer(n.ctx, [](EngineMetadata& m) { m.regions[2].kind = RegionKind::Attention; }),
                 baseline, {"INCOMPATIBLE regions[2].kind", "local: mamba, remote: attention"});
  // The model fingerprint changed.
  expect_refused(with_peer(n.ctx, [](EngineMetadata& m) { m.model_fingerprint ^= 1; }), baseline,
                 {"INCOMPATIBLE model_fingerprint"});
  // One P rank D does not even read from (rank 3: D rank 0 reads ranks 0 and 1) is enough.
  expect_refused(with_peer(n.ctx, [](EngineMetadata& m) { m.total_kv_heads = 4; }, {3}), baseline,
                 {"D vs P rank 3: PDKV_ERR_INCOMPATIBLE total_kv_heads"});
  // A doubled attention_bytes_per_token cannot even be decoded (check_metadata ties it to
  // block_len), and with block_len doubled too the per-head bytes differ from D's.
  EXPECT_THROW(with_peer(n.ctx, [](EngineMetadata& m) { m.attention_bytes_per_token *= 2; }), Error);
  expect_refused(with_peer(n.ctx,
                           [](EngineMetadata& m) {
                             m.attention_bytes_per_token *= 2;
                             const uint64_t b0 = m.regions[0].region.base;
                             for (size_t i = 0; i < m.regions.size(); ++i) {
                               Region& r = m.regions[i].region;
                               r.block_len *= 2;  // regions stay back to back
                               r.base = b0 + i * r.block_len * r.num_blocks;
                             }
                           }),
                 baseline, {"INCOMPATIBLE attention_bytes_per_token", "per KV head differ"});
}

// The P ranks must pass validate_engine_ranks: the same rank twice, or ranks disagreeing.
TEST(TransferPlanPeer, PRanksMustAgreeWithEachOther) {
  const Nano n;
  const TransferPlan baseline = compile_transfer_plan(n.ctx, nano_groups());
  PlanContext twice = n.ctx;
  twice.remote.push_back(twice.remote[1]);
  expect_refused(twice, baseline,
                 {"P ranks of engine 'p': PDKV_ERR_INCOMPATIBLE tp_rank: rank entry 4 (tp_rank 1) repeats "
                  "a tp_rank already handshaked"});
  expect_refused(with_peer(n.ctx, [](EngineMetadata& m) {
                   m.num_kernel_blocks /= 2;
                   for (auto& r : m.regions) r.region.num_blocks /= 2;
                 }, {2}),
                 baseline, {"INCOMPATIBLE num_kernel_blocks"});
}

// The Mamba states must agree with the metadata in every field the metadata carries; the old
// check compared only tp_size, conv_bytes and ssm_bytes, so a state with another projection
// split (same total) planned reads at the wrong offsets.
TEST(TransferPlanPeer, MambaStatesMustMatchTheMetadataInEveryField) {
  const Nano n;
  const TransferPlan baseline = compile_transfer_plan(n.ctx, nano_groups());
  PlanContext split = n.ctx;
  split.local_mamba->projections[0].bytes += 1024;
  split.local_mamba->projections[1].bytes -= 1024;
  split.remote_mamba->projections[0].bytes += 512;
  split.remote_mamba->projections[1].bytes -= 512;
  // Every item is listed: D's and each P rank's.
  expect_refused(split, baseline,
                 {"D: MambaState conv_projection_bytes[0] (x) 13312 != metadata "
                  "conv_projection_bytes[0] (x) 12288",
                  "D: MambaState conv_projection_bytes[1] (B) 2048 != metadata",
                  "P rank 0: MambaState conv_projection_bytes[0] (x) 6656",
                  "P rank 3: MambaState conv_projection_bytes[1] (B) 1024"});
  PlanContext type = n.ctx;
  type.local_mamba->type = MambaType::Gdn;
  type.remote_mamba->type = MambaType::Gdn;
  expect_refused(type, baseline, {"D: MambaState mamba_type gdn != metadata mamba_type mamba2"});
  PlanContext tp = n.ctx;
  tp.remote_mamba->tp_size = 2;
  expect_refused(tp, baseline, {"P rank 0: MambaState tp_size 2 != metadata tp_size 4"});
  PlanContext bytes = n.ctx;
  bytes.local_mamba->ssm_bytes += 2;
  bytes.local_mamba->conv_bytes -= 2;
  expect_refused(bytes, baseline,
                 {"D: MambaState conv_bytes", "D: MambaState ssm_bytes"});
  PlanContext count = n.ctx;
  count.remote_mamba->projections.pop_back();
  expect_refused(count, baseline, {"P rank 1: MambaState conv projection count 2 != metadata conv projection count 3"});
}

// A verdict judged once gives the plan compile_transfer_plan gives, and reports each error at
// the point compile_transfer_plan does: a context error before the request's own errors, a peer
// error after them.
TEST(TransferPlanPeer, VerdictJudgedOnceReportsWhatCompileReports) {
  const Nano n;
  const auto groups = nano_groups();
  std::vector<PlanGroupView> views;
  for (const auto& g : groups) views.push_back(view_of(g));
  const PlanContextVerdict ok = judge_plan_context(n.ctx);
  ASSERT_EQ(ok.context_status, Status::Ok);
  ASSERT_EQ(ok.peer_status, Status::Ok);
  TransferPlan reused;
  for (int i = 0; i < 3; ++i) {  // the reused plan's buffers give the same plan every time
    compile_transfer_plan_into(n.ctx, views, reused, ok);
    const TransferPlan fresh = compile_transfer_plan(n.ctx, groups);
    EXPECT_EQ(plan_to_json(reused), plan_to_json(fresh));
  }
  // A request error (a too-short D list) comes before a peer error, with or without a verdict.
  auto bad_request = groups;
  bad_request[0].trim.local_blocks.pop_back();
  std::vector<PlanGroupView> bad_views;
  for (const auto& g : bad_request) bad_views.push_back(view_of(g));
  const PlanContext bad_peer = with_peer(n.ctx, [](EngineMetadata& m) { m.total_kv_heads = 4; });
  const PlanContextVerdict peer = judge_plan_context(bad_peer);
  EXPECT_EQ(peer.peer_status, Status::Incompatible);
  std::string a, b;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(bad_peer, bad_request); }, &a), Status::Coverage);
  EXPECT_EQ(status_of([&] { compile_transfer_plan_into(bad_peer, bad_views, reused, peer); }, &b),
            Status::Coverage);
  EXPECT_EQ(a, b);
  // A context error (the mapping for another D rank) comes first.
  PlanContext bad_ctx = n.ctx;
  bad_ctx.mapping.input.local_rank = 1;
  const PlanContextVerdict ctx_v = judge_plan_context(bad_ctx);
  EXPECT_EQ(ctx_v.context_status, Status::InvalidArgument);
  EXPECT_EQ(status_of([&] { compile_transfer_plan(bad_ctx, bad_request); }, &a), Status::InvalidArgument);
  EXPECT_EQ(status_of([&] { compile_transfer_plan_into(bad_ctx, bad_views, reused, ctx_v); }, &b),
            Status::InvalidArgument);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(reused.ranks.empty());
}

// make_plan_context derives the mapping from the metadata: the hand-built context's mapping, and
// therefore the same plan.
TEST(TransferPlan, ContextDerivedFromMetadataPlansAsTheHandBuiltOne) {
  const Nano n;
  const PlanContext derived =
      make_plan_context(n.ctx.local, n.ctx.remote, n.ctx.local_mamba, n.ctx.remote_mamba);
  EXPECT_EQ(derived.mapping.input.local_rank, n.ctx.mapping.input.local_rank);
  EXPECT_EQ(derived.mapping.input.remote_tp, 4u);
  EXPECT_EQ(derived.mapping.handshake_targets, n.ctx.mapping.handshake_targets);
  EXPECT_EQ(derived.mapping.notify_ranks, n.ctx.mapping.notify_ranks);
  EXPECT_EQ(plan_to_json(compile_transfer_plan(derived, nano_groups())),
            plan_to_json(compile_transfer_plan(n.ctx, nano_groups())));
  std::string msg;
  EXPECT_EQ(status_of([&] { make_plan_context(n.ctx.local, {}); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("no P rank metadata"), std::string::npos) << msg;
}
