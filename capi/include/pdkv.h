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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_H */
