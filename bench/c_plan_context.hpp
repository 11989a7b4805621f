// plan_setup.hpp's planning context built through the C API, the way a binding builds it:
// NVIDIA-Nemotron-3-Nano-30B-A3B, D rank 0 of TP d_tp against every rank of a TP p_tp P engine,
// both at 2096-token blocks, kRegions pooled regions of kDPool / kPPool logical blocks, with both
// geometries. bench/plan_vs_vllm times its C columns on it (TP2 against TP4); tests/capi/no_alloc
// counts the allocations of compiling into it.
#pragma once

#include <cstdint>
#include <vector>

#include "pdkv.h"
#include "plan_request.hpp"

namespace pdkv::bench {

// Owns every handle it holds; not copyable.
struct CPlanContext {
  pdkv_model_t* model = nullptr;
  pdkv_geometry_t *dg = nullptr, *pg = nullptr;
  pdkv_geometry_info_t di{}, pi{};             // D's and P's geometry (block sizes, ppl)
  std::vector<pdkv_engine_metadata_t*> metas;  // D's, then P rank 0, 1, ...
  pdkv_plan_context_t* ctx = nullptr;

  CPlanContext() = default;
  CPlanContext(const CPlanContext&) = delete;
  CPlanContext& operator=(const CPlanContext&) = delete;
  ~CPlanContext() {
    pdkv_plan_context_free(ctx);
    for (pdkv_engine_metadata_t* m : metas) pdkv_engine_metadata_free(m);
    pdkv_geometry_free(dg);
    pdkv_geometry_free(pg);
    pdkv_model_free(model);
  }
};

// Fills an empty `c`, or returns the status of the first call that failed with *err set and
// *what naming that call (what `c` holds by then is freed with it). `mode` is a
// pdkv_mamba_cache_mode_t.
inline pdkv_status_t make_c_plan_context(CPlanContext& c, bool flashinfer, int32_t mode, uint32_t d_tp,
                                         uint32_t p_tp, pdkv_error_t** err, const char** what) {
  pdkv_engine_config_t dc, pc;
  pdkv_status_t st = PDKV_OK;
  *what = "pdkv_engine_config_init";
  for (auto [c_out, tp] : {std::pair{&dc, d_tp}, std::pair{&pc, p_tp}}) {
    if ((st = pdkv_engine_config_init(c_out, err)) != PDKV_OK) return st;
    c_out->tp_size = tp;
    c_out->user_block_size = 2096;
    c_out->field_mask |= PDKV_CONFIG_FIELD_BLOCK_SIZE;
    c_out->attention_backend = flashinfer ? PDKV_BACKEND_FLASHINFER : PDKV_BACKEND_FLASH_ATTN;
    c_out->mamba_cache_mode = mode;
  }
  *what = "pdkv_model_from_preset";
  if ((st = pdkv_model_from_preset("nemotron-3-nano-30b", &c.model, err)) != PDKV_OK) return st;
  *what = "pdkv_geometry_new";
  if ((st = pdkv_geometry_new(c.model, &dc, &c.dg, err)) != PDKV_OK) return st;
  if ((st = pdkv_geometry_new(c.model, &pc, &c.pg, err)) != PDKV_OK) return st;
  *what = "pdkv_geometry_get_info";
  c.di.struct_size = c.pi.struct_size = sizeof(pdkv_geometry_info_t);
  if ((st = pdkv_geometry_get_info(c.dg, &c.di, err)) != PDKV_OK) return st;
  if ((st = pdkv_geometry_get_info(c.pg, &c.pi, err)) != PDKV_OK) return st;
  *what = "pdkv_engine_metadata_from_model";
  for (uint32_t i = 0; i <= p_tp; ++i) {  // D's (i 0), then P rank i - 1
    pdkv_engine_layout_t l{};
    l.struct_size = sizeof(l);
    l.engine_id = i == 0 ? "decode" : "prefill";
    l.tp_rank = i == 0 ? 0 : i - 1;
    l.num_logical_blocks = i == 0 ? kDPool : kPPool;
    l.num_regions = kRegions;
    l.base = i == 0 ? 1ull << 40 : (1ull + i) << 44;  // P rank r at (2 + r) << 44
    pdkv_engine_metadata_t* m = nullptr;
    if ((st = pdkv_engine_metadata_from_model(c.model, i == 0 ? &dc : &pc, &l, &m, err)) != PDKV_OK) return st;
    c.metas.push_back(m);
  }
  pdkv_plan_context_params_t params{};
  params.struct_size = sizeof(params);
  params.local = c.metas[0];
  params.remote = c.metas.data() + 1;
  params.num_remote = p_tp;
  params.local_geometry = c.dg;
  params.remote_geometry = c.pg;
  *what = "pdkv_plan_context_new";
  return pdkv_plan_context_new(&params, &c.ctx, err);
}

}  // namespace pdkv::bench
