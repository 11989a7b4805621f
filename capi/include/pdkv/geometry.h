/*
 * pdkv/geometry.h - TP topology (tp_ratio, head ranges, rank mappings), engine settings and per-rank geometry.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_GEOMETRY_H
#define PDKV_GEOMETRY_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/geometry.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- TP topology ------------------------------------------------------------------- */

/* An immutable list of uint32_t values (ranks; pdkv/blocks.h has the uint64_t one). */
typedef struct pdkv_u32_list pdkv_u32_list_t;

/* The values: *items points to *count entries owned by the list, valid until
 * pdkv_u32_list_free (NULL when *count is 0). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_u32_list_items(const pdkv_u32_list_t *list, const uint32_t **items,
                                           size_t *count, pdkv_error_t **err);

/* Frees a value list and its items. NULL is allowed. Not thread-safe with concurrent use of the
 * same list. */
PDKV_API void pdkv_u32_list_free(pdkv_u32_list_t *list);

/* vLLM's tp_ratio sign convention, evaluated on the "local" engine (D when pulling):
 * +local_tp_size/remote_tp_size when local_tp_size >= remote_tp_size, else
 * -(remote_tp_size/local_tp_size). Never 0.
 * Errors: NULL_POINTER (out), INVALID_ARGUMENT (a zero size), TP_NOT_DIVISIBLE (message names
 * both sizes). Thread-safe. @plain */
PDKV_API pdkv_status_t pdkv_tp_ratio(uint32_t local_tp_size, uint32_t remote_tp_size,
                                     int32_t *out, pdkv_error_t **err);

/* Remote ranks that local rank `local_tp_rank` handshakes with, ascending. Errors: NULL_POINTER
 * (out), INVALID_ARGUMENT (a zero size, local_tp_rank >= local_tp_size), TP_NOT_DIVISIBLE.
 * *out owned by the caller (pdkv_u32_list_free). Thread-safe. @plain */
PDKV_API pdkv_status_t pdkv_handshake_target_ranks(uint32_t local_tp_size, uint32_t local_tp_rank,
                                                   uint32_t remote_tp_size, pdkv_u32_list_t **out,
                                                   pdkv_error_t **err);

/* KV heads that rank `tp_rank` of a TP group of size `tp_size` physically holds (contiguous GQA
 * placement), as the half-open range [*begin, *end). tp_size <= K: K/tp_size heads per rank;
 * tp_size > K: one head shared by tp_size/K consecutive ranks. Errors: NULL_POINTER (begin, end),
 * INVALID_ARGUMENT (tp_size or K zero, tp_rank >= tp_size), HEADS_NOT_DIVISIBLE (names K and the
 * TP size). Thread-safe. @plain(range) */
PDKV_API pdkv_status_t pdkv_physical_head_range(uint32_t tp_size, uint32_t tp_rank,
                                                uint32_t total_kv_heads, uint32_t *begin,
                                                uint32_t *end, pdkv_error_t **err);

/* P side, pull mode: READ-done notifications each P rank must receive per request before it
 * frees the request's blocks (d_tp_size/p_tp_size when d_tp_size > p_tp_size, else 1). Errors:
 * NULL_POINTER (out), INVALID_ARGUMENT, TP_NOT_DIVISIBLE. Thread-safe. @plain */
PDKV_API pdkv_status_t pdkv_notifications_expected_per_request(uint32_t p_tp_size,
                                                              uint32_t d_tp_size, uint32_t *out,
                                                              pdkv_error_t **err);

/* Inputs of a TP mapping: one local rank against one remote engine. */
typedef struct pdkv_tp_mapping_params {
  size_t struct_size;         /* sizeof(pdkv_tp_mapping_params_t) */
  uint64_t field_mask;        /* no optional fields yet: 0 */
  uint32_t local_tp_size;
  uint32_t local_tp_rank;     /* < local_tp_size */
  uint32_t remote_tp_size;
  uint32_t total_kv_heads;    /* K (MLA: 1) */
  uint8_t use_mla;            /* 0 or 1 */
  uint8_t has_mamba;          /* 0 or 1: the model has SSM groups (always TP-sharded) */
} pdkv_tp_mapping_params_t;

/* Which remote ranks a local rank reads from, and where. Immutable. */
typedef struct pdkv_tp_mapping pdkv_tp_mapping_t;

