// C glue of pdkv/engine.h: an engine handle derived once (KV-cache groups, geometry, metadata)
// and the per-request call that turns a block table into the plan groups of
// pdkv_transfer_plan_compile (core/engine_request.hpp). The derivations reuse the low-level C
// entry points, so an engine is exactly what a caller of those would build by hand.
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "boundary.hpp"
#include "model_geometry_handles.hpp"
#include "pdkv/core/engine_request.hpp"
#include "pdkv/core/kv_cache_groups.hpp"
#include "plan_handles.hpp"
#include "struct_sizes.hpp"
#include "structs.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

struct pdkv_engine {
  core::ModelDesc model;
  std::vector<core::KvCacheGroup> groups;
  uint32_t num_regions = 0;
  uint64_t num_speculative_tokens = 0;
  std::unique_ptr<pdkv_geometry_t> geometry;
  std::unique_ptr<pdkv_engine_metadata_t> metadata;
  // Unique per engine made by this process (from 1): what a plan context remembers of the
  // engine it was last found to match (pdkv_plan_context::matched_engine).
  uint64_t serial = 0;
};

namespace {

// Rethrows the error of a nested C call as the core error the boundary maps back.
void rethrow(pdkv_status_t st, pdkv_error_t* e) {
  if (st == PDKV_OK) return;
  std::string message = e != nullptr ? e->message : std::string(pdkv_status_name(st));
  pdkv_error_free(e);
  core::fail(static_cast<core::Status>(st), std::move(message));
}

template <typename F>
void call(F&& f) {
  pdkv_error_t* e = nullptr;
  const pdkv_status_t st = f(&e);  // before reading e: argument evaluation is unsequenced
  rethrow(st, e);
}

// The request's plan compiled into `h` (its buffers reused): the checks of
// pdkv_engine_plan_request, the groups derived as views into the caller's id arrays, nothing
// copied, nothing allocated once h has grown (names for errors are built only on failure).
void plan_request_into(const pdkv_engine_t* engine, const pdkv_plan_context_t* ctx,
                       const pdkv_engine_request_t* request, pdkv_transfer_plan& h) {
  require_non_null(engine, "engine");
  require_non_null(ctx, "ctx");
  require_non_null(request, "request");
  const pdkv_engine_request_t r =
      pdkv::capi::read_options(*request, pdkv::capi::kEngineRequestMinSize, "pdkv_engine_request_t", 0);
  const core::EngineMetadata& d = engine->metadata->md;
  if (ctx->matched_engine.load(std::memory_order_relaxed) == engine->serial) {
    // This engine was compared with ctx.local before (both immutable): equal.
  } else if (ctx->ctx.local == d) {
    ctx->matched_engine.store(engine->serial, std::memory_order_relaxed);
  } else {
    core::fail(core::Status::InvalidArgument,
               "ctx was built for D engine '" + ctx->ctx.local.engine_id + "' rank " +
                   std::to_string(ctx->ctx.local.tp_rank) + ", not for engine '" + d.engine_id + "' rank " +
                   std::to_string(d.tp_rank) + " as described: pass a context from pdkv_engine_plan_context_new "
                   "with this engine");
  }
  if (r.num_groups > 0) require_non_null(r.groups, "pdkv_engine_request_t.groups");
  std::vector<core::EngineRequestGroup>& groups = h.engine_groups;
  groups.assign(r.num_groups, core::EngineRequestGroup{});
  for (size_t i = 0; i < r.num_groups; ++i) {
    const pdkv_engine_request_group_t& g = r.groups[i];
    if ((g.num_local_block_ids > 0 && g.local_block_ids == nullptr) ||
        (g.num_remote_block_ids > 0 && g.remote_block_ids == nullptr)) {
      const char* field = g.num_local_block_ids > 0 && g.local_block_ids == nullptr ? ".local_block_ids"
                                                                                     : ".remote_block_ids";
      require_non_null(nullptr, ("pdkv_engine_request_t.groups[" + std::to_string(i) + "]" + field).c_str());
    }
    if (g.num_local_block_ids > 0) groups[i].local_block_ids = {g.local_block_ids, g.num_local_block_ids};
    if (g.num_remote_block_ids > 0) groups[i].remote_block_ids = {g.remote_block_ids, g.num_remote_block_ids};
  }
  core::EngineRequest req;
  req.groups = groups;
  req.num_prompt_tokens = r.num_prompt_tokens;
  req.num_local_computed_tokens = r.num_local_computed_tokens;
  const core::EngineSide local{&d, engine->num_speculative_tokens};
  const core::EngineSide remote{&ctx->ctx.remote.front(), ctx->remote_num_speculative_tokens};
  core::engine_request_views(engine->groups, local, remote, req, h.views);
  core::compile_transfer_plan_into(ctx->ctx, h.views, h.plan, ctx->verdict, pdkv::capi::kCompileOptions);
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_engine_options_init(pdkv_engine_options_t* options, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(options, "options");
    pdkv_engine_layout_t l;
    call([&](pdkv_error_t** e) { return pdkv_engine_layout_init(&l, e); });
    *options = pdkv_engine_options_t{};
    options->struct_size = sizeof(pdkv_engine_options_t);
    options->engine_id = l.engine_id;
    options->tp_rank = l.tp_rank;
    options->num_logical_blocks = l.num_logical_blocks;
    options->base = l.base;
    options->kv_layout = l.kv_layout;
    options->field_mask = 0;
    options->prefix_caching = 0;  // read only with PDKV_ENGINE_FIELD_PREFIX_CACHING
  });
}

