// Geometry against the worked examples of docs/hybrid-geometry.md and real vLLM logs: page sizes,
// the hybrid block-size rule, padding, kernel block selection and the log lines.
#include "pdkv/core/geometry.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "pdkv/core/backends.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/presets.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

EngineConfig engine(uint32_t tp, Backend b = Backend::FlashAttention) {
  EngineConfig e;
  e.tp_size = tp;
  apply_backend(e, b);
  return e;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& err) {
    return err.what();
  }
  return "";
}

}  // namespace

TEST(Geometry, Nemotron3NanoTp2) {
  const auto g = derive_geometry(preset_model("nemotron-3-nano-30b"), engine(2));
  EXPECT_EQ(g.mamba.conv_bytes, 18432u);
  EXPECT_EQ(g.mamba.ssm_bytes, 1048576u);
  EXPECT_EQ(g.mamba_page_bytes, 1067008u);
  EXPECT_EQ(g.kv_heads_per_rank, 1u);
  EXPECT_EQ(g.attn_bytes_per_token, 512u);
  EXPECT_EQ(g.align, 16u);
  EXPECT_EQ(g.min_block_size, 2096u);
  EXPECT_EQ(g.block_size, 2096u);
  EXPECT_TRUE(g.block_size_raised);
  EXPECT_EQ(g.attn_page_bytes, 2096u * 512u);
  EXPECT_EQ(g.mamba_page_padded_bytes, 1073152u);
  EXPECT_NEAR(g.padding_percent, 100.0 * 6144 / 1067008, 1e-9);
  EXPECT_EQ(g.kernel_block_size, 2096u);  // FlashAttention accepts any multiple of 16
  EXPECT_EQ(g.physical_per_logical, 1u);
  EXPECT_EQ(g.mamba_block_size, 0u);      // mode none: one state per request
  ASSERT_EQ(g.log_lines.size(), 2u);
  EXPECT_EQ(g.log_lines[0],
            "Setting attention block size to 2096 tokens to ensure that attention page size is >= mamba page size.");
  EXPECT_EQ(g.log_lines[1],
            "Padding mamba page size by 0.58% to ensure that mamba page size and attention page size are exactly "
            "equal.");
}

TEST(Geometry, Nemotron3NanoTpSweep) {
  const auto m = preset_model("nemotron-3-nano-30b");
  // B is TP-invariant up to TP = K (2), then halves per doubling of TP.
  EXPECT_EQ(derive_geometry(m, engine(1)).block_size, 2096u);
  EXPECT_EQ(derive_geometry(m, engine(4)).block_size, 1056u);
  EXPECT_EQ(derive_geometry(m, engine(8)).block_size, 528u);
  const auto g4 = derive_geometry(m, engine(4));
  EXPECT_EQ(g4.mamba.conv_bytes, 9216u);
  EXPECT_EQ(g4.mamba.ssm_bytes, 524288u);
  EXPECT_EQ(g4.attn_bytes_per_token, 512u);  // max(1, 2/4) = 1 head, replicated
}

TEST(Geometry, Nemotron3NanoFp8KvDoublesBlock) {
  auto e = engine(2);
  e.kv_cache_dtype_bytes = 1;
  const auto g = derive_geometry(preset_model("nemotron-3-nano-30b"), e);
  EXPECT_EQ(g.attn_bytes_per_token, 256u);
  EXPECT_EQ(g.block_size, 4176u);  // 16 * ceil(1067008 / 4096); bf16 gives 2096
  EXPECT_GT(g.block_size, 2u * 2096u - 32u);
}

TEST(Geometry, Qwen3NextTp4AndSweep) {
  const auto m = preset_model("qwen3-next-80b");
  const auto g = derive_geometry(m, engine(4));
  EXPECT_EQ(g.mamba.conv_bytes, 12288u);
  EXPECT_EQ(g.mamba.ssm_bytes, 262144u);  // bf16 SSM: the model dtype
  EXPECT_EQ(g.block_size, 272u);
  EXPECT_EQ(g.log_lines.back(),
            "Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are exactly "
            "equal.");
  EXPECT_EQ(derive_geometry(m, engine(1)).block_size, 544u);
  EXPECT_EQ(derive_geometry(m, engine(2)).block_size, 544u);
  EXPECT_EQ(derive_geometry(m, engine(8)).block_size, 144u);
}

