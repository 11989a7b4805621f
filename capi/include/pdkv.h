/*
 * pdkv.h - the stable C API of pdkv (KV-cache and Mamba-state transfer planning for
 * prefill/decode disaggregated LLM serving).
 *
 * Conventions (they hold for every function unless its comment says otherwise):
 *  - Every fallible function returns a pdkv_status_t (PDKV_OK == 0) and takes, as its last
 *    argument, `pdkv_error_t **err`. On failure, if err is non-NULL, *err receives a newly
 *    allocated error object that the caller owns and frees with pdkv_error_free(). On success
 *    *err is set to NULL. Passing err == NULL is allowed: only the status is returned.
 *    There is no thread-local "last error".
 *  - Handles are typed opaque pointers. Objects returned through `**out` are owned by the
 *    caller and freed with the matching pdkv_*_free(); free functions accept NULL.
 *  - Options structs begin with `size_t struct_size`, which the caller sets to
 *    sizeof(the struct) as compiled. The library accepts any size from the first published
 *    size of the struct up to its current size, so structs can grow without breaking the ABI;
 *    other sizes are PDKV_ERR_STRUCT_SIZE (the message names the struct and the valid range).
 *    The "first published size" of every struct of this header is its size in pdkv 0.1, i.e.
 *    the end of its last 0.1 field rounded up to alignof(size_t); the library pins it to that
 *    field, so it never moves when a field is appended. In bytes on LP64 (x86-64, AArch64):
 *      pdkv_model_desc_t 104, pdkv_tp_mapping_params_t 32, pdkv_tp_mapping_info_t 40,
 *      pdkv_engine_config_t 80, pdkv_geometry_info_t 200, pdkv_conv_projection_t 56,
 *      pdkv_descriptor_layout_t 48, pdkv_exchange_clip_params_t 48,
 *      pdkv_group_trim_input_t 112, pdkv_aligned_split_v0604_input_t 72,
 *      pdkv_aligned_split_input_t 96, pdkv_remote_decode_prefill_t 32,
 *      pdkv_remote_decode_prefill_plan_t 32, pdkv_offload_geometry_t 24,
 *      pdkv_engine_layout_t 64, pdkv_engine_metadata_info_t 128, pdkv_incompatibility_t 64,
 *      pdkv_plan_context_params_t 56, pdkv_plan_group_t 32, pdkv_transfer_plan_info_t 104,
 *      pdkv_plan_group_zero_t 64.
 *    A field added later starts at or after that size (never in the 0.1 tail padding) and,
 *    in an input struct, is treated as zero when the caller's struct_size does not reach it.
 *    Output structs follow the same rule: the library fills only the first struct_size bytes.
 *  - Structs without struct_size (elements of arrays: pdkv_region_t, pdkv_descriptor_t,
 *    pdkv_plan_read_t, pdkv_zero_range_t, ...) have a layout fixed for major version 0: they
 *    never grow; a change would be a new major version.
 *  - Nothing that may grow is passed by value.
 *  - No exception crosses this boundary; an unexpected one becomes PDKV_ERR_INTERNAL.
 *  - Thread safety: handles are immutable after creation unless stated otherwise, so const
 *    queries on one handle may run concurrently from many threads. Freeing a handle while
 *    another thread uses it is undefined.
 *  - Every function's own comment restates what it does, its errors (the statuses it returns
 *    besides PDKV_OK; any function may also return PDKV_ERR_INTERNAL), who owns its outputs and
 *    how long returned pointers stay valid, and its thread safety.
 */
#ifndef PDKV_H
#define PDKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PDKV_BUILDING_LIBRARY)
#define PDKV_API __attribute__((visibility("default")))
#else
#define PDKV_API
#endif

/* ABI version of this header. A change of MAJOR breaks the ABI; MINOR adds functions or
 * grows structs at their end. Compare with pdkv_version() at run time. */
#define PDKV_VERSION_MAJOR 0
#define PDKV_VERSION_MINOR 2
#define PDKV_VERSION_PATCH 0

/* Status codes. Numeric values are stable. They come in ranges with room to grow:
 *   0-99    general and planning (the values below 100 are those of pdkv 0.1),
 *   200-299 transport: the executor (agents, handshakes, transfers),
 *   300-399 device memory (reserved for CUDA).
 * A binding that meets a value it does not know must treat it as an error of that range. */
typedef enum pdkv_status {
  PDKV_OK = 0,
  PDKV_ERR_INVALID_ARGUMENT = 1,
  PDKV_ERR_NULL_POINTER = 2,
  PDKV_ERR_STRUCT_SIZE = 3,
  PDKV_ERR_TP_NOT_DIVISIBLE = 4,
  PDKV_ERR_HEADS_NOT_DIVISIBLE = 5,
  PDKV_ERR_UNSUPPORTED_MAMBA_TYPE = 6,
  PDKV_ERR_UNSUPPORTED_LAYOUT = 7,
  PDKV_ERR_OVERFLOW = 8,
  PDKV_ERR_BUFFER_TOO_SMALL = 9,
  PDKV_ERR_PARSE = 10,
  PDKV_ERR_IO = 11,
  PDKV_ERR_NOT_FOUND = 12,
  PDKV_ERR_INCOMPATIBLE = 13,
  PDKV_ERR_COVERAGE = 14,
  PDKV_ERR_OUT_OF_BOUNDS = 15,
  PDKV_ERR_CHECKSUM = 16,
  PDKV_ERR_INTERNAL = 17,
  /* Transport range. */
  PDKV_ERR_TIMED_OUT = 200,   /* a deadline expired (transfer, handshake, connect) */
  PDKV_ERR_CANCELLED = 201,   /* the caller cancelled the operation */
  PDKV_ERR_PEER_LOST = 202,   /* the peer died, closed, or stopped answering heartbeats */
  PDKV_ERR_AUTH = 203,        /* pre-shared key proof failed (message names the peer) */
  PDKV_ERR_PROTOCOL = 204,    /* a peer sent a malformed, unexpected or lying frame */
  PDKV_ERR_TRANSPORT = 205,   /* the transport library failed (pdkv_error_cause gives its code) */
  PDKV_ERR_BUSY = 206,        /* a resource is in use (deregistering memory a transfer uses) */
  PDKV_ERR_SHUTDOWN = 207     /* the agent is shutting down or was closed */
} pdkv_status_t;

/* Where an error's underlying cause comes from. Numeric values are stable. */
typedef enum pdkv_cause_domain {
  PDKV_CAUSE_NONE = 0,
  PDKV_CAUSE_UCX = 1,     /* code is a ucs_status_t */
  PDKV_CAUSE_ERRNO = 2,   /* code is an errno value */
  PDKV_CAUSE_CUDA = 3,    /* code is a cudaError_t */
  PDKV_CAUSE_OPENSSL = 4  /* code is an ERR_get_error() value */
} pdkv_cause_domain_t;

/* ---- Errors ------------------------------------------------------------------------- */

/* An owned error: a status plus a human-readable message that names the offending value. */
typedef struct pdkv_error pdkv_error_t;

/* Status of an error. err may be NULL (returns PDKV_OK). Never fails. Thread-safe. */
PDKV_API pdkv_status_t pdkv_error_status(const pdkv_error_t *err);
/* Message of an error, NUL-terminated UTF-8, owned by err and valid until pdkv_error_free(err).
 * Returns "" for NULL. Thread-safe. */
PDKV_API const char *pdkv_error_message(const pdkv_error_t *err);
/* Frees an error and its message. NULL is allowed. Not thread-safe with concurrent use of the
 * same error (its message pointer dies with it). */
PDKV_API void pdkv_error_free(pdkv_error_t *err);
/* The lower-layer cause of an error, if any: *domain receives a pdkv_cause_domain_t
 * (PDKV_CAUSE_NONE when the error has none, or err is NULL) and *code that layer's own code.
 * Either out pointer may be NULL. Never fails. Thread-safe. */
PDKV_API void pdkv_error_cause(const pdkv_error_t *err, int32_t *domain, int64_t *code);
/* Stable name of a status ("PDKV_ERR_TP_NOT_DIVISIBLE"); static storage. Thread-safe. */
PDKV_API const char *pdkv_status_name(pdkv_status_t status);

/* ---- Version ------------------------------------------------------------------------ */

/* Runtime version of the library as (major << 16) | (minor << 8) | patch. Thread-safe. */
PDKV_API uint32_t pdkv_version(void);
/* Runtime version string "MAJOR.MINOR.PATCH"; static storage. Thread-safe. */
PDKV_API const char *pdkv_version_string(void);

/* ---- Model ------------------------------------------------------------------------- */

/* Kinds of Mamba-like layers. Numeric values are stable. Only MAMBA1, MAMBA2 and GDN have a
 * conv-state split rule; the others can be described but every derivation rejects them with
 * PDKV_ERR_UNSUPPORTED_MAMBA_TYPE. */
typedef enum pdkv_mamba_type {
  PDKV_MAMBA_NONE = 0,       /* pure attention model */
  PDKV_MAMBA_MAMBA1 = 1,     /* Jamba */
  PDKV_MAMBA_MAMBA2 = 2,     /* Nemotron-H, Falcon-H1, Granite-4.0-H, Zamba2 */
  PDKV_MAMBA_GDN = 3,        /* gated delta net: Qwen3-Next, Qwen3.5 */
  PDKV_MAMBA_SHORT_CONV = 4, /* LFM2 (unsupported for transfer) */
  PDKV_MAMBA_LINEAR = 5,     /* lightning / linear attention (unsupported for transfer) */
  PDKV_MAMBA_KDA = 6         /* Kimi delta attention (unsupported for transfer) */
} pdkv_mamba_type_t;

/* An immutable model description. */
typedef struct pdkv_model pdkv_model_t;

/* Everything pdkv needs to know about a model. Used both as input (pdkv_model_new) and as
 * output (pdkv_model_describe). Enum-typed fields are int32_t so the struct layout never
 * depends on the compiler's enum size. First published size: the whole struct of 0.1. */
