/*
 * pdkv/plan.h - transfer plans (contexts, compile, validate, reads, JSON) and pipeline parallelism.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_PLAN_H
#define PDKV_PLAN_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/plan.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Transfer plans ---------------------------------------------------------------- */

/* Everything about one (D rank, P engine) pair that does not change per request. Build it once
 * after the handshake. Immutable. */
typedef struct pdkv_plan_context pdkv_plan_context_t;

/* Inputs of a plan context. */
typedef struct pdkv_plan_context_params {
  size_t struct_size;                        /* sizeof(pdkv_plan_context_params_t) */
  uint64_t field_mask;                       /* no optional fields yet: 0 */
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
  /* 1: when D's and P's KV
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
  uint64_t field_mask;                  /* no optional fields yet: 0 */
  const pdkv_group_trim_input_t *trim;  /* kind, blocks, tokens (tokens per block unset:
                                           from the metadata) */
  const uint32_t *regions;              /* region indices of the group's layers; NULL + 0: all */
  size_t num_regions;
  /* NULL + 0 (default): regions are paired by index (`regions`), which needs
   * D's and P's stages to hold the same layer window. Else the group's model layers over the
   * whole model, strictly ascending, exclusive with `regions` (read in place during the call):
   * the region of layer L on a pipeline stage is the number of the group's layers in
   * [layer_begin, L) of that stage, and only the layers both stages hold are read. */
  const uint32_t *layers;
  size_t num_layers;
} pdkv_plan_group_t;

/* One read: D's [local_offset, +length) of local_region receives P's [remote_offset, +length)
 * of remote_region; offsets relative to the region bases. Element layout fixed. The library
 * writes the 4 padding bytes after each region field as zero, so the reads it hands out
 * compare and hash byte for byte. */
typedef struct pdkv_plan_read {
  uint32_t local_region;
  uint64_t local_offset;
  uint32_t remote_region;
  uint64_t remote_offset;
  uint64_t length;
} pdkv_plan_read_t;

/* One request's compiled, validated transfer plan. Immutable, except that
 * pdkv_transfer_plan_compile_into recompiles it in place. */
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

/* A new plan with no reads and no groups (what pdkv_transfer_plan_get_info reports for a plan
 * of nothing), to be filled by pdkv_transfer_plan_compile_into. Errors: NULL_POINTER (out).
 * *out owned by the caller (pdkv_transfer_plan_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_plan_new(pdkv_transfer_plan_t **out, pdkv_error_t **err);

/* Compiles one request's plan into an existing plan (from pdkv_transfer_plan_new or
 * pdkv_transfer_plan_compile), replacing its content: the same plan and the same errors as
 * pdkv_transfer_plan_compile, without allocating a handle, and reusing the plan's buffers, so a
 * caller that keeps one plan per thread compiles request after request without growing the
 * heap: once the plan and the thread's working memory have grown to its largest request, a
 * compile allocates nothing at all. Every pointer obtained from `plan` before the call (reads, ranks, group arrays) is
 * invalid afterwards. On failure `plan` holds an empty plan (no reads, no groups) and may be
 * compiled into again or freed. Errors: those of pdkv_transfer_plan_compile; NULL_POINTER
 * (plan). `plan` stays owned by the caller. Thread-safe for ctx; not for `plan`: no other call
 * may use `plan` while this one runs. */
PDKV_API pdkv_status_t pdkv_transfer_plan_compile_into(const pdkv_plan_context_t *ctx,
                                                       const pdkv_plan_group_t *groups,
                                                       size_t n_groups, pdkv_transfer_plan_t *plan,
                                                       pdkv_error_t **err);

/* The arguments of pdkv_transfer_plan_compile_into other than the plan, in one struct (since
 * 2.8): for bindings whose foreign calls cost per argument (Python's ctypes converts each one,
 * ~40 ns apiece: the five-argument call was a fifth of the binding's own work per 4k-token
 * request), which fill it once per request layout and pass it with each plan. Its first
 * published size is its 2.8 size. */
typedef struct pdkv_compile_args {
  size_t struct_size;              /* sizeof(pdkv_compile_args_t) */
  const pdkv_plan_context_t *ctx;  /* as ctx of pdkv_transfer_plan_compile_into */
  const pdkv_plan_group_t *groups; /* as groups (read in place during the call) */
  size_t n_groups;
  pdkv_error_t **err;              /* as err: where the error object goes; may be NULL */
} pdkv_compile_args_t;

/* pdkv_transfer_plan_compile_into(args->ctx, args->groups, args->n_groups, plan, args->err)
 * (since 2.8): the same plan, errors, ownership and thread safety; `args` is read during the call
 * only. Also NULL_POINTER (args) and STRUCT_SIZE (args->struct_size below the 2.8 size): both
 * returned with no error object, since where it goes is a field of `args`; a struct_size above
 * sizeof(pdkv_compile_args_t) is STRUCT_SIZE with one in *args->err. */
