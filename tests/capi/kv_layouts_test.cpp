// Different KV layouts on the two sides through the C API (issue 12 item 3): the context flag,
// the plan's permutation and the blocks each group lists, pdkv_permute_kv_block, and the
// refusals. The plan is the core test's hand-worked case: 4 GQA heads of 8 bytes per token,
// block size 16, D NHD TP2 rank 1 <- P HND TP1, 20 tokens into D blocks 3 and 5.
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

namespace {

struct LMd { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct LCtx { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct LPlan { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };

std::unique_ptr<pdkv_engine_metadata_t, LMd> layout_md(const pdkv_model_t* m, uint32_t tp, uint32_t rank, const char* id,
                                                       uint64_t base, int32_t kv_layout) {
  pdkv_engine_config_t c = engine(tp);
  c.user_block_size = 16;
  c.field_mask |= PDKV_CONFIG_FIELD_BLOCK_SIZE;
  pdkv_engine_layout_t l;
  REQUIRE_OK(pdkv_engine_layout_init(&l, err));
  l.engine_id = id;
  l.tp_rank = rank;
  l.num_logical_blocks = 8;
  l.base = base;
  l.kv_layout = kv_layout;
  pdkv_engine_metadata_t* md = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_from_model(m, &c, &l, &md, err));
  return std::unique_ptr<pdkv_engine_metadata_t, LMd>(md);
}

}  // namespace

TEST_CASE("kv layouts: D NHD reads P HND and permutes the received blocks", "[capi][layout]") {
  pdkv_model_desc_t desc{};
  desc.struct_size = sizeof desc;
  desc.name = "gqa4";
  desc.num_kv_heads = 4;
  desc.head_size = 4;
  desc.head_size_v = 4;
  desc.dtype_bytes = 1;
  const ModelPtr m = make_model(desc);
  const auto d = layout_md(m.get(), 2, 1, "d", 1ull << 40, PDKV_KV_LAYOUT_NHD);
  const auto p = layout_md(m.get(), 1, 0, "p", 2ull << 40, PDKV_KV_LAYOUT_HND);
  // The handshake accepts the pair (D permutes on receive).
  REQUIRE_OK(pdkv_handshake_require_compatible(d.get(), p.get(), err));
  const pdkv_engine_metadata_t* remote[] = {p.get()};
  pdkv_plan_context_params_t cp{};
  cp.struct_size = sizeof cp;
  cp.local = d.get();
  cp.remote = remote;
  cp.num_remote = 1;
  std::vector<uint64_t> local = {3, 5}, rids = {7, 2};
  pdkv_group_trim_input_t t{};
  t.struct_size = sizeof t;
  t.kind = PDKV_GROUP_ATTENTION;
  t.local_blocks = local.data();
  t.num_local_blocks = local.size();
  t.remote_blocks = rids.data();
  t.num_remote_blocks = rids.size();
  t.remote_computed_tokens = 20;
  pdkv_plan_group_t g{};
  g.struct_size = sizeof g;
  g.trim = &t;

  SECTION("without the flag: refused, naming it") {
    pdkv_plan_context_t* raw = nullptr;
    REQUIRE_OK(pdkv_plan_context_new(&cp, &raw, err));
    std::unique_ptr<pdkv_plan_context_t, LCtx> ctx(raw);
    pdkv_transfer_plan_t* plan = nullptr;
    const CallResult r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(ctx.get(), &g, 1, &plan, e); });
    CHECK(r.status == PDKV_ERR_UNSUPPORTED_LAYOUT);
    CHECK_THAT(r.message, Contains("D NHD, P HND") && Contains("permute_on_receive"));
  }
  SECTION("with the flag: the plan lists the blocks and their shape") {
    cp.permute_on_receive = 1;
    pdkv_plan_context_t* raw = nullptr;
    REQUIRE_OK(pdkv_plan_context_new(&cp, &raw, err));
    std::unique_ptr<pdkv_plan_context_t, LCtx> ctx(raw);
    pdkv_transfer_plan_t* praw = nullptr;
    REQUIRE_OK(pdkv_transfer_plan_compile(ctx.get(), &g, 1, &praw, err));
    std::unique_ptr<pdkv_transfer_plan_t, LPlan> plan(praw);
    REQUIRE_OK(pdkv_transfer_plan_validate(plan.get(), ctx.get(), &g, 1, err));
    pdkv_transfer_plan_info_t i{};
    i.struct_size = sizeof i;
    REQUIRE_OK(pdkv_transfer_plan_get_info(plan.get(), &i, err));
    CHECK(i.permute_from_layout == PDKV_KV_LAYOUT_HND);
    CHECK(i.permute_to_layout == PDKV_KV_LAYOUT_NHD);
    CHECK(i.permute_heads == 2);
    CHECK(i.permute_tokens == 16);
    CHECK(i.permute_head_bytes == 8);
    pdkv_plan_group_zero_t z{};
    z.struct_size = sizeof z;
    REQUIRE_OK(pdkv_transfer_plan_group_zero(plan.get(), 0, &z, err));
    REQUIRE(z.num_permute_blocks == 2);
    CHECK(z.permute_blocks[0] == 3);
    CHECK(z.permute_blocks[1] == 5);
    REQUIRE(z.num_permute_regions == 1);
    CHECK(z.permute_regions[0] == 0);
    // Below the 2.0 size: refused.
    pdkv_plan_group_zero_t old{};
    old.struct_size = offsetof(pdkv_plan_group_zero_t, permute_blocks);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_group_zero(plan.get(), 0, &old, e); }).status ==
          PDKV_ERR_STRUCT_SIZE);
    // The dump names the permutation.
    pdkv_string_t* s = nullptr;
    REQUIRE_OK(pdkv_transfer_plan_to_json_string(plan.get(), &s, err));
    const char* text = nullptr;
    size_t len = 0;
    REQUIRE_OK(pdkv_string_text(s, &text, &len, err));
    CHECK_THAT(std::string(text, len), Contains("\"permute\"") && Contains("\"permute_blocks\""));
    pdkv_string_free(s);
  }
}

TEST_CASE("kv layouts: pdkv_permute_kv_block", "[capi][layout]") {
  // 2 heads x 3 tokens x 2 bytes: byte j of head h of token t is 100h + 10t + j.
  std::vector<uint8_t> b;
  for (int h = 0; h < 2; ++h)
    for (int tk = 0; tk < 3; ++tk)
      for (int j = 0; j < 2; ++j) b.push_back(static_cast<uint8_t>(100 * h + 10 * tk + j));
  REQUIRE_OK(pdkv_permute_kv_block(b.data(), b.size(), PDKV_KV_LAYOUT_HND, PDKV_KV_LAYOUT_NHD, 2, 3, 2, err));
  CHECK(b == std::vector<uint8_t>{0, 1, 100, 101, 10, 11, 110, 111, 20, 21, 120, 121});
  CallResult r = capture([&](pdkv_error_t** e) { return pdkv_permute_kv_block(b.data(), 10, 0, 1, 2, 3, 2, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("10 bytes") && Contains("= 12"));
  r = capture([&](pdkv_error_t** e) { return pdkv_permute_kv_block(b.data(), b.size(), 0, 7, 2, 3, 2, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("to_layout = 7"));
  r = capture([&](pdkv_error_t** e) { return pdkv_permute_kv_block(nullptr, 12, 0, 1, 2, 3, 2, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
}
