// Mamba conv/SSM split: vLLM's formulas (for comparison) and pdkv's ownership-based reads.
#include "pdkv/core/mamba_split.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_kind.hpp"
#include "pdkv/core/tp_topology.hpp"

namespace pdkv::core {

namespace {

// One part of a page (a conv projection or the temporal state) seen as U logical units of
// unit_bytes each. A unit is the smallest thing sharding never splits: a conv channel, a Mamba2
// group (B/C, because groups may be replicated) or a temporal row (head / Mamba1 channel).
struct PartLayout {
  std::string name;
  uint64_t page_offset = 0;  // where this rank's slice of the part starts in its page
  uint64_t units_total = 0;  // U, over the whole model
  uint64_t unit_bytes = 0;
  bool replicated = false;   // U < tp: each rank keeps a copy of one unit
};

std::vector<PartLayout> part_layouts(const MambaState& s) {
  std::vector<PartLayout> parts;
  const MambaKind& kind = mamba_kind(s.type);
  for (size_t i = 0; i < s.projections.size(); ++i) {
    const ConvProjection& p = s.projections[i];
    PartLayout l;
    l.name = p.name;
    l.page_offset = p.offset;
    const uint64_t unit_channels = kind.split_unit_channels(s, i);
    l.units_total = p.dim_total / unit_channels;
    l.unit_bytes = p.bytes / (p.dim_local / unit_channels);
    l.replicated = p.replicated;
    parts.push_back(l);
  }
  PartLayout ssm;
  ssm.name = "ssm";
  ssm.page_offset = s.conv_bytes;
  ssm.units_total = mul_checked(s.temporal_shape.at(0), s.tp_size, "ssm temporal rows");
  ssm.unit_bytes = s.ssm_bytes / s.temporal_shape.at(0);
  parts.push_back(ssm);
  return parts;
}

// First unit rank r of tp t holds, and how many. Covers sharding (U >= t) and replication
// (U < t: rank r keeps unit r*U/t) with one formula, like vLLM's _physical_head_range.
uint64_t first_unit(uint64_t rank, uint64_t tp, uint64_t units) { return rank * units / tp; }
uint64_t units_per_rank(uint64_t tp, uint64_t units) { return std::max<uint64_t>(1, units / tp); }

void require_same(uint64_t p, uint64_t d, const std::string& what) {
  if (p != d) {
    fail(Status::Incompatible, "prefill and decode Mamba states differ: " + what + " is " +
                                   std::to_string(p) + " on prefill but " + std::to_string(d) +
                                   " on decode (both engines must serve the same model with the "
                                   "same state dtypes and speculative tokens)");
  }
}

void require_compatible(const MambaState& p, const MambaState& d) {
  if (p.type != d.type) {
    fail(Status::Incompatible, std::string("prefill mamba type '") + mamba_type_name(p.type) +
                                   "' differs from decode mamba type '" + mamba_type_name(d.type) +
                                   "'");
  }
  require_same(p.conv_rows, d.conv_rows, "conv_rows");
  require_same(p.conv_dtype_bytes, d.conv_dtype_bytes, "conv dtype bytes");
  require_same(p.ssm_dtype_bytes, d.ssm_dtype_bytes, "ssm dtype bytes");
  require_same(p.projections.size(), d.projections.size(), "number of conv projections");
  for (size_t k = 0; k < p.projections.size(); ++k) {
    const ConvProjection& pp = p.projections[k];
    require_same(pp.dim_total, d.projections[k].dim_total, "projection " + pp.name + " channels");
  }
  require_same(p.temporal_shape.size(), d.temporal_shape.size(), "temporal rank");
  require_same(p.temporal_shape.at(0) * p.tp_size, d.temporal_shape.at(0) * d.tp_size,
               "temporal rows");
  for (size_t i = 1; i < p.temporal_shape.size(); ++i) {
    require_same(p.temporal_shape[i], d.temporal_shape[i], "temporal dim " + std::to_string(i));
  }
}

void require_rank(uint32_t rank, uint32_t tp) {
  if (rank >= tp) {
    fail(Status::InvalidArgument, "decode rank " + std::to_string(rank) +
                                      " is out of range for decode tp_size " + std::to_string(tp));
  }
}

// Appends a read, merging it into the previous one when both sides continue contiguously.
void push_read(std::vector<MambaRead>& out, MambaRead r) {
  if (!out.empty()) {
    MambaRead& last = out.back();
    if (last.p_rank == r.p_rank && last.part == r.part &&
        last.remote_offset + last.length == r.remote_offset &&
        last.local_offset + last.length == r.local_offset) {
      last.length += r.length;
      return;
    }
  }
  out.push_back(std::move(r));
}

// The checks shared by the vLLM views (remote_conv_offsets, ssm_read_range); see the header.
void require_view_args(const MambaState& local, uint32_t local_rank, int32_t tp_ratio,
                       const char* fn) {
  const std::string where = std::string(fn) + ": ";
  if (tp_ratio == 0) {
    fail(Status::InvalidArgument, where + "tp_ratio 0 is invalid (homogeneous TP is +1)");
  }
  if (local.tp_size == 0 || local_rank >= local.tp_size) {
    fail(Status::InvalidArgument, where + "local_rank " + std::to_string(local_rank) +
                                      " is out of range for the local state's tp_size " +
                                      std::to_string(local.tp_size));
  }
  // tp_ratio >= 1 means local_tp = tp_ratio * remote_tp: the ratio must divide the local TP.
  // tp_ratio < 0 means remote_tp = |tp_ratio| * local_tp, consistent with any local TP.
  if (tp_ratio > 0 && local.tp_size % static_cast<uint32_t>(tp_ratio) != 0) {
    fail(Status::InvalidArgument,
         where + "tp_ratio " + std::to_string(tp_ratio) + " does not divide the local state's "
                 "tp_size " + std::to_string(local.tp_size) +
                 " (a positive ratio is local_tp / remote_tp; use tp_ratio(local_tp, remote_tp))");
  }
}

}  // namespace

std::vector<MambaByteRange> local_conv_offsets(const MambaState& local) {
  std::vector<MambaByteRange> out;
  uint64_t off = 0;
  for (const ConvProjection& p : local.projections) {
    out.push_back({off, p.bytes});
    off = add_checked(off, p.bytes, "conv offset");
  }
  return out;
}

std::vector<MambaByteRange> remote_conv_offsets(const MambaState& local, uint32_t local_rank,
                                                int32_t tp_ratio) {
  require_view_args(local, local_rank, tp_ratio, "remote_conv_offsets");
  std::vector<MambaByteRange> out;
  uint64_t base = 0;
  if (tp_ratio >= 1) {
    const uint64_t r = static_cast<uint64_t>(tp_ratio);
    const uint64_t lo = local_rank % r;
    for (const ConvProjection& p : local.projections) {
      out.push_back({add_checked(base, mul_checked(lo, p.bytes, "conv offset"), "conv offset"),
                     p.bytes});
      base = add_checked(base, mul_checked(p.bytes, r, "remote projection"), "conv offset");
    }
    return out;
  }
  const uint64_t a = static_cast<uint64_t>(-static_cast<int64_t>(tp_ratio));
  for (const ConvProjection& p : local.projections) {
    if (p.bytes % a != 0) {
      fail(Status::InvalidArgument, "conv projection " + p.name + " of " +
                                        std::to_string(p.bytes) + " bytes does not split into " +
                                        std::to_string(a) + " remote shards");
    }
    out.push_back({base, p.bytes / a});
    base += p.bytes / a;
  }
  return out;
}

MambaByteRange ssm_read_range(const MambaState& local, uint64_t remote_conv_bytes,
                              uint64_t remote_ssm_bytes, uint32_t local_rank, int32_t tp_ratio) {
  require_view_args(local, local_rank, tp_ratio, "ssm_read_range");
  if (tp_ratio < 0) return {remote_conv_bytes, remote_ssm_bytes};
  const uint64_t lo = local_rank % static_cast<uint64_t>(tp_ratio);
  return {add_checked(remote_conv_bytes, mul_checked(lo, local.ssm_bytes, "ssm offset"),
                      "ssm offset"),
          local.ssm_bytes};
}

uint64_t compute_physical_blocks_per_logical(uint64_t conv_bytes, uint64_t ssm_bytes,
                                             uint64_t block_len) {
  if (block_len == 0) fail(Status::InvalidArgument, "block_len 0 must be > 0");
  return ceil_div(add_checked(conv_bytes, ssm_bytes, "mamba page bytes"), block_len);
}

std::vector<MambaRead> mamba_reads(const MambaState& p_state, const MambaState& d_state,
                                   uint32_t d_rank) {
  require_compatible(p_state, d_state);
  require_rank(d_rank, d_state.tp_size);
  const uint64_t ptp = p_state.tp_size;
  const uint64_t dtp = d_state.tp_size;
  const std::vector<PartLayout> p_parts = part_layouts(p_state);
  const std::vector<PartLayout> d_parts = part_layouts(d_state);

  // D's x channels, to pick among P ranks holding a replicated group (see header).
  const uint64_t x_total = d_state.projections.front().dim_total;
  const uint64_t dx_begin = first_unit(d_rank, dtp, x_total);
  const uint64_t dx_end = dx_begin + units_per_rank(dtp, x_total);

  std::vector<MambaRead> out;
  for (size_t k = 0; k < d_parts.size(); ++k) {
    const PartLayout& dp = d_parts[k];
    const PartLayout& pp = p_parts[k];
    const uint64_t U = dp.units_total;
    const uint64_t begin = first_unit(d_rank, dtp, U);
    const uint64_t end = begin + units_per_rank(dtp, U);
    for (uint64_t u = begin; u < end;) {
      uint64_t p_rank = 0;
      uint64_t p_index = 0;  // position of unit u inside P rank's slice
      uint64_t run_end = 0;
      if (U >= ptp) {
        const uint64_t per = U / ptp;
        p_rank = u / per;
        p_index = u - p_rank * per;
        run_end = std::min(end, (p_rank + 1) * per);
      } else {
        // Group u is replicated on P ranks [u*ptp/U, (u+1)*ptp/U): take the one holding D's
        // first x channel of the group, i.e. a rank D reads x from anyway.
        const uint64_t g_begin = u * x_total / U;
        const uint64_t g_end = (u + 1) * x_total / U;
        const uint64_t c = std::max(g_begin, dx_begin);
        p_rank = (c < std::min(g_end, dx_end)) ? c / (x_total / ptp) : u * ptp / U;
        p_index = 0;
        run_end = u + 1;
      }
      const uint64_t n = run_end - u;
      push_read(out, MambaRead{static_cast<uint32_t>(p_rank), dp.name,
                               pp.page_offset + p_index * pp.unit_bytes,
                               dp.page_offset + (u - begin) * dp.unit_bytes, n * dp.unit_bytes});
      u = run_end;
    }
  }
  return out;
}

std::vector<MambaRead> vllm_mamba_reads(const MambaState& p_state, const MambaState& d_state,
                                        uint32_t d_rank) {
  require_rank(d_rank, d_state.tp_size);
  const int32_t r = tp_ratio(d_state.tp_size, p_state.tp_size);
  const std::vector<MambaByteRange> local = local_conv_offsets(d_state);
  const std::vector<MambaByteRange> remote = remote_conv_offsets(d_state, d_rank, r);
  std::vector<MambaRead> out;
  if (r >= 1) {
    const uint32_t p_rank = d_rank / static_cast<uint32_t>(r);
    for (size_t k = 0; k < local.size(); ++k) {
      out.push_back({p_rank, d_state.projections[k].name, remote[k].offset, local[k].offset,
                     local[k].size});
    }
    const MambaByteRange s =
        ssm_read_range(d_state, p_state.conv_bytes, p_state.ssm_bytes, d_rank, r);
    out.push_back({p_rank, "ssm", s.offset, d_state.conv_bytes, s.size});
    return out;
  }
  // tp_ratio < 0: the local split handle puts P rank i's chunk at i*chunk of each local part.
  const uint32_t a = static_cast<uint32_t>(-r);
  for (size_t k = 0; k < local.size(); ++k) {
    const uint64_t chunk = local[k].size / a;
    for (uint32_t i = 0; i < a; ++i) {
      out.push_back({d_rank * a + i, d_state.projections[k].name, remote[k].offset,
                     local[k].offset + i * chunk, remote[k].size});
    }
  }
  const MambaByteRange s = ssm_read_range(d_state, p_state.conv_bytes, p_state.ssm_bytes, d_rank, r);
  for (uint32_t i = 0; i < a; ++i) {
    out.push_back({d_rank * a + i, "ssm", s.offset, d_state.conv_bytes + i * (d_state.ssm_bytes / a),
                   s.size});
  }
  return out;
}

std::vector<uint32_t> mamba_source_ranks(const std::vector<MambaRead>& reads) {
  std::vector<uint32_t> ranks;
  for (const MambaRead& r : reads) ranks.push_back(r.p_rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace pdkv::core
