// Transfer-plan compilation (transfer_plan.hpp): trims every group, turns token runs and Mamba
// state pairs into byte reads per P rank, coalesces them and validates the result.
#include "pdkv/core/transfer_plan.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/attention_descriptors.hpp"
#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/handshake.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "plan_internal.hpp"

namespace pdkv::core {

namespace plan_detail {

const EngineMetadata& remote_rank(const PlanContext& ctx, uint32_t p) {
  for (const auto& m : ctx.remote) {
    if (m.tp_rank == p) return m;
  }
  fail(Status::NotFound, "the plan reads from P rank " + s(p) + " but the context holds no " +
                             "metadata for it (" + s(ctx.remote.size()) +
                             " P ranks given); handshake with every P rank D reads from");
}

uint64_t region_size(const EngineMetadata& m, uint32_t region) {
  const Region& r = m.regions[region].region;
  return mul_checked(r.block_len, r.num_blocks, "region size");
}

uint64_t region_bytes_per_token(const EngineMetadata& m, uint32_t region, const char* side) {
  const Region& r = m.regions[region].region;
  if (m.kernel_block_size == 0 || r.block_len % m.kernel_block_size != 0) {
    fail(Status::Incompatible, std::string(side) + " region " + s(region) + " block_len " +
                                   s(r.block_len) + " is not a whole number of bytes per token " +
                                   "for kernel block size " + s(m.kernel_block_size));
  }
  return r.block_len / m.kernel_block_size;
}

uint64_t mamba_page_stride(const EngineMetadata& m, uint32_t region, uint64_t page_bytes,
                           const char* side) {
  const Region& r = m.regions[region].region;
  const uint64_t stride = mul_checked(r.block_len, m.physical_blocks_per_logical, "Mamba page");
  if (page_bytes > stride) {
    fail(Status::OutOfBounds, std::string(side) + " region " + s(region) + ": Mamba state of " +
                                  s(page_bytes) + " bytes does not fit the logical page of " +
                                  s(stride) + " bytes (block_len " + s(r.block_len) + " * ppl " +
                                  s(m.physical_blocks_per_logical) + ")");
  }
  return stride;
}

namespace {

// A Mamba group needs both states; whether they agree with the metadata is part of
// validate_plan_context (peer_problems).
void require_mamba_state(const std::optional<MambaState>& st, const EngineMetadata& m,
                         const char* side) {
  if (!st) {
    fail(Status::InvalidArgument, std::string("a Mamba group needs the ") + side +
                                      " MambaState (derive_mamba_state for tp_size " +
                                      s(m.tp_size) + ") in the plan context");
  }
}

// Every field of `st` that the metadata also carries must agree with it: the Mamba type, TP
// size, conv / SSM bytes and each conv projection's bytes. Appends one problem per field.
void mamba_state_problems(const MambaState& st, const EngineMetadata& m, const std::string& who,
                          std::vector<std::string>& out) {
  auto differ = [&](const char* field, const std::string& state, const std::string& meta) {
    out.push_back(who + ": MambaState " + field + " " + state + " != metadata " + field + " " +
                  meta + "; derive the state and the metadata from the same model and engine "
                  "config");
  };
  if (st.type != m.mamba_type) differ("mamba_type", mamba_type_name(st.type), mamba_type_name(m.mamba_type));
  if (st.tp_size != m.tp_size) differ("tp_size", s(st.tp_size), s(m.tp_size));
  if (st.conv_bytes != m.conv_bytes) differ("conv_bytes", s(st.conv_bytes), s(m.conv_bytes));
  if (st.ssm_bytes != m.ssm_bytes) differ("ssm_bytes", s(st.ssm_bytes), s(m.ssm_bytes));
  if (st.projections.size() != m.conv_projection_bytes.size()) {
    differ("conv projection count", s(st.projections.size()), s(m.conv_projection_bytes.size()));
  } else {
    for (size_t k = 0; k < st.projections.size(); ++k) {
      if (st.projections[k].bytes != m.conv_projection_bytes[k]) {
        differ(("conv_projection_bytes[" + s(k) + "] (" + st.projections[k].name + ")").c_str(),
               s(st.projections[k].bytes), s(m.conv_projection_bytes[k]));
      }
    }
  }
}

// What the peer advertised must pass the handshake D would run with every P rank, the P ranks
// must agree with each other, and the Mamba states must describe the metadata. Cheap when
// everything agrees (no strings are built), so compile runs it per call.
void check_peer_agreement(const PlanContext& ctx) {
  std::vector<std::string> problems;
  for (const EngineMetadata& p : ctx.remote) {
    for (const Incompatibility& it : validate_pair(ctx.local, p)) {
      problems.push_back("D vs P rank " + s(p.tp_rank) + ": " + to_string(it));
    }
  }
  for (const Incompatibility& it : validate_engine_ranks(ctx.remote)) {
    problems.push_back("P ranks of engine '" + ctx.remote.front().engine_id + "': " +
                       to_string(it));
  }
  if (ctx.local_mamba) mamba_state_problems(*ctx.local_mamba, ctx.local, "D", problems);
  if (ctx.remote_mamba) {
    for (const EngineMetadata& p : ctx.remote) {
      mamba_state_problems(*ctx.remote_mamba, p, "P rank " + s(p.tp_rank), problems);
    }
  }
  if (problems.empty()) return;
  std::string msg = "plan context refused (the peer failed the handshake checks): " +
                    s(problems.size()) + " problem(s): ";
  for (size_t i = 0; i < problems.size(); ++i) {
    if (i) msg += "; ";
    msg += problems[i];
  }
  fail(Status::Incompatible, msg);
}

void check_context(const PlanContext& ctx) {
  const EngineMetadata& d = ctx.local;
  const TpMappingInput& in = ctx.mapping.input;
  if (in.local_tp != d.tp_size || in.local_rank != d.tp_rank) {
    fail(Status::InvalidArgument, "TP mapping is for D rank " + s(in.local_rank) + " of " +
                                      s(in.local_tp) + " but the D metadata is rank " +
                                      s(d.tp_rank) + " of " + s(d.tp_size));
  }
  if (ctx.remote.empty()) {
    fail(Status::InvalidArgument, "plan context holds no P rank metadata");
  }
  const EngineMetadata& p0 = ctx.remote.front();
  for (size_t i = 0; i < ctx.remote.size(); ++i) {
    const EngineMetadata& p = ctx.remote[i];
    if (p.tp_size != in.remote_tp) {
      fail(Status::InvalidArgument, "P metadata " + s(i) + " has tp_size " + s(p.tp_size) +
                                        " but the TP mapping was computed for P tp_size " +
                                        s(in.remote_tp));
    }
    if (p.engine_id != p0.engine_id) {
      fail(Status::InvalidArgument, "P metadata mixes engines '" + p0.engine_id + "' and '" +
                                        p.engine_id + "'; a plan reads from one P engine");
    }
    if (p.regions.size() != d.regions.size()) {
      fail(Status::Incompatible, "P rank " + s(p.tp_rank) + " registers " +
                                     s(p.regions.size()) + " regions but D registers " +
                                     s(d.regions.size()) + "; both must run the same model");
    }
    if (p.kv_layout != p0.kv_layout) {
      fail(Status::Incompatible, "P ranks " + s(p0.tp_rank) + " and " + s(p.tp_rank) +
                                     " disagree on the KV cache layout (" +
                                     kv_layout_name(p0.kv_layout) + " vs " +
                                     kv_layout_name(p.kv_layout) +
                                     "); every rank of an engine must use the same layout");
    }
  }
  // Overlapping regions would make a read into one layer's tensor overwrite another's (or read
  // another layer's bytes on P). Decoded metadata never overlaps; hand-built contexts may.
  auto disjoint = [](const EngineMetadata& m, const std::string& who) {
    if (const auto o = find_region_overlap(m.regions)) {
      fail(Status::InvalidArgument, who + " metadata: " + to_string(*o) +
                                        "; a plan would write one layer's bytes into another's");
    }
  };
  disjoint(d, "D");
  for (const EngineMetadata& p : ctx.remote) disjoint(p, "P rank " + s(p.tp_rank));
}

uint64_t fill_tokens(uint64_t given, uint64_t from_meta, const std::string& what) {
  if (given == 0) return from_meta;
  if (given != from_meta) {
    fail(Status::InvalidArgument, what + " " + s(given) + " disagrees with the metadata's " +
                                      s(from_meta) + "; leave it 0 to take the metadata value");
  }
  return given;
}

}  // namespace

KvLayout attention_layout(const PlanContext& ctx) {
  const EngineMetadata& d = ctx.local;
  const EngineMetadata& p0 = ctx.remote.front();
  // MLA: one latent head per block, so HND and NHD are the same bytes (the handshake does not
  // compare MLA layouts either).
  if (ctx.mapping.input.use_mla) return KvLayout::HND;
  if (d.kv_layout != p0.kv_layout) {
    fail(Status::UnsupportedLayout,
         std::string("KV cache layouts differ (D ") + kv_layout_name(d.kv_layout) + ", P " +
             kv_layout_name(p0.kv_layout) + "); pdkv does not permute blocks on receive. Fix: "
             "use the same KV cache layout on both engines, HND for heterogeneous TP");
  }
  if (d.kv_layout == KvLayout::NHD &&
      ctx.mapping.local_physical_heads != ctx.mapping.remote_physical_heads) {
    fail(Status::UnsupportedLayout,
         "NHD KV cache layout on both engines with " + s(ctx.mapping.local_physical_heads) +
             " (D) vs " + s(ctx.mapping.remote_physical_heads) +
             " (P) KV heads per rank: D would read a head subset of every token, which is not "
             "contiguous in an NHD block (the handshake refuses this pair too). Fix: use the "
             "HND KV cache layout on both engines for heterogeneous TP");
  }
  return d.kv_layout;
}

std::vector<ResolvedGroup> resolve(const PlanContext& ctx, const std::vector<PlanGroup>& groups) {
  check_context(ctx);
  for (const PlanGroup& g : groups) {
    if (is_attention_kind(g.trim.kind)) {
      attention_layout(ctx);
      break;
    }
  }
  const EngineMetadata& d = ctx.local;
  const EngineMetadata& p0 = ctx.remote.front();
  std::vector<ResolvedGroup> out;
  out.reserve(groups.size());
  bool mamba_checked = false;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string where = "group " + s(g) + " (" + group_kind_name(groups[g].trim.kind) + ")";
    ResolvedGroup r{groups[g].trim, groups[g].regions};
    if (r.regions.empty()) {
      for (uint32_t i = 0; i < d.regions.size(); ++i) r.regions.push_back(i);
    }
    for (size_t i = 0; i < r.regions.size(); ++i) {
      if (r.regions[i] >= d.regions.size()) {
        fail(Status::InvalidArgument, where + ": region index " + s(r.regions[i]) +
                                          " is out of range; the engines register " +
                                          s(d.regions.size()) + " regions");
      }
      for (size_t j = 0; j < i; ++j) {
        if (r.regions[j] == r.regions[i]) {
          fail(Status::InvalidArgument, where + ": region " + s(r.regions[i]) + " listed twice");
        }
      }
    }
    GroupTrimInput& t = r.trim;
    if (is_attention_kind(t.kind)) {
      t.local_tokens_per_block =
          fill_tokens(t.local_tokens_per_block, d.kernel_block_size, where + ": local tokens per block");
      t.remote_tokens_per_block = fill_tokens(t.remote_tokens_per_block, p0.kernel_block_size,
                                              where + ": remote tokens per block");
    } else {
      if (!mamba_checked) {
        require_mamba_state(ctx.local_mamba, d, "D");
        require_mamba_state(ctx.remote_mamba, p0, "P");
        mamba_checked = true;
      }
      if (t.cache_mode == MambaCacheMode::All) {
        if (t.local_tokens_per_block == 0) t.local_tokens_per_block = d.logical_block_size;
        if (t.remote_tokens_per_block == 0) t.remote_tokens_per_block = p0.logical_block_size;
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace plan_detail

namespace {

using namespace plan_detail;

// Appends reads per P rank and counts pieces; merges a read into the previous one of the same
// rank when both sides continue it (coalescing in issue order keeps the plan deterministic).
class PlanBuilder {
 public:
  explicit PlanBuilder(uint32_t p_tp) : per_rank_(p_tp) {}

  void add(uint32_t p, const PlanRead& r, bool mamba) {
    ++pieces_;
    uint64_t& kind_bytes = mamba ? mamba_bytes_ : attention_bytes_;
    kind_bytes = add_checked(kind_bytes, r.length, "plan bytes");
    if (p >= per_rank_.size()) {
      fail(Status::Internal, "read from P rank " + s(p) + " beyond P tp_size " +
                                 s(per_rank_.size()));
    }
    auto& v = per_rank_[p];
    if (!v.empty()) {
      PlanRead& last = v.back();
      if (last.local_region == r.local_region && last.remote_region == r.remote_region &&
          last.local_offset + last.length == r.local_offset &&
          last.remote_offset + last.length == r.remote_offset) {
        last.length += r.length;
        return;
      }
    }
    v.push_back(r);
  }

  void finish(TransferPlan& plan) {
    plan.stats.pieces_before_coalescing = pieces_;
    plan.stats.attention_bytes = attention_bytes_;
    plan.stats.mamba_bytes = mamba_bytes_;
    for (uint32_t p = 0; p < per_rank_.size(); ++p) {
      if (per_rank_[p].empty()) continue;
      RankReads rr;
      rr.p_rank = p;
      rr.reads = std::move(per_rank_[p]);
      for (const auto& r : rr.reads) rr.bytes = add_checked(rr.bytes, r.length, "plan bytes");
      plan.stats.pieces_after_coalescing += rr.reads.size();
      plan.stats.bytes = add_checked(plan.stats.bytes, rr.bytes, "plan bytes");
      plan.ranks.push_back(std::move(rr));
    }
  }

 private:
  std::vector<std::vector<PlanRead>> per_rank_;
  uint64_t pieces_ = 0;
  uint64_t attention_bytes_ = 0;
  uint64_t mamba_bytes_ = 0;
};

// Per-region attention geometry: local / remote kernel page, tokens per block, bytes per token
// per head, and the head-granular reads of one token (attention_reads on per-token "blocks").
struct AttentionRegion {
  uint64_t local_block_len = 0, remote_block_len = 0;
  uint64_t head_bytes_per_token = 0;
  // NHD (tokens x heads x bytes): set only when every read covers all heads of both ranks, so
  // that a token run is one contiguous range on each side (attention_layout refuses the rest).
  bool nhd = false;
  uint64_t local_token_bytes = 0, remote_token_bytes = 0;
  std::vector<AttentionRead> token_reads;
};

AttentionRegion attention_region(const PlanContext& ctx, uint32_t region) {
  const EngineMetadata& d = ctx.local;
  const EngineMetadata& p0 = ctx.remote.front();
  AttentionRegion a;
  a.local_block_len = d.regions[region].region.block_len;
  a.remote_block_len = p0.regions[region].region.block_len;
  const uint64_t lt = region_bytes_per_token(d, region, "D");
  const uint64_t rt = region_bytes_per_token(p0, region, "P");
  // Every P rank must lay the region out alike, or one rank's offsets would be wrong on another.
  for (const auto& p : ctx.remote) {
    if (p.regions[region].region.block_len != a.remote_block_len ||
        p.kernel_block_size != p0.kernel_block_size) {
      fail(Status::Incompatible, "P ranks " + s(p0.tp_rank) + " and " + s(p.tp_rank) +
                                     " disagree on region " + s(region) + " (block_len " +
                                     s(a.remote_block_len) + " vs " +
                                     s(p.regions[region].region.block_len) + ")");
    }
  }
  try {
    a.token_reads = attention_reads(ctx.mapping, lt, rt);
  } catch (const Error& e) {
    fail(e.status(), "region " + s(region) + " (per token): " + e.what());
  }
  const uint64_t heads = ctx.mapping.input.use_mla ? 1 : ctx.mapping.local_physical_heads;
  a.head_bytes_per_token = lt / heads;
  a.local_token_bytes = lt;
  a.remote_token_bytes = rt;
  a.nhd = attention_layout(ctx) == KvLayout::NHD;
  if (a.nhd) {
    // Equal heads per rank: D reads one P rank's whole token (all heads) into its whole token.
    if (a.token_reads.size() != 1 || a.token_reads[0].local_offset != 0 ||
        a.token_reads[0].remote_offset != 0 || a.token_reads[0].length != lt || lt != rt) {
      fail(Status::Internal, "region " + s(region) + ": NHD reads must cover whole tokens (" +
                                 s(a.token_reads.size()) + " reads, " + s(lt) + " / " + s(rt) +
                                 " bytes per token on D / P)");
    }
  }
  return a;
}

void add_attention_pieces(PlanBuilder& b, const AttentionRegion& a, uint32_t region,
                          const TokenRun& run, uint64_t lbs, uint64_t rbs) {
  const uint64_t hb = a.head_bytes_per_token;
  const uint64_t lbase = mul_checked(run.local_block, a.local_block_len, "local block offset");
  const uint64_t rbase = mul_checked(run.remote_block, a.remote_block_len, "remote block offset");
  if (a.nhd) {
    // NHD: token t of a block starts at t * (heads x head bytes); a run of tokens over all the
    // rank's heads is one contiguous piece on both sides, whole block or not.
    const AttentionRead& r = a.token_reads.front();
    b.add(r.p_rank,
          {region, add_checked(lbase, run.local_token_begin * a.local_token_bytes, "local read offset"),
           region, add_checked(rbase, run.remote_token_begin * a.remote_token_bytes, "remote read offset"),
           mul_checked(run.num_tokens, a.local_token_bytes, "attention run length")},
          false);
    return;
  }
  const bool whole = run.local_token_begin == 0 && run.remote_token_begin == 0 &&
                     run.num_tokens == lbs && run.num_tokens == rbs;
  for (const AttentionRead& r : a.token_reads) {
    const uint64_t lh = r.local_offset / hb;   // first local head of this read
    const uint64_t rh = r.remote_offset / hb;  // the same head's index in the P block
    const uint64_t nh = r.length / hb;
    if (whole) {  // a head slice of a whole block is contiguous on both sides
      b.add(r.p_rank, {region, add_checked(lbase, lh * lbs * hb, "local read offset"), region,
                       add_checked(rbase, rh * rbs * hb, "remote read offset"),
                       mul_checked(r.length, lbs, "attention read length")},
            false);
      continue;
    }
    const uint64_t len = mul_checked(run.num_tokens, hb, "attention run length");
    for (uint64_t j = 0; j < nh; ++j) {
      // In-block offsets stay below block_len (heads x tokens x bytes), so only the block base
      // can overflow.
      b.add(r.p_rank,
            {region, add_checked(lbase, ((lh + j) * lbs + run.local_token_begin) * hb, "local read offset"),
             region, add_checked(rbase, ((rh + j) * rbs + run.remote_token_begin) * hb, "remote read offset"),
             len},
            false);
    }
  }
}

}  // namespace

void validate_plan_context(const PlanContext& ctx) {
  plan_detail::check_context(ctx);
  plan_detail::check_peer_agreement(ctx);
}

TransferPlan compile_transfer_plan(const PlanContext& ctx, const std::vector<PlanGroup>& groups) {
  const std::vector<ResolvedGroup> resolved = resolve(ctx, groups);
  std::vector<GroupTrimInput> trim_in;
  trim_in.reserve(resolved.size());
  for (const auto& g : resolved) trim_in.push_back(g.trim);
  const std::vector<GroupTrim> trims = trim_prefix(trim_in);
  // resolve() ran check_context; the handshake re-check comes after the request's own errors.
  plan_detail::check_peer_agreement(ctx);

  const EngineMetadata& d = ctx.local;
  TransferPlan plan;
  plan.d_rank = d.tp_rank;
  plan.d_tp = d.tp_size;
  plan.p_tp = ctx.mapping.input.remote_tp;
  plan.notify_ranks = ctx.mapping.notify_ranks;
  plan.notifications_per_p_rank = notifications_expected_per_request(plan.p_tp, plan.d_tp);

  PlanBuilder b(plan.p_tp);
  std::vector<MambaRead> mreads;
  bool have_mreads = false;
  for (size_t g = 0; g < resolved.size(); ++g) {
    const ResolvedGroup& rg = resolved[g];
    const GroupTrim& t = trims[g];
    plan.zero.push_back({static_cast<uint32_t>(g), t.kind, rg.regions, t.zero, t.unfilled_states});
    if (t.transfers_nothing()) continue;
    try {
      if (is_attention_kind(t.kind)) {
        for (uint32_t region : rg.regions) {
          const AttentionRegion a = attention_region(ctx, region);
          for (const TokenRun& run : t.runs) {
            add_attention_pieces(b, a, region, run, rg.trim.local_tokens_per_block,
                                 rg.trim.remote_tokens_per_block);
          }
        }
        continue;
      }
      if (!have_mreads) {
        mreads = mamba_reads(*ctx.remote_mamba, *ctx.local_mamba, d.tp_rank);
        have_mreads = true;
      }
      for (uint32_t region : rg.regions) {
        const uint64_t ls = mamba_page_stride(d, region, ctx.local_mamba->page_bytes(), "D");
        // Page by page, so the parts of one state from one P rank can coalesce.
        for (const StatePair& sp : t.states) {
          const uint64_t lpage = mul_checked(sp.local_block, ls, "local page");
          for (const MambaRead& r : mreads) {
            const EngineMetadata& p = remote_rank(ctx, r.p_rank);
            const uint64_t rs = mamba_page_stride(p, region, ctx.remote_mamba->page_bytes(), "P");
            const uint64_t rpage = mul_checked(sp.remote_block, rs, "remote page");
            b.add(r.p_rank,
                  {region, add_checked(lpage, r.local_offset, "local read offset"), region,
                   add_checked(rpage, r.remote_offset, "remote read offset"), r.length},
                  true);
          }
        }
      }
    } catch (const Error& e) {
      fail(e.status(), "group " + s(g) + " (" + group_kind_name(t.kind) + "): " + e.what());
    }
  }
  b.finish(plan);
  check_coverage(plan, ctx, resolved, trims);
  return plan;
}

void validate_transfer_plan(const TransferPlan& plan, const PlanContext& ctx,
                            const std::vector<PlanGroup>& groups) {
  const std::vector<ResolvedGroup> resolved = resolve(ctx, groups);
  std::vector<GroupTrimInput> trim_in;
  for (const auto& g : resolved) trim_in.push_back(g.trim);
  const std::vector<GroupTrim> trims = trim_prefix(trim_in);
  plan_detail::check_peer_agreement(ctx);
  check_coverage(plan, ctx, resolved, trims);
}

}  // namespace pdkv::core
