// Transfer-plan compilation (transfer_plan.hpp): trims every group, turns token runs and Mamba
// state pairs into byte reads per P rank, coalesces them and validates the result.
#include "pdkv/core/transfer_plan.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "pdkv/core/attention_descriptors.hpp"
#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/handshake.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "plan_indexed.hpp"
#include "plan_internal.hpp"
#include "plan_runs.hpp"

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

bool same_window(const EngineMetadata& a, const EngineMetadata& b) {
  return a.layer_begin == b.layer_begin && a.layer_end == b.layer_end;
}

namespace {

std::string window_text(const EngineMetadata& m) {
  return "[" + s(m.layer_begin) + ", " + (m.layer_end == kLayerEndOpen ? std::string("open") : s(m.layer_end)) + ")";
}

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
    // Stages holding different layer windows register different regions (paired by layer).
    if (p.regions.size() != d.regions.size() && same_window(d, p)) {
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

// `where` builds the group's name only on failure (the hot path builds no strings).
template <class Where>
uint64_t fill_tokens(uint64_t given, uint64_t from_meta, const Where& where, const char* what) {
  if (given == 0) return from_meta;
  if (given != from_meta) {
    fail(Status::InvalidArgument, where() + what + " " + s(given) +
                                      " disagrees with the metadata's " + s(from_meta) +
                                      "; leave it 0 to take the metadata value");
  }
  return given;
}

}  // namespace

AttentionLayouts attention_layouts(const PlanContext& ctx) {
  const EngineMetadata& d = ctx.local;
  const EngineMetadata& p0 = ctx.remote.front();
  // MLA: one latent head per block, so HND and NHD are the same bytes (the handshake does not
  // compare MLA layouts either).
  if (ctx.mapping.input.use_mla) return {KvLayout::HND, false};
  const bool heads_differ = ctx.mapping.local_physical_heads != ctx.mapping.remote_physical_heads;
  if (p0.kv_layout == KvLayout::NHD && heads_differ) {
    // P's NHD block interleaves its heads token by token: D's head subset (or superset over
    // several P ranks) is one piece per token and head, which no plan here issues.
    fail(Status::UnsupportedLayout,
         std::string(d.kv_layout == KvLayout::NHD ? "NHD KV cache layout on both engines" : "NHD KV cache layout on P") +
             " with " + s(ctx.mapping.local_physical_heads) + " (D) vs " + s(ctx.mapping.remote_physical_heads) +
             " (P) KV heads per rank: D would read a head subset of every token, which is not "
             "contiguous in an NHD block" +
             (d.kv_layout == KvLayout::NHD ? std::string(" (the handshake refuses this pair too)") : std::string()) +
             ". Fix: use the HND KV cache layout on the prefill engine (the decode engine may keep NHD with "
             "permute_on_receive)");
  }
  if (d.kv_layout == p0.kv_layout) return {d.kv_layout, false};
  if (!ctx.permute_on_receive) {
    fail(Status::UnsupportedLayout,
         std::string("KV cache layouts differ (D ") + kv_layout_name(d.kv_layout) + ", P " +
             kv_layout_name(p0.kv_layout) + "): D can read P's blocks as P lays them out and permute each "
             "into its own layout after receipt. Fix: set permute_on_receive in the plan context (vLLM: "
             "kv_connector_extra_config enable_permute_local_kv), or use the same KV cache layout on both "
             "engines, HND for heterogeneous TP");
  }
  return {p0.kv_layout, true};
}

BlockPermute block_permute(const PlanContext& ctx, const AttentionLayouts& layouts) {
  BlockPermute p;
  if (!layouts.permute) return p;
  const EngineMetadata& d = ctx.local;
  p.from = layouts.staging;
  p.to = d.kv_layout;
  p.heads = ctx.mapping.local_physical_heads;
  p.tokens = d.kernel_block_size;
  p.head_bytes = d.attention_bytes_per_token / p.heads;  // whole heads (check_metadata)
  return p;
}

void received_blocks(std::span<const SpanRun> spans, uint64_t lbs, uint64_t hit, const BlockPermute& permute,
                     std::vector<uint64_t>& out) {
  out.clear();
  for (const SpanRun& r : spans) {
    if (r.num_tokens == 0) continue;
    // The span's first D block starts at this request position; later ones start past `hit`.
    const uint64_t first_start = r.token_begin - r.local_token_begin;
    if (first_start < hit) [[unlikely]] {
      fail(Status::UnsupportedLayout,
           "D block " + s(r.local_block) + " holds tokens [" + s(first_start) + ", " + s(hit) +
               ") of D's prefix-cache hit in D's " + kv_layout_name(permute.to) + " layout and would receive tokens in P's " +
               kv_layout_name(permute.from) + " layout before being permuted, overwriting them. Fix: a prefix-cache hit "
               "at a D block boundary, or the same KV cache layout on both engines");
    }
    const uint64_t last = r.local_block + (r.local_token_begin + r.num_tokens - 1) / lbs;
    for (uint64_t b = r.local_block; b <= last; ++b) out.push_back(b);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

void resolve(const PlanContext& ctx, std::span<const PlanGroupView> groups, Trimmed& t,
             const PlanContextVerdict* verdict) {
  if (verdict == nullptr) {
    check_context(ctx);
  } else if (verdict->context_status != Status::Ok) {
    fail(verdict->context_status, verdict->context_message);
  }
  const EngineMetadata& d = ctx.local;
  bool layout_checked = false;
  const EngineMetadata& p0 = ctx.remote.front();
  t.all_regions.resize(d.regions.size());
  for (uint32_t i = 0; i < t.all_regions.size(); ++i) t.all_regions[i] = i;
  t.groups.clear();
  t.staging = d.kv_layout;
  t.permute = false;
  bool mamba_checked = false;
  // Groups paired by layer: their region lists go to t.paired_* first (spans are taken once the
  // vectors stop growing).
  t.paired_local.clear();
  t.paired_remote.clear();
  auto& paired_at = t.paired_at;  // per group: [begin, end) in paired_*
  paired_at.assign(groups.size(), {0, 0});
  const bool windows_equal = same_window(d, p0);
  const uint64_t w_begin = std::max(d.layer_begin, p0.layer_begin);
  const uint64_t w_end = std::min(d.layer_end_bound(), p0.layer_end_bound());
  for (size_t g = 0; g < groups.size(); ++g) {
    ResolvedGroup r{groups[g], groups[g].regions, {}};
    if (r.regions.empty()) r.regions = t.all_regions;
    r.remote_regions = r.regions;
    auto where = [&] { return "group " + s(g) + " (" + group_kind_name(groups[g].kind) + ")"; };
    const std::span<const uint32_t> layers = groups[g].layers;
    if (layers.empty() && !windows_equal) {
      fail(Status::InvalidArgument,
           where() + " names no layers, but D's stage holds layers " + window_text(d) + " and P's stage " +
               window_text(p0) + ": give the group's model layers (PlanGroup::layers) so that regions are "
               "paired by layer");
    }
    if (!layers.empty()) {
      if (!groups[g].regions.empty()) {
        fail(Status::InvalidArgument, where() + " gives both regions and layers; give one (layers pair "
                                                "the regions of the two stages)");
      }
      // Position of each layer inside each stage's window; read only the layers both hold.
      const size_t begin = t.paired_local.size();
      uint64_t d_pos = 0, p_pos = 0;
      for (size_t i = 0; i < layers.size(); ++i) {
        const uint32_t l = layers[i];
        if (i > 0 && l <= layers[i - 1]) {
          fail(Status::InvalidArgument, where() + ": layers must be strictly ascending (layer " + s(l) +
                                            " after " + s(layers[i - 1]) + ")");
        }
        const bool in_d = d.holds_layer(l), in_p = p0.holds_layer(l);
        if (in_d && in_p && l >= w_begin && l < w_end) {
          auto check_side = [&](const EngineMetadata& m, uint64_t pos, const char* side) {
            if (pos >= m.regions.size()) {
              fail(Status::InvalidArgument, where() + ": layer " + s(l) + " is the group's layer " + s(pos) +
                                                " of " + side + "'s stage window " + window_text(m) + ", but " +
                                                side + " registers " + s(m.regions.size()) +
                                                " regions; the group's layers do not match the stage's regions");
            }
            if (m.regions[pos].layer > l) {
              fail(Status::InvalidArgument, where() + ": layer " + s(l) + " maps to " + side + " region " +
                                                s(pos) + ", whose first user is layer " +
                                                s(m.regions[pos].layer) + "; the group's layers do not match "
                                                "the stage's regions");
            }
          };
          check_side(d, d_pos, "D");
          check_side(p0, p_pos, "P");
          if (d.region_is_mla(static_cast<size_t>(d_pos)) != p0.region_is_mla(static_cast<size_t>(p_pos))) {
            fail(Status::Incompatible, where() + ": layer " + s(l) + " is in D region " + s(d_pos) + " (" +
                                           region_kind_name(d.regions[d_pos].kind) + ") and P region " +
                                           s(p_pos) + " (" + region_kind_name(p0.regions[p_pos].kind) +
                                           "); an MLA latent and head-split KV cannot be paired");
          }
          t.paired_local.push_back(static_cast<uint32_t>(d_pos));
          t.paired_remote.push_back(static_cast<uint32_t>(p_pos));
        }
        if (in_d) ++d_pos;
        if (in_p) ++p_pos;
      }
      paired_at[g] = {begin, t.paired_local.size()};
      // Valid until paired_* grows again (the checks below); re-pointed after the last group.
      r.regions = std::span<const uint32_t>(t.paired_local.data() + begin, t.paired_local.size() - begin);
      r.remote_regions = std::span<const uint32_t>(t.paired_remote.data() + begin, t.paired_remote.size() - begin);
    }
    for (size_t i = 0; i < r.regions.size(); ++i) {
      if (r.regions[i] >= d.regions.size()) {
        fail(Status::InvalidArgument, where() + ": region index " + s(r.regions[i]) +
                                          " is out of range; the engines register " +
                                          s(d.regions.size()) + " regions");
      }
      for (size_t j = 0; j < i; ++j) {
        if (r.regions[j] == r.regions[i]) {
          fail(Status::InvalidArgument, where() + ": region " + s(r.regions[i]) + " listed twice");
        }
      }
    }
    PlanGroupView& v = r.g;
    if (is_attention_kind(v.kind) && !layout_checked) {
      // MLA regions read one latent head whole, the same bytes in either layout; only a group
      // with a head-split region depends on the layouts.
      for (uint32_t region : r.regions) {
        if (!d.region_is_mla(region)) {
          const AttentionLayouts l = attention_layouts(ctx);
          t.staging = l.staging;
          t.permute = l.permute;
          layout_checked = true;
          break;
        }
      }
    }
    if (is_attention_kind(v.kind)) {
      v.local_tokens_per_block = fill_tokens(v.local_tokens_per_block, d.kernel_block_size,
                                             where, ": local tokens per block");
      v.remote_tokens_per_block = fill_tokens(v.remote_tokens_per_block, p0.kernel_block_size,
                                              where, ": remote tokens per block");
    } else {
      if (!mamba_checked) {
        require_mamba_state(ctx.local_mamba, d, "D");
        require_mamba_state(ctx.remote_mamba, p0, "P");
        mamba_checked = true;
      }
      if (v.cache_mode == MambaCacheMode::All) {
        if (v.local_tokens_per_block == 0) v.local_tokens_per_block = d.logical_block_size;
        if (v.remote_tokens_per_block == 0) v.remote_tokens_per_block = p0.logical_block_size;
      }
    }
    t.groups.push_back(r);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].layers.empty()) continue;
    const auto [b, e] = paired_at[g];
    t.groups[g].regions = std::span<const uint32_t>(t.paired_local.data() + b, e - b);
    t.groups[g].remote_regions = std::span<const uint32_t>(t.paired_remote.data() + b, e - b);
  }
  t.indexed.assign(t.groups.size(), IndexedGroup{});  // every group walked unless compile says otherwise
}

void trim_groups(Trimmed& t) {
  const size_t n = t.groups.size();
  t.spans.clear();
  t.span_begin.assign(n + 1, 0);
  t.mamba.resize(n);
  t.zero.resize(n);
  // Mamba lists are short (one slot, or one per logical block); copied into the scratch's input,
  // whose lists keep their capacity between requests.
  GroupTrimInput& mamba_in = t.mamba_in;
  for (size_t g = 0; g < n; ++g) {
    const PlanGroupView& v = t.groups[g].g;
    t.span_begin[g] = t.spans.size();
    GroupTrim& mt = t.mamba[g];
    mt.kind = v.kind;
    mt.runs.clear();
    mt.states.clear();
    mt.zero.clear();
    mt.unfilled_states.clear();
    try {
      if (is_attention_kind(v.kind)) {
        trim_attention_runs(v, t.spans, t.zero[g], t.indexed[g].on ? TrimWalk::None : TrimWalk::Auto);
      } else {
        t.zero[g].clear();
        mamba_in.kind = v.kind;
        mamba_in.cache_mode = v.cache_mode;
        mamba_in.local_blocks.assign(v.local_blocks.begin(), v.local_blocks.end());
        mamba_in.remote_blocks.assign(v.remote_blocks.begin(), v.remote_blocks.end());
        mamba_in.local_tokens_per_block = v.local_tokens_per_block;
        mamba_in.remote_tokens_per_block = v.remote_tokens_per_block;
        mamba_in.remote_computed_tokens = v.remote_computed_tokens;
        mamba_in.local_hit_tokens = v.local_hit_tokens;
        mamba_in.sliding_window = v.sliding_window;
        mamba_in.local_first_block = v.local_first_block;
        mamba_in.remote_first_block = v.remote_first_block;
        mamba_in.local_kernel_blocks_per_id = v.local_kernel_blocks_per_id;
        mamba_in.remote_kernel_blocks_per_id = v.remote_kernel_blocks_per_id;
        trim_group_into(mamba_in, mt);
      }
    } catch (const Error& e) {
      fail(e.status(), "group " + std::to_string(g) + " (" + group_kind_name(v.kind) + "): " +
                           e.what());
    }
  }
  t.span_begin[n] = t.spans.size();
}

}  // namespace plan_detail

