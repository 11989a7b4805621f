// C API tests: block ids (logical -> kernel, block-size ratio, descriptor ids incl. Mamba),
// exchange clipping, receive zero ranges, prefix trimming, the scheduler helpers and the offload
// geometry. Worked numbers are those of the core tests / docs/semantics.md; every error path is
// checked for its status and message.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;
using V = std::vector<uint64_t>;

namespace {

struct U64ListDeleter { void operator()(pdkv_u64_list_t* p) const { pdkv_u64_list_free(p); } };
struct ZeroListDeleter { void operator()(pdkv_zero_range_list_t* p) const { pdkv_zero_range_list_free(p); } };
struct TrimDeleter { void operator()(pdkv_group_trim_t* p) const { pdkv_group_trim_free(p); } };
using U64ListPtr = std::unique_ptr<pdkv_u64_list_t, U64ListDeleter>;
using ZeroListPtr = std::unique_ptr<pdkv_zero_range_list_t, ZeroListDeleter>;
using TrimPtr = std::unique_ptr<pdkv_group_trim_t, TrimDeleter>;

V values(const pdkv_u64_list_t* list) {
  const uint64_t* items = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_u64_list_items(list, &items, &n, err));
  return n == 0 ? V{} : V(items, items + n);
}

V kernel_ids(const V& logical, int32_t kind, uint64_t ppl) {
  pdkv_u64_list_t* out = nullptr;
  REQUIRE_OK(pdkv_logical_to_kernel_block_ids(logical.data(), logical.size(), kind, ppl, &out, err));
  U64ListPtr p(out);
  return values(out);
}

std::vector<std::vector<uint64_t>> zero_of(const pdkv_zero_range_list_t* list) {
  const pdkv_zero_range_t* items = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_zero_range_list_items(list, &items, &n, err));
  std::vector<std::vector<uint64_t>> out;
  for (size_t i = 0; i < n; ++i) out.push_back({items[i].block, items[i].token_begin, items[i].token_end});
  return out;
}

pdkv_group_trim_input_t attention_input(const V& local, const V& remote, uint64_t bs, uint64_t n, uint64_t hit) {
  pdkv_group_trim_input_t in{};
  in.struct_size = sizeof in;
  in.kind = PDKV_GROUP_ATTENTION;
  in.local_blocks = local.data();
  in.num_local_blocks = local.size();
  in.remote_blocks = remote.data();
  in.num_remote_blocks = remote.size();
  in.field_mask = PDKV_TRIM_FIELD_TOKENS_PER_BLOCK;
  in.local_tokens_per_block = bs;
  in.remote_tokens_per_block = bs;
  in.remote_computed_tokens = n;
  in.local_hit_tokens = hit;
  return in;
}

}  // namespace