TEST(Geometry, FlashInferKernelBlocks) {
  const auto n3 = preset_model("nemotron-3-nano-30b");
  auto g = derive_geometry(n3, engine(2, Backend::FlashInfer));
  EXPECT_EQ(g.block_size, 2096u);
  EXPECT_EQ(g.kernel_block_size, 16u);
  EXPECT_EQ(g.physical_per_logical, 131u);
  EXPECT_EQ(g.kernel_page_bytes, 16u * 512u);
  g = derive_geometry(n3, engine(4, Backend::FlashInfer));
  EXPECT_EQ(g.block_size, 1056u);
  EXPECT_EQ(g.kernel_block_size, 32u);
  EXPECT_EQ(g.physical_per_logical, 33u);
  auto e = engine(1, Backend::FlashInfer);
  e.ssm_state_dtype_bytes = 2;
  g = derive_geometry(preset_model("nemotron-nano-9b-v2"), e);
  EXPECT_EQ(g.block_size, 672u);
  EXPECT_EQ(g.kernel_block_size, 32u);
  EXPECT_EQ(g.physical_per_logical, 21u);
}

TEST(Geometry, NemotronNano9bV2Issue24280) {
  auto e = engine(1);
  e.ssm_state_dtype_bytes = 2;  // the 16-bit SSM state of Sept 2025
  const auto g = derive_geometry(preset_model("nemotron-nano-9b-v2"), e);
  EXPECT_EQ(g.mamba.conv_bytes, 73728u);    // (10240 + 2*8*128) * 3 * 2
  EXPECT_EQ(g.mamba.ssm_bytes, 2621440u);   // 128 * 80 * 128 * 2
  EXPECT_EQ(g.attn_bytes_per_token, 4096u);
  EXPECT_EQ(g.block_size, 672u);
  // Today's float32 default roughly doubles it.
  EXPECT_EQ(derive_geometry(preset_model("nemotron-nano-9b-v2"), engine(1)).block_size, 1312u);
}

TEST(Geometry, Qwen35_27bRealLogs) {
  const auto m = preset_model("qwen3.5-27b");
  // 1Cat #237: TP4, bf16 KV, no speculation.
  const auto g4 = derive_geometry(m, engine(4));
  EXPECT_EQ(g4.mamba_page_bytes, 801792u);
  EXPECT_EQ(g4.block_size, 784u);
  EXPECT_EQ(g4.log_lines[0],
            "Setting attention block size to 784 tokens to ensure that attention page size is >= mamba page size.");
  EXPECT_EQ(g4.log_lines[1],
            "Padding mamba page size by 0.13% to ensure that mamba page size and attention page size are exactly "
            "equal.");
  // club-3090 #1107: TP2 with fp8 KV and 7 speculative tokens (dflash): conv rows 3 + 7.
  auto e2 = engine(2);
  e2.kv_cache_dtype_bytes = 1;
  e2.num_speculative_tokens = 7;
  const auto g2 = derive_geometry(m, e2);
  EXPECT_EQ(g2.mamba.conv_rows, 10u);
  EXPECT_EQ(g2.mamba_page_bytes, 1675264u);
  EXPECT_EQ(g2.block_size, 1648u);
  EXPECT_EQ(g2.log_lines[1],
            "Padding mamba page size by 0.73% to ensure that mamba page size and attention page size are exactly "
            "equal.");
}