namespace {

using namespace plan_detail;

// Appends reads per P rank and counts pieces; merges a read into the previous one of the same
// rank when both sides continue it (coalescing in issue order keeps the plan deterministic).
// Writes into the plan's own per-rank vectors, so a reused plan keeps their capacity, and keeps
// their elements too: rank p's reads are the first used[p] elements of its vector, the elements
// after them (left by the plan's previous compile) are overwritten in place, and finish() cuts
// each vector to its used reads. Only growth past a vector's size value-initialises elements
// (resize), so compiling a request no larger than the plan's last one writes each read once.
class PlanBuilder {
 public:
  // factored: regions laid out alike are recorded as RegionRepeats (CompileOptions::region_repeats).
  PlanBuilder(TransferPlan& plan, uint32_t p_tp, std::vector<size_t>& used, std::vector<size_t>& ids_used, bool factored)
      : plan_(plan), used_(used), ids_used_(ids_used), factored_(factored) {
    plan_.ranks.resize(p_tp);
    used_.assign(p_tp, 0);
    ids_used_.assign(p_tp, 0);
    for (uint32_t p = 0; p < p_tp; ++p) {
      plan_.ranks[p].p_rank = p;
      plan_.ranks[p].bytes = 0;
      plan_.ranks[p].repeats.clear();
      plan_.ranks[p].indexed.clear();
      plan_.ranks[p].region_pairs.clear();
    }
  }

  // Whether rank p's last read in issue order is a repeat's copy (not stored: no read may merge
  // into rank p's last listed read then).
  bool tail_repeated(uint32_t p) const {
    const auto& reps = plan_.ranks[p].repeats;
    return !reps.empty() && reps.back().end == used_[p];
  }
  // Whether it is an indexed entry's read (issued after the repeats at the same position).
  bool tail_indexed(uint32_t p) const {
    const auto& xs = plan_.ranks[p].indexed;
    return !xs.empty() && xs.back().at == used_[p];
  }
  // Whether it is the rank's last listed read (which a read may merge into).
  bool tail_listed(uint32_t p) const { return used_[p] > 0 && !tail_repeated(p) && !tail_indexed(p); }

  // The regions and the ends on both sides of rank p's last issued read; false when it has none.
  bool tail_end(uint32_t p, RegionPair& pair, uint64_t& lend, uint64_t& rend) const {
    const RankReads& rr = plan_.ranks[p];
    if (tail_indexed(p)) {
      const IndexedReads& x = rr.indexed.back();
      const uint64_t i = x.count - 1, e = std::min(x.tokens_per_id, x.first_token + x.tokens - i * x.tokens_per_id);
      const uint64_t* ids = rr.ids.data() + x.ids_begin;
      pair = rr.region_pairs[x.pairs_end - 1];
      lend = ids[i] * x.local_id_bytes + e * x.token_bytes;
      rend = ids[x.count + i] * x.remote_id_bytes + e * x.token_bytes;
      return true;
    }
    if (used_[p] == 0) return false;
    const PlanRead& l = rr.reads[tail_repeated(p) ? rr.repeats.back().end - 1 : used_[p] - 1];
    pair = tail_repeated(p) ? RegionPair{rr.repeats.back().local_region, rr.repeats.back().remote_region}
                            : RegionPair{l.local_region, l.remote_region};
    lend = l.local_offset + l.length;
    rend = l.remote_offset + l.length;
    return true;
  }

