/*
 * plan_example: explains a P/D deployment of a preset model through the pdkv C API.
 * Default: nemotron-3-nano-30b, prefill (P) TP4 -> decode (D) TP2, FlashAttention on both.
 * Usage: example_plan_example [preset [p_tp_size d_tp_size]]
 */
#include <stdio.h>
#include <stdlib.h>

#include <pdkv.h>

/* Prints the error, frees it and exits: an example has nothing to clean up beyond that. */
static void check(pdkv_status_t st, pdkv_error_t *err, const char *what) {
  if (st == PDKV_OK) return;
  fprintf(stderr, "%s failed: %s: %s\n", what, pdkv_status_name(st), pdkv_error_message(err));
  pdkv_error_free(err);
  exit(1);
}

static void print_list(const char *label, const uint32_t *ranks, size_t n) {
  size_t i;
  printf("    %-22s [", label);
  for (i = 0; i < n; ++i) printf("%s%u", i ? ", " : "", (unsigned)ranks[i]);
  printf("]\n");
}

static pdkv_geometry_t *engine_geometry(const pdkv_model_t *model, uint32_t tp, const char *role) {
  pdkv_error_t *err = NULL;
  pdkv_engine_config_t cfg;
  pdkv_geometry_t *g = NULL;
  pdkv_geometry_info_t info;
  size_t i;
  check(pdkv_engine_config_init(&cfg, &err), err, "pdkv_engine_config_init");
  cfg.tp_size = tp;
  check(pdkv_geometry_new(model, &cfg, &g, &err), err, "pdkv_geometry_new");
  info.struct_size = sizeof info;
  check(pdkv_geometry_get_info(g, &info, &err), err, "pdkv_geometry_get_info");
  printf("%s engine (TP%u, %s):\n", role, (unsigned)tp, pdkv_backend_name(cfg.attention_backend));
  printf("  attention: %u KV head(s)/rank, %llu B/token\n", (unsigned)info.kv_heads_per_rank,
         (unsigned long long)info.attn_bytes_per_token);
  printf("  mamba (%s): conv %llu B + ssm %llu B = page %llu B per rank\n", pdkv_mamba_type_name(info.mamba_type),
         (unsigned long long)info.conv_bytes, (unsigned long long)info.ssm_bytes,
         (unsigned long long)info.mamba_page_bytes);
  printf("  block size %llu tokens (min %llu), padded page %llu B (+%.2f%%), kernel block %llu, ppl %llu\n",
         (unsigned long long)info.block_size, (unsigned long long)info.min_block_size,
         (unsigned long long)info.mamba_page_padded_bytes, info.padding_percent,
         (unsigned long long)info.kernel_block_size, (unsigned long long)info.physical_per_logical);
  for (i = 0; i < info.num_log_lines; ++i) {
    const char *line = NULL;
    check(pdkv_geometry_log_line(g, i, &line, &err), err, "pdkv_geometry_log_line");
    printf("  vLLM log: %s\n", line);
  }
  return g;
}

int main(int argc, char **argv) {
  const char *preset = argc > 1 ? argv[1] : "nemotron-3-nano-30b";
  uint32_t p_tp_size = argc > 3 ? (uint32_t)strtoul(argv[2], NULL, 10) : 4;
  uint32_t d_tp_size = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 2;
  pdkv_error_t *err = NULL;
  pdkv_model_t *model = NULL;
  pdkv_model_desc_t desc;
  pdkv_geometry_t *pg, *dg;
  int32_t ratio = 0;
  uint32_t d_tp_rank;

  printf("pdkv %s\n", pdkv_version_string());
  check(pdkv_model_from_preset(preset, &model, &err), err, "pdkv_model_from_preset");
  desc.struct_size = sizeof desc;
  check(pdkv_model_describe(model, &desc, &err), err, "pdkv_model_describe");
  printf("model %s: %u KV heads x %u, Mamba %s\n\n", desc.name, (unsigned)desc.num_kv_heads,
         (unsigned)desc.head_size, pdkv_mamba_type_name(desc.mamba_type));

  pg = engine_geometry(model, p_tp_size, "P (prefill)");
  dg = engine_geometry(model, d_tp_size, "D (decode)");
  check(pdkv_tp_ratio(d_tp_size, p_tp_size, &ratio, &err), err, "pdkv_tp_ratio");
  printf("\ntp_ratio on D = %d\n", (int)ratio);

  for (d_tp_rank = 0; d_tp_rank < d_tp_size; ++d_tp_rank) {
    pdkv_tp_mapping_params_t params;
    pdkv_tp_mapping_t *mapping = NULL;
    pdkv_tp_mapping_info_t mi;
    pdkv_mamba_read_list_t *reads = NULL;
    const pdkv_mamba_read_t *items = NULL;
    const uint32_t *ranks = NULL;
    size_t n = 0, i;

    params.struct_size = sizeof params;
    params.local_tp_size = d_tp_size;
    params.local_tp_rank = d_tp_rank;
    params.remote_tp_size = p_tp_size;
    params.total_kv_heads = desc.num_kv_heads;
    params.use_mla = desc.use_mla;
    params.has_mamba = desc.mamba_type != PDKV_MAMBA_NONE;
    check(pdkv_tp_mapping_new(&params, &mapping, &err), err, "pdkv_tp_mapping_new");
    mi.struct_size = sizeof mi;
    check(pdkv_tp_mapping_get_info(mapping, &mi, &err), err, "pdkv_tp_mapping_get_info");
    printf("\nD rank %u:\n", (unsigned)d_tp_rank);
    check(pdkv_tp_mapping_ranks(mapping, PDKV_TP_LIST_HANDSHAKE_TARGETS, &ranks, &n, &err), err, "ranks");
    print_list("handshake with P ranks", ranks, n);
    check(pdkv_tp_mapping_ranks(mapping, PDKV_TP_LIST_ATTENTION_SOURCES, &ranks, &n, &err), err, "ranks");
    print_list("attention from", ranks, n);
    check(pdkv_tp_mapping_ranks(mapping, PDKV_TP_LIST_MAMBA_SOURCES, &ranks, &n, &err), err, "ranks");
    print_list("mamba state from", ranks, n);
    check(pdkv_tp_mapping_ranks(mapping, PDKV_TP_LIST_NOTIFY_TARGETS, &ranks, &n, &err), err, "ranks");
    print_list("notify", ranks, n);
    printf("    rank offset factor %u, each P rank expects %u notification(s) per request\n",
           (unsigned)mi.rank_offset_factor, (unsigned)mi.notifications_expected);

    if (desc.mamba_type != PDKV_MAMBA_NONE) {
      check(pdkv_mamba_reads_new(pg, dg, d_tp_rank, PDKV_MAMBA_READS_PDKV, &reads, &err), err, "pdkv_mamba_reads_new");
      check(pdkv_mamba_read_list_items(reads, &items, &n, &err), err, "pdkv_mamba_read_list_items");
      printf("    Mamba reads per block per layer (%zu):\n", n);
      for (i = 0; i < n; ++i) {
        printf("      P%u %-3s  remote +%-8llu -> local +%-8llu %llu B\n", (unsigned)items[i].p_tp_rank, items[i].part,
               (unsigned long long)items[i].remote_offset, (unsigned long long)items[i].local_offset,
               (unsigned long long)items[i].length);
      }
      pdkv_mamba_read_list_free(reads);
    }
    pdkv_tp_mapping_free(mapping);
  }

  pdkv_geometry_free(pg);
  pdkv_geometry_free(dg);
  pdkv_model_free(model);
  return 0;
}
