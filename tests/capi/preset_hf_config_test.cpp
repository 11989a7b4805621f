// Models from presets and from Hugging Face config.json (file and memory).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

namespace {

// Nemotron-3-Nano-30B's published config.json, reduced to the keys pdkv reads.
const char* kNemotronNanoConfig = R"({
  "_name_or_path": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
  "model_type": "nemotron_h",
  "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
  "hidden_size": 2688, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
  "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
  "conv_kernel": 4, "chunk_size": 128, "mamba_ssm_cache_dtype": "float32", "torch_dtype": "bfloat16"
})";

std::string temp_path(const char* stem) {
  return (std::filesystem::temp_directory_path() / "pdkv-capi-").string() + stem + "-" + std::to_string(::getpid()) + ".json";
}

pdkv_geometry_info_t tp2_info(const pdkv_model_t* m) {
  GeometryPtr g = make_geometry(m, engine(2));
  return info_of(g.get());
}

}  // namespace

TEST_CASE("presets enumerate with unique names and sources", "[capi][preset]") {
  const size_t n = pdkv_preset_count();
  REQUIRE(n >= 5);
  std::set<std::string> names;
  bool has_nano = false;
  for (size_t i = 0; i < n; ++i) {
    const char *name = nullptr, *hf = nullptr, *source = nullptr;
    REQUIRE_OK(pdkv_preset_at(i, &name, &hf, &source, err));
    REQUIRE(name != nullptr);
    REQUIRE(hf != nullptr);
    REQUIRE(source != nullptr);
    CHECK(std::string(source).size() > 0);
    CHECK(names.insert(name).second);
    has_nano = has_nano || std::string(name) == "nemotron-3-nano-30b";
    // Every preset builds a model whose name is the HF id.
    pdkv_model_t* m = nullptr;
    REQUIRE_OK(pdkv_model_from_preset(name, &m, err));
    ModelPtr owned(m);
    pdkv_model_desc_t d{};
    d.struct_size = sizeof d;
    REQUIRE_OK(pdkv_model_describe(m, &d, err));
    CHECK(std::string(d.name) == hf);
  }
  CHECK(has_nano);
  const char* only_name = nullptr;
  REQUIRE_OK(pdkv_preset_at(0, &only_name, nullptr, nullptr, err));
  CHECK(only_name != nullptr);

  auto r = capture([&](pdkv_error_t** err) { return pdkv_preset_at(n, nullptr, nullptr, nullptr, err); });
  CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
  CHECK_THAT(r.message, Contains(std::to_string(n)));
}

TEST_CASE("the Nemotron-3-Nano preset gives the worked TP2 numbers", "[capi][preset][geometry]") {
  for (const char* name : {"nemotron-3-nano-30b", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"}) {
    pdkv_model_t* m = nullptr;
    REQUIRE_OK(pdkv_model_from_preset(name, &m, err));
    ModelPtr owned(m);
    const pdkv_geometry_info_t i = tp2_info(m);
    CHECK(i.conv_bytes == 18432);
    CHECK(i.ssm_bytes == 1048576);
    CHECK(i.block_size == 2096);
  }
}

TEST_CASE("unknown presets and NULL arguments", "[capi][preset][errors]") {
  pdkv_model_t* m = nullptr;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_model_from_preset("no-such-model-7b", &m, err); });
  CHECK(r.status == PDKV_ERR_NOT_FOUND);
  CHECK_THAT(r.message, Contains("no-such-model-7b"));
  CHECK(m == nullptr);
  r = capture([&](pdkv_error_t** err) { return pdkv_model_from_preset(nullptr, &m, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("name"));
  r = capture([&](pdkv_error_t** err) { return pdkv_model_from_preset("nemotron-3-nano-30b", nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));
}

TEST_CASE("a config.json file gives the same geometry as the preset", "[capi][hf_config]") {
  const std::string path = temp_path("nano");
  {
    std::ofstream f(path);
    f << kNemotronNanoConfig;
  }
  pdkv_model_t* m = nullptr;
  const CallResult r = capture([&](pdkv_error_t** err) { return pdkv_model_from_hf_config_file(path.c_str(), nullptr, &m, err); });
  std::remove(path.c_str());
  INFO(r.message);
  REQUIRE(r.status == PDKV_OK);
  ModelPtr owned(m);
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  REQUIRE_OK(pdkv_model_describe(m, &d, err));
  CHECK(std::string(d.name) == "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16");
  CHECK(d.mamba_type == PDKV_MAMBA_MAMBA2);
  const pdkv_geometry_info_t i = tp2_info(m);
  CHECK(i.conv_bytes == 18432);
  CHECK(i.ssm_bytes == 1048576);
  CHECK(i.block_size == 2096);
}

TEST_CASE("config.json from memory, with an explicit name", "[capi][hf_config]") {
  const std::string text = kNemotronNanoConfig;
  pdkv_model_t* m = nullptr;
  REQUIRE_OK(pdkv_model_from_hf_config_json(text.data(), text.size(), "my-nano", &m, err));
  ModelPtr owned(m);
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  REQUIRE_OK(pdkv_model_describe(m, &d, err));
  CHECK(std::string(d.name) == "my-nano");
  uint32_t attn = 0, mamba = 0;
  REQUIRE_OK(pdkv_model_layer_counts(m, &attn, &mamba, err));
  CHECK(attn == 6);
  CHECK(mamba == 23);
}

TEST_CASE("config.json errors: missing file, malformed JSON, missing key, NULLs", "[capi][hf_config][errors]") {
  pdkv_model_t* m = nullptr;
  const std::string missing = "/nonexistent/dir/config-" + std::to_string(::getpid()) + ".json";
  auto r = capture([&](pdkv_error_t** err) { return pdkv_model_from_hf_config_file(missing.c_str(), nullptr, &m, err); });
  CHECK(r.status == PDKV_ERR_IO);
  CHECK_THAT(r.message, Contains(missing));
  CHECK(m == nullptr);

  const std::string bad = "{\"model_type\": \"nemotron_h\", ";
  r = capture([&](pdkv_error_t** err) { return pdkv_model_from_hf_config_json(bad.data(), bad.size(), nullptr, &m, err); });
  CHECK(r.status == PDKV_ERR_PARSE);

  const std::string no_heads = R"({"model_type": "nemotron_h", "torch_dtype": "bfloat16"})";
  r = capture([&](pdkv_error_t** err) {
    return pdkv_model_from_hf_config_json(no_heads.data(), no_heads.size(), nullptr, &m, err);
  });
  CHECK(r.status == PDKV_ERR_NOT_FOUND);
  CHECK_THAT(r.message, Contains("missing key"));

  r = capture([&](pdkv_error_t** err) { return pdkv_model_from_hf_config_file(nullptr, nullptr, &m, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("path"));
  r = capture([&](pdkv_error_t** err) { return pdkv_model_from_hf_config_file("x.json", nullptr, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));
  r = capture([&](pdkv_error_t** err) { return pdkv_model_from_hf_config_json(nullptr, 0, nullptr, &m, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("json"));
  r = capture([&](pdkv_error_t** err) { return pdkv_model_from_hf_config_json("{}", 2, nullptr, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
}
