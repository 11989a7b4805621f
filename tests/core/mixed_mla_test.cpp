// Models that mix MLA-typed and GQA attention layers (issue 12 item 4): the model description
// and its validation, the geometry of both region kinds, metadata region kinds and the 1.1 wire
// label, the handshake checking each region by its own kind, and plans that read MLA regions
// whole from one P rank while splitting the GQA regions by heads, in one plan. The plans are
// worked out by hand below.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pdkv/core/fingerprint.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/handshake.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

// GQA: 4 KV heads of 8 + 8 elements, 2-byte dtype: 32 bytes per head per token (128 at TP1).
// MLA-typed layers: a latent of 24 elements: 48 bytes per token at every TP. Layers: GQA, MLA.
ModelDesc mixed_model() {
  ModelDesc m;
  m.name = "mixed-gqa-mla";
  m.attention.num_kv_heads = 4;
  m.attention.head_size = 8;
  m.attention.head_size_v = 8;
  m.dtype_bytes = 2;
  m.layer_pattern = "*L";
  m.mla_head_size = 24;
  return m;
}

EngineConfig engine(uint32_t tp) {
  EngineConfig e;
  e.tp_size = tp;
  e.user_block_size = 16;
  return e;
}

EngineMetadata meta(const ModelDesc& m, uint32_t tp, uint32_t rank, const std::string& id, uint64_t base) {
  const EngineConfig e = engine(tp);
  return metadata_from_geometry(m, e, derive_geometry(m, e), {id, rank, 8, 2, base});
}

PlanContext context(uint32_t d_tp, uint32_t d_rank, uint32_t p_tp) {
  const ModelDesc m = mixed_model();
  std::vector<EngineMetadata> p;
  for (uint32_t r = 0; r < p_tp; ++r) p.push_back(meta(m, p_tp, r, "p", (2ull + r) << 40));
  return make_plan_context(meta(m, d_tp, d_rank, "d", 1ull << 40), std::move(p));
}

// One attention group over both regions: D block 3 receives the 16 tokens of P block 5.
std::vector<PlanGroup> one_block() {
  PlanGroup g;
  g.trim.kind = GroupKind::Attention;
  g.trim.local_blocks = {3};
  g.trim.remote_blocks = {5};
  g.trim.remote_computed_tokens = 16;
  return {g};
}

TEST(MixedMla, ModelValidationNamesTheInconsistency) {
  ModelDesc m = mixed_model();
  EXPECT_NO_THROW(validate_model(m));
  EXPECT_EQ(m.num_attention_layers(), 2u);
  EXPECT_TRUE(m.mixes_mla());

  ModelDesc no_size = m;
  no_size.mla_head_size = 0;
  expect_error([&] { validate_model(no_size); }, Status::InvalidArgument, {"mla_head_size = 0", "'L'"});
  ModelDesc no_layer = m;
  no_layer.layer_pattern = "**";
  expect_error([&] { validate_model(no_layer); }, Status::InvalidArgument, {"mla_head_size = 24", "no MLA-typed layer"});
  ModelDesc pure = m;
  pure.attention.use_mla = true;
  pure.attention.num_kv_heads = 1;
  expect_error([&] { validate_model(pure); }, Status::InvalidArgument, {"use_mla is on"});
  ModelDesc hybrid = m;
  hybrid.layer_pattern = "*LM";
  hybrid.mamba.type = MambaType::Gdn;
  hybrid.mamba.num_heads = 2;
  hybrid.mamba.head_dim = 2;
  hybrid.mamba.d_state = 2;
  hybrid.mamba.n_groups = 2;
  hybrid.mamba.conv_kernel = 2;
  expect_error([&] { validate_model(hybrid); }, Status::InvalidArgument, {"hybrid", "gdn"});

  // The latent size is part of the geometry a peer must agree on; models without MLA-typed
  // layers keep the fingerprint they had before the field existed.
  ModelDesc other = m;
  other.mla_head_size = 32;
  EXPECT_NE(model_fingerprint(m), model_fingerprint(other));
}

