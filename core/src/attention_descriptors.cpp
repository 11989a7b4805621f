#include "pdkv/core/attention_descriptors.hpp"

#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

namespace {

std::string s(uint64_t v) { return std::to_string(v); }

void require_bsr(uint32_t bsr) {
  if (bsr == 0) {
    fail(Status::InvalidArgument,
         "block_size_ratio 0 is invalid; it is local kernel block size / remote kernel block "
         "size and must be >= 1");
  }
}

// D_TP < P_TP, GQA-sharded heads from more than one P rank land in one D block.
bool head_sharded(const TpMapping& m) {
  return m.tp_ratio < 0 && !m.input.use_mla && m.num_attention_reads() > 1;
}

void reject_head_sharded_with_bsr(const TpMapping& m, uint32_t bsr) {
  if (bsr > 1 && head_sharded(m)) {
    fail(Status::Incompatible,
         "head-sharded attention reads with P_TP > D_TP and heterogeneous block sizes are not "
         "supported: D tp_size " + s(m.input.local_tp) + " reads " +
             s(m.num_attention_reads()) + " head slices from P tp_size " +
             s(m.input.remote_tp) + " with block_size_ratio " + s(bsr) +
             "; use the same kernel block size on P and D, or P tp_size <= D tp_size");
  }
}

}  // namespace

uint64_t expected_remote_attention_block_len(const TpMapping& m, uint64_t local_block_len,
                                             uint32_t bsr) {
  require_bsr(bsr);
  if (local_block_len == 0) {
    fail(Status::InvalidArgument, "local attention block_len must be > 0, got 0");
  }
  if (local_block_len % bsr != 0) {
    fail(Status::Incompatible, "local attention block_len " + s(local_block_len) +
                                   " is not divisible by block_size_ratio " + s(bsr));
  }
  const uint64_t unit = local_block_len / bsr;
  if (m.input.use_mla) return unit;
  // A block is physical_heads equal head slices; the per-head bytes must be exact.
  if (unit % m.local_physical_heads != 0) {
    fail(Status::Incompatible, "local attention block_len " + s(local_block_len) +
                                   " (per block_size_ratio " + s(bsr) + ") does not split into " +
                                   s(m.local_physical_heads) + " equal KV heads");
  }
  return mul_checked(unit / m.local_physical_heads, m.remote_physical_heads,
                     "remote attention block_len");
}

namespace {

void require_remote_block_len(const TpMapping& m, uint64_t local_len, uint64_t remote_len,
                              uint32_t bsr, const std::string& where) {
  const uint64_t want = expected_remote_attention_block_len(m, local_len, bsr);
  if (remote_len != want) {
    fail(Status::Incompatible,
         where + "remote attention block_len " + s(remote_len) + " does not match local block_len " +
             s(local_len) + ": with " + s(m.local_physical_heads) + " local and " +
             s(m.remote_physical_heads) + " remote KV heads per rank" +
             (m.input.use_mla ? " (MLA)" : "") + " and block_size_ratio " + s(bsr) +
             " the remote block must be " + s(want) +
             " bytes; check num_kv_heads, head sizes, dtype and block sizes on both sides");
  }
}

}  // namespace

void attention_reads_into(const TpMapping& m, uint64_t local_block_len, uint64_t remote_block_len,
                          std::vector<AttentionRead>& out) {
  out.clear();
  require_remote_block_len(m, local_block_len, remote_block_len, 1, "");
  const uint64_t L = local_block_len;
  if (m.input.use_mla) {
    out.push_back({m.attention_source_ranks.front(), 0, 0, L});
    return;
  }
  if (m.tp_ratio > 0) {
    const uint64_t off = mul_checked(m.rank_offset_factor, L, "attention read offset");
    if (add_checked(off, L, "attention read end") > remote_block_len) {
      fail(Status::OutOfBounds, "attention read [" + s(off) + ", " + s(off + L) +
                                    ") leaves the remote block of " + s(remote_block_len) +
                                    " bytes");
    }
    out.push_back({m.attention_source_ranks.front(), off, 0, L});
    return;
  }
  // D_TP < P_TP: each source contributes its whole block; the block_len relation above makes
  // n whole remote blocks fill exactly one local block.
  const uint64_t n = m.num_attention_reads();
  const uint64_t chunk = L / n;
  if (L % n != 0 || chunk != remote_block_len) {
    fail(Status::Internal, "attention reads: local block_len " + s(L) + " / " + s(n) +
                               " reads != remote block_len " + s(remote_block_len));
  }
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    out.push_back({m.attention_source_ranks[i], 0, i * chunk, chunk});
  }
}

std::vector<AttentionRead> attention_reads(const TpMapping& m, uint64_t local_block_len,
                                           uint64_t remote_block_len) {
  std::vector<AttentionRead> out;
  attention_reads_into(m, local_block_len, remote_block_len, out);
  return out;
}

