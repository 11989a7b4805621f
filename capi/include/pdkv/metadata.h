/*
 * pdkv/metadata.h - engine metadata (what a rank advertises, its wire format) and handshake validation.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_METADATA_H
#define PDKV_METADATA_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/metadata.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Engine metadata --------------------------------------------------------------- */

/* Attention KV layout of a kernel block. Numeric values are stable. */
typedef enum pdkv_kv_layout {
  PDKV_KV_LAYOUT_HND = 0, /* heads first: what head-sliced (heterogeneous TP) reads need */
  PDKV_KV_LAYOUT_NHD = 1
} pdkv_kv_layout_t;

/* Kind of the first layer using a registered region. Numeric values are stable. */
typedef enum pdkv_region_kind {
  PDKV_REGION_ATTENTION = 0,
  PDKV_REGION_MAMBA = 1,
  /* An MLA-typed attention region of a GQA model (layer kind 'L'): one latent replicated on
   * every rank, read whole from one prefill rank; its size does not change with TP. A pure MLA
   * model (use_mla) keeps PDKV_REGION_ATTENTION for its regions. Metadata format 1.1. */
  PDKV_REGION_MLA = 2
} pdkv_region_kind_t;

/* What one engine rank advertises in the handshake (wire format 1.x). Immutable. */
typedef struct pdkv_engine_metadata pdkv_engine_metadata_t;

/* Optional fields of pdkv_engine_layout_t. */
#define PDKV_LAYOUT_FIELD_PREFIX_CACHING (1ULL << 0)
/* pp_size, pp_rank and layer_begin together */
#define PDKV_LAYOUT_FIELD_PIPELINE (1ULL << 1)
#define PDKV_LAYOUT_FIELD_LAYER_END (1ULL << 2)

/* Where an engine's regions live and what it advertises beyond its geometry. Fill with
 * pdkv_engine_layout_init() and override. */
typedef struct pdkv_engine_layout {
  size_t struct_size;            /* sizeof(pdkv_engine_layout_t) */
  uint64_t field_mask;           /* PDKV_LAYOUT_FIELD_* bits of the optional fields set */
  const char *engine_id;         /* non-empty UTF-8, at most 256 bytes (copied) */
  uint32_t tp_rank;              /* < config tp_size */
  uint64_t num_logical_blocks;   /* per region; kernel blocks = this * ppl */
  uint32_t num_regions;          /* registered KV tensors (HMA: layers per group) */
  uint64_t base;                 /* address of region 0; regions follow back to back */
  const uint64_t *region_bases;  /* NULL, or num_regions explicit region addresses */
  int32_t kv_layout;             /* a pdkv_kv_layout_t (default HND) */
  uint8_t prefix_caching;        /* PDKV_LAYOUT_FIELD_PREFIX_CACHING: 0 off, 1 on. Unset: on
                                    iff mamba_cache_mode != none */
  /* NULL (default), or num_regions
   * pdkv_region_kind_t values, one per region (read, not retained). NULL: MAMBA for hybrids,
   * ATTENTION otherwise, and for a model with MLA-typed layers the kinds of its attention layers
   * in layer_pattern order (ATTENTION for '*', MLA for 'L'), repeated over the regions. */
  const int32_t *region_kinds;
  /* Pipeline stage (metadata format 1.2): stage pp_rank of pp_size holding the model layers
   * [layer_begin, layer_end); region i's layer is layer_begin + i.
   * PDKV_LAYOUT_FIELD_PIPELINE: pp_size (>= 1), pp_rank and layer_begin. Unset: one stage
   * holding every layer (pp_size 1, pp_rank 0, layer_begin 0).
   * PDKV_LAYOUT_FIELD_LAYER_END: layer_end (> layer_begin). Unset: through the model's last
   * layer (a single stage, or the last stage). */
  uint32_t pp_size;
  uint32_t pp_rank;
  uint32_t layer_begin;
  uint32_t layer_end;
} pdkv_engine_layout_t;

