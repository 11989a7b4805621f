// Exhaustive property tests of the TP topology and attention read geometry over
// P_TP, D_TP in {1,2,4,8,16} and K in {1,..,32} (plus 3 and 6, which exercise the error paths).
// Every byte range is mapped back to KV heads using physical_head_range as the model of which
// heads each rank owns, so the checks are independent of how the reads were derived.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pdkv/core/attention_descriptors.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/head_ranges.hpp"
#include "pdkv/core/tp_topology.hpp"

using namespace pdkv::core;

namespace {

const std::vector<uint32_t> kTps = {1, 2, 3, 4, 6, 8, 16};
const std::vector<uint32_t> kHeads = {1, 2, 3, 4, 6, 8, 16, 32};
constexpr uint64_t kHeadBytes = 96;  // bytes of one head's slice of a block (any value works)
constexpr uint64_t kLocalBase = 0x100000;
constexpr uint64_t kRemoteBase = 0x900000;
constexpr uint64_t kBlocks = 3;

bool pow2(uint32_t x) { return (x & (x - 1)) == 0; }

bool tp_pair_ok(uint32_t a, uint32_t b) { return std::max(a, b) % std::min(a, b) == 0; }

bool placement_ok(uint32_t tp, uint32_t k) { return tp <= k ? k % tp == 0 : tp % k == 0; }

// The status compute_tp_mapping must raise for this combo, or Ok.
Status expected_status(uint32_t p_tp, uint32_t d_tp, uint32_t k, bool mla) {
  if (!tp_pair_ok(p_tp, d_tp)) return Status::TpNotDivisible;
  if (!mla && (!placement_ok(p_tp, k) || !placement_ok(d_tp, k))) {
    return Status::HeadsNotDivisible;
  }
  return Status::Ok;
}

// Checks the attention reads of D rank d against head ownership; returns nothing, reports via
// gtest. `where` labels failures.
void check_reads_cover_heads(const TpMapping& m, uint32_t p_tp, uint32_t d_tp, uint32_t k,
                             const std::string& where) {
  const uint32_t d = m.input.local_rank;
  const uint64_t L = m.local_physical_heads * kHeadBytes;
  const uint64_t Lr = m.remote_physical_heads * kHeadBytes;
  const HeadRange mine = physical_head_range(d_tp, k, d);
  ASSERT_EQ(mine.size() * kHeadBytes, L) << where;
  const auto reads = attention_reads(m, L, Lr);
  EXPECT_EQ(reads.size(), m.num_attention_reads()) << where;

  std::vector<uint32_t> covered(mine.size(), 0);
  std::vector<uint32_t> ranks_read;
  for (const AttentionRead& r : reads) {
    ranks_read.push_back(r.p_rank);
    EXPECT_TRUE(m.reads_attention_from(r.p_rank)) << where;
    EXPECT_NE(std::find(m.handshake_targets.begin(), m.handshake_targets.end(), r.p_rank),
              m.handshake_targets.end())
        << where << " read from non-target P rank " << r.p_rank;
    ASSERT_GT(r.length, 0u) << where;
    // No read leaves either block, and reads are head aligned.
    EXPECT_LE(r.remote_offset + r.length, Lr) << where;
    EXPECT_LE(r.local_offset + r.length, L) << where;
    ASSERT_EQ(r.remote_offset % kHeadBytes, 0u) << where;
    ASSERT_EQ(r.local_offset % kHeadBytes, 0u) << where;
    ASSERT_EQ(r.length % kHeadBytes, 0u) << where;
    const HeadRange theirs = physical_head_range(p_tp, k, r.p_rank);
    for (uint64_t i = 0; i < r.length / kHeadBytes; ++i) {
      const uint64_t local_head = mine.begin + r.local_offset / kHeadBytes + i;
      const uint64_t remote_head = theirs.begin + r.remote_offset / kHeadBytes + i;
      // The P rank really holds the head it is read for, and it lands on the same head on D.
      EXPECT_LT(remote_head, theirs.end) << where;
      EXPECT_EQ(local_head, remote_head) << where << " read from P" << r.p_rank;
      ASSERT_LT(local_head, mine.end) << where;
      ++covered[local_head - mine.begin];
    }
  }
  for (size_t h = 0; h < covered.size(); ++h) {
    EXPECT_EQ(covered[h], 1u) << where << " head " << (mine.begin + h);
  }
  std::sort(ranks_read.begin(), ranks_read.end());
  EXPECT_TRUE(std::adjacent_find(ranks_read.begin(), ranks_read.end()) == ranks_read.end())
      << where << " a P rank is read twice";
}

// Source lists and slots are consistent with the handshake targets and head ownership.
void check_sources(const TpMapping& m, uint32_t p_tp, uint32_t d_tp, uint32_t k, bool mamba,
                   const std::string& where) {
  const auto& t = m.handshake_targets;
  auto in_targets = [&](uint32_t r) { return std::find(t.begin(), t.end(), r) != t.end(); };
  EXPECT_TRUE(std::is_sorted(m.all_source_ranks.begin(), m.all_source_ranks.end())) << where;
  for (uint32_t r : m.all_source_ranks) EXPECT_TRUE(in_targets(r)) << where;
  if (!mamba) {
    EXPECT_TRUE(m.mamba_source_ranks.empty()) << where;
    EXPECT_EQ(m.all_source_ranks, m.attention_source_ranks) << where;
  } else if (d_tp < p_tp) {
    EXPECT_EQ(m.mamba_source_ranks, t) << where << " SSM must read every shard";
    EXPECT_EQ(m.all_source_ranks, t) << where;
  } else {
    EXPECT_EQ(m.mamba_source_ranks, m.attention_source_ranks) << where;
  }
  EXPECT_EQ(m.notify_ranks, t) << where;
  ASSERT_EQ(m.attention_slots.size(), m.all_source_ranks.size()) << where;
  for (uint32_t r : m.all_source_ranks) {
    const uint32_t s = m.attention_slot_of(r);
    ASSERT_LT(s, m.num_attention_reads()) << where;
    if (!m.input.use_mla) {
      // A dedup'd rank's twin holds exactly the same heads.
      EXPECT_EQ(physical_head_range(p_tp, k, r),
                physical_head_range(p_tp, k, m.attention_source_ranks[s]))
          << where << " rank " << r;
    }
  }
}

// The descriptor lists realise exactly the reads (block by block).
void check_descriptors_match_reads(const TpMapping& m, const std::string& where) {
  const uint64_t L = m.local_physical_heads * kHeadBytes;
  const uint64_t Lr = m.remote_physical_heads * kHeadBytes;
  const auto reads = attention_reads(m, L, Lr);
  const std::vector<Region> local = {{kLocalBase, L, kBlocks}};
  const std::vector<Region> remote = {{kRemoteBase, Lr, kBlocks}};
  const auto remote_descs = attention_remote_descriptors(local, remote, m);
  ASSERT_EQ(remote_descs.size(), kBlocks) << where;
  for (uint64_t b = 0; b < kBlocks; ++b) {
    // Every attention read of a block uses the same remote offset/length, whatever the rank.
    EXPECT_EQ(remote_descs[b].addr, kRemoteBase + b * Lr + reads[0].remote_offset) << where;
    EXPECT_EQ(remote_descs[b].len, reads[0].length) << where;
  }
  if (m.tp_ratio > 0) {
    ASSERT_EQ(reads.size(), 1u) << where;
    EXPECT_EQ(reads[0].local_offset, 0u) << where;
    EXPECT_FALSE(needs_split_handles(m)) << where;
    return;
  }
  const auto local_descs = attention_local_descriptors(local);
  const auto handles = attention_split_handles(local_descs, m);
  ASSERT_EQ(handles.size(), m.all_source_ranks.size()) << where;
  std::map<uint32_t, const SplitHandle*> by_rank;
  for (const auto& h : handles) by_rank[h.p_rank] = &h;
  for (const AttentionRead& r : reads) {
    ASSERT_TRUE(by_rank.count(r.p_rank)) << where;
    const auto& descs = by_rank[r.p_rank]->descriptors;
    ASSERT_EQ(descs.size(), kBlocks) << where;
    for (uint64_t b = 0; b < kBlocks; ++b) {
      EXPECT_EQ(descs[b].addr, kLocalBase + b * L + r.local_offset) << where;
      EXPECT_EQ(descs[b].len, r.length) << where;
    }
  }
  // A twin's handle is its attention source's handle.
  for (uint32_t p : m.all_source_ranks) {
    const uint32_t src = m.attention_source_ranks[m.attention_slot_of(p)];
    EXPECT_EQ(by_rank[p]->descriptors, by_rank[src]->descriptors) << where << " P" << p;
  }
}

}  // namespace

