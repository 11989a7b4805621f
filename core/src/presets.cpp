#include "pdkv/core/presets.hpp"

#include <algorithm>
#include <cctype>

#include "pdkv/core/error.hpp"
#include "ascii_lower.hpp"

namespace pdkv::core {

namespace {

// NemotronH writes MoE layers as 'E'; for KV state they are like MLP layers ('-').
std::string nemotron_pattern(std::string p) {
  std::replace(p.begin(), p.end(), 'E', kLayerOther);
  return p;
}

// Layer i is attention when (i + 1) % interval == 0, else a linear (GDN) layer: Qwen3-Next/3.5.
std::string interval_pattern(size_t layers, size_t interval) {
  std::string p(layers, kLayerMamba);
  for (size_t i = 0; i < layers; ++i) {
    if ((i + 1) % interval == 0) p[i] = kLayerAttention;
  }
  return p;
}

// Jamba: attention when i % period == offset.
std::string period_pattern(size_t layers, size_t period, size_t offset) {
  std::string p(layers, kLayerMamba);
  for (size_t i = 0; i < layers; ++i) {
    if (i % period == offset) p[i] = kLayerAttention;
  }
  return p;
}

ModelDesc gqa(std::string name, std::string source, uint32_t kv_heads, uint32_t head_size) {
  ModelDesc m;
  m.name = std::move(name);
  m.source = std::move(source);
  m.attention.num_kv_heads = kv_heads;
  m.attention.head_size = head_size;
  m.attention.head_size_v = head_size;
  m.dtype_bytes = 2;
  return m;
}

// NemotronH Mamba2: d_inner = heads * head_dim; speculative tokens extend the conv rows;
// the SSM state defaults to float32 (vLLM #39032) unless config.json names another dtype.
void nemotron_mamba2(ModelDesc& m, uint32_t heads, uint32_t head_dim, uint32_t d_state, uint32_t groups,
                     uint32_t chunk) {
  m.mamba.type = MambaType::Mamba2;
  m.mamba.num_heads = heads;
  m.mamba.head_dim = head_dim;
  m.mamba.d_state = d_state;
  m.mamba.n_groups = groups;
  m.mamba.conv_kernel = 4;
  m.mamba.chunk_size = chunk;
  m.mamba.conv_rows_include_spec = true;
  m.default_ssm_dtype_bytes = 4;
}

// GDN: Hv value heads of dv, Hk key heads of dk; spec tokens extend the conv rows.
void gdn(ModelDesc& m, uint32_t hv, uint32_t hk, uint32_t ssm_default_bytes) {
  m.mamba.type = MambaType::Gdn;
  m.mamba.num_heads = hv;
  m.mamba.head_dim = 128;
  m.mamba.d_state = 128;
  m.mamba.n_groups = hk;
  m.mamba.conv_kernel = 4;
  m.mamba.conv_rows_include_spec = true;
  m.default_ssm_dtype_bytes = ssm_default_bytes;
}

std::vector<Preset> build_presets() {
  std::vector<Preset> out;

  {
    ModelDesc m = gqa("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                      "huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json (transformers 4.55.4), "
                      "cross-checked with vLLM tests/config/base_model_arch_groundtruth.json, "
                      "tests/v1/kv_connector/unit/test_nixl_connector_hma.py and the model's GGUF metadata; "
                      "mamba_ssm_cache_dtype float32 from the config",
                      2, 128);
    nemotron_mamba2(m, 64, 64, 128, 8, 128);
    m.layer_pattern = nemotron_pattern("MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME");
    out.push_back({"nemotron-3-nano-30b", m.name, m});
  }
  {
    ModelDesc m = gqa("nvidia/Nemotron-H-8B-Base-8K",
                      "NVIDIA-NeMo/Megatron-Bridge nemotron_h_provider.py (pattern, heads) and its NemotronH "
                      "docs (8 KV groups, KV channels 128), vLLM tests/v1/kv_connector/unit/"
                      "test_nixl_connector_hma.py (n_groups 8, conv rows 3), huggingface.co/nvidia/"
                      "Nemotron-H-8B-Base-8K config.json (conv_kernel 4, bfloat16); "
                      "mamba_ssm_cache_dtype absent -> vLLM default float32",
                      8, 128);
    nemotron_mamba2(m, 128, 64, 128, 8, 0);
    m.layer_pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
    out.push_back({"nemotron-h-8b", m.name, m});
  }
  {
    ModelDesc m = gqa("nvidia/NVIDIA-Nemotron-Nano-9B-v2",
                      "NVIDIA-NeMo/Megatron-Bridge nemotron_h_provider.py and its NemotronH docs (pattern, heads, "
                      "128x80 Mamba heads), deepinfra.com/nvidia/NVIDIA-Nemotron-Nano-9B-v2 (bfloat16); "
                      "d_inner 10240 = 128*80, not expand*hidden; SSM float32 by vLLM default (vLLM issue "
                      "#24280's 672 tokens used a 16-bit SSM state)",
                      8, 128);
    nemotron_mamba2(m, 128, 80, 128, 8, 0);
    m.layer_pattern = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-";
    out.push_back({"nemotron-nano-9b-v2", m.name, m});
  }
  {
    ModelDesc m = gqa("Qwen/Qwen3-Next-80B-A3B-Instruct",
                      "huggingface/transformers configuration_qwen3_next.py defaults (documented for this "
                      "checkpoint), the huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct model card, vLLM "
                      "tests/config/base_model_arch_groundtruth.json, Megatron-Bridge test_qwen3_next_bridge.py, "
                      "llama.cpp PR #16095 (GGUF metadata); no mamba_ssm_dtype hook -> SSM state in the model "
                      "dtype",
                      2, 256);
    gdn(m, 32, 16, 0);
    m.layer_pattern = interval_pattern(48, 4);
    out.push_back({"qwen3-next-80b", m.name, m});
  }
  {
    ModelDesc m = gqa("Qwen/Qwen3.5-27B",
                      "NVIDIA-NeMo/Megatron-Bridge test_qwen35_bridge.py (huggingface.co/Qwen/Qwen3.5-27B "
                      "text_config incl. mamba_ssm_dtype float32), THUDM/slime scripts/models/qwen3.5-27B.sh "
                      "(head_dim 256), vLLM tests/v1/kv_connector/unit/test_nixl_connector_hma.py (48 value "
                      "heads); SSM dtype from text_config since vLLM PR #34200",
                      4, 256);
    gdn(m, 48, 16, 4);
    m.layer_pattern = interval_pattern(64, 4);
    out.push_back({"qwen3.5-27b", m.name, m});
  }
  {
    ModelDesc m = gqa("Qwen/Qwen3.5-35B-A3B",
                      "vLLM vllm/transformers_utils/configs/qwen3_5_moe.py (Qwen3_5MoeTextConfig defaults), the "
                      "huggingface.co/Qwen/Qwen3.6-35B-A3B model card (same architecture), a third-party check of "
                      "this checkpoint's config.json text_config; SSM float32 (vllm-ascend issue #7393: 262144 B "
                      "SSM page at TP8)",
                      2, 256);
    gdn(m, 32, 16, 4);
    m.layer_pattern = interval_pattern(40, 4);
    out.push_back({"qwen3.5-35b-a3b", m.name, m});
  }
  {
    ModelDesc m = gqa("Qwen/Qwen3.5-397B-A17B",
                      "NVIDIA-NeMo/Megatron-Bridge test_qwen35_bridge.py (Qwen3.5-397B-A17B config fixture), "
                      "huggingface.co/Qwen/Qwen3.5-397B-A17B config.json text_config as quoted by a third party "
                      "(head_dim 256); SSM float32",
                      2, 256);
    gdn(m, 64, 16, 4);
    m.layer_pattern = interval_pattern(60, 4);
    out.push_back({"qwen3.5-397b-a17b", m.name, m});
  }
  {
    ModelDesc m = gqa("tiiuae/Falcon-H1-0.5B-Instruct",
                      "huggingface/transformers docs model_doc/falcon_h1.md (architecture table), "
                      "NVIDIA-NeMo/Megatron-Bridge test_falcon_h1_bridge.py (this checkpoint's config, n_groups 1); "
                      "mamba_d_ssm 1536 = 24*64; every layer has attention and Mamba2 (parallel hybrid)",
                      2, 64);
    m.mamba.type = MambaType::Mamba2;
    m.mamba.num_heads = 24;
    m.mamba.head_dim = 64;
    m.mamba.d_state = 128;
    m.mamba.n_groups = 1;
    m.mamba.conv_kernel = 4;
    m.mamba.conv_rows_include_spec = false;  // Falcon-H1 passes no num_spec to the conv shape
    m.layer_pattern = std::string(36, kLayerParallel);
    out.push_back({"falcon-h1-0.5b", m.name, m});
  }
  {
    ModelDesc m = gqa("ai21labs/Jamba-v0.1",
                      "huggingface/transformers configuration_jamba.py (defaults documented as similar to this "
                      "checkpoint: 32 layers, attn period 8 offset 4, 8 KV heads, head_dim 4096/32), llama.cpp "
                      "PR #7531 (GGUF tensor shapes: d_inner 8192, d_state 16, d_conv 4); torch_dtype not "
                      "published: bfloat16 assumed",
                      8, 128);
    m.mamba.type = MambaType::Mamba1;
    m.mamba.d_inner = 8192;
    m.mamba.d_state = 16;
    m.mamba.conv_kernel = 4;
    m.mamba.conv_rows_include_spec = false;  // Mamba1 passes no num_spec
    m.layer_pattern = period_pattern(32, 8, 4);
    out.push_back({"jamba-v0.1", m.name, m});
  }
  {
    // Described so it can be rejected clearly (KDA has no transfer split rule in pdkv).
    ModelDesc m;
    m.name = "moonshotai/Kimi-Linear-48B-A3B-Instruct";
    m.source = "huggingface.co/Firworks/Kimi-Linear-48B-A3B-Instruct-nvfp4 config.json (a quantised derivative "
               "with this checkpoint's architecture keys), the MoonshotAI/Kimi-Linear README; MLA latent "
               "512 + rope 64 = 576; KDA 32 heads of 128, short conv 4, recurrent state always float32";
    m.attention.num_kv_heads = 1;
    m.attention.head_size = 576;
    m.attention.head_size_v = 0;
    m.attention.use_mla = true;
    m.dtype_bytes = 2;
    m.mamba.type = MambaType::Kda;
    m.mamba.num_heads = 32;
    m.mamba.head_dim = 128;
    m.mamba.d_state = 128;
    m.mamba.conv_kernel = 4;
    m.mamba.conv_rows_include_spec = true;
    m.default_ssm_dtype_bytes = 4;
    m.layer_pattern = interval_pattern(27, 4);
    m.layer_pattern[26] = kLayerAttention;  // full_attn_layers (1-based) 4, 8, ..., 24, 27
    out.push_back({"kimi-linear-48b", m.name, m});
  }
  return out;
}


}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = build_presets();
  return kPresets;
}

ModelDesc preset_model(std::string_view name) {
  const std::string n = ascii_lower(name);
  std::string valid;
  for (const auto& p : presets()) {
    if (n == p.name || n == ascii_lower(p.hf_name)) return p.model;
    valid += (valid.empty() ? "" : ", ") + p.name;
  }
  fail(Status::NotFound, "unknown model preset '" + std::string(name) + "' (valid: " + valid +
                             "; or pass a Hugging Face config.json)");
}

}  // namespace pdkv::core
