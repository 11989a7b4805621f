// Value lists, owned bytes / strings, and the block-id vocabulary (core/block_ids.hpp,
// core/mamba_descriptors.hpp mamba_descriptor_ids). Also defines the shared C <-> core helpers of
// plan_handles.hpp that are not specific to one area.
#include <memory>
#include <string>
#include <vector>

#include "boundary.hpp"
#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/mamba_descriptors.hpp"
#include "plan_handles.hpp"
#include "struct_sizes.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

namespace pdkv::capi {

std::vector<uint64_t> u64_vector(const uint64_t* ptr, size_t count, const char* arg) {
  if (count > 0) require_non_null(ptr, arg);
  if (count == 0) return {};
  return std::vector<uint64_t>(ptr, ptr + count);
}

core::GroupKind group_kind_from_c(int32_t kind, const char* field) {
  if (kind < PDKV_GROUP_ATTENTION || kind > PDKV_GROUP_MAMBA) {
    core::fail(core::Status::InvalidArgument,
               std::string(field) + " = " + std::to_string(kind) +
                   " is not a pdkv_group_kind_t (0 attention, 1 sliding_window, 2 mamba)");
  }
  return static_cast<core::GroupKind>(kind);
}

core::MambaCacheMode cache_mode_from_c(int32_t mode, const char* field) {
  if (mode < PDKV_MAMBA_CACHE_NONE || mode > PDKV_MAMBA_CACHE_ALL) {
    core::fail(core::Status::InvalidArgument,
               std::string(field) + " = " + std::to_string(mode) +
                   " is not a pdkv_mamba_cache_mode_t (0 none, 1 align, 2 all)");
  }
  return static_cast<core::MambaCacheMode>(mode);
}

bool flag_from_c(uint8_t v, const char* field) {
  if (v > 1) {
    core::fail(core::Status::InvalidArgument,
               std::string(field) + " = " + std::to_string(v) + " is not a boolean: pass 0 or 1");
  }
  return v == 1;
}

uint64_t kernel_blocks_per_id(uint64_t v, const char* field) {
  if (v == 0) {
    core::fail(core::Status::InvalidArgument,
               std::string(field) + " = 0 with PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID set: each id stands for at least "
                                    "one kernel block (leave the bit unset for kernel ids)");
  }
  return v;
}

uint64_t tokens_per_block(uint64_t v, const char* field) {
  if (v == 0) {
    core::fail(core::Status::InvalidArgument,
               std::string(field) + " = 0 with PDKV_TRIM_FIELD_TOKENS_PER_BLOCK set: a block holds at least one token "
                                    "(leave the bit unset to take it from the metadata in a plan)");
  }
  return v;
}

void copy_text(const std::string& text, char* buf, size_t capacity, size_t* out_len, const char* what) {
  *out_len = text.size();
  if (text.size() >= capacity) {
    core::fail(core::Status::BufferTooSmall, std::string(what) + " needs " + std::to_string(text.size() + 1) +
                                                 " bytes including the NUL but the buffer holds " +
                                                 std::to_string(capacity) + ": pass a capacity of at least " +
                                                 std::to_string(text.size() + 1));
  }
  require_non_null(buf, "buf");
  text.copy(buf, text.size());
  buf[text.size()] = '\0';
}

}  // namespace pdkv::capi

namespace {

pdkv_u64_list_t* to_list(std::vector<uint64_t> v) {
  auto list = std::make_unique<pdkv_u64_list>();
  list->items = std::move(v);
  return list.release();
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_u64_list_items(const pdkv_u64_list_t* list, const uint64_t** items, size_t* count,
                                           pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(items, "items");
    require_non_null(count, "count");
    *items = list->items.empty() ? nullptr : list->items.data();
    *count = list->items.size();
  });
}

PDKV_API void pdkv_u64_list_free(pdkv_u64_list_t* list) { delete list; }

PDKV_API pdkv_status_t pdkv_u32_list_items(const pdkv_u32_list_t* list, const uint32_t** items, size_t* count,
                                           pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(items, "items");
    require_non_null(count, "count");
    *items = list->items.empty() ? nullptr : list->items.data();
    *count = list->items.size();
  });
}

PDKV_API void pdkv_u32_list_free(pdkv_u32_list_t* list) { delete list; }

PDKV_API pdkv_status_t pdkv_byte_range_list_items(const pdkv_byte_range_list_t* list, const pdkv_byte_range_t** items,
                                                  size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(items, "items");
    require_non_null(count, "count");
    *items = list->items.empty() ? nullptr : list->items.data();
    *count = list->items.size();
  });
}

PDKV_API void pdkv_byte_range_list_free(pdkv_byte_range_list_t* list) { delete list; }