/* Scalars of a TP mapping. An output struct: set struct_size, the library fills that prefix. */
typedef struct pdkv_tp_mapping_info {
  size_t struct_size;               /* sizeof(pdkv_tp_mapping_info_t) */
  int32_t tp_ratio;                 /* see pdkv_tp_ratio */
  uint32_t rank_offset_factor;      /* head-slice offset in the remote block, in local block_lens */
  uint8_t local_replicated;         /* local_tp_size > K */
  uint8_t remote_replicated;        /* remote_tp_size > K */
  uint32_t local_physical_heads;    /* max(1, K/local_tp_size) */
  uint32_t remote_physical_heads;   /* max(1, K/remote_tp_size) */
  uint32_t num_attention_reads;     /* number of attention source ranks */
  uint32_t notifications_expected;  /* per request on each remote (P) rank; see
                                     * pdkv_notifications_expected_per_request */
} pdkv_tp_mapping_info_t;

/* Which rank list pdkv_tp_mapping_ranks returns. */
typedef enum pdkv_tp_mapping_list {
  PDKV_TP_LIST_HANDSHAKE_TARGETS = 0, /* remote ranks this rank handshakes with */
  PDKV_TP_LIST_ATTENTION_SOURCES = 1, /* remote ranks attention KV is read from (GQA dedup) */
  PDKV_TP_LIST_MAMBA_SOURCES = 2,     /* remote ranks Mamba state is read from (empty: no Mamba) */
  PDKV_TP_LIST_ALL_SOURCES = 3,       /* sorted union of attention and Mamba sources */
  PDKV_TP_LIST_ATTENTION_SLOTS = 4,   /* parallel to ALL_SOURCES: index into ATTENTION_SOURCES */
  PDKV_TP_LIST_NOTIFY_TARGETS = 5     /* remote ranks notified per request (every handshake target) */
} pdkv_tp_mapping_list_t;

/* Computes the mapping (params are not retained). Errors: NULL_POINTER (params, out),
 * STRUCT_SIZE, INVALID_ARGUMENT (zero TP or K, local_tp_rank >= local_tp_size, use_mla or
 * has_mamba not 0 or 1), TP_NOT_DIVISIBLE (names both sizes), HEADS_NOT_DIVISIBLE. *out owned
 * by the caller (pdkv_tp_mapping_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_tp_mapping_new(const pdkv_tp_mapping_params_t *params,
                                           pdkv_tp_mapping_t **out, pdkv_error_t **err);

/* Fills the caller's prefix of *out (out->struct_size bytes, set by the caller; plain values,
 * no pointers). Errors: NULL_POINTER (mapping, out), STRUCT_SIZE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_tp_mapping_get_info(const pdkv_tp_mapping_t *mapping,
                                                pdkv_tp_mapping_info_t *out, pdkv_error_t **err);

/* One rank list of the mapping (`which` is a pdkv_tp_mapping_list_t): *ranks points to *count
 * entries owned by the mapping, valid until pdkv_tp_mapping_free (NULL when *count is 0).
 * Errors: NULL_POINTER (mapping, ranks, count), INVALID_ARGUMENT (unknown `which`). Thread-safe. */
PDKV_API pdkv_status_t pdkv_tp_mapping_ranks(const pdkv_tp_mapping_t *mapping, int32_t which,
                                             const uint32_t **ranks, size_t *count,
                                             pdkv_error_t **err);

/* Attention slot of remote rank `remote_tp_rank` (its index in ATTENTION_SOURCES, or its
 * duplicate-head twin's). Errors: NULL_POINTER, INVALID_ARGUMENT (not a source rank).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_tp_mapping_attention_slot(const pdkv_tp_mapping_t *mapping,
                                                      uint32_t remote_tp_rank, uint32_t *out,
                                                      pdkv_error_t **err);

/* Frees a mapping and its rank lists. NULL is allowed. Not thread-safe with concurrent use of
 * the same mapping. */
PDKV_API void pdkv_tp_mapping_free(pdkv_tp_mapping_t *mapping);

/* ---- Engine settings --------------------------------------------------------------- */

/* Attention backends; each fixes the preferred block size and the kernel block sizes. Numeric
 * values are stable. PDKV_BACKEND_CUSTOM uses the explicit fields of pdkv_engine_config_t. */
