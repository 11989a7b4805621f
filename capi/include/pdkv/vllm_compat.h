/*
 * pdkv/vllm_compat.h - reproductions of vLLM's computations: its conv offsets (with the
 * n_groups < TP bug), the v0604 align-mode split and NIXL descriptor ids.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_VLLM_COMPAT_H
#define PDKV_VLLM_COMPAT_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/vllm_compat.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Helpers that reproduce vLLM's own computations, kept for comparing an engine's behaviour
 * with vLLM's and for diagnosing a vLLM peer. They are not the product's path: plans
 * (pdkv/plan.h) and Mamba read lists (pdkv/mamba.h) are. Where vLLM is wrong, so are these,
 * on purpose (each comment says where). */

/* vLLM main's remote conv slices for local rank `local_tp_rank` (geometry is the LOCAL engine's):
 * tp_ratio >= 1 reads (base + lo*size, size) with lo = local_tp_rank % tp_ratio; tp_ratio < 0 reads
 * each whole remote projection. Wrong for Mamba2 with n_groups < TP (vLLM #55208): for planning
 * use pdkv_mamba_reads_new. Errors: NULL_POINTER (geometry, out), INVALID_ARGUMENT (tp_ratio 0,
 * indivisible sizes), UNSUPPORTED_MAMBA_TYPE (not hybrid). *out owned by the caller
 * (pdkv_byte_range_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_remote_conv_offsets(const pdkv_geometry_t *geometry,
                                                      uint32_t local_tp_rank, int32_t tp_ratio,
                                                      pdkv_byte_range_list_t **out,
                                                      pdkv_error_t **err);

/* How an engine's descriptors are laid out: all attention descriptors region-major, then all
 * Mamba descriptors region-major. */
typedef struct pdkv_descriptor_layout {
  size_t struct_size;             /* sizeof(pdkv_descriptor_layout_t) */
  uint64_t field_mask;            /* no optional fields yet: 0 */
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

/* Inputs of the v0604 Mamba align-mode block-aligned chunk split (vLLM #42554). */
typedef struct pdkv_aligned_split_v0604_input {
  size_t struct_size;                     /* sizeof(pdkv_aligned_split_v0604_input_t) */
  uint64_t field_mask;                    /* no optional fields yet: 0 */
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_VLLM_COMPAT_H */