  // Before a read of regions (region, rregion) is added to rank p: when the rank's last read is a
  // repeat's copy or an indexed entry's read of the same regions (which the read could extend),
  // that repeat or entry is written out as listed reads at the tail (where its reads stood in
  // issue order), so that coalescing stays exactly the listed plan's. A read of other regions
  // never merges into them, and they stay.
  void settle_tail(uint32_t p, uint32_t region, uint32_t rregion) {
    RankReads& rr = plan_.ranks[p];
    if (tail_indexed(p)) {
      const RegionPair last = rr.region_pairs[rr.indexed.back().pairs_end - 1];
      if (last.local_region == region && last.remote_region == rregion) settle_indexed(p);
      return;
    }
    if (!tail_repeated(p)) return;
    auto& reps = rr.repeats;
    const RegionRepeat r = reps.back();
    if (r.local_region != region || r.remote_region != rregion) return;
    reps.pop_back();
    append_copies(p, r);
  }

  // Writes rank p's tail entry out as listed reads, coalesced as add() coalesces (its bytes and
  // pieces were counted when it was recorded). Its ids and region pairs are dropped when they are
  // the last ones stored.
  void settle_indexed(uint32_t p) {
    RankReads& rr = plan_.ranks[p];
    const IndexedReads x = rr.indexed.back();
    rr.indexed.pop_back();
    for_each_indexed_read(rr, x, [&](const PlanRead& r) {
      --indexed_reads_;
      append_listed(p, r.local_region, r.local_offset, r.remote_region, r.remote_offset, r.length);
    });
    if (x.ids_begin + 2 * x.count == ids_used_[p]) ids_used_[p] = static_cast<size_t>(x.ids_begin);
    if (x.pairs_end == rr.region_pairs.size()) rr.region_pairs.resize(static_cast<size_t>(x.pairs_begin));
  }

  // Appends the copies `r` stands for to rank p's listed reads. Room made once, then written
  // through pointers (a push_back per read reloads the vector's bounds after every store).
  void append_copies(uint32_t p, const RegionRepeat& r) {
    const size_t n = static_cast<size_t>(r.end - r.begin);
    PlanRead* out = room(p, n);
    const PlanRead* in = plan_.ranks[p].reads.data() + r.begin;  // after room(): it may move them
    used_[p] += n;
    for (size_t i = 0; i < n; ++i) out[i] = {r.local_region, in[i].local_offset, r.remote_region, in[i].remote_offset, in[i].length};
  }

  // The read D's [local_offset, +length) of `region` <- P's [remote_offset, +length) of
  // `rregion`, passed field by field in registers. Out of line with push_back inlined into it
  // (flatten): a PlanRead built by the caller and passed by reference, or handed to an out-of-line
  // push_back, goes through the stack and is reloaded in 16-byte halves of 8-byte stores, a
  // store-forwarding stall on every read.
  [[gnu::noinline, gnu::flatten]] void add(uint32_t p, uint32_t region, uint64_t local_offset, uint32_t rregion,
                                  uint64_t remote_offset, uint64_t length, bool mamba, uint64_t pieces = 1) {
    pieces_ += pieces;
    uint64_t& kind_bytes = mamba ? mamba_bytes_ : attention_bytes_;
    kind_bytes = add_checked(kind_bytes, length, "plan bytes");
    if (p >= plan_.ranks.size()) [[unlikely]] fail_rank(p);
    RankReads& rr = plan_.ranks[p];
    rr.bytes += length;  // a part of kind_bytes, which cannot have overflowed
    append_listed(p, region, local_offset, rregion, remote_offset, length);
  }

  // add()'s read appended to rank p's listed reads (nothing counted), merged into the rank's last
  // read when it continues it on both sides.
  [[gnu::always_inline]] void append_listed(uint32_t p, uint32_t region, uint64_t local_offset, uint32_t rregion,
                                            uint64_t remote_offset, uint64_t length) {
    RankReads& rr = plan_.ranks[p];
    if (rr.factored()) [[unlikely]] settle_tail(p, region, rregion);
    auto& v = rr.reads;
    size_t& used = used_[p];
    if (tail_listed(p)) {
      PlanRead& last = v[used - 1];
      if (last.local_region == region && last.remote_region == rregion &&
          last.local_offset + last.length == local_offset && last.remote_offset + last.length == remote_offset) {
        last.length += length;
        return;
      }
    }
    if (used == v.size()) {
      v.push_back({region, local_offset, rregion, remote_offset, length});
    } else {
      PlanRead& o = v[used];
      o.local_region = region;
      o.local_offset = local_offset;
      o.remote_region = rregion;
      o.remote_offset = remote_offset;
      o.length = length;
    }
    ++used;
  }

  // The first of `extra` writable reads after rank p's used ones (the caller writes them, then
  // adds what it wrote to used_[p]). The vector grows only when its elements run out, then
  // geometrically, as push_back would (reserve alone grows to exactly the size asked for, one
  // reallocation per call on a plan that is not reused).
  PlanRead* room(uint32_t p, size_t extra) {
    auto& v = plan_.ranks[p].reads;
    const size_t need = used_[p] + extra;
    if (need > v.size()) [[unlikely]] {
      if (need > v.capacity()) v.reserve(std::max(need, 2 * v.capacity()));
      v.resize(need);
    }
    return v.data() + used_[p];
  }

  [[noreturn, gnu::cold, gnu::noinline]] void fail_rank(uint32_t p) const {
    fail(Status::Internal, "read from P rank " + s(p) + " beyond P tp_size " + s(plan_.ranks.size()));
  }

  // Whether P rank p has a read vector (the per-read path reports a rank past P's TP size).
  bool has_rank(uint32_t p) const { return p < plan_.ranks.size(); }
  size_t size(uint32_t p) const { return used_[p]; }
  uint64_t pieces() const { return pieces_; }
  uint64_t attention_bytes() const { return attention_bytes_; }

  // Appends copies of rank p's reads [begin, end) with their regions replaced (a region laid out
  // like theirs), counting the pieces and bytes they counted. The first copy cannot merge into
  // the rank's last read: that one belongs to another region.
  void repeat(uint32_t p, size_t begin, size_t end, uint32_t region, uint32_t rregion, uint64_t pieces,
              uint64_t bytes) {
    if (begin == end) return;
    const RankReads& rr = plan_.ranks[p];
    const uint32_t last_region = tail_indexed(p)    ? rr.region_pairs[rr.indexed.back().pairs_end - 1].local_region
                                 : tail_repeated(p) ? rr.repeats.back().local_region
                                                    : rr.reads[used_[p] - 1].local_region;
    if (last_region == region) [[unlikely]] {
      fail(Status::Internal, "region " + s(region) + " emitted twice in one group");
    }
    // Recorded only at the tail, and not after an indexed entry there (repeats at one position are
    // issued before the entries).
    if (factored_ && end == used_[p] && !tail_indexed(p)) {
      // Recorded, not copied: the copies would follow the rank's last read exactly here.
      plan_.ranks[p].repeats.push_back({begin, end, region, rregion});
    } else {
      append_copies(p, {begin, end, region, rregion});
    }
    pieces_ += pieces;
    attention_bytes_ = add_checked(attention_bytes_, bytes, "plan bytes");
    plan_.ranks[p].bytes += bytes;  // a part of attention_bytes_
  }