TEST(Geometry, PaddingLineOnlyWhenPagesDiffer) {
  auto e = engine(2);
  e.user_block_size = 4096;  // larger than B = 2096: kept, so no "Setting" line, only padding
  auto g = derive_geometry(preset_model("nemotron-3-nano-30b"), e);
  EXPECT_EQ(g.block_size, 4096u);
  EXPECT_FALSE(g.block_size_raised);
  ASSERT_EQ(g.log_lines.size(), 1u);
  EXPECT_EQ(g.log_lines[0].rfind("Padding mamba page size by 96.55% ", 0), 0u);  // 4096*512/1067008

  // Mamba1 page 768 + 4096 = 4864 B = 19 * (16 tokens * 16 B): B = 304 fills it exactly.
  ModelDesc m;
  m.name = "exact-fit";
  m.attention = {1, 4, 4, false, 0};
  m.mamba.type = MambaType::Mamba1;
  m.mamba.d_inner = 128;
  m.mamba.d_state = 16;
  m.mamba.conv_kernel = 4;
  m.layer_pattern = "M*";
  g = derive_geometry(m, engine(1));
  EXPECT_EQ(g.mamba_page_bytes, 4864u);
  EXPECT_EQ(g.block_size, 304u);
  EXPECT_EQ(g.attn_page_bytes, 4864u);
  EXPECT_EQ(g.padding_percent, 0.0);
  ASSERT_EQ(g.log_lines.size(), 1u);
  EXPECT_EQ(g.log_lines[0],
            "Setting attention block size to 304 tokens to ensure that attention page size is >= mamba page size.");
}

TEST(Geometry, UserBlockSizeRaisesAlignment) {
  const auto m = preset_model("qwen3-next-80b");
  auto e = engine(4);
  e.user_block_size = 64;
  auto g = derive_geometry(m, e);
  EXPECT_EQ(g.align, 64u);
  EXPECT_EQ(g.block_size, 320u);  // 64 * ceil(274432 / (64 * 1024)); default alignment gives 272
  e.user_block_size = 32;
  g = derive_geometry(m, e);
  EXPECT_EQ(g.block_size, 288u);
  e.user_block_size = 1024;  // larger than needed: kept
  g = derive_geometry(m, e);
  EXPECT_EQ(g.block_size, 1024u);
  EXPECT_FALSE(g.block_size_raised);
}

TEST(Geometry, CacheModes) {
  const auto m = preset_model("nemotron-3-nano-30b");  // chunk_size 128
  auto e = engine(2);
  e.cache_mode = MambaCacheMode::All;
  auto g = derive_geometry(m, e);
  // chunk = lcm(128, 16) = 128; ceil(1067008 / 512) = 2084 -> 128 * 17 = 2176
  EXPECT_EQ(g.block_size, 2176u);
  EXPECT_EQ(g.mamba_block_size, 2176u);
  g = derive_geometry(m, e, GeometryOptions{96});
  EXPECT_EQ(g.block_size, 2112u);  // lcm(96, 16) = 96; 96 * ceil(2084 / 96) = 96 * 22
  e.cache_mode = MambaCacheMode::Align;
  g = derive_geometry(m, e);
  EXPECT_EQ(g.block_size, 2096u);
  EXPECT_EQ(g.mamba_block_size, 2096u);
}

TEST(Geometry, PureAttention) {
  ModelDesc m;
  m.name = "llama-like";
  m.attention = {8, 128, 128, false, 0};
  m.layer_pattern = std::string(32, '*');
  auto g = derive_geometry(m, engine(4));
  EXPECT_FALSE(g.hybrid);
  EXPECT_EQ(g.block_size, 16u);
  EXPECT_EQ(g.attn_bytes_per_token, 2u * 256u * 2u);
  EXPECT_TRUE(g.log_lines.empty());
  EXPECT_EQ(g.mamba_page_padded_bytes, 0u);
  auto e = engine(4, Backend::FlashInfer);
  e.user_block_size = 128;
  g = derive_geometry(m, e);
  EXPECT_EQ(g.block_size, 128u);
  EXPECT_EQ(g.kernel_block_size, 64u);
  EXPECT_EQ(g.physical_per_logical, 2u);
  EXPECT_EQ(derive_geometry(m, engine(1, Backend::FlashMLA)).block_size, 64u);
}