/* Defaults: engine_id "engine", rank 0, 64 logical blocks, 1 region at 2^40, HND, derived
 * region kinds; sets struct_size and field_mask 0 (prefix caching derived, one pipeline stage
 * holding every layer). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_layout_init(pdkv_engine_layout_t *layout, pdkv_error_t **err);

/* Metadata of rank layout->tp_rank of an engine running `model` with `config` (geometry derived
 * as pdkv_geometry_new does; nothing is retained). Errors: NULL_POINTER (model, config, layout,
 * out), STRUCT_SIZE (config, layout), the errors of pdkv_geometry_new, INVALID_ARGUMENT (bad
 * layout: empty engine id, rank >= TP, unknown kv_layout, a set prefix_caching not 0/1, unknown
 * field_mask bits, regions overlapping or leaving the address space, a region kind that is not a pdkv_region_kind_t or
 * that the model lacks (MLA without mla_head_size, MAMBA without Mamba layers), a pipeline
 * stage out of range (pp_rank >= pp_size, an empty window, a single stage not starting at layer
 * 0, a set pp_size of 0 or layer_end not above layer_begin, a stage other than the last without
 * layer_end, more regions than the window's layers)...),
 * OVERFLOW. *out owned by the caller
 * (pdkv_engine_metadata_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_metadata_from_model(const pdkv_model_t *model,
                                                       const pdkv_engine_config_t *config,
                                                       const pdkv_engine_layout_t *layout,
                                                       pdkv_engine_metadata_t **out,
                                                       pdkv_error_t **err);

/* Scalars of a metadata (output struct: set struct_size, the library fills that prefix). */
typedef struct pdkv_engine_metadata_info {
  size_t struct_size;                   /* sizeof(pdkv_engine_metadata_info_t) */
  const char *engine_id;                /* owned by the metadata */
  uint32_t tp_size;
  uint32_t tp_rank;
  int32_t kv_layout;                    /* a pdkv_kv_layout_t */
  int32_t conv_layout;                  /* a pdkv_conv_layout_t */
  uint32_t logical_block_size;          /* tokens per logical (HMA) block */
  uint32_t kernel_block_size;           /* tokens per kernel block */
  uint32_t physical_blocks_per_logical; /* ppl */
  uint64_t num_kernel_blocks;           /* kernel blocks per region */
  size_t num_regions;
  int32_t mamba_type;                   /* a pdkv_mamba_type_t (NONE: pure attention) */
  uint64_t conv_bytes;                  /* per rank per logical block */
  uint64_t ssm_bytes;
  size_t num_conv_projections;
  uint64_t attention_bytes_per_token;   /* per rank */
  uint8_t use_mla;
  uint32_t total_kv_heads;
  uint8_t prefix_caching;
  int32_t cache_mode;                   /* a pdkv_mamba_cache_mode_t */
  uint64_t model_fingerprint;
  /* Metadata format 1.2: pipeline stage pp_rank of pp_size holding the
   * layers [layer_begin, layer_end), layer_end 0 meaning through the model's last layer. A
   * single-stage engine reports 1, 0, 0, 0. */
  uint32_t pp_size;
  uint32_t pp_rank;
  uint32_t layer_begin;
  uint32_t layer_end;
  /* Metadata format 1.3: the engine's element formats (pdkv_element_format_t, resolved as
   * pdkv_engine_config_t describes). PDKV_FORMAT_UNKNOWN: not named, or metadata from a pdkv
   * before 1.3; the handshake treats it as compatible with any format. Since 2.4. */
  int32_t model_format;
  int32_t kv_cache_format;
  int32_t conv_state_format;
  int32_t ssm_state_format;
} pdkv_engine_metadata_info_t;