  // add() for every span of a linear region (tokens back to back across blocks on both sides:
  // one read per span at block x block_len + token x token bytes), with the same checks, counts
  // and coalescing, into the rank's vector grown once and written through pointers.
  void add_spans(uint32_t p, uint32_t region, uint32_t rregion, std::span<const SpanRun> spans, uint64_t lbl,
                 uint64_t rbl, uint64_t lt, uint64_t rt) {
    if (p >= plan_.ranks.size()) [[unlikely]] fail_rank(p);
    RankReads& rr = plan_.ranks[p];
    if (rr.factored()) [[unlikely]] settle_tail(p, region, rregion);
    PlanRead* const start = room(p, spans.size());
    PlanRead* out = start;
    PlanRead* last = tail_listed(p) ? out - 1 : nullptr;
    uint64_t bytes = attention_bytes_, pieces = pieces_, rank_bytes = rr.bytes;
    for (const SpanRun& run : spans) {
      const uint64_t lbase = mul_checked(run.local_block, lbl, "local block offset");
      const uint64_t rbase = mul_checked(run.remote_block, rbl, "remote block offset");
      const uint64_t lo = add_checked(lbase, run.local_token_begin * lt, "local read offset");
      const uint64_t ro = add_checked(rbase, run.remote_token_begin * rt, "remote read offset");
      const uint64_t len = mul_checked(run.num_tokens, lt, "attention run length");
      pieces += run.block_runs;
      bytes = add_checked(bytes, len, "plan bytes");
      rank_bytes += len;  // a part of bytes, which cannot have overflowed
      if (last != nullptr && last->local_region == region && last->remote_region == rregion &&
          last->local_offset + last->length == lo && last->remote_offset + last->length == ro) {
        last->length += len;
        continue;
      }
      out->local_region = region;
      out->local_offset = lo;
      out->remote_region = rregion;
      out->remote_offset = ro;
      out->length = len;
      last = out++;
    }
    used_[p] += static_cast<size_t>(out - start);
    attention_bytes_ = bytes;
    pieces_ = pieces;
    rr.bytes = rank_bytes;
  }

  // Appends template rank j's reads of every page of a Mamba group, page by page in the order
  // add_mamba_group emits them (region by region, each region's states in order), at the page
  // bases block id x stride on each side: into the P rank's vector grown once, written in place.
  // The first read of a page may coalesce into the read before it exactly as add() would merge
  // it; the others cannot (the template is coalesced already, so a read continuing its
  // predecessor on both sides was merged into it). `first` is the index of the group's first
  // read in the rank's vector; false when some page's first read was merged instead.
  bool add_template_group(const MambaTemplate& m, size_t j, const ResolvedGroup& rg, std::span<const StatePair> states,
                          size_t& first) {
    const MambaTemplate::Rank& rank = m.ranks[j];
    RankReads& rr = plan_.ranks[rank.p_rank];
    const size_t n = rank.reads.size();
    const TemplateRead* tmpl = rank.reads.data();
    if (rr.factored() && !rg.regions.empty()) [[unlikely]] settle_tail(rank.p_rank, rg.regions[0], rg.remote_regions[0]);
    first = used_[rank.p_rank];
    const size_t pages = rg.regions.size() * states.size();
    PlanRead* const start = room(rank.p_rank, pages * n);  // no overflow: every page's reads fit in memory
    PlanRead* out = start;
    PlanRead* last = tail_listed(rank.p_rank) ? out - 1 : nullptr;
    bool clean = true;
    const uint64_t* rstride = m.remote_stride[j].data();
    for (size_t ri = 0; ri < rg.regions.size(); ++ri) {
      const uint32_t region = rg.regions[ri], rregion = rg.remote_regions[ri];
      const uint64_t ls = m.local_stride[region], rs = rstride[rregion];
      for (const StatePair& sp : states) {
        const uint64_t lpage = sp.local_block * ls, rpage = sp.remote_block * rs;  // bounded: no overflow
        size_t k = 0;
        if (last != nullptr && last->local_region == region && last->remote_region == rregion &&
            last->local_offset + last->length == lpage + tmpl[0].local_offset &&
            last->remote_offset + last->length == rpage + tmpl[0].remote_offset) [[unlikely]] {
          last->length += tmpl[0].length;
          k = 1;
          clean = false;
        }
        for (; k < n; ++k) {
          out->local_region = region;
          out->local_offset = lpage + tmpl[k].local_offset;
          out->remote_region = rregion;
          out->remote_offset = rpage + tmpl[k].remote_offset;
          out->length = tmpl[k].length;
          last = out++;
        }
      }
    }
    used_[rank.p_rank] += static_cast<size_t>(out - start);
    rr.bytes += pages * rank.bytes;  // a part of the pages' bytes, which count_mamba checks
    return clean;
  }

  // Counts a template page: its pieces before coalescing and its bytes.
  void count_mamba(uint64_t pieces, uint64_t bytes) {
    pieces_ += pieces;
    mamba_bytes_ = add_checked(mamba_bytes_, bytes, "plan bytes");
  }

  // Each rank's bytes were summed as its reads were added (every read's length went into one
  // of the two checked kind totals as well, so no rank's sum can overflow): no pass over the
  // reads here.
  void finish() {
    plan_.stats.pieces_before_coalescing = pieces_;
    plan_.stats.attention_bytes = attention_bytes_;
    plan_.stats.mamba_bytes = mamba_bytes_;
    plan_.stats.bytes = add_checked(attention_bytes_, mamba_bytes_, "plan bytes");
    plan_.stats.pieces_after_coalescing = indexed_reads_;
    size_t kept = 0;
    for (size_t p = 0; p < plan_.ranks.size(); ++p) {
      RankReads& rr = plan_.ranks[p];
      rr.reads.resize(used_[p]);  // cuts the elements left from an earlier compile
      rr.ids.resize(ids_used_[p]);
      if (rr.reads.empty() && rr.indexed.empty()) continue;
      plan_.stats.pieces_after_coalescing += rr.reads.size();
      for (const RegionRepeat& r : rr.repeats) plan_.stats.pieces_after_coalescing += r.end - r.begin;
      if (kept != p) std::swap(plan_.ranks[kept], rr);  // keeps both vectors' capacity
      ++kept;
    }
    plan_.ranks.resize(kept);
  }

  // Attention group g's reads as one IndexedReads entry on its P rank (t.indexed[g], whose
  // bounds choose_indexed checked): its ids copied into the rank's id list (kept between
  // compiles like the reads), its region pairs, its bytes and pieces counted as the listed reads
  // would count them. When the listed plan would merge the entry's first read into the rank's
  // last read, the entry is written out as listed reads at once.
  void add_indexed(uint32_t g, const IndexedGroup& x, const ResolvedGroup& rg) {
    const uint32_t p = x.p_rank;
    RankReads& rr = plan_.ranks[p];
    const uint64_t npairs = rg.regions.size();
    const uint64_t pair_bytes = mul_checked(x.tokens, x.token_bytes, "attention bytes");
    const uint64_t bytes = mul_checked(pair_bytes, npairs, "attention bytes");
    attention_bytes_ = add_checked(attention_bytes_, bytes, "plan bytes");
    rr.bytes += bytes;  // a part of attention_bytes_
    pieces_ += npairs * x.kernel_blocks;  // kernel blocks of the group's tokens: no overflow
    const size_t c = static_cast<size_t>(x.count);
    const size_t at = ids_used_[p];
    if (at + 2 * c > rr.ids.size()) [[unlikely]] {
      if (at + 2 * c > rr.ids.capacity()) rr.ids.reserve(std::max(at + 2 * c, 2 * rr.ids.capacity()));
      rr.ids.resize(at + 2 * c);
    }
    std::memcpy(rr.ids.data() + at, rg.g.local_blocks.data() + x.a0, c * sizeof(uint64_t));
    std::memcpy(rr.ids.data() + at + c, rg.g.remote_blocks.data() + x.b0, c * sizeof(uint64_t));
    ids_used_[p] = at + 2 * c;
    const size_t pb = rr.region_pairs.size();
    for (size_t i = 0; i < rg.regions.size(); ++i) rr.region_pairs.push_back({rg.regions[i], rg.remote_regions[i]});
    // Whether the entry's first read continues the last read issued before it (same regions).
    const uint64_t lo = rg.g.local_blocks[x.a0] * x.local_id_bytes + x.first_token * x.token_bytes;
    const uint64_t ro = rg.g.remote_blocks[x.b0] * x.remote_id_bytes + x.first_token * x.token_bytes;
    RegionPair last{};
    uint64_t lend = 0, rend = 0;
    const bool merges = tail_end(p, last, lend, rend) && last == RegionPair{rg.regions[0], rg.remote_regions[0]} &&
                        lend == lo && rend == ro;
    rr.indexed.push_back({g, used_[p], at, x.count, x.first_token, x.tokens, x.tokens_per_id, x.local_id_bytes,
                          x.remote_id_bytes, x.token_bytes, pb, rr.region_pairs.size()});
    indexed_reads_ += x.runs * npairs;
    if (merges) settle_indexed(p);
  }