TEST(Geometry, MlaAttentionIsTpIndependentAndAlignedTo128) {
  ModelDesc m = preset_model("kimi-linear-48b");
  // The KDA state is rejected; the MLA attention half is still checked on a pure-MLA copy.
  EXPECT_EQ(status_of([&] { derive_geometry(m, engine(2, Backend::FlashMLA)); }), Status::UnsupportedMambaType);
  ModelDesc mla = m;
  mla.mamba = MambaDesc{};
  for (uint32_t tp : {1u, 2u, 8u}) {
    const auto g = derive_geometry(mla, engine(tp, Backend::FlashMLA));
    EXPECT_EQ(g.attn_bytes_per_token, 1152u);
    EXPECT_EQ(g.block_size, 64u);
  }
  // An MLA hybrid: Nemotron's Mamba with an MLA attention, alignment >= 128.
  ModelDesc hyb = preset_model("nemotron-3-nano-30b");
  hyb.attention = {1, 576, 0, true, 0};
  const auto g = derive_geometry(hyb, engine(2, Backend::FlashMLA));
  EXPECT_EQ(g.align, 128u);
  EXPECT_EQ(g.block_size, 1024u);  // 128 * ceil(1067008 / (128 * 1152))
  EXPECT_EQ(g.kernel_block_size, 64u);
  EXPECT_EQ(g.physical_per_logical, 16u);
}

TEST(Geometry, Errors) {
  const auto m = preset_model("qwen3.5-27b");  // 4 KV heads
  EXPECT_EQ(status_of([&] { derive_geometry(m, engine(3)); }), Status::HeadsNotDivisible);
  auto msg = message_of([&] { derive_geometry(preset_model("nemotron-h-8b"), engine(6)); });
  EXPECT_NE(msg.find("8"), std::string::npos);
  EXPECT_NE(msg.find("6"), std::string::npos);
  EXPECT_EQ(status_of([&] { derive_geometry(m, engine(0)); }), Status::InvalidArgument);
  EngineConfig e = engine(1, Backend::FlashInfer);
  msg = message_of([&] { select_kernel_block_size(e, 24); });
  EXPECT_NE(msg.find("24"), std::string::npos);
  EXPECT_EQ(status_of([&] { select_kernel_block_size(e, 24); }), Status::Incompatible);
  EXPECT_EQ(status_of([&] { select_kernel_block_size(e, 0); }), Status::InvalidArgument);
}

TEST(Geometry, BlockSizeRatio) {
  EXPECT_EQ(block_size_ratio(64, 16), 4u);
  EXPECT_EQ(block_size_ratio(16, 16), 1u);
  EXPECT_EQ(status_of([] { block_size_ratio(16, 64); }), Status::Incompatible);
  const auto msg = message_of([] { block_size_ratio(48, 32); });
  EXPECT_NE(msg.find("48"), std::string::npos);
  EXPECT_NE(msg.find("32"), std::string::npos);
  EXPECT_EQ(status_of([] { block_size_ratio(0, 16); }), Status::InvalidArgument);
  EXPECT_TRUE(block_sizes_are_multiples(16, 64));
  EXPECT_TRUE(block_sizes_are_multiples(64, 16));
  EXPECT_FALSE(block_sizes_are_multiples(48, 32));
  EXPECT_FALSE(block_sizes_are_multiples(0, 16));
}