TEST(TpProperties, GqaReadsCoverEachHeadOnceAndNotificationsBalance) {
  uint32_t valid = 0, valid_pow2 = 0, errors = 0;
  for (uint32_t p_tp : kTps) {
    for (uint32_t d_tp : kTps) {
      for (uint32_t k : kHeads) {
        for (bool mamba : {false, true}) {
          const std::string where = "P_TP=" + std::to_string(p_tp) + " D_TP=" +
                                    std::to_string(d_tp) + " K=" + std::to_string(k) +
                                    (mamba ? " hybrid" : "");
          const Status want = expected_status(p_tp, d_tp, k, false);
          if (want != Status::Ok) {
            ++errors;
            EXPECT_FALSE(pow2(p_tp) && pow2(d_tp) && pow2(k)) << where;
            try {
              compute_tp_mapping({d_tp, 0, p_tp, k, false, mamba});
              ADD_FAILURE() << where << " expected " << status_name(want);
            } catch (const Error& e) {
              EXPECT_EQ(e.status(), want) << where << ": " << e.what();
            }
            continue;
          }
          ++valid;
          if (pow2(p_tp) && pow2(d_tp) && pow2(k)) ++valid_pow2;
          std::vector<uint32_t> notified(p_tp, 0);
          for (uint32_t d = 0; d < d_tp; ++d) {
            const std::string at = where + " d=" + std::to_string(d);
            const TpMapping m = compute_tp_mapping({d_tp, d, p_tp, k, false, mamba});
            check_sources(m, p_tp, d_tp, k, mamba, at);
            check_reads_cover_heads(m, p_tp, d_tp, k, at);
            check_descriptors_match_reads(m, at);
            for (uint32_t p : notification_targets(d_tp, d, p_tp)) ++notified[p];
          }
          const uint32_t expect = notifications_expected_per_request(p_tp, d_tp);
          for (uint32_t p = 0; p < p_tp; ++p) {
            EXPECT_EQ(notified[p], expect) << where << " P rank " << p;
          }
        }
      }
    }
  }
  EXPECT_EQ(valid_pow2, 5u * 5u * 6u * 2u);  // every power-of-two combo is servable
  EXPECT_GT(errors, 0u);
  EXPECT_GT(valid, valid_pow2);
}