 private:
  TransferPlan& plan_;
  std::vector<size_t>& used_;  // per P rank: how many of its vector's elements are this plan's reads
  std::vector<size_t>& ids_used_;  // per P rank: how many of its id list's elements are this plan's
  uint64_t indexed_reads_ = 0;
  bool factored_ = false;
  uint64_t pieces_ = 0;
  uint64_t attention_bytes_ = 0;
  uint64_t mamba_bytes_ = 0;
};


// Every P rank must lay the region out alike, or one rank's offsets would be wrong on another.
void check_remote_region(const PlanContext& ctx, uint32_t region, uint64_t remote_block_len) {
  const EngineMetadata& p0 = ctx.remote.front();
  for (const auto& p : ctx.remote) {
    if (region >= p.regions.size()) [[unlikely]] {
      fail(Status::Incompatible, "P ranks " + s(p0.tp_rank) + " and " + s(p.tp_rank) + " disagree on the region count (" +
                                     s(p0.regions.size()) + " vs " + s(p.regions.size()) + ")");
    }
    if (p.regions[region].region.block_len != remote_block_len ||
        p.kernel_block_size != p0.kernel_block_size) [[unlikely]] {
      fail(Status::Incompatible, "P ranks " + s(p0.tp_rank) + " and " + s(p.tp_rank) +
                                     " disagree on region " + s(region) + " (block_len " +
                                     s(remote_block_len) + " vs " +
                                     s(p.regions[region].region.block_len) + ")");
    }
  }
}

// `region` is D's, `remote_region` the P region holding the same layer (the same index unless
// the stages hold different layer windows).
// Fills `a` (every field: it is the thread's scratch, reused request after request).
void attention_region(const PlanContext& ctx, uint32_t region, uint32_t remote_region, AttentionRegion& a) {
  const EngineMetadata& d = ctx.local;
  const EngineMetadata& p0 = ctx.remote.front();
  a.local_block_len = d.regions[region].region.block_len;
  a.remote_block_len = p0.regions[remote_region].region.block_len;
  const uint64_t lt = region_bytes_per_token(d, region, "D");
  const uint64_t rt = region_bytes_per_token(p0, remote_region, "P");
  check_remote_region(ctx, remote_region, a.remote_block_len);
  a.mla = d.region_is_mla(region);
  if (a.mla && !ctx.mapping.input.use_mla) {
    // An MLA-typed region of a GQA model: the mapping's attention rules split heads, but this
    // region holds one latent replicated on every rank, read whole from one P rank (the one an
    // MLA model reads from). The peer must hold the same latent (validate_pair compares it).
    if (lt != rt) [[unlikely]] {
      fail(Status::Incompatible, "MLA region " + s(region) + " holds " + s(lt) + " bytes per token on D but " +
                                     s(rt) + " on P; an MLA latent does not change with TP");
    }
    a.token_reads.assign(1, AttentionRead{ctx.mapping.mla_source_rank(), 0, 0, lt});
    a.head_bytes_per_token = lt;
    a.local_token_bytes = lt;
    a.remote_token_bytes = rt;
    a.nhd = false;
    return;
  }
  try {
    attention_reads_into(ctx.mapping, lt, rt, a.token_reads);
  } catch (const Error& e) {
    fail(e.status(), "region " + s(region) + " (per token): " + e.what());
  }
  const uint64_t heads = ctx.mapping.input.use_mla ? 1 : ctx.mapping.local_physical_heads;
  a.head_bytes_per_token = lt / heads;
  a.local_token_bytes = lt;
  a.remote_token_bytes = rt;
  a.nhd = attention_layouts(ctx).staging == KvLayout::NHD;
  if (a.nhd) {
    // Equal heads per rank: D reads one P rank's whole token (all heads) into its whole token.
    if (a.token_reads.size() != 1 || a.token_reads[0].local_offset != 0 ||
        a.token_reads[0].remote_offset != 0 || a.token_reads[0].length != lt || lt != rt) {
      fail(Status::Internal, "region " + s(region) + ": NHD reads must cover whole tokens (" +
                                 s(a.token_reads.size()) + " reads, " + s(lt) + " / " + s(rt) +
                                 " bytes per token on D / P)");
    }
  }
}

void add_attention_pieces(PlanBuilder& b, const AttentionRegion& a, uint32_t region, uint32_t rregion,
                          const TokenRun& run, uint64_t lbs, uint64_t rbs) {
  const uint64_t hb = a.head_bytes_per_token;
  const uint64_t lbase = mul_checked(run.local_block, a.local_block_len, "local block offset");
  const uint64_t rbase = mul_checked(run.remote_block, a.remote_block_len, "remote block offset");
  if (a.nhd) {
    // NHD: token t of a block starts at t * (heads x head bytes); a run of tokens over all the
    // rank's heads is one contiguous piece on both sides, whole block or not.
    const AttentionRead& r = a.token_reads.front();
    b.add(r.p_rank, region, add_checked(lbase, run.local_token_begin * a.local_token_bytes, "local read offset"),
          rregion, add_checked(rbase, run.remote_token_begin * a.remote_token_bytes, "remote read offset"),
          mul_checked(run.num_tokens, a.local_token_bytes, "attention run length"), false);
    return;
  }
  const bool whole = run.local_token_begin == 0 && run.remote_token_begin == 0 &&
                     run.num_tokens == lbs && run.num_tokens == rbs;
  for (const AttentionRead& r : a.token_reads) {
    const uint64_t lh = r.local_offset / hb;   // first local head of this read
    const uint64_t rh = r.remote_offset / hb;  // the same head's index in the P block
    const uint64_t nh = r.length / hb;
    if (whole) {  // a head slice of a whole block is contiguous on both sides
      b.add(r.p_rank, region, add_checked(lbase, lh * lbs * hb, "local read offset"), rregion,
            add_checked(rbase, rh * rbs * hb, "remote read offset"), mul_checked(r.length, lbs, "attention read length"),
            false);
      continue;
    }
    const uint64_t len = mul_checked(run.num_tokens, hb, "attention run length");
    for (uint64_t j = 0; j < nh; ++j) {
      // In-block offsets stay below block_len (heads x tokens x bytes), so only the block base
      // can overflow.
      b.add(r.p_rank, region, add_checked(lbase, ((lh + j) * lbs + run.local_token_begin) * hb, "local read offset"),
            rregion, add_checked(rbase, ((rh + j) * rbs + run.remote_token_begin) * hb, "remote read offset"), len,
            false);
    }
  }
}


// The attention geometry of D region `region` and P region `rregion` in `a`. Regions of one model
// usually share it: kept from the last region when block lengths and kind agree (the P ranks
// re-checked for this region), else derived, with have_a cleared while `a` is rewritten so that
// a throw leaves no stale cache. Returns whether it was kept.
bool region_geometry(const PlanContext& ctx, uint32_t region, uint32_t rregion, AttentionRegion& a, bool& have_a) {
  const EngineMetadata& d = ctx.local;
  const EngineMetadata& p0 = ctx.remote.front();
  const bool same = have_a && a.local_block_len == d.regions[region].region.block_len &&
                    a.remote_block_len == p0.regions[rregion].region.block_len &&
                    a.mla == d.region_is_mla(region) && a.mla == p0.region_is_mla(rregion);
  if (same) {
    check_remote_region(ctx, rregion, a.remote_block_len);
    return true;
  }
  have_a = false;
  attention_region(ctx, region, rregion, a);
  have_a = true;
  return false;
}

// Whether one read per token covers a whole token on both sides and tokens lie back to back
// across blocks (NHD, or HND with one head per rank on both sides, MLA included): then a span of
// consecutive ids on both sides is one contiguous piece, whatever its block boundaries.
bool linear_tokens(const PlanContext& ctx, const AttentionRegion& a) {
  if (a.token_reads.size() != 1) return false;
  const AttentionRead& r = a.token_reads.front();
  if (r.local_offset != 0 || r.remote_offset != 0 || r.length != a.local_token_bytes ||
      a.local_token_bytes != a.remote_token_bytes) {
    return false;
  }
  if (a.nhd) return true;
  const bool mla = a.mla;
  return mla || (ctx.mapping.local_physical_heads == 1 && ctx.mapping.remote_physical_heads == 1);
}

// Whether attention group g is read block-indexed (CompileOptions::indexed_reads), filling
// t.indexed[g] (left off otherwise): its segment (indexed_segment) with at least `min_runs` runs,
// no receive-side permutation, no other attention group in its regions, every region linear
// (linear_tokens) with one geometry and one P rank, and the largest ids' blocks inside
// every region on both sides (the context's region sizes). A region the listed path would
// refuse leaves the group to it (false), which reports the error where it always did. `a` and
// `have_a` are compile_body's region geometry cache (add_attention_group's).
bool choose_indexed(const PlanContext& ctx, const Prepared& pre, Trimmed& t, size_t g, uint64_t min_runs, AttentionRegion& a,
                    bool& have_a) {
  const ResolvedGroup& rg = t.groups[g];
  IndexedGroup x;
  if (t.permute || rg.regions.empty() || !indexed_segment(rg.g, min_runs, x)) return false;
  for (size_t h = 0; h < t.groups.size(); ++h) {
    if (h == g || !is_attention_kind(t.groups[h].g.kind)) continue;
    for (uint32_t r : t.groups[h].regions)
      if (std::find(rg.regions.begin(), rg.regions.end(), r) != rg.regions.end()) return false;
  }
  const EngineMetadata& d = ctx.local;
  const EngineMetadata& p0 = ctx.remote.front();
  const uint64_t k = rg.g.local_kernel_blocks_per_id;
  try {
    for (size_t ri = 0; ri < rg.regions.size(); ++ri) {
      const uint32_t region = rg.regions[ri], rregion = rg.remote_regions[ri];
      if (region >= d.regions.size() || rregion >= p0.regions.size()) return false;
      region_geometry(ctx, region, rregion, a, have_a);
      if (!linear_tokens(ctx, a)) return false;
      const uint32_t p = a.token_reads.front().p_rank;
      uint64_t lib = 0, rib = 0;
      if (__builtin_mul_overflow(k, a.local_block_len, &lib) || __builtin_mul_overflow(k, a.remote_block_len, &rib)) return false;
      if (ri == 0) {
        x.p_rank = p;
        x.local_id_bytes = lib;
        x.remote_id_bytes = rib;
        x.token_bytes = a.local_token_bytes;
      } else if (p != x.p_rank || lib != x.local_id_bytes || rib != x.remote_id_bytes || a.local_token_bytes != x.token_bytes) {
        return false;
      }
      // Both sides' ids of tokens_per_id tokens span exactly their id bytes (linear layouts).
      uint64_t tb = 0;
      if (__builtin_mul_overflow(x.tokens_per_id, x.token_bytes, &tb) || tb != lib || tb != rib) return false;
      if (x.p_rank >= ctx.mapping.input.remote_tp) return false;
      const size_t pos = static_cast<size_t>(&remote_rank(ctx, x.p_rank) - ctx.remote.data());
      uint64_t lend = 0, rend = 0;
      if (region >= pre.d_size.size() || pos >= pre.p_size.size() || rregion >= pre.p_size[pos].size() ||
          __builtin_mul_overflow(x.max_local + 1, lib, &lend) || __builtin_mul_overflow(x.max_remote + 1, rib, &rend) ||
          lend > pre.d_size[region] || rend > pre.p_size[pos][rregion]) {
        return false;
      }
    }
  } catch (const Error&) {
    return false;  // the listed path reports it
  }
  x.on = true;
  t.indexed[g] = x;
  return true;
}

void add_attention_group(PlanBuilder& b, const PlanContext& ctx, const ResolvedGroup& rg,
                         std::span<const SpanRun> spans, AttentionRegion& a, bool& have_a) {
  const uint64_t lbs = rg.g.local_tokens_per_block, rbs = rg.g.remote_tokens_per_block;
  // The previous region's linear emission: its P rank, its reads [prev_begin, prev_end) in that
  // rank's list, and what they counted.
  bool prev_linear = false;
  uint32_t prev_rank = 0;
  size_t prev_begin = 0, prev_end = 0;
  uint64_t prev_pieces = 0, prev_bytes = 0;
  for (size_t ri = 0; ri < rg.regions.size(); ++ri) {
    const uint32_t region = rg.regions[ri], rregion = rg.remote_regions[ri];
    const bool same = region_geometry(ctx, region, rregion, a, have_a);
    if (linear_tokens(ctx, a)) {
      const uint32_t p = a.token_reads.front().p_rank;
      const uint64_t lt = a.local_token_bytes, rt = a.remote_token_bytes;
      // A region laid out like the previous one (same block lengths on both sides, checked
      // above, and the same P rank) gets the previous region's reads with its own region
      // indexes: the same offsets, lengths and coalescing (reads of different regions never
      // merge, so the copy starts no differently than a fresh emission would).
      if (same && prev_linear && prev_rank == p && b.has_rank(p)) {
        b.repeat(p, prev_begin, prev_end, region, rregion, prev_pieces, prev_bytes);
        continue;
      }
      prev_linear = b.has_rank(p);
      prev_rank = p;
      prev_begin = b.size(p);
      const uint64_t pieces0 = b.pieces(), bytes0 = b.attention_bytes();
      b.add_spans(p, region, rregion, spans, a.local_block_len, a.remote_block_len, lt, rt);
      prev_end = b.size(p);
      prev_pieces = b.pieces() - pieces0;
      prev_bytes = b.attention_bytes() - bytes0;
      continue;
    }
    prev_linear = false;
    for (const SpanRun& run : spans) {
      for_each_block_run(run, lbs, rbs, [&](const TokenRun& tr) {
        add_attention_pieces(b, a, region, rregion, tr, lbs, rbs);
      });
    }
  }
}

// The Mamba group from the context's verified template: per page, block id x stride and a copy
// of each P rank's template reads, the same reads in the same order as add_mamba_group. Emits
// nothing and returns false when the template cannot serve the group (no valid template, a
// region whose page does not fit or that P lacks, a P rank past P's TP size, a page offset that
// could overflow): add_mamba_group then runs and reports any error. Records a MambaHint for the
// group (where each template rank's reads of it begin) when no page's reads coalesced into
// earlier ones.
bool add_mamba_group_template(PlanBuilder& b, const Prepared& pre, uint32_t g, const ResolvedGroup& rg,
                              const GroupTrim& t, std::vector<MambaHint>& hints, std::vector<size_t>& hint_index) {
  const MambaTemplate& m = pre.mamba;
  if (!m.valid || t.states.empty()) return false;
  uint64_t max_l = 0, max_r = 0;
  for (const StatePair& sp : t.states) {
    max_l = std::max(max_l, sp.local_block);
    max_r = std::max(max_r, sp.remote_block);
  }
  uint64_t x = 0;
  if (__builtin_mul_overflow(max_l, m.max_local_stride, &x) || __builtin_add_overflow(x, m.local_page, &x) ||
      __builtin_mul_overflow(max_r, m.max_remote_stride, &x) || __builtin_add_overflow(x, m.max_remote_extent, &x)) {
    return false;
  }
  for (size_t ri = 0; ri < rg.regions.size(); ++ri) {
    const uint32_t region = rg.regions[ri], rregion = rg.remote_regions[ri];
    if (region >= m.local_stride.size() || m.local_stride[region] == 0) return false;
    for (size_t j = 0; j < m.ranks.size(); ++j) {
      if (rregion >= m.remote_stride[j].size() || m.remote_stride[j][rregion] == 0) return false;
    }
  }
  for (const auto& k : m.ranks) {
    if (!b.has_rank(k.p_rank)) return false;
  }
  const size_t at = hint_index.size();
  bool clean = true;
  for (size_t j = 0; j < m.ranks.size(); ++j) {
    size_t first = 0;
    clean &= b.add_template_group(m, j, rg, t.states, first);
    hint_index.push_back(first);
  }
  for (size_t p = 0; p < rg.regions.size() * t.states.size(); ++p) b.count_mamba(m.pieces, m.bytes);
  if (clean && !rg.regions.empty()) {
    hints.push_back({g, at});
  } else {
    hint_index.resize(at);
  }
  return true;
}

void add_mamba_group(PlanBuilder& b, const PlanContext& ctx, const ResolvedGroup& rg,
                     const GroupTrim& t, std::vector<MambaRead>& mreads, bool& have_mreads,
                     std::vector<uint64_t>& remote_stride) {
  const EngineMetadata& d = ctx.local;
  if (!have_mreads) {
    mreads = mamba_reads(*ctx.remote_mamba, *ctx.local_mamba, d.tp_rank);
    have_mreads = true;
  }
  // Each read's P page stride, found on the region's first state and reused for the others
  // (the same checks in the same order as per state, once).
  remote_stride.resize(mreads.size());
  for (size_t ri = 0; ri < rg.regions.size(); ++ri) {
    const uint32_t region = rg.regions[ri], rregion = rg.remote_regions[ri];
    const uint64_t ls = mamba_page_stride(d, region, ctx.local_mamba->page_bytes(), "D");
    // Page by page, so the parts of one state from one P rank can coalesce.
    for (size_t si = 0; si < t.states.size(); ++si) {
      const StatePair& sp = t.states[si];
      const uint64_t lpage = mul_checked(sp.local_block, ls, "local page");
      for (size_t k = 0; k < mreads.size(); ++k) {
        const MambaRead& r = mreads[k];
        if (si == 0) {
          const EngineMetadata& p = remote_rank(ctx, r.p_rank);
          if (rregion >= p.regions.size()) [[unlikely]] {
            fail(Status::Incompatible, "P rank " + s(p.tp_rank) + " registers " + s(p.regions.size()) +
                                           " regions, fewer than the region " + s(rregion) + " it is read from");
          }
          remote_stride[k] = mamba_page_stride(p, rregion, ctx.remote_mamba->page_bytes(), "P");
        }
        const uint64_t rpage = mul_checked(sp.remote_block, remote_stride[k], "remote page");
        b.add(r.p_rank, region, add_checked(lpage, r.local_offset, "local read offset"), rregion,
              add_checked(rpage, r.remote_offset, "remote read offset"), r.length, true);
      }
    }
  }
}

// Per-thread working memory of compile / validate (see Trimmed).
Trimmed& scratch() {
  thread_local Trimmed t;
  return t;
}

std::vector<PlanGroupView> views_of(const std::vector<PlanGroup>& groups) {
  std::vector<PlanGroupView> v;
  v.reserve(groups.size());
  for (const PlanGroup& g : groups) v.push_back(view_of(g));
  return v;
}

}  // namespace

