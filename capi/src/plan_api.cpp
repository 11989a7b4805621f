// Transfer plans (core/transfer_plan.hpp): a plan context handle built from the D metadata, the
// P metadata of every P rank, an optional TP mapping and the Mamba states of both geometries;
// compilation of one request's groups into a validated plan handle; its reads per P rank,
// notifications, receive-side zeroing, statistics and JSON dump.
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "boundary.hpp"
#include "model_geometry_handles.hpp"
#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "plan_handles.hpp"
#include "struct_sizes.hpp"
#include "structs.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

namespace {

using pdkv::capi::kGroupZeroMinSize;
using pdkv::capi::kPlanContextParamsMinSize;
using pdkv::capi::kPlanGroupMinSize;
using pdkv::capi::kPlanInfoMinSize;

using pdkv::capi::kGroupTrimInputMinSize;

// Fails with NullPointer naming "<name>.<field>" when p is NULL but count > 0; the name is built
// only on failure.
void require_array(const void* p, size_t count, size_t index, const char* field) {
  if (count > 0 && p == nullptr) {
    core::fail(core::Status::NullPointer, "groups[" + std::to_string(index) + "]." + field + " is NULL");
  }
}

// The groups as views over the caller's arrays: block ids and region lists are read in place
// during the call, never copied. The groups array's stride is groups[0].struct_size (a caller
// compiled against an older 2.x header, with a smaller pdkv_plan_group_t, passes an array of the
// smaller struct);
// every element must declare the same. A struct of the current size is read where it lies (all of
// its fields are the caller's); an older, smaller one through a zero-padded copy, so that a field
// past the caller's struct is never read. Fills `out` (cleared first).
std::span<const core::PlanGroupView> groups_from_c(const pdkv_plan_group_t* groups, size_t n_groups,
                                                   std::vector<core::PlanGroupView>& out) {
  out.clear();
  if (n_groups == 0) return out;
  require_non_null(groups, "groups");
  const size_t stride = groups[0].struct_size;
  pdkv::capi::require_struct_size(stride, kPlanGroupMinSize, sizeof(pdkv_plan_group_t), "pdkv_plan_group_t");
  core::mul_checked(n_groups, stride, "groups array bytes");
  const auto* base = reinterpret_cast<const unsigned char*>(groups);
  out.reserve(n_groups);
  for (size_t i = 0; i < n_groups; ++i) {
    size_t size_i = 0;
    std::memcpy(&size_i, base + i * stride, sizeof(size_t));
    if (size_i != stride) {
      core::fail(core::Status::StructSize, "groups[" + std::to_string(i) + "].struct_size = " +
                                               std::to_string(size_i) + " differs from groups[0].struct_size = " +
                                               std::to_string(stride) + ": every element must be sizeof(pdkv_plan_group_t)");
    }
    pdkv_plan_group_t g_copy;
    const pdkv_plan_group_t* gp = reinterpret_cast<const pdkv_plan_group_t*>(base + i * stride);
    if (stride != sizeof(pdkv_plan_group_t)) {
      std::memset(static_cast<void*>(&g_copy), 0, sizeof g_copy);
      std::memcpy(static_cast<void*>(&g_copy), gp, stride);
      gp = &g_copy;
    }
    const pdkv_plan_group_t& g = *gp;
    if (g.field_mask != 0) [[unlikely]] {
      pdkv::capi::check_field_mask(g.field_mask, 0, ("groups[" + std::to_string(i) + "] (pdkv_plan_group_t)").c_str());
    }
    if (g.trim == nullptr) {
      core::fail(core::Status::NullPointer, "groups[" + std::to_string(i) + "].trim is NULL");
    }
    pdkv_group_trim_input_t t_copy;
    const pdkv_group_trim_input_t* tp = g.trim;
    if (tp->struct_size == sizeof(pdkv_group_trim_input_t)) {
      pdkv::capi::check_field_mask(tp->field_mask, pdkv::capi::kTrimInputFields, "pdkv_group_trim_input_t");
    } else {
      t_copy = pdkv::capi::read_options(*tp, kGroupTrimInputMinSize, "pdkv_group_trim_input_t",
                                        pdkv::capi::kTrimInputFields);
      tp = &t_copy;
    }
    const pdkv_group_trim_input_t& t = *tp;
    const bool set_kbpi = (t.field_mask & PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID) != 0;
    const bool set_tpb = (t.field_mask & PDKV_TRIM_FIELD_TOKENS_PER_BLOCK) != 0;
    core::PlanGroupView v;
    if (t.kind < PDKV_GROUP_ATTENTION || t.kind > PDKV_GROUP_MAMBA || t.cache_mode < 0 || t.cache_mode > 2 ||
        (set_kbpi && (t.local_kernel_blocks_per_id == 0 || t.remote_kernel_blocks_per_id == 0)) ||
        (set_tpb && (t.local_tokens_per_block == 0 || t.remote_tokens_per_block == 0))) [[unlikely]] {
      const std::string name = "groups[" + std::to_string(i) + "].trim";
      v.kind = pdkv::capi::group_kind_from_c(t.kind, (name + ".kind").c_str());
      v.cache_mode = pdkv::capi::cache_mode_from_c(t.cache_mode, (name + ".cache_mode").c_str());
      if (set_kbpi) {
        pdkv::capi::kernel_blocks_per_id(t.local_kernel_blocks_per_id, (name + ".local_kernel_blocks_per_id").c_str());
        pdkv::capi::kernel_blocks_per_id(t.remote_kernel_blocks_per_id, (name + ".remote_kernel_blocks_per_id").c_str());
      }
      if (set_tpb) {
        pdkv::capi::tokens_per_block(t.local_tokens_per_block, (name + ".local_tokens_per_block").c_str());
        pdkv::capi::tokens_per_block(t.remote_tokens_per_block, (name + ".remote_tokens_per_block").c_str());
      }
    }
    v.kind = static_cast<core::GroupKind>(t.kind);
    v.cache_mode = static_cast<core::MambaCacheMode>(t.cache_mode);
    require_array(t.local_blocks, t.num_local_blocks, i, "trim.local_blocks");
    require_array(t.remote_blocks, t.num_remote_blocks, i, "trim.remote_blocks");
    if (t.num_local_blocks > 0) v.local_blocks = {t.local_blocks, t.num_local_blocks};
    if (t.num_remote_blocks > 0) v.remote_blocks = {t.remote_blocks, t.num_remote_blocks};
    // Unset: 0, which the core fills from the metadata.
    v.local_tokens_per_block = set_tpb ? t.local_tokens_per_block : 0;
    v.remote_tokens_per_block = set_tpb ? t.remote_tokens_per_block : 0;
    v.remote_computed_tokens = t.remote_computed_tokens;
    v.local_hit_tokens = t.local_hit_tokens;
    v.sliding_window = t.sliding_window;
    if (t.field_mask & PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK) v.local_first_block = t.local_first_block;
    v.remote_first_block = t.remote_first_block;
    if (set_kbpi) {
      v.local_kernel_blocks_per_id = t.local_kernel_blocks_per_id;
      v.remote_kernel_blocks_per_id = t.remote_kernel_blocks_per_id;
    }
    require_array(g.regions, g.num_regions, i, "regions");
    if (g.num_regions > 0) v.regions = {g.regions, g.num_regions};
    // Zero past an older caller's struct_size (the copy above): no layers.
    require_array(g.layers, g.num_layers, i, "layers");
    if (g.num_layers > 0) v.layers = {g.layers, g.num_layers};
    out.push_back(v);
  }
  return out;
}

// groups_from_c into a per-thread vector (calls that have no plan handle to keep it in).
std::span<const core::PlanGroupView> groups_from_c(const pdkv_plan_group_t* groups, size_t n_groups) {
  thread_local std::vector<core::PlanGroupView> out;
  return groups_from_c(groups, n_groups, out);
}

std::optional<core::MambaState> mamba_of(const pdkv_geometry_t* g) {
  if (g == nullptr || g->geometry.mamba.type == core::MambaType::None) return std::nullopt;
  return g->geometry.mamba;
}

// The C API hands out the plan's own read arrays (no copy per compile): core::PlanRead and
// pdkv_plan_read_t are the same standard-layout record, field for field.
static_assert(sizeof(core::PlanRead) == sizeof(pdkv_plan_read_t));
static_assert(std::is_standard_layout_v<core::PlanRead> && std::is_trivially_copyable_v<core::PlanRead>);
static_assert(offsetof(core::PlanRead, local_region) == offsetof(pdkv_plan_read_t, local_region));
static_assert(offsetof(core::PlanRead, local_offset) == offsetof(pdkv_plan_read_t, local_offset));
static_assert(offsetof(core::PlanRead, remote_region) == offsetof(pdkv_plan_read_t, remote_region));
static_assert(offsetof(core::PlanRead, remote_offset) == offsetof(pdkv_plan_read_t, remote_offset));
static_assert(offsetof(core::PlanRead, length) == offsetof(pdkv_plan_read_t, length));

// Zero ranges likewise.
static_assert(sizeof(core::ZeroRange) == sizeof(pdkv_zero_range_t));
static_assert(std::is_standard_layout_v<core::ZeroRange> && std::is_trivially_copyable_v<core::ZeroRange>);
static_assert(offsetof(core::ZeroRange, block) == offsetof(pdkv_zero_range_t, block));
static_assert(offsetof(core::ZeroRange, token_begin) == offsetof(pdkv_zero_range_t, token_begin));
static_assert(offsetof(core::ZeroRange, token_end) == offsetof(pdkv_zero_range_t, token_end));

const pdkv_plan_read_t* c_reads(const std::vector<core::PlanRead>& reads) {
  return reads.empty() ? nullptr : reinterpret_cast<const pdkv_plan_read_t*>(reads.data());
}

}  // namespace