// Property: for every preset, TP and backend, the rule's invariants hold exactly.
TEST(Geometry, PropertiesOverPresetsTpAndBackends) {
  const Backend non_mla[] = {Backend::FlashAttention, Backend::Triton, Backend::FlashInfer};
  int checked = 0;
  for (const auto& p : presets()) {
    if (p.model.mamba.type == MambaType::Kda) continue;
    for (uint32_t tp : {1u, 2u, 4u, 8u}) {
      for (Backend b : non_mla) {
        for (uint32_t user : {0u, 16u, 32u, 64u}) {
          for (auto mode : {MambaCacheMode::None, MambaCacheMode::Align, MambaCacheMode::All}) {
            auto e = engine(tp, b);
            e.user_block_size = user;
            e.cache_mode = mode;
            EngineGeometry g;
            try {
              g = derive_geometry(p.model, e);
            } catch (const Error& err) {
              // Only TP that does not divide heads may fail.
              EXPECT_EQ(err.status(), Status::HeadsNotDivisible) << p.name << " tp" << tp << ": " << err.what();
              continue;
            }
            ++checked;
            const uint64_t a = g.attn_bytes_per_token;
            EXPECT_GE(g.attn_page_bytes, g.mamba_page_bytes) << p.name;
            EXPECT_EQ(g.attn_page_bytes, g.block_size * a);
            EXPECT_EQ(g.mamba_page_padded_bytes, g.attn_page_bytes);
            EXPECT_EQ(g.block_size % g.align, 0u) << p.name << " tp" << tp;
            // B is minimal for its rounding unit: one unit less cannot hold the Mamba page.
            if (mode != MambaCacheMode::All) {
              EXPECT_LT((g.min_block_size - g.align) * a, g.mamba_page_bytes);
            }
            EXPECT_EQ(g.block_size % g.kernel_block_size, 0u);
            EXPECT_EQ(g.block_size, g.kernel_block_size * g.physical_per_logical);
            EXPECT_TRUE(kernel_block_size_supported(e, g.kernel_block_size));
            EXPECT_EQ(g.log_lines.size(), size_t{g.block_size_raised} + (g.attn_page_bytes != g.mamba_page_bytes));
            EXPECT_NEAR(g.padding_percent,
                        100.0 * double(g.attn_page_bytes - g.mamba_page_bytes) / double(g.mamba_page_bytes), 1e-9);
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(Backends, NamesAndApply) {
  EXPECT_EQ(backend_from_name("flash_attn"), Backend::FlashAttention);
  EXPECT_EQ(backend_from_name("FLASH_ATTN"), Backend::FlashAttention);
  EXPECT_EQ(backend_from_name("triton_attn"), Backend::Triton);
  EXPECT_EQ(backend_from_name("FlashInfer"), Backend::FlashInfer);
  EXPECT_EQ(backend_from_name("flashmla"), Backend::FlashMLA);
  EXPECT_EQ(backend_from_name("cutlass_mla"), Backend::CutlassMLA);
  EXPECT_EQ(backend_from_name("flashinfer_mla"), Backend::FlashInferMLA);
  try {
    backend_from_name("xformers");
    FAIL() << "expected NotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::NotFound);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("xformers"), std::string::npos);
    for (const auto& b : backends()) EXPECT_NE(msg.find(b.name), std::string::npos) << b.name;
  }
  for (const auto& b : backends()) EXPECT_EQ(backend_from_name(backend_name(b.backend)), b.backend);

  EngineConfig e;
  apply_backend(e, Backend::CutlassMLA);
  EXPECT_EQ(e.preferred_block_size, 128u);
  EXPECT_EQ(min_kernel_block_size(e), 128u);
  EXPECT_TRUE(kernel_block_size_supported(e, 128));
  EXPECT_FALSE(kernel_block_size_supported(e, 256));
  apply_backend(e, Backend::FlashInferMLA);
  EXPECT_EQ(e.preferred_block_size, 32u);
  EXPECT_EQ(min_kernel_block_size(e), 32u);
  apply_backend(e, Backend::FlashMLA);
  EXPECT_EQ(e.preferred_block_size, 64u);
  EXPECT_EQ(min_kernel_block_size(e), 64u);
  apply_backend(e, Backend::Triton);  // back to MultipleOf(16): the explicit list is cleared
  EXPECT_TRUE(e.kernel_block_sizes.empty());
  EXPECT_EQ(min_kernel_block_size(e), 16u);
  EXPECT_TRUE(kernel_block_size_supported(e, 2096));
  EXPECT_FALSE(kernel_block_size_supported(e, 24));
  apply_backend(e, Backend::FlashInfer);
  EXPECT_EQ(e.preferred_block_size, 16u);
  EXPECT_TRUE(kernel_block_size_supported(e, 64));
  EXPECT_FALSE(kernel_block_size_supported(e, 128));

  EXPECT_NO_THROW(check_backend_for_model(preset_model("qwen3-next-80b"), Backend::FlashInfer));
  EXPECT_EQ(status_of([] { check_backend_for_model(preset_model("qwen3-next-80b"), Backend::FlashMLA); }),
            Status::Incompatible);
  EXPECT_EQ(status_of([] { check_backend_for_model(preset_model("kimi-linear-48b"), Backend::FlashAttention); }),
            Status::Incompatible);
}
