// Pipeline parallelism through the C API (issue 12 item 1): stage fields of the layout and the
// metadata (format 1.2), vLLM's default layer split, stage pairing with its caller buffer, the
// notifications a P stage waits for, and a plan whose groups name their layers, with the plan's
// stage fields. The plan is the core test's hand-worked P PP2 TP2 -> D PP1 TP1 case: four GQA
// layers of 2 KV heads x 8 bytes per token, D block 3 <- P block 5 (16 tokens).
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

namespace {

struct MdDeleter { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct CtxDeleter { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct PlDeleter { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
using Md = std::unique_ptr<pdkv_engine_metadata_t, MdDeleter>;
using Ctx = std::unique_ptr<pdkv_plan_context_t, CtxDeleter>;
using Plan = std::unique_ptr<pdkv_transfer_plan_t, PlDeleter>;

ModelPtr attn4() {
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  d.name = "attn4";
  d.num_kv_heads = 2;
  d.head_size = 4;
  d.head_size_v = 4;
  d.dtype_bytes = 1;
  d.layer_pattern = "****";
  return make_model(d);
}

Md stage_md(const pdkv_model_t* m, uint32_t tp, uint32_t rank, const char* id, uint32_t regions, uint64_t base,
            uint32_t pp_size, uint32_t pp_rank, uint32_t begin, uint32_t end) {
  pdkv_engine_config_t c = engine(tp);
  c.user_block_size = 16;
  c.field_mask |= PDKV_CONFIG_FIELD_BLOCK_SIZE;
  pdkv_engine_layout_t l;
  REQUIRE_OK(pdkv_engine_layout_init(&l, err));
  CHECK(l.pp_size == 1);
  CHECK(l.layer_end == 0);
  l.engine_id = id;
  l.tp_rank = rank;
  l.num_logical_blocks = 16;
  l.num_regions = regions;
  l.base = base;
  l.field_mask |= PDKV_LAYOUT_FIELD_PIPELINE;
  l.pp_size = pp_size;
  l.pp_rank = pp_rank;
  l.layer_begin = begin;
  if (end != 0) {  // 0 here: this helper's "through the last layer", the bit left unset
    l.field_mask |= PDKV_LAYOUT_FIELD_LAYER_END;
    l.layer_end = end;
  }
  pdkv_engine_metadata_t* md = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_from_model(m, &c, &l, &md, err));
  return Md(md);
}

}  // namespace

TEST_CASE("pipeline: stage metadata, layer split, pairing and notifications", "[capi][pipeline]") {
  const ModelPtr m = attn4();
  const Md p1 = stage_md(m.get(), 2, 0, "p", 2, 1ull << 40, 2, 1, 2, 4);
  pdkv_engine_metadata_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_engine_metadata_get_info(p1.get(), &i, err));
  CHECK(i.pp_size == 2);
  CHECK(i.pp_rank == 1);
  CHECK(i.layer_begin == 2);
  CHECK(i.layer_end == 4);
  size_t len = 0;
  CHECK(capture([&](pdkv_error_t** x) { return pdkv_engine_metadata_encode(p1.get(), nullptr, 0, &len, x); }).status ==
        PDKV_ERR_BUFFER_TOO_SMALL);
  std::vector<uint8_t> buf(len);
  REQUIRE_OK(pdkv_engine_metadata_encode(p1.get(), buf.data(), buf.size(), &len, err));
  CHECK(buf[6] == 2);  // labelled 1.2
  pdkv_engine_metadata_t* back = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_decode(buf.data(), buf.size(), &back, err));
  Md back_owner(back);
  uint8_t same = 0;
  REQUIRE_OK(pdkv_engine_metadata_equal(back, p1.get(), &same, err));
  CHECK(same == 1);

