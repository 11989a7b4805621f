// config.json parsing: the published configs under tests/data/hf_configs parse to exactly the
// presets, and every error path names the offending key and origin.
#include "pdkv/core/hf_config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pdkv/core/error.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/presets.hpp"

using namespace pdkv::core;

namespace {

std::string read_config(const std::string& file) {
  std::ifstream in(std::string(PDKV_SOURCE_DIR) + "/tests/data/hf_configs/" + file);
  EXPECT_TRUE(in.good()) << file;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Everything but name/source must equal the preset.
void expect_same_geometry_inputs(const ModelDesc& a, const ModelDesc& b, const std::string& what) {
  EXPECT_EQ(a.attention.num_kv_heads, b.attention.num_kv_heads) << what;
  EXPECT_EQ(a.attention.head_size, b.attention.head_size) << what;
  EXPECT_EQ(a.attention.head_size_v, b.attention.head_size_v) << what;
  EXPECT_EQ(a.attention.use_mla, b.attention.use_mla) << what;
  EXPECT_EQ(a.attention.sliding_window, b.attention.sliding_window) << what;
  EXPECT_EQ(a.mamba.type, b.mamba.type) << what;
  EXPECT_EQ(a.mamba.num_heads, b.mamba.num_heads) << what;
  EXPECT_EQ(a.mamba.head_dim, b.mamba.head_dim) << what;
  EXPECT_EQ(a.mamba.d_state, b.mamba.d_state) << what;
  EXPECT_EQ(a.mamba.n_groups, b.mamba.n_groups) << what;
  EXPECT_EQ(a.mamba.d_inner, b.mamba.d_inner) << what;
  EXPECT_EQ(a.mamba.conv_kernel, b.mamba.conv_kernel) << what;
  EXPECT_EQ(a.mamba.chunk_size, b.mamba.chunk_size) << what;
  EXPECT_EQ(a.mamba.conv_rows_include_spec, b.mamba.conv_rows_include_spec) << what;
  EXPECT_EQ(a.dtype_bytes, b.dtype_bytes) << what;
  EXPECT_EQ(a.default_ssm_dtype_bytes, b.default_ssm_dtype_bytes) << what;
  EXPECT_EQ(a.layer_pattern, b.layer_pattern) << what;
}

Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return Error(Status::Ok, "no error");
}

}  // namespace

TEST(HfConfig, PublishedConfigsEqualPresets) {
  const std::pair<const char*, const char*> cases[] = {
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", "nemotron-3-nano-30b"},
      {"Nemotron-H-8B-Base-8K.json", "nemotron-h-8b"},
      {"NVIDIA-Nemotron-Nano-9B-v2.json", "nemotron-nano-9b-v2"},
      {"Qwen3-Next-80B-A3B-Instruct.json", "qwen3-next-80b"},
      {"Qwen3.5-27B.json", "qwen3.5-27b"},
      {"Qwen3.5-35B-A3B.json", "qwen3.5-35b-a3b"},
      {"Qwen3.5-397B-A17B.json", "qwen3.5-397b-a17b"},
      {"Falcon-H1-0.5B-Instruct.json", "falcon-h1-0.5b"},
      {"Jamba-v0.1.json", "jamba-v0.1"},
      {"Kimi-Linear-48B-A3B-Instruct.json", "kimi-linear-48b"},
  };
  for (const auto& [file, preset] : cases) {
    const ModelDesc parsed = model_from_hf_config(read_config(file), file);
    expect_same_geometry_inputs(parsed, preset_model(preset), file);
    EXPECT_EQ(parsed.name, file);  // no _name_or_path: the origin names it
  }
}

TEST(HfConfig, ParsedNemotronGivesTheWorkedExample) {
  const ModelDesc m = model_from_hf_config(read_config("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"), "n3");
  EngineConfig e;
  e.tp_size = 2;
  const auto g = derive_geometry(m, e);
  EXPECT_EQ(g.mamba.conv_bytes, 18432u);
  EXPECT_EQ(g.mamba.ssm_bytes, 1048576u);
  EXPECT_EQ(g.block_size, 2096u);
}

TEST(HfConfig, SsmDtypeKeys) {
  std::string n3 = read_config("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json");
  const auto pos = n3.find("\"float32\"");
  ASSERT_NE(pos, std::string::npos);
  std::string bf16 = n3;
  bf16.replace(pos, 9, "\"bfloat16\"");
  EXPECT_EQ(model_from_hf_config(bf16, "x").default_ssm_dtype_bytes, 2u);
  // Absent key: vLLM's float32 default for NemotronH.
  auto j = nlohmann::json::parse(n3);
  j.erase("mamba_ssm_cache_dtype");
  EXPECT_EQ(model_from_hf_config(j.dump(), "x").default_ssm_dtype_bytes, 4u);
}