typedef struct pdkv_model_desc {
  size_t struct_size;            /* sizeof(pdkv_model_desc_t) */
  const char *name;              /* e.g. "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"; NULL = "" */
  const char *source;            /* where the numbers come from; NULL = "" */
  /* Attention. */
  uint32_t num_kv_heads;         /* total KV heads (MLA: 1) */
  uint32_t head_size;            /* K head dim (MLA: kv_lora_rank + qk_rope_head_dim) */
  uint32_t head_size_v;          /* V head dim (MLA: 0) */
  uint8_t use_mla;               /* 0 or 1 */
  uint32_t sliding_window;       /* 0: full attention */
  /* Mamba (ignored when mamba_type == PDKV_MAMBA_NONE). */
  int32_t mamba_type;            /* a pdkv_mamba_type_t */
  uint32_t mamba_num_heads;      /* Mamba2: heads; GDN: value heads */
  uint32_t mamba_head_dim;       /* Mamba2: head dim; GDN: value head dim */
  uint32_t mamba_d_state;        /* Mamba1/2: d_state; GDN: key head dim */
  uint32_t mamba_n_groups;       /* Mamba2: n_groups; GDN: key heads */
  uint64_t mamba_d_inner;        /* Mamba1 only */
  uint32_t mamba_conv_kernel;    /* d_conv */
  uint32_t mamba_chunk_size;     /* 0 means 2048 */
  uint8_t mamba_conv_rows_include_spec; /* 1: speculative tokens add conv rows (NemotronH, GDN) */
  /* Dtypes and layers. */
  uint32_t dtype_bytes;          /* model dtype size, 1..8 */
  uint32_t default_ssm_dtype_bytes; /* engine "auto" SSM state dtype; 0 = conv dtype */
  const char *layer_pattern;     /* one char per layer: '*' attention, 'M' Mamba, 'P' both,
                                  * 'L' MLA-typed attention in a GQA model (see mla_head_size),
                                  * '-' neither; NULL or "" = unknown */
  /* Appended after 0.1 (at byte 104, the 0.1 size; a caller whose struct_size stops before it
   * gets 0). Width of the latent of the 'L' layers of a GQA model, in elements (e.g. an indexer
   * key cache vLLM registers as an MLA spec): one head replicated on every rank, read whole
   * from one prefill rank. 0: no such layers. A pure MLA model (use_mla) leaves it 0. */
  uint32_t mla_head_size;
} pdkv_model_desc_t;

/* Creates a model from a description. The strings are copied; desc is not retained.
 * Errors: NULL_POINTER (desc, out), STRUCT_SIZE, INVALID_ARGUMENT (unknown mamba_type value,
 * zero heads, bad layer_pattern char, a 0/1 flag such as use_mla or
 * mamba_conv_rows_include_spec holding another value, ...). On success *out is owned by the caller
 * (pdkv_model_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_model_new(const pdkv_model_desc_t *desc, pdkv_model_t **out,
                                      pdkv_error_t **err);

/* Creates a model from a built-in preset (see pdkv_preset_count), by short name or Hugging Face
 * repo id, case-insensitive ("nemotron-3-nano-30b", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"). Errors: NULL_POINTER (name, out),
 * NOT_FOUND (message names the preset). *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_model_from_preset(const char *name, pdkv_model_t **out,
                                              pdkv_error_t **err);

/* Reads a Hugging Face config.json file at `path` and derives the model from it. `name` (may be
 * NULL) is stored as the model name; NULL keeps the config's "_name_or_path", else the path. Errors: NULL_POINTER (path, out),
 * IO (the path cannot be read; message names it), PARSE (malformed JSON, naming the position),
 * NOT_FOUND (a required key is missing; names the key), INVALID_ARGUMENT (a key of the wrong
 * type or value), UNSUPPORTED_MAMBA_TYPE (a hybrid model_type pdkv has no rule for). *out owned by the caller. Thread-safe (reads the file). */
PDKV_API pdkv_status_t pdkv_model_from_hf_config_file(const char *path, const char *name,
                                                      pdkv_model_t **out, pdkv_error_t **err);

/* Same as pdkv_model_from_hf_config_file, from `len` bytes of JSON text in memory (need not be
 * NUL-terminated; not retained). Errors: NULL_POINTER (json, out), PARSE, NOT_FOUND,
 * INVALID_ARGUMENT, UNSUPPORTED_MAMBA_TYPE as pdkv_model_from_hf_config_file (never IO). *out
 * owned by the caller (pdkv_model_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_model_from_hf_config_json(const char *json, size_t len,
                                                      const char *name, pdkv_model_t **out,
                                                      pdkv_error_t **err);

/* Fills *out (up to out->struct_size bytes, which the caller sets) with the model's
 * description. The strings in *out are owned by the model and valid until pdkv_model_free.
 * Errors: NULL_POINTER (model, out), STRUCT_SIZE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_model_describe(const pdkv_model_t *model, pdkv_model_desc_t *out,
                                           pdkv_error_t **err);

/* Layer counts from the layer pattern: attention = '*' + 'P', Mamba = 'M' + 'P'. Either out
 * pointer may be NULL (not written) but not both. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_model_layer_counts(const pdkv_model_t *model,
                                               uint32_t *num_attention_layers,
                                               uint32_t *num_mamba_layers, pdkv_error_t **err);

/* Frees a model and the strings pdkv_model_describe handed out. NULL is allowed. Not
 * thread-safe with concurrent use of the same model. */
PDKV_API void pdkv_model_free(pdkv_model_t *model);

/* Stable lower-case name of a Mamba type ("mamba2", "gdn", ...); "unknown" for other values.
 * Static storage. Thread-safe. */
PDKV_API const char *pdkv_mamba_type_name(int32_t mamba_type);

/* ---- Presets ----------------------------------------------------------------------- */

/* Number of built-in model presets. Never fails. Thread-safe. */
PDKV_API size_t pdkv_preset_count(void);

/* Preset `index` (< pdkv_preset_count()): short name (e.g. "nemotron-3-nano-30b"), Hugging Face
 * repo id (accepted by pdkv_model_from_preset as an alias) and the source of its numbers.
 * Strings are static storage. Any out pointer may be NULL (not written). Errors: OUT_OF_BOUNDS
 * (index and count in the message). Thread-safe. */
PDKV_API pdkv_status_t pdkv_preset_at(size_t index, const char **name, const char **hf_name,
                                      const char **source, pdkv_error_t **err);

/* ---- TP topology ------------------------------------------------------------------- */

/* vLLM's tp_ratio sign convention, evaluated on the "local" engine (D when pulling):
 * +local_tp/remote_tp when local_tp >= remote_tp, else -(remote_tp/local_tp). Never 0.
 * Errors: NULL_POINTER (out), INVALID_ARGUMENT (a zero size), TP_NOT_DIVISIBLE (message names
 * both sizes). Thread-safe. */
PDKV_API pdkv_status_t pdkv_tp_ratio(uint32_t local_tp, uint32_t remote_tp, int32_t *out,
                                     pdkv_error_t **err);

/* Remote ranks that local rank `local_rank` handshakes with, written to ranks[0..capacity).
 * *out_count always receives the number of ranks needed (also on BUFFER_TOO_SMALL, so the caller
 * can retry with a larger buffer). ranks may be NULL when capacity is 0. Errors: NULL_POINTER
 * (out_count; ranks with capacity > 0), INVALID_ARGUMENT (local_rank >= local_tp), TP_NOT_DIVISIBLE,
 * BUFFER_TOO_SMALL. The caller owns the buffer. Thread-safe. */
PDKV_API pdkv_status_t pdkv_handshake_target_ranks(uint32_t local_tp, uint32_t local_rank,
                                                   uint32_t remote_tp, uint32_t *ranks,
                                                   size_t capacity, size_t *out_count,
                                                   pdkv_error_t **err);

/* KV heads that rank `rank` of a TP group of size `tp` physically holds (contiguous GQA
 * placement), as the half-open range [*begin, *end). tp <= K: K/tp heads per rank; tp > K: one
 * head shared by tp/K consecutive ranks. Errors: NULL_POINTER (begin, end), INVALID_ARGUMENT
 * (tp or K zero, rank >= tp), HEADS_NOT_DIVISIBLE (names K and tp). Thread-safe. */
PDKV_API pdkv_status_t pdkv_physical_head_range(uint32_t tp, uint32_t total_kv_heads,
                                                uint32_t rank, uint32_t *begin, uint32_t *end,
                                                pdkv_error_t **err);

