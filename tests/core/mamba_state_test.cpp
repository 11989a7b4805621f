// derive_mamba_state: per-rank conv projections and temporal shapes of real models, checked
// against docs/hybrid-geometry.md §1 and the worked numbers in docs/semantics.md §4.
#include <gtest/gtest.h>

#include <string>

#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_state.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

void expect_proj(const ConvProjection& p, const char* name, uint64_t dim_local, uint64_t dim_total,
                 bool replicated, uint64_t bytes, uint64_t offset) {
  EXPECT_EQ(p.name, name);
  EXPECT_EQ(p.dim_local, dim_local) << name;
  EXPECT_EQ(p.dim_total, dim_total) << name;
  EXPECT_EQ(p.replicated, replicated) << name;
  EXPECT_EQ(p.bytes, bytes) << name;
  EXPECT_EQ(p.offset, offset) << name;
}

Status status_of(const ModelDesc& m, const EngineConfig& e, std::string* msg) {
  return pdkv::core::test::status_of([&] { derive_mamba_state(m, e); }, msg);
}

}  // namespace

TEST(MambaState, Nemotron3NanoWorkedExample) {
  const ModelDesc m = nemotron3_nano();
  MambaState s1 = derive_mamba_state(m, tp_config(1));
  EXPECT_EQ(s1.conv_bytes, 36864u);
  EXPECT_EQ(s1.ssm_bytes, 2097152u);
  MambaState s2 = derive_mamba_state(m, tp_config(2));
  EXPECT_EQ(s2.conv_bytes, 18432u);
  EXPECT_EQ(s2.ssm_bytes, 1048576u);
  EXPECT_EQ(s2.page_bytes(), 18432u + 1048576u);
  MambaState s4 = derive_mamba_state(m, tp_config(4));
  EXPECT_EQ(s4.conv_bytes, 9216u);
  EXPECT_EQ(s4.ssm_bytes, 524288u);

  // TP2: x = 64*64/2 = 2048 channels, B = C = 4 groups * 128; 3 rows of bf16.
  EXPECT_EQ(s2.type, MambaType::Mamba2);
  EXPECT_EQ(s2.conv_rows, 3u);
  EXPECT_EQ(s2.conv_dim_local, 3072u);
  ASSERT_EQ(s2.projections.size(), 3u);
  expect_proj(s2.projections[0], "x", 2048, 4096, false, 12288, 0);
  expect_proj(s2.projections[1], "B", 512, 1024, false, 3072, 12288);
  expect_proj(s2.projections[2], "C", 512, 1024, false, 3072, 15360);
  EXPECT_EQ(s2.temporal_shape, (std::vector<uint64_t>{32, 64, 128}));
  EXPECT_EQ(s2.conv_dtype_bytes, 2u);
  EXPECT_EQ(s2.ssm_dtype_bytes, 4u);
}

TEST(MambaState, NemotronH8B) {
  MambaState s = derive_mamba_state(nemotron_h_8b(), tp_config(1));
  ASSERT_EQ(s.projections.size(), 3u);
  expect_proj(s.projections[0], "x", 8192, 8192, false, 49152, 0);
  expect_proj(s.projections[1], "B", 1024, 1024, false, 6144, 49152);
  expect_proj(s.projections[2], "C", 1024, 1024, false, 6144, 55296);
  EXPECT_EQ(s.conv_bytes, 61440u);
  EXPECT_EQ(s.ssm_bytes, 128u * 64 * 128 * 4);
  MambaState s8 = derive_mamba_state(nemotron_h_8b(), tp_config(8));
  EXPECT_EQ(s8.conv_dim_local, 1024u + 128 + 128);
  EXPECT_EQ(s8.temporal_shape, (std::vector<uint64_t>{16, 64, 128}));
  EXPECT_FALSE(s8.projections[1].replicated);
}

// vLLM replicates B/C groups only for a one-group model: MambaMixer2 asserts "If tensor parallel
// world size does not divide num_groups, then num_groups must equal 1", so an engine with
// n_groups 8 at TP16 never starts. pdkv must refuse it too instead of describing (and planning
// transfers for) an engine that cannot exist.
TEST(MambaState, GroupsNotDividedByTpMustBeOneGroupAsInVllm) {
  std::string msg;
  EXPECT_EQ(status_of(nemotron_h_8b(), tp_config(16), &msg), Status::HeadsNotDivisible);
  EXPECT_NE(msg.find("n_groups 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tp_size 16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be 1"), std::string::npos) << msg;
  EXPECT_EQ(status_of(mamba2_model("groups-2", 32, 64, 64, 2, 4), tp_config(4), &msg),
            Status::HeadsNotDivisible);
  EXPECT_NE(msg.find("n_groups 2"), std::string::npos) << msg;
  // One group: every rank keeps a copy (Falcon-H1), at any TP dividing the heads.
  const MambaState s = derive_mamba_state(mamba2_model("one-group", 32, 64, 128, 1, 4), tp_config(16));
  expect_proj(s.projections[1], "B", 128, 128, true, 768, 768);
}