TEST(HfConfig, GraniteLayerTypesAndPureAttention) {
  // Synthetic Granite-4.0-H-like config (the published values lack mamba_n_heads/d_head/groups).
  nlohmann::json g = {{"model_type", "granitemoehybrid"}, {"num_hidden_layers", 4}, {"hidden_size", 4096},
                      {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"mamba_n_heads", 128},
                      {"mamba_d_head", 64}, {"mamba_d_state", 128}, {"mamba_n_groups", 1}, {"mamba_d_conv", 4},
                      {"mamba_expand", 2}, {"torch_dtype", "bfloat16"},
                      {"layer_types", {"mamba", "mamba", "attention", "mamba"}}};
  const ModelDesc m = model_from_hf_config(g.dump(), "granite");
  EXPECT_EQ(m.layer_pattern, "MM*M");
  EXPECT_EQ(m.attention.head_size, 128u);
  EXPECT_EQ(m.mamba.type, MambaType::Mamba2);
  EXPECT_FALSE(m.mamba.conv_rows_include_spec);
  g["mamba_expand"] = 1;  // 4096 != 128*64
  const Error e = error_of([&] { model_from_hf_config(g.dump(), "granite"); });
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("4096"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("8192"), std::string::npos);

  nlohmann::json llama = {{"model_type", "llama"}, {"num_hidden_layers", 32}, {"hidden_size", 4096},
                          {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"torch_dtype", "float16"}};
  const ModelDesc l = model_from_hf_config(llama.dump(), "llama");
  EXPECT_FALSE(l.is_hybrid());
  EXPECT_EQ(l.attention.num_kv_heads, 8u);
  EXPECT_EQ(l.attention.head_size, 128u);
  EXPECT_EQ(l.layer_pattern, std::string(32, '*'));
  llama["torch_dtype"] = "float32";  // served in 16 bits under --dtype auto
  EXPECT_EQ(model_from_hf_config(llama.dump(), "llama").dtype_bytes, 2u);
  nlohmann::json ds = {{"model_type", "deepseek_v3"}, {"num_hidden_layers", 2}, {"kv_lora_rank", 512},
                       {"qk_rope_head_dim", 64}, {"torch_dtype", "bfloat16"}};
  const ModelDesc d = model_from_hf_config(ds.dump(), "ds");
  EXPECT_TRUE(d.attention.use_mla);
  EXPECT_EQ(d.attention.head_size, 576u);
}

TEST(HfConfig, KimiIsDescribedThenRejected) {
  const ModelDesc m = model_from_hf_config(read_config("Kimi-Linear-48B-A3B-Instruct.json"), "kimi");
  EngineConfig e;
  EXPECT_EQ(error_of([&] { derive_geometry(m, e); }).status(), Status::UnsupportedMambaType);
}

TEST(HfConfig, Errors) {
  Error e = error_of([] { model_from_hf_config("{\"model_type\": \"llama\",, }", "bad.json"); });
  EXPECT_EQ(e.status(), Status::Parse);
  EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("byte 24"), std::string::npos) << e.what();

  e = error_of([] { model_from_hf_config("[1,2]", "arr.json"); });
  EXPECT_EQ(e.status(), Status::Parse);

  e = error_of([] { model_from_hf_config("{}", "empty.json"); });
  EXPECT_EQ(e.status(), Status::NotFound);
  EXPECT_NE(std::string(e.what()).find("'model_type' in empty.json"), std::string::npos) << e.what();

  auto j = nlohmann::json::parse(read_config("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"));
  j.erase("mamba_head_dim");
  e = error_of([&] { model_from_hf_config(j.dump(), "n3.json"); });
  EXPECT_EQ(e.status(), Status::NotFound);
  EXPECT_NE(std::string(e.what()).find("'mamba_head_dim' in n3.json"), std::string::npos) << e.what();

  j["mamba_head_dim"] = "64";
  e = error_of([&] { model_from_hf_config(j.dump(), "n3.json"); });
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("mamba_head_dim"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("\"64\""), std::string::npos) << e.what();

  j["mamba_head_dim"] = -1;
  e = error_of([&] { model_from_hf_config(j.dump(), "n3.json"); });
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("-1"), std::string::npos) << e.what();

  j["mamba_head_dim"] = 64;
  j["hybrid_override_pattern"] = "MX*";
  e = error_of([&] { model_from_hf_config(j.dump(), "n3.json"); });
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("'X'"), std::string::npos) << e.what();

  j["hybrid_override_pattern"] = "M*";
  j["torch_dtype"] = "bfloat17";
  e = error_of([&] { model_from_hf_config(j.dump(), "n3.json"); });
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("bfloat17"), std::string::npos) << e.what();

  auto q = nlohmann::json::parse(read_config("Qwen3.5-27B.json"));
  q["text_config"].erase("linear_num_key_heads");
  e = error_of([&] { model_from_hf_config(q.dump(), "q35.json"); });
  EXPECT_EQ(e.status(), Status::NotFound);
  EXPECT_NE(std::string(e.what()).find("'text_config.linear_num_key_heads' in q35.json"), std::string::npos)
      << e.what();

  auto f = nlohmann::json::parse(read_config("Falcon-H1-0.5B-Instruct.json"));
  f.erase("mamba_d_ssm");  // expand*hidden = 2048 != 24*64 = 1536
  e = error_of([&] { model_from_hf_config(f.dump(), "falcon.json"); });
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("2048"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("1536"), std::string::npos) << e.what();
}

