// Pipeline parallelism on either side (issue 12 item 1): stage metadata and its 1.2 wire label,
// vLLM's default layer split, the pairing of D stages with P stages, the handshake between
// stages, and plans that read only the layers both stages hold, with regions paired by layer.
// The plans below are worked out by hand: P PP2 (heterogeneous TP) -> D PP1, and a Mamba hybrid
// P PP1 -> D PP2 whose stage boundary falls between an attention and a Mamba layer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pdkv/core/geometry.hpp"
#include "pdkv/core/handshake.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/pipeline.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

// Four GQA layers, 2 KV heads of 4 + 4 one-byte elements: 8 bytes per head per token.
ModelDesc attn4() {
  ModelDesc m;
  m.name = "attn4";
  m.attention.num_kv_heads = 2;
  m.attention.head_size = 4;
  m.attention.head_size_v = 4;
  m.dtype_bytes = 1;
  m.layer_pattern = "****";
  return m;
}

EngineConfig engine(uint32_t tp) {
  EngineConfig e;
  e.tp_size = tp;
  e.user_block_size = 16;
  return e;
}

EngineLayout stage(const std::string& id, uint32_t rank, uint32_t regions, uint64_t base, uint32_t pp_size,
                   uint32_t pp_rank, uint32_t begin, uint32_t end) {
  EngineLayout l;
  l.engine_id = id;
  l.tp_rank = rank;
  l.num_logical_blocks = 16;
  l.num_regions = regions;
  l.base = base;
  l.pp_size = pp_size;
  l.pp_rank = pp_rank;
  l.layer_begin = begin;
  l.layer_end = end;
  return l;
}

EngineMetadata meta(const ModelDesc& m, uint32_t tp, const EngineLayout& l) {
  const EngineConfig e = engine(tp);
  return metadata_from_geometry(m, e, derive_geometry(m, e), l);
}

PlanGroup attention_group(std::vector<uint32_t> layers) {
  PlanGroup g;
  g.trim.kind = GroupKind::Attention;
  g.trim.local_blocks = {3};
  g.trim.remote_blocks = {5};
  g.trim.remote_computed_tokens = 16;
  g.layers = std::move(layers);
  return g;
}

TEST(Pipeline, VllmDefaultLayerSplit) {
  // vLLM's uneven auto partition cases (tests/distributed/test_pipeline_partition.py).
  EXPECT_EQ(pipeline_layer_window(2, 0, 2), (LayerWindow{0, 1}));
  EXPECT_EQ(pipeline_layer_window(2, 1, 2), (LayerWindow{1, 2}));
  EXPECT_EQ(pipeline_layer_window(3, 0, 2), (LayerWindow{0, 2}));
  EXPECT_EQ(pipeline_layer_window(3, 1, 2), (LayerWindow{2, 3}));
  EXPECT_EQ(pipeline_layer_window(4, 0, 3), (LayerWindow{0, 1}));
  EXPECT_EQ(pipeline_layer_window(4, 1, 3), (LayerWindow{1, 3}));
  EXPECT_EQ(pipeline_layer_window(4, 2, 3), (LayerWindow{3, 4}));
  EXPECT_EQ(pipeline_layer_window(5, 0, 3), (LayerWindow{0, 2}));
  EXPECT_EQ(pipeline_layer_window(5, 1, 3), (LayerWindow{2, 4}));
  EXPECT_EQ(pipeline_layer_window(5, 2, 3), (LayerWindow{4, 5}));
  // Nemotron-3-Nano's 52 layers over 2 and 3 stages: 26/26 and 17/18/17.
  EXPECT_EQ(pipeline_layer_window(52, 1, 2), (LayerWindow{26, 52}));
  EXPECT_EQ(pipeline_layer_window(52, 1, 3), (LayerWindow{17, 35}));
  expect_error([] { pipeline_layer_window(2, 0, 3); }, Status::InvalidArgument, {"pp_size 3", "2 layers"});
  expect_error([] { pipeline_layer_window(8, 2, 2); }, Status::InvalidArgument, {"stage 2", "pp_size 2"});
}