TEST(TpProperties, MlaReadsOneWholeLatentFromItsFirstTarget) {
  for (uint32_t p_tp : kTps) {
    for (uint32_t d_tp : kTps) {
      for (bool mamba : {false, true}) {
        const std::string where = "MLA P_TP=" + std::to_string(p_tp) + " D_TP=" +
                                  std::to_string(d_tp) + (mamba ? " hybrid" : "");
        if (expected_status(p_tp, d_tp, 1, true) != Status::Ok) {
          try {
            compute_tp_mapping({d_tp, 0, p_tp, 1, true, mamba});
            ADD_FAILURE() << where;
          } catch (const Error& e) {
            EXPECT_EQ(e.status(), Status::TpNotDivisible) << where;
          }
          continue;
        }
        std::vector<uint32_t> notified(p_tp, 0);
        for (uint32_t d = 0; d < d_tp; ++d) {
          const std::string at = where + " d=" + std::to_string(d);
          const TpMapping m = compute_tp_mapping({d_tp, d, p_tp, 1, true, mamba});
          check_sources(m, p_tp, d_tp, 1, mamba, at);
          EXPECT_EQ(m.rank_offset_factor, 0u) << at;
          const uint32_t src = d * p_tp / d_tp;
          EXPECT_EQ(m.attention_source_ranks, std::vector<uint32_t>{src}) << at;
          EXPECT_EQ(m.attention_source_ranks.front(), m.handshake_targets.front()) << at;
          EXPECT_EQ(attention_reads(m, 576, 576),
                    (std::vector<AttentionRead>{{src, 0, 0, 576}}))
              << at;
          check_descriptors_match_reads(m, at);
          for (uint32_t p : m.notify_ranks) ++notified[p];
        }
        for (uint32_t p = 0; p < p_tp; ++p) {
          EXPECT_EQ(notified[p], notifications_expected_per_request(p_tp, d_tp))
              << where << " P rank " << p;
        }
      }
    }
  }
}

TEST(TpProperties, OffsetFactorEqualsHeadDistance) {
  // For D_TP > P_TP (non-MLA) the offset factor, in local block_lens, is the distance between
  // D's first head and its source's first head divided by D's heads per rank.
  for (uint32_t p_tp : {1u, 2u, 4u, 8u, 16u})
    for (uint32_t d_tp : {1u, 2u, 4u, 8u, 16u})
      for (uint32_t k : {1u, 2u, 4u, 8u, 16u, 32u}) {
        if (d_tp <= p_tp) continue;
        for (uint32_t d = 0; d < d_tp; ++d) {
          const TpMapping m = compute_tp_mapping({d_tp, d, p_tp, k, false, false});
          const uint32_t dist = physical_head_range(d_tp, k, d).begin -
                                physical_head_range(p_tp, k, m.attention_source_ranks[0]).begin;
          EXPECT_EQ(m.rank_offset_factor, dist / m.local_physical_heads)
              << p_tp << " " << d_tp << " " << k << " " << d;
        }
      }
}
