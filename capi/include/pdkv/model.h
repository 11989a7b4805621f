/*
 * pdkv/model.h - model descriptions: from fields, presets and HF config.json.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_MODEL_H
#define PDKV_MODEL_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/model.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

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

/* Optional fields of pdkv_model_desc_t. */
#define PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE (1ULL << 0)
/* default_ssm_dtype_bytes */
#define PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE (1ULL << 1)

/* Everything pdkv needs to know about a model. Used both as input (pdkv_model_new) and as
 * output (pdkv_model_describe). Enum-typed fields are int32_t so the struct layout never
 * depends on the compiler's enum size. */
typedef struct pdkv_model_desc {
  size_t struct_size;            /* sizeof(pdkv_model_desc_t) */
  uint64_t field_mask;           /* PDKV_MODEL_FIELD_* bits of the optional fields set */
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
  uint32_t mamba_chunk_size;     /* optional (non-zero); unset: 2048 */
  uint8_t mamba_conv_rows_include_spec; /* 1: speculative tokens add conv rows (NemotronH, GDN) */
  /* Dtypes and layers. */
  uint32_t dtype_bytes;          /* model dtype size, 1..8 */
  uint32_t default_ssm_dtype_bytes; /* optional: the SSM state dtype an engine's "auto" picks
                                     (1, 2, 4 or 8); unset: the conv dtype */
  const char *layer_pattern;     /* one char per layer: '*' attention, 'M' Mamba, 'P' both,
                                  * 'L' MLA-typed attention in a GQA model (see mla_head_size),
                                  * '-' neither; NULL or "" = unknown */
  /* Width of the latent of the 'L' layers of a GQA model, in elements (e.g. an indexer
   * key cache vLLM registers as an MLA spec): one head replicated on every rank, read whole
   * from one prefill rank. 0: no such layers. A pure MLA model (use_mla) leaves it 0. */
  uint32_t mla_head_size;
} pdkv_model_desc_t;

/* Creates a model from a description. The strings are copied; desc is not retained.
 * Errors: NULL_POINTER (desc, out), STRUCT_SIZE, INVALID_ARGUMENT (unknown mamba_type value,
 * unknown field_mask bits, a set optional field holding 0, zero heads, bad layer_pattern char,
 * a 0/1 flag such as use_mla or
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
 * description; out->field_mask receives the bits of the optional fields the model has (an
 * unset one is written as 0), so the description passed back to pdkv_model_new gives the same
 * model. The strings in *out are owned by the model and valid until pdkv_model_free.
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_MODEL_H */
