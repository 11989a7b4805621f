// Engine settings and geometry through the C API, checked against the worked numbers of
// docs/hybrid-geometry.md for nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("pdkv_engine_config_init fills defaults", "[capi][engine]") {
  pdkv_engine_config_t c;
  std::memset(&c, 0xAB, sizeof c);
  REQUIRE_OK(pdkv_engine_config_init(&c, err));
  CHECK(c.struct_size == sizeof c);
  CHECK(c.tp_size == 1);
  CHECK(c.kv_cache_dtype_bytes == 0);
  CHECK(c.conv_state_dtype_bytes == 0);
  CHECK(c.ssm_state_dtype_bytes == 0);
  CHECK(c.num_speculative_tokens == 0);
  CHECK(c.user_block_size == 0);
  CHECK(c.user_mamba_block_size == 0);
  CHECK(c.attention_backend == PDKV_BACKEND_FLASH_ATTN);
  CHECK(c.kernel_block_sizes == nullptr);
  CHECK(c.num_kernel_block_sizes == 0);
  CHECK(c.mamba_cache_mode == PDKV_MAMBA_CACHE_NONE);
  CHECK(c.conv_layout == PDKV_CONV_LAYOUT_DS);
  auto r = capture([&](pdkv_error_t** err) { return pdkv_engine_config_init(nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("config"));
}

TEST_CASE("backend names round-trip", "[capi][engine]") {
  for (int32_t b : {PDKV_BACKEND_FLASH_ATTN, PDKV_BACKEND_TRITON, PDKV_BACKEND_FLASHINFER, PDKV_BACKEND_FLASHMLA,
                    PDKV_BACKEND_CUTLASS_MLA, PDKV_BACKEND_FLASHINFER_MLA}) {
    int32_t back = -1;
    REQUIRE_OK(pdkv_backend_from_name(pdkv_backend_name(b), &back, err));
    CHECK(back == b);
  }
  int32_t v = -1;
  REQUIRE_OK(pdkv_backend_from_name("FLASHINFER", &v, err));
  CHECK(v == PDKV_BACKEND_FLASHINFER);
  CHECK(std::string(pdkv_backend_name(PDKV_BACKEND_CUSTOM)) == "custom");
  CHECK(std::string(pdkv_backend_name(77)) == "unknown");
  auto r = capture([&](pdkv_error_t** err) { return pdkv_backend_from_name("warp_attn", &v, err); });
  CHECK(r.status == PDKV_ERR_NOT_FOUND);
  CHECK_THAT(r.message, Contains("warp_attn"));
  r = capture([&](pdkv_error_t** err) { return pdkv_backend_from_name(nullptr, &v, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("name"));
  r = capture([&](pdkv_error_t** err) { return pdkv_backend_from_name("triton", nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));
}

TEST_CASE("Nemotron-3-Nano-30B TP2 geometry, FlashAttention", "[capi][geometry]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  GeometryPtr g = make_geometry(m.get(), engine(2));
  const pdkv_geometry_info_t i = info_of(g.get());
  CHECK(i.struct_size == sizeof i);
  CHECK(i.tp_size == 2);
  CHECK(i.kv_heads_per_rank == 1);
  CHECK(i.attn_bytes_per_token == 512);  // 1 head * (128 + 128) * 2 B
  CHECK(i.hybrid == 1);
  CHECK(i.mamba_type == PDKV_MAMBA_MAMBA2);
  CHECK(i.conv_rows == 3);
  CHECK(i.conv_dim_local == 3072);  // (4096 + 2*8*128) / 2
  CHECK(i.conv_dtype_bytes == 2);
  CHECK(i.ssm_dtype_bytes == 4);
  CHECK(i.conv_bytes == 18432);
  CHECK(i.ssm_bytes == 1048576);   // 32 * 64 * 128 * 4 B
  CHECK(i.mamba_page_bytes == 1067008);
  CHECK(i.align == 16);
  CHECK(i.min_block_size == 2096);  // 16 * ceil(1067008 / (16 * 512))
  CHECK(i.block_size == 2096);
  CHECK(i.block_size_raised == 1);
  CHECK(i.mamba_block_size == 0);
  CHECK(i.attn_page_bytes == 1073152);
  CHECK(i.mamba_page_padded_bytes == 1073152);
  CHECK(i.padding_ppm == 5758);  // 1e6 * 6144 / 1067008
  CHECK(i.padding_percent == Approx(0.5758).epsilon(1e-3));
  CHECK(i.kernel_block_size == 2096);  // MultipleOf(16) accepts the logical block
  CHECK(i.physical_per_logical == 1);
  CHECK(i.kernel_page_bytes == 1073152);
  CHECK(i.num_projections == 3);
  CHECK(i.num_temporal_dims == 3);
  REQUIRE(i.num_log_lines == 2);

  const char* line = nullptr;
  REQUIRE_OK(pdkv_geometry_log_line(g.get(), 0, &line, err));
  CHECK(std::string(line) ==
        "Setting attention block size to 2096 tokens to ensure that attention page size is >= mamba page size.");
  REQUIRE_OK(pdkv_geometry_log_line(g.get(), 1, &line, err));
  CHECK_THAT(std::string(line), StartsWith("Padding mamba page size by 0.58%"));

  const uint64_t* dims = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_geometry_temporal_shape(g.get(), &dims, &n, err));
  REQUIRE(n == 3);
  CHECK(dims[0] == 32);
  CHECK(dims[1] == 64);
  CHECK(dims[2] == 128);

  const char* names[] = {"x", "B", "C"};
  const uint64_t dim_local[] = {2048, 512, 512};
  const uint64_t offsets[] = {0, 12288, 15360};
  for (size_t k = 0; k < 3; ++k) {
    pdkv_conv_projection_t p{};
    p.struct_size = sizeof p;
    REQUIRE_OK(pdkv_geometry_projection(g.get(), k, &p, err));
    CHECK(std::string(p.name) == names[k]);
    CHECK(p.dim_local == dim_local[k]);
    CHECK(p.dim_total == dim_local[k] * 2);
    CHECK(p.replicated == 0);
    CHECK(p.bytes == dim_local[k] * 3 * 2);
    CHECK(p.offset == offsets[k]);
  }
}

TEST_CASE("Nemotron-3-Nano-30B: FlashInfer splits 2096 into 131 kernel blocks of 16", "[capi][geometry]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  GeometryPtr g = make_geometry(m.get(), engine(2, PDKV_BACKEND_FLASHINFER));
  const pdkv_geometry_info_t i = info_of(g.get());
  CHECK(i.block_size == 2096);
  CHECK(i.kernel_block_size == 16);
  CHECK(i.physical_per_logical == 131);
  CHECK(i.kernel_page_bytes == 8192);

  // The same backend spelled out as a custom one gives the same geometry.
  pdkv_engine_config_t c = engine(2, PDKV_BACKEND_CUSTOM);
  const uint32_t sizes[] = {16, 32, 64};
  c.preferred_block_size = 16;
  c.kernel_block_sizes = sizes;
  c.num_kernel_block_sizes = 3;
  GeometryPtr custom = make_geometry(m.get(), c);
  const pdkv_geometry_info_t j = info_of(custom.get());
  CHECK(j.kernel_block_size == 16);
  CHECK(j.physical_per_logical == 131);
}

TEST_CASE("Nemotron-3-Nano-30B TP4 and the cache modes", "[capi][geometry]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  const pdkv_geometry_info_t tp4 = info_of(make_geometry(m.get(), engine(4)).get());
  CHECK(tp4.conv_bytes == 9216);
  CHECK(tp4.ssm_bytes == 524288);
  CHECK(tp4.block_size == 1056);

  pdkv_engine_config_t c = engine(2);
  c.mamba_cache_mode = PDKV_MAMBA_CACHE_ALL;  // chunk lcm(128, 16) = 128: 128 * ceil(2084 / 128)
  const pdkv_geometry_info_t all = info_of(make_geometry(m.get(), c).get());
  CHECK(all.block_size == 2176);
  CHECK(all.mamba_block_size == 2176);
  c.mamba_cache_mode = PDKV_MAMBA_CACHE_ALIGN;
  const pdkv_geometry_info_t align = info_of(make_geometry(m.get(), c).get());
  CHECK(align.block_size == 2096);
  CHECK(align.mamba_block_size == 2096);

  c = engine(2);
  c.user_block_size = 4096;  // larger than B: kept, only the padding line is logged
  c.field_mask |= PDKV_CONFIG_FIELD_BLOCK_SIZE;
  const pdkv_geometry_info_t user = info_of(make_geometry(m.get(), c).get());
  CHECK(user.block_size == 4096);
  CHECK(user.block_size_raised == 0);
  CHECK(user.num_log_lines == 1);

  c = engine(2);
  c.num_speculative_tokens = 2;  // NemotronH adds speculative rows to the conv state
  const pdkv_geometry_info_t spec = info_of(make_geometry(m.get(), c).get());
  CHECK(spec.conv_rows == 5);
  CHECK(spec.conv_bytes == 3072 * 5 * 2);
}

TEST_CASE("geometry info and projection structs are filled only up to struct_size", "[capi][geometry]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  GeometryPtr g = make_geometry(m.get(), engine(2));
  pdkv_geometry_info_t i;
  std::memset(&i, 0xCD, sizeof i);
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_geometry_get_info(g.get(), &i, err));
  CHECK(i.num_log_lines == 2);

  // Below the 2.0 size (the struct's last 2.0 field cut off) and above the current size.
  for (size_t bad : {size_t{0}, offsetof(pdkv_geometry_info_t, kv_head_bytes_per_token), sizeof(pdkv_geometry_info_t) + 8}) {
    i.struct_size = bad;
    auto r = capture([&](pdkv_error_t** err) { return pdkv_geometry_get_info(g.get(), &i, err); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_geometry_info_t") && Contains(std::to_string(bad)));
  }
  pdkv_conv_projection_t p{};
  p.struct_size = sizeof p + 1;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_geometry_projection(g.get(), 0, &p, err); });
  CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
  CHECK_THAT(r.message, Contains("pdkv_conv_projection_t"));
}

TEST_CASE("geometry accessors: NULLs and out-of-range indexes", "[capi][geometry][errors]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  GeometryPtr g = make_geometry(m.get(), engine(2));
  pdkv_geometry_info_t i{};
  i.struct_size = sizeof i;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_geometry_get_info(nullptr, &i, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("geometry"));
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_get_info(g.get(), nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);

  pdkv_conv_projection_t p{};
  p.struct_size = sizeof p;
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_projection(g.get(), 3, &p, err); });
  CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
  CHECK_THAT(r.message, Contains("3") && Contains("count 3"));
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_projection(nullptr, 0, &p, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_projection(g.get(), 0, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);

  const char* line = nullptr;
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_log_line(g.get(), 2, &line, err); });
  CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_log_line(g.get(), 0, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("line"));
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_log_line(nullptr, 0, &line, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);

  const uint64_t* dims = nullptr;
  size_t n = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_temporal_shape(g.get(), nullptr, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("dims"));
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_temporal_shape(g.get(), &dims, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("count"));
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_temporal_shape(nullptr, &dims, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  pdkv_geometry_free(nullptr);
}

