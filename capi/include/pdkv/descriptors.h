/*
 * pdkv/descriptors.h - registered regions and transfer descriptors (attention and Mamba).
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_DESCRIPTORS_H
#define PDKV_DESCRIPTORS_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/descriptors.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

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

/* The local split handle for remote rank `p_tp_rank` (D_TP < P_TP): each local attention
 * descriptor (from pdkv_attention_local_descriptors) cut to that rank's head slot. Neither
 * input is retained. Errors: NULL_POINTER (local_attention, mapping, out), INVALID_ARGUMENT
 * (tp_ratio > 0, or p_tp_rank is not a source rank of the mapping, bsr 0), INCOMPATIBLE
 * (head-sharded with bsr > 1). *out owned by the caller (pdkv_descriptor_list_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_attention_split_descriptors(const pdkv_descriptor_list_t *local_attention,
                                                        const pdkv_tp_mapping_t *mapping,
                                                        uint32_t block_size_ratio, uint32_t p_tp_rank,
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

/* Descriptors in P rank `p_tp_rank`'s Mamba regions for the reads of `reads` whose p_tp_rank
 * matches (empty when it supplies nothing). p_geometry is the P engine's. Nothing is retained.
 * Errors: as pdkv_mamba_local_descriptors (NULL_POINTER also for reads), plus OUT_OF_BOUNDS for
 * a read leaving the P page. *out owned by the caller (pdkv_descriptor_list_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_remote_descriptors(const pdkv_region_t *p_regions,
                                                     size_t num_p_regions, uint64_t p_ppl,
                                                     const pdkv_geometry_t *p_geometry,
                                                     const pdkv_mamba_read_list_t *reads,
                                                     uint32_t p_tp_rank,
                                                     pdkv_descriptor_list_t **out,
                                                     pdkv_error_t **err);

/* The D rank's local destinations matching pdkv_mamba_remote_descriptors(..., p_tp_rank) one to
 * one. d_geometry is the D engine's. Nothing is retained. Errors: as
 * pdkv_mamba_local_descriptors (NULL_POINTER also for reads), plus OUT_OF_BOUNDS for a read
 * leaving the D page. *out owned by the caller (pdkv_descriptor_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_local_split_descriptors(const pdkv_region_t *d_regions,
                                                          size_t num_d_regions, uint64_t d_ppl,
                                                          const pdkv_geometry_t *d_geometry,
                                                          const pdkv_mamba_read_list_t *reads,
                                                          uint32_t p_tp_rank,
                                                          pdkv_descriptor_list_t **out,
                                                          pdkv_error_t **err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_DESCRIPTORS_H */
