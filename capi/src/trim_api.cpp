// Prefix trimming (core/prefix_trim.hpp), exchange clipping (core/exchange_clip.hpp) and
// receive-side zeroing (core/zero_ranges.hpp).
#include <memory>
#include <string>
#include <vector>

#include "boundary.hpp"
#include "pdkv/core/exchange_clip.hpp"
#include "pdkv/core/prefix_trim.hpp"
#include "pdkv/core/zero_ranges.hpp"
#include "plan_handles.hpp"
#include "struct_sizes.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

namespace {
pdkv_zero_range_list_t* to_zero_list(const std::vector<core::ZeroRange>& z) {
  auto list = std::make_unique<pdkv_zero_range_list>();
  list->items = pdkv::capi::zero_ranges_to_c(z);
  return list.release();
}


}  // namespace

namespace pdkv::capi {

core::GroupTrimInput trim_input_from_c(const pdkv_group_trim_input_t* in, const char* arg) {
  require_non_null(in, arg);
  const std::string a(arg);
  const pdkv_group_trim_input_t copy =
      read_options(*in, kGroupTrimInputMinSize, "pdkv_group_trim_input_t", kTrimInputFields);
  in = &copy;
  core::GroupTrimInput t;
  t.kind = group_kind_from_c(in->kind, (a + ".kind").c_str());
  t.cache_mode = cache_mode_from_c(in->cache_mode, (a + ".cache_mode").c_str());
  t.local_blocks = u64_vector(in->local_blocks, in->num_local_blocks, (a + ".local_blocks").c_str());
  t.remote_blocks = u64_vector(in->remote_blocks, in->num_remote_blocks, (a + ".remote_blocks").c_str());
  if (in->field_mask & PDKV_TRIM_FIELD_TOKENS_PER_BLOCK) {
    t.local_tokens_per_block = tokens_per_block(in->local_tokens_per_block, (a + ".local_tokens_per_block").c_str());
    t.remote_tokens_per_block = tokens_per_block(in->remote_tokens_per_block, (a + ".remote_tokens_per_block").c_str());
  } else if (t.kind != core::GroupKind::Mamba || t.cache_mode == core::MambaCacheMode::All) {
    core::fail(core::Status::InvalidArgument,
               a + ": tokens per block are needed for this group (attention kinds, Mamba \"all\" mode): set "
                   "local_tokens_per_block and remote_tokens_per_block with PDKV_TRIM_FIELD_TOKENS_PER_BLOCK");
  }
  t.remote_computed_tokens = in->remote_computed_tokens;
  t.local_hit_tokens = in->local_hit_tokens;
  t.sliding_window = in->sliding_window;
  if (in->field_mask & PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK) t.local_first_block = in->local_first_block;
  t.remote_first_block = in->remote_first_block;
  if (in->field_mask & PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID) {
    t.local_kernel_blocks_per_id = kernel_blocks_per_id(in->local_kernel_blocks_per_id, (a + ".local_kernel_blocks_per_id").c_str());
    t.remote_kernel_blocks_per_id =
        kernel_blocks_per_id(in->remote_kernel_blocks_per_id, (a + ".remote_kernel_blocks_per_id").c_str());
  }
  return t;
}

std::vector<pdkv_zero_range_t> zero_ranges_to_c(const std::vector<core::ZeroRange>& z) {
  std::vector<pdkv_zero_range_t> out;
  out.reserve(z.size());
  for (const auto& r : z) out.push_back(pdkv_zero_range_t{r.block, r.token_begin, r.token_end});
  return out;
}

}  // namespace pdkv::capi

extern "C" {

PDKV_API pdkv_status_t pdkv_group_trim_new(const pdkv_group_trim_input_t* input, pdkv_group_trim_t** out,
                                           pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(input, "input");
    require_non_null(out, "out");
    *out = nullptr;
    const core::GroupTrimInput in = pdkv::capi::trim_input_from_c(input, "input");
    auto h = std::make_unique<pdkv_group_trim>();
    h->trim = core::trim_group(in);
    for (const auto& r : h->trim.runs) {
      h->runs.push_back(pdkv_token_run_t{r.local_block, r.local_token_begin, r.remote_block, r.remote_token_begin,
                                         r.num_tokens});
    }
    for (const auto& s : h->trim.states) h->states.push_back(pdkv_state_pair_t{s.local_block, s.remote_block, s.tokens});
    h->zero = pdkv::capi::zero_ranges_to_c(h->trim.zero);
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_group_trim_summary(const pdkv_group_trim_t* trim, int32_t* kind,
                                               uint64_t* transferred_tokens, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(trim, "trim");
    if (kind == nullptr && transferred_tokens == nullptr) {
      core::fail(core::Status::NullPointer, "kind and transferred_tokens are both NULL: pass at least one");
    }
    if (kind != nullptr) *kind = static_cast<int32_t>(trim->trim.kind);
    if (transferred_tokens != nullptr) *transferred_tokens = trim->trim.transferred_tokens();
  });
}

