/*
 * plan_request.c - compiles the transfer plan of one request through pdkv.h and prints, per P
 * rank, how many reads and bytes a decode rank issues.
 *
 * Deployment: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, prefill TP4 -> decode TP2, D rank 0,
 * FlashAttention, Mamba cache mode "none". Each engine advertises metadata for 6 regions (HMA:
 * one region per attention layer, shared with Mamba layers) of 64 logical blocks. The request has
 * 3000 prompt tokens computed on P (N-1 rule already applied): one attention group (D blocks
 * 10, 11 of 2096 tokens; P blocks 20, 21, 22 of 1056 tokens) and 4 Mamba groups (the last one
 * uses only 5 regions: 23 Mamba layers).
 *
 * Usage: plan_request [--json]
 */
#include <stdio.h>
#include <string.h>

#include <pdkv.h>

#define P_TP 4u
#define D_TP 2u

static int check(pdkv_status_t st, pdkv_error_t *err, const char *what) {
  if (st == PDKV_OK) return 0;
  fprintf(stderr, "%s failed: %s: %s\n", what, pdkv_status_name(st), pdkv_error_message(err));
  pdkv_error_free(err);
  return 1;
}

static pdkv_status_t make_metadata(const pdkv_model_t *model, uint32_t tp, uint32_t rank, const char *id,
                                   uint64_t base, pdkv_engine_metadata_t **out, pdkv_error_t **err) {
  pdkv_engine_config_t config;
  pdkv_engine_layout_t layout;
  pdkv_status_t st = pdkv_engine_config_init(&config, err);
  if (st != PDKV_OK) return st;
  config.tp_size = tp;
  st = pdkv_engine_layout_init(&layout, err);
  if (st != PDKV_OK) return st;
  layout.engine_id = id;
  layout.tp_rank = rank;
  layout.num_regions = 6;
  layout.base = base;
  return pdkv_engine_metadata_from_model(model, &config, &layout, out, err);
}