TEST(Pipeline, StageMetadataIsCheckedAndLabelled12) {
  const ModelDesc m = attn4();
  const EngineMetadata s1 = meta(m, 2, stage("p", 1, 2, 1ull << 40, 2, 1, 2, 4));
  EXPECT_EQ(s1.pp_size, 2u);
  EXPECT_EQ(s1.pp_rank, 1u);
  EXPECT_EQ(s1.layer_begin, 2u);
  EXPECT_EQ(s1.layer_end, 4u);
  EXPECT_EQ(s1.regions[0].layer, 2u);
  EXPECT_EQ(s1.regions[1].layer, 3u);
  const std::vector<uint8_t> b = encode(s1);
  EXPECT_EQ(b[6], 2);  // minor 1.2: a pipeline stage
  EXPECT_EQ(decode(b), s1);

  // Single-stage metadata keeps its bytes: label 1.0, no pipeline flag, no trailing fields.
  const EngineMetadata one = meta(m, 2, stage("p", 1, 2, 1ull << 40, 1, 0, 0, kLayerEndOpen));
  const std::vector<uint8_t> ob = encode(one);
  EXPECT_EQ(ob[6], 0);
  EXPECT_EQ(ob.size() + 16, b.size());
  EXPECT_EQ(decode(ob).pp_size, 1u);

  // A stage's bytes relabelled 1.1 are refused (a 1.1 reader refuses the unknown flag bit).
  std::vector<uint8_t> old = b;
  old[6] = 1;
  const uint32_t crc = crc32c(std::span<const uint8_t>(old.data() + 16, old.size() - 16));
  for (int i = 0; i < 4; ++i) old[12 + i] = static_cast<uint8_t>(crc >> (8 * i));
  expect_error([&] { decode(old); }, Status::Parse, {"pipeline bit", "1.2"});

  auto bad = [&](auto edit, const std::vector<std::string>& words) {
    EngineMetadata x = s1;
    edit(x);
    expect_error([&] { check_metadata(x, Status::InvalidArgument); }, Status::InvalidArgument, words);
  };
  bad([](EngineMetadata& x) { x.pp_rank = 2; }, {"pp_rank", "= 2", "pp_size 2"});
  bad([](EngineMetadata& x) { x.pp_size = 0; }, {"pp_size", "= 0"});
  bad([](EngineMetadata& x) { x.layer_end = 2; }, {"layer_end", "= 2", "layer_begin 2"});
  bad([](EngineMetadata& x) { x.pp_rank = 0; }, {"layer_begin", "= 2", "pp_rank 0"});
  bad([](EngineMetadata& x) { x.pp_size = 3; x.layer_end = kLayerEndOpen; }, {"layer_end", "open", "pp_rank 1 of pp_size 3"});
  bad([](EngineMetadata& x) { x.regions[1].layer = 4; }, {"regions[1].layer", "= 4", "[2, 4)"});
  bad([](EngineMetadata& x) { x.pp_size = 1; x.pp_rank = 0; }, {"[2, 4)", "pp_size is 1", "[0, open)"});
  expect_error([&] { meta(m, 2, stage("p", 0, 3, 1ull << 40, 2, 1, 2, 4)); }, Status::InvalidArgument,
               {"num_regions 3", "2 layers", "[2, 4)"});
}