PlanGroupView view_of(const PlanGroup& g) {
  PlanGroupView v;
  v.kind = g.trim.kind;
  v.cache_mode = g.trim.cache_mode;
  v.local_blocks = g.trim.local_blocks;
  v.remote_blocks = g.trim.remote_blocks;
  v.local_tokens_per_block = g.trim.local_tokens_per_block;
  v.remote_tokens_per_block = g.trim.remote_tokens_per_block;
  v.remote_computed_tokens = g.trim.remote_computed_tokens;
  v.local_hit_tokens = g.trim.local_hit_tokens;
  v.sliding_window = g.trim.sliding_window;
  v.local_first_block = g.trim.local_first_block;
  v.remote_first_block = g.trim.remote_first_block;
  v.local_kernel_blocks_per_id = g.trim.local_kernel_blocks_per_id;
  v.remote_kernel_blocks_per_id = g.trim.remote_kernel_blocks_per_id;
  v.regions = g.regions;
  v.layers = g.layers;
  return v;
}

PlanGroup owned_copy(const PlanGroupView& v) {
  PlanGroup g;
  g.trim.kind = v.kind;
  g.trim.cache_mode = v.cache_mode;
  g.trim.local_blocks.assign(v.local_blocks.begin(), v.local_blocks.end());
  g.trim.remote_blocks.assign(v.remote_blocks.begin(), v.remote_blocks.end());
  g.trim.local_tokens_per_block = v.local_tokens_per_block;
  g.trim.remote_tokens_per_block = v.remote_tokens_per_block;
  g.trim.remote_computed_tokens = v.remote_computed_tokens;
  g.trim.local_hit_tokens = v.local_hit_tokens;
  g.trim.sliding_window = v.sliding_window;
  g.trim.local_first_block = v.local_first_block;
  g.trim.remote_first_block = v.remote_first_block;
  g.trim.local_kernel_blocks_per_id = v.local_kernel_blocks_per_id;
  g.trim.remote_kernel_blocks_per_id = v.remote_kernel_blocks_per_id;
  g.regions.assign(v.regions.begin(), v.regions.end());
  g.layers.assign(v.layers.begin(), v.layers.end());
  return g;
}

