// Attention read geometry and descriptor lists (docs/semantics.md §3: attention local / remote /
// local split handles), checked on exact numbers.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/attention_descriptors.hpp"
#include "pdkv/core/error.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;
using Descs = std::vector<Descriptor>;

namespace {

TpMapping map_d(uint32_t d_tp, uint32_t d_rank, uint32_t p_tp, uint32_t k, bool mla = false,
                bool mamba = false) {
  return compute_tp_mapping({d_tp, d_rank, p_tp, k, mla, mamba});
}

}  // namespace

// ---- step 4: reads -------------------------------------------------------------------------

TEST(AttentionReads, DtpGreater_K8_D3Tp4_FromP2) {
  // 2 local heads of 512 B = 1024; P rank 1 holds 4 heads = 2048; D's heads are the upper half.
  const auto reads = attention_reads(map_d(4, 3, 2, 8), 1024, 2048);
  EXPECT_EQ(reads, (std::vector<AttentionRead>{{1, 1024, 0, 1024}}));
}

TEST(AttentionReads, DReplicated_D3Tp4_FromP1_K2) {
  // D holds head 1 (one head, 256 B); P rank 0 holds heads 0,1 (512 B).
  const auto reads = attention_reads(map_d(4, 3, 1, 2), 256, 512);
  EXPECT_EQ(reads, (std::vector<AttentionRead>{{0, 256, 0, 256}}));
}

TEST(AttentionReads, PtpGreater_K2_D1FromP4_Dedup) {
  // D holds 2 heads (2*300 B); P ranks hold one replicated head each; read P0 and P2.
  const auto reads = attention_reads(map_d(1, 0, 4, 2, false, true), 600, 300);
  EXPECT_EQ(reads, (std::vector<AttentionRead>{{0, 0, 0, 300}, {2, 0, 300, 300}}));
}

TEST(AttentionReads, PtpGreater_K8_D1FromP4) {
  const auto reads = attention_reads(map_d(2, 1, 8, 8), 4000, 1000);
  EXPECT_EQ(reads, (std::vector<AttentionRead>{
                       {4, 0, 0, 1000}, {5, 0, 1000, 1000}, {6, 0, 2000, 1000},
                       {7, 0, 3000, 1000}}));
}

TEST(AttentionReads, MlaWholeBlock) {
  EXPECT_EQ(attention_reads(map_d(2, 1, 8, 1, true, true), 576, 576),
            (std::vector<AttentionRead>{{4, 0, 0, 576}}));
  EXPECT_EQ(attention_reads(map_d(8, 5, 2, 1, true), 576, 576),
            (std::vector<AttentionRead>{{1, 0, 0, 576}}));
}

TEST(AttentionReads, BlockLenMismatch) {
  expect_error([] { attention_reads(map_d(4, 3, 2, 8), 1024, 1024); }, Status::Incompatible,
               {"remote attention block_len 1024", "must be 2048"});
  expect_error([] { attention_reads(map_d(2, 0, 2, 1, true), 576, 1152); }, Status::Incompatible,
               {"1152", "576"});
  expect_error([] { attention_reads(map_d(1, 0, 1, 4), 1022, 1022); }, Status::Incompatible,
               {"1022", "4 equal KV heads"});
  expect_error([] { attention_reads(map_d(1, 0, 1, 4), 0, 0); }, Status::InvalidArgument,
               {"block_len"});
}

TEST(AttentionReads, ExpectedRemoteBlockLen) {
  EXPECT_EQ(expected_remote_attention_block_len(map_d(4, 3, 2, 8), 1024), 2048u);
  EXPECT_EQ(expected_remote_attention_block_len(map_d(4, 3, 2, 8), 1024, 2), 1024u);
  EXPECT_EQ(expected_remote_attention_block_len(map_d(1, 0, 4, 2), 600), 300u);
  EXPECT_EQ(expected_remote_attention_block_len(map_d(8, 0, 4, 2), 300), 300u);  // both replicated
  EXPECT_EQ(expected_remote_attention_block_len(map_d(2, 0, 8, 1, true), 576, 4), 144u);
}