TEST(Pipeline, StagesPairByOverlappingWindows) {
  const ModelDesc m = attn4();
  // P PP2 [0,2) [2,4); D PP2 [0,3) [3,open): D stage 0 reads from both P stages.
  const std::vector<EngineMetadata> p = {meta(m, 2, stage("p", 0, 2, 1ull << 40, 2, 0, 0, 2)),
                                         meta(m, 2, stage("p", 1, 2, 2ull << 40, 2, 1, 2, 4))};
  const std::vector<EngineMetadata> d = {meta(m, 1, stage("d", 0, 3, 3ull << 40, 2, 0, 0, 3)),
                                         meta(m, 1, stage("d", 0, 1, 4ull << 40, 2, 1, 3, kLayerEndOpen))};
  const std::vector<StagePair> pairs = pair_pipeline_stages(d, p);
  const std::vector<StagePair> want = {{0, 0, 0, 2}, {0, 1, 2, 3}, {1, 1, 3, 4}};
  EXPECT_EQ(pairs, want);
  // P stage 1 hears from both D stages; with D TP1 and P TP2 each D stage sends 1.
  EXPECT_EQ(pipeline_notifications_expected(pairs, 1, 2, 1), 2u);
  EXPECT_EQ(pipeline_notifications_expected(pairs, 0, 2, 1), 1u);
  // D TP4 reading P TP2: two D ranks per P rank, per D stage.
  EXPECT_EQ(pipeline_notifications_expected(pairs, 1, 2, 4), 4u);

  // Only the caller's own stage: its pairs.
  EXPECT_EQ(pair_pipeline_stages(std::span(d).subspan(1), p), (std::vector<StagePair>{{1, 1, 3, 4}}));

  expect_error([&] { pair_pipeline_stages(d, std::span(p).subspan(1)); }, Status::InvalidArgument,
               {"P stage 0 of 2", "missing"});
  std::vector<EngineMetadata> gap = p;
  gap[1] = meta(m, 2, stage("p", 1, 1, 2ull << 40, 2, 1, 3, 4));
  expect_error([&] { pair_pipeline_stages(d, gap); }, Status::Incompatible, {"[0, 2)", "[3, 4)", "do not meet"});
  std::vector<EngineMetadata> twice = {p[0], p[0]};
  expect_error([&] { pair_pipeline_stages(d, twice); }, Status::InvalidArgument, {"P stage 0", "twice"});
  const std::vector<EngineMetadata> wide = {meta(m, 1, stage("d", 0, 5, 3ull << 40, 2, 1, 3, 8))};
  expect_error([&] { pair_pipeline_stages(wide, p); }, Status::Incompatible, {"[3, 8)", "past P's last layer", "[2, 4)"});
}

TEST(Pipeline, HandshakeBetweenStages) {
  const ModelDesc m = attn4();
  const EngineMetadata d = meta(m, 1, stage("d", 0, 4, 1ull << 40, 1, 0, 0, kLayerEndOpen));
  const EngineMetadata p1 = meta(m, 2, stage("p", 0, 2, 2ull << 40, 2, 1, 2, 4));
  // Different windows and region counts: paired by layer, not refused by index.
  EXPECT_TRUE(validate_pair(d, p1).empty());
  // Windows that do not overlap: nothing to transfer.
  const EngineMetadata d0 = meta(m, 1, stage("d", 0, 2, 1ull << 40, 2, 0, 0, 2));
  const auto items = validate_pair(d0, p1);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].field, "layer_begin");
  EXPECT_NE(items[0].message.find("do not overlap"), std::string::npos);
  EXPECT_EQ(items[0].local_value, "pp_rank 0 of 2 [0, 2)");
  EXPECT_EQ(items[0].remote_value, "pp_rank 1 of 2 [2, 4)");
  // The TP ranks of one peer are one stage.
  const EngineMetadata p0 = meta(m, 2, stage("p", 1, 2, 3ull << 40, 2, 0, 0, 2));
  const std::vector<EngineMetadata> mixed = {p1, p0};
  const auto r = validate_engine_ranks(mixed);
  bool stage_item = false;
  for (const auto& it : r) stage_item |= it.field == "pp_rank" && it.local_value == "1 of 2" && it.remote_value == "0 of 2";
  EXPECT_TRUE(stage_item);
}

