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
 *    size of the struct up to its current size, so structs can grow without breaking the ABI.
 *    Output structs follow the same rule: the library fills only the first struct_size bytes.
 *  - Nothing that may grow is passed by value.
 *  - No exception crosses this boundary; an unexpected one becomes PDKV_ERR_INTERNAL.
 *  - Thread safety: handles are immutable after creation unless stated otherwise, so const
 *    queries on one handle may run concurrently from many threads. Freeing a handle while
 *    another thread uses it is undefined.
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
#define PDKV_VERSION_MINOR 1
#define PDKV_VERSION_PATCH 0

/* Status codes. Numeric values are stable. */
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
  PDKV_ERR_INTERNAL = 17
} pdkv_status_t;

/* ---- Errors ------------------------------------------------------------------------- */

/* An owned error: a status plus a human-readable message that names the offending value. */
typedef struct pdkv_error pdkv_error_t;

/* Status of an error. err may be NULL (returns PDKV_OK). Thread-safe. */
PDKV_API pdkv_status_t pdkv_error_status(const pdkv_error_t *err);
/* Message of an error, NUL-terminated UTF-8, owned by err and valid until pdkv_error_free(err).
 * Returns "" for NULL. Thread-safe. */
PDKV_API const char *pdkv_error_message(const pdkv_error_t *err);
/* Frees an error. NULL is allowed. */
PDKV_API void pdkv_error_free(pdkv_error_t *err);
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
                                  * '-' neither; NULL or "" = unknown */
} pdkv_model_desc_t;

/* Creates a model from a description. The strings are copied; desc is not retained.
 * Errors: NULL_POINTER (desc, out), STRUCT_SIZE, INVALID_ARGUMENT (unknown mamba_type value,
 * zero heads, bad layer_pattern char, ...). On success *out is owned by the caller
 * (pdkv_model_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_model_new(const pdkv_model_desc_t *desc, pdkv_model_t **out,
                                      pdkv_error_t **err);

/* Creates a model from a built-in preset (see pdkv_preset_count). The name is matched exactly
 * (e.g. "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"). Errors: NULL_POINTER (name, out),
 * NOT_FOUND (message names the preset). *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_model_from_preset(const char *name, pdkv_model_t **out,
                                              pdkv_error_t **err);

/* Reads a Hugging Face config.json file at `path` and derives the model from it. `name` (may be
 * NULL) is stored as the model name; NULL uses the path. Errors: NULL_POINTER (path, out),
 * IO (the path cannot be read; message names it), PARSE (malformed JSON or missing keys),
 * UNSUPPORTED_MAMBA_TYPE. *out owned by the caller. Thread-safe (reads the file). */
PDKV_API pdkv_status_t pdkv_model_from_hf_config_file(const char *path, const char *name,
                                                      pdkv_model_t **out, pdkv_error_t **err);

/* Same as pdkv_model_from_hf_config_file, from `len` bytes of JSON text in memory (need not be
 * NUL-terminated; not retained). Errors: NULL_POINTER (json, out), PARSE, ... Thread-safe. */
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

/* Frees a model. NULL is allowed. Not thread-safe with concurrent use of the same model. */
PDKV_API void pdkv_model_free(pdkv_model_t *model);

/* Stable lower-case name of a Mamba type ("mamba2", "gdn", ...); "unknown" for other values.
 * Static storage. Thread-safe. */
PDKV_API const char *pdkv_mamba_type_name(int32_t mamba_type);

/* ---- Presets ----------------------------------------------------------------------- */

/* Number of built-in model presets. Never fails. Thread-safe. */
PDKV_API size_t pdkv_preset_count(void);

/* Name and source of preset `index` (< pdkv_preset_count()). Strings are static storage.
 * Either out pointer may be NULL (not written). Errors: OUT_OF_BOUNDS (index and count in the
 * message). Thread-safe. */
PDKV_API pdkv_status_t pdkv_preset_at(size_t index, const char **name, const char **source,
                                      pdkv_error_t **err);

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_H */
