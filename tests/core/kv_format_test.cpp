// Quantized KV caches with per-head scales (issue 12 item 2): the KV dtype as a described layout
// (bits per element, bytes packed per token per KV head), what follows from it (attention bytes
// per token, the hybrid block-size rule and its log lines, head-sliced reads that move a head's
// scales with its data) and its validation. Numbers are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pdkv/core/backends.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/handshake.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

EngineConfig with_format(uint32_t tp, const char* kv_dtype) {
  EngineConfig e;
  e.tp_size = tp;
  const KvCacheFormat f = kv_cache_format_from_name(kv_dtype);
  e.kv_cache_element_bits = f.element_bits;
  e.kv_cache_head_extra_bytes = f.head_extra_bytes;
  return e;
}

TEST(KvFormat, NamesDescribeBitsAndPackedExtras) {
  EXPECT_EQ(kv_cache_format_from_name("auto"), (KvCacheFormat{0, 0}));
  EXPECT_EQ(kv_cache_format_from_name("bfloat16"), (KvCacheFormat{16, 0}));
  EXPECT_EQ(kv_cache_format_from_name("FP8_E4M3"), (KvCacheFormat{8, 0}));
  EXPECT_EQ(kv_cache_format_from_name("float32"), (KvCacheFormat{32, 0}));
  EXPECT_EQ(kv_cache_format_from_name("int8_per_token_head"), (KvCacheFormat{8, 8}));
  EXPECT_EQ(kv_cache_format_from_name("fp8_per_token_head"), (KvCacheFormat{8, 8}));
  EXPECT_EQ(kv_cache_format_from_name("int4_per_token_head"), (KvCacheFormat{4, 8}));
  expect_error([] { kv_cache_format_from_name("nvfp4"); }, Status::NotFound,
               {"'nvfp4'", "int8_per_token_head", "int4_per_token_head"});
}

TEST(KvFormat, HeadBytesIncludeTheScales) {
  const ModelDesc q = qwen35_27b();  // 4 KV heads of 256 + 256, bf16
  EXPECT_EQ(kv_head_bytes_per_token(q, with_format(1, "auto")), 1024u);
  EXPECT_EQ(kv_head_bytes_per_token(q, with_format(1, "fp8")), 512u);
  // (256 + 256) x 1 B + two fp32 scales = 520 (docs/hybrid-geometry.md §2).
  EXPECT_EQ(kv_head_bytes_per_token(q, with_format(1, "int8_per_token_head")), 520u);
  // Two int4 per byte: 128 + 128 + 8 = 264.
  EXPECT_EQ(kv_head_bytes_per_token(q, with_format(1, "int4_per_token_head")), 264u);
  const EngineGeometry g = derive_geometry(q, with_format(2, "int8_per_token_head"));
  EXPECT_EQ(g.kv_head_bytes_per_token, 520u);
  EXPECT_EQ(g.attn_bytes_per_token, 2u * 520);
}

TEST(KvFormat, ValidationNamesTheValues) {
  EngineConfig e = with_format(1, "auto");
  e.kv_cache_element_bits = 12;
  expect_error([&] { validate_engine_config(e); }, Status::InvalidArgument, {"kv_cache_element_bits = 12"});
  e.kv_cache_element_bits = 8;
  e.kv_cache_dtype_bytes = 2;
  expect_error([&] { validate_engine_config(e); }, Status::InvalidArgument,
               {"kv_cache_element_bits = 8", "kv_cache_dtype_bytes = 2", "16 bits"});
  e.kv_cache_dtype_bytes = 1;  // the same size said twice
  EXPECT_NO_THROW(validate_engine_config(e));
  e.kv_cache_head_extra_bytes = kMaxKvHeadExtraBytes + 1;
  expect_error([&] { validate_engine_config(e); }, Status::InvalidArgument, {"kv_cache_head_extra_bytes = 4097"});

  // int4 needs K and V of a head to fill whole bytes.
  ModelDesc odd;
  odd.name = "odd";
  odd.attention.num_kv_heads = 2;
  odd.attention.head_size = 7;
  odd.attention.head_size_v = 7;
  expect_error([&] { derive_geometry(odd, with_format(1, "int4_per_token_head")); }, Status::InvalidArgument,
               {"head_size = 7", "4 bits"});
  // Per-token-head scales are for GQA heads; MLA latents keep a plain dtype.
  ModelDesc mla;
  mla.name = "mla";
  mla.attention.num_kv_heads = 1;
  mla.attention.head_size = 576;
  mla.attention.use_mla = true;
  EngineConfig flashmla = with_format(1, "int8_per_token_head");
  apply_backend(flashmla, Backend::FlashMLA);
  expect_error([&] { derive_geometry(mla, flashmla); }, Status::InvalidArgument,
               {"kv_cache_head_extra_bytes = 8", "use_mla"});
  EngineConfig fp8_mla = with_format(1, "fp8");
  apply_backend(fp8_mla, Backend::FlashMLA);
  EXPECT_EQ(derive_geometry(mla, fp8_mla).attn_bytes_per_token, 576u);
}

