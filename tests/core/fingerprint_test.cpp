// Model fingerprint: stable across processes and versions (pinned value, cross-computed with an
// independent FNV-1a implementation), blind to name/source, sensitive to every geometry field.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "pdkv/core/fingerprint.hpp"

using namespace pdkv::core;

namespace {

// NVIDIA-Nemotron-3-Nano-30B-A3B geometry (its published config.json): K=2 head 128, Mamba2
// 64x64 heads, d_state 128, 8 groups, conv kernel 4, fp32 SSM default.
ModelDesc nemotron_nano() {
  ModelDesc m;
  m.name = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16";
  m.source = "config.json";
  m.attention.num_kv_heads = 2;
  m.attention.head_size = 128;
  m.attention.head_size_v = 128;
  m.mamba.type = MambaType::Mamba2;
  m.mamba.num_heads = 64;
  m.mamba.head_dim = 64;
  m.mamba.d_state = 128;
  m.mamba.n_groups = 8;
  m.mamba.conv_kernel = 4;
  m.mamba.conv_rows_include_spec = true;
  m.dtype_bytes = 2;
  m.default_ssm_dtype_bytes = 4;
  m.layer_pattern = "M-M-M*-";
  return m;
}

}  // namespace

// Pinned: the fingerprint crosses the wire between pdkv builds, so any change to it must be a
// deliberate kFingerprintVersion bump. Value cross-checked with a separate Python FNV-1a
// over the same canonical byte string.
TEST(Fingerprint, PinnedValues) {
  EXPECT_EQ(kFingerprintVersion, 1u);
  EXPECT_EQ(model_fingerprint(ModelDesc{}), 0x49585a86f1e62066ull);
  EXPECT_EQ(model_fingerprint(nemotron_nano()), 0x85f1d3f73a3e02c8ull);
}

TEST(Fingerprint, IgnoresNameAndSource) {
  ModelDesc a = nemotron_nano();
  ModelDesc b = a;
  b.name = "someone/nemotron-finetune";
  b.source = "a different upload";
  EXPECT_EQ(model_fingerprint(a), model_fingerprint(b));
}

// Every geometry field must move the hash; otherwise two different models would handshake.
TEST(Fingerprint, EveryGeometryFieldChangesIt) {
  const std::vector<std::pair<const char*, std::function<void(ModelDesc&)>>> edits = {
      {"num_kv_heads", [](ModelDesc& m) { m.attention.num_kv_heads = 4; }},
      {"head_size", [](ModelDesc& m) { m.attention.head_size = 64; }},
      {"head_size_v", [](ModelDesc& m) { m.attention.head_size_v = 64; }},
      {"use_mla", [](ModelDesc& m) { m.attention.use_mla = true; }},
      {"sliding_window", [](ModelDesc& m) { m.attention.sliding_window = 4096; }},
      {"mamba.type", [](ModelDesc& m) { m.mamba.type = MambaType::Gdn; }},
      {"mamba.num_heads", [](ModelDesc& m) { m.mamba.num_heads = 128; }},
      {"mamba.head_dim", [](ModelDesc& m) { m.mamba.head_dim = 80; }},
      {"mamba.d_state", [](ModelDesc& m) { m.mamba.d_state = 64; }},
      {"mamba.n_groups", [](ModelDesc& m) { m.mamba.n_groups = 1; }},
      {"mamba.d_inner", [](ModelDesc& m) { m.mamba.d_inner = 8192; }},
      {"mamba.conv_kernel", [](ModelDesc& m) { m.mamba.conv_kernel = 3; }},
      {"mamba.chunk_size", [](ModelDesc& m) { m.mamba.chunk_size = 256; }},
      {"conv_rows_include_spec", [](ModelDesc& m) { m.mamba.conv_rows_include_spec = false; }},
      {"dtype_bytes", [](ModelDesc& m) { m.dtype_bytes = 4; }},
      {"default_ssm_dtype_bytes", [](ModelDesc& m) { m.default_ssm_dtype_bytes = 2; }},
      {"layer_pattern", [](ModelDesc& m) { m.layer_pattern = "M-M-*M-"; }},
  };
  std::set<uint64_t> seen = {model_fingerprint(nemotron_nano())};
  for (const auto& [name, edit] : edits) {
    ModelDesc m = nemotron_nano();
    edit(m);
    EXPECT_TRUE(seen.insert(model_fingerprint(m)).second) << name << " did not change the hash";
  }
}

// The layer pattern is length-prefixed: moving a char between it and the next field is visible.
TEST(Fingerprint, LayerPatternLengthMatters) {
  ModelDesc a;
  ModelDesc b;
  a.layer_pattern = "M";
  b.layer_pattern = "M-";
  EXPECT_NE(model_fingerprint(a), model_fingerprint(b));
}
