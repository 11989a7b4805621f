// C API tests: the oldest accepted struct_size of every input / output struct is the struct's
// size as published in pdkv 2.0 (the header's growth rule: "the first published size of every
// struct is its size in pdkv 2.0"), pinned as the literal LP64 byte count here, independent of
// sizeof(the struct as compiled now). Every struct is passed to a function with exactly that size
// (accepted), one byte less and one field (8 bytes) less (STRUCT_SIZE naming the type and the
// value), so a minimum that drifts when a struct grows (sizeof(current) used as the minimum)
// fails here as soon as the struct has grown. Only built for LP64, where the 2.0 byte counts are
// known.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "capi_helpers.hpp"

#if UINTPTR_MAX == UINT64_MAX

using Catch::Matchers::Contains;

namespace {

struct MetadataDeleter { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct ContextDeleter { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct PlanDeleter { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
struct ReportDeleter { void operator()(pdkv_handshake_report_t* p) const { pdkv_handshake_report_free(p); } };
using MetadataPtr = std::unique_ptr<pdkv_engine_metadata_t, MetadataDeleter>;
using ContextPtr = std::unique_ptr<pdkv_plan_context_t, ContextDeleter>;
using PlanPtr = std::unique_ptr<pdkv_transfer_plan_t, PlanDeleter>;
using ReportPtr = std::unique_ptr<pdkv_handshake_report_t, ReportDeleter>;

// Calls `call` with struct_size = v20_size (must succeed), v20_size - 1 (STRUCT_SIZE naming the
// type) and the current size + 1 (STRUCT_SIZE). `call(size, err)` sets the struct's struct_size
// to size, makes the call, frees what it returned and returns the status.
void check_oldest_size(const char* type, size_t v20_size, size_t current_size,
                       const std::function<pdkv_status_t(size_t, pdkv_error_t**)>& call) {
  INFO(type);
  REQUIRE(current_size >= v20_size);
  const CallResult at_min = capture([&](pdkv_error_t** e) { return call(v20_size, e); });
  INFO(at_min.message);
  CHECK(at_min.status == PDKV_OK);
  const CallResult below = capture([&](pdkv_error_t** e) { return call(v20_size - 1, e); });
  CHECK(below.status == PDKV_ERR_STRUCT_SIZE);
  CHECK_THAT(below.message, Contains(type) && Contains(std::to_string(v20_size - 1)));
  // A whole field below the 2.0 size (a multiple of alignof(size_t)): refused, naming the range.
  const CallResult field_below = capture([&](pdkv_error_t** e) { return call(v20_size - 8, e); });
  CHECK(field_below.status == PDKV_ERR_STRUCT_SIZE);
  CHECK_THAT(field_below.message, Contains(std::string(type) + ".struct_size = " + std::to_string(v20_size - 8)) &&
                                      Contains("[" + std::to_string(v20_size) + ", "));
  CHECK(capture([&](pdkv_error_t** e) { return call(current_size + 1, e); }).status == PDKV_ERR_STRUCT_SIZE);
  if (current_size >= v20_size + 8) {
    // Between two published sizes but ending inside a field: refused, never read half-torn.
    const CallResult torn = capture([&](pdkv_error_t** e) { return call(v20_size + 4, e); });
    CHECK(torn.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(torn.message, Contains(type) && Contains(std::to_string(v20_size + 4)) && Contains("multiple of 8"));
    // A size on a field boundary in between is accepted (the later fields read as zero / unset).
    CHECK(capture([&](pdkv_error_t** e) { return call(v20_size + 8, e); }).status == PDKV_OK);
  }
}

// A small pure-attention model: 8 KV heads of 64, bf16, 4 layers.
ModelPtr tiny_attention_model() {
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  d.name = "tiny-attention";
  d.num_kv_heads = 8;
  d.head_size = 64;
  d.head_size_v = 64;
  d.dtype_bytes = 2;
  d.layer_pattern = "****";
  return make_model(d);
}

MetadataPtr metadata(const pdkv_model_t* m, uint32_t tp, uint32_t rank, const char* id, uint64_t base) {
  const pdkv_engine_config_t c = engine(tp);
  pdkv_engine_layout_t l;
  REQUIRE_OK(pdkv_engine_layout_init(&l, err));
  l.engine_id = id;
  l.tp_rank = rank;
  l.num_regions = 2;
  l.base = base;
  pdkv_engine_metadata_t* md = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_from_model(m, &c, &l, &md, err));
  return MetadataPtr(md);
}

}  // namespace

TEST_CASE("struct_size: the 2.0 size of every model / topology / geometry struct is accepted", "[capi][abi]") {
  const ModelPtr nano = make_model(nemotron3_nano_desc());

  check_oldest_size("pdkv_model_desc_t", 120, sizeof(pdkv_model_desc_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_model_desc_t d = nemotron3_nano_desc();
    d.struct_size = size;
    pdkv_model_t* m = nullptr;
    const pdkv_status_t st = pdkv_model_new(&d, &m, e);
    pdkv_model_free(m);
    return st;
  });
  check_oldest_size("pdkv_model_desc_t", 120, sizeof(pdkv_model_desc_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_model_desc_t out{};
    out.struct_size = size;
    return pdkv_model_describe(nano.get(), &out, e);
  });

  pdkv_tp_mapping_params_t params{};
  params.local_tp_size = 2;
  params.remote_tp_size = 4;
  params.total_kv_heads = 2;
  params.has_mamba = 1;
  check_oldest_size("pdkv_tp_mapping_params_t", 40, sizeof(pdkv_tp_mapping_params_t),
                    [&](size_t size, pdkv_error_t** e) {
                      params.struct_size = size;
                      pdkv_tp_mapping_t* m = nullptr;
                      const pdkv_status_t st = pdkv_tp_mapping_new(&params, &m, e);
                      pdkv_tp_mapping_free(m);
                      return st;
                    });
  params.struct_size = sizeof params;
  pdkv_tp_mapping_t* mapping_raw = nullptr;
  REQUIRE_OK(pdkv_tp_mapping_new(&params, &mapping_raw, err));
  const TpMappingPtr mapping(mapping_raw);
  check_oldest_size("pdkv_tp_mapping_info_t", 40, sizeof(pdkv_tp_mapping_info_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_tp_mapping_info_t out{};
    out.struct_size = size;
    return pdkv_tp_mapping_get_info(mapping.get(), &out, e);
  });

  check_oldest_size("pdkv_engine_config_t", 104, sizeof(pdkv_engine_config_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_engine_config_t c = engine(2);
    c.struct_size = size;
    pdkv_geometry_t* g = nullptr;
    const pdkv_status_t st = pdkv_geometry_new(nano.get(), &c, &g, e);
    pdkv_geometry_free(g);
    return st;
  });
  const GeometryPtr g = make_geometry(nano.get(), engine(2));
  check_oldest_size("pdkv_geometry_info_t", 224, sizeof(pdkv_geometry_info_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_geometry_info_t out{};
    out.struct_size = size;
    return pdkv_geometry_get_info(g.get(), &out, e);
  });
  check_oldest_size("pdkv_conv_projection_t", 56, sizeof(pdkv_conv_projection_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_conv_projection_t out{};
    out.struct_size = size;
    return pdkv_geometry_projection(g.get(), 0, &out, e);
  });
}

TEST_CASE("struct_size: the 2.0 size of every block-id / trimming / scheduler struct is accepted", "[capi][abi]") {
  const uint64_t kernel_ids[2] = {0, 3};
  pdkv_group_block_ids_t group{PDKV_GROUP_ATTENTION, kernel_ids, 2};
  check_oldest_size("pdkv_descriptor_layout_t", 56, sizeof(pdkv_descriptor_layout_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_descriptor_layout_t layout{};
                      layout.struct_size = size;
                      layout.num_blocks = 4;
                      layout.block_size_ratio = 1;
                      layout.blocks_per_logical = 1;
                      layout.num_attention_regions = 2;
                      pdkv_u64_list_t* out = nullptr;
                      const pdkv_status_t st = pdkv_descriptor_ids(&group, 1, &layout, &out, e);
                      pdkv_u64_list_free(out);
                      return st;
                    });

  const uint64_t ids[3] = {1, 2, 3};
  check_oldest_size("pdkv_exchange_clip_params_t", 56, sizeof(pdkv_exchange_clip_params_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_exchange_clip_params_t p{};
                      p.struct_size = size;
                      p.kind = PDKV_GROUP_SLIDING_WINDOW;
                      p.hma_enabled = 1;
                      p.sliding_window = 16;
                      p.block_size = 16;
                      pdkv_u64_list_t* out = nullptr;
                      const pdkv_status_t st = pdkv_clip_exchange_blocks(ids, 3, &p, &out, e);
                      pdkv_u64_list_free(out);
                      return st;
                    });

  const uint64_t local[2] = {5, 6};
  const uint64_t remote[2] = {7, 8};
  check_oldest_size("pdkv_group_trim_input_t", 128, sizeof(pdkv_group_trim_input_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_group_trim_input_t in{};
                      in.struct_size = size;
                      in.field_mask = PDKV_TRIM_FIELD_TOKENS_PER_BLOCK;
                      in.kind = PDKV_GROUP_ATTENTION;
                      in.local_blocks = local;
                      in.num_local_blocks = 2;
                      in.remote_blocks = remote;
                      in.num_remote_blocks = 2;
                      in.local_tokens_per_block = 16;
                      in.remote_tokens_per_block = 16;
                      in.remote_computed_tokens = 20;
                      pdkv_group_trim_t* out = nullptr;
                      const pdkv_status_t st = pdkv_group_trim_new(&in, &out, e);
                      pdkv_group_trim_free(out);
                      return st;
                    });

  check_oldest_size("pdkv_aligned_split_v0604_input_t", 80, sizeof(pdkv_aligned_split_v0604_input_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_aligned_split_v0604_input_t in{};
                      in.struct_size = size;
                      in.num_new_tokens = 100;
                      in.num_prompt_tokens = 100;
                      in.num_tokens = 100;
                      in.block_size = 16;
                      uint64_t out = 0;
                      return pdkv_mamba_aligned_split_v0604(&in, &out, e);
                    });
  check_oldest_size("pdkv_aligned_split_input_t", 112, sizeof(pdkv_aligned_split_input_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_aligned_split_input_t in{};
                      in.struct_size = size;
                      in.num_new_tokens = 100;
                      in.num_prompt_tokens = 100;
                      in.num_tokens = 100;
                      in.block_size = 16;
                      uint64_t out = 0;
                      return pdkv_mamba_aligned_split(&in, &out, e);
                    });

  // pdkv_remote_decode_prefill_t is both the input and the output of the call.
  check_oldest_size("pdkv_remote_decode_prefill_t", 40, sizeof(pdkv_remote_decode_prefill_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_remote_decode_prefill_t in{};
                      in.struct_size = size;
                      in.num_prompt_tokens = 10;
                      in.max_tokens = 5;
                      pdkv_remote_decode_prefill_t out{};
                      out.struct_size = sizeof out;
                      return pdkv_truncate_for_remote_decode(&in, 1, &out, e);
                    });
  check_oldest_size("pdkv_remote_decode_prefill_t", 40, sizeof(pdkv_remote_decode_prefill_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_remote_decode_prefill_t in{};
                      in.struct_size = sizeof in;
                      in.num_prompt_tokens = 10;
                      in.max_tokens = 5;
                      pdkv_remote_decode_prefill_t out{};
                      out.struct_size = size;
                      return pdkv_truncate_for_remote_decode(&in, 1, &out, e);
                    });
  check_oldest_size("pdkv_remote_decode_prefill_plan_t", 32, sizeof(pdkv_remote_decode_prefill_plan_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_remote_decode_prefill_plan_t out{};
                      out.struct_size = size;
                      return pdkv_plan_remote_decode_prefill(100, 32, 16, 1, &out, e);
                    });

  const pdkv_offload_layer_t layers[1] = {{4 * 64, 64}};
  check_oldest_size("pdkv_offload_geometry_t", 24, sizeof(pdkv_offload_geometry_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_offload_geometry_t out{};
    out.struct_size = size;
    return pdkv_derive_offload_geometry(4, 16, 16, layers, 1, &out, e);
  });
}

TEST_CASE("struct_size: the 2.0 size of every metadata / handshake / plan struct is accepted", "[capi][abi]") {
  const ModelPtr m = tiny_attention_model();
  const pdkv_engine_config_t config = engine(1);
  check_oldest_size("pdkv_engine_layout_t", 96, sizeof(pdkv_engine_layout_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_engine_layout_t l;
    REQUIRE(pdkv_engine_layout_init(&l, nullptr) == PDKV_OK);
    l.struct_size = size;
    pdkv_engine_metadata_t* md = nullptr;
    const pdkv_status_t st = pdkv_engine_metadata_from_model(m.get(), &config, &l, &md, e);
    pdkv_engine_metadata_free(md);
    return st;
  });

  const MetadataPtr d = metadata(m.get(), 1, 0, "d", 1ull << 40);
  const MetadataPtr p = metadata(m.get(), 1, 0, "p", 2ull << 40);
  check_oldest_size("pdkv_engine_metadata_info_t", 144, sizeof(pdkv_engine_metadata_info_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_engine_metadata_info_t out{};
                      out.struct_size = size;
                      return pdkv_engine_metadata_get_info(d.get(), &out, e);
                    });

  // Two ranks of one engine claiming the same tp_rank: the report has an item.
  const pdkv_engine_metadata_t* ranks[2] = {p.get(), p.get()};
  pdkv_handshake_report_t* report_raw = nullptr;
  REQUIRE_OK(pdkv_handshake_validate_engine_ranks(ranks, 2, &report_raw, err));
  const ReportPtr report(report_raw);
  size_t items = 0;
  REQUIRE_OK(pdkv_handshake_report_count(report.get(), &items, err));
  REQUIRE(items > 0);
  check_oldest_size("pdkv_incompatibility_t", 64, sizeof(pdkv_incompatibility_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_incompatibility_t out{};
    out.struct_size = size;
    return pdkv_handshake_report_item(report.get(), 0, &out, e);
  });

  const pdkv_engine_metadata_t* remote[1] = {p.get()};
  check_oldest_size("pdkv_plan_context_params_t", 72, sizeof(pdkv_plan_context_params_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_plan_context_params_t c{};
                      c.struct_size = size;
                      c.local = d.get();
                      c.remote = remote;
                      c.num_remote = 1;
                      pdkv_plan_context_t* ctx = nullptr;
                      const pdkv_status_t st = pdkv_plan_context_new(&c, &ctx, e);
                      pdkv_plan_context_free(ctx);
                      return st;
                    });
  pdkv_plan_context_params_t cp{};
  cp.struct_size = sizeof cp;
  cp.local = d.get();
  cp.remote = remote;
  cp.num_remote = 1;
  pdkv_plan_context_t* ctx_raw = nullptr;
  REQUIRE_OK(pdkv_plan_context_new(&cp, &ctx_raw, err));
  const ContextPtr ctx(ctx_raw);

  // One attention group: D blocks 1, 2 receive P blocks 3, 4 (20 computed tokens, tokens per
  // block from the metadata).
  const uint64_t local[2] = {1, 2};
  const uint64_t remote_blocks[2] = {3, 4};
  pdkv_group_trim_input_t trim{};
  trim.struct_size = sizeof trim;
  trim.kind = PDKV_GROUP_ATTENTION;
  trim.local_blocks = local;
  trim.num_local_blocks = 2;
  trim.remote_blocks = remote_blocks;
  trim.num_remote_blocks = 2;
  trim.remote_computed_tokens = 20;
  // The groups array's stride is its struct_size: lay two groups out at exactly that stride.
  check_oldest_size("pdkv_plan_group_t", 56, sizeof(pdkv_plan_group_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_plan_group_t one{};
    one.struct_size = size;
    one.trim = &trim;
    std::vector<uint32_t> region_lists[2] = {{0}, {1}};
    std::vector<unsigned char> buf(2 * sizeof(pdkv_plan_group_t) + 16, 0);
    for (size_t i = 0; i < 2; ++i) {
      one.regions = region_lists[i].data();
      one.num_regions = 1;
      std::memcpy(buf.data() + i * size, &one, std::min(size, sizeof one));
    }
    pdkv_transfer_plan_t* plan = nullptr;
    const pdkv_status_t st = pdkv_transfer_plan_compile(
        ctx.get(), reinterpret_cast<const pdkv_plan_group_t*>(buf.data()), 2, &plan, e);
    pdkv_transfer_plan_free(plan);
    return st;
  });

  pdkv_plan_group_t group{};
  group.struct_size = sizeof group;
  group.trim = &trim;
  pdkv_transfer_plan_t* plan_raw = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_compile(ctx.get(), &group, 1, &plan_raw, err));
  const PlanPtr plan(plan_raw);
  check_oldest_size("pdkv_transfer_plan_info_t", 192, sizeof(pdkv_transfer_plan_info_t),
                    [&](size_t size, pdkv_error_t** e) {
                      pdkv_transfer_plan_info_t out{};
                      out.struct_size = size;
                      return pdkv_transfer_plan_get_info(plan.get(), &out, e);
                    });
  check_oldest_size("pdkv_plan_group_zero_t", 96, sizeof(pdkv_plan_group_zero_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_plan_group_zero_t out{};
    out.struct_size = size;
    return pdkv_transfer_plan_group_zero(plan.get(), 0, &out, e);
  });
}

TEST_CASE("struct_size: the 2.0 size of every engine-level struct is accepted", "[capi][abi]") {
  const ModelPtr m = tiny_attention_model();
  const pdkv_engine_config_t config = engine(1);
  auto new_engine = [&](size_t size, const char* id, pdkv_engine_t** out, pdkv_error_t** e) {
    pdkv_engine_options_t o;
    REQUIRE(pdkv_engine_options_init(&o, nullptr) == PDKV_OK);
    o.struct_size = size;
    o.model = m.get();
    o.config = &config;
    o.engine_id = id;
    return pdkv_engine_new(&o, out, e);
  };
  check_oldest_size("pdkv_engine_options_t", 88, sizeof(pdkv_engine_options_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_engine_t* out = nullptr;
    const pdkv_status_t st = new_engine(size, "d", &out, e);
    pdkv_engine_free(out);
    return st;
  });
  pdkv_engine_t* d_raw = nullptr;
  pdkv_engine_t* p_raw = nullptr;
  REQUIRE_OK(new_engine(sizeof(pdkv_engine_options_t), "d", &d_raw, err));
  const std::unique_ptr<pdkv_engine_t, void (*)(pdkv_engine_t*)> d(d_raw, pdkv_engine_free);
  REQUIRE_OK(new_engine(sizeof(pdkv_engine_options_t), "p", &p_raw, err));
  const std::unique_ptr<pdkv_engine_t, void (*)(pdkv_engine_t*)> p(p_raw, pdkv_engine_free);
  check_oldest_size("pdkv_engine_info_t", 80, sizeof(pdkv_engine_info_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_engine_info_t out{};
    out.struct_size = size;
    return pdkv_engine_get_info(d.get(), &out, e);
  });
  check_oldest_size("pdkv_engine_group_t", 48, sizeof(pdkv_engine_group_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_engine_group_t out{};
    out.struct_size = size;
    return pdkv_engine_group(d.get(), 0, &out, e);
  });
  pdkv_engine_metadata_t* p_md_raw = nullptr;
  REQUIRE_OK(pdkv_engine_get_metadata(p.get(), &p_md_raw, err));
  const MetadataPtr p_md(p_md_raw);
  const pdkv_engine_metadata_t* remote[1] = {p_md.get()};
  auto new_context = [&](size_t size, pdkv_plan_context_t** out, pdkv_error_t** e) {
    pdkv_engine_peer_t peer{};
    peer.struct_size = size;
    peer.remote = remote;
    peer.num_remote = 1;
    peer.remote_config = &config;
    return pdkv_engine_plan_context_new(d.get(), &peer, out, e);
  };
  check_oldest_size("pdkv_engine_peer_t", 48, sizeof(pdkv_engine_peer_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_plan_context_t* ctx = nullptr;
    const pdkv_status_t st = new_context(size, &ctx, e);
    pdkv_plan_context_free(ctx);
    return st;
  });
  pdkv_plan_context_t* ctx_raw = nullptr;
  REQUIRE_OK(new_context(sizeof(pdkv_engine_peer_t), &ctx_raw, err));
  const ContextPtr ctx(ctx_raw);
  pdkv_engine_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE_OK(pdkv_engine_get_info(d.get(), &info, err));
  // One block per group on each side, a one-block prompt.
  const uint64_t local_ids[1] = {1};
  const uint64_t remote_ids[1] = {2};
  std::vector<pdkv_engine_request_group_t> groups(info.num_groups, {local_ids, 1, remote_ids, 1});
  check_oldest_size("pdkv_engine_request_t", 48, sizeof(pdkv_engine_request_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_engine_request_t q{};
    q.struct_size = size;
    q.groups = groups.data();
    q.num_groups = groups.size();
    q.num_prompt_tokens = info.logical_block_size;
    pdkv_transfer_plan_t* plan = nullptr;
    const pdkv_status_t st = pdkv_engine_plan_request(d.get(), ctx.get(), &q, &plan, e);
    pdkv_transfer_plan_free(plan);
    return st;
  });
}

TEST_CASE("struct_size: the 2.0 size of every agent struct is accepted", "[capi][abi]") {
  const ModelPtr m = tiny_attention_model();
  // Two ranks over real memory (the metadata's regions back to back in one buffer each).
  auto ranked = [&](const char* id, std::vector<uint8_t>& mem) {
    const MetadataPtr probe = metadata(m.get(), 1, 0, id, 1ull << 40);
    const pdkv_metadata_region_t* regions = nullptr;
    size_t count = 0;
    REQUIRE_OK(pdkv_engine_metadata_regions(probe.get(), &regions, &count, err));
    uint64_t bytes = 0;
    for (size_t r = 0; r < count; ++r) bytes += regions[r].block_len * regions[r].num_blocks;
    mem.assign(bytes, 0x5A);
    return metadata(m.get(), 1, 0, id, reinterpret_cast<uint64_t>(mem.data()));
  };
  std::vector<uint8_t> d_mem, p_mem;
  const MetadataPtr d_md = ranked("d", d_mem);
  const MetadataPtr p_md = ranked("p", p_mem);
  using AgentPtr = std::unique_ptr<pdkv_agent_t, void (*)(pdkv_agent_t*)>;
  auto new_agent = [&](size_t size, const pdkv_engine_metadata_t* md, pdkv_agent_t** out, pdkv_error_t** e) {
    pdkv_agent_options_t o{};
    o.struct_size = size;
    o.metadata = md;
    return pdkv_agent_new(&o, out, e);
  };
  check_oldest_size("pdkv_agent_options_t", 80, sizeof(pdkv_agent_options_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_agent_t* a = nullptr;
    const pdkv_status_t st = new_agent(size, d_md.get(), &a, e);
    pdkv_agent_free(a);
    return st;
  });
  pdkv_agent_t* raw = nullptr;
  REQUIRE_OK(new_agent(sizeof(pdkv_agent_options_t), d_md.get(), &raw, err));
  const AgentPtr d(raw, pdkv_agent_free);
  REQUIRE_OK(new_agent(sizeof(pdkv_agent_options_t), p_md.get(), &raw, err));
  const AgentPtr p(raw, pdkv_agent_free);
  check_oldest_size("pdkv_agent_info_t", 64, sizeof(pdkv_agent_info_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_agent_info_t out{};
    out.struct_size = size;
    return pdkv_agent_get_info(d.get(), &out, e);
  });
  auto register_region = [&](pdkv_agent_t* a, const pdkv_engine_metadata_t* md, uint32_t r, size_t size,
                             pdkv_memory_t** out, pdkv_error_t** e) {
    const pdkv_metadata_region_t* regions = nullptr;
    size_t count = 0;
    REQUIRE_OK(pdkv_engine_metadata_regions(md, &regions, &count, err));
    pdkv_memory_desc_t desc{};
    desc.struct_size = size;
    desc.region = r;
    desc.address = regions[r].base;
    desc.length = regions[r].block_len * regions[r].num_blocks;
    return pdkv_agent_register_memory(a, &desc, out, e);
  };
  check_oldest_size("pdkv_memory_desc_t", 48, sizeof(pdkv_memory_desc_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_memory_t* mem = nullptr;
    const pdkv_status_t st = register_region(d.get(), d_md.get(), 0, size, &mem, e);
    if (mem != nullptr) REQUIRE_OK(pdkv_memory_deregister(mem, err));
    pdkv_memory_free(mem);
    return st;
  });
  std::vector<std::unique_ptr<pdkv_memory_t, void (*)(pdkv_memory_t*)>> regs;
  for (uint32_t r = 0; r < 2; ++r) {
    for (auto side : {std::pair{d.get(), d_md.get()}, std::pair{p.get(), p_md.get()}}) {
      pdkv_memory_t* mem = nullptr;  // (side.first/second: clang 14 cannot capture a structured binding)
      REQUIRE_OK(register_region(side.first, side.second, r, sizeof(pdkv_memory_desc_t), &mem, err));
      regs.emplace_back(mem, pdkv_memory_free);
    }
  }
  pdkv_agent_info_t pi{};
  pi.struct_size = sizeof pi;
  REQUIRE_OK(pdkv_agent_get_info(p.get(), &pi, err));
  const std::string address = pi.listen_address;
  auto connect = [&](size_t size, pdkv_peer_t** out, pdkv_error_t** e) {
    pdkv_connect_options_t c{};
    c.struct_size = size;
    c.address = address.c_str();
    return pdkv_agent_connect(d.get(), &c, out, e);
  };
  check_oldest_size("pdkv_connect_options_t", 32, sizeof(pdkv_connect_options_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_peer_t* peer = nullptr;
    const pdkv_status_t st = connect(size, &peer, e);
    pdkv_peer_free(peer);
    return st;
  });
  pdkv_peer_t* peer_raw = nullptr;
  REQUIRE_OK(connect(sizeof(pdkv_connect_options_t), &peer_raw, err));
  const std::unique_ptr<pdkv_peer_t, void (*)(pdkv_peer_t*)> peer(peer_raw, pdkv_peer_free);
  check_oldest_size("pdkv_peer_info_t", 112, sizeof(pdkv_peer_info_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_peer_info_t out{};
    out.struct_size = size;
    return pdkv_peer_get_info(peer.get(), &out, e);
  });
  // D reads P's blocks 3, 4 into its blocks 1, 2.
  const pdkv_engine_metadata_t* remote[1] = {p_md.get()};
  pdkv_plan_context_params_t cp{};
  cp.struct_size = sizeof cp;
  cp.local = d_md.get();
  cp.remote = remote;
  cp.num_remote = 1;
  pdkv_plan_context_t* ctx_raw = nullptr;
  REQUIRE_OK(pdkv_plan_context_new(&cp, &ctx_raw, err));
  const ContextPtr ctx(ctx_raw);
  const uint64_t local[2] = {1, 2};
  const uint64_t remote_blocks[2] = {3, 4};
  pdkv_group_trim_input_t trim{};
  trim.struct_size = sizeof trim;
  trim.kind = PDKV_GROUP_ATTENTION;
  trim.local_blocks = local;
  trim.num_local_blocks = 2;
  trim.remote_blocks = remote_blocks;
  trim.num_remote_blocks = 2;
  trim.remote_computed_tokens = 20;
  pdkv_plan_group_t g{};
  g.struct_size = sizeof g;
  g.trim = &trim;
  pdkv_transfer_plan_t* plan_raw = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_compile(ctx.get(), &g, 1, &plan_raw, err));
  const PlanPtr plan(plan_raw);
  auto post = [&](size_t size, pdkv_transfer_t** out, pdkv_error_t** e) {
    pdkv_transfer_params_t t{};
    t.struct_size = size;
    t.op = PDKV_TRANSFER_READ;
    t.plan = plan.get();
    t.peer_engine_id = "p";
    t.request_id = "struct-size";
    return pdkv_agent_post(d.get(), &t, out, e);
  };
  check_oldest_size("pdkv_transfer_params_t", 64, sizeof(pdkv_transfer_params_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_transfer_t* t = nullptr;
    const pdkv_status_t st = post(size, &t, e);
    pdkv_transfer_free(t);
    return st;
  });
  pdkv_transfer_t* t_raw = nullptr;
  REQUIRE_OK(post(sizeof(pdkv_transfer_params_t), &t_raw, err));
  const std::unique_ptr<pdkv_transfer_t, void (*)(pdkv_transfer_t*)> transfer(t_raw, pdkv_transfer_free);
  check_oldest_size("pdkv_transfer_info_t", 64, sizeof(pdkv_transfer_info_t), [&](size_t size, pdkv_error_t** e) {
    pdkv_transfer_info_t out{};
    out.struct_size = size;
    return pdkv_transfer_get_info(transfer.get(), &out, e);
  });
}

TEST_CASE("struct_size: an output struct of the 2.0 size gets exactly that many bytes", "[capi][abi]") {
  // The library writes only the caller's prefix: bytes past struct_size stay untouched.
  const ModelPtr m = make_model(nemotron3_nano_desc());
  const GeometryPtr g = make_geometry(m.get(), engine(2));
  alignas(pdkv_geometry_info_t) unsigned char buf[sizeof(pdkv_geometry_info_t) + 64];
  std::memset(buf, 0xA5, sizeof buf);
  const size_t v20 = 224;
  std::memcpy(buf, &v20, sizeof v20);
  REQUIRE_OK(pdkv_geometry_get_info(g.get(), reinterpret_cast<pdkv_geometry_info_t*>(buf), err));
  for (size_t i = v20; i < sizeof buf; ++i) {
    INFO("byte " << i);
    REQUIRE(buf[i] == 0xA5);
  }
  pdkv_geometry_info_t info{};
  std::memcpy(&info, buf, v20);
  CHECK(info.tp_size == 2);
  CHECK(info.num_log_lines > 0);  // the last 2.0 field is filled
}

#endif  // LP64