typedef enum pdkv_attention_backend {
  PDKV_BACKEND_FLASH_ATTN = 0,     /* MultipleOf(16) */
  PDKV_BACKEND_TRITON = 1,         /* MultipleOf(16) */
  PDKV_BACKEND_FLASHINFER = 2,     /* [16, 32, 64] */
  PDKV_BACKEND_FLASHMLA = 3,       /* [64], MLA only */
  PDKV_BACKEND_CUTLASS_MLA = 4,    /* [128], MLA only */
  PDKV_BACKEND_FLASHINFER_MLA = 5, /* [32, 64], MLA only */
  PDKV_BACKEND_CUSTOM = 100        /* preferred_block_size + kernel_block_sizes / multiple_of */
} pdkv_attention_backend_t;

/* Prefix-cache mode of the Mamba state (vLLM "none" | "align" | "all"). */
typedef enum pdkv_mamba_cache_mode {
  PDKV_MAMBA_CACHE_NONE = 0,
  PDKV_MAMBA_CACHE_ALIGN = 1,
  PDKV_MAMBA_CACHE_ALL = 2
} pdkv_mamba_cache_mode_t;

/* Layout of the Mamba conv state. Only DS keeps each projection contiguous, which the
 * byte-exact transfer needs; SD is rejected with PDKV_ERR_UNSUPPORTED_LAYOUT. */
typedef enum pdkv_conv_layout {
  PDKV_CONV_LAYOUT_DS = 0,
  PDKV_CONV_LAYOUT_SD = 1
} pdkv_conv_layout_t;

/* Element formats: the identity of a dtype beyond its byte size. Formats of equal size
 * (FP8_E4M3 and FP8_E5M2, INT8_ and FP8_PER_TOKEN_HEAD, BFLOAT16 and FLOAT16) move the same bytes
 * but decode differently, so the handshake refuses a pair whose named formats differ. UNKNOWN:
 * not named (only byte sizes given), compatible with any format. Numeric values are stable
 * (they travel in the engine metadata, format 1.3). Since 2.4. */
typedef enum pdkv_element_format {
  PDKV_FORMAT_UNKNOWN = 0,
  PDKV_FORMAT_BFLOAT16 = 1,
  PDKV_FORMAT_FLOAT16 = 2,
  PDKV_FORMAT_FLOAT32 = 3,
  PDKV_FORMAT_FP8_E4M3 = 4,            /* vLLM's "fp8" (CUDA) and "fp8_e4m3" */
  PDKV_FORMAT_FP8_E5M2 = 5,
  PDKV_FORMAT_INT8_PER_TOKEN_HEAD = 6, /* KV cache only: 8-bit K/V + two fp32 scales per head */
  PDKV_FORMAT_FP8_PER_TOKEN_HEAD = 7,  /* KV cache only */
  PDKV_FORMAT_INT4_PER_TOKEN_HEAD = 8  /* KV cache only: 4-bit K/V + two fp32 scales per head */
} pdkv_element_format_t;

/* Canonical lower-case name of an element format ("fp8_e4m3", "bfloat16", ...); "unknown" for
 * PDKV_FORMAT_UNKNOWN and other values. Static storage. Thread-safe. Since 2.4. */
PDKV_API const char *pdkv_element_format_name(int32_t format);

/* Element format of a name, case-insensitive: the canonical names, vLLM's --dtype /
 * --kv-cache-dtype names and aliases (bf16, fp16, half, fp32, float, fp8 = fp8_e4m3), and "auto"
 * (PDKV_FORMAT_UNKNOWN). Errors: NULL_POINTER (name, out), NOT_FOUND (names the string and lists
 * the canonical names). Thread-safe. Since 2.4. */
PDKV_API pdkv_status_t pdkv_element_format_from_name(const char *name, int32_t *out, pdkv_error_t **err);

/* Optional fields of pdkv_engine_config_t (vLLM's "auto" and "not given"). A set field must be
 * non-zero. */
/* kv_cache_dtype_bytes */
#define PDKV_CONFIG_FIELD_KV_CACHE_DTYPE (1ULL << 0)
/* conv_state_dtype_bytes */
#define PDKV_CONFIG_FIELD_CONV_STATE_DTYPE (1ULL << 1)
/* ssm_state_dtype_bytes */
#define PDKV_CONFIG_FIELD_SSM_STATE_DTYPE (1ULL << 2)
/* user_block_size */
#define PDKV_CONFIG_FIELD_BLOCK_SIZE (1ULL << 3)
/* user_mamba_block_size */
#define PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE (1ULL << 4)
/* kv_cache_element_bits */
#define PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS (1ULL << 5)
/* model_format (this bit and the three below: since 2.4) */
#define PDKV_CONFIG_FIELD_MODEL_FORMAT (1ULL << 6)
/* kv_cache_format */
#define PDKV_CONFIG_FIELD_KV_CACHE_FORMAT (1ULL << 7)
/* conv_state_format */
#define PDKV_CONFIG_FIELD_CONV_STATE_FORMAT (1ULL << 8)
/* ssm_state_format */
#define PDKV_CONFIG_FIELD_SSM_STATE_FORMAT (1ULL << 9)

