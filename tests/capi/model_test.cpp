// Model handles from the C description struct, describing them back, layer counts.
#include <cstring>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

TEST_CASE("a model round-trips through pdkv_model_new and pdkv_model_describe", "[capi][model]") {
  const pdkv_model_desc_t in = nemotron3_nano_desc();
  ModelPtr m = make_model(in);
  pdkv_model_desc_t out{};
  out.struct_size = sizeof out;
  REQUIRE_OK(pdkv_model_describe(m.get(), &out, err));
  CHECK(std::string(out.name) == in.name);
  CHECK(std::string(out.source) == in.source);
  CHECK(std::string(out.layer_pattern) == in.layer_pattern);
  CHECK(out.num_kv_heads == 2);
  CHECK(out.head_size == 128);
  CHECK(out.head_size_v == 128);
  CHECK(out.use_mla == 0);
  CHECK(out.mamba_type == PDKV_MAMBA_MAMBA2);
  CHECK(out.mamba_num_heads == 64);
  CHECK(out.mamba_head_dim == 64);
  CHECK(out.mamba_d_state == 128);
  CHECK(out.mamba_n_groups == 8);
  CHECK(out.mamba_conv_kernel == 4);
  CHECK(out.mamba_chunk_size == 128);
  CHECK(out.mamba_conv_rows_include_spec == 1);
  CHECK(out.dtype_bytes == 2);
  CHECK(out.default_ssm_dtype_bytes == 4);
  CHECK(out.struct_size == sizeof out);

  uint32_t attn = 0, mamba = 0;
  REQUIRE_OK(pdkv_model_layer_counts(m.get(), &attn, &mamba, err));
  CHECK(attn == 6);
  CHECK(mamba == 23);
  uint32_t only_mamba = 0;
  REQUIRE_OK(pdkv_model_layer_counts(m.get(), nullptr, &only_mamba, err));
  CHECK(only_mamba == 23);
}

TEST_CASE("the model copies its strings", "[capi][model]") {
  pdkv_model_desc_t d = nemotron3_nano_desc();
  std::string name = "temporary-name";
  d.name = name.c_str();
  ModelPtr m = make_model(d);
  name.assign("XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX");
  pdkv_model_desc_t out{};
  out.struct_size = sizeof out;
  REQUIRE_OK(pdkv_model_describe(m.get(), &out, err));
  CHECK(std::string(out.name) == "temporary-name");
}

TEST_CASE("NULL strings in the description become empty", "[capi][model]") {
  pdkv_model_desc_t d = nemotron3_nano_desc();
  d.name = nullptr;
  d.source = nullptr;
  d.layer_pattern = nullptr;
  ModelPtr m = make_model(d);
  pdkv_model_desc_t out{};
  out.struct_size = sizeof out;
  REQUIRE_OK(pdkv_model_describe(m.get(), &out, err));
  CHECK(std::string(out.name).empty());
  CHECK(std::string(out.layer_pattern).empty());
}

TEST_CASE("pdkv_model_new rejects NULL pointers naming the argument", "[capi][model][errors]") {
  const pdkv_model_desc_t d = nemotron3_nano_desc();
  pdkv_model_t* m = nullptr;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_model_new(nullptr, &m, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("desc"));
  r = capture([&](pdkv_error_t** err) { return pdkv_model_new(&d, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));
}

TEST_CASE("pdkv_model_new checks struct_size both ways", "[capi][model][errors]") {
  pdkv_model_desc_t d = nemotron3_nano_desc();
  pdkv_model_t* m = nullptr;
  // Below the 2.0 size (its last field, mla_head_size, cut off) and above the current size.
  for (size_t bad : {size_t{0}, offsetof(pdkv_model_desc_t, mla_head_size), sizeof(pdkv_model_desc_t) + 8}) {
    d.struct_size = bad;
    auto r = capture([&](pdkv_error_t** err) { return pdkv_model_new(&d, &m, err); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_model_desc_t") && Contains(std::to_string(bad)));
    CHECK(m == nullptr);
  }
}

TEST_CASE("pdkv_model_new rejects out-of-range enum values and bad fields", "[capi][model][errors]") {
  pdkv_model_desc_t d = nemotron3_nano_desc();
  pdkv_model_t* m = nullptr;
  d.mamba_type = 42;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_model_new(&d, &m, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("mamba_type") && Contains("42"));

  d = nemotron3_nano_desc();
  d.num_kv_heads = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_model_new(&d, &m, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("num_kv_heads"));

  d = nemotron3_nano_desc();
  d.layer_pattern = "M*X";
  r = capture([&](pdkv_error_t** err) { return pdkv_model_new(&d, &m, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("'X'"));
}

TEST_CASE("describe and layer counts reject NULL and bad sizes", "[capi][model][errors]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  pdkv_model_desc_t out{};
  out.struct_size = sizeof out;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_model_describe(nullptr, &out, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("model"));
  r = capture([&](pdkv_error_t** err) { return pdkv_model_describe(m.get(), nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  out.struct_size = sizeof out + 1;
  r = capture([&](pdkv_error_t** err) { return pdkv_model_describe(m.get(), &out, err); });
  CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
  out.struct_size = 4;
  r = capture([&](pdkv_error_t** err) { return pdkv_model_describe(m.get(), &out, err); });
  CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
  CHECK_THAT(r.message, Contains("4"));

  uint32_t n = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_model_layer_counts(nullptr, &n, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_model_layer_counts(m.get(), nullptr, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("num_attention_layers"));
  pdkv_model_free(nullptr);
}

TEST_CASE("mamba type names", "[capi][model]") {
  CHECK(std::string(pdkv_mamba_type_name(PDKV_MAMBA_MAMBA2)) == "mamba2");
  CHECK(std::string(pdkv_mamba_type_name(PDKV_MAMBA_GDN)) == "gdn");
  CHECK(std::string(pdkv_mamba_type_name(PDKV_MAMBA_KDA)) == "kda");
  CHECK(std::string(pdkv_mamba_type_name(7)) == "unknown");
  CHECK(std::string(pdkv_mamba_type_name(-1)) == "unknown");
}
