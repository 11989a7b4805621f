// vLLM-compatible conv/SSM views (docs/semantics.md §4) with exact numbers, pdkv's reads for
// the same pairs, and the #55208 case where the two disagree.
#include <gtest/gtest.h>

#include <string>

#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/mamba_state.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

TEST(MambaSplit, PhysicalBlocksPerLogical) {
  EXPECT_EQ(compute_physical_blocks_per_logical(36864, 2097152, 8192), 261u);
  EXPECT_EQ(compute_physical_blocks_per_logical(18432, 1048576, 4096), 261u);
  EXPECT_EQ(compute_physical_blocks_per_logical(9216, 524288, 4096), 131u);
  EXPECT_EQ(compute_physical_blocks_per_logical(4096, 4096, 4096), 2u);
  std::string msg;
  EXPECT_EQ(status_of([] { compute_physical_blocks_per_logical(1, 1, 0); }, &msg),
            Status::InvalidArgument);
  EXPECT_EQ(status_of([] { compute_physical_blocks_per_logical(~uint64_t{0}, 1, 1); }, &msg),
            Status::Overflow);
}

TEST(MambaSplit, LocalConvOffsets) {
  EXPECT_EQ(local_conv_offsets(mamba_state_at(nemotron3_nano(), 2)),
            (std::vector<MambaByteRange>{{0, 12288}, {12288, 3072}, {15360, 3072}}));
  EXPECT_EQ(local_conv_offsets(mamba_state_at(qwen3_next(), 1)),
            (std::vector<MambaByteRange>{{0, 12288}, {12288, 12288}, {24576, 24576}}));
  EXPECT_EQ(local_conv_offsets(mamba_state_at(jamba(), 2)),
            (std::vector<MambaByteRange>{{0, 24576}}));
}

TEST(MambaSplit, RemoteConvOffsetsPositiveRatio) {
  // D TP2 <- P TP1: P page is x 24576 | B 6144 | C 6144; D rank 1 reads the second halves.
  const MambaState d = mamba_state_at(nemotron3_nano(), 2);
  EXPECT_EQ(remote_conv_offsets(d, 0, 2),
            (std::vector<MambaByteRange>{{0, 12288}, {24576, 3072}, {30720, 3072}}));
  EXPECT_EQ(remote_conv_offsets(d, 1, 2),
            (std::vector<MambaByteRange>{{12288, 12288}, {27648, 3072}, {33792, 3072}}));
  // Homogeneous TP reads the projections where they are.
  EXPECT_EQ(remote_conv_offsets(d, 1, 1), local_conv_offsets(d));
  // GDN D TP4 <- P TP2, rank 3 (lo = 1): Q/K/V of 3072/3072/6144 B locally.
  const MambaState g = mamba_state_at(qwen3_next(), 4);
  EXPECT_EQ(remote_conv_offsets(g, 3, 2),
            (std::vector<MambaByteRange>{{3072, 3072}, {9216, 3072}, {18432, 6144}}));
}