PDKV_API pdkv_status_t pdkv_engine_new(const pdkv_engine_options_t* options, pdkv_engine_t** out,
                                       pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(options, "options");
    require_non_null(out, "out");
    *out = nullptr;
    const pdkv_engine_options_t o =
        pdkv::capi::read_options(*options, pdkv::capi::kEngineOptionsMinSize, "pdkv_engine_options_t",
                                 PDKV_ENGINE_FIELD_PREFIX_CACHING);
    require_non_null(o.model, "pdkv_engine_options_t.model");
    require_non_null(o.config, "pdkv_engine_options_t.config");
    require_non_null(o.engine_id, "pdkv_engine_options_t.engine_id");
    if (o.num_region_bases > 0) require_non_null(o.region_bases, "pdkv_engine_options_t.region_bases");
    auto h = std::make_unique<pdkv_engine>();
    static std::atomic<uint64_t> next_serial{1};
    h->serial = next_serial.fetch_add(1, std::memory_order_relaxed);
    h->model = o.model->desc;
    h->groups = core::kv_cache_groups(h->model);
    h->num_regions = core::kv_cache_regions(h->groups);
    if (o.region_bases != nullptr && o.num_region_bases != h->num_regions) {
      core::fail(core::Status::InvalidArgument,
                 "pdkv_engine_options_t.num_region_bases = " + std::to_string(o.num_region_bases) + " but engine '" +
                     o.engine_id + "' registers " + std::to_string(h->num_regions) +
                     " regions (its largest KV-cache group's layers): pass one base address per region, or "
                     "region_bases NULL for regions back to back from base");
    }
    pdkv_geometry_t* geo = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_geometry_new(o.model, o.config, &geo, e); });
    h->geometry.reset(geo);
    h->num_speculative_tokens = o.config->num_speculative_tokens;
    pdkv_engine_layout_t l;
    call([&](pdkv_error_t** e) { return pdkv_engine_layout_init(&l, e); });
    l.engine_id = o.engine_id;
    l.tp_rank = o.tp_rank;
    l.num_logical_blocks = o.num_logical_blocks;
    l.num_regions = h->num_regions;
    l.base = o.base;
    l.region_bases = o.region_bases;
    l.kv_layout = o.kv_layout;
    if (o.field_mask & PDKV_ENGINE_FIELD_PREFIX_CACHING) {
      l.prefix_caching = static_cast<uint8_t>(
          pdkv::capi::flag_from_c(o.prefix_caching, "pdkv_engine_options_t.prefix_caching") ? 1 : 0);
      l.field_mask |= PDKV_LAYOUT_FIELD_PREFIX_CACHING;
    }
    pdkv_engine_metadata_t* md = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_engine_metadata_from_model(o.model, o.config, &l, &md, e); });
    h->metadata.reset(md);
    *out = h.release();
  });
}

