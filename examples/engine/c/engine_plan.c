/*
 * engine_plan.c - what a decode engine does with pdkv for one request, from the model's
 * config.json to the transfer plan, in C.
 *
 * Deployment: the model of CONFIG_JSON (tests/data/hf_configs/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json),
 * prefill (P) TP4 -> decode (D) TP2, this is D rank 0; both engines run Mamba cache mode "align"
 * (vLLM's prefix caching for hybrid models) with one KV region of 16 logical blocks per rank.
 *
 * Request: P computed all 5000 prompt tokens into its blocks 1..5 (1056 tokens each) and its Mamba
 * state after 5000 tokens into block 8. D's prefix cache already holds the first 2096 tokens (one
 * 2096-token block), so D reads only tokens 2096..4999 into its blocks 4 and 5, and P's running
 * Mamba state into its last real Mamba slot, 7.
 *
 * Prints the plan as JSON. With EXPECTED_JSON (the shared vector
 * tests/vectors/plans_json.json, case engine_example_nano_config_json_p4_d2_align_prefix_hit,
 * lines joined by newlines), exits 1 unless the plan is exactly that text.
 *
 * Usage: engine_plan CONFIG_JSON [EXPECTED_JSON]
 * Build: cc engine_plan.c $(pkg-config --cflags --libs pdkv), or the CMakeLists.txt beside it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pdkv.h>

#define P_TP 4u
#define D_TP 2u
#define D_RANK 0u

static int fail(pdkv_status_t st, pdkv_error_t *err, const char *what) {
  fprintf(stderr, "%s failed: %s: %s\n", what, pdkv_status_name(st), pdkv_error_message(err));
  pdkv_error_free(err);
  return 1;
}

#define CHECK(call, what)                    \
  do {                                       \
    pdkv_status_t st_ = (call);              \
    if (st_ != PDKV_OK) {                    \
      rc = fail(st_, err, what);             \
      err = NULL;                            \
      goto done;                             \
    }                                        \
  } while (0)

/* The engine's configuration: what its vLLM flags say (TP size, --mamba-cache-mode align). */
static pdkv_status_t engine_config(uint32_t tp, pdkv_engine_config_t *config, pdkv_error_t **err) {
  pdkv_status_t st = pdkv_engine_config_init(config, err);
  if (st != PDKV_OK) return st;
  config->tp_size = tp;
  config->mamba_cache_mode = PDKV_MAMBA_CACHE_ALIGN;
  return PDKV_OK;
}

/* What one rank advertises in the handshake: its id, rank and where its KV region lives. */
static pdkv_status_t rank_metadata(const pdkv_model_t *model, const pdkv_engine_config_t *config, const char *id,
                                   uint32_t rank, uint64_t base, pdkv_engine_metadata_t **out, pdkv_error_t **err) {
  pdkv_engine_layout_t layout;
  pdkv_status_t st = pdkv_engine_layout_init(&layout, err);
  if (st != PDKV_OK) return st;
  layout.engine_id = id;
  layout.tp_rank = rank;
  layout.num_logical_blocks = 16;
  layout.num_regions = 1;
  layout.base = base;
  return pdkv_engine_metadata_from_model(model, config, &layout, out, err);
}

