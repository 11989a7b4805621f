/*
 * pdkv/scheduler.h - scheduler helpers (Mamba align-mode chunk split, remote decode) and KV offloading.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_SCHEDULER_H
#define PDKV_SCHEDULER_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/scheduler.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Scheduler helpers ------------------------------------------------------------- */



/* Optional fields of pdkv_aligned_split_input_t. */
#define PDKV_SPLIT_FIELD_FLOOR_UNIT (1ULL << 0)
#define PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE (1ULL << 1)
#define PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS (1ULL << 2)
#define PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD (1ULL << 3)

/* Inputs of the main-branch Mamba align-mode split (see core/scheduler.hpp for the rules).
 * When the Mamba block is wider than every chunk (block_size > the smaller of
 * max_num_scheduled_tokens and long_prefill_token_threshold) and a chunk reaches no block
 * boundary, the chunk is kept as the budget sized it (vLLM main), or floored to floor_unit
 * when that still advances; the request always progresses unless defer_oversized_block is 1. */
typedef struct pdkv_aligned_split_input {
  size_t struct_size;                     /* sizeof(pdkv_aligned_split_input_t) */
  uint64_t field_mask;                    /* PDKV_SPLIT_FIELD_* bits of the optional fields set */
  uint64_t start;                         /* tokens already computed (incl. external) */
  uint64_t num_new_tokens;                /* proposed by budget / threshold */
  uint64_t num_prompt_tokens;
  uint64_t num_tokens;
  uint64_t block_size;
  /* Optional fields (each > 0 when set): */
  uint64_t floor_unit;                    /* unset: no finer floor for a sub-block chunk */
  uint64_t tail_hash_block_size;          /* unset: fine-grained tail hits off */
  uint64_t shared_prefix_tokens;          /* required; 0: no shared prefix */
  uint64_t max_num_scheduled_tokens;      /* unset: unlimited */
  uint64_t long_prefill_token_threshold;  /* unset: no threshold */
  uint8_t use_eagle;                      /* 0 or 1 */
  uint8_t load_kv_async;                  /* 0 or 1 */
  uint64_t defer_oversized_block;         /* 0 (vLLM main) or 1: return 0 (the request waits)
                                             for a sub-block chunk that no floor keeps */
} pdkv_aligned_split_input_t;

/* New tokens for this step, main-branch form. 0 means the request waits this step: a block that
 * fits in a chunk is not reached by this step's budget, or defer_oversized_block asked for it.
 * Errors: NULL_POINTER, STRUCT_SIZE, INVALID_ARGUMENT (block_size 0, a flag not 0/1, unknown
 * field_mask bits, a set optional field holding 0). Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_aligned_split(const pdkv_aligned_split_input_t *input,
                                                uint64_t *out, pdkv_error_t **err);

/* D side of the N-1 rule: tokens P will provide. has_mamba and N > 1: (N-1) - computed,
 * otherwise N - computed; never negative. Errors: NULL_POINTER (out), INVALID_ARGUMENT
 * (has_mamba not 0/1). Thread-safe. @plain */
PDKV_API pdkv_status_t pdkv_d_num_new_matched_tokens(uint64_t num_prompt_tokens,
                                                     uint64_t num_computed_tokens,
                                                     uint8_t has_mamba, uint64_t *out,
                                                     pdkv_error_t **err);

/* P side of a request decoded remotely; used as input and output. */
typedef struct pdkv_remote_decode_prefill {
  size_t struct_size;         /* sizeof(pdkv_remote_decode_prefill_t) */
  uint64_t field_mask;        /* no optional fields yet: 0 */
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_SCHEDULER_H */
