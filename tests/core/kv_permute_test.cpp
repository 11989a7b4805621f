// Different KV layouts on the two sides (issue 12 item 3): the block permutation itself, and
// plans in which D writes its blocks in P's layout and permutes them after receipt, worked out
// by hand: D NHD TP2 rank 1 <- P HND TP1 (D reads a head slice of P's blocks), D HND <- P NHD at
// the same heads per rank, and the refusals that name the fix.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "pdkv/core/geometry.hpp"
#include "pdkv/core/kv_permute.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

// 2 heads x 3 tokens x 2 bytes: byte j of head h of token t is 100h + 10t + j.
std::vector<uint8_t> hnd_block() {
  std::vector<uint8_t> b;
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 3; ++t)
      for (int j = 0; j < 2; ++j) b.push_back(static_cast<uint8_t>(100 * h + 10 * t + j));
  return b;
}

TEST(KvPermute, TransposesHeadsAndTokens) {
  std::vector<uint8_t> b = hnd_block();
  const BlockPermute p{KvLayout::HND, KvLayout::NHD, 2, 3, 2};
  permute_kv_block(b, p);
  const std::vector<uint8_t> nhd = {0, 1, 100, 101, 10, 11, 110, 111, 20, 21, 120, 121};
  EXPECT_EQ(b, nhd);
  permute_kv_block(b, {KvLayout::NHD, KvLayout::HND, 2, 3, 2});
  EXPECT_EQ(b, hnd_block());
  // Inactive: untouched.
  permute_kv_block(b, {KvLayout::NHD, KvLayout::NHD, 2, 3, 2});
  EXPECT_EQ(b, hnd_block());
  expect_error([&] { permute_kv_block(std::span(b).first(10), p); }, Status::InvalidArgument,
               {"10 bytes", "2 heads x 3 tokens x 2 bytes = 12"});
  expect_error([&] { permute_kv_block(b, {KvLayout::HND, KvLayout::NHD, 0, 3, 2}); }, Status::InvalidArgument,
               {"zero dimension"});
}

// 4 KV heads of 4 + 4 one-byte elements (8 bytes per head per token), block size 16.
ModelDesc gqa4() {
  ModelDesc m;
  m.name = "gqa4";
  m.attention.num_kv_heads = 4;
  m.attention.head_size = 4;
  m.attention.head_size_v = 4;
  m.dtype_bytes = 1;
  return m;
}

PlanContext ctx(uint32_t d_tp, uint32_t d_rank, uint32_t p_tp, KvLayout dl, KvLayout pl, bool permute) {
  const ModelDesc m = gqa4();
  auto meta = [&](uint32_t tp, uint32_t rank, const char* id, uint64_t base, KvLayout l) {
    EngineConfig e;
    e.tp_size = tp;
    e.user_block_size = 16;
    EngineMetadata md = metadata_from_geometry(m, e, derive_geometry(m, e), {id, rank, 8, 1, base});
    md.kv_layout = l;
    return md;
  };
  std::vector<EngineMetadata> p;
  for (uint32_t r = 0; r < p_tp; ++r) p.push_back(meta(p_tp, r, "p", (2ull + r) << 40, pl));
  PlanContext c = make_plan_context(meta(d_tp, d_rank, "d", 1ull << 40, dl), p);
  c.permute_on_receive = permute;
  return c;
}

PlanGroup attention(std::vector<uint64_t> local, std::vector<uint64_t> remote, uint64_t tokens, uint64_t hit = 0) {
  PlanGroup g;
  g.trim.kind = GroupKind::Attention;
  g.trim.local_blocks = std::move(local);
  g.trim.remote_blocks = std::move(remote);
  g.trim.remote_computed_tokens = tokens;
  g.trim.local_hit_tokens = hit;
  return g;
}