/* Settings of one engine (P or D) that change the geometry. Enum-typed fields are int32_t.
 * Fill with pdkv_engine_config_init() and then override (setting the bit of an optional field). */
typedef struct pdkv_engine_config {
  size_t struct_size;               /* sizeof(pdkv_engine_config_t) */
  uint64_t field_mask;              /* PDKV_CONFIG_FIELD_* bits of the optional fields set */
  uint32_t tp_size;                 /* >= 1 */
  uint32_t kv_cache_dtype_bytes;    /* optional; unset ("auto"): the model dtype */
  uint32_t conv_state_dtype_bytes;  /* optional; unset ("auto"): the model dtype */
  uint32_t ssm_state_dtype_bytes;   /* optional; unset ("auto"): the model's default SSM dtype,
                                       else the conv dtype */
  uint32_t num_speculative_tokens;  /* 0: no speculative decoding */
  uint32_t user_block_size;         /* optional (--block-size); unset: not given */
  uint32_t user_mamba_block_size;   /* optional (--mamba-block-size, "all" mode); unset: the
                                       model chunk size */
  int32_t attention_backend;        /* a pdkv_attention_backend_t */
  /* Used only with PDKV_BACKEND_CUSTOM: */
  uint32_t preferred_block_size;    /* backend's preferred block size */
  const uint32_t *kernel_block_sizes; /* explicit supported kernel sizes (copied), or NULL */
  size_t num_kernel_block_sizes;    /* entries in kernel_block_sizes; 0: use multiple_of */
  uint32_t kernel_block_multiple_of; /* MultipleOf(n) when no explicit list is given */
  /* Mamba state: */
  int32_t mamba_cache_mode;         /* a pdkv_mamba_cache_mode_t */
  int32_t conv_layout;              /* a pdkv_conv_layout_t */
  /* The KV cache element format: one KV head's entry per token is its K and V elements of
   * kv_cache_element_bits each plus kv_cache_head_extra_bytes packed beside them (vLLM's
   * int8/fp8_per_token_head: 8 bits + 8 bytes of fp32 scales, 520 B per head at head size 256;
   * int4_per_token_head: 4 bits + 8 bytes). Attention bytes per token, the hybrid block size and
   * head-sliced reads (a head's scales travel with its data) follow from it. */
  uint64_t kv_cache_element_bits;     /* optional: 4, 8, 16, 32 or 64; must agree with a set
                                         kv_cache_dtype_bytes. Unset: 8 * the KV dtype bytes */
  uint64_t kv_cache_head_extra_bytes; /* 0..4096 bytes per token per KV head; not with MLA */
  /* Named element formats (pdkv_element_format_t; vLLM's --dtype, --kv-cache-dtype,
   * --mamba-cache-dtype, --mamba-ssm-cache-dtype), advertised in the metadata so the handshake
   * refuses a peer whose format differs at equal size. Each is optional (its PDKV_CONFIG_FIELD_*_FORMAT
   * bit; set: not PDKV_FORMAT_UNKNOWN). Unset: unknown, except that a size left "auto" takes the
   * format it falls back to (KV cache and conv state: model_format; SSM state: the conv state's
   * when the model has no default SSM dtype). A format labels, never sizes: it must agree with the
   * sizes above (e.g. kv_cache_format FP8_E5M2 needs kv_cache_dtype_bytes 1 or
   * kv_cache_element_bits 8; INT8_PER_TOKEN_HEAD also kv_cache_head_extra_bytes 8; model_format
   * the model's dtype_bytes), else INVALID_ARGUMENT naming both; the *_PER_TOKEN_HEAD formats
   * are for kv_cache_format only. Since 2.4 (a 2.3 struct_size ends before them). */
  int32_t model_format;
  int32_t kv_cache_format;
  int32_t conv_state_format;
  int32_t ssm_state_format;
} pdkv_engine_config_t;

