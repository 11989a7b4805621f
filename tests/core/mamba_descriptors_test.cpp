// Mamba descriptor geometry (docs/semantics.md §3): region-major local descriptors, remote
// descriptors per P rank, local split chunks, descriptor ids, and every error path.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_descriptors.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/mamba_state.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

constexpr uint64_t kBase0 = 0x100000;
constexpr uint64_t kBase1 = 0x40000000;

}  // namespace

TEST(MambaDescriptors, LocalIsRegionMajorProjectionsThenSsm) {
  // Nemotron-3-Nano TP2: kernel block 4096, ppl 261 -> logical page stride 1,069,056 B.
  const MambaState s = mamba_state_at(nemotron3_nano(), 2);
  const uint64_t stride = 4096 * 261;
  const std::vector<Region> regions = {{kBase0, 4096, 261 * 3}, {kBase1, 4096, 261 * 3}};
  const std::vector<Descriptor> d = mamba_local_descriptors(regions, 261, s);
  ASSERT_EQ(d.size(), 2u * 4 * 3);
  const uint64_t offs[] = {0, 12288, 15360, 18432};
  const uint64_t lens[] = {12288, 3072, 3072, 1048576};
  size_t i = 0;
  for (uint64_t base : {kBase0, kBase1}) {
    for (int part = 0; part < 4; ++part) {
      for (uint64_t b = 0; b < 3; ++b, ++i) {
        EXPECT_EQ(d[i], (Descriptor{base + b * stride + offs[part], lens[part]})) << i;
      }
    }
  }
  // Spot values, written out.
  EXPECT_EQ(d[1], (Descriptor{kBase0 + 1069056, 12288}));
  EXPECT_EQ(d[11], (Descriptor{kBase0 + 2 * 1069056 + 18432, 1048576}));
}

TEST(MambaDescriptors, RemoteForOnePrefillRank) {
  // D TP2 rank 1 <- P TP1 (kernel block 8192, ppl 261): x, B, C, ssm slices of P's page.
  const MambaState p = mamba_state_at(nemotron3_nano(), 1);
  const MambaState d = mamba_state_at(nemotron3_nano(), 2);
  const std::vector<MambaRead> reads = mamba_reads(p, d, 1);
  const uint64_t stride = 8192 * 261;
  const std::vector<Descriptor> r = mamba_remote_descriptors({{kBase1, 8192, 261 * 2}}, 261, p, reads, 0);
  const std::vector<Descriptor> want = {
      {kBase1 + 12288, 12288},         {kBase1 + stride + 12288, 12288},
      {kBase1 + 27648, 3072},          {kBase1 + stride + 27648, 3072},
      {kBase1 + 33792, 3072},          {kBase1 + stride + 33792, 3072},
      {kBase1 + 1085440, 1048576},     {kBase1 + stride + 1085440, 1048576},
  };
  EXPECT_EQ(r, want);
  // Sharded groups, tp_ratio >= 1: the local destinations are exactly the registered list.
  const std::vector<Region> local = {{kBase0, 4096, 261 * 2}};
  EXPECT_EQ(mamba_local_split_descriptors(local, 261, d, reads, 0),
            mamba_local_descriptors(local, 261, d));
  // P rank 1 does not exist for this D rank's plan: nothing to read.
  EXPECT_TRUE(mamba_remote_descriptors({{kBase1, 8192, 261 * 2}}, 261, p, reads, 1).empty());
}

TEST(MambaDescriptors, SplitChunksMatchVllmForNegativeRatio) {
  // D TP1 <- P TP4: vLLM cuts each local descriptor into 4 chunks, P rank i at i*len/4.
  const MambaState p = mamba_state_at(nemotron3_nano(), 4);
  const MambaState d = mamba_state_at(nemotron3_nano(), 1);
  const std::vector<MambaRead> reads = mamba_reads(p, d, 0);
  const std::vector<Region> local = {{kBase0, 8192, 261 * 2}, {kBase1, 8192, 261 * 2}};
  const std::vector<Region> remote = {{kBase1, 4096, 131 * 2}, {kBase0, 4096, 131 * 2}};
  const std::vector<Descriptor> full = mamba_local_descriptors(local, 261, d);
  for (uint32_t i = 0; i < 4; ++i) {
    const std::vector<Descriptor> split = mamba_local_split_descriptors(local, 261, d, reads, i);
    ASSERT_EQ(split.size(), full.size());
    for (size_t j = 0; j < full.size(); ++j) {
      const uint64_t chunk = full[j].len / 4;
      EXPECT_EQ(split[j], (Descriptor{full[j].addr + i * chunk, chunk})) << i << " " << j;
    }
    const std::vector<Descriptor> rem = mamba_remote_descriptors(remote, 131, p, reads, i);
    ASSERT_EQ(rem.size(), split.size());
    for (size_t j = 0; j < rem.size(); ++j) EXPECT_EQ(rem[j].len, split[j].len);
    // P pages: x at 0 (1024 channels * 3 rows * 2 B = 6144 B), ssm at conv 9216 (524288 B),
    // stride 4096*131.
    EXPECT_EQ(rem[0], (Descriptor{kBase1, 6144}));
    EXPECT_EQ(rem[7], (Descriptor{kBase1 + 4096 * 131 + 9216, 524288}));
  }
}