/* Fills the caller's prefix of *out (out->struct_size bytes, set by the caller); engine_id is
 * owned by the metadata and valid until pdkv_engine_metadata_free. Errors: NULL_POINTER
 * (metadata, out), STRUCT_SIZE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_metadata_get_info(const pdkv_engine_metadata_t *metadata,
                                                     pdkv_engine_metadata_info_t *out,
                                                     pdkv_error_t **err);

/* One advertised region. Element layout fixed for the major version. */
typedef struct pdkv_metadata_region {
  uint64_t base;
  uint64_t block_len;   /* kernel page bytes */
  uint64_t num_blocks;  /* kernel blocks */
  int32_t kind;         /* a pdkv_region_kind_t */
  uint32_t layer;       /* model layer index of the first user */
} pdkv_metadata_region_t;

/* The regions: *regions points to *count entries owned by the metadata, valid until
 * pdkv_engine_metadata_free. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_metadata_regions(const pdkv_engine_metadata_t *metadata,
                                                    const pdkv_metadata_region_t **regions,
                                                    size_t *count, pdkv_error_t **err);

/* Conv projection bytes in DS page order ([x|B|C], [Q|K|V], [x]; empty for pure attention):
 * ownership as pdkv_engine_metadata_regions. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_metadata_conv_projection_bytes(
    const pdkv_engine_metadata_t *metadata, const uint64_t **bytes, size_t *count,
    pdkv_error_t **err);

/* Encodes into buf[0..capacity). *out_len always receives the encoded size (also on
 * BUFFER_TOO_SMALL, whose message names the needed size). buf may be NULL when capacity is 0.
 * Deterministic. Errors: NULL_POINTER (metadata, out_len; buf with capacity > 0),
 * BUFFER_TOO_SMALL. The caller owns buf. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_metadata_encode(const pdkv_engine_metadata_t *metadata,
                                                   uint8_t *buf, size_t capacity, size_t *out_len,
                                                   pdkv_error_t **err);

/* Encodes into an owned byte buffer (pdkv_bytes_free). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_metadata_encode_bytes(const pdkv_engine_metadata_t *metadata,
                                                         pdkv_bytes_t **out, pdkv_error_t **err);

/* Decodes `len` untrusted bytes from a peer (not retained). Never reads outside them. Errors:
 * NULL_POINTER (bytes with len > 0, out), PARSE (truncated, wrong magic, unknown major version,
 * payload length mismatch, bad UTF-8, absurd counts, out-of-range fields, overlapping regions,
 * more than 2^32 kernel blocks or a block_len above 2^32 or a region above 2^48 bytes; names the
 * field and value), CHECKSUM (CRC32C mismatch), OUT_OF_BOUNDS (a region or page leaving its
 * memory). *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_metadata_decode(const uint8_t *bytes, size_t len,
                                                   pdkv_engine_metadata_t **out,
                                                   pdkv_error_t **err);

/* *out = 1 when both metadata are field-for-field equal, else 0. Errors: NULL_POINTER.
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_metadata_equal(const pdkv_engine_metadata_t *a,
                                                  const pdkv_engine_metadata_t *b, uint8_t *out,
                                                  pdkv_error_t **err);

/* Frees a metadata and its strings / arrays. NULL is allowed. Not thread-safe with concurrent
 * use of the same metadata. */
PDKV_API void pdkv_engine_metadata_free(pdkv_engine_metadata_t *metadata);

/* Newest wire format version this library reads and writes (major, minor): 1.3. Each encoding
 * is labelled with the lowest minor that describes it (1.3 when an element format is known,
 * appended as four trailing bytes; else 1.2 for a pipeline stage, pp_size > 1; else 1.1 when a
 * region is PDKV_REGION_MLA; else 1.0), so a 1.0 reader can read every encoding of a
 * single-stage engine without MLA-typed regions, an older reader refuses a stage's metadata
 * (PARSE on its unknown flag bit) rather than take it for the whole model, and a 1.2 reader
 * skips the formats (a newer minor's trailing bytes): it cannot compare them.
 * Either pointer may be NULL. Never fails. Thread-safe. */
PDKV_API void pdkv_metadata_wire_version(uint16_t *major, uint16_t *minor);

/* CRC-32C (Castagnoli) of len bytes, as the metadata header uses; crc32c("123456789") ==
 * 0xE3069283. Errors: NULL_POINTER (bytes with len > 0, out). Thread-safe. */