// P PP2 TP2 [0,2) [2,4) -> D PP1 TP1: D region r holds layer r; P stage s region j layer 2s+j.
// One whole block (D block 3 <- P block 5, 16 tokens); D block_len 16 x 2 heads x 8 = 256, P
// 16 x 1 head x 8 = 128. P rank h holds head h, which is D's bytes [h*128, +128) of a block.
TEST(Pipeline, PlanP2TP2ToD1TP1ReadsEachStagesLayers) {
  const ModelDesc m = attn4();
  const EngineMetadata d = meta(m, 1, stage("d", 0, 4, 1ull << 40, 1, 0, 0, kLayerEndOpen));
  for (uint32_t s : {0u, 1u}) {
    std::vector<EngineMetadata> p;
    for (uint32_t r = 0; r < 2; ++r) p.push_back(meta(m, 2, stage("p", r, 2, (2ull + r) << 40, 2, s, 2 * s, 2 * s + 2)));
    const PlanContext ctx = make_plan_context(d, p);
    const TransferPlan plan = compile_transfer_plan(ctx, {attention_group({0, 1, 2, 3})});
    EXPECT_EQ(plan.p_pp_size, 2u);
    EXPECT_EQ(plan.p_pp_rank, s);
    EXPECT_EQ(plan.d_pp_size, 1u);
    EXPECT_EQ(plan.layer_begin, 2 * s);
    EXPECT_EQ(plan.layer_end, 2 * s + 2);
    ASSERT_EQ(plan.ranks.size(), 2u);
    for (uint32_t h = 0; h < 2; ++h) {
      const std::vector<PlanRead> want = {{2 * s, 3 * 256 + h * 128, 0, 5 * 128, 128},
                                          {2 * s + 1, 3 * 256 + h * 128, 1, 5 * 128, 128}};
      EXPECT_EQ(plan.ranks[h].reads, want) << "stage " << s << " P rank " << h;
    }
    EXPECT_EQ(plan.stats.bytes, 512u);
    EXPECT_EQ(plan.notify_ranks, (std::vector<uint32_t>{0, 1}));
    EXPECT_NO_THROW(validate_transfer_plan(plan, ctx, {attention_group({0, 1, 2, 3})}));
    // A plan that drops a layer is caught by the coverage check.
    TransferPlan cut = plan;
    cut.ranks[1].reads.pop_back();
    expect_error([&] { validate_transfer_plan(cut, ctx, {attention_group({0, 1, 2, 3})}); }, Status::Coverage,
                 {"plan misses D region " + std::to_string(2 * s + 1), "offset 896", "length 128"});
  }

  // Stages holding different windows need the groups' layers; regions and layers exclude each other.
  std::vector<EngineMetadata> p;
  for (uint32_t r = 0; r < 2; ++r) p.push_back(meta(m, 2, stage("p", r, 2, (2ull + r) << 40, 2, 1, 2, 4)));
  const PlanContext ctx = make_plan_context(d, p);
  expect_error([&] { compile_transfer_plan(ctx, {attention_group({})}); }, Status::InvalidArgument,
               {"names no layers", "[0, open)", "[2, 4)"});
  PlanGroup both = attention_group({0, 1, 2, 3});
  both.regions = {0};
  expect_error([&] { compile_transfer_plan(ctx, {both}); }, Status::InvalidArgument, {"both regions and layers"});
  expect_error([&] { compile_transfer_plan(ctx, {attention_group({0, 2, 1, 3})}); }, Status::InvalidArgument,
               {"strictly ascending", "layer 1 after 2"});
  // Five layers in a group whose stage registers two regions for [2, 4) is fine ([2,4) holds 2);
  // but a D stage registering fewer regions than its layers is refused.
  const EngineMetadata d_short = meta(m, 1, stage("d", 0, 2, 1ull << 40, 1, 0, 0, kLayerEndOpen));
  const PlanContext ctx_short = make_plan_context(d_short, p);
  expect_error([&] { compile_transfer_plan(ctx_short, {attention_group({0, 1, 2, 3})}); }, Status::InvalidArgument,
               {"layer 2", "D registers 2 regions"});
  // Stages that share no layer: the handshake refuses the peer.
  std::vector<EngineMetadata> far;
  for (uint32_t r = 0; r < 2; ++r) far.push_back(meta(m, 2, stage("p", r, 2, (2ull + r) << 40, 2, 1, 2, 4)));
  const EngineMetadata d0 = meta(m, 1, stage("d", 0, 2, 1ull << 40, 2, 0, 0, 2));
  expect_error([&] { compile_transfer_plan(make_plan_context(d0, far), {attention_group({0, 1, 2, 3})}); },
               Status::Incompatible, {"do not overlap"});
}

