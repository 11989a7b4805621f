/*
 * pdkv/mamba.h - Mamba state transfer: conv projection offsets, SSM reads, byte-exact Mamba read lists.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_MAMBA_H
#define PDKV_MAMBA_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/mamba.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Mamba state transfer ---------------------------------------------------------- */

/* A byte range inside one logical Mamba page of one layer. */
typedef struct pdkv_byte_range {
  uint64_t offset;
  uint64_t size;
} pdkv_byte_range_t;

/* An immutable list of byte ranges. */
typedef struct pdkv_byte_range_list pdkv_byte_range_list_t;

/* The ranges: *items points to *count entries owned by the list, valid until
 * pdkv_byte_range_list_free (NULL when *count is 0). Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_byte_range_list_items(const pdkv_byte_range_list_t *list,
                                                  const pdkv_byte_range_t **items, size_t *count,
                                                  pdkv_error_t **err);

/* Frees a byte-range list and its items. NULL is allowed. Not thread-safe with concurrent use
 * of the same list. */
PDKV_API void pdkv_byte_range_list_free(pdkv_byte_range_list_t *list);

/* Cumulative (offset, size) of each conv projection in the local page of `geometry`
 * ([x|B|C], [Q|K|V] or [x]), in page order. Errors: NULL_POINTER (geometry, out),
 * UNSUPPORTED_MAMBA_TYPE (not hybrid). *out owned by the caller (pdkv_byte_range_list_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_local_conv_offsets(const pdkv_geometry_t *geometry,
                                                     pdkv_byte_range_list_t **out,
                                                     pdkv_error_t **err);


/* vLLM's SSM temporal-state read in the remote page: tp_ratio >= 1 reads the local ssm bytes at
 * remote_conv_bytes + lo*local_ssm_bytes; tp_ratio < 0 reads the whole remote ssm state.
 * Errors: NULL_POINTER (geometry, out), INVALID_ARGUMENT, OVERFLOW. Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_ssm_read_range(const pdkv_geometry_t *geometry,
                                                 uint64_t remote_conv_bytes,
                                                 uint64_t remote_ssm_bytes, uint32_t local_tp_rank,
                                                 int32_t tp_ratio, pdkv_byte_range_t *out,
                                                 pdkv_error_t **err);

/* ceil((conv_bytes + ssm_bytes) / block_len): kernel blocks per logical Mamba block, as vLLM
 * derived the remote ratio before the handshake carried it. Errors: NULL_POINTER (out),
 * INVALID_ARGUMENT (block_len 0), OVERFLOW. Thread-safe. @plain */
PDKV_API pdkv_status_t pdkv_physical_blocks_per_logical(uint64_t conv_bytes, uint64_t ssm_bytes,
                                                        uint64_t block_len, uint64_t *out,
                                                        pdkv_error_t **err);

/* One contiguous copy from a P rank's Mamba page into the D rank's page. The element layout is
 * fixed for the major version (arrays of it cannot grow). */
typedef struct pdkv_mamba_read {
  uint32_t p_tp_rank;          /* remote (P) rank */
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

/* Reads of D rank `d_tp_rank` given the P and D geometries of the same model (`rule` is a
 * pdkv_mamba_reads_rule_t). Neither geometry is retained. Errors: NULL_POINTER (p_geometry,
 * d_geometry, out), INVALID_ARGUMENT (unknown rule, d_tp_rank >= D TP), INCOMPATIBLE (the two
 * geometries describe different models; names both values), TP_NOT_DIVISIBLE,
 * UNSUPPORTED_MAMBA_TYPE. *out owned by the caller (pdkv_mamba_read_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_mamba_reads_new(const pdkv_geometry_t *p_geometry,
                                            const pdkv_geometry_t *d_geometry, uint32_t d_tp_rank,
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_MAMBA_H */
