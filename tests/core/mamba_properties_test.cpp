// Exhaustive properties of mamba_reads over P_TP, D_TP in {1,2,4,8,16} and several real models
// (sharded groups, n_groups = 1, GDN, Mamba1). Every byte of the D page is labelled with the
// logical channel it must hold, computed here from the sharding rule alone (not from the read
// code), and every read must copy bytes with the same label from the P page.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/mamba_state.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

std::vector<ModelDesc> models() {
  return {nemotron3_nano(),
          nemotron_h_8b(),
          falcon_h1_05b(),
          mamba2_model("falcon-h1-1.5b", 48, 64, 256, 1, 4),
          mamba2_model("groups-2", 32, 64, 64, 2, 4),  // TP 4+ refused (vLLM: n_groups must be 1)
          mamba2_model("one-group-64h", 64, 64, 128, 1, 4),  // replicated B/C up to TP16
          qwen3_next(),
          qwen35_27b(),
          jamba()};
}

const uint32_t kTps[] = {1, 2, 4, 8, 16};

// What byte `off` of rank `rank`'s page must hold: (part, logical channel/row, byte within it).
// Rule: a sharded projection gives rank r logical channels [r*dim_local, ...); a replicated one
// (Mamba2 B/C with n_groups < TP) gives it the group r*G/TP; the temporal state gives it rows
// [r*rows_local, ...).
using Label = std::tuple<std::string, uint64_t, uint64_t>;

Label label(const MambaState& s, uint32_t rank, uint64_t off) {
  const uint64_t chan = s.conv_rows * s.conv_dtype_bytes;
  for (const ConvProjection& p : s.projections) {
    if (off < p.offset || off >= p.offset + p.bytes) continue;
    const uint64_t i = (off - p.offset) / chan;
    uint64_t first = uint64_t{rank} * p.dim_local;
    if (p.replicated) {
      const uint64_t groups = p.dim_total / p.dim_local;  // one group per rank
      first = (uint64_t{rank} * groups / s.tp_size) * p.dim_local;
    }
    return {p.name, first + i, (off - p.offset) % chan};
  }
  EXPECT_GE(off, s.conv_bytes);
  EXPECT_LT(off, s.page_bytes());
  const uint64_t rows = s.temporal_shape[0];
  const uint64_t row_bytes = s.ssm_bytes / rows;
  const uint64_t rel = off - s.conv_bytes;
  return {"ssm", uint64_t{rank} * rows + rel / row_bytes, rel % row_bytes};
}

uint64_t unit_of(const MambaState& s, const std::string& part) {
  if (part == "ssm") return s.ssm_bytes / s.temporal_shape[0];
  return s.conv_rows * s.conv_dtype_bytes;
}
uint64_t part_offset(const MambaState& s, const std::string& part) {
  for (const ConvProjection& p : s.projections)
    if (p.name == part) return p.offset;
  return s.conv_bytes;
}

bool any_replicated(const MambaState& s) {
  return std::any_of(s.projections.begin(), s.projections.end(),
                     [](const ConvProjection& p) { return p.replicated; });
}

// Checks one read byte-by-byte at every point where a label can change (unit boundaries on
// either side) and at its last byte; labels are linear in between.
void check_labels(const MambaState& p, const MambaState& d, uint32_t d_rank, const MambaRead& r,
                  const std::string& ctx) {
  std::set<uint64_t> ks = {0, r.length - 1};
  const uint64_t pu = unit_of(p, r.part), du = unit_of(d, r.part);
  const uint64_t prel = r.remote_offset - part_offset(p, r.part);
  const uint64_t drel = r.local_offset - part_offset(d, r.part);
  for (uint64_t k = (pu - prel % pu) % pu; k < r.length; k += pu) ks.insert(k);
  for (uint64_t k = (du - drel % du) % du; k < r.length; k += du) ks.insert(k);
  for (uint64_t k : ks) {
    const Label want = label(d, d_rank, r.local_offset + k);
    const Label got = label(p, r.p_rank, r.remote_offset + k);
    if (want != got) {
      ADD_FAILURE() << ctx << " read " << r.part << " from P" << r.p_rank << " byte " << k
                    << ": D needs " << std::get<0>(want) << "[" << std::get<1>(want) << "]+"
                    << std::get<2>(want) << " but P holds " << std::get<0>(got) << "["
                    << std::get<1>(got) << "]+" << std::get<2>(got);
      return;
    }
  }
  EXPECT_EQ(std::get<0>(label(d, d_rank, r.local_offset)), r.part) << ctx;
}

