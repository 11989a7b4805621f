#include "pdkv/core/tp_topology.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "pdkv/core/error.hpp"
#include "pdkv/core/head_ranges.hpp"

namespace pdkv::core {

int32_t tp_ratio(uint32_t local_tp, uint32_t remote_tp) {
  if (local_tp == 0 || remote_tp == 0) {
    fail(Status::InvalidArgument, "tp_size must be >= 1, got local tp_size " +
                                      std::to_string(local_tp) + " and remote tp_size " +
                                      std::to_string(remote_tp));
  }
  const uint32_t big = local_tp >= remote_tp ? local_tp : remote_tp;
  const uint32_t small = local_tp >= remote_tp ? remote_tp : local_tp;
  if (big % small != 0) {
    fail(Status::TpNotDivisible,
         "local tp_size " + std::to_string(local_tp) + " and remote tp_size " +
             std::to_string(remote_tp) +
             " do not divide each other; choose TP sizes where one is a multiple of the other");
  }
  // Ratios come from uint32 sizes; anything above INT32_MAX cannot be represented with a sign.
  if (big / small > static_cast<uint32_t>(INT32_MAX)) {
    fail(Status::InvalidArgument, "tp ratio " + std::to_string(big / small) +
                                      " (local tp_size " + std::to_string(local_tp) +
                                      ", remote tp_size " + std::to_string(remote_tp) +
                                      ") does not fit in int32");
  }
  const auto ratio = static_cast<int32_t>(big / small);
  return local_tp >= remote_tp ? ratio : -ratio;
}

std::vector<uint32_t> handshake_target_ranks(uint32_t local_tp, uint32_t local_rank,
                                             uint32_t remote_tp) {
  const int32_t r = tp_ratio(local_tp, remote_tp);
  if (local_rank >= local_tp) {
    fail(Status::InvalidArgument, "local rank " + std::to_string(local_rank) +
                                      " is out of range for local tp_size " +
                                      std::to_string(local_tp) + " (ranks are 0.." +
                                      std::to_string(local_tp - 1) + ")");
  }
  if (r > 0) return {local_rank / static_cast<uint32_t>(r)};
  const auto a = static_cast<uint32_t>(-r);
  std::vector<uint32_t> out;
  out.reserve(a);
  for (uint32_t i = 0; i < a; ++i) out.push_back(local_rank * a + i);
  return out;
}

}  // namespace pdkv::core

namespace pdkv::core {

namespace {

std::vector<uint32_t> sorted_union(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::vector<uint32_t> out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

uint32_t TpMapping::attention_slot_of(uint32_t remote_rank) const {
  for (size_t i = 0; i < all_source_ranks.size(); ++i) {
    if (all_source_ranks[i] == remote_rank) return attention_slots[i];
  }
  fail(Status::InvalidArgument, "remote rank " + std::to_string(remote_rank) +
                                    " is not a read source of local rank " +
                                    std::to_string(input.local_rank));
}

bool TpMapping::reads_attention_from(uint32_t remote_rank) const {
  return std::find(attention_source_ranks.begin(), attention_source_ranks.end(), remote_rank) !=
         attention_source_ranks.end();
}

TpMapping compute_tp_mapping(const TpMappingInput& in) {
  TpMapping m;
  m.input = in;
  m.tp_ratio = tp_ratio(in.local_tp, in.remote_tp);
  m.handshake_targets = handshake_target_ranks(in.local_tp, in.local_rank, in.remote_tp);
  m.notify_ranks = m.handshake_targets;
  if (in.total_kv_heads == 0) {
    fail(Status::InvalidArgument, "num_kv_heads must be >= 1, got 0 (MLA models pass 1)");
  }
  // MLA keeps one latent per rank that is never sharded, so only K=1 placement makes sense.
  const uint32_t k = in.use_mla ? 1 : in.total_kv_heads;
  validate_head_placement(in.local_tp, k);
  validate_head_placement(in.remote_tp, k);
  m.local_replicated = is_replicated(in.local_tp, k);
  m.remote_replicated = is_replicated(in.remote_tp, k);
  m.local_physical_heads = local_physical_heads(in.local_tp, k);
  m.remote_physical_heads = local_physical_heads(in.remote_tp, k);

  // Attention sources.
  const std::vector<uint32_t>& candidates = m.handshake_targets;
  auto head_of = [&](uint32_t r) { return physical_head_range(in.remote_tp, k, r).begin; };
  if (in.use_mla || in.local_tp >= in.remote_tp) {
    m.attention_source_ranks = {static_cast<uint32_t>(uint64_t{in.local_rank} * in.remote_tp /
                                                      in.local_tp)};
  } else {
    std::vector<uint32_t> seen_heads;
    for (uint32_t r : candidates) {
      const uint32_t h = head_of(r);
      if (std::find(seen_heads.begin(), seen_heads.end(), h) != seen_heads.end()) continue;
      seen_heads.push_back(h);
      m.attention_source_ranks.push_back(r);
    }
  }

  // Mamba sources: SSM state is sharded on every rank, so all candidates are needed.
  if (in.has_mamba) {
    m.mamba_source_ranks =
        in.local_tp < in.remote_tp ? candidates : m.attention_source_ranks;
  }
  m.all_source_ranks = sorted_union(m.attention_source_ranks, m.mamba_source_ranks);

  // Slots: where in the local block each source's attention bytes land (tp_ratio < 0).
  for (uint32_t r : m.all_source_ranks) {
    uint32_t slot = 0;
    if (!in.use_mla && in.local_tp < in.remote_tp) {
      const uint32_t h = head_of(r);
      for (uint32_t i = 0; i < m.attention_source_ranks.size(); ++i) {
        if (head_of(m.attention_source_ranks[i]) == h) {
          slot = i;
          break;
        }
      }
    }
    m.attention_slots.push_back(slot);
  }

  // Offset of the local head slice inside the (larger) remote block, in local block_lens.
  if (!in.use_mla && in.local_tp > in.remote_tp) {
    if (m.local_replicated) {
      m.rank_offset_factor = physical_head_range(in.local_tp, k, in.local_rank).begin -
                             head_of(m.attention_source_ranks.front());
    } else {
      m.rank_offset_factor = in.local_rank % (in.local_tp / in.remote_tp);
    }
  }
  return m;
}

uint32_t notifications_expected_per_request(uint32_t p_tp, uint32_t d_tp) {
  const int32_t r = tp_ratio(p_tp, d_tp);  // evaluated on P: remote = D
  return r < 0 ? static_cast<uint32_t>(-r) : 1;
}

std::vector<uint32_t> notification_targets(uint32_t d_tp, uint32_t d_rank, uint32_t p_tp) {
  return handshake_target_ranks(d_tp, d_rank, p_tp);
}

}  // namespace pdkv::core