TEST_CASE("pdkv_geometry_new error paths", "[capi][geometry][errors]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  pdkv_geometry_t* g = nullptr;
  pdkv_engine_config_t c = engine(2);

  auto r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(nullptr, &c, &g, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("model"));
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), nullptr, &g, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("config"));
  r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));

  SECTION("struct_size too small and too large") {
    for (size_t bad : {size_t{8}, sizeof(pdkv_engine_config_t) + 4}) {
      c.struct_size = bad;
      r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
      CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
      CHECK_THAT(r.message, Contains("pdkv_engine_config_t") && Contains(std::to_string(bad)));
    }
  }
  SECTION("SD conv layout is not transferable") {
    c.conv_layout = PDKV_CONV_LAYOUT_SD;
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
    CHECK(r.status == PDKV_ERR_UNSUPPORTED_LAYOUT);
  }
  SECTION("out-of-range enum values name the field") {
    c.conv_layout = 9;
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("conv_layout") && Contains("9"));
    c = engine(2);
    c.mamba_cache_mode = -1;
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("mamba_cache_mode") && Contains("-1"));
    c = engine(2);
    c.attention_backend = 6;
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("attention_backend") && Contains("6"));
  }
  SECTION("an MLA backend on a GQA model is incompatible") {
    c.attention_backend = PDKV_BACKEND_FLASHMLA;
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
    CHECK(r.status == PDKV_ERR_INCOMPATIBLE);
  }
  SECTION("custom backend with a NULL kernel list") {
    c.attention_backend = PDKV_BACKEND_CUSTOM;
    c.num_kernel_block_sizes = 2;
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("kernel_block_sizes"));
  }
  SECTION("TP that does not divide the KV heads names both") {
    c.tp_size = 3;
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
    CHECK(r.status == PDKV_ERR_HEADS_NOT_DIVISIBLE);
    CHECK_THAT(r.message, Contains("3") && Contains("2"));
  }
  SECTION("KDA is described but has no split rule") {
    pdkv_model_desc_t d = nemotron3_nano_desc();
    d.name = "kimi-like";
    d.mamba_type = PDKV_MAMBA_KDA;
    ModelPtr kda = make_model(d);
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(kda.get(), &c, &g, err); });
    CHECK(r.status == PDKV_ERR_UNSUPPORTED_MAMBA_TYPE);
    CHECK_THAT(r.message, Contains("kda") || Contains("KDA"));
  }
  SECTION("byte counts near 2^64 overflow instead of wrapping") {
    pdkv_model_desc_t d{};
    d.struct_size = sizeof d;
    d.name = "huge";
    d.num_kv_heads = 1;
    d.head_size = std::numeric_limits<uint32_t>::max();
    d.head_size_v = std::numeric_limits<uint32_t>::max();
    d.dtype_bytes = 8;
    d.mamba_type = PDKV_MAMBA_MAMBA1;
    d.mamba_d_inner = uint64_t{1} << 62;
    d.mamba_d_state = std::numeric_limits<uint32_t>::max();
    d.mamba_conv_kernel = 4;
    ModelPtr huge = make_model(d);
    pdkv_engine_config_t c1 = engine(1);
    r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(huge.get(), &c1, &g, err); });
    CHECK(r.status == PDKV_ERR_OVERFLOW);
    CHECK_THAT(r.message, Contains("overflows"));
  }
  CHECK(g == nullptr);
}

