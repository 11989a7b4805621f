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
 *  - Growth of structs (the one rule for every struct of every pdkv/ header):
 *    - Input structs (options, descriptions, requests: what the caller fills) begin with
 *      `size_t struct_size`, set to sizeof(the struct) as compiled, then `uint64_t field_mask`.
 *      A required field has no bit and is always read (its zero is a value, documented beside
 *      it where it has a meaning). An optional field (one with a default) has a bit
 *      PDKV_<STRUCT>_FIELD_<NAME>, defined beside the struct: it is read only when its bit is in
 *      field_mask; unset, it takes the default written beside it whatever its bytes hold. No
 *      field has an in-band "not set" value (-1, "0 means auto", a has_x flag). A NULL pointer
 *      (with a count of 0) is not such a value: it is how an absent array or string is written.
 *      Bits the library does not know are PDKV_ERR_INVALID_ARGUMENT naming the struct and the
 *      bits, so a caller built against a newer header learns that its field would be ignored.
 *    - A field added in a later minor version is appended at the end of its struct and always
 *      gets a bit, so "not set" is explicit and an older caller (whose mask lacks the bit)
 *      keeps the default.
 *    - The first published size of every struct is its size in pdkv 2.0. struct_size must be
 *      a multiple of alignof(size_t) from that size up to the library's own size of the struct;
 *      any other value is PDKV_ERR_STRUCT_SIZE naming the struct, the value and the valid
 *      range. A struct's *_init function sets struct_size, field_mask 0 and the defaults of its
 *      required fields.
 *    - Output structs (the library fills them: *_info_t, pdkv_engine_group_t, ...) begin with
 *      `size_t struct_size` only: the caller sets it and the library writes exactly that many
 *      bytes, so a field appended later is simply absent for an older caller. A struct that is
 *      both input and output (pdkv_model_desc_t, pdkv_remote_decode_prefill_t) follows the
 *      input rule; as output its field_mask receives the bits of the optional fields written.
 *    - Structs without struct_size (elements of arrays: pdkv_region_t, pdkv_descriptor_t,
 *      pdkv_plan_read_t, pdkv_zero_range_t, ...) have a layout fixed for the major version:
 *      they never grow; a change would be a new major version.
 *  - Nothing that may grow is passed by value.
 *  - No exception crosses this boundary; an unexpected one becomes PDKV_ERR_INTERNAL.
 *  - Thread safety: handles are immutable after creation unless stated otherwise, so const
 *    queries on one handle may run concurrently from many threads. Freeing a handle while
 *    another thread uses it is undefined.
 *  - Every function's own comment restates what it does, its errors (the statuses it returns
 *    besides PDKV_OK; any function may also return PDKV_ERR_INTERNAL), who owns its outputs and
 *    how long returned pointers stay valid, and its thread safety.
 *  - Array inputs are (pointer, count) pairs: the pointer may be NULL only when the count is 0;
 *    arrays are read during the call and never retained. Boolean inputs are uint8_t and must
 *    be 0 or 1 (INVALID_ARGUMENT otherwise). Enum-typed fields and arguments are int32_t; an
 *    unknown value is INVALID_ARGUMENT naming it.
 *  - Variable-length results have one shape: an owned, immutable list handle pdkv_X_list_t
 *    returned through `**out`, read with pdkv_X_list_items(list, &items, &count) (a contiguous
 *    array owned by the list, NULL when count is 0, valid together with every string its
 *    elements point to until pdkv_X_list_free) and freed with pdkv_X_list_free. An array a
 *    handle already holds (a plan's ranks, a geometry's shape) is lent the same way, as
 *    (const T **items, size_t *count) valid until that handle is freed. Byte strings and text
 *    are the exception: they come back as pdkv_bytes_t / pdkv_string_t handles or, where a
 *    caller wants them in its own memory (pdkv_engine_metadata_encode, pdkv_transfer_plan_to_json),
 *    into a caller buffer (buf, capacity, *out_len: *out_len always receives the size needed,
 *    also on BUFFER_TOO_SMALL). No other call takes a result buffer and a capacity.
 *  - Tensor-parallel sizes and ranks have one naming scheme. Of one engine they are `tp_size`
 *    and `tp_rank`. Where two engines meet, the same words take a prefix: `p_` and `d_` where
 *    the role (prefill, decode) matters (`p_tp_size`, `d_tp_size`, `d_tp_rank`, `p_tp_rank`),
 *    `local_` and `remote_` where the call works from either side (`local_tp_size`,
 *    `local_tp_rank`, `remote_tp_size`, `remote_tp_rank`). Pipeline stages follow the same rule
 *    with `pp` (`pp_size`, `pp_rank`, `p_pp_rank`, `d_pp_rank`). In argument lists and struct
 *    fields P comes before D, local before remote, and a size before the rank it bounds.
 *  - A function whose comment ends in @plain has the plain shape: it returns pdkv_status_t,
 *    takes only scalar inputs (uint32_t, uint64_t, int32_t enums, uint8_t booleans), then its
 *    outputs (one or more uint32_t, uint64_t, int32_t or uint8_t pointers, or one
 *    pdkv_X_list_t ** of integers), then err. @plain(range) marks outputs named begin and end
 *    as a half-open range. Its idiomatic wrappers in the bindings and its conformance op are
 *    generated from this header (scripts/gen_bindings.py refuses a marked function of another
 *    shape).
 *
 * The declarations live in one header per concept under pdkv/ (included below, in order):
 *   pdkv/errors.h       status codes, error objects, version
 *   pdkv/model.h        model descriptions, presets, HF config.json
 *   pdkv/geometry.h     TP topology, engine settings, per-rank geometry
 *   pdkv/mamba.h        Mamba state transfer (conv/SSM reads)
 *   pdkv/descriptors.h  regions and transfer descriptors
 *   pdkv/blocks.h       value lists, block ids, clipping and zeroing, prefix trimming
 *   pdkv/scheduler.h    scheduler helpers, KV offloading
 *   pdkv/metadata.h     engine metadata and handshake validation
 *   pdkv/plan.h         transfer plans, pipeline parallelism
 *   pdkv/vllm_compat.h  reproductions of vLLM's computations, for comparison only
 *   pdkv/agent.h        the transfer executor (agents, memory, peers, transfers)
 *   pdkv/engine.h       the engine-level API (describe an engine once, plan each request)
 * Include pdkv.h only; each of them refuses to be included on its own.
 */
#ifndef PDKV_H
#define PDKV_H

#include <stddef.h>
#include <stdint.h>

#if defined(PDKV_BUILDING_LIBRARY)
#define PDKV_API __attribute__((visibility("default")))
#else
#define PDKV_API
#endif

/* ABI version of this header. A change of MAJOR breaks the ABI (the library's SONAME is
 * libpdkv.so.<MAJOR>); MINOR adds functions or grows structs at their end, by the growth rule
 * above. Compare with pdkv_version() at run time. */
#define PDKV_VERSION_MAJOR 2
#define PDKV_VERSION_MINOR 9
#define PDKV_VERSION_PATCH 0

#include "pdkv/errors.h"
#include "pdkv/model.h"
#include "pdkv/geometry.h"
#include "pdkv/mamba.h"
#include "pdkv/descriptors.h"
#include "pdkv/blocks.h"
#include "pdkv/scheduler.h"
#include "pdkv/metadata.h"
#include "pdkv/plan.h"
#include "pdkv/vllm_compat.h"
#include "pdkv/agent.h"
#include "pdkv/engine.h"

#endif /* PDKV_H */
