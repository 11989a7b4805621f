/*
 * pdkv/engine.h - the engine-level API: describe an engine once, plan each request from what
 * its scheduler holds. Included by pdkv.h; include pdkv.h, not this file.
 *
 * An engine (one TP rank of a vLLM-like engine: its model, engine configuration, rank and where
 * its KV tensors live) is described once with pdkv_engine_new. pdkv derives from it what the
 * low-level calls of pdkv.h need the caller to work out by hand:
 *  - the KV-cache groups as vLLM's hybrid KV-cache manager forms them (which layers share a
 *    group, the region each layer uses, the groups' kinds and order) and the number of regions;
 *  - the metadata the rank advertises in the handshake and its registration descriptors.
 * Per request, the decode (D) engine passes, per group, the logical block ids as its block table
 * holds them and as the prefill (P) engine exported them, the prompt length and D's own
 * prefix-cache hit; pdkv applies the N-1 rule of Mamba models, reads attention's logical ids as
 * the kernel blocks they stand for with each side's blocks-per-logical (kernel_blocks_per_id,
 * never expanded), picks the Mamba slots of each cache mode, and compiles
 * the same pdkv_transfer_plan_t the low-level pdkv_transfer_plan_compile returns (every plan
 * accessor and the executor's transfer calls take it unchanged).
 *
 * A request that does not fit the engine is INVALID_ARGUMENT with a message naming the value and
 * what to pass instead (a hit with prefix caching off, kernel ids where logical ids belong,
 * a group count other than the engine's). Models whose groups pdkv does not form (sliding-window
 * attention, MLA-typed layers beside GQA ones, no layer pattern) are refused at pdkv_engine_new;
 * engines that keep their own grouping use the low-level calls.
 *
 * The conventions at the top of pdkv.h hold for every function here.
 */
#ifndef PDKV_ENGINE_H
#define PDKV_ENGINE_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/engine.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* One engine rank described once. Immutable. */
typedef struct pdkv_engine pdkv_engine_t;

/* Optional fields of pdkv_engine_options_t. */
#define PDKV_ENGINE_FIELD_PREFIX_CACHING (1ULL << 0)

/* What describes an engine rank. Fill with pdkv_engine_options_init() and override. */
typedef struct pdkv_engine_options {
  size_t struct_size;                  /* sizeof(pdkv_engine_options_t) */
  uint64_t field_mask;                 /* PDKV_ENGINE_FIELD_* bits of the optional fields set */
  const pdkv_model_t *model;           /* the model (read during pdkv_engine_new, not retained) */
  const pdkv_engine_config_t *config;  /* the engine's settings, as its flags say (copied) */
  const char *engine_id;               /* non-empty UTF-8 the engine advertises (copied) */
  uint32_t tp_rank;                    /* this rank, < config->tp_size */
  uint64_t num_logical_blocks;         /* logical blocks per region, null block 0 included */
  uint64_t base;                       /* address of region 0 when region_bases is NULL; the
                                          regions then follow back to back */
  const uint64_t *region_bases;        /* NULL, or one address per region (read, not retained) */
  size_t num_region_bases;             /* entries of region_bases: the engine's region count */
  int32_t kv_layout;                   /* a pdkv_kv_layout_t (default HND) */
  uint8_t prefix_caching;              /* PDKV_ENGINE_FIELD_PREFIX_CACHING: 0 off, 1 on. Unset:
                                          on iff the Mamba cache mode is not none (pure
                                          attention models: off) */
} pdkv_engine_options_t;

/* Defaults: model and config NULL (the caller sets both), engine_id "engine", rank 0, 64 logical
 * blocks, regions back to back from 2^40, HND; sets struct_size and field_mask 0 (prefix
 * caching derived).
 * Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_options_init(pdkv_engine_options_t *options, pdkv_error_t **err);

/* Describes an engine rank: derives its KV-cache groups, geometry and metadata (nothing in
 * options is retained). Errors: NULL_POINTER (options, model, config, engine_id, out; region_bases
 * with num_region_bases > 0), STRUCT_SIZE (options, config), INVALID_ARGUMENT (a model whose
 * groups pdkv does not form, naming why and pointing to the low-level calls; num_region_bases
 * other than the engine's region count, naming both; and what pdkv_engine_metadata_from_model
 * refuses: rank >= TP, an unknown kv_layout, a set prefix_caching not 0/1, overlapping regions;
 * unknown field_mask bits), the errors of pdkv_geometry_new, OVERFLOW. *out owned by the caller (pdkv_engine_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_new(const pdkv_engine_options_t *options, pdkv_engine_t **out,
                                       pdkv_error_t **err);

/* Frees an engine. NULL is allowed; metadata, descriptor lists, contexts and plans obtained from
 * it stay valid (they own their data). Not thread-safe with concurrent use of the same engine. */
