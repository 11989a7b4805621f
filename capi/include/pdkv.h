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
 *    size of the struct up to its current size that is a multiple of alignof(size_t) (every
 *    size a struct is published at is one; any other value would end inside a field), so
 *    structs can grow without breaking the ABI; other sizes are PDKV_ERR_STRUCT_SIZE (the
 *    message names the struct, the value and the valid range).
 *    The "first published size" of every struct of this header is its size in pdkv 0.1, i.e.
 *    the end of its last 0.1 field rounded up to alignof(size_t); the library pins it to that
 *    field, so it never moves when a field is appended. In bytes on LP64 (x86-64, AArch64):
 *      pdkv_model_desc_t 104, pdkv_tp_mapping_params_t 32, pdkv_tp_mapping_info_t 40,
 *      pdkv_engine_config_t 80, pdkv_geometry_info_t 200, pdkv_conv_projection_t 56,
 *      pdkv_descriptor_layout_t 48, pdkv_exchange_clip_params_t 48,
 *      pdkv_group_trim_input_t 112, pdkv_aligned_split_v0604_input_t 72,
 *      pdkv_aligned_split_input_t 96, pdkv_remote_decode_prefill_t 32,
 *      pdkv_remote_decode_prefill_plan_t 32, pdkv_offload_geometry_t 24,
 *      pdkv_engine_layout_t 64, pdkv_engine_metadata_info_t 128, pdkv_incompatibility_t 64,
 *      pdkv_plan_context_params_t 56, pdkv_plan_group_t 32, pdkv_transfer_plan_info_t 104,
 *      pdkv_plan_group_zero_t 64.
 *    A field added later starts at or after that size (never in the 0.1 tail padding) and,
 *    in an input struct, is treated as zero when the caller's struct_size does not reach it.
 *    Output structs follow the same rule: the library fills only the first struct_size bytes.
 *  - Structs without struct_size (elements of arrays: pdkv_region_t, pdkv_descriptor_t,
 *    pdkv_plan_read_t, pdkv_zero_range_t, ...) have a layout fixed for major version 0: they
 *    never grow; a change would be a new major version.
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

/* ABI version of this header. A change of MAJOR breaks the ABI; MINOR adds functions or
 * grows structs at their end. Compare with pdkv_version() at run time. */
#define PDKV_VERSION_MAJOR 1
#define PDKV_VERSION_MINOR 0
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