  // Pipeline fields without their bits are never read: one stage holding every layer.
  {
    pdkv_engine_layout_t l;
    REQUIRE_OK(pdkv_engine_layout_init(&l, err));
    CHECK(l.field_mask == 0);
    l.pp_size = 9;
    l.pp_rank = 4;
    l.layer_begin = 7;
    l.layer_end = 3;
    const pdkv_engine_config_t c = engine(1);
    pdkv_engine_metadata_t* md = nullptr;
    REQUIRE_OK(pdkv_engine_metadata_from_model(m.get(), &c, &l, &md, err));
    Md owner(md);
    pdkv_engine_metadata_info_t j{};
    j.struct_size = sizeof j;
    REQUIRE_OK(pdkv_engine_metadata_get_info(md, &j, err));
    CHECK(j.pp_size == 1);
    CHECK(j.layer_end == 0);
  }
  // A stage other than the last must name its end.
  {
    pdkv_engine_layout_t l;
    REQUIRE_OK(pdkv_engine_layout_init(&l, err));
    l.pp_size = 2;
    l.field_mask |= PDKV_LAYOUT_FIELD_PIPELINE;
    const pdkv_engine_config_t c = engine(1);
    pdkv_engine_metadata_t* md = nullptr;
    const CallResult r = capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_from_model(m.get(), &c, &l, &md, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("layer_end") && Contains("pp_rank 0 of pp_size 2"));
  }

  uint32_t b = 9, e = 9;
  REQUIRE_OK(pdkv_pipeline_layer_window(5, 3, 1, &b, &e, err));
  CHECK(b == 2);
  CHECK(e == 4);
  CHECK(capture([&](pdkv_error_t** x) { return pdkv_pipeline_layer_window(2, 3, 0, &b, &e, x); }).status ==
        PDKV_ERR_INVALID_ARGUMENT);