TEST(MixedMla, GeometryGivesEachKindItsBytesPerToken) {
  const ModelDesc m = mixed_model();
  for (uint32_t tp : {1u, 2u, 4u}) {
    const EngineGeometry g = derive_geometry(m, engine(tp));
    EXPECT_EQ(g.attn_bytes_per_token, 128u / tp) << tp;
    EXPECT_EQ(g.mla_bytes_per_token, 48u) << tp;  // replicated: the same at every TP
    EXPECT_EQ(g.kernel_page_bytes, 16u * 128 / tp);
    EXPECT_EQ(g.mla_kernel_page_bytes, 16u * 48);
  }
  EngineConfig fp8 = engine(2);
  fp8.kv_cache_dtype_bytes = 1;
  EXPECT_EQ(derive_geometry(m, fp8).mla_bytes_per_token, 24u);
  EXPECT_EQ(derive_geometry(nemotron3_nano(), engine(2)).mla_bytes_per_token, 0u);
}

TEST(MixedMla, MetadataRegionsFollowTheLayerPatternAndAreLabelled11) {
  const EngineMetadata md = meta(mixed_model(), 2, 1, "d", 1ull << 40);
  ASSERT_EQ(md.regions.size(), 2u);
  EXPECT_EQ(md.regions[0].kind, RegionKind::Attention);
  EXPECT_EQ(md.regions[0].region.block_len, 16u * 64);
  EXPECT_EQ(md.regions[0].layer, 0u);
  EXPECT_EQ(md.regions[1].kind, RegionKind::Mla);
  EXPECT_EQ(md.regions[1].region.block_len, 16u * 48);
  EXPECT_EQ(md.regions[1].layer, 1u);
  EXPECT_EQ(md.regions[1].region.base, (1ull << 40) + 8 * 16 * 64);
  EXPECT_FALSE(md.region_is_mla(0));
  EXPECT_TRUE(md.region_is_mla(1));
  EXPECT_EQ(md.region_bytes_per_token(1), 48u);

  // More regions than attention layers: the pattern repeats.
  const EngineConfig e = engine(1);
  const EngineMetadata four = metadata_from_geometry(mixed_model(), e, derive_geometry(mixed_model(), e), {"d", 0, 8, 4});
  EXPECT_EQ(four.regions[2].kind, RegionKind::Attention);
  EXPECT_EQ(four.regions[3].kind, RegionKind::Mla);

  // Wire: 1.1 only when a region is mla; the round trip is exact.
  const std::vector<uint8_t> b = encode(md);
  EXPECT_EQ(b[6], 1);
  EXPECT_EQ(decode(b), md);
  EXPECT_EQ(encode(meta(mixed_model(), 2, 1, "d", 1ull << 40)), b);
  EngineMetadata plain = md;
  plain.regions[1].kind = RegionKind::Attention;
  plain.regions[1].region.block_len = md.regions[0].region.block_len;
  EXPECT_EQ(encode(plain)[6], 0);

  // An mla region under a 1.0 label is refused, naming the region.
  std::vector<uint8_t> old = b;
  old[6] = 0;
  expect_error([&] { decode(old); }, Status::Parse, {"regions[1].kind", "1.1"});
}