TEST(KvFormat, Qwen35_27bInt8PerTokenHeadLogsAn864TokenBlock) {
  // Qwen3.5-27B at TP1, int8 per-token-head KV, bf16 SSM state, 7 speculative tokens (Triton).
  //   attention: 4 heads x 520 B = 2080 B per token
  //   conv: (2*16*128 + 48*128) = 10240 channels x (4 - 1 + 7) rows x 2 B = 204800
  //   SSM: 48 x 128 x 128 x 2 B = 1572864; Mamba page 1777664
  //   B = 16 * ceil(1777664 / (16 * 2080)) = 16 * 54 = 864; page 864 * 2080 = 1797120
  //   padding = 19456 / 1777664 = 1.0945% -> "1.09%"
  EngineConfig e = with_format(1, "int8_per_token_head");
  apply_backend(e, Backend::Triton);
  e.ssm_state_dtype_bytes = 2;
  e.num_speculative_tokens = 7;
  const EngineGeometry g = derive_geometry(qwen35_27b(), e);
  EXPECT_EQ(g.attn_bytes_per_token, 2080u);
  EXPECT_EQ(g.mamba.conv_bytes, 204800u);
  EXPECT_EQ(g.mamba.ssm_bytes, 1572864u);
  EXPECT_EQ(g.block_size, 864u);
  EXPECT_EQ(g.attn_page_bytes, 1797120u);
  EXPECT_EQ(g.kernel_block_size, 864u);
  ASSERT_EQ(g.log_lines.size(), 2u);
  EXPECT_EQ(g.log_lines[0],
            "Setting attention block size to 864 tokens to ensure that attention page size is >= mamba page size.");
  EXPECT_EQ(g.log_lines[1],
            "Padding mamba page size by 1.09% to ensure that mamba page size and attention page size are exactly equal.");
  // At bf16 (4 x 1024 B per token) the block is 16 * ceil(1777664 / 65536) = 448.
  EngineConfig bf16 = e;
  bf16.kv_cache_element_bits = 0;
  bf16.kv_cache_head_extra_bytes = 0;
  EXPECT_EQ(derive_geometry(qwen35_27b(), bf16).block_size, 448u);
}

PlanContext qwen_context(uint32_t d_tp, uint32_t d_rank, uint32_t p_tp, const char* kv) {
  const ModelDesc m = qwen35_27b();
  const EngineConfig dc = with_format(d_tp, kv), pc = with_format(p_tp, kv);
  const EngineGeometry dg = derive_geometry(m, dc), pg = derive_geometry(m, pc);
  std::vector<EngineMetadata> p;
  for (uint32_t r = 0; r < p_tp; ++r) p.push_back(metadata_from_geometry(m, pc, pg, {"p", r, 8, 1, (2ull + r) << 40}));
  return make_plan_context(metadata_from_geometry(m, dc, dg, {"d", d_rank, 8, 1, 1ull << 40}), std::move(p),
                           dg.mamba, pg.mamba);
}