bool derive(const ModelDesc& m, uint32_t tp, MambaState* out) {
  EngineConfig e;
  e.tp_size = tp;
  try {
    *out = derive_mamba_state(m, e);
    return true;
  } catch (const Error& err) {
    EXPECT_EQ(err.status(), Status::HeadsNotDivisible) << m.name << " tp " << tp << err.what();
    return false;
  }
}

}  // namespace

TEST(MambaProperties, EveryByteOnceFromTheOwnerInsideThePage) {
  uint64_t pairs = 0, replicated_pairs = 0;
  for (const ModelDesc& m : models()) {
    for (uint32_t ptp : kTps) {
      MambaState p;
      if (!derive(m, ptp, &p)) continue;
      for (uint32_t dtp : kTps) {
        MambaState d;
        if (!derive(m, dtp, &d)) continue;
        ++pairs;
        if (any_replicated(p) || any_replicated(d)) ++replicated_pairs;
        for (uint32_t rank = 0; rank < dtp; ++rank) {
          const std::string ctx = m.name + " P" + std::to_string(ptp) + "->D" +
                                  std::to_string(dtp) + " rank " + std::to_string(rank);
          const std::vector<MambaRead> reads = mamba_reads(p, d, rank);
          // 1. The D page is tiled exactly: sorted by local offset, no gap, no overlap.
          std::vector<MambaRead> sorted = reads;
          std::sort(sorted.begin(), sorted.end(),
                    [](const MambaRead& a, const MambaRead& b) { return a.local_offset < b.local_offset; });
          uint64_t cursor = 0;
          for (const MambaRead& r : sorted) {
            ASSERT_GT(r.length, 0u) << ctx;
            ASSERT_EQ(r.local_offset, cursor) << ctx << " part " << r.part;
            cursor += r.length;
          }
          ASSERT_EQ(cursor, d.page_bytes()) << ctx;
          // 2. Reads stay inside a real P rank's page.  3. Same logical bytes on both sides.
          std::set<uint32_t> x_sources, bc_sources;
          for (const MambaRead& r : reads) {
            ASSERT_LT(r.p_rank, ptp) << ctx;
            ASSERT_LE(r.remote_offset + r.length, p.page_bytes()) << ctx << " part " << r.part;
            check_labels(p, d, rank, r, ctx);
            if (r.part == "x") x_sources.insert(r.p_rank);
            if (r.part == "B" || r.part == "C") bc_sources.insert(r.p_rank);
          }
          // 4. Replicated groups never add a P rank beyond those D reads x from.
          for (uint32_t s : bc_sources) EXPECT_TRUE(x_sources.count(s)) << ctx << " P" << s;
          // 5. Where vLLM is right (no replicated groups, or homogeneous TP) pdkv agrees with it
          //    read for read; where groups are replicated and TP differs, vLLM is wrong.
          const bool vllm_right = (!any_replicated(p) && !any_replicated(d)) || ptp == dtp;
          if (vllm_right) {
            EXPECT_EQ(reads, vllm_mamba_reads(p, d, rank)) << ctx;
          } else {
            EXPECT_NE(reads, vllm_mamba_reads(p, d, rank)) << ctx;
          }
        }
      }
    }
  }
  // The sweep must actually cover both regimes (guards against a models() edit that skips them).
  EXPECT_GE(pairs, 150u);
  EXPECT_GE(replicated_pairs, 40u);
}

// The label check must be able to fail: swapping B and C in a correct plan is caught.
TEST(MambaProperties, LabelCheckCatchesSwappedProjections) {
  MambaState p, d;
  ASSERT_TRUE(derive(falcon_h1_05b(), 1, &p));
  ASSERT_TRUE(derive(falcon_h1_05b(), 2, &d));
  std::vector<MambaRead> reads = mamba_reads(p, d, 1);
  ASSERT_EQ(reads[1].part, "B");
  std::swap(reads[1].remote_offset, reads[2].remote_offset);
  EXPECT_NONFATAL_FAILURE(check_labels(p, d, 1, reads[1], "swapped"), "but P holds C[0]+0");
  // And vLLM's own plan for that pair fails it.
  EXPECT_NONFATAL_FAILURE(check_labels(p, d, 1, vllm_mamba_reads(p, d, 1)[1], "vllm"),
                          "D needs B[0]+0 but P holds C[0]+0");
}