PDKV_API pdkv_status_t pdkv_stage_pair_list_items(const pdkv_stage_pair_list_t* list, const pdkv_stage_pair_t** items,
                                                  size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(items, "items");
    require_non_null(count, "count");
    *items = list->items.empty() ? nullptr : list->items.data();
    *count = list->items.size();
  });
}

PDKV_API void pdkv_stage_pair_list_free(pdkv_stage_pair_list_t* list) { delete list; }

PDKV_API pdkv_status_t pdkv_bytes_data(const pdkv_bytes_t* bytes, const uint8_t** data, size_t* len,
                                       pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(bytes, "bytes");
    require_non_null(data, "data");
    require_non_null(len, "len");
    *data = bytes->data.empty() ? nullptr : bytes->data.data();
    *len = bytes->data.size();
  });
}

PDKV_API void pdkv_bytes_free(pdkv_bytes_t* bytes) { delete bytes; }

PDKV_API pdkv_status_t pdkv_string_text(const pdkv_string_t* string, const char** text, size_t* len,
                                        pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(string, "string");
    require_non_null(text, "text");
    *text = string->text.c_str();
    if (len != nullptr) *len = string->text.size();
  });
}

PDKV_API void pdkv_string_free(pdkv_string_t* string) { delete string; }

PDKV_API const char* pdkv_group_kind_name(int32_t kind) {
  if (kind < PDKV_GROUP_ATTENTION || kind > PDKV_GROUP_MAMBA) return "unknown";
  return core::group_kind_name(static_cast<core::GroupKind>(kind));
}

PDKV_API pdkv_status_t pdkv_logical_to_kernel_block_ids(const uint64_t* logical, size_t count, int32_t kind,
                                                        uint64_t blocks_per_logical, pdkv_u64_list_t** out,
                                                        pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    const auto ids = pdkv::capi::u64_vector(logical, count, "logical");
    const auto k = pdkv::capi::group_kind_from_c(kind, "kind");
    *out = to_list(core::logical_to_kernel_block_ids(ids, k, blocks_per_logical));
  });
}

PDKV_API pdkv_status_t pdkv_map_block_ids_for_block_size_ratio(const uint64_t* local, size_t count, int32_t kind,
                                                               uint64_t block_size_ratio, uint64_t remote_len,
                                                               pdkv_u64_list_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    const auto ids = pdkv::capi::u64_vector(local, count, "local");
    const auto k = pdkv::capi::group_kind_from_c(kind, "kind");
    *out = to_list(core::map_block_ids_for_block_size_ratio(ids, k, block_size_ratio, remote_len));
  });
}

PDKV_API pdkv_status_t pdkv_descriptor_ids(const pdkv_group_block_ids_t* groups, size_t n_groups,
                                           const pdkv_descriptor_layout_t* layout, pdkv_u64_list_t** out,
                                           pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(layout, "layout");
    require_non_null(out, "out");
    *out = nullptr;
    const pdkv_descriptor_layout_t copy =
        pdkv::capi::read_options(*layout, pdkv::capi::kDescriptorLayoutMinSize, "pdkv_descriptor_layout_t", 0);
    layout = &copy;
    if (n_groups > 0) require_non_null(groups, "groups");
    std::vector<core::GroupBlockIds> g;
    g.reserve(n_groups);
    for (size_t i = 0; i < n_groups; ++i) {
      const std::string prefix = "groups[" + std::to_string(i) + "]";
      core::GroupBlockIds one;
      one.kind = pdkv::capi::group_kind_from_c(groups[i].kind, (prefix + ".kind").c_str());
      one.ids = pdkv::capi::u64_vector(groups[i].ids, groups[i].num_ids, (prefix + ".ids").c_str());
      g.push_back(std::move(one));
    }
    core::DescriptorLayout l;
    l.num_blocks = layout->num_blocks;
    l.block_size_ratio = layout->block_size_ratio;
    l.blocks_per_logical = layout->blocks_per_logical;
    l.num_attention_regions = layout->num_attention_regions;
    l.num_mamba_regions = layout->num_mamba_regions;
    *out = to_list(core::descriptor_ids(g, l));
  });
}

PDKV_API pdkv_status_t pdkv_mamba_descriptor_ids(const uint64_t* logical_block_ids, size_t count,
                                                 uint64_t num_logical_blocks, uint64_t num_regions,
                                                 uint64_t descs_per_region, uint64_t first_id, pdkv_u64_list_t** out,
                                                 pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    const auto ids = pdkv::capi::u64_vector(logical_block_ids, count, "logical_block_ids");
    *out = to_list(core::mamba_descriptor_ids(ids, num_logical_blocks, num_regions, descs_per_region, first_id));
  });
}

}  // extern "C"