TEST(MixedMla, MetadataRefusesMlaRegionsWhereTheyCannotBe) {
  const EngineMetadata md = meta(mixed_model(), 2, 0, "d", 1ull << 40);
  EngineMetadata bad = md;
  bad.regions[1].region.block_len = 16 * 48 + 1;  // not whole tokens
  expect_error([&] { check_metadata(bad, Status::InvalidArgument); }, Status::InvalidArgument,
               {"regions[1].block_len", "whole number of bytes per token"});
  bad = md;
  bad.use_mla = true;
  bad.total_kv_heads = 1;
  expect_error([&] { check_metadata(bad, Status::InvalidArgument); }, Status::InvalidArgument,
               {"regions[1].kind", "use_mla"});
  // An attention region still follows attention_bytes_per_token.
  bad = md;
  bad.regions[0].region.block_len = 16 * 48;
  expect_error([&] { check_metadata(bad, Status::InvalidArgument); }, Status::InvalidArgument,
               {"regions[0].block_len"});

  const EngineConfig e = engine(1);
  const EngineGeometry g = derive_geometry(mixed_model(), e);
  EngineLayout l{"d", 0, 8, 2};
  l.region_kinds = {RegionKind::Mla};
  expect_error([&] { metadata_from_geometry(mixed_model(), e, g, l); }, Status::InvalidArgument,
               {"region_kinds has 1 entries", "num_regions 2"});
  l.region_kinds = {RegionKind::Attention, RegionKind::Mamba};
  expect_error([&] { metadata_from_geometry(mixed_model(), e, g, l); }, Status::InvalidArgument,
               {"region_kinds[1]", "no Mamba layers"});
  const ModelDesc gqa = [] {
    ModelDesc m = mixed_model();
    m.layer_pattern = "**";
    m.mla_head_size = 0;
    return m;
  }();
  l.region_kinds = {RegionKind::Attention, RegionKind::Mla};
  expect_error([&] { metadata_from_geometry(gqa, e, derive_geometry(gqa, e), l); }, Status::InvalidArgument,
               {"region_kinds[1]", "no MLA-typed layers"});
  l.region_kinds = {RegionKind::Mla, RegionKind::Attention};  // explicit kinds win over the pattern
  const EngineMetadata swapped = metadata_from_geometry(mixed_model(), e, g, l);
  EXPECT_EQ(swapped.regions[0].region.block_len, 16u * 48);
  EXPECT_EQ(swapped.regions[1].region.block_len, 16u * 128);
}

TEST(MixedMla, HandshakeChecksEachRegionByItsKind) {
  const ModelDesc m = mixed_model();
  const EngineMetadata d = meta(m, 2, 0, "d", 1ull << 40);
  const EngineMetadata p = meta(m, 4, 0, "p", 2ull << 40);
  EXPECT_TRUE(validate_pair(d, p).empty());  // GQA regions follow the head ratio, MLA stays whole

  // P registered its MLA region split like a GQA one (48 / 2 bytes per token at TP4 vs TP2).
  EngineMetadata scaled = p;
  scaled.regions[1].region.block_len = 16 * 24;
  const auto items = validate_pair(d, scaled);
  ASSERT_EQ(items.size(), 1u) << to_string(items[0]);
  EXPECT_EQ(items[0].status, Status::Incompatible);
  EXPECT_EQ(items[0].field, "regions[1].block_len");
  for (const char* needle : {"MLA region 1", "48 bytes per token", "24 on the remote", "tp_size 4", "must not change with TP"}) {
    EXPECT_NE(items[0].message.find(needle), std::string::npos) << items[0].message;
  }
  EXPECT_EQ(items[0].local_value, "768");
  EXPECT_EQ(items[0].remote_value, "384");

  // A region that is MLA on one side and GQA on the other is a kind mismatch.
  EngineLayout l{"p", 0, 8, 2, 2ull << 40};
  l.region_kinds = {RegionKind::Attention, RegionKind::Attention};
  const EngineConfig e4 = engine(4);
  const EngineMetadata p_gqa = metadata_from_geometry(m, e4, derive_geometry(m, e4), l);
  const auto kinds = validate_pair(d, p_gqa);
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds[0].field, "regions[1].kind");
  EXPECT_EQ(kinds[0].local_value, "mla");
  EXPECT_EQ(kinds[0].remote_value, "attention");
}