TEST(MambaDescriptors, ReplicatedGroupsAddressPrefillsOwnB) {
  // Falcon-H1-0.5B P TP1 -> D TP2 rank 1: B at P offset 9216 (vLLM #55208 would use 9984).
  const MambaState p = mamba_state_at(falcon_h1_05b(), 1);
  const MambaState d = mamba_state_at(falcon_h1_05b(), 2);
  // P: 200 kernel blocks of 2048 B = 409,600 B >= its 403,968 B page; 3 logical blocks.
  const std::vector<Descriptor> r =
      mamba_remote_descriptors({{kBase1, 2048, 200 * 3}}, 200, p, mamba_reads(p, d, 1), 0);
  ASSERT_EQ(r.size(), 4u * 3);
  const uint64_t stride = 2048 * 200;
  EXPECT_EQ(r[3], (Descriptor{kBase1 + 9216, 768}));
  EXPECT_EQ(r[4], (Descriptor{kBase1 + stride + 9216, 768}));
  EXPECT_EQ(r[6], (Descriptor{kBase1 + 9984, 768}));
  EXPECT_EQ(r[9], (Descriptor{kBase1 + 10752 + 196608, 196608}));
  const std::vector<Descriptor> l =
      mamba_local_split_descriptors({{kBase0, 1024, 200 * 4}}, 200, d, mamba_reads(p, d, 1), 0);
  ASSERT_EQ(l.size(), 4u * 4);
  EXPECT_EQ(l[4], (Descriptor{kBase0 + 4608, 768}));
  EXPECT_EQ(l[12], (Descriptor{kBase0 + 6144, 196608}));
}

TEST(MambaDescriptors, DescriptorIdsMatchVllmExamples) {
  // 2 FA regions of 100 blocks -> n_fa = 200; one Mamba2 layer = 4 descriptor rows.
  EXPECT_EQ(mamba_descriptor_ids({1, 2}, 100, 1, 4, 200),
            (std::vector<uint64_t>{201, 202, 301, 302, 401, 402, 501, 502}));
  // ppl 4, 400 kernel blocks: 100 logical Mamba blocks, n_fa = 800.
  EXPECT_EQ(mamba_descriptor_ids({1, 2}, 100, 1, 4, 800),
            (std::vector<uint64_t>{801, 802, 901, 902, 1001, 1002, 1101, 1102}));
  EXPECT_EQ(mamba_descriptor_ids({0}, 10, 2, 2, 0), (std::vector<uint64_t>{0, 10, 20, 30}));
  EXPECT_TRUE(mamba_descriptor_ids({}, 10, 2, 2, 0).empty());
  std::string msg;
  EXPECT_EQ(status_of([] { mamba_descriptor_ids({100}, 100, 1, 4, 0); }, &msg), Status::OutOfBounds);
  EXPECT_NE(msg.find("block id 100"), std::string::npos) << msg;
  EXPECT_EQ(status_of([] { mamba_descriptor_ids({1}, 2, ~uint64_t{0}, 2, 0); }, &msg), Status::Overflow);
}