// ---- step 5: descriptors -------------------------------------------------------------------

TEST(AttentionDescriptors, LocalRegionMajor) {
  const std::vector<Region> regions = {{0x1000, 1024, 3}, {0x100000, 2048, 2}};
  EXPECT_EQ(attention_local_descriptors(regions),
            (Descs{{0x1000, 1024}, {0x1400, 1024}, {0x1800, 1024},
                   {0x100000, 2048}, {0x100800, 2048}}));
  // bsr 2: each local block becomes two sub-blocks of the remote block size.
  EXPECT_EQ(attention_local_descriptors(std::vector<Region>{{0x1000, 1024, 2}}, 2),
            (Descs{{0x1000, 512}, {0x1200, 512}, {0x1400, 512}, {0x1600, 512}}));
}

TEST(AttentionDescriptors, RemoteDtpGreaterUsesOffsetFactor) {
  // K=8, D rank 3 of TP4 <- P TP2: offset factor 1, read L=1024 from 2048-byte P blocks.
  const TpMapping m = map_d(4, 3, 2, 8);
  const std::vector<Region> local = {{0x0, 1024, 10}};
  const std::vector<Region> remote = {{0x10000, 2048, 3}};
  EXPECT_EQ(attention_remote_descriptors(local, remote, m),
            (Descs{{0x10000 + 1024, 1024}, {0x10000 + 2048 + 1024, 1024},
                   {0x10000 + 4096 + 1024, 1024}}));
  // bsr 2: transfer unit L/2 = 512 at factor*512 of 1024-byte P blocks.
  const std::vector<Region> remote_small = {{0x10000, 1024, 2}};
  EXPECT_EQ(attention_remote_descriptors(local, remote_small, m, 2),
            (Descs{{0x10000 + 512, 512}, {0x10000 + 1024 + 512, 512}}));
}

TEST(AttentionDescriptors, RemoteAndSplitHandlesPtpGreater) {
  // K=2 hybrid, D TP1 <- P TP4: attention from P0 (head 0) and P2 (head 1), 300 B per head.
  const TpMapping m = map_d(1, 0, 4, 2, false, true);
  const std::vector<Region> local = {{0x1000, 600, 2}, {0x9000, 600, 2}};
  const std::vector<Region> remote = {{0x50000, 300, 2}, {0x60000, 300, 2}};
  EXPECT_EQ(attention_remote_descriptors(local, remote, m),
            (Descs{{0x50000, 300}, {0x50000 + 300, 300}, {0x60000, 300}, {0x60000 + 300, 300}}));
  ASSERT_TRUE(needs_split_handles(m));
  const Descs ld = attention_local_descriptors(local);
  const auto handles = attention_split_handles(ld, m);
  ASSERT_EQ(handles.size(), 4u);
  const Descs slot0 = {{0x1000, 300}, {0x1000 + 600, 300}, {0x9000, 300}, {0x9000 + 600, 300}};
  const Descs slot1 = {{0x1000 + 300, 300}, {0x1000 + 900, 300}, {0x9000 + 300, 300},
                       {0x9000 + 900, 300}};
  EXPECT_EQ(handles[0].p_rank, 0u);
  EXPECT_EQ(handles[0].descriptors, slot0);
  EXPECT_EQ(handles[1].p_rank, 1u);
  EXPECT_EQ(handles[1].descriptors, slot0);  // twin of P0
  EXPECT_EQ(handles[2].p_rank, 2u);
  EXPECT_EQ(handles[2].descriptors, slot1);
  EXPECT_EQ(handles[3].descriptors, slot1);  // twin of P2
}