// Unknown model types are read as pure attention only when nothing in the config describes SSM
// or linear-attention layers; otherwise the Mamba state would silently vanish from the plan.
TEST(HfConfig, UnknownModelTypeWithSsmKeysIsRejected) {
  // Bamba-like: Mamba2 keys plus attn_layer_indices.
  const std::string bamba = R"({"model_type": "bamba", "num_hidden_layers": 32, "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 8, "attn_layer_indices": [9, 18, 27],
      "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1,
      "mamba_d_conv": 4, "mamba_expand": 2, "torch_dtype": "bfloat16"})";
  Error e = error_of([&] { model_from_hf_config(bamba, "bamba.json"); });
  EXPECT_EQ(e.status(), Status::UnsupportedMambaType) << e.what();
  const std::string bm = e.what();
  EXPECT_NE(bm.find("'bamba'"), std::string::npos) << bm;
  EXPECT_NE(bm.find("bamba.json"), std::string::npos) << bm;
  EXPECT_NE(bm.find("'attn_layer_indices'"), std::string::npos) << bm;  // first evidence key (sorted)
  EXPECT_NE(bm.find("nemotron_h"), std::string::npos) << bm;           // lists the supported types
  EXPECT_NE(bm.find("granitemoehybrid"), std::string::npos) << bm;

  // Zamba2-like: mamba_* keys and layers_block_type.
  const std::string zamba2 = R"({"model_type": "zamba2", "num_hidden_layers": 4, "hidden_size": 2560,
      "num_attention_heads": 32, "num_key_value_heads": 32, "mamba_d_state": 64, "mamba_d_conv": 4,
      "mamba_expand": 2, "mamba_ngroups": 1, "mamba_headdim": 64,
      "layers_block_type": ["mamba", "hybrid", "mamba", "mamba"]})";
  e = error_of([&] { model_from_hf_config(zamba2, "zamba2.json"); });
  EXPECT_EQ(e.status(), Status::UnsupportedMambaType) << e.what();
  EXPECT_NE(std::string(e.what()).find("'zamba2'"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("'layers_block_type'"), std::string::npos) << e.what();

  // Each single giveaway key is enough on an otherwise pure-attention config.
  const nlohmann::json llama = {{"model_type", "some_new_arch"}, {"num_hidden_layers", 2}, {"hidden_size", 1024},
                                {"num_attention_heads", 8}, {"num_key_value_heads", 8}};
  EXPECT_NO_THROW(model_from_hf_config(llama.dump(), "plain.json"));
  const std::pair<const char*, nlohmann::json> giveaways[] = {
      {"ssm_state_size", 128},       {"linear_num_value_heads", 32}, {"conv_kernel", 4},
      {"hybrid_override_pattern", "M*"}, {"n_groups", 8},           {"time_step_rank", 160},
      {"mamba_d_state", 16},         {"attn_layer_indices", {1}},    {"state_size", 16}};
  for (const auto& [key, value] : giveaways) {
    nlohmann::json j = llama;
    j[key] = value;
    e = error_of([&] { model_from_hf_config(j.dump(), "g.json"); });
    EXPECT_EQ(e.status(), Status::UnsupportedMambaType) << key;
    EXPECT_NE(std::string(e.what()).find(std::string("'") + key + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'some_new_arch'"), std::string::npos) << e.what();
  }

  // layer_types: attention kinds pass (gpt-oss, gemma), anything else is a giveaway.
  nlohmann::json lt = llama;
  lt["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_NO_THROW(model_from_hf_config(lt.dump(), "lt.json"));
  lt["layer_types"] = {"full_attention", "linear_attention"};
  e = error_of([&] { model_from_hf_config(lt.dump(), "lt.json"); });
  EXPECT_EQ(e.status(), Status::UnsupportedMambaType);
  EXPECT_NE(std::string(e.what()).find("'layer_types[1]' = \"linear_attention\" in lt.json"), std::string::npos) << e.what();
  lt["layer_types"] = {"full_attention", "conv"};
  EXPECT_EQ(error_of([&] { model_from_hf_config(lt.dump(), "lt.json"); }).status(), Status::UnsupportedMambaType);

  // Keys under text_config count too.
  nlohmann::json wrapped = llama;
  wrapped["text_config"] = {{"mamba_n_heads", 8}};
  e = error_of([&] { model_from_hf_config(wrapped.dump(), "w.json"); });
  EXPECT_EQ(e.status(), Status::UnsupportedMambaType);
  EXPECT_NE(std::string(e.what()).find("'text_config.mamba_n_heads'"), std::string::npos) << e.what();
}

TEST(HfConfig, MissingModelTypeIsNamedFirst) {
  // A Mamba config without model_type: the error names model_type, not some later key.
  const std::string no_type = R"({"mamba_n_heads": 128, "hidden_size": 4096, "ssm_state_size": 128})";
  const Error e = error_of([&] { model_from_hf_config(no_type, "nt.json"); });
  EXPECT_EQ(e.status(), Status::NotFound);
  EXPECT_NE(std::string(e.what()).find("'model_type' in nt.json"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("mamba"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("hidden_size"), std::string::npos) << e.what();
}

// mamba_expand * hidden_size must be an exact positive integer before it becomes a size: a
// static_cast of a negative, huge, non-finite or fractional double is UB or truncates.
TEST(HfConfig, MambaExpandIsValidated) {
  auto granite = nlohmann::json{{"model_type", "granitemoehybrid"}, {"num_hidden_layers", 2}, {"hidden_size", 4096},
                                {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"mamba_n_heads", 128},
                                {"mamba_d_head", 64}, {"mamba_d_state", 128}, {"mamba_n_groups", 1},
                                {"mamba_d_conv", 4}, {"torch_dtype", "bfloat16"}, {"layer_types", {"mamba", "attention"}}};
  auto falcon = nlohmann::json::parse(read_config("Falcon-H1-0.5B-Instruct.json"));
  falcon.erase("mamba_d_ssm");  // forces the expand * hidden path
  const uint32_t falcon_hidden = falcon.at("hidden_size").get<uint32_t>();
  // Falcon: 24 heads * 64 = 1536 = 1.5 * 1024.
  ASSERT_EQ(falcon_hidden, 1024u);
  falcon["mamba_expand"] = 1.5;
  EXPECT_EQ(model_from_hf_config(falcon.dump(), "falcon.json").mamba.num_heads, 24u);
  granite["mamba_expand"] = 2.0;  // 8192 = 128 * 64, written as a float
  EXPECT_EQ(model_from_hf_config(granite.dump(), "granite.json").layer_pattern, "M*");

  struct Bad {
    const char* text;  // mamba_expand as written in the JSON
    const char* shown;
  };
  const Bad bads[] = {{"-2", "-2"}, {"-0.5", "-0.5"}, {"0", "0"}, {"1e300", "1e+300"},
                      {"1e20", "1e+20"}, {"2.0001", "2.0001"}, {"1.00000001", "1.00000001"}};
  for (const char* which : {"granite", "falcon"}) {
    for (const auto& b : bads) {
      nlohmann::json j = std::string(which) == "granite" ? granite : falcon;
      j["mamba_expand"] = nlohmann::json::parse(b.text);
      const Error e = error_of([&] { model_from_hf_config(j.dump(), "cfg.json"); });
      EXPECT_EQ(e.status(), Status::InvalidArgument) << which << " " << b.text << ": " << e.what();
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'mamba_expand' in cfg.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("= ") + b.shown), std::string::npos) << msg;
      EXPECT_NE(msg.find("finite positive integer"), std::string::npos) << msg;
    }
  }
  // A non-finite value cannot come from JSON text: a 1e400 literal overflows while parsing.
  nlohmann::json inf = granite;
  const std::string text = inf.dump();
  std::string with_inf = text;
  const std::string key = "\"mamba_expand\":2.0";
  const auto pos = with_inf.find(key);
  ASSERT_NE(pos, std::string::npos) << with_inf;
  with_inf.replace(pos, key.size(), "\"mamba_expand\":1e400");
  // nlohmann refuses it (out_of_range.406): a Parse error naming the origin, never a foreign exception.
  const Error e = error_of([&] { model_from_hf_config(with_inf, "inf.json"); });
  EXPECT_EQ(e.status(), Status::Parse) << e.what();
  EXPECT_NE(std::string(e.what()).find("inf.json"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("1e400"), std::string::npos) << e.what();
}