PDKV_API void pdkv_engine_free(pdkv_engine_t *engine);

/* Scalars of an engine (output struct: set struct_size, the library fills that prefix). */
typedef struct pdkv_engine_info {
  size_t struct_size;                   /* sizeof(pdkv_engine_info_t) */
  size_t num_groups;                    /* KV-cache groups (pdkv_engine_group) */
  uint32_t num_regions;                 /* registered KV tensors: the largest group's layers */
  uint32_t tp_size;
  uint32_t tp_rank;
  int32_t cache_mode;                   /* a pdkv_mamba_cache_mode_t (pure attention: none) */
  uint64_t logical_block_size;          /* tokens per block of the block table */
  uint64_t kernel_block_size;           /* tokens per kernel block */
  uint64_t physical_blocks_per_logical; /* kernel blocks per logical block (ppl) */
  uint64_t num_logical_blocks;          /* per region */
  uint64_t num_speculative_tokens;      /* Mamba scratch slots at the end of each Mamba list */
  uint8_t prefix_caching;               /* 1: the engine can hold a prefix-cache hit */
} pdkv_engine_info_t;

/* Fills the caller's prefix of *out (out->struct_size bytes; plain values, no pointers).
 * Errors: NULL_POINTER (engine, out), STRUCT_SIZE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_get_info(const pdkv_engine_t *engine, pdkv_engine_info_t *out,
                                            pdkv_error_t **err);

/* One KV-cache group (output struct); the arrays are owned by the engine. */
typedef struct pdkv_engine_group {
  size_t struct_size;        /* sizeof(pdkv_engine_group_t) */
  int32_t kind;              /* a pdkv_group_kind_t */
  const uint32_t *layers;    /* the group's model layers, ascending */
  size_t num_layers;
  const uint32_t *regions;   /* regions[i]: the region (registered tensor) layers[i] uses */
  size_t num_regions;        /* == num_layers */
} pdkv_engine_group_t;

/* Group `index` (< info.num_groups, in the order a request lists its groups) into the caller's
 * prefix of *out; its arrays are owned by the engine and valid until pdkv_engine_free.
 * Errors: NULL_POINTER (engine, out), STRUCT_SIZE, OUT_OF_BOUNDS (names index and count).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_group(const pdkv_engine_t *engine, size_t index,
                                         pdkv_engine_group_t *out, pdkv_error_t **err);

/* The metadata this rank advertises in the handshake (encode it for the peer), as a new handle
 * owned by the caller (pdkv_engine_metadata_free; independent of the engine's lifetime).
 * Errors: NULL_POINTER (engine, out). Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_get_metadata(const pdkv_engine_t *engine, pdkv_engine_metadata_t **out,
                                            pdkv_error_t **err);

/* The rank's registration descriptors, in vLLM's local-handle order: every kernel block of
 * every region as attention descriptors (region-major), then, for a Mamba model, every logical
 * block's conv projections and temporal state of every region (pdkv_mamba_local_descriptors).
 * *out owned by the caller (pdkv_descriptor_list_free). Errors: NULL_POINTER (engine, out),
 * OVERFLOW. Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_registration_descriptors(const pdkv_engine_t *engine,
                                                            pdkv_descriptor_list_t **out,
                                                            pdkv_error_t **err);

/* One P engine this (D) engine reads from: the metadata of each of its ranks (decoded from the
 * handshake) and its engine settings. */
typedef struct pdkv_engine_peer {
  size_t struct_size;                          /* sizeof(pdkv_engine_peer_t) */
  uint64_t field_mask;                         /* no optional fields yet: 0 */
  const pdkv_engine_metadata_t *const *remote; /* P ranks of ONE engine, any order, each once */
  size_t num_remote;                           /* >= 1 */
  const pdkv_engine_config_t *remote_config;   /* P's settings (its geometry; copied) */
  uint8_t permute_on_receive;                  /* as pdkv_plan_context_params_t, 0 or 1 */
} pdkv_engine_peer_t;