/* P side, pull mode: READ-done notifications each P rank must receive per request before it
 * frees the request's blocks (d_tp/p_tp when D_TP > P_TP, else 1). Errors: NULL_POINTER (out),
 * INVALID_ARGUMENT, TP_NOT_DIVISIBLE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_notifications_expected_per_request(uint32_t p_tp, uint32_t d_tp,
                                                              uint32_t *out, pdkv_error_t **err);

/* Inputs of a TP mapping: one local rank against one remote engine. */
typedef struct pdkv_tp_mapping_params {
  size_t struct_size;         /* sizeof(pdkv_tp_mapping_params_t) */
  uint32_t local_tp;
  uint32_t local_rank;        /* < local_tp */
  uint32_t remote_tp;
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
  uint8_t local_replicated;         /* local_tp > K */
  uint8_t remote_replicated;        /* remote_tp > K */
  uint32_t local_physical_heads;    /* max(1, K/local_tp) */
  uint32_t remote_physical_heads;   /* max(1, K/remote_tp) */
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
 * STRUCT_SIZE, INVALID_ARGUMENT (zero TP or K, local_rank >= local_tp, use_mla or has_mamba not
 * 0 or 1), TP_NOT_DIVISIBLE
 * (names both sizes), HEADS_NOT_DIVISIBLE. *out owned by the caller (pdkv_tp_mapping_free).
 * Thread-safe. */
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

/* Attention slot of remote rank `remote_rank` (its index in ATTENTION_SOURCES, or its
 * duplicate-head twin's). Errors: NULL_POINTER, INVALID_ARGUMENT (not a source rank).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_tp_mapping_attention_slot(const pdkv_tp_mapping_t *mapping,
                                                      uint32_t remote_rank, uint32_t *out,
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

/* Settings of one engine (P or D) that change the geometry. Byte sizes of 0 mean "auto".
 * Enum-typed fields are int32_t. Fill with pdkv_engine_config_init() and then override. */
typedef struct pdkv_engine_config {
  size_t struct_size;               /* sizeof(pdkv_engine_config_t) */
  uint32_t tp_size;                 /* >= 1 */
  uint32_t kv_cache_dtype_bytes;    /* 0: model dtype */
  uint32_t conv_state_dtype_bytes;  /* 0: model dtype */
  uint32_t ssm_state_dtype_bytes;   /* 0: model default, else the conv dtype */
  uint32_t num_speculative_tokens;
  uint32_t user_block_size;         /* --block-size; 0: not set */
  uint32_t user_mamba_block_size;   /* --mamba-block-size ("all" mode); 0: model chunk size */
  int32_t attention_backend;        /* a pdkv_attention_backend_t */
  /* Used only with PDKV_BACKEND_CUSTOM: */
  uint32_t preferred_block_size;    /* backend's preferred block size */
  const uint32_t *kernel_block_sizes; /* explicit supported kernel sizes (copied), or NULL */
  size_t num_kernel_block_sizes;    /* entries in kernel_block_sizes; 0: use multiple_of */
  uint32_t kernel_block_multiple_of; /* MultipleOf(n) when no explicit list is given */
  /* Mamba state: */
  int32_t mamba_cache_mode;         /* a pdkv_mamba_cache_mode_t */
  int32_t conv_layout;              /* a pdkv_conv_layout_t */
  /* Appended after 0.1 (uint64_t so that they start at byte 80, the 0.1 size; a caller whose
   * struct_size stops before them gets 0). The KV cache element format: one KV head's entry per
   * token is its K and V elements of kv_cache_element_bits each plus kv_cache_head_extra_bytes
   * packed beside them (vLLM's int8/fp8_per_token_head: 8 bits + 8 bytes of fp32 scales, 520 B
   * per head at head size 256; int4_per_token_head: 4 bits + 8 bytes). Attention bytes per
   * token, the hybrid block size and head-sliced reads (a head's scales travel with its data)
   * follow from it. */
  uint64_t kv_cache_element_bits;     /* 0 (8 * the KV dtype bytes), 4, 8, 16, 32 or 64; must
                                         agree with a non-zero kv_cache_dtype_bytes */
  uint64_t kv_cache_head_extra_bytes; /* 0..4096 bytes per token per KV head; not with MLA */
} pdkv_engine_config_t;

/* Fills *config with defaults (TP 1, auto dtypes, FlashAttention, cache mode none, DS layout)
 * and sets struct_size = sizeof(pdkv_engine_config_t). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_config_init(pdkv_engine_config_t *config, pdkv_error_t **err);

/* Stable name of a backend ("flash_attn", "flashinfer", ..., "custom"); "unknown" otherwise.
 * Static storage. Thread-safe. */
PDKV_API const char *pdkv_backend_name(int32_t backend);

/* Backend from its pdkv or vLLM name, case-insensitive ("flashinfer", "FLASH_ATTN").
 * Errors: NULL_POINTER (name, out), NOT_FOUND (names the string and the valid names).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_backend_from_name(const char *name, int32_t *out, pdkv_error_t **err);

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
  /* Appended after 0.1 (at byte 200, the 0.1 size). MLA-typed layers of a GQA model
   * (pdkv_model_desc_t.mla_head_size): bytes per token of their replicated latent (the same at
   * every TP) and their kernel page (kernel_block_size tokens). 0 for other models. */
  uint64_t mla_bytes_per_token;
  uint64_t mla_kernel_page_bytes;
  /* Appended after 0.1: one KV head's entry per token (K and V elements plus the per-token-head
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
 * zero TP or TP > 65536, a dtype size other than 0/1/2/4/8, more than 64 speculative tokens, a
 * user block size above 2^20, a KV element size other than 0/4/8/16/32/64 bits or disagreeing
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
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_block_size_ratio(uint64_t local_kernel_block_size,
                                             uint64_t remote_kernel_block_size, uint64_t *out,
                                             pdkv_error_t **err);

/* ---- Mamba state transfer ---------------------------------------------------------- */

/* A byte range inside one logical Mamba page of one layer. */
typedef struct pdkv_byte_range {
  uint64_t offset;
  uint64_t size;
} pdkv_byte_range_t;

/* Cumulative (offset, size) of each conv projection in the local page of `geometry`
 * ([x|B|C], [Q|K|V] or [x]) into ranges[0..capacity); *out_count receives the needed count (also
 * on BUFFER_TOO_SMALL). Errors: NULL_POINTER, UNSUPPORTED_MAMBA_TYPE (not hybrid),
 * BUFFER_TOO_SMALL. Caller owns the buffer. Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_local_conv_offsets(const pdkv_geometry_t *geometry,
                                                     pdkv_byte_range_t *ranges, size_t capacity,
                                                     size_t *out_count, pdkv_error_t **err);

/* vLLM main's remote conv slices for local rank `local_rank` (geometry is the LOCAL engine's):
 * tp_ratio >= 1 reads (base + lo*size, size) with lo = local_rank % tp_ratio; tp_ratio < 0 reads
 * each whole remote projection. Wrong for Mamba2 with n_groups < TP (vLLM #55208): for planning
 * use pdkv_mamba_reads_new. Buffer convention as pdkv_mamba_local_conv_offsets. Errors:
 * NULL_POINTER, INVALID_ARGUMENT (tp_ratio 0, indivisible sizes), BUFFER_TOO_SMALL. Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_remote_conv_offsets(const pdkv_geometry_t *geometry,
                                                      uint32_t local_rank, int32_t tp_ratio,
                                                      pdkv_byte_range_t *ranges, size_t capacity,
                                                      size_t *out_count, pdkv_error_t **err);

/* vLLM's SSM temporal-state read in the remote page: tp_ratio >= 1 reads the local ssm bytes at
 * remote_conv_bytes + lo*local_ssm_bytes; tp_ratio < 0 reads the whole remote ssm state.
 * Errors: NULL_POINTER (geometry, out), INVALID_ARGUMENT, OVERFLOW. Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_ssm_read_range(const pdkv_geometry_t *geometry,
                                                 uint64_t remote_conv_bytes,
                                                 uint64_t remote_ssm_bytes, uint32_t local_rank,
                                                 int32_t tp_ratio, pdkv_byte_range_t *out,
                                                 pdkv_error_t **err);

/* ceil((conv_bytes + ssm_bytes) / block_len): kernel blocks per logical Mamba block, as vLLM
 * derived the remote ratio before the handshake carried it. Errors: NULL_POINTER (out),
 * INVALID_ARGUMENT (block_len 0), OVERFLOW. Thread-safe. */
PDKV_API pdkv_status_t pdkv_physical_blocks_per_logical(uint64_t conv_bytes, uint64_t ssm_bytes,
                                                        uint64_t block_len, uint64_t *out,
                                                        pdkv_error_t **err);

/* One contiguous copy from a P rank's Mamba page into the D rank's page. The element layout is
 * fixed for the major version (arrays of it cannot grow). */
typedef struct pdkv_mamba_read {
  uint32_t p_rank;          /* remote (P) rank */
  const char *part;         /* "x", "B", "C", "Q", "K", "V" or "ssm"; owned by the list */
  uint64_t remote_offset;   /* in the P rank's page */
  uint64_t local_offset;    /* in the D rank's page */
  uint64_t length;
} pdkv_mamba_read_t;

/* Which rule computes the reads. */
typedef enum pdkv_mamba_reads_rule {
  PDKV_MAMBA_READS_PDKV = 0, /* pdkv: every D byte written exactly once, replicated groups right */
  PDKV_MAMBA_READS_VLLM = 1  /* what vLLM main reads (reproduces #55208): to diagnose a peer */
} pdkv_mamba_reads_rule_t;

/* A byte-exact list of Mamba reads. Immutable. */
typedef struct pdkv_mamba_read_list pdkv_mamba_read_list_t;

/* Reads of D rank `d_rank` given the P and D geometries of the same model (`rule` is a
 * pdkv_mamba_reads_rule_t). Neither geometry is retained. Errors: NULL_POINTER (p_geometry,
 * d_geometry, out), INVALID_ARGUMENT (unknown rule, d_rank >= D TP), INCOMPATIBLE (the two
 * geometries describe different models; names both values), TP_NOT_DIVISIBLE,
 * UNSUPPORTED_MAMBA_TYPE. *out owned by the caller (pdkv_mamba_read_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_reads_new(const pdkv_geometry_t *p_geometry,
                                            const pdkv_geometry_t *d_geometry, uint32_t d_rank,
                                            int32_t rule, pdkv_mamba_read_list_t **out,
                                            pdkv_error_t **err);

/* The reads, in page order (ssm last): *reads points to *count entries owned by the list, valid
 * until pdkv_mamba_read_list_free. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_read_list_items(const pdkv_mamba_read_list_t *list,
                                                  const pdkv_mamba_read_t **reads, size_t *count,
                                                  pdkv_error_t **err);

/* The distinct P ranks the reads touch, ascending; same ownership as the items. Errors:
 * NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_read_list_source_ranks(const pdkv_mamba_read_list_t *list,
                                                         const uint32_t **ranks, size_t *count,
                                                         pdkv_error_t **err);

/* Frees a read list and its arrays. NULL is allowed. Not thread-safe with concurrent use of the
 * same list. */
PDKV_API void pdkv_mamba_read_list_free(pdkv_mamba_read_list_t *list);

/* ---- Descriptors ------------------------------------------------------------------- */

/* One registered KV tensor of an engine: num_blocks kernel blocks of block_len bytes at base.
 * A Mamba region holds num_blocks / ppl logical pages of block_len * ppl bytes. Element layout
 * fixed for the major version. */
typedef struct pdkv_region {
  uint64_t base;
  uint64_t block_len;
  uint64_t num_blocks;
} pdkv_region_t;

/* One contiguous transfer unit: (addr, len). Element layout fixed for the major version. */
typedef struct pdkv_descriptor {
  uint64_t addr;
  uint64_t len;
} pdkv_descriptor_t;

/* An immutable list of descriptors. */
typedef struct pdkv_descriptor_list pdkv_descriptor_list_t;

/* The descriptors: *items points to *count entries owned by the list, valid until
 * pdkv_descriptor_list_free (NULL when *count is 0). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_descriptor_list_items(const pdkv_descriptor_list_t *list,
                                                  const pdkv_descriptor_t **items, size_t *count,
                                                  pdkv_error_t **err);

/* Frees a descriptor list and its items. NULL is allowed. Not thread-safe with concurrent use
 * of the same list. */
PDKV_API void pdkv_descriptor_list_free(pdkv_descriptor_list_t *list);

/* Common to the six descriptor builders below (each comment also states its own notes): region
 * arrays are read, not retained (regions may be NULL only when the count is 0); *out is owned
 * by the caller (pdkv_descriptor_list_free); all are thread-safe; NULL_POINTER names the
 * argument; address arithmetic that would pass 2^64 is OVERFLOW. */

/* Local attention descriptors, region-major: region i, block b < num_blocks*bsr gives
 * (base_i + b*block_len_i/bsr, block_len_i/bsr). bsr = pdkv_block_size_ratio (1 when equal).
 * regions is read, not retained. Errors: NULL_POINTER (regions with num_regions > 0, out),
 * INVALID_ARGUMENT (bsr 0), INCOMPATIBLE (bsr does not divide a region's block_len), OVERFLOW.
 * *out owned by the caller (pdkv_descriptor_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_attention_local_descriptors(const pdkv_region_t *regions,
                                                        size_t num_regions,
                                                        uint32_t block_size_ratio,
                                                        pdkv_descriptor_list_t **out,
                                                        pdkv_error_t **err);

/* Remote attention descriptors in one P rank's regions for the local rank of `mapping`:
 * addr = rbase_i + offset + b*remote_block_len_i, len = (L_i/bsr)/reads. Neither array nor the
 * mapping is retained. Errors: NULL_POINTER (a region array with a non-zero count, mapping,
 * out), INVALID_ARGUMENT (bsr 0), INCOMPATIBLE (region counts, block lengths that do not match
 * the head ratio, head-sharded reads with bsr > 1), OUT_OF_BOUNDS, OVERFLOW. *out owned by the
 * caller (pdkv_descriptor_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_attention_remote_descriptors(const pdkv_region_t *local_regions,
                                                         size_t num_local_regions,
                                                         const pdkv_region_t *remote_regions,
                                                         size_t num_remote_regions,
                                                         const pdkv_tp_mapping_t *mapping,
                                                         uint32_t block_size_ratio,
                                                         pdkv_descriptor_list_t **out,
                                                         pdkv_error_t **err);

/* The local split handle for remote rank `p_rank` (D_TP < P_TP): each local attention
 * descriptor (from pdkv_attention_local_descriptors) cut to that rank's head slot. Neither
 * input is retained. Errors: NULL_POINTER (local_attention, mapping, out), INVALID_ARGUMENT
 * (tp_ratio > 0, or p_rank is not a source rank of the mapping, bsr 0), INCOMPATIBLE
 * (head-sharded with bsr > 1). *out owned by the caller (pdkv_descriptor_list_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_attention_split_descriptors(const pdkv_descriptor_list_t *local_attention,
                                                        const pdkv_tp_mapping_t *mapping,
                                                        uint32_t block_size_ratio, uint32_t p_rank,
                                                        pdkv_descriptor_list_t **out,
                                                        pdkv_error_t **err);

/* The engine's full local Mamba descriptors as registered: per region, all logical blocks of
 * each conv projection, then of the ssm state. `geometry` is this engine's; ppl its physical
 * blocks per logical block. Neither regions nor geometry is retained. Errors: NULL_POINTER
 * (regions with num_regions > 0, geometry, out), INVALID_ARGUMENT (ppl 0,
 * num_blocks % ppl != 0), OUT_OF_BOUNDS (the state does not fit in block_len*ppl),
 * UNSUPPORTED_MAMBA_TYPE, OVERFLOW. *out owned by the caller (pdkv_descriptor_list_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_local_descriptors(const pdkv_region_t *regions,
                                                    size_t num_regions, uint64_t ppl,
                                                    const pdkv_geometry_t *geometry,
                                                    pdkv_descriptor_list_t **out,
                                                    pdkv_error_t **err);

/* Descriptors in P rank `p_rank`'s Mamba regions for the reads of `reads` whose p_rank
 * matches (empty when it supplies nothing). p_geometry is the P engine's. Nothing is retained.
 * Errors: as pdkv_mamba_local_descriptors (NULL_POINTER also for reads), plus OUT_OF_BOUNDS for
 * a read leaving the P page. *out owned by the caller (pdkv_descriptor_list_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_remote_descriptors(const pdkv_region_t *p_regions,
                                                     size_t num_p_regions, uint64_t p_ppl,
                                                     const pdkv_geometry_t *p_geometry,
                                                     const pdkv_mamba_read_list_t *reads,
                                                     uint32_t p_rank,
                                                     pdkv_descriptor_list_t **out,
                                                     pdkv_error_t **err);

/* The D rank's local destinations matching pdkv_mamba_remote_descriptors(..., p_rank) one to
 * one. d_geometry is the D engine's. Nothing is retained. Errors: as
 * pdkv_mamba_local_descriptors (NULL_POINTER also for reads), plus OUT_OF_BOUNDS for a read
 * leaving the D page. *out owned by the caller (pdkv_descriptor_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_local_split_descriptors(const pdkv_region_t *d_regions,
                                                          size_t num_d_regions, uint64_t d_ppl,
                                                          const pdkv_geometry_t *d_geometry,
                                                          const pdkv_mamba_read_list_t *reads,
                                                          uint32_t p_rank,
                                                          pdkv_descriptor_list_t **out,
                                                          pdkv_error_t **err);

/* ======================================================================================
 * Block ids, trimming, scheduler helpers, metadata, handshake and transfer plans (0.1).
 * Every function below follows the conventions at the top of this file. Array inputs are
 * (pointer, count) pairs: the pointer may be NULL only when the count is 0; arrays are read
 * during the call and never retained. Boolean inputs are uint8_t and must be 0 or 1
 * (INVALID_ARGUMENT otherwise). Enum-typed fields and arguments are int32_t; an unknown value
 * is INVALID_ARGUMENT naming it.
 * ====================================================================================== */

/* ---- Value lists ------------------------------------------------------------------- */

/* An immutable list of uint64_t values (block ids, descriptor ids). */
typedef struct pdkv_u64_list pdkv_u64_list_t;

/* The values: *items points to *count entries owned by the list, valid until
 * pdkv_u64_list_free (NULL when *count is 0). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_u64_list_items(const pdkv_u64_list_t *list, const uint64_t **items,
                                           size_t *count, pdkv_error_t **err);

/* Frees a value list and its items. NULL is allowed. Not thread-safe with concurrent use of the
 * same list. */
PDKV_API void pdkv_u64_list_free(pdkv_u64_list_t *list);

/* An immutable owned byte buffer (encoded metadata). */
typedef struct pdkv_bytes pdkv_bytes_t;

/* The bytes: *data points to *len bytes owned by the buffer, valid until pdkv_bytes_free
 * (NULL when *len is 0). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_bytes_data(const pdkv_bytes_t *bytes, const uint8_t **data, size_t *len,
                                       pdkv_error_t **err);

/* Frees a byte buffer and its data. NULL is allowed. Not thread-safe with concurrent use of the
 * same buffer. */
PDKV_API void pdkv_bytes_free(pdkv_bytes_t *bytes);

/* An immutable owned NUL-terminated UTF-8 string (JSON dumps). */
typedef struct pdkv_string pdkv_string_t;

/* The text (NUL-terminated, owned by the string, valid until pdkv_string_free) and its length
 * without the NUL; len may be NULL. Errors: NULL_POINTER (string, text). Thread-safe. */
PDKV_API pdkv_status_t pdkv_string_text(const pdkv_string_t *string, const char **text, size_t *len,
                                        pdkv_error_t **err);

/* Frees a string and its text. NULL is allowed. Not thread-safe with concurrent use of the same
 * string. */
PDKV_API void pdkv_string_free(pdkv_string_t *string);

/* ---- Block ids --------------------------------------------------------------------- */

/* Kind of one KV cache group (one block-id list per group under vLLM's hybrid KV cache manager).
 * Numeric values are stable. */
typedef enum pdkv_group_kind {
  PDKV_GROUP_ATTENTION = 0,      /* full attention (incl. MLA): one slot per token */
  PDKV_GROUP_SLIDING_WINDOW = 1, /* attention that only needs the last `window` tokens */
  PDKV_GROUP_MAMBA = 2           /* SSM state: one block is the whole state, never split */
} pdkv_group_kind_t;

/* Stable name of a group kind ("attention", "sliding_window", "mamba"); "unknown" for other
 * values. Static storage. Thread-safe. */
PDKV_API const char *pdkv_group_kind_name(int32_t kind);

/* Logical -> kernel block ids with `blocks_per_logical` (ppl) of the engine that OWNS the ids
 * (use the remote ppl for remote ids). Attention kinds: L -> [L*ppl .. L*ppl+ppl-1]; Mamba:
 * unchanged. Errors: NULL_POINTER (logical with count > 0, out), INVALID_ARGUMENT (unknown kind,
 * ppl 0), OVERFLOW. *out owned by the caller (pdkv_u64_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_logical_to_kernel_block_ids(const uint64_t *logical, size_t count,
                                                        int32_t kind, uint64_t blocks_per_logical,
                                                        pdkv_u64_list_t **out, pdkv_error_t **err);

/* Local (D) kernel ids -> ids at the remote (P) kernel granularity when a D kernel block holds
 * `block_size_ratio` P kernel blocks. Attention: b -> [b*bsr .. b*bsr+bsr-1], the concatenation
 * clipped to `remote_len` entries; Mamba: 1:1. Errors: NULL_POINTER, INVALID_ARGUMENT (unknown
 * kind, bsr 0), OVERFLOW. *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_map_block_ids_for_block_size_ratio(const uint64_t *local, size_t count,
                                                               int32_t kind,
                                                               uint64_t block_size_ratio,
                                                               uint64_t remote_len,
                                                               pdkv_u64_list_t **out,
                                                               pdkv_error_t **err);

/* One group's block ids for pdkv_descriptor_ids: kernel ids (attention kinds) or logical ids
 * (Mamba). Element layout fixed for the major version. */
typedef struct pdkv_group_block_ids {
  int32_t kind;        /* a pdkv_group_kind_t */
  const uint64_t *ids; /* may be NULL when num_ids is 0 */
  size_t num_ids;
} pdkv_group_block_ids_t;

/* How an engine's descriptors are laid out: all attention descriptors region-major, then all
 * Mamba descriptors region-major. */
typedef struct pdkv_descriptor_layout {
  size_t struct_size;             /* sizeof(pdkv_descriptor_layout_t) */
  uint64_t num_blocks;            /* kernel blocks of the engine whose handle is addressed */
  uint64_t block_size_ratio;      /* bsr (local handle only; the remote uses 1) */
  uint64_t blocks_per_logical;    /* ppl of that engine */
  uint64_t num_attention_regions;
  uint64_t num_mamba_regions;
} pdkv_descriptor_layout_t;

/* Descriptor ids for the groups, in order. Without Mamba groups: id = r*nb + b over regions x
 * the concatenated blocks, nb = num_blocks*bsr. With Mamba groups, per group: attention
 * r*nb + b; Mamba r*(num_blocks/ppl) + b + num_attention_regions*nb. Errors: NULL_POINTER
 * (groups with n_groups > 0, a group's ids with num_ids > 0, layout, out), STRUCT_SIZE,
 * INVALID_ARGUMENT (unknown kind, zero sizes, num_blocks % ppl != 0), OUT_OF_BOUNDS (a block id
 * outside its region, named), OVERFLOW. *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_descriptor_ids(const pdkv_group_block_ids_t *groups, size_t n_groups,
                                           const pdkv_descriptor_layout_t *layout,
                                           pdkv_u64_list_t **out, pdkv_error_t **err);

/* Mamba descriptor ids of logical blocks in a region-major Mamba list starting at first_id:
 * id = first_id + (region*descs_per_region + k)*num_logical_blocks + block, for region <
 * num_regions, k < descs_per_region, block in the given order. Errors: NULL_POINTER,
 * OUT_OF_BOUNDS (a block id >= num_logical_blocks, naming both), OVERFLOW. *out owned by the
 * caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_descriptor_ids(const uint64_t *logical_block_ids, size_t count,
                                                 uint64_t num_logical_blocks, uint64_t num_regions,
                                                 uint64_t descs_per_region, uint64_t first_id,
                                                 pdkv_u64_list_t **out, pdkv_error_t **err);

/* ---- Exchange clipping and receive-side zeroing ------------------------------------ */

/* Which of a request's block ids are worth exchanging (vLLM get_exchange_clipped_blocks). */
typedef struct pdkv_exchange_clip_params {
  size_t struct_size;              /* sizeof(pdkv_exchange_clip_params_t) */
  int32_t kind;                    /* a pdkv_group_kind_t */
  uint8_t hma_enabled;             /* 0 or 1; without the hybrid manager lists pass unchanged */
  uint64_t sliding_window;         /* tokens (sliding-window groups) */
  uint64_t block_size;             /* tokens per logical block (sliding-window groups) */
  int32_t cache_mode;              /* a pdkv_mamba_cache_mode_t (Mamba groups) */
  uint64_t num_speculative_blocks; /* Mamba scratch slots at the end of the list */
} pdkv_exchange_clip_params_t;

/* Blocks a sliding-window group keeps: ceil(window / block_size) + 1. Errors: NULL_POINTER
 * (out), INVALID_ARGUMENT (block_size 0), OVERFLOW. Thread-safe. */
PDKV_API pdkv_status_t pdkv_sliding_window_blocks_to_keep(uint64_t window, uint64_t block_size,
                                                          uint64_t *out, pdkv_error_t **err);

/* Clips one group's list: full attention unchanged; sliding window keeps the last
 * pdkv_sliding_window_blocks_to_keep blocks; Mamba drops the trailing speculative slots and
 * single-state modes keep only the last slot. Not idempotent for Mamba "all" with speculative
 * blocks: clip exactly once. Errors: NULL_POINTER (ids with count > 0, params, out), STRUCT_SIZE,
 * INVALID_ARGUMENT (unknown kind or cache mode, hma_enabled not 0/1, block_size 0 for a sliding
 * window). *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_clip_exchange_blocks(const uint64_t *ids, size_t count,
                                                 const pdkv_exchange_clip_params_t *params,
                                                 pdkv_u64_list_t **out, pdkv_error_t **err);

/* Tokens [token_begin, token_end) inside kernel block `block` (offsets within the block).
 * Element layout fixed for the major version. */
typedef struct pdkv_zero_range {
  uint64_t block;
  uint64_t token_begin;
  uint64_t token_end;
} pdkv_zero_range_t;

/* Absolute token positions [begin, end) of a request. Element layout fixed. */
typedef struct pdkv_token_interval {
  uint64_t begin;
  uint64_t end;
} pdkv_token_interval_t;

/* An immutable list of zero ranges. */
typedef struct pdkv_zero_range_list pdkv_zero_range_list_t;

/* The ranges: *items points to *count entries owned by the list, valid until
 * pdkv_zero_range_list_free (NULL when *count is 0). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_zero_range_list_items(const pdkv_zero_range_list_t *list,
                                                  const pdkv_zero_range_t **items, size_t *count,
                                                  pdkv_error_t **err);

/* Frees a zero-range list and its items. NULL is allowed. Not thread-safe with concurrent use
 * of the same list. */
PDKV_API void pdkv_zero_range_list_free(pdkv_zero_range_list_t *list);

/* vLLM's receive-side zeroing for one attention group: covered = min(count*bsr,
 * remote_kernel_len) remote sub-blocks; (cb, rem) = divmod(covered, bsr); zero local[cb] from
 * token rem*tokens/bsr on, then every later block whole. Errors: NULL_POINTER, INVALID_ARGUMENT
 * (tokens_per_block % bsr != 0, zero sizes), OVERFLOW. *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_receive_zero_ranges(const uint64_t *local_blocks, size_t count,
                                                uint64_t tokens_per_block,
                                                uint64_t block_size_ratio,
                                                uint64_t remote_kernel_len,
                                                pdkv_zero_range_list_t **out, pdkv_error_t **err);

/* Generalised zeroing: local_blocks[i] holds the request's tokens from (first_block_index + i) *
 * tokens_per_block; every token D neither holds (position < held_tokens) nor receives (no
 * interval of `written` covers it) is returned, merged per block; null blocks (id 0) are never
 * zeroed. Errors: NULL_POINTER, INVALID_ARGUMENT (tokens_per_block 0), OVERFLOW. *out owned by
 * the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_uncovered_token_ranges(const uint64_t *local_blocks, size_t count,
                                                   uint64_t first_block_index,
                                                   uint64_t tokens_per_block,
                                                   uint64_t held_tokens,
                                                   const pdkv_token_interval_t *written,
                                                   size_t num_written,
                                                   pdkv_zero_range_list_t **out,
                                                   pdkv_error_t **err);

/* ---- Prefix trimming --------------------------------------------------------------- */

/* One group's trimming inputs. Attention kinds use KERNEL block ids of each side; Mamba groups
 * use logical ids, exchange-clipped exactly once. Id 0 is the null block. */
typedef struct pdkv_group_trim_input {
  size_t struct_size;              /* sizeof(pdkv_group_trim_input_t) */
  int32_t kind;                    /* a pdkv_group_kind_t */
  int32_t cache_mode;              /* a pdkv_mamba_cache_mode_t (Mamba groups only) */
  const uint64_t *local_blocks;    /* D blocks still to fill (after D's prefix hit) */
  size_t num_local_blocks;
  const uint64_t *remote_blocks;   /* P blocks of the request */
  size_t num_remote_blocks;
  /* Tokens per block on each side: kernel block size (attention kinds), Mamba block size
   * ("all" mode); unused by single-state modes. In a transfer plan 0 means "from metadata". */
  uint64_t local_tokens_per_block;
  uint64_t remote_tokens_per_block;
  uint64_t remote_computed_tokens; /* prompt tokens P computed (N-1 rule already applied) */
  uint64_t local_hit_tokens;       /* tokens D already holds (its prefix-cache hit) */
  uint64_t sliding_window;         /* sliding-window groups: window in tokens */
  uint8_t has_local_first_block;   /* 0: local_first_block = local_hit_tokens / tokens per block */
  uint64_t local_first_block;      /* block-table index of local_blocks[0] (if has_...) */
  uint64_t remote_first_block;     /* block-table index of remote_blocks[0] (0 unless clipped) */
} pdkv_group_trim_input_t;

/* num_tokens tokens copied from remote_block (from token remote_token_begin) into local_block
 * (from local_token_begin); never crosses a block boundary. Element layout fixed. */
typedef struct pdkv_token_run {
  uint64_t local_block;
  uint64_t local_token_begin;
  uint64_t remote_block;
  uint64_t remote_token_begin;
  uint64_t num_tokens;
} pdkv_token_run_t;

/* One whole Mamba state copied from remote_block into local_block; `tokens` is the prompt
 * tokens the state has consumed. Element layout fixed. */
typedef struct pdkv_state_pair {
  uint64_t local_block;
  uint64_t remote_block;
  uint64_t tokens;
} pdkv_state_pair_t;

/* The trimmed transfer of one group. Immutable. */
typedef struct pdkv_group_trim pdkv_group_trim_t;

/* Trims one group (input is not retained). Errors: NULL_POINTER (input, out, a block array with
 * a non-zero count), STRUCT_SIZE, INVALID_ARGUMENT (unknown kind / cache mode, has_local_first_block
 * not 0/1, zero tokens per block where needed), COVERAGE (a token or the final state D needs
 * has no local slot or no remote source: names the token, block index and list bounds),
 * OVERFLOW. *out owned by the caller (pdkv_group_trim_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_group_trim_new(const pdkv_group_trim_input_t *input,
                                           pdkv_group_trim_t **out, pdkv_error_t **err);

/* Kind (a pdkv_group_kind_t) and tokens transferred; either out pointer may be NULL but not
 * both. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_group_trim_summary(const pdkv_group_trim_t *trim, int32_t *kind,
                                               uint64_t *transferred_tokens, pdkv_error_t **err);

/* Token runs (attention kinds, token order): *runs points to *count entries owned by the trim,
 * valid until pdkv_group_trim_free (NULL when empty). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_group_trim_runs(const pdkv_group_trim_t *trim,
                                            const pdkv_token_run_t **runs, size_t *count,
                                            pdkv_error_t **err);

/* State pairs (Mamba groups, position order): *states points to *count entries owned by the
 * trim, valid until pdkv_group_trim_free (NULL when empty; always empty for attention kinds).
 * Errors: NULL_POINTER (trim, states, count). Thread-safe. */
PDKV_API pdkv_status_t pdkv_group_trim_states(const pdkv_group_trim_t *trim,
                                              const pdkv_state_pair_t **states, size_t *count,
                                              pdkv_error_t **err);

/* Token ranges of listed local blocks D neither holds nor receives (attention kinds): zero
 * them. *ranges points to *count entries owned by the trim, valid until pdkv_group_trim_free
 * (NULL when empty). Errors: NULL_POINTER (trim, ranges, count). Thread-safe. */
PDKV_API pdkv_status_t pdkv_group_trim_zero_ranges(const pdkv_group_trim_t *trim,
                                                   const pdkv_zero_range_t **ranges, size_t *count,
                                                   pdkv_error_t **err);

/* Listed local Mamba slots no remote state fills; never publish them as cache hits. *blocks
 * points to *count ids owned by the trim, valid until pdkv_group_trim_free (NULL when empty).
 * Errors: NULL_POINTER (trim, blocks, count). Thread-safe. */
PDKV_API pdkv_status_t pdkv_group_trim_unfilled_states(const pdkv_group_trim_t *trim,
                                                       const uint64_t **blocks, size_t *count,
                                                       pdkv_error_t **err);

/* Frees a trim and its arrays. NULL is allowed. Not thread-safe with concurrent use of the
 * same trim. */
PDKV_API void pdkv_group_trim_free(pdkv_group_trim_t *trim);

/* ---- Scheduler helpers ------------------------------------------------------------- */

/* Inputs of the v0604 Mamba align-mode block-aligned chunk split (vLLM #42554). */
typedef struct pdkv_aligned_split_v0604_input {
  size_t struct_size;                     /* sizeof(pdkv_aligned_split_v0604_input_t) */
  uint64_t num_computed_tokens;
  uint64_t num_new_local_computed_tokens;
  uint64_t num_external_computed_tokens;
  uint64_t num_new_tokens;                /* proposed by budget / threshold */
  uint64_t num_prompt_tokens;
  uint64_t num_tokens;                    /* prompt + output so far */
  uint64_t block_size;                    /* Mamba block size (tokens) */
  uint8_t use_eagle;                      /* 0 or 1: EAGLE keeps one block back */
  uint8_t load_kv_async;                  /* 0 or 1: asynchronous connector load, no split */
} pdkv_aligned_split_v0604_input_t;

/* The (possibly reduced) number of new tokens, v0604 form. Errors: NULL_POINTER (input, out),
 * STRUCT_SIZE, INVALID_ARGUMENT (block_size 0, a flag not 0/1). Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_aligned_split_v0604(const pdkv_aligned_split_v0604_input_t *input,
                                                      uint64_t *out, pdkv_error_t **err);

/* Inputs of the main-branch Mamba align-mode split (see core/scheduler.hpp for the rules).
 * When the Mamba block is wider than every chunk (block_size > the smaller of
 * max_num_scheduled_tokens and long_prefill_token_threshold) and a chunk reaches no block
 * boundary, the chunk is kept as the budget sized it (vLLM main), or floored to floor_unit
 * when that still advances; the request always progresses unless defer_oversized_block is 1. */
typedef struct pdkv_aligned_split_input {
  size_t struct_size;                     /* sizeof(pdkv_aligned_split_input_t) */
  uint64_t start;                         /* tokens already computed (incl. external) */
  uint64_t num_new_tokens;                /* proposed by budget / threshold */
  uint64_t num_prompt_tokens;
  uint64_t num_tokens;
  uint64_t block_size;
  uint64_t floor_unit;                    /* 0: no finer floor for a sub-block chunk */
  uint64_t tail_hash_block_size;          /* 0: off */
  uint64_t shared_prefix_tokens;          /* 0: none */
  uint64_t max_num_scheduled_tokens;      /* 0: unlimited */
  uint64_t long_prefill_token_threshold;  /* 0: none */
  uint8_t use_eagle;                      /* 0 or 1 */
  uint8_t load_kv_async;                  /* 0 or 1 */
  /* Appended after 0.1. uint64_t so that it starts at byte 96, the 0.1 size, not in the 0.1
   * tail padding; a caller whose struct_size stops before it gets 0. */
  uint64_t defer_oversized_block;         /* 0 (vLLM main) or 1: return 0 (the request waits)
                                             for a sub-block chunk that no floor keeps */
} pdkv_aligned_split_input_t;

/* New tokens for this step, main-branch form. 0 means the request waits this step: a block that
 * fits in a chunk is not reached by this step's budget, or defer_oversized_block asked for it.
 * Errors: NULL_POINTER, STRUCT_SIZE, INVALID_ARGUMENT (block_size 0, a flag not 0/1).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_aligned_split(const pdkv_aligned_split_input_t *input,
                                                uint64_t *out, pdkv_error_t **err);

/* D side of the N-1 rule: tokens P will provide. has_mamba and N > 1: (N-1) - computed,
 * otherwise N - computed; never negative. Errors: NULL_POINTER (out), INVALID_ARGUMENT
 * (has_mamba not 0/1). Thread-safe. */
PDKV_API pdkv_status_t pdkv_d_num_new_matched_tokens(uint64_t num_prompt_tokens,
                                                     uint64_t num_computed_tokens,
                                                     uint8_t has_mamba, uint64_t *out,
                                                     pdkv_error_t **err);

/* P side of a request decoded remotely; used as input and output. */
typedef struct pdkv_remote_decode_prefill {
  size_t struct_size;         /* sizeof(pdkv_remote_decode_prefill_t) */
  uint64_t num_prompt_tokens;
  uint64_t max_tokens;
  uint8_t truncated;          /* 0 or 1: the N-1 truncation was applied */
} pdkv_remote_decode_prefill_t;

/* Mamba: truncates the prompt to N-1 (N > 1) and sets max_tokens to 1, once (idempotent);
 * non-Mamba models only get max_tokens = 1. in and out may be the same struct; out's prefix of
 * out->struct_size bytes is written. Errors: NULL_POINTER, STRUCT_SIZE, INVALID_ARGUMENT (a flag
 * not 0/1). Thread-safe. */
PDKV_API pdkv_status_t pdkv_truncate_for_remote_decode(const pdkv_remote_decode_prefill_t *in,
                                                       uint8_t has_mamba,
                                                       pdkv_remote_decode_prefill_t *out,
                                                       pdkv_error_t **err);

/* What P schedules for a remotely decoded request given its own prefix hit (output struct). */
typedef struct pdkv_remote_decode_prefill_plan {
  size_t struct_size;         /* sizeof(pdkv_remote_decode_prefill_plan_t) */
  uint64_t num_prompt_tokens; /* after truncation */
  uint64_t computed_tokens;   /* usable local hit */
  uint64_t new_tokens;        /* >= 1 */
} pdkv_remote_decode_prefill_plan_t;

/* Fixes vLLM #53514: the hit is capped AFTER truncation at the last whole block strictly before
 * the last prompt token, so at least one token is computed. Errors: NULL_POINTER, STRUCT_SIZE,
 * INVALID_ARGUMENT (block_size 0, 0-token prompt, has_mamba not 0/1). Thread-safe. */
PDKV_API pdkv_status_t pdkv_plan_remote_decode_prefill(uint64_t num_prompt_tokens,
                                                       uint64_t local_hit_tokens,
                                                       uint64_t block_size, uint8_t has_mamba,
                                                       pdkv_remote_decode_prefill_plan_t *out,
                                                       pdkv_error_t **err);

/* ---- KV offloading ----------------------------------------------------------------- */

/* One registered KV tensor: its size and the page (bytes per block) of the layer using it.
 * Element layout fixed for the major version. */
typedef struct pdkv_offload_layer {
  uint64_t tensor_bytes;
  uint64_t page_bytes;
} pdkv_offload_layer_t;

/* Offload geometry (output struct). */
typedef struct pdkv_offload_geometry {
  size_t struct_size;             /* sizeof(pdkv_offload_geometry_t) */
  uint64_t num_blocks;            /* from the KV cache configuration, never a tensor shape */
  uint64_t hash_blocks_per_block; /* gpu_block_size / hash_block_size */
} pdkv_offload_geometry_t;

/* Offload geometry (vLLM #38554): the block count comes from the cache configuration; each layer
 * is only checked to hold num_blocks pages. Errors: NULL_POINTER (layers with n > 0, out),
 * STRUCT_SIZE, INVALID_ARGUMENT (gpu_block_size not a multiple of hash_block_size, naming both
 * and the fix; a zero size), OUT_OF_BOUNDS (a tensor smaller than num_blocks pages), OVERFLOW.
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_derive_offload_geometry(uint64_t config_num_blocks,
                                                    uint64_t gpu_block_size,
                                                    uint64_t hash_block_size,
                                                    const pdkv_offload_layer_t *layers,
                                                    size_t num_layers,
                                                    pdkv_offload_geometry_t *out,
                                                    pdkv_error_t **err);

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

/* Where an engine's regions live and what it advertises beyond its geometry. Fill with
 * pdkv_engine_layout_init() and override. */
typedef struct pdkv_engine_layout {
  size_t struct_size;            /* sizeof(pdkv_engine_layout_t) */
  const char *engine_id;         /* non-empty UTF-8, at most 256 bytes (copied) */
  uint32_t tp_rank;              /* < config tp_size */
  uint64_t num_logical_blocks;   /* per region; kernel blocks = this * ppl */
  uint32_t num_regions;          /* registered KV tensors (HMA: layers per group) */
  uint64_t base;                 /* address of region 0; regions follow back to back */
  const uint64_t *region_bases;  /* NULL, or num_regions explicit region addresses */
  int32_t kv_layout;             /* a pdkv_kv_layout_t (default HND) */
  int32_t prefix_caching;        /* -1: on iff mamba_cache_mode != none (default); 0 off; 1 on */
  /* Appended after 0.1 (at byte 64, the 0.1 size). NULL (default), or num_regions
   * pdkv_region_kind_t values, one per region (read, not retained). NULL: MAMBA for hybrids,
   * ATTENTION otherwise, and for a model with MLA-typed layers the kinds of its attention layers
   * in layer_pattern order (ATTENTION for '*', MLA for 'L'), repeated over the regions. */
  const int32_t *region_kinds;
  /* Appended after 0.1. Pipeline stage (metadata format 1.2): stage pp_rank of pp_size holding
   * the model layers [layer_begin, layer_end); region i's layer is layer_begin + i. pp_size 0
   * means 1 (one stage holding every layer, the 0.1 behaviour); layer_end 0 means "through the
   * model's last layer" (a single stage, or the last stage). */
  uint32_t pp_size;
  uint32_t pp_rank;
  uint32_t layer_begin;
  uint32_t layer_end;
} pdkv_engine_layout_t;

/* Defaults: engine_id "engine", rank 0, 64 logical blocks, 1 region at 2^40, HND, derived
 * prefix caching, derived region kinds, one pipeline stage (pp_size 1, window [0, last]); sets
 * struct_size. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_layout_init(pdkv_engine_layout_t *layout, pdkv_error_t **err);

/* Metadata of rank layout->tp_rank of an engine running `model` with `config` (geometry derived
 * as pdkv_geometry_new does; nothing is retained). Errors: NULL_POINTER (model, config, layout,
 * out), STRUCT_SIZE (config, layout), the errors of pdkv_geometry_new, INVALID_ARGUMENT (bad
 * layout: empty engine id, rank >= TP, unknown kv_layout, prefix_caching not -1/0/1, regions
 * overlapping or leaving the address space, a region kind that is not a pdkv_region_kind_t or
 * that the model lacks (MLA without mla_head_size, MAMBA without Mamba layers), a pipeline
 * stage out of range (pp_rank >= pp_size, an empty window, a single stage not starting at layer
 * 0, a stage other than the last without layer_end, more regions than the window's layers)...),
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
  /* Appended after 0.1 (metadata format 1.2): pipeline stage pp_rank of pp_size holding the
   * layers [layer_begin, layer_end), layer_end 0 meaning through the model's last layer. A
   * single-stage engine reports 1, 0, 0, 0. */
  uint32_t pp_size;
  uint32_t pp_rank;
  uint32_t layer_begin;
  uint32_t layer_end;
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

/* Newest wire format version this library reads and writes (major, minor): 1.2. Each encoding
 * is labelled with the lowest minor that describes it (1.2 for a pipeline stage, pp_size > 1;
 * else 1.1 when a region is PDKV_REGION_MLA; else 1.0), so a 1.0 reader can read every
 * encoding of a single-stage engine without MLA-typed regions, and an older reader refuses a
 * stage's metadata (PARSE on its unknown flag bit) rather than take it for the whole model.
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
 * pair is NOT an error: the report lists every item (empty: the pair can be served). Errors:
 * NULL_POINTER (local, remote, out). *out owned by the caller (pdkv_handshake_report_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_handshake_validate(const pdkv_engine_metadata_t *local,
                                               const pdkv_engine_metadata_t *remote,
                                               pdkv_handshake_report_t **out, pdkv_error_t **err);

/* Checks that the ranks of ONE remote engine agree (engine id, TP size, block counts, region
 * count, geometry, distinct tp_ranks); items compare ranks[0] ("local") with the offending rank
 * ("remote"). ranks is an array of n_ranks handles. Errors: NULL_POINTER (ranks with n > 0, an
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

/* ---- Transfer plans ---------------------------------------------------------------- */

/* Everything about one (D rank, P engine) pair that does not change per request. Build it once
 * after the handshake. Immutable. */
typedef struct pdkv_plan_context pdkv_plan_context_t;

/* Inputs of a plan context. */
typedef struct pdkv_plan_context_params {
  size_t struct_size;                        /* sizeof(pdkv_plan_context_params_t) */
  const pdkv_engine_metadata_t *local;       /* the D rank (reader) */
  const pdkv_engine_metadata_t *const *remote; /* P ranks of ONE engine, any order, each once */
  size_t num_remote;                         /* >= 1 */
  /* D and P geometries (pdkv_geometry_new with each side's config): their per-rank Mamba states
   * are required when a group is Mamba. NULL: no Mamba state (pure attention plans only). */
  const pdkv_geometry_t *local_geometry;
  const pdkv_geometry_t *remote_geometry;
  /* NULL: the mapping is derived from the metadata (local = D tp_size / tp_rank, remote = P
   * tp_size, K = total_kv_heads, MLA and Mamba flags). Else this mapping is used (copied). */
  const pdkv_tp_mapping_t *mapping;
  /* Appended after 0.1 (at byte 56, the 0.1 size; 0 for an older caller). 1: when D's and P's KV
   * layouts differ, D writes received attention blocks in P's layout and permutes each into its
   * own after receipt (the plan lists them; vLLM: enable_permute_local_kv). 0: different layouts
   * are UNSUPPORTED_LAYOUT naming this flag. Other values: INVALID_ARGUMENT. */
  uint8_t permute_on_receive;
} pdkv_plan_context_params_t;

/* Builds a context (nothing is retained: metadata, geometries and mapping are copied). Errors:
 * NULL_POINTER (params, local, remote, an element of remote, out), STRUCT_SIZE,
 * INVALID_ARGUMENT (num_remote 0, remote ranks with different tp_size, the same P rank twice
 * (names the rank and both positions), only one geometry given, permute_on_receive not 0 or 1),
 * TP_NOT_DIVISIBLE (names both
 * sizes), HEADS_NOT_DIVISIBLE. *out owned by the caller (pdkv_plan_context_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_plan_context_new(const pdkv_plan_context_params_t *params,
                                             pdkv_plan_context_t **out, pdkv_error_t **err);

/* The context's TP mapping as a new handle, a copy owned by the caller (pdkv_tp_mapping_free;
 * independent of the context's lifetime). Errors: NULL_POINTER (ctx, out). Thread-safe. */
PDKV_API pdkv_status_t pdkv_plan_context_mapping(const pdkv_plan_context_t *ctx,
                                                 pdkv_tp_mapping_t **out, pdkv_error_t **err);

/* Frees a context. NULL is allowed; plans compiled from it stay valid (they own their data).
 * Not thread-safe with concurrent use of the same context. */
PDKV_API void pdkv_plan_context_free(pdkv_plan_context_t *ctx);

/* One KV-cache group of a request. `groups` arrays passed to the plan functions hold n_groups
 * structs whose struct_size must all be equal: it is the array's stride. */
typedef struct pdkv_plan_group {
  size_t struct_size;                   /* sizeof(pdkv_plan_group_t) */
  const pdkv_group_trim_input_t *trim;  /* kind, blocks, tokens (tokens per block 0: metadata) */
  const uint32_t *regions;              /* region indices of the group's layers; NULL + 0: all */
  size_t num_regions;
  /* Appended after 0.1. NULL + 0 (default): regions are paired by index (`regions`), which needs
   * D's and P's stages to hold the same layer window. Else the group's model layers over the
   * whole model, strictly ascending, exclusive with `regions` (read in place during the call):
   * the region of layer L on a pipeline stage is the number of the group's layers in
   * [layer_begin, L) of that stage, and only the layers both stages hold are read. */
  const uint32_t *layers;
  size_t num_layers;
} pdkv_plan_group_t;

/* One read: D's [local_offset, +length) of local_region receives P's [remote_offset, +length)
 * of remote_region; offsets relative to the region bases. Element layout fixed. */
typedef struct pdkv_plan_read {
  uint32_t local_region;
  uint64_t local_offset;
  uint32_t remote_region;
  uint64_t remote_offset;
  uint64_t length;
} pdkv_plan_read_t;

/* One request's compiled, validated transfer plan. Immutable. */
typedef struct pdkv_transfer_plan pdkv_transfer_plan_t;

/* Compiles and validates one request's plan: every D byte needed is written exactly once and no
 * read leaves a registered region. Errors: NULL_POINTER (ctx, groups with n_groups > 0, a trim,
 * out), STRUCT_SIZE (a group or trim), INVALID_ARGUMENT (inconsistent context, missing Mamba
 * states, a region index out of range, tokens per block disagreeing with the metadata,
 * overlapping regions on either side), UNSUPPORTED_LAYOUT (D and P KV layouts differ, or NHD
 * with different KV heads per rank on the two sides), NOT_FOUND (a P rank without metadata),
 * INCOMPATIBLE (P and D geometry, P ranks disagreeing on layout), COVERAGE (from
 * trimming, or a D byte not written exactly once: names region, offset, length), OUT_OF_BOUNDS,
 * OVERFLOW; UNSUPPORTED_LAYOUT also for different KV layouts without permute_on_receive (names
 * the flag), a P NHD block read by head subsets (names HND on P) and a block to permute that holds
 * tokens of D's prefix-cache hit; with pipeline stages: INVALID_ARGUMENT (a group without layers for stages holding
 * different windows, layers not strictly ascending or given with regions, a layer past a stage's
 * regions), INCOMPATIBLE (windows that do not overlap, P ranks of different stages).
 * *out owned by the caller (pdkv_transfer_plan_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_compile(const pdkv_plan_context_t *ctx,
                                                  const pdkv_plan_group_t *groups,
                                                  size_t n_groups, pdkv_transfer_plan_t **out,
                                                  pdkv_error_t **err);

/* Re-runs the coverage and bounds check of `plan` against (ctx, groups): the D bytes the groups
 * need are recomputed independently of the reads. Errors: NULL_POINTER, STRUCT_SIZE, COVERAGE
 * (overlap, missing or unexpected bytes), OUT_OF_BOUNDS, the errors of trimming. Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_validate(const pdkv_transfer_plan_t *plan,
                                                   const pdkv_plan_context_t *ctx,
                                                   const pdkv_plan_group_t *groups,
                                                   size_t n_groups, pdkv_error_t **err);

/* Scalars of a plan (output struct). */
typedef struct pdkv_transfer_plan_info {
  size_t struct_size;                /* sizeof(pdkv_transfer_plan_info_t) */
  uint32_t d_rank;
  uint32_t d_tp;
  uint32_t p_tp;
  size_t num_read_ranks;             /* P ranks with at least one read */
  size_t num_notify_ranks;
  uint32_t notifications_per_p_rank; /* each P rank waits for this many per request */
  size_t num_groups;
  uint64_t pieces_before_coalescing;
  uint64_t pieces_after_coalescing;
  uint64_t bytes;                    /* total bytes moved */
  uint64_t attention_bytes;
  uint64_t mamba_bytes;
  uint8_t empty;                     /* 1: nothing to read (full prefix hit), notify only */
  /* Appended after 0.1: the pipeline stages of the pair (1 and 0 without PP; the plan's P ranks
   * are TP ranks of P stage p_pp_rank) and the layers it moves, [layer_begin, layer_end) with
   * layer_end 0 meaning through the model's last layer. (uint64_t: they start at byte 104, the
   * 0.1 size, past the padding after `empty`.) */
  uint64_t d_pp_size;
  uint64_t d_pp_rank;
  uint64_t p_pp_size;
  uint64_t p_pp_rank;
  uint64_t layer_begin;
  uint64_t layer_end;
  /* Appended after 0.1: the receive-side permutation of the blocks each group lists
   * (pdkv_plan_group_zero_t.permute_blocks), from the layout the received bytes lie in (P's) to
   * D's, both pdkv_kv_layout_t values; one D kernel block is permute_heads heads x
   * permute_tokens tokens x permute_head_bytes bytes. Equal layouts (and zeros): nothing to
   * permute. pdkv_permute_kv_block applies it to one block. */
  uint64_t permute_from_layout;
  uint64_t permute_to_layout;
  uint64_t permute_heads;
  uint64_t permute_tokens;
  uint64_t permute_head_bytes;
} pdkv_transfer_plan_info_t;

/* Fills the caller's prefix of *out (out->struct_size bytes, set by the caller; plain values,
 * no pointers). Errors: NULL_POINTER (plan, out), STRUCT_SIZE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_get_info(const pdkv_transfer_plan_t *plan,
                                                   pdkv_transfer_plan_info_t *out,
                                                   pdkv_error_t **err);

/* The P ranks D reads from, ascending: *ranks points to *count entries owned by the plan,
 * valid until pdkv_transfer_plan_free. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_read_ranks(const pdkv_transfer_plan_t *plan,
                                                     const uint32_t **ranks, size_t *count,
                                                     pdkv_error_t **err);

/* The reads D issues against P rank `p_rank`, in issue order (*count 0 and *reads NULL for a P
 * rank it does not read from); *bytes (may be NULL) their total length. Owned by the plan.
 * Errors: NULL_POINTER (plan, reads, count), INVALID_ARGUMENT (p_rank >= P TP, naming both).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_rank_reads(const pdkv_transfer_plan_t *plan,
                                                     uint32_t p_rank,
                                                     const pdkv_plan_read_t **reads,
                                                     size_t *count, uint64_t *bytes,
                                                     pdkv_error_t **err);

/* P ranks D notifies after its reads (every handshake target, read or not), ascending: *ranks
 * points to *count entries owned by the plan, valid until pdkv_transfer_plan_free. Errors:
 * NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_notify_ranks(const pdkv_transfer_plan_t *plan,
                                                       const uint32_t **ranks, size_t *count,
                                                       pdkv_error_t **err);

/* Receive-side work of one group (output struct); the arrays are owned by the plan. */
typedef struct pdkv_plan_group_zero {
  size_t struct_size;                 /* sizeof(pdkv_plan_group_zero_t) */
  int32_t kind;                       /* a pdkv_group_kind_t */
  const uint32_t *regions;            /* resolved region indices to zero in */
  size_t num_regions;
  const pdkv_zero_range_t *zero;      /* D kernel block + token range */
  size_t num_zero;
  const uint64_t *unfilled_states;    /* Mamba slots never to publish as cache hits */
  size_t num_unfilled_states;
  /* Appended after 0.1 (at byte 64): the D kernel blocks (ascending) that receive bytes in P's
   * layout and must be permuted into D's (pdkv_transfer_plan_info_t.permute_*) in each of
   * permute_regions, after the data and before the zero ranges; empty when nothing is permuted. */
  const uint64_t *permute_blocks;
  size_t num_permute_blocks;
  const uint32_t *permute_regions;
  size_t num_permute_regions;
} pdkv_plan_group_zero_t;

/* Group `index` (< info.num_groups, in group order) into the caller's prefix of *out; its
 * arrays are owned by the plan and valid until pdkv_transfer_plan_free. Errors: NULL_POINTER
 * (plan, out), STRUCT_SIZE, OUT_OF_BOUNDS (names index and count). Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_group_zero(const pdkv_transfer_plan_t *plan,
                                                     size_t index, pdkv_plan_group_zero_t *out,
                                                     pdkv_error_t **err);

/* A human-readable JSON dump (stable key order) into buf[0..capacity), NUL-terminated.
 * *out_len always receives the length without the NUL; capacity must be >= *out_len + 1
 * (BUFFER_TOO_SMALL names the needed size otherwise). buf may be NULL when capacity is 0.
 * Errors: NULL_POINTER (plan, out_len; buf with capacity > 0), BUFFER_TOO_SMALL. Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_to_json(const pdkv_transfer_plan_t *plan, char *buf,
                                                  size_t capacity, size_t *out_len,
                                                  pdkv_error_t **err);

/* The same JSON as an owned string (pdkv_string_free). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_to_json_string(const pdkv_transfer_plan_t *plan,
                                                         pdkv_string_t **out, pdkv_error_t **err);

/* Frees a plan and every array it handed out. NULL is allowed. Not thread-safe with concurrent
 * use of the same plan. */
PDKV_API void pdkv_transfer_plan_free(pdkv_transfer_plan_t *plan);

/* Permutes one attention KV kernel block of `len` bytes in place from layout `from_layout` to
 * `to_layout` (pdkv_kv_layout_t values: HND heads x tokens x head bytes, NHD tokens x heads x
 * head bytes), as a plan's receive side needs (pdkv_transfer_plan_info_t.permute_*). Equal
 * layouts: nothing moves. Errors: NULL_POINTER (block with len > 0), INVALID_ARGUMENT (a layout
 * that is not a pdkv_kv_layout_t, a zero dimension, len not heads x tokens x head_bytes: names
 * both), OVERFLOW. The caller owns the block. Thread-safe on distinct blocks. */
PDKV_API pdkv_status_t pdkv_permute_kv_block(uint8_t *block, size_t len, int32_t from_layout,
                                             int32_t to_layout, uint64_t heads, uint64_t tokens,
                                             uint64_t head_bytes, pdkv_error_t **err);

/* ---- Pipeline parallelism ---------------------------------------------------------- */

/* vLLM's default split of num_layers over pp_size stages: stage pp_rank holds the layers
 * [*begin, *end) (num_layers / pp_size each; the remainder goes one layer per stage from the
 * second-to-last stage towards the first). Errors: NULL_POINTER (begin, end), INVALID_ARGUMENT
 * (pp_size 0, pp_rank >= pp_size, fewer layers than stages). Thread-safe. */
PDKV_API pdkv_status_t pdkv_pipeline_layer_window(uint32_t num_layers, uint32_t pp_rank,
                                                  uint32_t pp_size, uint32_t *begin, uint32_t *end,
                                                  pdkv_error_t **err);

/* One overlapping (D stage, P stage) pair: the ranks of D stage d_pp_rank handshake the ranks of
 * P stage p_pp_rank (each (engine, PP rank) a separate peer) and read the layers
 * [layer_begin, layer_end) from them (layer_end 0: through the model's last layer). Element
 * layout fixed for the major version. */
typedef struct pdkv_stage_pair {
  uint32_t d_pp_rank;
  uint32_t p_pp_rank;
  uint32_t layer_begin;
  uint32_t layer_end;
} pdkv_stage_pair_t;

/* Pairs D stages with P stages by their layer windows. d_stages: one rank's metadata of each D
 * stage to pair (any subset of D's stages); p_stages: one rank's metadata of EVERY P stage. Writes
 * every overlapping pair, ordered by (d_pp_rank, p_pp_rank), into out[0..capacity); *count always
 * receives the number of pairs (also on BUFFER_TOO_SMALL, whose message names it). out may be
 * NULL when capacity is 0. Errors: NULL_POINTER (arrays with n > 0, an element, count; out with
 * capacity > 0), INVALID_ARGUMENT (an empty side, a side mixing engines or pp_sizes, a stage given
 * twice, a P stage missing), INCOMPATIBLE (P's stages not holding consecutive layers from layer 0,
 * a D stage holding layers past P's last), BUFFER_TOO_SMALL. Thread-safe. */
PDKV_API pdkv_status_t pdkv_pipeline_stage_pairs(const pdkv_engine_metadata_t *const *d_stages,
                                                 size_t n_d, const pdkv_engine_metadata_t *const *p_stages,
                                                 size_t n_p, pdkv_stage_pair_t *out, size_t capacity,
                                                 size_t *count, pdkv_error_t **err);

/* Notifications one rank of P stage p_pp_rank waits for per request: every D stage paired with it
 * (pairs over ALL of D's stages) notifies it as a single-stage D would, so *out is the number of
 * pairs naming p_pp_rank times the TP rule for (p_tp, d_tp); 0 when no D stage reads it. Errors:
 * NULL_POINTER (pairs with n > 0, out), TP_NOT_DIVISIBLE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_pipeline_notifications_expected(const pdkv_stage_pair_t *pairs,
                                                            size_t n_pairs, uint32_t p_pp_rank,
                                                            uint32_t p_tp, uint32_t d_tp,
                                                            uint32_t *out, pdkv_error_t **err);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* The transfer executor (agents, memory, peers, transfers, notifications). */
#include "pdkv/agent.h"

/* The engine-level API (describe an engine once, plan each request from its block table). */
#include "pdkv/engine.h"

#endif /* PDKV_H */