/* Fills *config with defaults (TP 1, FlashAttention, cache mode none, DS layout) and sets
 * struct_size = sizeof(pdkv_engine_config_t) and field_mask 0 (auto dtypes, no block sizes).
 * Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_config_init(pdkv_engine_config_t *config, pdkv_error_t **err);

/* Stable name of a backend ("flash_attn", "flashinfer", ..., "custom"); "unknown" otherwise.
 * Static storage. Thread-safe. */
PDKV_API const char *pdkv_backend_name(int32_t backend);

/* Backend from its pdkv or vLLM name, case-insensitive ("flashinfer", "FLASH_ATTN").
 * Errors: NULL_POINTER (name, out), NOT_FOUND (names the string and the valid names).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_backend_from_name(const char *name, int32_t *out, pdkv_error_t **err);

/* Kernel block size (tokens) that an engine on `backend` (a pdkv_attention_backend_t other than
 * PDKV_BACKEND_CUSTOM) with logical block size `block_size` allocates: block_size itself when
 * the backend's kernels accept it, else the largest of the backend's kernel sizes that divides
 * it (vLLM's select_common_block_size). Each logical block is block_size / *out kernel blocks.
 * Errors: NULL_POINTER (out), INVALID_ARGUMENT (block_size 0, an unknown or custom backend),
 * INCOMPATIBLE (no kernel size of the backend divides block_size; names them). Thread-safe.
 * @plain */
PDKV_API pdkv_status_t pdkv_backend_kernel_block_size(int32_t backend, uint64_t block_size,
                                                      uint64_t *out, pdkv_error_t **err);

/* ---- Geometry ---------------------------------------------------------------------- */

/* Per-engine geometry of a model: attention bytes per token, Mamba page, the hybrid block-size
 * rule, padded pages, kernel block size. Immutable. */
typedef struct pdkv_geometry pdkv_geometry_t;

/* Scalars of a geometry. An output struct: set struct_size, the library fills that prefix. */
typedef struct pdkv_geometry_info {
  size_t struct_size;               /* sizeof(pdkv_geometry_info_t) */
  uint32_t tp_size;
  uint32_t kv_heads_per_rank;       /* max(1, K/TP); MLA: 1 */
  uint64_t attn_bytes_per_token;    /* per rank */
  uint8_t hybrid;                   /* 1 when the model has Mamba layers */
  int32_t mamba_type;               /* a pdkv_mamba_type_t */
  uint64_t conv_rows;               /* conv_kernel - 1 (+ speculative tokens) */
  uint64_t conv_dim_local;          /* conv channels per rank */
  uint32_t conv_dtype_bytes;
  uint32_t ssm_dtype_bytes;
  uint64_t conv_bytes;              /* per rank, per logical block */
  uint64_t ssm_bytes;               /* per rank, per logical block (temporal state) */
  uint64_t mamba_page_bytes;        /* conv + ssm, unpadded */
  uint32_t align;                   /* rounding unit of the block-size rule */
  uint64_t min_block_size;          /* B: smallest block whose attention page holds a Mamba page */
  uint64_t block_size;              /* logical block size in tokens */
  uint8_t block_size_raised;        /* 1 when block_size was raised to B */
  uint64_t mamba_block_size;        /* tokens per Mamba state ("none": 0) */
  uint64_t attn_page_bytes;         /* block_size * attn_bytes_per_token */
  uint64_t mamba_page_padded_bytes; /* == attn_page_bytes for hybrids, else 0 */
  uint64_t padding_ppm;             /* 1e6 * (padded - page) / page, rounded down */
  double padding_percent;           /* 100 * (padded - page) / page (vLLM prints it %.2f) */
  uint64_t kernel_block_size;       /* tokens per kernel block */
  uint64_t physical_per_logical;    /* ppl = block_size / kernel_block_size */
  uint64_t kernel_page_bytes;       /* attn_page_bytes / ppl (block_len in the handshake) */
  size_t num_projections;           /* conv projections (pdkv_geometry_projection) */
  size_t num_temporal_dims;         /* rank of the temporal state (pdkv_geometry_temporal_shape) */
  size_t num_log_lines;             /* vLLM log lines (pdkv_geometry_log_line) */
  /* MLA-typed layers of a GQA model
   * (pdkv_model_desc_t.mla_head_size): bytes per token of their replicated latent (the same at
   * every TP) and their kernel page (kernel_block_size tokens). 0 for other models. */
  uint64_t mla_bytes_per_token;
  uint64_t mla_kernel_page_bytes;
  /* One KV head's entry per token (K and V elements plus the per-token-head
   * extras of pdkv_engine_config_t); attn_bytes_per_token = kv_heads_per_rank * this. */
  uint64_t kv_head_bytes_per_token;
} pdkv_geometry_info_t;

