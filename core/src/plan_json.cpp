// Debug dump of a TransferPlan as JSON (transfer_plan.hpp).
#include <nlohmann/json.hpp>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::core {

std::string plan_to_json(const TransferPlan& plan) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["p_tp_size"] = plan.p_tp;
  j["d_tp_size"] = plan.d_tp;
  j["d_tp_rank"] = plan.d_rank;
  j["notify_ranks"] = plan.notify_ranks;
  j["notifications_per_p_rank"] = plan.notifications_per_p_rank;
  // Only a plan between pipeline stages says which (the dump of every other plan is unchanged).
  if (plan.d_pp_size > 1 || plan.p_pp_size > 1) {
    j["pipeline"] = {{"p_pp_size", plan.p_pp_size},     {"p_pp_rank", plan.p_pp_rank},
                     {"d_pp_size", plan.d_pp_size},     {"d_pp_rank", plan.d_pp_rank},
                     {"layer_begin", plan.layer_begin}, {"layer_end", plan.layer_end}};
  }
  ordered_json ranks = ordered_json::array();
  for (const RankReads& rr : plan.ranks) {
    ordered_json reads = ordered_json::array();
    for_each_read(rr, [&](const PlanRead& r) {  // issue order, a factored plan's repeats expanded
      reads.push_back({{"local_region", r.local_region},
                       {"local_offset", r.local_offset},
                       {"remote_region", r.remote_region},
                       {"remote_offset", r.remote_offset},
                       {"length", r.length}});
    });
    ranks.push_back({{"p_tp_rank", rr.p_rank}, {"bytes", rr.bytes}, {"reads", std::move(reads)}});
  }
  j["ranks"] = std::move(ranks);
  ordered_json zero = ordered_json::array();
  for (const GroupZero& z : plan.zero) {
    ordered_json ranges = ordered_json::array();
    for (const ZeroRange& r : z.zero) {
      ranges.push_back({{"block", r.block}, {"token_begin", r.token_begin}, {"token_end", r.token_end}});
    }
    ordered_json entry = {{"group", z.group},
                          {"kind", group_kind_name(z.kind)},
                          {"regions", z.regions},
                          {"zero", std::move(ranges)},
                          {"unfilled_states", z.unfilled_states}};
    if (plan.permute.active()) {
      entry["permute_blocks"] = z.permute_blocks;
      entry["permute_regions"] = z.permute_regions;
    }
    zero.push_back(std::move(entry));
  }
  j["zero"] = std::move(zero);
  // Only a plan whose blocks D permutes on receive says so (every other dump is unchanged).
  if (plan.permute.active()) {
    j["permute"] = {{"from", kv_layout_name(plan.permute.from)},
                    {"to", kv_layout_name(plan.permute.to)},
                    {"heads", plan.permute.heads},
                    {"tokens", plan.permute.tokens},
                    {"head_bytes", plan.permute.head_bytes}};
  }
  j["stats"] = {{"pieces_before_coalescing", plan.stats.pieces_before_coalescing},
                {"pieces_after_coalescing", plan.stats.pieces_after_coalescing},
                {"bytes", plan.stats.bytes},
                {"attention_bytes", plan.stats.attention_bytes},
                {"mamba_bytes", plan.stats.mamba_bytes}};
  return j.dump(2);
}

}  // namespace pdkv::core