// Fills the handle's C views of its compiled plan (shared with engine_level_api.cpp).
void pdkv::capi::refresh_plan_views(pdkv_transfer_plan& h) {
  h.read_ranks.clear();
  for (const auto& rr : h.plan.ranks) h.read_ranks.push_back(rr.p_rank);
  const std::lock_guard<std::mutex> lock(h.expand_mutex);
  if (h.expanded.size() < h.plan.ranks.size()) h.expanded.resize(h.plan.ranks.size());
  h.expanded_ready.assign(h.plan.ranks.size(), 0);
}

pdkv_transfer_plan_t* pdkv::capi::finish_plan(std::unique_ptr<pdkv_transfer_plan> h) {
  refresh_plan_views(*h);
  return h.release();
}

namespace {
using pdkv::capi::finish_plan;
}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_plan_context_new(const pdkv_plan_context_params_t* params, pdkv_plan_context_t** out,
                                             pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(params, "params");
    require_non_null(out, "out");
    *out = nullptr;
    const pdkv_plan_context_params_t copy =
        pdkv::capi::read_options(*params, kPlanContextParamsMinSize, "pdkv_plan_context_params_t", 0);
    params = &copy;
    require_non_null(params->local, "pdkv_plan_context_params_t.local");
    if (params->num_remote == 0) {
      core::fail(core::Status::InvalidArgument,
                 "pdkv_plan_context_params_t.num_remote is 0: pass the metadata of every P rank of the engine");
    }
    require_non_null(params->remote, "pdkv_plan_context_params_t.remote");
    if ((params->local_geometry == nullptr) != (params->remote_geometry == nullptr)) {
      core::fail(core::Status::InvalidArgument,
                 std::string("pdkv_plan_context_params_t: only the ") +
                     (params->local_geometry ? "local" : "remote") +
                     " geometry is given: pass both (Mamba plans) or neither (pure attention plans)");
    }
    auto h = std::make_unique<pdkv_plan_context>();
    std::vector<core::EngineMetadata> remote;
    remote.reserve(params->num_remote);
    for (size_t i = 0; i < params->num_remote; ++i) {
      const pdkv_engine_metadata_t* r = params->remote[i];
      require_non_null(r, ("pdkv_plan_context_params_t.remote[" + std::to_string(i) + "]").c_str());
      if (r->md.tp_size != params->remote[0]->md.tp_size) {
        core::fail(core::Status::InvalidArgument,
                   "remote[" + std::to_string(i) + "].tp_size = " + std::to_string(r->md.tp_size) +
                       " differs from remote[0].tp_size = " + std::to_string(params->remote[0]->md.tp_size) +
                       ": the P ranks must belong to one engine");
      }
      // The same P rank twice (e.g. one metadata listed twice) would only fail at compile time;
      // refuse it here, naming the rank and both positions.
      for (size_t j = 0; j < i; ++j) {
        if (params->remote[j]->md.tp_rank == r->md.tp_rank) {
          core::fail(core::Status::InvalidArgument,
                     "pdkv_plan_context_params_t.remote[" + std::to_string(j) + "] and remote[" + std::to_string(i) +
                         "] are both P rank " + std::to_string(r->md.tp_rank) +
                         ": pass the metadata of each P rank once");
        }
      }
      remote.push_back(r->md);
    }
    if (params->permute_on_receive > 1) {
      core::fail(core::Status::InvalidArgument, "pdkv_plan_context_params_t.permute_on_receive = " +
                                                    std::to_string(params->permute_on_receive) + " is not 0 or 1");
    }
    core::PlanContext& ctx = h->ctx;
    if (params->mapping != nullptr) {
      ctx.local = params->local->md;
      ctx.remote = std::move(remote);
      ctx.mapping = params->mapping->mapping;
      ctx.local_mamba = mamba_of(params->local_geometry);
      ctx.remote_mamba = mamba_of(params->remote_geometry);
    } else {
      ctx = core::make_plan_context(params->local->md, std::move(remote), mamba_of(params->local_geometry),
                                    mamba_of(params->remote_geometry));
    }
    ctx.permute_on_receive = params->permute_on_receive == 1;
    h->verdict = core::judge_plan_context(ctx);
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_plan_context_mapping(const pdkv_plan_context_t* ctx, pdkv_tp_mapping_t** out,
                                                 pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(ctx, "ctx");
    require_non_null(out, "out");
    *out = nullptr;
    const core::TpMapping& m = ctx->ctx.mapping;
    *out = new pdkv_tp_mapping{m, core::notifications_expected_per_request(m.input.remote_tp, m.input.local_tp)};
  });
}

