// Internals shared by transfer-plan compilation (transfer_plan.cpp) and its independent
// coverage check (plan_coverage.cpp). Not installed; not part of the public API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::core::plan_detail {

inline std::string s(uint64_t v) { return std::to_string(v); }

// A group with its tokens-per-block filled from the metadata and its region list resolved.
struct ResolvedGroup {
  GroupTrimInput trim;
  std::vector<uint32_t> regions;
};

// Checks the context (mapping vs metadata, remote ranks of one engine, Mamba states) and
// resolves every group. Errors as compile_transfer_plan documents.
std::vector<ResolvedGroup> resolve(const PlanContext& ctx, const std::vector<PlanGroup>& groups);

// The KV layout attention reads are compiled for: D's layout (HND for MLA, where one latent
// head makes both layouts the same bytes). UnsupportedLayout when D and P layouts differ, or
// when both are NHD but the ranks hold different numbers of KV heads (a head subset of an NHD
// block is one piece per token; the handshake refuses the pair as well).
KvLayout attention_layout(const PlanContext& ctx);

// The metadata of P rank p; NotFound when ctx.remote does not hold it.
const EngineMetadata& remote_rank(const PlanContext& ctx, uint32_t p);

// Attention bytes per token of one rank's region: block_len / kernel_block_size, exact.
uint64_t region_bytes_per_token(const EngineMetadata& m, uint32_t region, const char* side);

// Bytes of one region: block_len * num_blocks (the registered size).
uint64_t region_size(const EngineMetadata& m, uint32_t region);

// Logical Mamba page stride of one region: block_len * ppl, checked to hold `page_bytes`.
uint64_t mamba_page_stride(const EngineMetadata& m, uint32_t region, uint64_t page_bytes,
                           const char* side);

// The coverage and bounds check on resolved groups and their trims.
void check_coverage(const TransferPlan& plan, const PlanContext& ctx,
                    const std::vector<ResolvedGroup>& groups, const std::vector<GroupTrim>& trims);

}  // namespace pdkv::core::plan_detail