PDKV_API void pdkv_engine_free(pdkv_engine_t* engine) { delete engine; }

PDKV_API pdkv_status_t pdkv_engine_get_info(const pdkv_engine_t* engine, pdkv_engine_info_t* out,
                                            pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(engine, "engine");
    require_non_null(out, "out");
    const core::EngineMetadata& m = engine->metadata->md;
    pdkv_engine_info_t i{};
    i.num_groups = engine->groups.size();
    i.num_regions = engine->num_regions;
    i.tp_size = m.tp_size;
    i.tp_rank = m.tp_rank;
    i.cache_mode = static_cast<int32_t>(m.cache_mode);
    i.logical_block_size = m.logical_block_size;
    i.kernel_block_size = m.kernel_block_size;
    i.physical_blocks_per_logical = m.physical_blocks_per_logical;
    i.num_logical_blocks = m.physical_blocks_per_logical == 0 ? 0 : m.num_kernel_blocks / m.physical_blocks_per_logical;
    i.num_speculative_tokens = engine->num_speculative_tokens;
    i.prefix_caching = m.prefix_caching ? 1 : 0;
    pdkv::capi::write_struct_prefix(out, i, pdkv::capi::kEngineInfoMinSize, "pdkv_engine_info_t");
  });
}

PDKV_API pdkv_status_t pdkv_engine_group(const pdkv_engine_t* engine, size_t index, pdkv_engine_group_t* out,
                                         pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(engine, "engine");
    require_non_null(out, "out");
    pdkv::capi::require_index(index, engine->groups.size(), "KV-cache group");
    const core::KvCacheGroup& g = engine->groups[index];
    pdkv_engine_group_t c{};
    c.kind = static_cast<int32_t>(g.kind);
    c.layers = g.layers.data();
    c.num_layers = g.layers.size();
    c.regions = g.regions.data();
    c.num_regions = g.regions.size();
    pdkv::capi::write_struct_prefix(out, c, pdkv::capi::kEngineGroupMinSize, "pdkv_engine_group_t");
  });
}

PDKV_API pdkv_status_t pdkv_engine_get_metadata(const pdkv_engine_t* engine, pdkv_engine_metadata_t** out,
                                            pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(engine, "engine");
    require_non_null(out, "out");
    *out = nullptr;
    *out = pdkv::capi::make_metadata(engine->metadata->md);
  });
}

PDKV_API pdkv_status_t pdkv_engine_registration_descriptors(const pdkv_engine_t* engine,
                                                            pdkv_descriptor_list_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(engine, "engine");
    require_non_null(out, "out");
    *out = nullptr;
    const core::EngineMetadata& m = engine->metadata->md;
    std::vector<pdkv_region_t> regions;
    regions.reserve(m.regions.size());
    for (const auto& r : m.regions) regions.push_back({r.region.base, r.region.block_len, r.region.num_blocks});
    pdkv_descriptor_list_t* attention = nullptr;
    call([&](pdkv_error_t** e) {
      return pdkv_attention_local_descriptors(regions.data(), regions.size(), 1, &attention, e);
    });
    std::unique_ptr<pdkv_descriptor_list_t> all(attention);
    if (m.is_hybrid()) {
      pdkv_descriptor_list_t* mamba = nullptr;
      call([&](pdkv_error_t** e) {
        return pdkv_mamba_local_descriptors(regions.data(), regions.size(), m.physical_blocks_per_logical,
                                            engine->geometry.get(), &mamba, e);
      });
      std::unique_ptr<pdkv_descriptor_list_t> owned(mamba);
      all->items.insert(all->items.end(), owned->items.begin(), owned->items.end());
    }
    *out = all.release();
  });
}

