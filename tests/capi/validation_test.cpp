// Input validation at the C boundary: engine config fields out of their domain, 0/1 flags that
// are neither, and a directory passed as a config.json path. Each error names the field (or
// path) and the value that was passed.
#include <string>

#include "capi_helpers.hpp"

namespace {

CallResult geometry_status(const pdkv_engine_config_t& c) {
  const ModelPtr m = make_model(nemotron3_nano_desc());
  pdkv_geometry_t* g = nullptr;
  const CallResult r = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
  pdkv_geometry_free(g);
  return r;
}

void require_invalid(const CallResult& r, const std::string& needle) {
  INFO(r.message);
  REQUIRE(r.status == PDKV_ERR_INVALID_ARGUMENT);
  REQUIRE(r.message.find(needle) != std::string::npos);
}

pdkv_tp_mapping_params_t mapping_params() {
  pdkv_tp_mapping_params_t p{};
  p.struct_size = sizeof p;
  p.local_tp_size = 2;
  p.local_tp_rank = 0;
  p.remote_tp_size = 4;
  p.total_kv_heads = 2;
  return p;
}

CallResult mapping_status(const pdkv_tp_mapping_params_t& p) {
  pdkv_tp_mapping_t* out = nullptr;
  const CallResult r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_new(&p, &out, err); });
  pdkv_tp_mapping_free(out);
  return r;
}

CallResult model_status(const pdkv_model_desc_t& d) {
  pdkv_model_t* out = nullptr;
  const CallResult r = capture([&](pdkv_error_t** err) { return pdkv_model_new(&d, &out, err); });
  pdkv_model_free(out);
  return r;
}

}  // namespace

TEST_CASE("engine config: dtype byte sizes must be 1, 2, 4 or 8 when set (unset: auto)", "[validation]") {
  constexpr uint64_t kDtypes =
      PDKV_CONFIG_FIELD_KV_CACHE_DTYPE | PDKV_CONFIG_FIELD_CONV_STATE_DTYPE | PDKV_CONFIG_FIELD_SSM_STATE_DTYPE;
  for (uint32_t ok : {1u, 2u, 4u, 8u}) {
    pdkv_engine_config_t c = engine(2);
    c.field_mask |= kDtypes;
    c.kv_cache_dtype_bytes = ok;
    c.conv_state_dtype_bytes = ok;
    c.ssm_state_dtype_bytes = ok;
    INFO(ok);
    REQUIRE(geometry_status(c).status == PDKV_OK);
  }
  {
    // Unset: auto, whatever the bytes hold.
    pdkv_engine_config_t c = engine(2);
    c.kv_cache_dtype_bytes = 3;
    c.conv_state_dtype_bytes = 6;
    c.ssm_state_dtype_bytes = 16;
    REQUIRE(geometry_status(c).status == PDKV_OK);
    // Set to 0: refused (0 is no "auto" marker any more).
    c = engine(2);
    c.field_mask |= PDKV_CONFIG_FIELD_KV_CACHE_DTYPE;
    require_invalid(geometry_status(c), "kv_cache_dtype_bytes = 0 with PDKV_CONFIG_FIELD_KV_CACHE_DTYPE set");
  }
  pdkv_engine_config_t c = engine(2);
  c.kv_cache_dtype_bytes = 3;
  c.field_mask |= PDKV_CONFIG_FIELD_KV_CACHE_DTYPE;
  require_invalid(geometry_status(c), "kv_cache_dtype_bytes = 3");
  c = engine(2);
  c.conv_state_dtype_bytes = 6;
  c.field_mask |= PDKV_CONFIG_FIELD_CONV_STATE_DTYPE;
  require_invalid(geometry_status(c), "conv_state_dtype_bytes = 6");
  c = engine(2);
  c.ssm_state_dtype_bytes = 16;
  c.field_mask |= PDKV_CONFIG_FIELD_SSM_STATE_DTYPE;
  require_invalid(geometry_status(c), "ssm_state_dtype_bytes = 16");
}

TEST_CASE("engine config: speculative tokens, block sizes and TP are bounded", "[validation]") {
  pdkv_engine_config_t c = engine(2);
  c.num_speculative_tokens = 64;
  REQUIRE(geometry_status(c).status == PDKV_OK);
  c.num_speculative_tokens = 65;
  const CallResult spec = geometry_status(c);
  require_invalid(spec, "num_speculative_tokens = 65");
  require_invalid(spec, "64");

  c = engine(2);
  c.user_block_size = (1u << 20) + 1;
  c.field_mask |= PDKV_CONFIG_FIELD_BLOCK_SIZE;
  require_invalid(geometry_status(c), "user_block_size = 1048577");

  c = engine(2);
  c.mamba_cache_mode = PDKV_MAMBA_CACHE_ALL;
  c.user_mamba_block_size = (1u << 20) + 1;
  c.field_mask |= PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE;
  require_invalid(geometry_status(c), "user_mamba_block_size = 1048577");

  c = engine((1u << 16) + 1);
  require_invalid(geometry_status(c), "tp_size = 65537");
}

TEST_CASE("tp mapping params: use_mla and has_mamba must be 0 or 1", "[validation]") {
  pdkv_tp_mapping_params_t p = mapping_params();
  REQUIRE(mapping_status(p).status == PDKV_OK);
  p.has_mamba = 1;
  REQUIRE(mapping_status(p).status == PDKV_OK);
  p.has_mamba = 2;
  require_invalid(mapping_status(p), "pdkv_tp_mapping_params_t.has_mamba = 2");
  p = mapping_params();
  p.use_mla = 255;
  require_invalid(mapping_status(p), "pdkv_tp_mapping_params_t.use_mla = 255");
}

TEST_CASE("model desc: use_mla and mamba_conv_rows_include_spec must be 0 or 1", "[validation]") {
  pdkv_model_desc_t d = nemotron3_nano_desc();
  REQUIRE(model_status(d).status == PDKV_OK);
  d.use_mla = 2;
  require_invalid(model_status(d), "pdkv_model_desc_t.use_mla = 2");
  d = nemotron3_nano_desc();
  d.mamba_conv_rows_include_spec = 7;
  require_invalid(model_status(d), "pdkv_model_desc_t.mamba_conv_rows_include_spec = 7");
}

TEST_CASE("config.json path: a directory is IO naming the path, not PARSE", "[validation]") {
  const std::string dir = std::string(PDKV_SOURCE_DIR) + "/tests/data/hf_configs";
  pdkv_model_t* out = nullptr;
  const CallResult r =
      capture([&](pdkv_error_t** err) { return pdkv_model_from_hf_config_file(dir.c_str(), nullptr, &out, err); });
  INFO(r.message);
  REQUIRE(r.status == PDKV_ERR_IO);
  REQUIRE(r.message.find("'" + dir + "'") != std::string::npos);
  REQUIRE(r.message.find("directory") != std::string::npos);
  REQUIRE(out == nullptr);
  // The file inside it still loads.
  const std::string file = dir + "/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json";
  REQUIRE_OK(pdkv_model_from_hf_config_file(file.c_str(), nullptr, &out, err));
  pdkv_model_free(out);
}