TEST(MixedMla, DecodeTp2FromPrefillTp1ReadsHeadSlicesAndTheWholeLatent) {
  // D rank 1 of TP2 holds GQA heads 2, 3: 64 B/token, block_len 1024; P TP1 holds all 4 heads:
  // 128 B/token, block_len 2048. D block 3 <- P block 5.
  //   region 0 (GQA): heads 2..3 of P block 5 = [5*2048 + 2*16*32, +2*16*32) -> D [3*1024, +1024)
  //   region 1 (MLA): the whole latent block [5*768, +768) -> D [3*768, +768)
  const PlanContext ctx = context(2, 1, 1);
  const TransferPlan plan = compile_transfer_plan(ctx, one_block());
  ASSERT_EQ(plan.ranks.size(), 1u);
  EXPECT_EQ(plan.ranks[0].p_rank, 0u);
  const std::vector<PlanRead> want = {{0, 3072, 0, 10240 + 1024, 1024}, {1, 2304, 1, 3840, 768}};
  EXPECT_EQ(plan.ranks[0].reads, want);
  EXPECT_EQ(plan.stats.attention_bytes, 1024u + 768);
  EXPECT_NO_THROW(validate_transfer_plan(plan, ctx, one_block()));
}

TEST(MixedMla, DecodeTp2FromPrefillTp4ReadsTheLatentFromOneRankOnly) {
  // P TP4: one head per rank, 32 B/token, block_len 512. D rank 1 (heads 2, 3) reads head 2 from
  // P rank 2 and head 3 from P rank 3, each a whole P block placed at its head slot of D's
  // block; the MLA latent comes from P rank 1 * 4 / 2 = 2 only (the others hold copies).
  const PlanContext ctx = context(2, 1, 4);
  const TransferPlan plan = compile_transfer_plan(ctx, one_block());
  ASSERT_EQ(plan.ranks.size(), 2u);
  EXPECT_EQ(plan.ranks[0].p_rank, 2u);
  EXPECT_EQ(plan.ranks[0].reads, (std::vector<PlanRead>{{0, 3072, 0, 2560, 512}, {1, 2304, 1, 3840, 768}}));
  EXPECT_EQ(plan.ranks[1].p_rank, 3u);
  EXPECT_EQ(plan.ranks[1].reads, (std::vector<PlanRead>{{0, 3072 + 512, 0, 2560, 512}}));
  EXPECT_EQ(plan.notify_ranks, (std::vector<uint32_t>{2, 3}));

  // A plan that also took the latent from the twin P rank writes it twice: caught.
  TransferPlan twice = plan;
  twice.ranks[1].reads.push_back({1, 2304, 1, 3840, 768});
  expect_error([&] { validate_transfer_plan(twice, ctx, one_block()); }, Status::Coverage,
               {"D region 1 offset 2304", "written twice"});
  // A plan that head-split the latent (half from each rank) misses half of it.
  TransferPlan split = plan;
  split.ranks[0].reads[1].length = 384;
  expect_error([&] { validate_transfer_plan(split, ctx, one_block()); }, Status::Coverage,
               {"misses D region 1 offset 2688 length 384"});
}

TEST(MixedMla, NhdWithSplitHeadsIsRefusedWhicheverRegionsAGroupUses) {
  // NHD on both sides with different heads per rank cannot split the GQA regions (a head subset
  // of an NHD token is not contiguous). An MLA region alone would be the same bytes in either
  // layout, but the pair as a whole fails the handshake, so no plan is compiled for it.
  PlanContext ctx = context(2, 0, 1);
  ctx.local.kv_layout = KvLayout::NHD;
  for (auto& p : ctx.remote) p.kv_layout = KvLayout::NHD;
  std::vector<PlanGroup> mla_only = one_block();
  mla_only[0].regions = {1};
  // The handshake refuses the pair as a whole (its GQA regions cannot be split under NHD).
  std::string msg;
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, mla_only); }, &msg), Status::Incompatible) << msg;
  EXPECT_NE(msg.find("kv_layout"), std::string::npos) << msg;
  std::vector<PlanGroup> gqa = one_block();
  gqa[0].regions = {0};
  EXPECT_EQ(status_of([&] { compile_transfer_plan(ctx, gqa); }), Status::UnsupportedLayout);
}

}  // namespace