std::vector<Descriptor> attention_local_descriptors(std::span<const Region> local_regions,
                                                    uint32_t bsr) {
  require_bsr(bsr);
  std::vector<Descriptor> out;
  for (size_t i = 0; i < local_regions.size(); ++i) {
    const Region& r = local_regions[i];
    if (r.block_len == 0 || r.block_len % bsr != 0) {
      fail(Status::Incompatible, "local attention region " + s(i) + " block_len " +
                                     s(r.block_len) + " is not a positive multiple of "
                                     "block_size_ratio " + s(bsr));
    }
    const uint64_t len = r.block_len / bsr;
    const uint64_t n = mul_checked(r.num_blocks, bsr, "local attention sub-block count");
    // The last descriptor's end must be addressable.
    add_checked(r.base, mul_checked(n, len, "local attention region bytes"),
                "local attention region end");
    for (uint64_t b = 0; b < n; ++b) out.push_back({r.base + b * len, len});
  }
  return out;
}

std::vector<Descriptor> attention_remote_descriptors(std::span<const Region> local_regions,
                                                     std::span<const Region> remote_regions,
                                                     const TpMapping& m, uint32_t bsr) {
  require_bsr(bsr);
  reject_head_sharded_with_bsr(m, bsr);
  if (local_regions.size() != remote_regions.size()) {
    fail(Status::Incompatible, "local engine has " + s(local_regions.size()) +
                                   " attention regions but remote has " +
                                   s(remote_regions.size()) +
                                   "; both sides must register the same layers");
  }
  const bool mla = m.input.use_mla;
  const uint64_t n = mla ? 1 : m.num_attention_reads();
  std::vector<Descriptor> out;
  for (size_t i = 0; i < remote_regions.size(); ++i) {
    const Region& lr = local_regions[i];
    const Region& rr = remote_regions[i];
    require_remote_block_len(m, lr.block_len, rr.block_len, bsr,
                             "region " + s(i) + ": ");
    const uint64_t unit = lr.block_len / bsr;  // exact: checked above
    const uint64_t off = mla ? 0 : mul_checked(m.rank_offset_factor, unit, "attention offset");
    const uint64_t len = unit / n;
    if (add_checked(off, len, "attention read end") > rr.block_len) {
      fail(Status::OutOfBounds, "region " + s(i) + ": attention read [" + s(off) + ", " +
                                    s(off + len) + ") leaves the remote block of " +
                                    s(rr.block_len) + " bytes");
    }
    if (rr.num_blocks > 0) {
      const uint64_t last = mul_checked(rr.num_blocks - 1, rr.block_len, "remote region bytes");
      add_checked(add_checked(rr.base, off, "remote attention address"),
                  add_checked(last, len, "remote attention address"), "remote attention address");
    }
    for (uint64_t b = 0; b < rr.num_blocks; ++b) {
      out.push_back({rr.base + off + b * rr.block_len, len});
    }
  }
  return out;
}

bool needs_split_handles(const TpMapping& m) {
  return m.tp_ratio < 0 && (!m.input.use_mla || m.all_source_ranks.size() > 1);
}

std::vector<SplitHandle> attention_split_handles(std::span<const Descriptor> local_attention,
                                                 const TpMapping& m, uint32_t bsr) {
  require_bsr(bsr);
  if (m.tp_ratio > 0) {
    fail(Status::InvalidArgument,
         "split handles exist only when P tp_size > D tp_size; local tp_size " +
             s(m.input.local_tp) + " >= remote tp_size " + s(m.input.remote_tp));
  }
  reject_head_sharded_with_bsr(m, bsr);
  const bool mla = m.input.use_mla;
  const uint64_t n = m.num_attention_reads();
  std::vector<SplitHandle> out;
  out.reserve(m.all_source_ranks.size());
  for (uint32_t p : m.all_source_ranks) {
    SplitHandle h{p, {}};
    h.descriptors.reserve(local_attention.size());
    const uint64_t slot = m.attention_slot_of(p);
    for (size_t j = 0; j < local_attention.size(); ++j) {
      const Descriptor& d = local_attention[j];
      if (mla) {
        h.descriptors.push_back(d);
        continue;
      }
      if (d.len % n != 0) {
        fail(Status::Incompatible, "local attention descriptor " + s(j) + " of " + s(d.len) +
                                       " bytes does not split into " + s(n) + " head slices");
      }
      const uint64_t chunk = d.len / n;
      // slot*chunk + chunk <= len: the slice stays inside descriptor j.
      h.descriptors.push_back(
          {add_checked(d.addr, slot * chunk, "split handle address"), chunk});
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace pdkv::core