TEST(MambaState, SpeculativeRowsOnlyWhereTheModelTakesThem) {
  EngineConfig e = tp_config(2);
  e.num_speculative_tokens = 2;
  MambaState s = derive_mamba_state(nemotron3_nano(), e);
  EXPECT_EQ(s.conv_rows, 5u);
  EXPECT_EQ(s.conv_bytes, 3072u * 5 * 2);
  MambaState f = derive_mamba_state(falcon_h1_05b(), e);  // Falcon-H1 passes no num_spec
  EXPECT_EQ(f.conv_rows, 3u);
}

TEST(MambaState, DtypeOverrides) {
  EngineConfig e = tp_config(2);
  e.conv_state_dtype_bytes = 4;
  e.ssm_state_dtype_bytes = 2;
  MambaState s = derive_mamba_state(nemotron3_nano(), e);
  EXPECT_EQ(s.conv_bytes, 36864u);
  EXPECT_EQ(s.ssm_bytes, 524288u);
}

TEST(MambaState, Qwen3NextGdn) {
  MambaState s = derive_mamba_state(qwen3_next(), tp_config(1));
  ASSERT_EQ(s.projections.size(), 3u);
  expect_proj(s.projections[0], "Q", 2048, 2048, false, 12288, 0);
  expect_proj(s.projections[1], "K", 2048, 2048, false, 12288, 12288);
  expect_proj(s.projections[2], "V", 4096, 4096, false, 24576, 24576);
  EXPECT_EQ(s.conv_bytes, 49152u);
  EXPECT_EQ(s.temporal_shape, (std::vector<uint64_t>{32, 128, 128}));
  EXPECT_EQ(s.ssm_bytes, 1048576u);  // bf16: Qwen3-Next has no fp32 SSM default
  MambaState s4 = derive_mamba_state(qwen3_next(), tp_config(4));
  expect_proj(s4.projections[2], "V", 1024, 4096, false, 6144, 6144);
  EXPECT_EQ(s4.temporal_shape, (std::vector<uint64_t>{8, 128, 128}));
}

TEST(MambaState, Qwen35_27BGdn) {
  MambaState s = derive_mamba_state(qwen35_27b(), tp_config(1));
  EXPECT_EQ(s.conv_dim_local, 10240u);
  EXPECT_EQ(s.temporal_shape, (std::vector<uint64_t>{48, 128, 128}));
  EXPECT_EQ(s.conv_bytes, 10240u * 3 * 2);
  EXPECT_EQ(s.ssm_bytes, 48u * 128 * 128 * 4);
}

TEST(MambaState, JambaMamba1) {
  MambaState s = derive_mamba_state(jamba(), tp_config(1));
  ASSERT_EQ(s.projections.size(), 1u);
  expect_proj(s.projections[0], "x", 8192, 8192, false, 49152, 0);
  EXPECT_EQ(s.temporal_shape, (std::vector<uint64_t>{8192, 16}));
  EXPECT_EQ(s.ssm_bytes, 262144u);
  MambaState s2 = derive_mamba_state(jamba(), tp_config(2));
  EXPECT_EQ(s2.conv_bytes, 24576u);
  EXPECT_EQ(s2.temporal_shape, (std::vector<uint64_t>{4096, 16}));
  EXPECT_EQ(s2.ssm_bytes, 131072u);
}