PDKV_API pdkv_status_t pdkv_group_trim_runs(const pdkv_group_trim_t* trim, const pdkv_token_run_t** runs,
                                            size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(trim, "trim");
    require_non_null(runs, "runs");
    require_non_null(count, "count");
    *runs = trim->runs.empty() ? nullptr : trim->runs.data();
    *count = trim->runs.size();
  });
}

PDKV_API pdkv_status_t pdkv_group_trim_states(const pdkv_group_trim_t* trim, const pdkv_state_pair_t** states,
                                              size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(trim, "trim");
    require_non_null(states, "states");
    require_non_null(count, "count");
    *states = trim->states.empty() ? nullptr : trim->states.data();
    *count = trim->states.size();
  });
}

PDKV_API pdkv_status_t pdkv_group_trim_zero_ranges(const pdkv_group_trim_t* trim, const pdkv_zero_range_t** ranges,
                                                   size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(trim, "trim");
    require_non_null(ranges, "ranges");
    require_non_null(count, "count");
    *ranges = trim->zero.empty() ? nullptr : trim->zero.data();
    *count = trim->zero.size();
  });
}

PDKV_API pdkv_status_t pdkv_group_trim_unfilled_states(const pdkv_group_trim_t* trim, const uint64_t** blocks,
                                                       size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(trim, "trim");
    require_non_null(blocks, "blocks");
    require_non_null(count, "count");
    const auto& u = trim->trim.unfilled_states;
    *blocks = u.empty() ? nullptr : u.data();
    *count = u.size();
  });
}

PDKV_API void pdkv_group_trim_free(pdkv_group_trim_t* trim) { delete trim; }

PDKV_API pdkv_status_t pdkv_sliding_window_blocks_to_keep(uint64_t window, uint64_t block_size, uint64_t* out,
                                                          pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = core::sliding_window_blocks_to_keep(window, block_size);
  });
}

PDKV_API pdkv_status_t pdkv_clip_exchange_blocks(const uint64_t* ids, size_t count,
                                                 const pdkv_exchange_clip_params_t* params, pdkv_u64_list_t** out,
                                                 pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(params, "params");
    require_non_null(out, "out");
    *out = nullptr;
    const pdkv_exchange_clip_params_t copy = pdkv::capi::read_options(
        *params, pdkv::capi::kExchangeClipParamsMinSize, "pdkv_exchange_clip_params_t", 0);
    params = &copy;
    const auto v = pdkv::capi::u64_vector(ids, count, "ids");
    core::ExchangeClipParams p;
    p.kind = pdkv::capi::group_kind_from_c(params->kind, "pdkv_exchange_clip_params_t.kind");
    p.hma_enabled = pdkv::capi::flag_from_c(params->hma_enabled, "pdkv_exchange_clip_params_t.hma_enabled");
    p.sliding_window = params->sliding_window;
    p.block_size = params->block_size;
    p.cache_mode = pdkv::capi::cache_mode_from_c(params->cache_mode, "pdkv_exchange_clip_params_t.cache_mode");
    p.num_speculative_blocks = params->num_speculative_blocks;
    auto list = std::make_unique<pdkv_u64_list>();
    list->items = core::clip_exchange_blocks(v, p);
    *out = list.release();
  });
}

PDKV_API pdkv_status_t pdkv_zero_range_list_items(const pdkv_zero_range_list_t* list, const pdkv_zero_range_t** items,
                                                  size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(items, "items");
    require_non_null(count, "count");
    *items = list->items.empty() ? nullptr : list->items.data();
    *count = list->items.size();
  });
}

PDKV_API void pdkv_zero_range_list_free(pdkv_zero_range_list_t* list) { delete list; }

PDKV_API pdkv_status_t pdkv_receive_zero_ranges(const uint64_t* local_blocks, size_t count, uint64_t tokens_per_block,
                                                uint64_t block_size_ratio, uint64_t remote_kernel_len,
                                                pdkv_zero_range_list_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    const auto v = pdkv::capi::u64_vector(local_blocks, count, "local_blocks");
    *out = to_zero_list(core::receive_zero_ranges(v, tokens_per_block, block_size_ratio, remote_kernel_len));
  });
}

PDKV_API pdkv_status_t pdkv_uncovered_token_ranges(const uint64_t* local_blocks, size_t count,
                                                   uint64_t first_block_index, uint64_t tokens_per_block,
                                                   uint64_t held_tokens, const pdkv_token_interval_t* written,
                                                   size_t num_written, pdkv_zero_range_list_t** out,
                                                   pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    const auto v = pdkv::capi::u64_vector(local_blocks, count, "local_blocks");
    if (num_written > 0) require_non_null(written, "written");
    std::vector<core::TokenInterval> w;
    w.reserve(num_written);
    for (size_t i = 0; i < num_written; ++i) w.push_back(core::TokenInterval{written[i].begin, written[i].end});
    *out = to_zero_list(core::uncovered_token_ranges(v, first_block_index, tokens_per_block, held_tokens, std::move(w)));
  });
}

}  // extern "C"