PDKV_API void pdkv_plan_context_free(pdkv_plan_context_t* ctx) { delete ctx; }

PDKV_API pdkv_status_t pdkv_transfer_plan_compile(const pdkv_plan_context_t* ctx, const pdkv_plan_group_t* groups,
                                                  size_t n_groups, pdkv_transfer_plan_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(ctx, "ctx");
    require_non_null(out, "out");
    *out = nullptr;
    const auto g = groups_from_c(groups, n_groups);
    auto h = std::make_unique<pdkv_transfer_plan>();
    core::compile_transfer_plan_into(ctx->ctx, g, h->plan, ctx->verdict, pdkv::capi::kCompileOptions);
    *out = finish_plan(std::move(h));
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_new(pdkv_transfer_plan_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    *out = finish_plan(std::make_unique<pdkv_transfer_plan>());
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_compile_into(const pdkv_plan_context_t* ctx, const pdkv_plan_group_t* groups,
                                                       size_t n_groups, pdkv_transfer_plan_t* plan,
                                                       pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(ctx, "ctx");
    require_non_null(plan, "plan");
    try {
      const auto g = groups_from_c(groups, n_groups, plan->views);
      core::compile_transfer_plan_into(ctx->ctx, g, plan->plan, ctx->verdict, pdkv::capi::kCompileOptions);
    } catch (...) {
      // Whatever the request got to, the handle must not look like a plan for it.
      plan->plan = core::TransferPlan{};
      pdkv::capi::refresh_plan_views(*plan);
      throw;
    }
    pdkv::capi::refresh_plan_views(*plan);
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_compile_args(pdkv_transfer_plan_t* plan, const pdkv_compile_args_t* args) {
  // The error's destination is a field of args: without args, or with a struct_size that may
  // not hold that field, there is nowhere safe to put one.
  if (args == nullptr) return PDKV_ERR_NULL_POINTER;
  if (args->struct_size < pdkv::capi::kCompileArgsMinSize) return PDKV_ERR_STRUCT_SIZE;
  pdkv_error_t** const err = args->err;
  if (args->struct_size > sizeof(pdkv_compile_args_t)) {
    return guard(err, [&] { pdkv::capi::read_struct_prefix(*args, pdkv::capi::kCompileArgsMinSize, "pdkv_compile_args_t"); });
  }
  return pdkv_transfer_plan_compile_into(args->ctx, args->groups, args->n_groups, plan, err);
}

PDKV_API pdkv_status_t pdkv_transfer_plan_validate(const pdkv_transfer_plan_t* plan, const pdkv_plan_context_t* ctx,
                                                   const pdkv_plan_group_t* groups, size_t n_groups,
                                                   pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    require_non_null(ctx, "ctx");
    const auto g = groups_from_c(groups, n_groups);
    core::validate_transfer_plan_views(plan->plan, ctx->ctx, g);
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_get_info(const pdkv_transfer_plan_t* plan, pdkv_transfer_plan_info_t* out,
                                                   pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    require_non_null(out, "out");
    const core::TransferPlan& p = plan->plan;
    pdkv_transfer_plan_info_t i{};
    i.p_tp_size = p.p_tp;
    i.d_tp_size = p.d_tp;
    i.d_tp_rank = p.d_rank;
    i.num_read_ranks = p.ranks.size();
    i.num_notify_ranks = p.notify_ranks.size();
    i.notifications_per_p_rank = p.notifications_per_p_rank;
    i.num_groups = p.zero.size();
    i.pieces_before_coalescing = p.stats.pieces_before_coalescing;
    i.pieces_after_coalescing = p.stats.pieces_after_coalescing;
    i.bytes = p.stats.bytes;
    i.attention_bytes = p.stats.attention_bytes;
    i.mamba_bytes = p.stats.mamba_bytes;
    i.empty = p.empty() ? 1 : 0;
    i.p_pp_size = p.p_pp_size;
    i.p_pp_rank = p.p_pp_rank;
    i.d_pp_size = p.d_pp_size;
    i.d_pp_rank = p.d_pp_rank;
    i.layer_begin = p.layer_begin;
    i.layer_end = p.layer_end;
    i.permute_from_layout = static_cast<uint64_t>(p.permute.from);
    i.permute_to_layout = static_cast<uint64_t>(p.permute.to);
    i.permute_heads = p.permute.heads;
    i.permute_tokens = p.permute.tokens;
    i.permute_head_bytes = p.permute.head_bytes;
    pdkv::capi::write_struct_prefix(out, i, kPlanInfoMinSize, "pdkv_transfer_plan_info_t");
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_read_ranks(const pdkv_transfer_plan_t* plan, const uint32_t** ranks,
                                                     size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    require_non_null(ranks, "ranks");
    require_non_null(count, "count");
    *ranks = plan->read_ranks.empty() ? nullptr : plan->read_ranks.data();
    *count = plan->read_ranks.size();
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_rank_reads(const pdkv_transfer_plan_t* plan, uint32_t p_tp_rank,
                                                     const pdkv_plan_read_t** reads, size_t* count, uint64_t* bytes,
                                                     pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    require_non_null(reads, "reads");
    require_non_null(count, "count");
    if (p_tp_rank >= plan->plan.p_tp) {
      core::fail(core::Status::InvalidArgument, "p_tp_rank " + std::to_string(p_tp_rank) + " is not a rank of the P engine (P TP " +
                                                    std::to_string(plan->plan.p_tp) + ")");
    }
    *reads = nullptr;
    *count = 0;
    if (bytes != nullptr) *bytes = 0;
    for (size_t i = 0; i < plan->plan.ranks.size(); ++i) {
      const core::RankReads& rr = plan->plan.ranks[i];
      if (rr.p_rank != p_tp_rank) continue;
      if (bytes != nullptr) *bytes = rr.bytes;
      if (!rr.factored()) {
        *reads = c_reads(rr.reads);
        *count = rr.reads.size();
        continue;
      }
      const std::lock_guard<std::mutex> lock(plan->expand_mutex);
      std::vector<core::PlanRead>& flat = plan->expanded[i];
      if (plan->expanded_ready[i] == 0) {
        core::expand_reads(rr, flat);
        plan->expanded_ready[i] = 1;
      }
      *reads = c_reads(flat);
      *count = flat.size();
    }
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_notify_ranks(const pdkv_transfer_plan_t* plan, const uint32_t** ranks,
                                                       size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    require_non_null(ranks, "ranks");
    require_non_null(count, "count");
    const auto& n = plan->plan.notify_ranks;
    *ranks = n.empty() ? nullptr : n.data();
    *count = n.size();
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_group_zero(const pdkv_transfer_plan_t* plan, size_t index,
                                                     pdkv_plan_group_zero_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    require_non_null(out, "out");
    pdkv::capi::require_index(index, plan->plan.zero.size(), "group");
    const core::GroupZero& z = plan->plan.zero[index];
    const auto* cz = z.zero.empty() ? nullptr : reinterpret_cast<const pdkv_zero_range_t*>(z.zero.data());
    pdkv_plan_group_zero_t c{};
    c.kind = static_cast<int32_t>(z.kind);
    c.regions = z.regions.empty() ? nullptr : z.regions.data();
    c.num_regions = z.regions.size();
    c.zero = cz;
    c.num_zero = z.zero.size();
    c.unfilled_states = z.unfilled_states.empty() ? nullptr : z.unfilled_states.data();
    c.num_unfilled_states = z.unfilled_states.size();
    c.permute_blocks = z.permute_blocks.empty() ? nullptr : z.permute_blocks.data();
    c.num_permute_blocks = z.permute_blocks.size();
    c.permute_regions = z.permute_regions.empty() ? nullptr : z.permute_regions.data();
    c.num_permute_regions = z.permute_regions.size();
    pdkv::capi::write_struct_prefix(out, c, kGroupZeroMinSize, "pdkv_plan_group_zero_t");
  });
}

PDKV_API pdkv_status_t pdkv_permute_kv_block(uint8_t* block, size_t len, int32_t from_layout, int32_t to_layout,
                                             uint64_t heads, uint64_t tokens, uint64_t head_bytes, pdkv_error_t** err) {
  return guard(err, [&] {
    if (len > 0) require_non_null(block, "block");
    for (const auto& [name, v] : {std::pair{"from_layout", from_layout}, std::pair{"to_layout", to_layout}}) {
      if (v != PDKV_KV_LAYOUT_HND && v != PDKV_KV_LAYOUT_NHD) {
        core::fail(core::Status::InvalidArgument,
                   std::string(name) + " = " + std::to_string(v) + " is not a pdkv_kv_layout_t (0 HND, 1 NHD)");
      }
    }
    const core::BlockPermute p{static_cast<core::KvLayout>(from_layout), static_cast<core::KvLayout>(to_layout), heads,
                               tokens, head_bytes};
    core::permute_kv_block(len == 0 ? std::span<uint8_t>() : std::span<uint8_t>(block, len), p);
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_to_json(const pdkv_transfer_plan_t* plan, char* buf, size_t capacity,
                                                  size_t* out_len, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    require_non_null(out_len, "out_len");
    pdkv::capi::copy_text(core::plan_to_json(plan->plan), buf, capacity, out_len, "the plan JSON");
  });
}

PDKV_API pdkv_status_t pdkv_transfer_plan_to_json_string(const pdkv_transfer_plan_t* plan, pdkv_string_t** out,
                                                         pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    require_non_null(out, "out");
    *out = nullptr;
    auto s = std::make_unique<pdkv_string>();
    s->text = core::plan_to_json(plan->plan);
    *out = s.release();
  });
}

PDKV_API void pdkv_transfer_plan_free(pdkv_transfer_plan_t* plan) { delete plan; }

}  // extern "C"
