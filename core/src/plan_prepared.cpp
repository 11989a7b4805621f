// Per-context precomputation for transfer-plan compilation (plan_prepared.hpp).
#include "plan_prepared.hpp"

#include <algorithm>

#include "pdkv/core/error.hpp"
#include "plan_internal.hpp"

namespace pdkv::core::plan_detail {

namespace {

// block_len * num_blocks of every region, or false on overflow.
bool sizes_of(const EngineMetadata& m, std::vector<uint64_t>& out) {
  out.resize(m.regions.size());
  for (size_t i = 0; i < m.regions.size(); ++i) {
    const Region& r = m.regions[i].region;
    if (__builtin_mul_overflow(r.block_len, r.num_blocks, &out[i])) return false;
  }
  return true;
}

// mamba_page_stride without the error: 0 when the page does not fit or the product overflows.
uint64_t stride_or_zero(const EngineMetadata& m, size_t region, uint64_t page) {
  uint64_t stride = 0;
  if (__builtin_mul_overflow(m.regions[region].region.block_len, m.physical_blocks_per_logical, &stride)) return 0;
  return page <= stride ? stride : 0;
}

}  // namespace

bool verify_mamba_template(const MambaTemplate& t, std::string* why) {
  auto no = [&](std::string text) {
    if (why != nullptr) *why = std::move(text);
    return false;
  };
  struct R {
    uint64_t b, e;
  };
  std::vector<R> local;
  for (const auto& rank : t.ranks) {
    uint64_t extent = 0;
    for (const TemplateRead& r : rank.reads) {
      uint64_t le = 0, re = 0;
      if (r.length == 0 || __builtin_add_overflow(r.local_offset, r.length, &le) ||
          __builtin_add_overflow(r.remote_offset, r.length, &re)) {
        return no("P rank " + s(rank.p_rank) + ": empty or overflowing read at D offset " + s(r.local_offset));
      }
      if (re > t.remote_page) {
        return no("P rank " + s(rank.p_rank) + ": read at P offset " + s(r.remote_offset) + " length " + s(r.length) +
                  " leaves the P page of " + s(t.remote_page) + " bytes");
      }
      extent = std::max(extent, re);
      local.push_back({r.local_offset, le});
    }
    if (extent != rank.remote_extent) {
      return no("P rank " + s(rank.p_rank) + ": remote extent " + s(rank.remote_extent) + " != " + s(extent));
    }
  }
  std::sort(local.begin(), local.end(), [](const R& a, const R& b) { return a.b < b.b; });
  uint64_t at = 0;
  for (const R& r : local) {
    if (r.b != at) {
      return no(r.b > at ? "D page bytes [" + s(at) + ", " + s(r.b) + ") are not read"
                         : "D page bytes [" + s(r.b) + ", " + s(std::min(at, r.e)) + ") are read twice");
    }
    at = r.e;
  }
  if (at != t.local_page) return no("D page bytes [" + s(at) + ", " + s(t.local_page) + ") are not read");
  return true;
}

void build_mamba_template(const PlanContext& ctx, const std::vector<MambaRead>& reads, MambaTemplate& out) {
  out = MambaTemplate{};
  out.local_page = ctx.local_mamba->page_bytes();
  out.remote_page = ctx.remote_mamba->page_bytes();
  out.pieces = reads.size();
  for (const MambaRead& r : reads) {
    auto it = std::find_if(out.ranks.begin(), out.ranks.end(),
                           [&](const MambaTemplate::Rank& k) { return k.p_rank == r.p_rank; });
    if (it == out.ranks.end()) {
      MambaTemplate::Rank k;
      k.p_rank = r.p_rank;
      bool found = false;
      for (size_t i = 0; i < ctx.remote.size(); ++i) {
        if (ctx.remote[i].tp_rank == r.p_rank) {
          k.pos = static_cast<uint32_t>(i);
          found = true;
          break;
        }
      }
      if (!found) return;  // remote_rank reports it on the per-read path
      out.ranks.push_back(std::move(k));
      it = out.ranks.end() - 1;
    }
    out.bytes += r.length;
    it->bytes += r.length;
    // Coalesced exactly as PlanBuilder::add merges a read into the rank's previous one.
    if (!it->reads.empty()) {
      TemplateRead& last = it->reads.back();
      if (last.local_offset + last.length == r.local_offset && last.remote_offset + last.length == r.remote_offset) {
        last.length += r.length;
        it->remote_extent = std::max(it->remote_extent, last.remote_offset + last.length);
        continue;
      }
    }
    it->reads.push_back({r.local_offset, r.remote_offset, r.length});
    it->remote_extent = std::max(it->remote_extent, r.remote_offset + r.length);
  }
  const EngineMetadata& d = ctx.local;
  out.local_stride.resize(d.regions.size());
  for (size_t i = 0; i < d.regions.size(); ++i) {
    out.local_stride[i] = stride_or_zero(d, i, out.local_page);
    out.max_local_stride = std::max(out.max_local_stride, out.local_stride[i]);
  }
  out.remote_stride.resize(out.ranks.size());
  for (size_t j = 0; j < out.ranks.size(); ++j) {
    const EngineMetadata& p = ctx.remote[out.ranks[j].pos];
    out.remote_stride[j].resize(p.regions.size());
    for (size_t i = 0; i < p.regions.size(); ++i) {
      out.remote_stride[j][i] = stride_or_zero(p, i, out.remote_page);
      out.max_remote_stride = std::max(out.max_remote_stride, out.remote_stride[j][i]);
    }
    out.max_remote_extent = std::max(out.max_remote_extent, out.ranks[j].remote_extent);
  }
  out.valid = !out.ranks.empty() && verify_mamba_template(out, nullptr);
}

std::shared_ptr<const Prepared> prepare_context(const PlanContext& ctx) {
  auto p = std::make_shared<Prepared>();
  if (!sizes_of(ctx.local, p->d_size)) return nullptr;
  p->p_size.resize(ctx.remote.size());
  for (size_t i = 0; i < ctx.remote.size(); ++i) {
    if (!sizes_of(ctx.remote[i], p->p_size[i])) return nullptr;
  }
  if (ctx.local_mamba && ctx.remote_mamba) {
    try {
      build_mamba_template(ctx, mamba_reads(*ctx.remote_mamba, *ctx.local_mamba, ctx.local.tp_rank), p->mamba);
    } catch (const Error&) {
      p->mamba = MambaTemplate{};  // the per-read path raises the same error per request
    }
  }
  return p;
}

}  // namespace pdkv::core::plan_detail