PDKV_API pdkv_status_t pdkv_engine_plan_context_new(const pdkv_engine_t* engine, const pdkv_engine_peer_t* peer,
                                                    pdkv_plan_context_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(engine, "engine");
    require_non_null(peer, "peer");
    require_non_null(out, "out");
    *out = nullptr;
    const pdkv_engine_peer_t p = pdkv::capi::read_options(*peer, pdkv::capi::kEnginePeerMinSize, "pdkv_engine_peer_t", 0);
    require_non_null(p.remote_config, "pdkv_engine_peer_t.remote_config");
    if (p.num_remote == 0) {
      core::fail(core::Status::InvalidArgument,
                 "pdkv_engine_peer_t.num_remote is 0: pass the metadata of every rank of the P engine");
    }
    require_non_null(p.remote, "pdkv_engine_peer_t.remote");
    const core::EngineMetadata& d = engine->metadata->md;
    for (size_t i = 0; i < p.num_remote; ++i) {
      const std::string name = "pdkv_engine_peer_t.remote[" + std::to_string(i) + "]";
      require_non_null(p.remote[i], name.c_str());
      const core::EngineMetadata& r = p.remote[i]->md;
      if (r.model_fingerprint != d.model_fingerprint) {
        core::fail(core::Status::InvalidArgument,
                   name + " (engine '" + r.engine_id + "' rank " + std::to_string(r.tp_rank) +
                       ") advertises model fingerprint " + std::to_string(r.model_fingerprint) + " but engine '" +
                       d.engine_id + "' runs a model with fingerprint " + std::to_string(d.model_fingerprint) +
                       ": pass the metadata of a P engine serving the same model");
      }
      if (r.tp_size != p.remote_config->tp_size) {
        core::fail(core::Status::InvalidArgument,
                   name + " has tp_size " + std::to_string(r.tp_size) + " but pdkv_engine_peer_t.remote_config "
                   "has tp_size " + std::to_string(p.remote_config->tp_size) +
                   ": pass the settings of the engine whose metadata this is");
      }
    }
    pdkv_model model{engine->model};
    pdkv_geometry_t* geo = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_geometry_new(&model, p.remote_config, &geo, e); });
    std::unique_ptr<pdkv_geometry_t> remote_geometry(geo);
    pdkv_plan_context_params_t params{};
    params.struct_size = sizeof params;
    params.local = engine->metadata.get();
    params.remote = p.remote;
    params.num_remote = p.num_remote;
    params.local_geometry = engine->geometry.get();
    params.remote_geometry = remote_geometry.get();
    params.permute_on_receive = p.permute_on_receive;
    pdkv_plan_context_t* ctx = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_plan_context_new(&params, &ctx, e); });
    ctx->remote_num_speculative_tokens = p.remote_config->num_speculative_tokens;
    *out = ctx;
  });
}

PDKV_API pdkv_status_t pdkv_engine_plan_request(const pdkv_engine_t* engine, const pdkv_plan_context_t* ctx,
                                                const pdkv_engine_request_t* request, pdkv_transfer_plan_t** out,
                                                pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    auto h = std::make_unique<pdkv_transfer_plan>();
    plan_request_into(engine, ctx, request, *h);
    *out = pdkv::capi::finish_plan(std::move(h));
  });
}

PDKV_API pdkv_status_t pdkv_engine_plan_request_into(const pdkv_engine_t* engine, const pdkv_plan_context_t* ctx,
                                                     const pdkv_engine_request_t* request, pdkv_transfer_plan_t* plan,
                                                     pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(plan, "plan");
    try {
      plan_request_into(engine, ctx, request, *plan);
    } catch (...) {
      // Whatever the request got to, the handle must not look like a plan for it.
      plan->plan = core::TransferPlan{};
      pdkv::capi::refresh_plan_views(*plan);
      throw;
    }
    pdkv::capi::refresh_plan_views(*plan);
  });
}

}  // extern "C"