int main(int argc, char **argv) {
  int json = argc > 1 && strcmp(argv[1], "--json") == 0;
  int rc = 1;
  pdkv_error_t *err = NULL;
  pdkv_model_t *model = NULL;
  pdkv_engine_metadata_t *d_md = NULL;
  pdkv_engine_metadata_t *p_md[P_TP] = {NULL, NULL, NULL, NULL};
  pdkv_geometry_t *d_geo = NULL, *p_geo = NULL;
  pdkv_plan_context_t *ctx = NULL;
  pdkv_transfer_plan_t *plan = NULL;
  pdkv_engine_config_t config;
  pdkv_plan_context_params_t params;
  pdkv_transfer_plan_info_t info;
  const uint32_t *ranks = NULL;
  size_t num_ranks = 0;
  uint32_t r;
  size_t i;

  /* Request groups: attention, then four Mamba groups. */
  const uint64_t att_local[2] = {10, 11}, att_remote[3] = {20, 21, 22};
  const uint64_t mamba_local[4] = {40, 41, 42, 43}, mamba_remote[4] = {50, 51, 52, 53};
  const uint32_t last_regions[5] = {0, 1, 2, 3, 4};
  pdkv_group_trim_input_t trims[5];
  pdkv_plan_group_t groups[5];

  if (check(pdkv_model_from_preset("nemotron-3-nano-30b", &model, &err), err, "pdkv_model_from_preset")) goto done;
  if (check(make_metadata(model, D_TP, 0, "decode", 1ull << 40, &d_md, &err), err, "D metadata")) goto done;
  for (r = 0; r < P_TP; ++r) {
    if (check(make_metadata(model, P_TP, r, "prefill", (2ull + r) << 40, &p_md[r], &err), err, "P metadata")) goto done;
  }
  if (check(pdkv_engine_config_init(&config, &err), err, "pdkv_engine_config_init")) goto done;
  config.tp_size = D_TP;
  if (check(pdkv_geometry_new(model, &config, &d_geo, &err), err, "D geometry")) goto done;
  config.tp_size = P_TP;
  if (check(pdkv_geometry_new(model, &config, &p_geo, &err), err, "P geometry")) goto done;

  /* The D rank would validate each P rank's decoded metadata first. */
  for (r = 0; r < P_TP; ++r) {
    if (check(pdkv_handshake_require_compatible(d_md, p_md[r], &err), err, "handshake")) goto done;
  }

  memset(&params, 0, sizeof params);
  params.struct_size = sizeof params;
  params.local = d_md;
  params.remote = (const pdkv_engine_metadata_t *const *)p_md;
  params.num_remote = P_TP;
  params.local_geometry = d_geo;
  params.remote_geometry = p_geo;
  if (check(pdkv_plan_context_new(&params, &ctx, &err), err, "pdkv_plan_context_new")) goto done;

  memset(trims, 0, sizeof trims);
  memset(groups, 0, sizeof groups);
  for (i = 0; i < 5; ++i) {
    trims[i].struct_size = sizeof trims[i];
    trims[i].cache_mode = PDKV_MAMBA_CACHE_NONE;
    trims[i].remote_computed_tokens = 3000;
    groups[i].struct_size = sizeof groups[i];
    groups[i].trim = &trims[i];
    if (i == 0) {
      trims[i].kind = PDKV_GROUP_ATTENTION;
      trims[i].local_blocks = att_local;
      trims[i].num_local_blocks = 2;
      trims[i].remote_blocks = att_remote;
      trims[i].num_remote_blocks = 3;
    } else {
      trims[i].kind = PDKV_GROUP_MAMBA;
      trims[i].local_blocks = &mamba_local[i - 1];
      trims[i].num_local_blocks = 1;
      trims[i].remote_blocks = &mamba_remote[i - 1];
      trims[i].num_remote_blocks = 1;
    }
  }
  groups[4].regions = last_regions;
  groups[4].num_regions = 5;
  if (check(pdkv_transfer_plan_compile(ctx, groups, 5, &plan, &err), err, "pdkv_transfer_plan_compile")) goto done;

  if (json) {
    pdkv_string_t *s = NULL;
    const char *text = NULL;
    if (check(pdkv_transfer_plan_to_json_string(plan, &s, &err), err, "to_json")) goto done;
    if (pdkv_string_text(s, &text, NULL, NULL) == PDKV_OK) printf("%s\n", text);
    pdkv_string_free(s);
    rc = 0;
    goto done;
  }

  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (check(pdkv_transfer_plan_get_info(plan, &info, &err), err, "get_info")) goto done;
  printf("Nemotron-3-Nano-30B P TP%u -> D TP%u, D rank %u, 3000 tokens, 5 groups\n", info.p_tp_size, info.d_tp_size,
         info.d_tp_rank);
  for (r = 0; r < info.p_tp_size; ++r) {
    const pdkv_plan_read_t *reads = NULL;
    size_t n = 0;
    uint64_t bytes = 0;
    if (check(pdkv_transfer_plan_rank_reads(plan, r, &reads, &n, &bytes, &err), err, "rank_reads")) goto done;
    printf("  P rank %u: %zu reads, %llu bytes\n", r, n, (unsigned long long)bytes);
  }
  if (check(pdkv_transfer_plan_notify_ranks(plan, &ranks, &num_ranks, &err), err, "notify_ranks")) goto done;
  printf("  notify:");
  for (i = 0; i < num_ranks; ++i) printf(" %u", ranks[i]);
  printf(" (each P rank expects %u per request)\n", info.notifications_per_p_rank);
  printf("  total: %llu bytes (attention %llu, mamba %llu), %llu pieces coalesced to %llu\n",
         (unsigned long long)info.bytes, (unsigned long long)info.attention_bytes,
         (unsigned long long)info.mamba_bytes, (unsigned long long)info.pieces_before_coalescing,
         (unsigned long long)info.pieces_after_coalescing);
  rc = 0;

done:
  pdkv_transfer_plan_free(plan);
  pdkv_plan_context_free(ctx);
  pdkv_geometry_free(p_geo);
  pdkv_geometry_free(d_geo);
  for (r = 0; r < P_TP; ++r) pdkv_engine_metadata_free(p_md[r]);
  pdkv_engine_metadata_free(d_md);
  pdkv_model_free(model);
  return rc;
}