void validate_plan_context(const PlanContext& ctx) {
  plan_detail::check_context(ctx);
  plan_detail::check_peer_agreement(ctx);
}

PlanContext make_plan_context(EngineMetadata local, std::vector<EngineMetadata> remote,
                              std::optional<MambaState> local_mamba,
                              std::optional<MambaState> remote_mamba) {
  if (remote.empty()) {
    fail(Status::InvalidArgument,
         "make_plan_context: no P rank metadata; pass the metadata of every P rank of the engine");
  }
  PlanContext ctx;
  TpMappingInput in;
  in.local_tp = local.tp_size;
  in.local_rank = local.tp_rank;
  in.remote_tp = remote.front().tp_size;
  in.total_kv_heads = local.total_kv_heads;
  in.use_mla = local.use_mla;
  in.has_mamba = local.is_hybrid();
  ctx.mapping = compute_tp_mapping(in);
  ctx.local = std::move(local);
  ctx.remote = std::move(remote);
  ctx.local_mamba = std::move(local_mamba);
  ctx.remote_mamba = std::move(remote_mamba);
  return ctx;
}

PlanContextVerdict judge_plan_context(const PlanContext& ctx) {
  PlanContextVerdict v;
  try {
    plan_detail::check_context(ctx);
  } catch (const Error& e) {
    v.context_status = e.status();
    v.context_message = e.what();
    return v;  // compile never gets past a context error
  }
  try {
    plan_detail::check_peer_agreement(ctx);
  } catch (const Error& e) {
    v.peer_status = e.status();
    v.peer_message = e.what();
    return v;
  }
  v.prepared = prepare_context(ctx);
  return v;
}

namespace {

void compile_body(const PlanContext& ctx, std::span<const PlanGroupView> groups, TransferPlan& plan,
                  const PlanContextVerdict* verdict, const CompileOptions& options) {
  Trimmed& t = scratch();
  plan.stats = PlanStats{};
  t.hints.clear();
  t.hint_index.clear();
  const Prepared* pre = verdict != nullptr ? verdict->prepared.get() : nullptr;
  resolve(ctx, groups, t, verdict);
  AttentionRegion& a = t.attention;  // its token reads keep their capacity between requests
  bool have_a = false;
  // Block-indexed groups are chosen before trimming, which then skips their walk. Only with the
  // context's verdict (the region sizes), and only when the context and the peer passed it (a
  // refused context reports its error below, with the walk run as always).
  if (options.indexed_reads && pre != nullptr && verdict->context_status == Status::Ok && verdict->peer_status == Status::Ok) {
    for (size_t g = 0; g < t.groups.size(); ++g)
      if (is_attention_kind(t.groups[g].g.kind)) choose_indexed(ctx, *pre, t, g, options.indexed_min_runs, a, have_a);
  }
  trim_groups(t);
  // resolve() ran check_context; the handshake re-check comes after the request's own errors.
  if (verdict == nullptr) {
    plan_detail::check_peer_agreement(ctx);
  } else if (verdict->peer_status != Status::Ok) {
    fail(verdict->peer_status, verdict->peer_message);
  }

  const EngineMetadata& d = ctx.local;
  plan.d_engine_id = d.engine_id;
  plan.p_engine_id = ctx.remote.front().engine_id;
  plan.d_rank = d.tp_rank;
  plan.d_tp = d.tp_size;
  plan.p_tp = ctx.mapping.input.remote_tp;
  {
    const EngineMetadata& p0 = ctx.remote.front();
    plan.d_pp_size = d.pp_size;
    plan.d_pp_rank = d.pp_rank;
    plan.p_pp_size = p0.pp_size;
    plan.p_pp_rank = p0.pp_rank;
    // Both windows overlap (validate_pair, checked above): their intersection.
    plan.layer_begin = std::max(d.layer_begin, p0.layer_begin);
    const uint64_t end = std::min(d.layer_end_bound(), p0.layer_end_bound());
    plan.layer_end = end == (uint64_t{1} << 32) ? kLayerEndOpen : static_cast<uint32_t>(end);
  }
  plan.notify_ranks = ctx.mapping.notify_ranks;
  plan.notifications_per_p_rank = notifications_expected_per_request(plan.p_tp, plan.d_tp);
  plan.zero.resize(t.groups.size());

  plan.permute = block_permute(ctx, {t.staging, t.permute});
  PlanBuilder b(plan, plan.p_tp, t.rank_used, t.rank_ids_used, options.region_repeats);
  bool have_mreads = false;
  for (size_t g = 0; g < t.groups.size(); ++g) {
    const ResolvedGroup& rg = t.groups[g];
    const GroupTrim& mt = t.mamba[g];
    GroupZero& z = plan.zero[g];
    z.group = static_cast<uint32_t>(g);
    z.kind = rg.g.kind;
    z.regions.assign(rg.regions.begin(), rg.regions.end());
    std::swap(z.zero, t.zero[g]);
    z.unfilled_states = mt.unfilled_states;
    const std::span<const SpanRun> spans(t.spans.data() + t.span_begin[g],
                                         t.span_begin[g + 1] - t.span_begin[g]);
    z.permute_blocks.clear();
    z.permute_regions.clear();
    if (plan.permute.active() && is_attention_kind(rg.g.kind)) {
      for (uint32_t region : rg.regions)
        if (!d.region_is_mla(region)) z.permute_regions.push_back(region);
      if (!z.permute_regions.empty()) {
        try {
          received_blocks(spans, rg.g.local_tokens_per_block, rg.g.local_hit_tokens, plan.permute, z.permute_blocks);
        } catch (const Error& e) {
          plan.ranks.clear();
          fail(e.status(), "group " + s(g) + " (" + group_kind_name(rg.g.kind) + "): " + e.what());
        }
      }
    }
    if (spans.empty() && mt.states.empty() && !t.indexed[g].on) continue;
    try {
      if (t.indexed[g].on) {
        b.add_indexed(static_cast<uint32_t>(g), t.indexed[g], rg);
      } else if (is_attention_kind(rg.g.kind)) {
        add_attention_group(b, ctx, rg, spans, a, have_a);
      } else {
        if (pre == nullptr ||
            !add_mamba_group_template(b, *pre, static_cast<uint32_t>(g), rg, mt, t.hints, t.hint_index)) {
          add_mamba_group(b, ctx, rg, mt, t.mreads, have_mreads, t.remote_stride);
        }
      }
    } catch (const Error& e) {
      plan.ranks.clear();
      fail(e.status(), "group " + s(g) + " (" + group_kind_name(rg.g.kind) + "): " + e.what());
    }
  }
  b.finish();
  check_coverage(plan, ctx, t, pre);
}

// The plan's per-rank read vectors are kept from one compile to the next (PlanBuilder clears
// them, keeping their capacity); on any error they are emptied, so `plan` is never a half plan.
void compile_into(const PlanContext& ctx, std::span<const PlanGroupView> groups, TransferPlan& plan,
                  const PlanContextVerdict* verdict, const CompileOptions& options = {}) {
  try {
    compile_body(ctx, groups, plan, verdict, options);
  } catch (...) {
    plan.ranks.clear();
    throw;
  }
}

}  // namespace