TEST_CASE("block ids: logical to kernel expansion uses the owner's ratio", "[capi][block_ids]") {
  CHECK(kernel_ids({0, 1, 2}, PDKV_GROUP_ATTENTION, 2) == V{0, 1, 2, 3, 4, 5});
  CHECK(kernel_ids({3, 4}, PDKV_GROUP_SLIDING_WINDOW, 2) == V{6, 7, 8, 9});
  CHECK(kernel_ids({2}, PDKV_GROUP_MAMBA, 34) == V{2});
  CHECK(kernel_ids({}, PDKV_GROUP_ATTENTION, 4).empty());
  CHECK(std::string(pdkv_group_kind_name(PDKV_GROUP_SLIDING_WINDOW)) == "sliding_window");
  CHECK(std::string(pdkv_group_kind_name(7)) == "unknown");

  const V one{1};
  pdkv_u64_list_t* out = nullptr;
  auto r = capture([&](pdkv_error_t** e) { return pdkv_logical_to_kernel_block_ids(one.data(), 1, 0, 0, &out, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK(out == nullptr);
  r = capture([&](pdkv_error_t** e) { return pdkv_logical_to_kernel_block_ids(one.data(), 1, 9, 1, &out, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("kind = 9"));
  r = capture([&](pdkv_error_t** e) { return pdkv_logical_to_kernel_block_ids(nullptr, 2, 0, 1, &out, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("logical"));
  r = capture([&](pdkv_error_t** e) { return pdkv_logical_to_kernel_block_ids(one.data(), 1, 0, 1, nullptr, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  const V huge{std::numeric_limits<uint64_t>::max() / 2};
  r = capture([&](pdkv_error_t** e) { return pdkv_logical_to_kernel_block_ids(huge.data(), 1, 0, 4, &out, e); });
  CHECK(r.status == PDKV_ERR_OVERFLOW);
  // NULL with count 0 is an empty list.
  REQUIRE_OK(pdkv_logical_to_kernel_block_ids(nullptr, 0, PDKV_GROUP_ATTENTION, 2, &out, err));
  U64ListPtr empty(out);
  const uint64_t* items = reinterpret_cast<const uint64_t*>(0x1);
  size_t n = 7;
  REQUIRE_OK(pdkv_u64_list_items(out, &items, &n, err));
  CHECK(items == nullptr);
  CHECK(n == 0);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_u64_list_items(nullptr, &items, &n, e); }).status ==
        PDKV_ERR_NULL_POINTER);
  pdkv_u64_list_free(nullptr);
}

TEST_CASE("block ids: block-size-ratio mapping clips to the remote length", "[capi][block_ids]") {
  const V local{2, 5};
  pdkv_u64_list_t* out = nullptr;
  REQUIRE_OK(pdkv_map_block_ids_for_block_size_ratio(local.data(), 2, PDKV_GROUP_ATTENTION, 4, 100, &out, err));
  U64ListPtr a(out);
  CHECK(values(out) == V{8, 9, 10, 11, 20, 21, 22, 23});
  REQUIRE_OK(pdkv_map_block_ids_for_block_size_ratio(local.data(), 2, PDKV_GROUP_ATTENTION, 4, 6, &out, err));
  U64ListPtr b(out);
  CHECK(values(out) == V{8, 9, 10, 11, 20, 21});
  REQUIRE_OK(pdkv_map_block_ids_for_block_size_ratio(local.data(), 2, PDKV_GROUP_MAMBA, 4, 1, &out, err));
  U64ListPtr c(out);
  CHECK(values(out) == V{2, 5});
  auto r = capture([&](pdkv_error_t** e) {
    return pdkv_map_block_ids_for_block_size_ratio(local.data(), 2, PDKV_GROUP_ATTENTION, 0, 6, &out, e);
  });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  r = capture([&](pdkv_error_t** e) {
    return pdkv_map_block_ids_for_block_size_ratio(nullptr, 1, PDKV_GROUP_ATTENTION, 1, 6, &out, e);
  });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("local"));
}

TEST_CASE("block ids: descriptor ids with and without Mamba groups", "[capi][block_ids]") {
  const V att{3, 5}, mam{1, 2};
  pdkv_group_block_ids_t groups[2] = {{PDKV_GROUP_ATTENTION, att.data(), att.size()},
                                      {PDKV_GROUP_MAMBA, mam.data(), mam.size()}};
  pdkv_descriptor_layout_t layout{sizeof(pdkv_descriptor_layout_t), 0, 100, 1, 1, 2, 4};
  pdkv_u64_list_t* out = nullptr;
  REQUIRE_OK(pdkv_descriptor_ids(groups, 2, &layout, &out, err));
  U64ListPtr a(out);
  CHECK(values(out) == V{3, 5, 103, 105, 201, 202, 301, 302, 401, 402, 501, 502});
  layout.num_blocks = 400;
  layout.blocks_per_logical = 4;
  REQUIRE_OK(pdkv_descriptor_ids(groups, 2, &layout, &out, err));
  U64ListPtr b(out);
  CHECK(values(out) == V{3, 5, 403, 405, 801, 802, 901, 902, 1001, 1002, 1101, 1102});

  SECTION("errors") {
    pdkv_descriptor_layout_t bad = layout;
    bad.struct_size = sizeof(pdkv_descriptor_layout_t) - 1;
    auto r = capture([&](pdkv_error_t** e) { return pdkv_descriptor_ids(groups, 2, &bad, &out, e); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_descriptor_layout_t.struct_size"));
    bad.struct_size = sizeof(pdkv_descriptor_layout_t) + 8;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_descriptor_ids(groups, 2, &bad, &out, e); }).status ==
          PDKV_ERR_STRUCT_SIZE);
    const V far{400};
    pdkv_group_block_ids_t oob[1] = {{PDKV_GROUP_ATTENTION, far.data(), 1}};
    r = capture([&](pdkv_error_t** e) { return pdkv_descriptor_ids(oob, 1, &layout, &out, e); });
    CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
    CHECK_THAT(r.message, Contains("400"));
    pdkv_group_block_ids_t null_ids[1] = {{PDKV_GROUP_ATTENTION, nullptr, 2}};
    r = capture([&](pdkv_error_t** e) { return pdkv_descriptor_ids(null_ids, 1, &layout, &out, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("groups[0].ids"));
    pdkv_group_block_ids_t bad_kind[1] = {{-1, att.data(), 2}};
    r = capture([&](pdkv_error_t** e) { return pdkv_descriptor_ids(bad_kind, 1, &layout, &out, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("groups[0].kind = -1"));
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_descriptor_ids(nullptr, 1, &layout, &out, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_descriptor_ids(groups, 2, nullptr, &out, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    bad = layout;
    bad.num_blocks = 401;  // not a multiple of ppl 4
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_descriptor_ids(groups, 2, &bad, &out, e); }).status ==
          PDKV_ERR_INVALID_ARGUMENT);
  }
}

TEST_CASE("block ids: Mamba descriptor ids are region-major after the attention ids", "[capi][block_ids]") {
  // 2 regions x 4 descriptors (x, B, C, ssm) of 10 logical blocks, first id 1000.
  const V blocks{3, 7};
  pdkv_u64_list_t* out = nullptr;
  REQUIRE_OK(pdkv_mamba_descriptor_ids(blocks.data(), 2, 10, 2, 4, 1000, &out, err));
  U64ListPtr a(out);
  V want;
  for (uint64_t r = 0; r < 2; ++r)
    for (uint64_t k = 0; k < 4; ++k)
      for (uint64_t b : blocks) want.push_back(1000 + (r * 4 + k) * 10 + b);
  CHECK(values(out) == want);
  CHECK(values(out).front() == 1003);
  CHECK(values(out).back() == 1077);
  const V far{10};
  auto r = capture([&](pdkv_error_t** e) { return pdkv_mamba_descriptor_ids(far.data(), 1, 10, 2, 4, 0, &out, e); });
  CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
  CHECK_THAT(r.message, Contains("10"));
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_mamba_descriptor_ids(nullptr, 1, 10, 2, 4, 0, &out, e); })
            .status == PDKV_ERR_NULL_POINTER);
  CHECK(capture([&](pdkv_error_t** e) {
          return pdkv_mamba_descriptor_ids(blocks.data(), 2, 10, 2, 4, 0, nullptr, e);
        }).status == PDKV_ERR_NULL_POINTER);
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  CHECK(capture([&](pdkv_error_t** e) {
          return pdkv_mamba_descriptor_ids(blocks.data(), 2, max, max, 4, max, &out, e);
        }).status == PDKV_ERR_OVERFLOW);
}

TEST_CASE("exchange clipping keeps the sliding window and the last Mamba state", "[capi][trim]") {
  uint64_t keep = 0;
  REQUIRE_OK(pdkv_sliding_window_blocks_to_keep(2048, 16, &keep, err));
  CHECK(keep == 129);
  REQUIRE_OK(pdkv_sliding_window_blocks_to_keep(2049, 16, &keep, err));
  CHECK(keep == 130);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_sliding_window_blocks_to_keep(2048, 0, &keep, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_sliding_window_blocks_to_keep(2048, 16, nullptr, e); }).status ==
        PDKV_ERR_NULL_POINTER);

  const V ids{1, 2, 3, 4, 5, 6};
  pdkv_exchange_clip_params_t p{};
  p.struct_size = sizeof p;
  p.kind = PDKV_GROUP_SLIDING_WINDOW;
  p.hma_enabled = 1;
  p.sliding_window = 32;
  p.block_size = 16;
  pdkv_u64_list_t* out = nullptr;
  REQUIRE_OK(pdkv_clip_exchange_blocks(ids.data(), ids.size(), &p, &out, err));
  U64ListPtr a(out);
  CHECK(values(out) == V{4, 5, 6});
  p.hma_enabled = 0;
  REQUIRE_OK(pdkv_clip_exchange_blocks(ids.data(), ids.size(), &p, &out, err));
  U64ListPtr b(out);
  CHECK(values(out) == ids);
  p.hma_enabled = 1;
  p.kind = PDKV_GROUP_MAMBA;
  p.cache_mode = PDKV_MAMBA_CACHE_ALIGN;
  p.num_speculative_blocks = 2;  // drop 5, 6; single state: keep 4
  REQUIRE_OK(pdkv_clip_exchange_blocks(ids.data(), ids.size(), &p, &out, err));
  U64ListPtr c(out);
  CHECK(values(out) == V{4});
  p.cache_mode = PDKV_MAMBA_CACHE_ALL;
  REQUIRE_OK(pdkv_clip_exchange_blocks(ids.data(), ids.size(), &p, &out, err));
  U64ListPtr d(out);
  CHECK(values(out) == V{1, 2, 3, 4});

  SECTION("errors") {
    pdkv_exchange_clip_params_t bad = p;
    bad.hma_enabled = 2;
    auto r = capture([&](pdkv_error_t** e) { return pdkv_clip_exchange_blocks(ids.data(), 6, &bad, &out, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("hma_enabled = 2"));
    bad = p;
    bad.cache_mode = 3;
    r = capture([&](pdkv_error_t** e) { return pdkv_clip_exchange_blocks(ids.data(), 6, &bad, &out, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("cache_mode = 3"));
    bad = p;
    bad.struct_size = 4;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_clip_exchange_blocks(ids.data(), 6, &bad, &out, e); })
              .status == PDKV_ERR_STRUCT_SIZE);
    bad = p;
    bad.kind = PDKV_GROUP_SLIDING_WINDOW;
    bad.block_size = 0;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_clip_exchange_blocks(ids.data(), 6, &bad, &out, e); })
              .status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_clip_exchange_blocks(nullptr, 6, &p, &out, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_clip_exchange_blocks(ids.data(), 6, nullptr, &out, e); })
              .status == PDKV_ERR_NULL_POINTER);
  }
}

