/*
 * pdkv/blocks.h - value lists, block ids, exchange clipping, receive-side zeroing and prefix trimming.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_BLOCKS_H
#define PDKV_BLOCKS_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/blocks.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---- Exchange clipping and receive-side zeroing ------------------------------------ */

/* Which of a request's block ids are worth exchanging (vLLM get_exchange_clipped_blocks). */
typedef struct pdkv_exchange_clip_params {
  size_t struct_size;              /* sizeof(pdkv_exchange_clip_params_t) */
  uint64_t field_mask;             /* no optional fields yet: 0 */
  int32_t kind;                    /* a pdkv_group_kind_t */
  uint8_t hma_enabled;             /* 0 or 1; without the hybrid manager lists pass unchanged */
  uint64_t sliding_window;         /* tokens (sliding-window groups) */
  uint64_t block_size;             /* tokens per logical block (sliding-window groups) */
  int32_t cache_mode;              /* a pdkv_mamba_cache_mode_t (Mamba groups) */
  uint64_t num_speculative_blocks; /* Mamba scratch slots at the end of the list */
} pdkv_exchange_clip_params_t;

/* Blocks a sliding-window group keeps: ceil(window / block_size) + 1. Errors: NULL_POINTER
 * (out), INVALID_ARGUMENT (block_size 0), OVERFLOW. Thread-safe. @plain */
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

/* Optional fields of pdkv_group_trim_input_t. */
#define PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK (1ULL << 0)
/* both sides' kernel_blocks_per_id (one bit) */
#define PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID (1ULL << 1)
/* both sides' tokens_per_block (one bit) */
#define PDKV_TRIM_FIELD_TOKENS_PER_BLOCK (1ULL << 2)

/* One group's trimming inputs. Attention kinds use KERNEL block ids of each side; Mamba groups
 * use logical ids, exchange-clipped exactly once. Id 0 is the null block. */
typedef struct pdkv_group_trim_input {
  size_t struct_size;              /* sizeof(pdkv_group_trim_input_t) */
  uint64_t field_mask;             /* PDKV_TRIM_FIELD_* bits of the optional fields set */
  int32_t kind;                    /* a pdkv_group_kind_t */
  int32_t cache_mode;              /* a pdkv_mamba_cache_mode_t (Mamba groups only) */
  const uint64_t *local_blocks;    /* D blocks still to fill (after D's prefix hit) */
  size_t num_local_blocks;
  const uint64_t *remote_blocks;   /* P blocks of the request */
  size_t num_remote_blocks;
  /* PDKV_TRIM_FIELD_TOKENS_PER_BLOCK (both > 0 when set). Tokens per block on each side: kernel
   * block size (attention kinds), Mamba block size ("all" mode); unused by single-state modes.
   * Unset: from the metadata in a transfer plan; pdkv_group_trim_new needs them set for
   * attention kinds and "all" mode. */
  uint64_t local_tokens_per_block;
  uint64_t remote_tokens_per_block;
  uint64_t remote_computed_tokens; /* prompt tokens P computed (N-1 rule already applied) */
  uint64_t local_hit_tokens;       /* tokens D already holds (its prefix-cache hit) */
  uint64_t sliding_window;         /* sliding-window groups: window in tokens */
  uint64_t local_first_block;      /* PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK: block-table index of
                                      local_blocks[0]. Unset: local_hit_tokens / local tokens
                                      per block */
  uint64_t remote_first_block;     /* block-table index of remote_blocks[0] (0 unless clipped) */
  /* PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID (unset: 1 on both sides). Attention kinds: kernel
   * blocks each listed id stands for, per side, >= 1. 1: the lists hold kernel ids. k > 1: they
   * hold LOGICAL ids as the block table keeps them, logical block b being kernel blocks b*k .. b*k+k-1 (e.g.
   * 131 for 2096-token blocks with 16-token FlashInfer kernel blocks), so nothing expands them
   * and planning walks k times fewer ids; logical id 0 is the null block, all k of its kernel
   * blocks with it. Block-table indexes and tokens per block stay in kernel blocks. Mamba groups:
   * 1 (INVALID_ARGUMENT otherwise). An id whose kernel ids leave 64 bits is OVERFLOW. */
  uint64_t local_kernel_blocks_per_id;
  uint64_t remote_kernel_blocks_per_id;
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
 * a non-zero count), STRUCT_SIZE, INVALID_ARGUMENT (unknown kind / cache mode, unknown
 * field_mask bits, a set kernel_blocks_per_id or tokens per block of 0, tokens per block unset
 * where needed), COVERAGE (a token or the final state D needs
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_BLOCKS_H */