// D NHD TP2 rank 1 (heads 2, 3: block 16 x 2 x 8 = 256 B) <- P HND TP1 (4 heads: block 512 B).
// 20 tokens: D blocks 3 and 5 <- P blocks 7 and 2. As if D were HND, D's heads 2-3 are P's bytes
// [256, 512) of a block: block 3 whole (one piece), block 5 gets tokens 0-3 of each head (one
// piece per head, 32 B at head h's HND offset). Then both D blocks are permuted HND -> NHD.
TEST(KvPermute, DNhdReadsPHndHeadSlicesAndPermutes) {
  const PlanContext c = ctx(2, 1, 1, KvLayout::NHD, KvLayout::HND, true);
  const std::vector<PlanGroup> groups = {attention({3, 5}, {7, 2}, 20)};
  const TransferPlan plan = compile_transfer_plan(c, groups);
  ASSERT_EQ(plan.ranks.size(), 1u);
  const std::vector<PlanRead> want = {{0, 3 * 256, 0, 7 * 512 + 256, 256},
                                      {0, 5 * 256, 0, 2 * 512 + 256, 32},
                                      {0, 5 * 256 + 128, 0, 2 * 512 + 256 + 128, 32}};
  EXPECT_EQ(plan.ranks[0].reads, want);
  EXPECT_EQ(plan.permute, (BlockPermute{KvLayout::HND, KvLayout::NHD, 2, 16, 8}));
  ASSERT_EQ(plan.zero.size(), 1u);
  EXPECT_EQ(plan.zero[0].permute_blocks, (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(plan.zero[0].permute_regions, (std::vector<uint32_t>{0}));
  // Tokens 4..15 of block 5 are zeroed after the permutation, in D's NHD layout.
  EXPECT_EQ(plan.zero[0].zero, (std::vector<ZeroRange>{{5, 4, 16}}));

  // Receive: P's bytes (head h, token t, byte j = h*40 + t*2 + j, mod 256), the reads, the
  // permutation, then D's block 5 must hold token t of its head 0 (P head 2) at t*16.
  std::vector<uint8_t> pmem(8 * 512), dmem(8 * 256, 0xEE);
  for (uint64_t blk = 0; blk < 8; ++blk)
    for (uint64_t h = 0; h < 4; ++h)
      for (uint64_t t = 0; t < 16; ++t)
        for (uint64_t j = 0; j < 8; ++j)
          pmem[blk * 512 + (h * 16 + t) * 8 + j] = static_cast<uint8_t>(blk * 7 + h * 40 + t * 2 + j);
  for (const PlanRead& r : plan.ranks[0].reads) std::memcpy(&dmem[r.local_offset], &pmem[r.remote_offset], r.length);
  for (uint64_t blk : plan.zero[0].permute_blocks) permute_kv_block(std::span(dmem).subspan(blk * 256, 256), plan.permute);
  for (const auto& [blk, pblk, tokens] : {std::tuple{3u, 7u, 16u}, std::tuple{5u, 2u, 4u}}) {
    for (uint64_t t = 0; t < tokens; ++t)
      for (uint64_t h = 0; h < 2; ++h)
        for (uint64_t j = 0; j < 8; ++j)
          EXPECT_EQ(dmem[blk * 256 + (t * 2 + h) * 8 + j], static_cast<uint8_t>(pblk * 7 + (h + 2) * 40 + t * 2 + j))
              << "block " << blk << " token " << t << " head " << h;
  }
  EXPECT_NO_THROW(validate_transfer_plan(plan, c, groups));

  // A plan that forgets to permute a block, or permutes the wrong way, is caught.
  TransferPlan cut = plan;
  cut.zero[0].permute_blocks = {3};
  expect_error([&] { validate_transfer_plan(cut, c, groups); }, Status::Coverage,
               {"plan permutes 1 D blocks", "D needs 2 blocks"});
  TransferPlan wrong = plan;
  wrong.permute.from = KvLayout::NHD;
  expect_error([&] { validate_transfer_plan(wrong, c, groups); }, Status::Coverage, {"from NHD to NHD", "HND to NHD"});
}

// D HND <- P NHD at the same heads per rank (TP2 both): D's block is written as NHD, whole tokens
// (one piece per token run), then permuted NHD -> HND.
TEST(KvPermute, DHndReadsPNhdWholeTokensAndPermutes) {
  const PlanContext c = ctx(2, 0, 2, KvLayout::HND, KvLayout::NHD, true);
  const TransferPlan plan = compile_transfer_plan(c, {attention({4, 6}, {1, 3}, 24)});
  ASSERT_EQ(plan.ranks.size(), 1u);
  EXPECT_EQ(plan.ranks[0].reads,
            (std::vector<PlanRead>{{0, 4 * 256, 0, 1 * 256, 256}, {0, 6 * 256, 0, 3 * 256, 8 * 16}}));
  EXPECT_EQ(plan.permute, (BlockPermute{KvLayout::NHD, KvLayout::HND, 2, 16, 8}));
  EXPECT_EQ(plan.zero[0].permute_blocks, (std::vector<uint64_t>{4, 6}));
}

TEST(KvPermute, RefusalsNameTheFix) {
  // Without the flag.
  expect_error([] { compile_transfer_plan(ctx(2, 1, 1, KvLayout::NHD, KvLayout::HND, false), {attention({3}, {7}, 16)}); },
               Status::UnsupportedLayout, {"D NHD, P HND", "set permute_on_receive", "enable_permute_local_kv"});
  // P NHD read by head subsets: no plan reads them whole; HND on P is the fix (D may stay NHD).
  expect_error([] { compile_transfer_plan(ctx(2, 1, 1, KvLayout::HND, KvLayout::NHD, true), {attention({3}, {7}, 16)}); },
               Status::UnsupportedLayout, {"NHD KV cache layout on P", "2 (D) vs 4 (P)", "HND KV cache layout on the prefill engine"});
  // D's prefix-cache hit ends mid-block: the staging write would land on D's own NHD tokens.
  expect_error([] {
    compile_transfer_plan(ctx(2, 1, 1, KvLayout::NHD, KvLayout::HND, true), {attention({3, 4}, {7, 2}, 24, 8)});
  }, Status::UnsupportedLayout, {"D block 3 holds tokens [0, 8)", "prefix-cache hit", "block boundary"});
  // A block-aligned hit is fine: block 3 is D's second block, all received.
  const TransferPlan ok =
      compile_transfer_plan(ctx(2, 1, 1, KvLayout::NHD, KvLayout::HND, true), {attention({3}, {7, 2}, 32, 16)});
  EXPECT_EQ(ok.zero[0].permute_blocks, (std::vector<uint64_t>{3}));
  // MLA-free layouts that agree: nothing to permute.
  const TransferPlan same = compile_transfer_plan(ctx(2, 1, 1, KvLayout::HND, KvLayout::HND, true), {attention({3}, {7}, 16)});
  EXPECT_FALSE(same.permute.active());
  EXPECT_TRUE(same.zero[0].permute_blocks.empty());
}

}  // namespace