PDKV_API pdkv_status_t pdkv_crc32c(const uint8_t *bytes, size_t len, uint32_t *out,
                                   pdkv_error_t **err);

/* Stable 64-bit fingerprint of the parts of a model that change transfer geometry (name and
 * source excluded), as advertised in the metadata. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_model_fingerprint(const pdkv_model_t *model, uint64_t *out,
                                              pdkv_error_t **err);

/* ---- Handshake validation ---------------------------------------------------------- */

/* Every incompatibility found by one validation. Immutable. */
typedef struct pdkv_handshake_report pdkv_handshake_report_t;

/* One incompatibility (output struct); the strings are owned by the report. */
typedef struct pdkv_incompatibility {
  size_t struct_size;       /* sizeof(pdkv_incompatibility_t) */
  int32_t status;           /* a pdkv_status_t: INCOMPATIBLE, TP_NOT_DIVISIBLE, ... */
  const char *field;        /* metadata field, e.g. "kv_layout", "regions[3].num_blocks" */
  const char *local_value;
  const char *remote_value;
  const char *message;      /* what is wrong, naming the values */
  const char *fix;          /* what the operator can change */
  const char *text;         /* "<STATUS> <field>: <message> (local: v, remote: v). Fix: <fix>" */
} pdkv_incompatibility_t;

/* Validates a (local, remote) pair ("local" runs the check: D when pulling). An incompatible
 * pair is NOT an error: the report lists every item (empty: the pair can be served). Element
 * formats known on both sides must be equal: each difference is an INCOMPATIBLE item on
 * "model_format", "kv_cache_format", "conv_state_format" or "ssm_state_format" whose message
 * names both formats ("kv_cache_format: fp8_e4m3 vs fp8_e5m2: ...") and whose fix names the vLLM
 * flag; PDKV_FORMAT_UNKNOWN on either side is compatible. Errors:
 * NULL_POINTER (local, remote, out). *out owned by the caller (pdkv_handshake_report_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_handshake_validate(const pdkv_engine_metadata_t *local,
                                               const pdkv_engine_metadata_t *remote,
                                               pdkv_handshake_report_t **out, pdkv_error_t **err);

/* Checks that the ranks of ONE remote engine agree (engine id, TP size, block counts, region
 * count, geometry, distinct tp_ranks, and the element formats two ranks both name); items compare
 * ranks[0] ("local") with the offending rank ("remote"), for a format the first rank naming it. ranks is an array of n_ranks handles. Errors: NULL_POINTER (ranks with n > 0, an
 * element, out). *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_handshake_validate_engine_ranks(
    const pdkv_engine_metadata_t *const *ranks, size_t n_ranks, pdkv_handshake_report_t **out,
    pdkv_error_t **err);

/* Number of incompatibilities. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_handshake_report_count(const pdkv_handshake_report_t *report,
                                                   size_t *count, pdkv_error_t **err);

/* Item `index` (< count) into the caller's prefix of *out; its strings are owned by the report
 * and valid until pdkv_handshake_report_free. Errors: NULL_POINTER (report, out), STRUCT_SIZE,
 * OUT_OF_BOUNDS (names index and count). Thread-safe. */
PDKV_API pdkv_status_t pdkv_handshake_report_item(const pdkv_handshake_report_t *report,
                                                  size_t index, pdkv_incompatibility_t *out,
                                                  pdkv_error_t **err);

/* Frees a report and its items' strings. NULL is allowed. Not thread-safe with concurrent use
 * of the same report. */
PDKV_API void pdkv_handshake_report_free(pdkv_handshake_report_t *report);

/* Require-style validation: OK when the pair can be served, else INCOMPATIBLE whose message
 * joins every item's text with "; ". Errors: NULL_POINTER, INCOMPATIBLE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_handshake_require_compatible(const pdkv_engine_metadata_t *local,
                                                         const pdkv_engine_metadata_t *remote,
                                                         pdkv_error_t **err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_METADATA_H */