TEST(KvFormat, HeadSlicedReadsMoveEachHeadsScalesWithItsData) {
  // Qwen3.5-27B int8 per-token-head, D TP2 rank 1 (heads 2, 3) <- P TP1 (heads 0..3). Both sides
  // have block 16 * ceil(page / (16 * a)) with a = heads x 520 (fp32 SSM default, no spec):
  //   TP1: a = 2080, page 10240 x 3 x 2 + 48 x 128 x 128 x 4 = 3207168 -> B = 16 * 97 = 1552;
  //   TP2: a = 1040, page 1603584 -> 1552 as well.
  const PlanContext ctx = qwen_context(2, 1, 1, "int8_per_token_head");
  ASSERT_EQ(ctx.local.kernel_block_size, 1552u);
  ASSERT_EQ(ctx.remote[0].kernel_block_size, 1552u);
  const uint64_t unit = 520, bs = 1552, Ld = 2 * bs * unit, Lp = 4 * bs * unit;
  // Whole block: heads 2..3 of P block 5 are one contiguous slice (data and scales of each head).
  PlanGroup g;
  g.trim.kind = GroupKind::Attention;
  g.trim.local_blocks = {3};
  g.trim.remote_blocks = {5};
  g.trim.remote_computed_tokens = 1552;
  TransferPlan plan = compile_transfer_plan(ctx, {g});
  ASSERT_EQ(plan.ranks.size(), 1u);
  EXPECT_EQ(plan.ranks[0].reads, (std::vector<PlanRead>{{0, 3 * Ld, 0, 5 * Lp + 2 * bs * unit, 2 * bs * unit}}));
  // A partial block (10 tokens): one piece per head, each 10 whole 520-byte entries at the head's
  // own token offset, so no head's scales are cut from its data or land beside another head's.
  g.trim.remote_computed_tokens = 10;
  plan = compile_transfer_plan(ctx, {g});
  EXPECT_EQ(plan.ranks[0].reads, (std::vector<PlanRead>{{0, 3 * Ld, 0, 5 * Lp + 2 * bs * unit, 10 * unit},
                                                        {0, 3 * Ld + bs * unit, 0, 5 * Lp + 3 * bs * unit, 10 * unit}}));
  // A plan that moved the data bytes without the scales (512 of every 520) is caught.
  TransferPlan cut = plan;
  cut.ranks[0].reads[0].length = 10 * unit - 8;
  expect_error([&] { validate_transfer_plan(cut, ctx, {g}); }, Status::Coverage, {"misses D region 0"});
}

TEST(KvFormat, HandshakeRefusesDifferentFormatsOnTheTwoSides) {
  // int8 per-token-head on P (520 B per head) and bf16 on D (1024 B per head): the per-head rule
  // of the handshake names both sizes, whatever the TP sizes.
  const ModelDesc m = qwen35_27b();
  const EngineConfig dc = with_format(2, "auto"), pc = with_format(1, "int8_per_token_head");
  const EngineMetadata d = metadata_from_geometry(m, dc, derive_geometry(m, dc), {"d", 0, 8, 1});
  const EngineMetadata p = metadata_from_geometry(m, pc, derive_geometry(m, pc), {"p", 0, 8, 1});
  const auto items = validate_pair(d, p);
  ASSERT_FALSE(items.empty());
  bool named = false;
  for (const auto& it : items) {
    if (it.field == "attention_bytes_per_token") {
      named = true;
      EXPECT_NE(it.message.find("local 1024, remote 520"), std::string::npos) << it.message;
    }
  }
  EXPECT_TRUE(named);
  const EngineConfig int4 = with_format(1, "int4_per_token_head");
  const EngineMetadata p4 = metadata_from_geometry(m, int4, derive_geometry(m, int4), {"p", 0, 8, 1});
  const EngineMetadata p8 = metadata_from_geometry(m, with_format(2, "int8_per_token_head"),
                                                   derive_geometry(m, with_format(2, "int8_per_token_head")),
                                                   {"d", 0, 8, 1});
  bool int4_named = false;
  for (const auto& it : validate_pair(p8, p4)) int4_named |= it.field == "attention_bytes_per_token";
  EXPECT_TRUE(int4_named);
}

// A named format labels the sizes and travels in the metadata: two engines that differ only in the
// format's name (same bits, same extras, same geometry) are refused by name.
EngineConfig named(uint32_t tp, const char* kv_dtype) {
  EngineConfig e = with_format(tp, kv_dtype);
  e.kv_cache_format = element_format_from_name(kv_dtype);
  return e;
}

TEST(KvFormat, PairsDifferingOnlyInTheFormatNameAreRefusedByName) {
  const ModelDesc m = qwen35_27b();
  const std::pair<const char*, const char*> pairs[] = {{"fp8_e4m3", "fp8_e5m2"},
                                                       {"int8_per_token_head", "fp8_per_token_head"}};
  for (const auto& [a, b] : pairs) {
    const EngineConfig pc = named(1, a), dc = named(2, b);
    const EngineMetadata p = metadata_from_geometry(m, pc, derive_geometry(m, pc), {"p", 0, 8, 1});
    const EngineMetadata d = metadata_from_geometry(m, dc, derive_geometry(m, dc), {"d", 0, 8, 1});
    EXPECT_EQ(p.attention_bytes_per_token * 2, d.attention_bytes_per_token * 4);  // sizes agree
    EXPECT_EQ(encode(p).size(), encode(metadata_from_geometry(m, with_format(1, a), derive_geometry(m, with_format(1, a)),
                                                              {"p", 0, 8, 1})).size() + 4);
    const auto items = validate_pair(d, decode(encode(p)));
    ASSERT_EQ(items.size(), 1u) << a << " vs " << b;
    EXPECT_EQ(items[0].field, "kv_cache_format");
    EXPECT_NE(to_string(items[0]).find(std::string("kv_cache_format: ") + b + " vs " + a), std::string::npos)
        << to_string(items[0]);
    // Sizes only on one side (an engine that named no format): compatible.
    const EngineConfig plain = with_format(2, b);
    const EngineMetadata d2 = metadata_from_geometry(m, plain, derive_geometry(m, plain), {"d", 0, 8, 1});
    EXPECT_EQ(d2.kv_cache_format, ElementFormat::Unknown);
    EXPECT_TRUE(validate_pair(d2, p).empty());
  }
}

