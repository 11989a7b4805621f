// Presets against the published config.json values collected in tests/data/published_configs.json
// (independently of presets.cpp, each model with its sources), plus the traps the
// task names (Mamba2 d_inner, SSM dtype defaults, speculative conv rows).
#include "pdkv/core/presets.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "pdkv/core/error.hpp"

using namespace pdkv::core;

namespace {

nlohmann::json published_configs() {
  const std::string path = std::string(PDKV_SOURCE_DIR) + "/tests/data/published_configs.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << " not found";
  return nlohmann::json::parse(in);
}

const nlohmann::json* find_model(const nlohmann::json& j, const std::string& name) {
  for (const auto& m : j.at("models")) {
    if (m.at("name") == name) return &m;
  }
  return nullptr;
}

size_t count(const std::string& s, char c) { return static_cast<size_t>(std::count(s.begin(), s.end(), c)); }

}  // namespace

TEST(Presets, NamesUniqueAndLookupWorks) {
  std::set<std::string> names;
  for (const auto& p : presets()) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_TRUE(names.insert(p.hf_name).second) << p.hf_name;
    EXPECT_EQ(p.model.name, p.hf_name);
    EXPECT_FALSE(p.model.source.empty()) << p.name;
    EXPECT_NO_THROW(validate_model(p.model)) << p.name;
    EXPECT_EQ(preset_model(p.name).name, p.hf_name);
    EXPECT_EQ(preset_model(p.hf_name).name, p.hf_name);
  }
  for (const char* required : {"nemotron-3-nano-30b", "nemotron-h-8b", "nemotron-nano-9b-v2", "qwen3-next-80b",
                               "qwen3.5-27b", "qwen3.5-35b-a3b", "falcon-h1-0.5b", "jamba-v0.1"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
  EXPECT_EQ(preset_model("NVIDIA/nvidia-nemotron-3-nano-30b-a3b-bf16").attention.num_kv_heads, 2u);
}

TEST(Presets, UnknownNameListsValidNames) {
  try {
    preset_model("nemotron-4");
    FAIL() << "expected NotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::NotFound);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("nemotron-4"), std::string::npos);
    for (const auto& p : presets()) EXPECT_NE(msg.find(p.name), std::string::npos) << p.name;
  }
}

TEST(Presets, MatchPublishedConfigs) {
  const auto j = published_configs();
  int matched = 0;
  for (const auto& p : presets()) {
    const auto* entry = find_model(j, p.hf_name);
    ASSERT_NE(entry, nullptr) << p.hf_name << " is not in published_configs.json";
    EXPECT_FALSE(entry->at("sources").empty()) << p.name;
    const auto& c = entry->at("config");
    ++matched;
    if (c.contains("hybrid_override_pattern")) {  // NemotronH: 'E' (MoE) and '-' (MLP) hold no cache
      std::string published = c.at("hybrid_override_pattern").get<std::string>();
      std::replace(published.begin(), published.end(), 'E', '-');
      EXPECT_EQ(p.model.layer_pattern, published) << p.name;
    }
    EXPECT_EQ(p.model.layer_pattern.size(), c.at("num_hidden_layers").get<size_t>()) << p.name;
    if (p.model.attention.use_mla) {
      EXPECT_EQ(p.model.attention.head_size,
                c.at("kv_lora_rank").get<uint32_t>() + c.at("qk_rope_head_dim").get<uint32_t>());
    } else {
      EXPECT_EQ(p.model.attention.num_kv_heads, c.at("num_key_value_heads").get<uint32_t>()) << p.name;
      const uint32_t head_dim = c.contains("head_dim")
                                    ? c.at("head_dim").get<uint32_t>()
                                    : c.at("hidden_size").get<uint32_t>() / c.at("num_attention_heads").get<uint32_t>();
      EXPECT_EQ(p.model.attention.head_size, head_dim) << p.name;
    }
    // The layer pattern and the published attention positions agree.
    std::vector<size_t> attn;
    for (size_t i = 0; i < p.model.layer_pattern.size(); ++i) {
      if (p.model.layer_pattern[i] == '*') attn.push_back(i);
    }
    for (const char* key : {"attention_layer_indices", "full_attention_layer_indices", "mla_layer_indices_0_based"}) {
      if (c.contains(key)) EXPECT_EQ(attn, c.at(key).get<std::vector<size_t>>()) << p.name << " " << key;
    }
    if (c.contains("pattern_summary")) {
      EXPECT_EQ(attn, c.at("pattern_summary").at("attention_layer_indices").get<std::vector<size_t>>()) << p.name;
      EXPECT_EQ(count(p.model.layer_pattern, 'M'), c.at("pattern_summary").at("counts").at("M").get<size_t>());
    }
    const auto& mb = p.model.mamba;
    if (c.contains("mamba_num_heads")) {
      EXPECT_EQ(mb.num_heads, c.at("mamba_num_heads").get<uint32_t>());
      EXPECT_EQ(mb.head_dim, c.at("mamba_head_dim").get<uint32_t>());
      EXPECT_EQ(mb.d_state, c.at("ssm_state_size").get<uint32_t>());
      EXPECT_EQ(mb.n_groups, c.at("n_groups").get<uint32_t>());
      EXPECT_EQ(uint64_t{mb.num_heads} * mb.head_dim, c.at("mamba_d_inner").get<uint64_t>()) << p.name;
    }
    if (c.contains("linear_num_value_heads")) {
      EXPECT_EQ(mb.num_heads, c.at("linear_num_value_heads").get<uint32_t>());
      EXPECT_EQ(mb.n_groups, c.at("linear_num_key_heads").get<uint32_t>());
      EXPECT_EQ(mb.head_dim, c.at("linear_value_head_dim").get<uint32_t>());
      EXPECT_EQ(mb.d_state, c.at("linear_key_head_dim").get<uint32_t>());
      EXPECT_EQ(mb.conv_kernel, c.at("linear_conv_kernel_dim").get<uint32_t>());
    }
  }
  EXPECT_GE(matched, 10);
}

TEST(Presets, Traps) {
  const auto nano9 = preset_model("nemotron-nano-9b-v2");
  EXPECT_EQ(uint64_t{nano9.mamba.num_heads} * nano9.mamba.head_dim, 10240u);  // not expand*hidden = 8960
  EXPECT_EQ(nano9.default_ssm_dtype_bytes, 4u);
  EXPECT_EQ(preset_model("nemotron-3-nano-30b").default_ssm_dtype_bytes, 4u);
  EXPECT_EQ(preset_model("qwen3.5-27b").default_ssm_dtype_bytes, 4u);
  EXPECT_EQ(preset_model("qwen3.5-35b-a3b").default_ssm_dtype_bytes, 4u);
  EXPECT_EQ(preset_model("qwen3-next-80b").default_ssm_dtype_bytes, 0u);  // model dtype
  EXPECT_TRUE(preset_model("nemotron-3-nano-30b").mamba.conv_rows_include_spec);
  EXPECT_TRUE(preset_model("qwen3-next-80b").mamba.conv_rows_include_spec);
  EXPECT_FALSE(preset_model("falcon-h1-0.5b").mamba.conv_rows_include_spec);
  EXPECT_FALSE(preset_model("jamba-v0.1").mamba.conv_rows_include_spec);
  const auto falcon = preset_model("falcon-h1-0.5b");
  EXPECT_EQ(falcon.mamba.n_groups, 1u);
  EXPECT_EQ(falcon.layer_pattern, std::string(36, 'P'));
  EXPECT_EQ(falcon.num_attention_layers(), 36u);
  EXPECT_EQ(falcon.num_mamba_layers(), 36u);
  const auto jamba = preset_model("jamba-v0.1");
  EXPECT_EQ(jamba.mamba.type, MambaType::Mamba1);
  EXPECT_EQ(jamba.mamba.d_inner, 8192u);
  EXPECT_EQ(jamba.num_attention_layers(), 4u);
  EXPECT_EQ(jamba.num_mamba_layers(), 28u);
  const auto kimi = preset_model("kimi-linear-48b");
  EXPECT_EQ(kimi.mamba.type, MambaType::Kda);
  EXPECT_EQ(kimi.num_mamba_layers(), 20u);
  EXPECT_EQ(kimi.num_attention_layers(), 7u);
  EXPECT_EQ(preset_model("nemotron-3-nano-30b").layer_pattern,
            "M-M-M*-M-M-M*-M-M-M*-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M-");
}
