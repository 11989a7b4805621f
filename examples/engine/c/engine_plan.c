/*
 * engine_plan.c - what a decode engine does with pdkv for one request, from the model's
 * config.json to the transfer plan, in C, through the engine-level API (pdkv/engine.h).
 *
 * Deployment: the model of CONFIG_JSON (tests/data/hf_configs/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json),
 * prefill (P) TP4 -> decode (D) TP2, this is D rank 0; both engines run Mamba cache mode "align"
 * (vLLM's prefix caching for hybrid models) with 16 logical blocks per region. Each engine rank is
 * described once; pdkv derives its KV-cache groups (four Mamba groups, then the attention group),
 * its regions and its metadata.
 *
 * Request: a 5001-token prompt. D's prefix cache holds its first 2096 tokens (one block); P
 * computes 5000 tokens (the N-1 rule: D recomputes the last one). The program passes what the
 * schedulers hold, per group: D's block table (logical ids, the hit block included; Mamba lists
 * with their null placeholders) and the ids P exported. pdkv works out the rest: D reads tokens
 * 2096..4999 of the attention group and P's running Mamba state of each Mamba group.
 *
 * Prints the plan as JSON. With EXPECTED_JSON (the shared vector tests/vectors/engine.json, case
 * engine_plan/example_nano_config_json_p4_d2_align_prefix_hit, lines joined by newlines), exits 1
 * unless the plan is exactly that text.
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

/* One engine rank, described once: model, settings, its id and rank, 16 logical blocks per region
 * (regions back to back from the default base). */
static pdkv_status_t new_engine(const pdkv_model_t *model, const pdkv_engine_config_t *config, const char *id,
                                uint32_t rank, pdkv_engine_t **out, pdkv_error_t **err) {
  pdkv_engine_options_t options;
  pdkv_status_t st = pdkv_engine_options_init(&options, err);
  if (st != PDKV_OK) return st;
  options.model = model;
  options.config = config;
  options.engine_id = id;
  options.tp_rank = rank;
  options.num_logical_blocks = 16;
  return pdkv_engine_new(&options, out, err);
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
  pdkv_engine_t *d_engine = NULL, *p_engine = NULL;
  pdkv_engine_metadata_t *p_md[P_TP] = {NULL, NULL, NULL, NULL};
  pdkv_engine_info_t info;
  pdkv_engine_peer_t peer;
  pdkv_plan_context_t *ctx = NULL;
  pdkv_transfer_plan_t *plan = NULL;
  pdkv_string_t *json = NULL;
  const char *text = NULL;
  char *expected = NULL;

  /* The request, as the schedulers hold it, one entry per KV-cache group in the engine's order:
   * four Mamba groups (D's align-mode table: the hit position's cached state, a null placeholder,
   * the running state; P's exported running state), then the attention group (D's table of three
   * 2096-token blocks, the first one its prefix hit; P's five 1056-token blocks). */
  static const uint64_t m0_d[] = {10, 0, 6}, m0_p[] = {6}, m1_d[] = {11, 0, 7}, m1_p[] = {7};
  static const uint64_t m2_d[] = {12, 0, 13}, m2_p[] = {8}, m3_d[] = {14, 0, 15}, m3_p[] = {9};
  static const uint64_t att_d[] = {9, 4, 5}, att_p[] = {1, 2, 3, 4, 5};
  const pdkv_engine_request_group_t groups[] = {
      {m0_d, 3, m0_p, 1}, {m1_d, 3, m1_p, 1}, {m2_d, 3, m2_p, 1}, {m3_d, 3, m3_p, 1}, {att_d, 3, att_p, 5}};
  pdkv_engine_request_t request;

  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s CONFIG_JSON [EXPECTED_JSON]\n", argv[0]);
    return 2;
  }

  /* Once per engine rank: the model and this rank's description. */
  CHECK(pdkv_model_from_hf_config_file(argv[1], NULL, &model, &err), "pdkv_model_from_hf_config_file");
  CHECK(engine_config(P_TP, &p_config, &err), "P config");
  CHECK(engine_config(D_TP, &d_config, &err), "D config");
  CHECK(new_engine(model, &d_config, "decode", D_RANK, &d_engine, &err), "D engine");
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(pdkv_engine_get_info(d_engine, &info, &err), "pdkv_engine_get_info");
  fprintf(stderr, "D rank %u: %zu KV-cache groups over %u regions, blocks of %llu tokens\n", (unsigned)D_RANK,
          info.num_groups, (unsigned)info.num_regions, (unsigned long long)info.logical_block_size);

  /* Once per P engine: each P rank's metadata (here built locally from P's own description; an
   * engine decodes it from the handshake) and the plan context. */
  for (r = 0; r < P_TP; ++r) {
    CHECK(new_engine(model, &p_config, "prefill", r, &p_engine, &err), "P engine");
    CHECK(pdkv_engine_get_metadata(p_engine, &p_md[r], &err), "pdkv_engine_get_metadata");
    pdkv_engine_free(p_engine);
    p_engine = NULL;
  }
  memset(&peer, 0, sizeof peer);
  peer.struct_size = sizeof peer;
  peer.remote = (const pdkv_engine_metadata_t *const *)p_md;
  peer.num_remote = P_TP;
  peer.remote_config = &p_config;
  CHECK(pdkv_engine_plan_context_new(d_engine, &peer, &ctx, &err), "pdkv_engine_plan_context_new");

  /* Once per thread: the plan every request of this thread is planned into (its buffers reused,
   * so once grown a request allocates nothing). */
  CHECK(pdkv_transfer_plan_new(&plan, &err), "pdkv_transfer_plan_new");

  /* Per request: what the schedulers hold; pdkv applies the N-1 rule, walks logical ids as the
   * kernel blocks they stand for and picks each Mamba group's slots. The plan's reads stay valid
   * until the next request is planned into it (or it is freed). */
  memset(&request, 0, sizeof request);
  request.struct_size = sizeof request;
  request.groups = groups;
  request.num_groups = sizeof groups / sizeof groups[0];
  request.num_prompt_tokens = 5001;
  request.num_local_computed_tokens = 2096;
  CHECK(pdkv_engine_plan_request_into(d_engine, ctx, &request, plan, &err), "pdkv_engine_plan_request_into");

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
  pdkv_engine_free(p_engine);
  pdkv_engine_free(d_engine);
  pdkv_model_free(model);
  return rc;
}