void compile_transfer_plan_into(const PlanContext& ctx, std::span<const PlanGroupView> groups,
                                TransferPlan& plan) {
  compile_into(ctx, groups, plan, nullptr);
}

void compile_transfer_plan_into(const PlanContext& ctx, std::span<const PlanGroupView> groups,
                                TransferPlan& plan, const PlanContextVerdict& verdict) {
  compile_into(ctx, groups, plan, &verdict);
}

void compile_transfer_plan_into(const PlanContext& ctx, std::span<const PlanGroupView> groups,
                                TransferPlan& plan, const PlanContextVerdict& verdict, const CompileOptions& options) {
  compile_into(ctx, groups, plan, &verdict, options);
}

namespace {

[[noreturn, gnu::cold, gnu::noinline]] void fail_indexed(const RankReads& rr, size_t k, const std::string& why) {
  const IndexedReads& x = rr.indexed[k];
  fail(Status::InvalidArgument, "P rank " + s(rr.p_rank) + ": indexed reads " + s(k) + " (group " + s(x.group) + ", " +
                                    s(x.count) + " ids from " + s(x.ids_begin) + ", region pairs " + s(x.pairs_begin) +
                                    ".." + s(x.pairs_end) + ", at read " + s(x.at) + ") " + why);
}

}  // namespace

void check_repeats(const RankReads& rr) {
  uint64_t prev_end = 0;
  for (size_t k = 0; k < rr.repeats.size(); ++k) {
    const RegionRepeat& r = rr.repeats[k];
    if (r.begin >= r.end || r.end > rr.reads.size() || r.end < prev_end) [[unlikely]] {
      fail(Status::InvalidArgument, "P rank " + s(rr.p_rank) + ": region repeat " + s(k) + " copies reads " + s(r.begin) +
                                        ".." + s(r.end) + " of " + s(rr.reads.size()) + " listed" +
                                        (r.end < prev_end ? " before the previous repeat's position " + s(prev_end) : "") +
                                        " (a repeat needs begin < end <= the listed reads, ends non-decreasing)");
    }
    prev_end = r.end;
  }
  uint64_t prev_at = 0;
  for (size_t k = 0; k < rr.indexed.size(); ++k) {
    const IndexedReads& x = rr.indexed[k];
    uint64_t ids_end = 0, span = 0, last = 0;
    if (x.count == 0 || __builtin_mul_overflow(x.count, 2, &ids_end) || __builtin_add_overflow(x.ids_begin, ids_end, &ids_end) ||
        ids_end > rr.ids.size()) [[unlikely]] {
      fail_indexed(rr, k, "names ids past the rank's " + s(rr.ids.size()) + " (an entry needs 2 x count >= 2 of them)");
    }
    if (x.pairs_begin >= x.pairs_end || x.pairs_end > rr.region_pairs.size()) [[unlikely]] {
      fail_indexed(rr, k, "names region pairs past the rank's " + s(rr.region_pairs.size()) + " (an entry needs at least one)");
    }
    // Every id reads at least one token and none past its own: first_token < tokens_per_id and
    // (count - 1) x tokens_per_id < first_token + tokens <= count x tokens_per_id.
    if (x.tokens_per_id == 0 || x.first_token >= x.tokens_per_id || x.tokens == 0 || x.token_bytes == 0 ||
        __builtin_add_overflow(x.first_token, x.tokens, &span) || __builtin_mul_overflow(x.count - 1, x.tokens_per_id, &last) ||
        span <= last || span - last > x.tokens_per_id) [[unlikely]] {
      fail_indexed(rr, k, "reads tokens " + s(x.first_token) + "..+" + s(x.tokens) + " of ids of " + s(x.tokens_per_id) +
                              " tokens, " + s(x.token_bytes) +
                              " bytes each (every id must read at least one of its own tokens, tokens and bytes > 0)");
    }
    if (x.at > rr.reads.size() || x.at < prev_at) [[unlikely]] {
      fail_indexed(rr, k, "is issued at listed read " + s(x.at) + " of " + s(rr.reads.size()) +
                              (x.at < prev_at ? ", before the previous entry's " + s(prev_at) : "") +
                              " (positions <= the listed reads, non-decreasing)");
    }
    prev_at = x.at;
  }
}

namespace {

// How many reads one region pair of entry x issues: one per run of ids whose reads continue each
// other on both sides (for_each_indexed_read's rule, modulo 2^64 alike).
size_t indexed_runs(const RankReads& rr, const IndexedReads& x) {
  const uint64_t* d = rr.ids.data() + x.ids_begin;
  const uint64_t* p = d + x.count;
  const uint64_t tb = x.token_bytes, tpi = x.tokens_per_id;
  // Every read but the last reads its id to its last token, so it ends where its id's blocks end.
  uint64_t lend = d[0] * x.local_id_bytes + tpi * tb, rend = p[0] * x.remote_id_bytes + tpi * tb;
  size_t runs = 1;
  for (uint64_t i = 1; i < x.count; ++i) {
    const uint64_t lo = d[i] * x.local_id_bytes, ro = p[i] * x.remote_id_bytes;
    runs += static_cast<size_t>(lend != lo || rend != ro);
    lend = lo + tpi * tb;
    rend = ro + tpi * tb;
  }
  return runs;
}

}  // namespace

size_t read_count(const RankReads& rr) {
  check_repeats(rr);
  size_t n = rr.reads.size();
  for (const RegionRepeat& r : rr.repeats) n += static_cast<size_t>(r.end - r.begin);
  for (const IndexedReads& x : rr.indexed) n += indexed_runs(rr, x) * static_cast<size_t>(x.pairs_end - x.pairs_begin);
  return n;
}

void expand_reads(const RankReads& rr, std::vector<PlanRead>& out) {
  out.resize(read_count(rr));
  PlanRead* o = out.data();
  for_each_read(rr, [&](const PlanRead& r) { *o++ = r; });
}

void expand_plan(TransferPlan& plan) {
  std::vector<PlanRead> flat;
  for (RankReads& rr : plan.ranks) {
    if (!rr.factored()) continue;
    expand_reads(rr, flat);
    std::swap(rr.reads, flat);
    rr.repeats.clear();
    rr.indexed.clear();
    rr.ids.clear();
    rr.region_pairs.clear();
  }
}

TransferPlan compile_transfer_plan(const PlanContext& ctx, const std::vector<PlanGroup>& groups) {
  TransferPlan plan;
  compile_transfer_plan_into(ctx, views_of(groups), plan);
  return plan;
}

void validate_transfer_plan_views(const TransferPlan& plan, const PlanContext& ctx,
                                  std::span<const PlanGroupView> groups) {
  Trimmed& t = scratch();
  t.hints.clear();
  t.hint_index.clear();
  resolve(ctx, groups, t);
  trim_groups(t);
  plan_detail::check_peer_agreement(ctx);
  check_coverage(plan, ctx, t);
}

void validate_transfer_plan(const TransferPlan& plan, const PlanContext& ctx,
                            const std::vector<PlanGroup>& groups) {
  validate_transfer_plan_views(plan, ctx, views_of(groups));
}

}  // namespace pdkv::core