  // P PP2 [0,2) [2,4); D PP2 [0,3) [3,open).
  const Md p0 = stage_md(m.get(), 2, 1, "p", 2, 2ull << 40, 2, 0, 0, 2);
  const Md d0 = stage_md(m.get(), 1, 0, "d", 3, 3ull << 40, 2, 0, 0, 3);
  const Md d1 = stage_md(m.get(), 1, 0, "d", 1, 4ull << 40, 2, 1, 3, 0);
  const pdkv_engine_metadata_t* ds[] = {d1.get(), d0.get()};
  const pdkv_engine_metadata_t* ps[] = {p1.get(), p0.get()};
  pdkv_stage_pair_list_t* list = nullptr;
  REQUIRE_OK(pdkv_pipeline_stage_pairs(ps, 2, ds, 2, &list, err));
  const std::vector<pdkv_stage_pair_t> pairs = take_stage_pairs(list);
  REQUIRE(pairs.size() == 3);
  const pdkv_stage_pair_t want[] = {{0, 0, 0, 2}, {1, 0, 2, 3}, {1, 1, 3, 4}};  // {p, d, begin, end}
  for (size_t k = 0; k < 3; ++k) {
    CHECK(pairs[k].d_pp_rank == want[k].d_pp_rank);
    CHECK(pairs[k].p_pp_rank == want[k].p_pp_rank);
    CHECK(pairs[k].layer_begin == want[k].layer_begin);
    CHECK(pairs[k].layer_end == want[k].layer_end);
  }
  uint32_t n = 0;
  REQUIRE_OK(pdkv_pipeline_notifications_expected(pairs.data(), pairs.size(), 1, 2, 4, &n, err));
  CHECK(n == 4);  // two D stages, two D ranks per P rank each
  CHECK(capture([&](pdkv_error_t** x) { return pdkv_pipeline_notifications_expected(pairs.data(), 3, 1, 2, 3, &n, x); })
            .status == PDKV_ERR_TP_NOT_DIVISIBLE);
  const pdkv_engine_metadata_t* only_p1[] = {p1.get()};
  list = reinterpret_cast<pdkv_stage_pair_list_t*>(0x1);  // set to NULL on failure
  const CallResult missing = capture([&](pdkv_error_t** x) { return pdkv_pipeline_stage_pairs(only_p1, 1, ds, 2, &list, x); });
  CHECK(missing.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(missing.message, Contains("P stage 0 of 2") && Contains("missing"));
  CHECK(list == nullptr);
  const CallResult no_out = capture([&](pdkv_error_t** x) { return pdkv_pipeline_stage_pairs(ps, 2, ds, 2, nullptr, x); });
  CHECK(no_out.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(no_out.message, Contains("out"));
  const pdkv_stage_pair_t* items = nullptr;
  size_t count = 0;
  CHECK(capture([&](pdkv_error_t** x) { return pdkv_stage_pair_list_items(nullptr, &items, &count, x); }).status ==
        PDKV_ERR_NULL_POINTER);
  pdkv_stage_pair_list_free(nullptr);
}

TEST_CASE("pipeline: a plan between stages pairs regions by layer", "[capi][pipeline]") {
  const ModelPtr m = attn4();
  const Md d = stage_md(m.get(), 1, 0, "d", 4, 1ull << 40, 1, 0, 0, 0);
  const Md pa = stage_md(m.get(), 2, 0, "p", 2, 2ull << 40, 2, 1, 2, 4);
  const Md pb = stage_md(m.get(), 2, 1, "p", 2, 3ull << 40, 2, 1, 2, 4);
  const pdkv_engine_metadata_t* remote[] = {pa.get(), pb.get()};
  pdkv_plan_context_params_t cp{};
  cp.struct_size = sizeof cp;
  cp.local = d.get();
  cp.remote = remote;
  cp.num_remote = 2;
  pdkv_plan_context_t* ctx_raw = nullptr;
  REQUIRE_OK(pdkv_plan_context_new(&cp, &ctx_raw, err));
  Ctx ctx(ctx_raw);

  std::vector<uint64_t> local = {3}, remote_ids = {5};
  std::vector<uint32_t> layers = {0, 1, 2, 3};
  pdkv_group_trim_input_t t{};
  t.struct_size = sizeof t;
  t.kind = PDKV_GROUP_ATTENTION;
  t.local_blocks = local.data();
  t.num_local_blocks = 1;
  t.remote_blocks = remote_ids.data();
  t.num_remote_blocks = 1;
  t.remote_computed_tokens = 16;
  pdkv_plan_group_t g{};
  g.struct_size = sizeof g;
  g.trim = &t;
  g.layers = layers.data();
  g.num_layers = layers.size();
  pdkv_transfer_plan_t* raw = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_compile(ctx.get(), &g, 1, &raw, err));
  Plan plan(raw);
  REQUIRE_OK(pdkv_transfer_plan_validate(plan.get(), ctx.get(), &g, 1, err));
  pdkv_transfer_plan_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE_OK(pdkv_transfer_plan_get_info(plan.get(), &info, err));
  CHECK(info.d_pp_size == 1);
  CHECK(info.p_pp_size == 2);
  CHECK(info.p_pp_rank == 1);
  CHECK(info.layer_begin == 2);
  CHECK(info.layer_end == 4);
  CHECK(info.bytes == 512);
  for (uint32_t h = 0; h < 2; ++h) {
    const pdkv_plan_read_t* r = nullptr;
    size_t nr = 0;
    REQUIRE_OK(pdkv_transfer_plan_rank_reads(plan.get(), h, &r, &nr, nullptr, err));
    REQUIRE(nr == 2);
    for (uint32_t k = 0; k < 2; ++k) {
      CHECK(r[k].local_region == 2 + k);
      CHECK(r[k].local_offset == 3 * 256 + h * 128);
      CHECK(r[k].remote_region == k);
      CHECK(r[k].remote_offset == 5 * 128);
      CHECK(r[k].length == 128);
    }
  }
  // The same group naming no layers: refused, naming both windows, instead of reading P's
  // regions by D's indexes.
  pdkv_plan_group_t old = g;
  old.layers = nullptr;
  old.num_layers = 0;
  const CallResult r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(ctx.get(), &old, 1, &raw, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("names no layers") && Contains("[0, open)") && Contains("[2, 4)"));
  // Layers counted but not given.
  pdkv_plan_group_t bad = g;
  bad.layers = nullptr;
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(ctx.get(), &bad, 1, &raw, e); }).status ==
        PDKV_ERR_NULL_POINTER);
}