TEST_CASE("receive zero ranges: vLLM's rule and token-run coverage", "[capi][trim]") {
  const V three{11, 12, 13};
  pdkv_zero_range_list_t* out = nullptr;
  REQUIRE_OK(pdkv_receive_zero_ranges(three.data(), 3, 64, 4, 6, &out, err));
  ZeroListPtr a(out);
  CHECK(zero_of(out) == std::vector<std::vector<uint64_t>>{{12, 32, 64}, {13, 0, 64}});
  REQUIRE_OK(pdkv_receive_zero_ranges(three.data(), 2, 64, 4, 8, &out, err));
  ZeroListPtr b(out);
  CHECK(zero_of(out).empty());
  auto r = capture([&](pdkv_error_t** e) { return pdkv_receive_zero_ranges(three.data(), 1, 30, 4, 1, &out, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("30"));
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_receive_zero_ranges(nullptr, 1, 64, 4, 1, &out, e); }).status ==
        PDKV_ERR_NULL_POINTER);

  const V blocks{5, 6, 7};
  const pdkv_token_interval_t written[1] = {{32, 70}};
  REQUIRE_OK(pdkv_uncovered_token_ranges(blocks.data(), 3, 2, 16, 32, written, 1, &out, err));
  ZeroListPtr c(out);
  CHECK(zero_of(out) == std::vector<std::vector<uint64_t>>{{7, 6, 16}});
  REQUIRE_OK(pdkv_uncovered_token_ranges(blocks.data(), 2, 2, 16, 40, nullptr, 0, &out, err));
  ZeroListPtr d(out);
  CHECK(zero_of(out) == std::vector<std::vector<uint64_t>>{{5, 8, 16}, {6, 0, 16}});
  r = capture([&](pdkv_error_t** e) {
    return pdkv_uncovered_token_ranges(blocks.data(), 3, 2, 16, 32, nullptr, 1, &out, e);
  });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("written"));
  CHECK(capture([&](pdkv_error_t** e) {
          return pdkv_uncovered_token_ranges(blocks.data(), 3, 2, 0, 32, written, 1, &out, e);
        }).status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_zero_range_list_items(out, nullptr, nullptr, e); }).status ==
        PDKV_ERR_NULL_POINTER);
  pdkv_zero_range_list_free(nullptr);
}