PDKV_API pdkv_status_t pdkv_transfer_plan_compile_args(pdkv_transfer_plan_t *plan,
                                                       const pdkv_compile_args_t *args);

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
  uint32_t p_tp_size;
  uint32_t d_tp_size;
  uint32_t d_tp_rank;                /* the reading D rank */
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
  /* The pipeline stages of the pair (1 and 0 without PP; the plan's P ranks
   * are TP ranks of P stage p_pp_rank) and the layers it moves, [layer_begin, layer_end) with
   * layer_end 0 meaning through the model's last layer. */
  uint64_t p_pp_size;
  uint64_t p_pp_rank;
  uint64_t d_pp_size;
  uint64_t d_pp_rank;
  uint64_t layer_begin;
  uint64_t layer_end;
  /* The receive-side permutation of the blocks each group lists
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

/* The reads D issues against P rank `p_tp_rank`, in issue order (*count 0 and *reads NULL for a P
 * rank it does not read from); *bytes (may be NULL) their total length. Owned by the plan, valid
 * until the next compile into it or pdkv_transfer_plan_free. A compiled plan holds the reads of
 * regions laid out alike (vLLM's hybrid attention regions) as repeats of the first such region's
 * reads, and a fragmented attention group laid out linearly as its block ids with one read per
 * id and region (coalesced where ids are consecutive), which is what the agent executes; the
 * first call for a rank after a compile writes that
 * rank's list out (time proportional to its reads; no allocation once the plan has held a list as
 * long), later calls return the same list. Errors: NULL_POINTER (plan, reads, count),
 * INVALID_ARGUMENT (p_tp_rank >= P TP, naming both). Thread-safe (a rank's list is written out
 * once, under the plan's lock). */
PDKV_API pdkv_status_t pdkv_transfer_plan_rank_reads(const pdkv_transfer_plan_t *plan,
                                                     uint32_t p_tp_rank,
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
  /* The D kernel blocks (ascending) that receive bytes in P's
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
 * (pp_size 0, pp_rank >= pp_size, fewer layers than stages). Thread-safe. @plain */
PDKV_API pdkv_status_t pdkv_pipeline_layer_window(uint32_t num_layers, uint32_t pp_size,
                                                  uint32_t pp_rank, uint32_t *begin, uint32_t *end,
                                                  pdkv_error_t **err);

/* One overlapping (P stage, D stage) pair: the ranks of D stage d_pp_rank handshake the ranks of
 * P stage p_pp_rank (each (engine, PP rank) a separate peer) and read the layers
 * [layer_begin, layer_end) from them (layer_end 0: through the model's last layer). Element
 * layout fixed for the major version. */
typedef struct pdkv_stage_pair {
  uint32_t p_pp_rank;
  uint32_t d_pp_rank;
  uint32_t layer_begin;
  uint32_t layer_end;
} pdkv_stage_pair_t;

/* An immutable list of stage pairs. */
typedef struct pdkv_stage_pair_list pdkv_stage_pair_list_t;

/* The pairs: *items points to *count entries owned by the list, valid until
 * pdkv_stage_pair_list_free (NULL when *count is 0). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_stage_pair_list_items(const pdkv_stage_pair_list_t *list,
                                                  const pdkv_stage_pair_t **items, size_t *count,
                                                  pdkv_error_t **err);

/* Frees a stage-pair list and its items. NULL is allowed. Not thread-safe with concurrent use of
 * the same list. */
PDKV_API void pdkv_stage_pair_list_free(pdkv_stage_pair_list_t *list);

/* Pairs P stages with D stages by their layer windows. p_stages: one rank's metadata of EVERY P
 * stage; d_stages: one rank's metadata of each D stage to pair (any subset of D's stages). *out
 * receives every overlapping pair, ordered by (d_pp_rank, p_pp_rank). Errors: NULL_POINTER
 * (arrays with n > 0, an element, out), INVALID_ARGUMENT (an empty side, a side mixing engines
 * or pp_sizes, a stage given twice, a P stage missing), INCOMPATIBLE (P's stages not holding
 * consecutive layers from layer 0, a D stage holding layers past P's last). *out owned by the
 * caller (pdkv_stage_pair_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_pipeline_stage_pairs(const pdkv_engine_metadata_t *const *p_stages,
                                                 size_t n_p,
                                                 const pdkv_engine_metadata_t *const *d_stages,
                                                 size_t n_d, pdkv_stage_pair_list_t **out,
                                                 pdkv_error_t **err);

/* Notifications one rank of P stage p_pp_rank waits for per request: every D stage paired with it
 * (pairs over ALL of D's stages) notifies it as a single-stage D would, so *out is the number of
 * pairs naming p_pp_rank times the TP rule for (p_tp_size, d_tp_size); 0 when no D stage reads
 * it. Errors: NULL_POINTER (pairs with n > 0, out), TP_NOT_DIVISIBLE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_pipeline_notifications_expected(const pdkv_stage_pair_t *pairs,
                                                            size_t n_pairs, uint32_t p_pp_rank,
                                                            uint32_t p_tp_size, uint32_t d_tp_size,
                                                            uint32_t *out, pdkv_error_t **err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_PLAN_H */
