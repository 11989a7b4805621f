// Handle types and C <-> core conversions shared by the block-id, trimming, scheduler, metadata,
// handshake and transfer-plan parts of the C API (block_ids_api.cpp, trim_api.cpp,
// scheduler_api.cpp, metadata_api.cpp, handshake_api.cpp, plan_api.cpp). Like
// model_geometry_handles.hpp, each handle owns its core value plus the flattened C arrays the
// header promises stay valid until the handle is freed; handles are never modified after
// construction, hence thread-safe to read.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <mutex>
#include <vector>

#include "boundary.hpp"
#include "pdkv.h"
#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/handshake.hpp"
#include "pdkv/core/model.hpp"
#include "pdkv/core/prefix_trim.hpp"
#include "pdkv/core/engine_request.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "pdkv/core/zero_ranges.hpp"

struct pdkv_u64_list {
  std::vector<uint64_t> items;
};

struct pdkv_u32_list {
  std::vector<uint32_t> items;
};

struct pdkv_byte_range_list {
  std::vector<pdkv_byte_range_t> items;
};

struct pdkv_stage_pair_list {
  std::vector<pdkv_stage_pair_t> items;
};

struct pdkv_bytes {
  std::vector<uint8_t> data;
};

struct pdkv_string {
  std::string text;
};

struct pdkv_zero_range_list {
  std::vector<pdkv_zero_range_t> items;
};

struct pdkv_group_trim {
  pdkv::core::GroupTrim trim;
  std::vector<pdkv_token_run_t> runs;
  std::vector<pdkv_state_pair_t> states;
  std::vector<pdkv_zero_range_t> zero;
};

struct pdkv_engine_metadata {
  pdkv::core::EngineMetadata md;
  std::vector<pdkv_metadata_region_t> regions;  // C view of md.regions
};

struct pdkv_handshake_report {
  std::vector<pdkv::core::Incompatibility> items;
  std::vector<std::string> texts;  // to_string(items[i])
};

struct pdkv_plan_context {
  pdkv::core::PlanContext ctx;
  // The context's request-independent checks, run once at creation (the handle is immutable);
  // compile reports their outcome at the same points compile_transfer_plan would.
  pdkv::core::PlanContextVerdict verdict;
  // P's speculative tokens when the context was built by pdkv_engine_plan_context_new (the
  // engine-level request checks P's lists against them); 0 for pdkv_plan_context_new.
  uint64_t remote_num_speculative_tokens = 0;
  // The serial number (pdkv_engine::serial) of the last engine whose metadata was found equal to
  // ctx.local, so that an engine planning request after request against this context compares
  // the two metadata once, not on every call (both handles are immutable; serials are never
  // reused, so a freed engine's serial never matches a new one). 0: none yet.
  mutable std::atomic<uint64_t> matched_engine{0};
};

// A compiled plan and the C view of it that the core plan lacks; the reads and zero ranges are
// handed out in place (the core records have the C layout). pdkv_transfer_plan_compile_into
// recompiles it in place, reusing every buffer.
struct pdkv_transfer_plan {
  // Compiled in factored form (region repeats and block-indexed reads: kCompileOptions); the
  // executor walks it as it is.
  pdkv::core::TransferPlan plan;
  std::vector<uint32_t> read_ranks;                     // plan.ranks[i].p_rank
  // plan.ranks[i]'s reads in issue order, expanded on the first pdkv_transfer_plan_rank_reads of
  // the rank after each compile (listed ranks are handed out as they are). That call is
  // thread-safe on a const handle, so the expansion happens under `expand_mutex`; the buffers
  // keep their capacity from one compile to the next.
  mutable std::mutex expand_mutex;
  mutable std::vector<std::vector<pdkv::core::PlanRead>> expanded;
  mutable std::vector<uint8_t> expanded_ready;
  // The request's groups as core views, kept for the next compile into this handle.
  std::vector<pdkv::core::PlanGroupView> views;
  // pdkv_engine_plan_request_into's per-group id spans, kept likewise (its capacity reused).
  std::vector<pdkv::core::EngineRequestGroup> engine_groups;
};

namespace pdkv::capi {

// Copies (ptr, count) into a vector; ptr may be NULL only when count is 0 (NullPointer naming
// `arg` otherwise).
std::vector<uint64_t> u64_vector(const uint64_t* ptr, size_t count, const char* arg);

// Enum and flag checks: InvalidArgument naming the field, the value and the valid values.
pdkv::core::GroupKind group_kind_from_c(int32_t kind, const char* field);
pdkv::core::MambaCacheMode cache_mode_from_c(int32_t mode, const char* field);
bool flag_from_c(uint8_t v, const char* field);

// The PDKV_TRIM_FIELD_* bits this library knows.
inline constexpr uint64_t kTrimInputFields =
    PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK | PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID | PDKV_TRIM_FIELD_TOKENS_PER_BLOCK;

// A set kernel_blocks_per_id: >= 1 (InvalidArgument naming the field otherwise).
uint64_t kernel_blocks_per_id(uint64_t v, const char* field);

// A set tokens per block: >= 1 (InvalidArgument naming the field otherwise).
uint64_t tokens_per_block(uint64_t v, const char* field);

// pdkv_group_trim_input_t -> core (struct_size, pointers, enums, flags checked).
pdkv::core::GroupTrimInput trim_input_from_c(const pdkv_group_trim_input_t* in, const char* arg);

// Core zero ranges -> C elements.
std::vector<pdkv_zero_range_t> zero_ranges_to_c(const std::vector<pdkv::core::ZeroRange>& z);

// A new metadata handle owning `md` with its C region view.
pdkv_engine_metadata_t* make_metadata(pdkv::core::EngineMetadata md);

// Fills a plan handle's C views of its compiled plan and releases it to the caller.
pdkv_transfer_plan_t* finish_plan(std::unique_ptr<pdkv_transfer_plan> h);

// Refreshes the C views after the plan was (re)compiled in place.
void refresh_plan_views(pdkv_transfer_plan& h);

// How the C API compiles plans: factored (CompileOptions::region_repeats and indexed_reads).
inline constexpr pdkv::core::CompileOptions kCompileOptions{.region_repeats = true, .indexed_reads = true};

// Resolves a C string into (dst, capacity) as a NUL-terminated copy, reporting the length
// without the NUL in *out_len (BufferTooSmall naming the needed capacity).
void copy_text(const std::string& text, char* buf, size_t capacity, size_t* out_len, const char* what);

}  // namespace pdkv::capi