TEST(KvFormat, AutoFormatsResolveThroughTheModelDtype) {
  const ModelDesc m = qwen35_27b();  // bf16, fp32 default SSM state
  EngineConfig bf;
  bf.model_format = ElementFormat::BFloat16;
  EngineConfig fp = bf;
  fp.model_format = ElementFormat::Float16;
  const EngineMetadata a = metadata_from_geometry(m, bf, derive_geometry(m, bf), {"p", 0, 8, 1});
  const EngineMetadata b = metadata_from_geometry(m, fp, derive_geometry(m, fp), {"d", 0, 8, 1});
  EXPECT_EQ(a.kv_cache_format, ElementFormat::BFloat16);     // "auto" KV: the model dtype
  EXPECT_EQ(a.conv_state_format, ElementFormat::BFloat16);   // "auto" conv state: the model dtype
  EXPECT_EQ(a.ssm_state_format, ElementFormat::Unknown);     // the model's own default, not named
  std::vector<std::string> fields;
  for (const auto& it : validate_pair(b, a)) fields.push_back(it.field);
  EXPECT_EQ(fields, (std::vector<std::string>{"model_format", "kv_cache_format", "conv_state_format"}));
}

TEST(KvFormat, ANamedFormatMustAgreeWithTheSizesItLabels) {
  const ModelDesc m = qwen35_27b();  // bf16
  EngineConfig e;
  e.kv_cache_format = ElementFormat::Fp8E5m2;  // KV bytes left "auto": 16 bits, not 8
  expect_error([&] { derive_geometry(m, e); }, Status::InvalidArgument,
               {"kv_cache_format = fp8_e5m2 (8 bits)", "16 bits", "kv_cache_element_bits = 8"});
  e.kv_cache_dtype_bytes = 1;
  EXPECT_NO_THROW(derive_geometry(m, e));
  e.kv_cache_format = ElementFormat::Int8PerTokenHead;  // needs the 8 scale bytes
  expect_error([&] { derive_geometry(m, e); }, Status::InvalidArgument,
               {"kv_cache_format = int8_per_token_head", "kv_cache_head_extra_bytes = 0"});
  EngineConfig f;
  f.model_format = ElementFormat::Float32;
  expect_error([&] { derive_geometry(m, f); }, Status::InvalidArgument, {"model_format = float32", "dtype_bytes = 2"});
  f.model_format = ElementFormat::Fp8PerTokenHead;
  expect_error([&] { derive_geometry(m, f); }, Status::InvalidArgument, {"model_format = fp8_per_token_head", "KV cache format"});
  EngineConfig g;
  g.ssm_state_format = ElementFormat::BFloat16;  // the model's default SSM state is fp32
  expect_error([&] { derive_geometry(m, g); }, Status::InvalidArgument,
               {"ssm_state_format = bfloat16", "4 bytes", "ssm_state_dtype_bytes = 2"});
}

TEST(KvFormat, ElementFormatNames) {
  EXPECT_EQ(element_format_from_name("FP8"), ElementFormat::Fp8E4m3);
  EXPECT_EQ(element_format_from_name("fp8_e5m2"), ElementFormat::Fp8E5m2);
  EXPECT_EQ(element_format_from_name("bf16"), ElementFormat::BFloat16);
  EXPECT_EQ(element_format_from_name("auto"), ElementFormat::Unknown);
  EXPECT_STREQ(element_format_name(ElementFormat::Int4PerTokenHead), "int4_per_token_head");
  EXPECT_STREQ(element_format_name(static_cast<ElementFormat>(200)), "unknown");
  expect_error([] { element_format_from_name("nvfp4"); }, Status::NotFound, {"nvfp4", "fp8_e5m2"});
  for (uint8_t v = 1; v <= static_cast<uint8_t>(kLastElementFormat); ++v) {
    const auto f = static_cast<ElementFormat>(v);
    EXPECT_EQ(element_format_from_name(element_format_name(f)), f);
    if (is_per_token_head_format(f)) EXPECT_EQ(kv_cache_format_of(f), kv_cache_format_from_name(element_format_name(f)));
  }
}

}  // namespace