/* The whole file, NUL-terminated, with trailing newlines removed; NULL on error. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  char *text = NULL;
  long n;
  if (f == NULL) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (text = malloc((size_t)n + 1)) != NULL) {
    size_t got = fread(text, 1, (size_t)n, f);
    while (got > 0 && text[got - 1] == '\n') --got;
    text[got] = '\0';
  }
  fclose(f);
  return text;
}

int main(int argc, char **argv) {
  int rc = 1;
  uint32_t r;
  pdkv_error_t *err = NULL;
  pdkv_model_t *model = NULL;
  pdkv_engine_config_t p_config, d_config;
  pdkv_geometry_t *p_geo = NULL, *d_geo = NULL;
  pdkv_engine_metadata_t *d_md = NULL;
  pdkv_engine_metadata_t *p_md[P_TP] = {NULL, NULL, NULL, NULL};
  pdkv_plan_context_params_t params;
  pdkv_plan_context_t *ctx = NULL;
  pdkv_transfer_plan_t *plan = NULL;
  pdkv_string_t *json = NULL;
  const char *text = NULL;
  char *expected = NULL;

  /* The request, as D's scheduler holds it: block ids after D's prefix hit of 2096 tokens. */
  const uint64_t att_local[] = {4, 5}, att_remote[] = {1, 2, 3, 4, 5};
  const uint64_t mamba_local[] = {0, 6, 7}, mamba_remote[] = {0, 0, 0, 0, 8};
  pdkv_group_trim_input_t trims[2];
  pdkv_plan_group_t groups[2];

  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s CONFIG_JSON [EXPECTED_JSON]\n", argv[0]);
    return 2;
  }

  /* Once per engine: the model, both sides' configurations and geometries. */
  CHECK(pdkv_model_from_hf_config_file(argv[1], NULL, &model, &err), "pdkv_model_from_hf_config_file");
  CHECK(engine_config(P_TP, &p_config, &err), "P config");
  CHECK(engine_config(D_TP, &d_config, &err), "D config");
  CHECK(pdkv_geometry_new(model, &p_config, &p_geo, &err), "P geometry");
  CHECK(pdkv_geometry_new(model, &d_config, &d_geo, &err), "D geometry");

  /* Once per P engine: the handshake. D would receive each P rank's encoded metadata; here both
   * sides are built locally. Every P rank must be compatible with this D rank. */
  CHECK(rank_metadata(model, &d_config, "decode", D_RANK, 1ull << 40, &d_md, &err), "D metadata");
  for (r = 0; r < P_TP; ++r) {
    CHECK(rank_metadata(model, &p_config, "prefill", r, (2ull + r) << 40, &p_md[r], &err), "P metadata");
    CHECK(pdkv_handshake_require_compatible(d_md, p_md[r], &err), "handshake");
  }
  memset(&params, 0, sizeof params);
  params.struct_size = sizeof params;
  params.local = d_md;
  params.remote = (const pdkv_engine_metadata_t *const *)p_md;
  params.num_remote = P_TP;
  params.local_geometry = d_geo;
  params.remote_geometry = p_geo;
  CHECK(pdkv_plan_context_new(&params, &ctx, &err), "pdkv_plan_context_new");

  /* Per request: one attention group and one Mamba group (all regions each). */
  memset(trims, 0, sizeof trims);
  memset(groups, 0, sizeof groups);
  for (r = 0; r < 2; ++r) {
    trims[r].struct_size = sizeof trims[r];
    trims[r].remote_computed_tokens = 5000;
    trims[r].local_hit_tokens = 2096;
    groups[r].struct_size = sizeof groups[r];
    groups[r].trim = &trims[r];
  }
  trims[0].kind = PDKV_GROUP_ATTENTION;
  trims[0].local_blocks = att_local;
  trims[0].num_local_blocks = 2;
  trims[0].remote_blocks = att_remote;
  trims[0].num_remote_blocks = 5;
  trims[1].kind = PDKV_GROUP_MAMBA;
  trims[1].cache_mode = PDKV_MAMBA_CACHE_ALIGN;
  trims[1].local_blocks = mamba_local;
  trims[1].num_local_blocks = 3;
  trims[1].remote_blocks = mamba_remote;
  trims[1].num_remote_blocks = 5;
  CHECK(pdkv_transfer_plan_compile(ctx, groups, 2, &plan, &err), "pdkv_transfer_plan_compile");

  CHECK(pdkv_transfer_plan_to_json_string(plan, &json, &err), "pdkv_transfer_plan_to_json_string");
  CHECK(pdkv_string_text(json, &text, NULL, &err), "pdkv_string_text");
  printf("%s\n", text);
  rc = 0;
  if (argc == 3) {
    expected = read_text(argv[2]);
    if (expected == NULL) {
      fprintf(stderr, "cannot read %s\n", argv[2]);
      rc = 1;
    } else if (strcmp(expected, text) != 0) {
      fprintf(stderr, "the plan differs from %s\n", argv[2]);
      rc = 1;
    } else {
      fprintf(stderr, "plan matches %s\n", argv[2]);
    }
  }

done:
  free(expected);
  pdkv_string_free(json);
  pdkv_transfer_plan_free(plan);
  pdkv_plan_context_free(ctx);
  for (r = 0; r < P_TP; ++r) pdkv_engine_metadata_free(p_md[r]);
  pdkv_engine_metadata_free(d_md);
  pdkv_geometry_free(d_geo);
  pdkv_geometry_free(p_geo);
  pdkv_model_free(model);
  return rc;
}