TEST_CASE("prefix trimming: token runs, zero ranges and Mamba state pairs", "[capi][trim]") {
  SECTION("partial attention hit, same block size") {
    const V local{6, 7, 8, 9};
    V remote;
    for (uint64_t i = 0; i < 10; ++i) remote.push_back(i);
    const auto in = attention_input(local, remote, 16, 160, 96);
    pdkv_group_trim_t* t = nullptr;
    REQUIRE_OK(pdkv_group_trim_new(&in, &t, err));
    TrimPtr owner(t);
    const pdkv_token_run_t* runs = nullptr;
    size_t n = 0;
    REQUIRE_OK(pdkv_group_trim_runs(t, &runs, &n, err));
    REQUIRE(n == 4);
    for (size_t i = 0; i < 4; ++i) {
      CHECK(runs[i].local_block == 6 + i);
      CHECK(runs[i].local_token_begin == 0);
      CHECK(runs[i].remote_block == 6 + i);
      CHECK(runs[i].remote_token_begin == 0);
      CHECK(runs[i].num_tokens == 16);
    }
    int32_t kind = -1;
    uint64_t tokens = 0;
    REQUIRE_OK(pdkv_group_trim_summary(t, &kind, &tokens, err));
    CHECK(kind == PDKV_GROUP_ATTENTION);
    CHECK(tokens == 64);
    const pdkv_zero_range_t* zero = nullptr;
    REQUIRE_OK(pdkv_group_trim_zero_ranges(t, &zero, &n, err));
    CHECK(n == 0);
    const pdkv_state_pair_t* states = nullptr;
    REQUIRE_OK(pdkv_group_trim_states(t, &states, &n, err));
    CHECK(n == 0);
    CHECK(states == nullptr);
  }
  SECTION("a partly covered tail block is zeroed") {
    // 40 tokens into two 32-token blocks: block 4 gets tokens 32..40, its tokens 8..32 are zeroed.
    const V local{3, 4}, remote{8, 9};
    const auto in = attention_input(local, remote, 32, 40, 0);
    pdkv_group_trim_t* t = nullptr;
    REQUIRE_OK(pdkv_group_trim_new(&in, &t, err));
    TrimPtr owner(t);
    const pdkv_token_run_t* runs = nullptr;
    size_t n = 0;
    REQUIRE_OK(pdkv_group_trim_runs(t, &runs, &n, err));
    REQUIRE(n == 2);
    CHECK(runs[1].local_block == 4);
    CHECK(runs[1].remote_block == 9);
    CHECK(runs[1].num_tokens == 8);
    const pdkv_zero_range_t* zero = nullptr;
    REQUIRE_OK(pdkv_group_trim_zero_ranges(t, &zero, &n, err));
    REQUIRE(n == 1);
    CHECK(zero[0].block == 4);
    CHECK(zero[0].token_begin == 8);
    CHECK(zero[0].token_end == 32);
  }
  SECTION("Mamba align mode with null placeholders pairs the last state") {
    const V local{42}, remote{0, 0, 43};
    pdkv_group_trim_input_t in = attention_input(local, remote, 160, 160, 159);
    in.kind = PDKV_GROUP_MAMBA;
    in.cache_mode = PDKV_MAMBA_CACHE_ALIGN;
    pdkv_group_trim_t* t = nullptr;
    REQUIRE_OK(pdkv_group_trim_new(&in, &t, err));
    TrimPtr owner(t);
    const pdkv_state_pair_t* states = nullptr;
    size_t n = 0;
    REQUIRE_OK(pdkv_group_trim_states(t, &states, &n, err));
    REQUIRE(n == 1);
    CHECK(states[0].local_block == 42);
    CHECK(states[0].remote_block == 43);
    CHECK(states[0].tokens == 160);
    const uint64_t* unfilled = nullptr;
    REQUIRE_OK(pdkv_group_trim_unfilled_states(t, &unfilled, &n, err));
    CHECK(n == 0);
    int32_t kind = -1;
    REQUIRE_OK(pdkv_group_trim_summary(t, &kind, nullptr, err));
    CHECK(kind == PDKV_GROUP_MAMBA);
  }
  SECTION("explicit first block index") {
    // D's list starts at table index 2 although it holds 0 tokens: tokens 0..31 have no slot.
    const V local{3, 4}, remote{8, 9};
    pdkv_group_trim_input_t in = attention_input(local, remote, 16, 32, 0);
    in.local_first_block = 2;
    in.field_mask |= PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK;
    auto r = capture([&](pdkv_error_t** e) {
      pdkv_group_trim_t* t = nullptr;
      const pdkv_status_t st = pdkv_group_trim_new(&in, &t, e);
      pdkv_group_trim_free(t);
      return st;
    });
    CHECK(r.status == PDKV_ERR_COVERAGE);
    in.local_first_block = 0;
    pdkv_group_trim_t* t = nullptr;
    REQUIRE_OK(pdkv_group_trim_new(&in, &t, err));
    TrimPtr owner(t);
    uint64_t tokens = 0;
    REQUIRE_OK(pdkv_group_trim_summary(t, nullptr, &tokens, err));
    CHECK(tokens == 32);
  }
  SECTION("errors") {
    const V local{10}, remote{20, 21, 22};
    pdkv_group_trim_input_t in = attention_input(local, remote, 16, 48, 0);
    pdkv_group_trim_t* t = nullptr;
    auto r = capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, &t, e); });
    CHECK(r.status == PDKV_ERR_COVERAGE);
    CHECK(t == nullptr);
    CHECK_THAT(r.message, Contains("token"));
    in = attention_input(local, remote, 16, 16, 0);
    in.struct_size = sizeof in - 1;
    r = capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, &t, e); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_group_trim_input_t"));
    in.struct_size = sizeof in + 1;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, &t, e); }).status == PDKV_ERR_STRUCT_SIZE);
    in = attention_input(local, remote, 16, 16, 0);
    in.kind = 3;
    r = capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, &t, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("input.kind = 3"));
    in = attention_input(local, remote, 16, 16, 0);
    in.field_mask |= 1ULL << 40;
    r = capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, &t, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("pdkv_group_trim_input_t.field_mask has unknown bits 0x10000000000"));
    in = attention_input(local, remote, 0, 16, 0);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, &t, e); }).status ==
          PDKV_ERR_INVALID_ARGUMENT);
    in = attention_input(local, remote, 16, 16, 0);
    in.local_blocks = nullptr;
    r = capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, &t, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("input.local_blocks"));
    const uint64_t max = std::numeric_limits<uint64_t>::max();
    in = attention_input(local, remote, max / 2, max / 2, max);
    r = capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, &t, e); });
    CHECK((r.status == PDKV_ERR_OVERFLOW || r.status == PDKV_ERR_COVERAGE));
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(nullptr, &t, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    in = attention_input(local, remote, 16, 16, 0);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_new(&in, nullptr, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    const pdkv_token_run_t* runs = nullptr;
    size_t n = 0;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_runs(nullptr, &runs, &n, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    REQUIRE_OK(pdkv_group_trim_new(&in, &t, err));
    TrimPtr owner(t);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_summary(t, nullptr, nullptr, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_states(t, nullptr, &n, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_zero_ranges(t, nullptr, &n, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_group_trim_unfilled_states(t, nullptr, &n, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    pdkv_group_trim_free(nullptr);
  }
}

TEST_CASE("scheduler: aligned splits, the N-1 rule and P-side truncation", "[capi][scheduler]") {
  pdkv_aligned_split_v0604_input_t v{};
  v.struct_size = sizeof v;
  v.num_external_computed_tokens = 40;
  v.num_prompt_tokens = v.num_tokens = 100;
  v.block_size = 16;
  v.num_new_tokens = 50;
  uint64_t out = 0;
  REQUIRE_OK(pdkv_mamba_aligned_split_v0604(&v, &out, err));
  CHECK(out == 48);
  v.num_new_tokens = 60;
  REQUIRE_OK(pdkv_mamba_aligned_split_v0604(&v, &out, err));
  CHECK(out == 56);
  v.use_eagle = 1;
  v.num_new_tokens = 50;
  REQUIRE_OK(pdkv_mamba_aligned_split_v0604(&v, &out, err));
  CHECK(out == 40);
  v.load_kv_async = 1;
  REQUIRE_OK(pdkv_mamba_aligned_split_v0604(&v, &out, err));
  CHECK(out == 50);
  v.block_size = 0;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split_v0604(&v, &out, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);
  v.block_size = 16;
  v.use_eagle = 2;
  auto r = capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split_v0604(&v, &out, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("use_eagle = 2"));
  v.use_eagle = 0;
  v.struct_size = 0;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split_v0604(&v, &out, e); }).status ==
        PDKV_ERR_STRUCT_SIZE);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split_v0604(nullptr, &out, e); }).status ==
        PDKV_ERR_NULL_POINTER);

  pdkv_aligned_split_input_t a{};
  a.struct_size = sizeof a;
  a.num_prompt_tokens = a.num_tokens = 100;
  a.block_size = 32;
  a.shared_prefix_tokens = 48;
  a.num_new_tokens = 100;
  REQUIRE_OK(pdkv_mamba_aligned_split(&a, &out, err));
  CHECK(out == 32);
  a = pdkv_aligned_split_input_t{};
  a.struct_size = sizeof a;
  a.num_prompt_tokens = a.num_tokens = 1300;
  a.block_size = 512;
  a.field_mask |= PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD;
  a.long_prefill_token_threshold = 400;
  a.num_new_tokens = 400;
  REQUIRE_OK(pdkv_mamba_aligned_split(&a, &out, err));
  CHECK(out == 400);  // block 512 wider than every chunk (400): unfloored, as vLLM main
  a.defer_oversized_block = 1;
  REQUIRE_OK(pdkv_mamba_aligned_split(&a, &out, err));
  CHECK(out == 0);  // the explicit deferral
  CallResult bad;
  // Below the 2.0 size: refused, naming the struct and the value.
  a.struct_size = offsetof(pdkv_aligned_split_input_t, defer_oversized_block);
  bad = capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split(&a, &out, e); });
  CHECK(bad.status == PDKV_ERR_STRUCT_SIZE);
  CHECK_THAT(bad.message, Contains("pdkv_aligned_split_input_t.struct_size = " +
                                   std::to_string(offsetof(pdkv_aligned_split_input_t, defer_oversized_block))));
  a.struct_size = sizeof a;
  a.defer_oversized_block = 2;
  bad = capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split(&a, &out, e); });
  CHECK(bad.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(bad.message, Contains("defer_oversized_block = 2"));
  a.defer_oversized_block = 1;
  a.load_kv_async = 1;
  REQUIRE_OK(pdkv_mamba_aligned_split(&a, &out, err));
  CHECK(out == 400);
  a.load_kv_async = 7;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split(&a, &out, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);
  a.load_kv_async = 0;
  a.block_size = 0;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split(&a, &out, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);
  a.struct_size = sizeof a + 1;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split(&a, &out, e); }).status ==
        PDKV_ERR_STRUCT_SIZE);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split(&a, nullptr, e); }).status ==
        PDKV_ERR_NULL_POINTER);

  REQUIRE_OK(pdkv_d_num_new_matched_tokens(100, 0, 1, &out, err));
  CHECK(out == 99);
  REQUIRE_OK(pdkv_d_num_new_matched_tokens(100, 32, 1, &out, err));
  CHECK(out == 67);
  REQUIRE_OK(pdkv_d_num_new_matched_tokens(100, 0, 0, &out, err));
  CHECK(out == 100);
  REQUIRE_OK(pdkv_d_num_new_matched_tokens(100, 120, 1, &out, err));
  CHECK(out == 0);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_d_num_new_matched_tokens(100, 0, 2, &out, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_d_num_new_matched_tokens(100, 0, 1, nullptr, e); }).status ==
        PDKV_ERR_NULL_POINTER);

  pdkv_remote_decode_prefill_t req{sizeof(pdkv_remote_decode_prefill_t), 0, 100, 50, 0};
  pdkv_remote_decode_prefill_t once{};
  once.struct_size = sizeof once;
  REQUIRE_OK(pdkv_truncate_for_remote_decode(&req, 1, &once, err));
  CHECK(once.num_prompt_tokens == 99);
  CHECK(once.max_tokens == 1);
  CHECK(once.truncated == 1);
  REQUIRE_OK(pdkv_truncate_for_remote_decode(&once, 1, &once, err));  // in == out, idempotent
  CHECK(once.num_prompt_tokens == 99);
  pdkv_remote_decode_prefill_t dense{};
  dense.struct_size = sizeof dense;
  REQUIRE_OK(pdkv_truncate_for_remote_decode(&req, 0, &dense, err));
  CHECK(dense.num_prompt_tokens == 100);
  CHECK(dense.max_tokens == 1);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_truncate_for_remote_decode(&req, 3, &dense, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);
  dense.struct_size = 8;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_truncate_for_remote_decode(&req, 1, &dense, e); }).status ==
        PDKV_ERR_STRUCT_SIZE);
  req.truncated = 9;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_truncate_for_remote_decode(&req, 1, &once, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);

  pdkv_remote_decode_prefill_plan_t plan{};
  plan.struct_size = sizeof plan;
  REQUIRE_OK(pdkv_plan_remote_decode_prefill(65, 64, 16, 1, &plan, err));  // vLLM #53514
  CHECK(plan.num_prompt_tokens == 64);
  CHECK(plan.computed_tokens == 48);
  CHECK(plan.new_tokens == 16);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_remote_decode_prefill(65, 64, 0, 1, &plan, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_remote_decode_prefill(0, 0, 16, 1, &plan, e); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_remote_decode_prefill(65, 64, 16, 1, nullptr, e); })
            .status == PDKV_ERR_NULL_POINTER);
  plan.struct_size = 0;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_remote_decode_prefill(65, 64, 16, 1, &plan, e); }).status ==
        PDKV_ERR_STRUCT_SIZE);
}