TEST(MambaState, FalconH1ReplicatesTheSingleGroup) {
  MambaState s1 = derive_mamba_state(falcon_h1_05b(), tp_config(1));
  expect_proj(s1.projections[0], "x", 1536, 1536, false, 9216, 0);
  expect_proj(s1.projections[1], "B", 128, 128, false, 768, 9216);
  expect_proj(s1.projections[2], "C", 128, 128, false, 768, 9984);
  EXPECT_EQ(s1.conv_bytes, 10752u);
  EXPECT_EQ(s1.ssm_bytes, 24u * 64 * 128 * 2);
  MambaState s2 = derive_mamba_state(falcon_h1_05b(), tp_config(2));
  // B and C are NOT halved: each rank holds a full copy of group 0 (G' = TP = 2 groups / 2).
  expect_proj(s2.projections[0], "x", 768, 1536, false, 4608, 0);
  expect_proj(s2.projections[1], "B", 128, 128, true, 768, 4608);
  expect_proj(s2.projections[2], "C", 128, 128, true, 768, 5376);
  EXPECT_EQ(s2.conv_bytes, 6144u);
  EXPECT_EQ(s2.temporal_shape, (std::vector<uint64_t>{12, 64, 128}));
}

TEST(MambaState, UnsupportedTypesNameTheType) {
  const std::pair<MambaType, const char*> cases[] = {{MambaType::ShortConv, "short_conv"},
                                                      {MambaType::Linear, "linear"},
                                                      {MambaType::Kda, "kda"},
                                                      {MambaType::None, "none"}};
  for (auto [type, name] : cases) {
    ModelDesc m = nemotron3_nano();
    m.mamba.type = type;
    std::string msg;
    EXPECT_EQ(status_of(m, tp_config(1), &msg), Status::UnsupportedMambaType) << name;
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

TEST(MambaState, SdLayoutIsRejectedWithTheFix) {
  EngineConfig e = tp_config(2);
  e.conv_layout = ConvLayout::SD;
  std::string msg;
  EXPECT_EQ(status_of(nemotron3_nano(), e, &msg), Status::UnsupportedLayout);
  EXPECT_NE(msg.find("VLLM_SSM_CONV_STATE_LAYOUT=DS"), std::string::npos) << msg;
  EXPECT_NE(msg.find("set the conv state layout to DS"), std::string::npos) << msg;
}

TEST(MambaState, DivisibilityErrorsNameBothValues) {
  struct Case {
    ModelDesc m;
    uint32_t tp;
    const char* a;
    const char* b;
  };
  ModelDesc groups6 = mamba2_model("g6", 64, 64, 128, 6);
  ModelDesc groups8 = mamba2_model("g8", 24, 64, 128, 8);
  const Case cases[] = {
      {falcon_h1_05b(), 16, "num_heads 24", "tp_size 16"},  // 24 heads over 16 ranks
      {groups8, 3, "n_groups 8", "tp_size 3"},              // neither shards nor replicates
      {groups6, 4, "n_groups 6", "tp_size 4"},
      {gdn_model("gdn-hk3", 32, 3, 0, true), 2, "key heads 3", "tp_size 2"},
      {gdn_model("gdn-hv6", 6, 2, 0, true), 4, "key heads 2", "tp_size 4"},
      {gdn_model("gdn-hv6", 6, 4, 0, true), 4, "value heads 6", "tp_size 4"},
      {jamba(), 3, "d_inner 8192", "tp_size 3"},
  };
  for (const Case& c : cases) {
    std::string msg;
    EXPECT_EQ(status_of(c.m, tp_config(c.tp), &msg), Status::HeadsNotDivisible) << c.m.name;
    EXPECT_NE(msg.find(c.a), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.b), std::string::npos) << msg;
  }
}

TEST(MambaState, InvalidArgumentsAndOverflow) {
  std::string msg;
  EXPECT_EQ(status_of(nemotron3_nano(), tp_config(0), &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("tp_size 0"), std::string::npos) << msg;
  ModelDesc k1 = nemotron3_nano();
  k1.mamba.conv_kernel = 1;
  EXPECT_EQ(status_of(k1, tp_config(1), &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("conv_kernel 1"), std::string::npos) << msg;
  ModelDesc zero = nemotron3_nano();
  zero.mamba.d_state = 0;
  EXPECT_EQ(status_of(zero, tp_config(1), &msg), Status::InvalidArgument);
  ModelDesc big = jamba();
  big.mamba.d_inner = uint64_t{1} << 62;
  EXPECT_EQ(status_of(big, tp_config(1), &msg), Status::Overflow);
  EngineConfig e = tp_config(1);
  e.num_speculative_tokens = kEngineMaxSpeculativeTokens;  // the bound validate_engine_config allows
  ModelDesc huge = mamba2_model("huge", 0x40000000u, 0x40000000u, 128, 1, 0, true);
  EXPECT_EQ(status_of(huge, e, &msg), Status::Overflow);
}