TEST_CASE("block size ratio", "[capi][geometry]") {
  uint64_t out = 0;
  REQUIRE_OK(pdkv_block_size_ratio(64, 16, &out, err));
  CHECK(out == 4);
  auto r = capture([&](pdkv_error_t** err) { return pdkv_block_size_ratio(16, 64, &out, err); });
  CHECK(r.status == PDKV_ERR_INCOMPATIBLE);
  CHECK_THAT(r.message, Contains("16") && Contains("64"));
  r = capture([&](pdkv_error_t** err) { return pdkv_block_size_ratio(0, 16, &out, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  r = capture([&](pdkv_error_t** err) { return pdkv_block_size_ratio(64, 16, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
}

TEST_CASE("KV element format: per-token-head scales through pdkv_engine_config_t", "[capi][geometry][kv]") {
  pdkv_model_t* raw = nullptr;
  REQUIRE_OK(pdkv_model_from_preset("qwen3.5-27b", &raw, err));
  const ModelPtr m(raw);
  // Qwen3.5-27B TP1, int8 per-token-head (8 bits + two fp32 scales per head), bf16 SSM state,
  // 7 speculative tokens, Triton: 4 x 520 B per token, the 864-token block and 1.09% padding.
  pdkv_engine_config_t c = engine(1, PDKV_BACKEND_TRITON);
  CHECK(c.kv_cache_element_bits == 0);
  CHECK(c.kv_cache_head_extra_bytes == 0);
  c.kv_cache_element_bits = 8;
  c.field_mask |= PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS;
  c.kv_cache_head_extra_bytes = 8;
  c.ssm_state_dtype_bytes = 2;
  c.field_mask |= PDKV_CONFIG_FIELD_SSM_STATE_DTYPE;
  c.num_speculative_tokens = 7;
  const GeometryPtr g = make_geometry(m.get(), c);
  const pdkv_geometry_info_t i = info_of(g.get());
  CHECK(i.kv_head_bytes_per_token == 520);
  CHECK(i.attn_bytes_per_token == 2080);
  CHECK(i.block_size == 864);
  CHECK(i.padding_ppm == 10944);

  // Without its bit the element size is never read: the model dtype.
  pdkv_engine_config_t unset = c;
  unset.field_mask &= ~PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS;
  const GeometryPtr g_unset = make_geometry(m.get(), unset);
  CHECK(info_of(g_unset.get()).kv_head_bytes_per_token == 1032);  // 2 x 256 x 2 bytes + 8 extra

  pdkv_engine_config_t bad = c;
  bad.kv_cache_head_extra_bytes = uint64_t{1} << 32;
  auto r = capture([&](pdkv_error_t** e) {
    pdkv_geometry_t* out = nullptr;
    const pdkv_status_t st = pdkv_geometry_new(m.get(), &bad, &out, e);
    pdkv_geometry_free(out);
    return st;
  });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("kv_cache_head_extra_bytes = 4294967296"));
  bad = c;
  bad.kv_cache_element_bits = 8;
  bad.field_mask |= PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS;
  bad.kv_cache_dtype_bytes = 2;
  bad.field_mask |= PDKV_CONFIG_FIELD_KV_CACHE_DTYPE;
  r = capture([&](pdkv_error_t** e) {
    pdkv_geometry_t* out = nullptr;
    const pdkv_status_t st = pdkv_geometry_new(m.get(), &bad, &out, e);
    pdkv_geometry_free(out);
    return st;
  });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("kv_cache_element_bits = 8") && Contains("kv_cache_dtype_bytes = 2"));
}