TEST(AttentionDescriptors, MlaKeepsWholeDescriptors) {
  const TpMapping m = map_d(2, 1, 8, 1, true, true);
  const std::vector<Region> local = {{0x1000, 576, 2}};
  const std::vector<Region> remote = {{0x80000, 576, 2}};
  EXPECT_EQ(attention_remote_descriptors(local, remote, m),
            (Descs{{0x80000, 576}, {0x80000 + 576, 576}}));
  const Descs ld = attention_local_descriptors(local);
  const auto handles = attention_split_handles(ld, m);
  ASSERT_EQ(handles.size(), 4u);
  for (const auto& h : handles) EXPECT_EQ(h.descriptors, ld);
  EXPECT_TRUE(needs_split_handles(m));                           // MLA + SSM: 4 sources
  EXPECT_FALSE(needs_split_handles(map_d(2, 1, 8, 1, true)));    // pure MLA: one read
  EXPECT_FALSE(needs_split_handles(map_d(8, 1, 2, 8)));          // D_TP > P_TP
  // MLA with bsr 2: sub-block of L/2 from the 288-byte remote blocks.
  const std::vector<Region> remote_small = {{0x80000, 288, 1}};
  EXPECT_EQ(attention_remote_descriptors(local, remote_small, m, 2), (Descs{{0x80000, 288}}));
}

TEST(AttentionDescriptors, SingleReplicatedSourceAllowsBsr) {
  // K=1, D TP2 <- P TP4: one attention source (dedup), bsr 2 is fine.
  const TpMapping m = map_d(2, 1, 4, 1, false, true);
  ASSERT_EQ(m.num_attention_reads(), 1u);
  const std::vector<Region> local = {{0x0, 512, 1}};
  const std::vector<Region> remote = {{0x4000, 256, 2}};
  EXPECT_EQ(attention_remote_descriptors(local, remote, m, 2),
            (Descs{{0x4000, 256}, {0x4100, 256}}));
  const auto handles = attention_split_handles(attention_local_descriptors(local, 2), m, 2);
  ASSERT_EQ(handles.size(), 2u);
  EXPECT_EQ(handles[1].descriptors, (Descs{{0x0, 256}, {0x100, 256}}));
}

TEST(AttentionDescriptors, Errors) {
  const TpMapping sharded = map_d(1, 0, 4, 2, false, true);
  const std::vector<Region> local = {{0x1000, 600, 2}};
  const std::vector<Region> remote_bsr2 = {{0x5000, 150, 4}};
  expect_error([&] { attention_remote_descriptors(local, remote_bsr2, sharded, 2); },
               Status::Incompatible, {"head-sharded", "block_size_ratio 2", "P tp_size 4"});
  expect_error([&] { attention_split_handles(attention_local_descriptors(local, 2), sharded, 2); },
               Status::Incompatible, {"head-sharded"});
  expect_error([&] { attention_split_handles(attention_local_descriptors(local), map_d(4, 0, 2, 8)); },
               Status::InvalidArgument, {"local tp_size 4", "remote tp_size 2"});
  const std::vector<Region> two = {{0, 600, 1}, {0x1000, 600, 1}};
  expect_error([&] { attention_remote_descriptors(two, local, sharded); }, Status::Incompatible,
               {"2 attention regions", "remote has 1"});
  const std::vector<Region> wrong_len = {{0x5000, 600, 1}};
  expect_error([&] { attention_remote_descriptors(local, wrong_len, sharded); },
               Status::Incompatible, {"region 0", "600", "must be 300"});
  expect_error([&] { attention_local_descriptors(local, 0); }, Status::InvalidArgument,
               {"block_size_ratio 0"});
  expect_error([&] { attention_local_descriptors(std::vector<Region>{{0, 601, 1}}, 2); },
               Status::Incompatible, {"601", "block_size_ratio 2"});
}

TEST(AttentionDescriptors, Overflow) {
  const TpMapping m = map_d(1, 0, 1, 4);
  const std::vector<Region> huge_local = {{UINT64_MAX - 1000, 1024, 2}};
  expect_error([&] { attention_local_descriptors(huge_local); }, Status::Overflow,
               {"overflows"});
  const std::vector<Region> many_blocks = {{0, 1ull << 40, 1ull << 30}};
  expect_error([&] { attention_local_descriptors(many_blocks); }, Status::Overflow,
               {"overflows"});
  const std::vector<Region> local = {{0, 1024, 1}};
  const std::vector<Region> remote_far = {{UINT64_MAX - 2000, 1024, 2}};
  expect_error([&] { attention_remote_descriptors(local, remote_far, m); }, Status::Overflow,
               {"remote attention address"});
}