/* The plan context of this engine (the D rank, reader) and one P engine, built once after the
 * handshake; both geometries are derived from the engine's model. Nothing is retained.
 * Errors: NULL_POINTER (engine, peer, remote, an element, remote_config, out), STRUCT_SIZE (peer,
 * remote_config), INVALID_ARGUMENT (num_remote 0; a P rank advertising another model
 * (fingerprints differ) or a TP size other than remote_config's, naming both), the errors of
 * pdkv_geometry_new (P's settings) and of pdkv_plan_context_new. *out owned by the caller
 * (pdkv_plan_context_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_plan_context_new(const pdkv_engine_t *engine,
                                                    const pdkv_engine_peer_t *peer,
                                                    pdkv_plan_context_t **out, pdkv_error_t **err);

/* One group of a request, in the engine's group order. Element layout fixed for the major
 * version. */
typedef struct pdkv_engine_request_group {
  /* D's block table for the group: logical ids from the request's first block, the blocks of
   * D's prefix-cache hit included; a Mamba list as the table holds it (null placeholders,
   * speculative scratch slots at the end). */
  const uint64_t *local_block_ids;
  size_t num_local_block_ids;
  /* P's logical ids of the group as P exported them (vLLM's remote_block_ids: a Mamba list
   * exchange-clipped, i.e. the running state, or one slot per position in "all" mode). */
  const uint64_t *remote_block_ids;
  size_t num_remote_block_ids;
} pdkv_engine_request_group_t;

/* One request as D's scheduler holds it. */
typedef struct pdkv_engine_request {
  size_t struct_size;                        /* sizeof(pdkv_engine_request_t) */
  uint64_t field_mask;                       /* no optional fields yet: 0 */
  const pdkv_engine_request_group_t *groups; /* one per engine group (read during the call) */
  size_t num_groups;
  uint64_t num_prompt_tokens;                /* N; P computes N-1 of them for Mamba models */
  uint64_t num_local_computed_tokens;        /* D's prefix-cache hit, whole blocks */
} pdkv_engine_request_t;

/* Compiles one request's plan: the groups of pdkv_transfer_plan_compile derived from the request
 * (see the top of this file), compiled against ctx, which must have been built for this engine
 * (pdkv_engine_plan_context_new, or pdkv_plan_context_new with this engine's metadata).
 * Errors: NULL_POINTER (engine, ctx, request, out; groups with num_groups > 0, a block id array
 * with a non-zero count), STRUCT_SIZE (request), INVALID_ARGUMENT (ctx built for another D rank;
 * num_prompt_tokens 0; a group count other than the engine's; num_local_computed_tokens above the
 * prompt, not whole blocks, or non-zero with prefix caching off or Mamba cache mode none; a block
 * id past its side's logical blocks or more ids than the prompt fills (kernel ids where logical
 * ids belong); a single-state Mamba list from P with more than one real block; P and D cache
 * modes differing; each naming the group, the value and what to pass instead), and every error of
 * pdkv_transfer_plan_compile (COVERAGE for a list too short for the tokens D needs, ...).
 * *out owned by the caller (pdkv_transfer_plan_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_engine_plan_request(const pdkv_engine_t *engine,
                                                const pdkv_plan_context_t *ctx,
                                                const pdkv_engine_request_t *request,
                                                pdkv_transfer_plan_t **out, pdkv_error_t **err);

/* pdkv_engine_plan_request into an existing plan (since 2.9), as pdkv_transfer_plan_compile_into is
 * to pdkv_transfer_plan_compile: the same plan and the same errors, without allocating a handle,
 * the groups derived as views into the request's own id arrays rather than copies, and the plan's
 * buffers reused, so a caller keeping one plan per thread plans request after request without
 * touching the heap once the plan has grown to its largest request. Every pointer obtained from
 * `plan` before the call is invalid afterwards; on failure `plan` holds an empty plan (no reads,
 * no groups) and may be planned into again or freed. Errors: those of pdkv_engine_plan_request;
 * NULL_POINTER (plan). `plan` stays owned by the caller. Thread-safe for engine and ctx; not for
 * `plan`: no other call may use `plan` while this one runs. */
PDKV_API pdkv_status_t pdkv_engine_plan_request_into(const pdkv_engine_t *engine,
                                                     const pdkv_plan_context_t *ctx,
                                                     const pdkv_engine_request_t *request,
                                                     pdkv_transfer_plan_t *plan, pdkv_error_t **err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_ENGINE_H */