TEST_CASE("offload geometry comes from the cache config", "[capi][offload]") {
  const pdkv_offload_layer_t layers[2] = {{1000ull * 8192, 8192}, {1000ull * 8192, 6553}};
  pdkv_offload_geometry_t g{};
  g.struct_size = sizeof g;
  REQUIRE_OK(pdkv_derive_offload_geometry(1000, 2096, 16, layers, 2, &g, err));
  CHECK(g.num_blocks == 1000);
  CHECK(g.hash_blocks_per_block == 131);
  auto r = capture([&](pdkv_error_t** e) { return pdkv_derive_offload_geometry(1000, 1000, 16, nullptr, 0, &g, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("1000") && Contains("16") && Contains("--enable-prefix-caching"));
  const pdkv_offload_layer_t small[1] = {{999ull * 4096, 4096}};
  r = capture([&](pdkv_error_t** e) { return pdkv_derive_offload_geometry(1000, 32, 16, small, 1, &g, e); });
  CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
  CHECK_THAT(r.message, Contains("layer 0"));
  const pdkv_offload_layer_t one[1] = {{1, 4096}};
  CHECK(capture([&](pdkv_error_t** e) {
          return pdkv_derive_offload_geometry(std::numeric_limits<uint64_t>::max(), 32, 16, one, 1, &g, e);
        }).status == PDKV_ERR_OVERFLOW);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_derive_offload_geometry(10, 32, 16, nullptr, 1, &g, e); })
            .status == PDKV_ERR_NULL_POINTER);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_derive_offload_geometry(10, 32, 16, nullptr, 0, nullptr, e); })
            .status == PDKV_ERR_NULL_POINTER);
  g.struct_size = sizeof g + 4;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_derive_offload_geometry(10, 32, 16, nullptr, 0, &g, e); })
            .status == PDKV_ERR_STRUCT_SIZE);
}