TEST(MambaDescriptors, Errors) {
  const MambaState s = mamba_state_at(nemotron3_nano(), 2);  // page 1,067,008 B
  std::string msg;
  EXPECT_EQ(status_of([&] { mamba_local_descriptors({{0, 4096, 261}}, 0, s); }, &msg),
            Status::InvalidArgument);
  EXPECT_EQ(status_of([&] { mamba_local_descriptors({{0, 4096, 262}}, 261, s); }, &msg),
            Status::InvalidArgument);
  EXPECT_NE(msg.find("num_blocks 262"), std::string::npos) << msg;
  EXPECT_NE(msg.find("261"), std::string::npos) << msg;
  // ppl 260 gives a 1,064,960 B page: too small for the state.
  EXPECT_EQ(status_of([&] { mamba_local_descriptors({{0, 4096, 260}}, 260, s); }, &msg),
            Status::OutOfBounds);
  EXPECT_NE(msg.find("1067008"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1064960"), std::string::npos) << msg;
  // A base near the top of the address space overflows.
  EXPECT_EQ(status_of([&] { mamba_local_descriptors({{~uint64_t{0} - 4096, 4096, 261}}, 261, s); },
                      &msg),
            Status::Overflow);
  EXPECT_EQ(status_of([&] { mamba_local_descriptors({{0, ~uint64_t{0} / 2, 261}}, 261, s); }, &msg),
            Status::Overflow);
  // A hand-made read that leaves the P page.
  const std::vector<MambaRead> bad = {{0, "ssm", s.page_bytes() - 10, 0, 20}};
  EXPECT_EQ(status_of([&] { mamba_remote_descriptors({{0, 4096, 261}}, 261, s, bad, 0); }, &msg),
            Status::OutOfBounds);
  EXPECT_NE(msg.find("prefill page of 1067008"), std::string::npos) << msg;
  const std::vector<MambaRead> bad_local = {{0, "x", 0, s.page_bytes(), 1}};
  EXPECT_EQ(status_of([&] { mamba_local_split_descriptors({{0, 4096, 261}}, 261, s, bad_local, 0); },
                      &msg),
            Status::OutOfBounds);
  EXPECT_NE(msg.find("decode page"), std::string::npos) << msg;
}

// Sweep: for every TP pair and D rank, the split descriptors of all source P ranks tile each
// local logical page's state bytes exactly once, and each one pairs with a remote descriptor of
// the same length inside the P region.
TEST(MambaDescriptors, SplitDescriptorsTileEveryLocalPage) {
  for (const ModelDesc& m : {nemotron3_nano(), falcon_h1_05b()}) {
    for (uint32_t ptp : {1u, 2u, 4u, 8u}) {
      for (uint32_t dtp : {1u, 2u, 4u, 8u}) {
        const MambaState p = mamba_state_at(m, ptp);
        const MambaState d = mamba_state_at(m, dtp);
        const uint64_t d_ppl = ceil_div(d.page_bytes(), 4096), p_ppl = ceil_div(p.page_bytes(), 2048);
        const std::vector<Region> local = {{kBase0, 4096, d_ppl * 3}};
        const std::vector<Region> remote = {{kBase1, 2048, p_ppl * 3}};
        for (uint32_t rank = 0; rank < dtp; ++rank) {
          const std::vector<MambaRead> reads = mamba_reads(p, d, rank);
          std::vector<Descriptor> all;
          for (uint32_t src : mamba_source_ranks(reads)) {
            const auto l = mamba_local_split_descriptors(local, d_ppl, d, reads, src);
            const auto r = mamba_remote_descriptors(remote, p_ppl, p, reads, src);
            ASSERT_EQ(l.size(), r.size());
            for (size_t j = 0; j < l.size(); ++j) {
              EXPECT_EQ(l[j].len, r[j].len);
              EXPECT_GE(r[j].addr, kBase1);
              EXPECT_LE(r[j].addr + r[j].len, kBase1 + 2048 * p_ppl * 3);
            }
            all.insert(all.end(), l.begin(), l.end());
          }
          std::sort(all.begin(), all.end(),
                    [](const Descriptor& a, const Descriptor& b) { return a.addr < b.addr; });
          uint64_t page = 0, cursor = kBase0;
          for (const Descriptor& x : all) {
            if (cursor == kBase0 + page * 4096 * d_ppl + d.page_bytes()) {
              ++page;  // this page's state is complete; the next starts after the padding
              cursor = kBase0 + page * 4096 * d_ppl;
            }
            ASSERT_EQ(x.addr, cursor) << m.name << " P" << ptp << " D" << dtp << " r" << rank;
            cursor += x.len;
          }
          EXPECT_EQ(page, 2u);
          EXPECT_EQ(cursor, kBase0 + 2 * 4096 * d_ppl + d.page_bytes());
        }
      }
    }
  }
}