TEST(MambaSplit, RemoteConvOffsetsNegativeRatio) {
  // D TP1 <- P TP2: each P projection is half the local one, read whole.
  const MambaState d = mamba_state_at(nemotron3_nano(), 1);
  EXPECT_EQ(remote_conv_offsets(d, 0, -2),
            (std::vector<MambaByteRange>{{0, 12288}, {12288, 3072}, {15360, 3072}}));
  std::string msg;
  EXPECT_EQ(status_of([&] { remote_conv_offsets(d, 0, 0); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("tp_ratio 0"), std::string::npos);
  // 3 rows * 2 B * 128 channels = 768 B does not split into 1024 shards.
  EXPECT_EQ(
      status_of([&] { remote_conv_offsets(mamba_state_at(falcon_h1_05b(), 1), 0, -1024); }, &msg),
      Status::InvalidArgument);
  EXPECT_NE(msg.find("768"), std::string::npos) << msg;
}

TEST(MambaSplit, SsmReadRange) {
  const MambaState d2 = mamba_state_at(nemotron3_nano(), 2);
  EXPECT_EQ(ssm_read_range(d2, 36864, 2097152, 1, 2), (MambaByteRange{36864 + 1048576, 1048576}));
  EXPECT_EQ(ssm_read_range(d2, 36864, 2097152, 0, 2), (MambaByteRange{36864, 1048576}));
  const MambaState d1 = mamba_state_at(nemotron3_nano(), 1);
  EXPECT_EQ(ssm_read_range(d1, 18432, 1048576, 0, -2), (MambaByteRange{18432, 1048576}));
  std::string msg;
  EXPECT_EQ(status_of([&] { ssm_read_range(d1, 0, 0, 0, 0); }, &msg), Status::InvalidArgument);
}

TEST(MambaSplit, ReadsForShardedGroupsMatchVllm) {
  // Nemotron-3-Nano, D TP2 rank 1 <- P TP1: four reads from P rank 0.
  const MambaState p = mamba_state_at(nemotron3_nano(), 1);
  const MambaState d = mamba_state_at(nemotron3_nano(), 2);
  const std::vector<MambaRead> want = {
      {0, "x", 12288, 0, 12288},
      {0, "B", 27648, 12288, 3072},
      {0, "C", 33792, 15360, 3072},
      {0, "ssm", 36864 + 1048576, 18432, 1048576},
  };
  EXPECT_EQ(mamba_reads(p, d, 1), want);
  EXPECT_EQ(vllm_mamba_reads(p, d, 1), want);
  // D TP1 <- P TP2: one read per part per P rank, placed at p_idx * chunk locally.
  const std::vector<MambaRead> want_neg = {
      {0, "x", 0, 0, 12288},          {1, "x", 0, 12288, 12288},
      {0, "B", 12288, 24576, 3072},   {1, "B", 12288, 27648, 3072},
      {0, "C", 15360, 30720, 3072},   {1, "C", 15360, 33792, 3072},
      {0, "ssm", 18432, 36864, 1048576}, {1, "ssm", 18432, 36864 + 1048576, 1048576},
  };
  EXPECT_EQ(mamba_reads(d, p, 0), want_neg);
  EXPECT_EQ(vllm_mamba_reads(d, p, 0), want_neg);
  EXPECT_EQ(mamba_source_ranks(want_neg), (std::vector<uint32_t>{0, 1}));
}

TEST(MambaSplit, GdnAndMamba1Reads) {
  // Qwen3-Next D TP2 rank 0 <- P TP1 (bf16 ssm 1 MiB at TP1).
  const MambaState p = mamba_state_at(qwen3_next(), 1);
  const MambaState d = mamba_state_at(qwen3_next(), 2);
  const std::vector<MambaRead> want = {
      {0, "Q", 0, 0, 6144},
      {0, "K", 12288, 6144, 6144},
      {0, "V", 24576, 12288, 12288},
      {0, "ssm", 49152, 24576, 524288},
  };
  EXPECT_EQ(mamba_reads(p, d, 0), want);
  EXPECT_EQ(vllm_mamba_reads(p, d, 0), want);
  // Jamba D TP2 rank 1 <- P TP1: conv [x] and (d_inner/TP, d_state) temporal.
  const std::vector<MambaRead> jw = {{0, "x", 24576, 0, 24576},
                                     {0, "ssm", 49152 + 131072, 24576, 131072}};
  EXPECT_EQ(mamba_reads(mamba_state_at(jamba(), 1), mamba_state_at(jamba(), 2), 1), jw);
  EXPECT_EQ(vllm_mamba_reads(mamba_state_at(jamba(), 1), mamba_state_at(jamba(), 2), 1), jw);
}

// vLLM bug #55208: Falcon-H1-0.5B (n_groups = 1), P TP1 -> D TP2. The single group is
// replicated on both D ranks, but vLLM scales B/C by tp_ratio as if they were sharded.
TEST(MambaSplit, Issue55208ReplicatedGroupsVllmWrongPdkvRight) {
  const MambaState p = mamba_state_at(falcon_h1_05b(), 1);  // x 9216 | B 768 | C 768 | ssm 393216
  const MambaState d = mamba_state_at(falcon_h1_05b(), 2);  // x 4608 | B 768 | C 768 | ssm 196608
  ASSERT_EQ(p.projections[1].offset, 9216u);
  ASSERT_EQ(p.projections[2].offset, 9984u);
  ASSERT_EQ(p.conv_bytes, 10752u);

  const std::vector<MambaRead> vllm = vllm_mamba_reads(p, d, 1);
  ASSERT_EQ(vllm.size(), 4u);
  EXPECT_EQ(vllm[1], (MambaRead{0, "B", 9984, 4608, 768}));   // that is P's C
  EXPECT_EQ(vllm[2], (MambaRead{0, "C", 11520, 5376, 768}));  // inside P's temporal state
  EXPECT_GE(vllm[2].remote_offset, p.conv_bytes);

  const std::vector<MambaRead> pdkv = mamba_reads(p, d, 1);
  const std::vector<MambaRead> want = {
      {0, "x", 4608, 0, 4608},
      {0, "B", 9216, 4608, 768},  // P's B, offset 0 of the projection
      {0, "C", 9984, 5376, 768},  // P's C
      {0, "ssm", 10752 + 196608, 6144, 196608},
  };
  EXPECT_EQ(pdkv, want);
  // Rank 0 too: vLLM's C for rank 0 starts at P's temporal state.
  EXPECT_EQ(vllm_mamba_reads(p, d, 0)[2], (MambaRead{0, "C", 10752, 5376, 768}));
  EXPECT_EQ(mamba_reads(p, d, 0)[2], (MambaRead{0, "C", 9984, 5376, 768}));

  // Simulate the bytes: fill P's page with its byte offsets' owner labels and copy.
  auto p_label = [&](uint64_t off) -> std::string {
    if (off < 9216) return "x";
    if (off < 9984) return "B";
    if (off < 10752) return "C";
    return "ssm";
  };
  for (const MambaRead& r : vllm) {
    if (r.part == "B" || r.part == "C") EXPECT_NE(p_label(r.remote_offset), r.part);
  }
  for (const MambaRead& r : pdkv) {
    EXPECT_EQ(p_label(r.remote_offset), r.part);
    EXPECT_EQ(p_label(r.remote_offset + r.length - 1), r.part);
  }
}

TEST(MambaSplit, ReplicatedGroupReadFromTheRankHoldingDsHeads) {
  // One group (the only replicated case vLLM runs), 64 heads, P TP8 -> D TP2: every P rank holds
  // a copy of the group. D rank 1 holds heads 32..63, whose x channels start on P rank 4; pdkv
  // reads B and C once each, from that rank (one D reads x from anyway), whole.
  const ModelDesc m = mamba2_model("one-group", 64, 64, 128, 1, 4);
  const MambaState p = mamba_state_at(m, 8);
  const MambaState d = mamba_state_at(m, 2);
  ASSERT_TRUE(p.projections[1].replicated);
  ASSERT_EQ(p.projections[1].bytes, d.projections[1].bytes);
  const std::vector<MambaRead> reads = mamba_reads(p, d, 1);
  uint32_t bc_reads = 0;
  for (const MambaRead& r : reads) {
    if (r.part == "x") EXPECT_GE(r.p_rank, 4u);
    if (r.part != "B" && r.part != "C") continue;
    const size_t k = r.part == "B" ? 1 : 2;
    EXPECT_EQ(r.p_rank, 4u) << r.part;
    EXPECT_EQ(r.remote_offset, p.projections[k].offset) << r.part;
    EXPECT_EQ(r.local_offset, d.projections[k].offset) << r.part;
    EXPECT_EQ(r.length, d.projections[k].bytes) << r.part;
    ++bc_reads;
  }
  EXPECT_EQ(bc_reads, 2u);
}

TEST(MambaSplit, ReadErrors) {
  std::string msg;
  const MambaState p = mamba_state_at(nemotron3_nano(), 1);
  const MambaState d = mamba_state_at(nemotron3_nano(), 2);
  EXPECT_EQ(status_of([&] { mamba_reads(p, d, 2); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("decode rank 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tp_size 2"), std::string::npos) << msg;
  EXPECT_EQ(status_of([&] { vllm_mamba_reads(p, d, 5); }, &msg), Status::InvalidArgument);

  EXPECT_EQ(status_of([&] { mamba_reads(mamba_state_at(qwen3_next(), 1), d, 0); }, &msg),
            Status::Incompatible);
  EXPECT_NE(msg.find("gdn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mamba2"), std::string::npos) << msg;

  EngineConfig fp32;
  fp32.tp_size = 2;
  fp32.conv_state_dtype_bytes = 4;
  EXPECT_EQ(status_of([&] { mamba_reads(p, derive_mamba_state(nemotron3_nano(), fp32), 0); }, &msg),
            Status::Incompatible);
  EXPECT_NE(msg.find("conv dtype bytes is 2 on prefill but 4 on decode"), std::string::npos) << msg;

  const ModelDesc other = mamba2_model("other", 64, 64, 128, 4, 4);
  EXPECT_EQ(status_of([&] { mamba_reads(mamba_state_at(other, 1), d, 0); }, &msg),
            Status::Incompatible);
  EXPECT_NE(msg.find("projection B channels is 512 on prefill but 1024"), std::string::npos) << msg;

  // vLLM's formulas need divisible TP sizes: 24 heads run on TP 3 and TP 2, which do not divide.
  const ModelDesc f = mamba2_model("h24", 24, 64, 128, 1, 0);
  EXPECT_EQ(
      status_of([&] { vllm_mamba_reads(mamba_state_at(f, 3), mamba_state_at(f, 2), 0); }, &msg),
      Status::TpNotDivisible);
  // pdkv's ownership derivation does not: D TP2 rank 1 <- P TP3 takes heads 12..23 from P 1, 2.
  const std::vector<MambaRead> odd = mamba_reads(mamba_state_at(f, 3), mamba_state_at(f, 2), 1);
  EXPECT_EQ(mamba_source_ranks(odd), (std::vector<uint32_t>{1, 2}));
}

// The vLLM views used to return offsets for a local rank past the local TP and for a positive
// tp_ratio that cannot be local_tp / remote_tp (3 does not divide TP2).
TEST(MambaSplit, ViewsCheckLocalRankAndTpRatio) {
  const MambaState d2 = mamba_state_at(nemotron3_nano(), 2);
  std::string msg;
  EXPECT_EQ(status_of([&] { remote_conv_offsets(d2, 99, 2); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("local_rank 99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tp_size 2"), std::string::npos) << msg;
  EXPECT_EQ(status_of([&] { ssm_read_range(d2, 36864, 2097152, 99, 2); }, &msg),
            Status::InvalidArgument);
  EXPECT_NE(msg.find("local_rank 99"), std::string::npos) << msg;
  // Also for a negative ratio: the rank is still a local one.
  EXPECT_EQ(status_of([&] { remote_conv_offsets(d2, 2, -2); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("local_rank 2"), std::string::npos) << msg;
  EXPECT_EQ(status_of([&] { ssm_read_range(d2, 9216, 524288, 2, -2); }, &msg),
            Status::InvalidArgument);
  // Positive ratios must divide the local TP.
  for (int32_t r : {3, 4, 5}) {
    EXPECT_EQ(status_of([&] { remote_conv_offsets(d2, 1, r); }, &msg), Status::InvalidArgument);
    EXPECT_NE(msg.find("tp_ratio " + std::to_string(r)), std::string::npos) << msg;
    EXPECT_NE(msg.find("tp_size 2"), std::string::npos) << msg;
    EXPECT_EQ(status_of([&] { ssm_read_range(d2, 36864, 2097152, 1, r); }, &msg),
              Status::InvalidArgument);
    EXPECT_NE(msg.find("tp_ratio " + std::to_string(r)), std::string::npos) << msg;
  }
  // Consistent arguments still work: ratios 1 and 2 divide TP2; any negative ratio.
  EXPECT_NO_THROW(remote_conv_offsets(d2, 1, 1));
  EXPECT_NO_THROW(ssm_read_range(d2, 36864, 2097152, 1, 2));
  EXPECT_NO_THROW(ssm_read_range(d2, 9216, 524288, 1, -8));
}