// A Mamba2 hybrid of 6 layers "MM*M*M" under vLLM's hybrid KV cache manager: groups M0 {0,1},
// M1 {3,5}, A {2,4} (two layers each, one tensor per position). P PP1 TP1 -> D PP2 TP1 with the
// stage boundary between the attention layer 2 and the Mamba layer 3: D stage 0 [0,3) holds M0's
// two layers and A's first (2 regions), stage 1 [3,6) holds M1's two layers and A's second.
TEST(Pipeline, PlanHybridP1ToD2SplitsBetweenAttentionAndMamba) {
  ModelDesc m = mamba2_model("tiny-hybrid", 8, 2, 2, 2);
  m.attention.num_kv_heads = 2;
  m.attention.head_size = 4;
  m.attention.head_size_v = 4;
  m.layer_pattern = "MM*M*M";
  const EngineConfig e = engine(1);
  const EngineGeometry g = derive_geometry(m, e);
  const uint64_t L = g.kernel_page_bytes;   // one kernel page (ppl 1 here)
  const uint64_t S = g.mamba.page_bytes();  // the unpadded Mamba state
  ASSERT_EQ(g.physical_per_logical, 1u);
  ASSERT_LT(S, L);

  auto group = [](GroupKind k, std::vector<uint32_t> layers, uint64_t local, uint64_t remote) {
    PlanGroup pg;
    pg.trim.kind = k;
    pg.trim.local_blocks = {local};
    pg.trim.remote_blocks = {remote};
    pg.trim.remote_computed_tokens = 16;
    pg.layers = std::move(layers);
    return pg;
  };
  const std::vector<PlanGroup> groups = {group(GroupKind::Mamba, {0, 1}, 2, 4),
                                         group(GroupKind::Mamba, {3, 5}, 3, 6),
                                         group(GroupKind::Attention, {2, 4}, 7, 9)};
  const EngineMetadata p = metadata_from_geometry(m, e, g, stage("p", 0, 2, 2ull << 40, 1, 0, 0, kLayerEndOpen));
  std::vector<EngineMetadata> d;
  d.push_back(metadata_from_geometry(m, e, g, stage("d", 0, 2, 1ull << 40, 2, 0, 0, 3)));
  d.push_back(metadata_from_geometry(m, e, g, stage("d", 0, 2, 1ull << 40, 2, 1, 3, 6)));
  EXPECT_EQ(pair_pipeline_stages(d, std::vector<EngineMetadata>{p}),
            (std::vector<StagePair>{{0, 0, 0, 3}, {1, 0, 3, 6}}));

  std::vector<std::vector<PlanRead>> want(2);
  // Stage 0: M0's layers 0, 1 (D and P positions 0, 1); A's layer 2 (position 0 on both).
  want[0] = {{0, 2 * L, 0, 4 * L, S}, {1, 2 * L, 1, 4 * L, S}, {0, 7 * L, 0, 9 * L, L}};
  // Stage 1: M1's layers 3, 5 (positions 0, 1 on both); A's layer 4 is D's position 0 (its
  // stage holds no earlier A layer) but P's position 1 (after layer 2).
  want[1] = {{0, 3 * L, 0, 6 * L, S}, {1, 3 * L, 1, 6 * L, S}, {0, 7 * L, 1, 9 * L, L}};
  for (uint32_t s : {0u, 1u}) {
    const PlanContext ctx = make_plan_context(d[s], {p}, g.mamba, g.mamba);
    const TransferPlan plan = compile_transfer_plan(ctx, groups);
    ASSERT_EQ(plan.ranks.size(), 1u);
    EXPECT_EQ(plan.ranks[0].reads, want[s]) << "D stage " << s;
    EXPECT_EQ(plan.d_pp_rank, s);
    EXPECT_EQ(plan.layer_begin, s == 0 ? 0u : 3u);
    EXPECT_EQ(plan.layer_end, s == 0 ? 3u : 6u);
    EXPECT_EQ(plan.stats.mamba_bytes, 2 * S);
    EXPECT_EQ(plan.stats.attention_bytes, L);
    // Each stage zeroes only its own regions of each group.
    EXPECT_EQ(plan.zero[s == 0 ? 0 : 1].regions, (std::vector<uint32_t>{0, 1}));
    EXPECT_TRUE(plan.zero[s == 0 ? 1 : 0].regions.empty());
    EXPECT_EQ(plan.zero[2].regions, (std::vector<uint32_t>{0}));
  }
  // A layer list that puts layer 4 in a region whose first user comes after it is refused.
  EngineMetadata late = d[1];
  late.regions[0].layer = 5;
  expect_error([&] { compile_transfer_plan(make_plan_context(late, {p}, g.mamba, g.mamba), groups); },
               Status::InvalidArgument, {"layer 3", "D region 0", "first user is layer 5"});
}

}  // namespace