/* One projection of the conv channels (Mamba2 x/B/C, GDN Q/K/V, Mamba1 x), DS layout. */
typedef struct pdkv_conv_projection {
  size_t struct_size;               /* sizeof(pdkv_conv_projection_t) */
  const char *name;                 /* "x", "B", "C", "Q", "K", "V"; owned by the handle */
  uint64_t dim_local;               /* channels held by one rank */
  uint64_t dim_total;               /* channels of the whole model */
  uint8_t replicated;               /* 1: each rank holds a copy (Mamba2 B/C, n_groups < TP) */
  uint64_t bytes;                   /* dim_local * conv_rows * conv dtype */
  uint64_t offset;                  /* byte offset in the page */
} pdkv_conv_projection_t;

/* Derives the geometry of `model` on the engine `config` (neither is retained). Errors:
 * NULL_POINTER (model, config, out), STRUCT_SIZE (config), INVALID_ARGUMENT (unknown enum value,
 * unknown field_mask bits, a set optional field holding 0, zero TP or TP > 65536, a dtype size
 * other than 1/2/4/8, more than 64 speculative tokens, a user block size above 2^20, a KV
 * element size other than 4/8/16/32/64 bits or disagreeing
 * with kv_cache_dtype_bytes, K/V elements of a head not filling whole bytes, per-token-head
 * extras with MLA latents, ...), HEADS_NOT_DIVISIBLE, UNSUPPORTED_MAMBA_TYPE, UNSUPPORTED_LAYOUT (SD conv),
 * INCOMPATIBLE (MLA backend with a non-MLA model, or no kernel size fits), OVERFLOW.
 * *out owned by the caller (pdkv_geometry_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_geometry_new(const pdkv_model_t *model,
                                         const pdkv_engine_config_t *config,
                                         pdkv_geometry_t **out, pdkv_error_t **err);

/* Fills the caller's prefix of *out (out->struct_size bytes, set by the caller; plain values,
 * no pointers). Errors: NULL_POINTER (geometry, out), STRUCT_SIZE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_geometry_get_info(const pdkv_geometry_t *geometry,
                                              pdkv_geometry_info_t *out, pdkv_error_t **err);

/* Conv projection `index` (< info.num_projections) into the caller's prefix of *out; its name
 * is owned by the geometry and valid until pdkv_geometry_free. Errors: NULL_POINTER (geometry,
 * out), STRUCT_SIZE, OUT_OF_BOUNDS (names index and count). Thread-safe. */
PDKV_API pdkv_status_t pdkv_geometry_projection(const pdkv_geometry_t *geometry, size_t index,
                                                pdkv_conv_projection_t *out, pdkv_error_t **err);

/* Per-rank temporal state shape: *dims points to *count entries owned by the geometry, valid
 * until pdkv_geometry_free. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_geometry_temporal_shape(const pdkv_geometry_t *geometry,
                                                    const uint64_t **dims, size_t *count,
                                                    pdkv_error_t **err);

/* vLLM's INFO log line `index` (< info.num_log_lines) for this engine, verbatim, NUL-terminated,
 * owned by the geometry and valid until pdkv_geometry_free. Errors: NULL_POINTER, OUT_OF_BOUNDS.
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_geometry_log_line(const pdkv_geometry_t *geometry, size_t index,
                                              const char **line, pdkv_error_t **err);

/* Frees a geometry and the strings / arrays it handed out. NULL is allowed. Not thread-safe
 * with concurrent use of the same geometry. */
PDKV_API void pdkv_geometry_free(pdkv_geometry_t *geometry);

/* vLLM's block_size_ratio = local_kernel_bs / remote_kernel_bs. Errors: NULL_POINTER (out),
 * INVALID_ARGUMENT (a zero size), INCOMPATIBLE (the remote block does not divide the local one;
 * names both).
 * Thread-safe. @plain */
PDKV_API pdkv_status_t pdkv_block_size_ratio(uint64_t local_kernel_block_size,
                                             uint64_t remote_kernel_block_size, uint64_t *out,
                                             pdkv_error_t **err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_GEOMETRY_H */
