/*
 * pdkv/errors.h - status codes, error objects and the library version.
 * Part of pdkv's C API: include pdkv.h, which includes this header; the conventions at the
 * top of pdkv.h (errors, ownership, struct_size, thread safety) hold for every declaration.
 */
#ifndef PDKV_ERRORS_H
#define PDKV_ERRORS_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/errors.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Numeric values are stable. They come in ranges with room to grow:
 *   0-99    general and planning (the values below 100 are those of pdkv 0.1),
 *   200-299 transport: the executor (agents, handshakes, transfers),
 *   300-399 device memory (reserved for CUDA).
 * A binding that meets a value it does not know must treat it as an error of that range. */
typedef enum pdkv_status {
  PDKV_OK = 0,                          /* success */
  PDKV_ERR_INVALID_ARGUMENT = 1,        /* a value out of its domain (zero TP, unknown enum) */
  PDKV_ERR_NULL_POINTER = 2,            /* a required pointer was NULL */
  PDKV_ERR_STRUCT_SIZE = 3,             /* a struct_size outside the struct's valid sizes */
  PDKV_ERR_TP_NOT_DIVISIBLE = 4,        /* the larger TP size is not a multiple of the smaller */
  PDKV_ERR_HEADS_NOT_DIVISIBLE = 5,     /* KV heads and TP size do not divide each other */
  PDKV_ERR_UNSUPPORTED_MAMBA_TYPE = 6,  /* the Mamba-like layer type has no transfer rule */
  PDKV_ERR_UNSUPPORTED_LAYOUT = 7,      /* a layout not movable byte-exactly (SD conv) */
  PDKV_ERR_OVERFLOW = 8,                /* a size or address would overflow 64 bits */
  PDKV_ERR_BUFFER_TOO_SMALL = 9,        /* a caller buffer is too small (needed size given) */
  PDKV_ERR_PARSE = 10,                  /* malformed input: JSON, config.json or wire data */
  PDKV_ERR_IO = 11,                     /* a file could not be read or written (named) */
  PDKV_ERR_NOT_FOUND = 12,              /* an unknown name (preset, backend) */
  PDKV_ERR_INCOMPATIBLE = 13,           /* two inputs do not fit together (models, sizes) */
  PDKV_ERR_COVERAGE = 14,               /* a transfer does not cover its target exactly */
  PDKV_ERR_OUT_OF_BOUNDS = 15,          /* an index or range outside its container */
  PDKV_ERR_CHECKSUM = 16,               /* a checksum does not match */
  PDKV_ERR_INTERNAL = 17,               /* an unexpected failure inside the library */
  /* Transport range. */
  PDKV_ERR_TIMED_OUT = 200,   /* a deadline expired (transfer, handshake, connect) */
  PDKV_ERR_CANCELLED = 201,   /* the caller cancelled the operation */
  PDKV_ERR_PEER_LOST = 202,   /* the peer died, closed, or stopped answering heartbeats */
  PDKV_ERR_AUTH = 203,        /* pre-shared key proof failed (message names the peer) */
  PDKV_ERR_PROTOCOL = 204,    /* a peer sent a malformed, unexpected or lying frame */
  PDKV_ERR_TRANSPORT = 205,   /* the transport library failed (pdkv_error_cause gives its code) */
  PDKV_ERR_BUSY = 206,        /* a resource is in use (deregistering memory a transfer uses) */
  PDKV_ERR_SHUTDOWN = 207     /* the agent is shutting down or was closed */
} pdkv_status_t;

/* Where an error's underlying cause comes from. Numeric values are stable. */
typedef enum pdkv_cause_domain {
  PDKV_CAUSE_NONE = 0,
  PDKV_CAUSE_UCX = 1,     /* code is a ucs_status_t */
  PDKV_CAUSE_ERRNO = 2,   /* code is an errno value */
  PDKV_CAUSE_CUDA = 3,    /* code is a CUDA driver API CUresult (executor: device memory) */
  PDKV_CAUSE_OPENSSL = 4  /* code is an ERR_get_error() value */
} pdkv_cause_domain_t;

/* ---- Errors ------------------------------------------------------------------------- */

/* An owned error: a status plus a human-readable message that names the offending value. */
typedef struct pdkv_error pdkv_error_t;

/* Status of an error. err may be NULL (returns PDKV_OK). Never fails. Thread-safe. */
PDKV_API pdkv_status_t pdkv_error_status(const pdkv_error_t *err);
/* Message of an error, NUL-terminated UTF-8, owned by err and valid until pdkv_error_free(err).
 * Returns "" for NULL. Thread-safe. */
PDKV_API const char *pdkv_error_message(const pdkv_error_t *err);
/* Frees an error and its message. NULL is allowed. Not thread-safe with concurrent use of the
 * same error (its message pointer dies with it). */
PDKV_API void pdkv_error_free(pdkv_error_t *err);
/* The lower-layer cause of an error, if any: *domain receives a pdkv_cause_domain_t
 * (PDKV_CAUSE_NONE when the error has none, or err is NULL) and *code that layer's own code.
 * Either out pointer may be NULL. Never fails. Thread-safe. */
PDKV_API void pdkv_error_cause(const pdkv_error_t *err, int32_t *domain, int64_t *code);
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

#endif /* PDKV_ERRORS_H */
