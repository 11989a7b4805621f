// metadata_from_geometry: the metadata an engine advertises satisfies check_metadata's kernel
// page rule (every region's block_len == kernel_block_size * attention_bytes_per_token) for every
// preset (hybrids, MLA, pure attention), TP size, Mamba cache mode and kernel block choice.
#include <gtest/gtest.h>

#include <string>

#include "pdkv/core/error.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"

using namespace pdkv::core;

namespace {

// The presets are hybrids; pure attention GQA (Llama-3-8B-like) and MLA (DeepSeek-V3-like:
// one latent head of kv_lora_rank 512 + rope 64) cover the other two model kinds.
std::vector<Preset> models() {
  std::vector<Preset> out = presets();
  ModelDesc gqa;
  gqa.name = "gqa";
  gqa.attention.num_kv_heads = 8;
  gqa.attention.head_size = 128;
  gqa.attention.head_size_v = 128;
  gqa.layer_pattern = "**";
  out.push_back({"gqa", "gqa", gqa});
  ModelDesc mla;
  mla.name = "mla";
  mla.attention.num_kv_heads = 1;
  mla.attention.head_size = 576;
  mla.attention.head_size_v = 0;
  mla.attention.use_mla = true;
  mla.layer_pattern = "**";
  out.push_back({"mla", "mla", mla});
  ModelDesc mla_hybrid = mla;  // MLA attention with Mamba2 layers (block alignment 128, #50000)
  mla_hybrid.name = "mla-hybrid";
  mla_hybrid.mamba = preset_model("nemotron-3-nano-30b").mamba;
  mla_hybrid.default_ssm_dtype_bytes = 4;
  mla_hybrid.layer_pattern = "M*";
  out.push_back({"mla-hybrid", "mla-hybrid", mla_hybrid});
  return out;
}

}  // namespace

TEST(MetadataFromGeometry, KernelPageIsKernelBlockTimesAttentionBytesForEveryPreset) {
  size_t built = 0, hybrids = 0, mla = 0, attention = 0;
  for (const Preset& p : models()) {
    for (uint32_t tp : {1u, 2u, 4u, 8u}) {
      for (MambaCacheMode mode : {MambaCacheMode::None, MambaCacheMode::Align, MambaCacheMode::All}) {
        if (!p.model.is_hybrid() && mode != MambaCacheMode::None) continue;
        for (bool explicit_kernels : {false, true}) {
          EngineConfig e;
          e.tp_size = tp;
          e.cache_mode = mode;
          if (explicit_kernels) e.kernel_block_sizes = {16, 32, 64};  // ppl > 1
          EngineGeometry g;
          try {
            g = derive_geometry(p.model, e);
          } catch (const Error&) {
            continue;  // TP does not fit the model's heads / groups, or an unsupported Mamba type
          }
          SCOPED_TRACE(p.name + " tp" + std::to_string(tp) + " mode " +
                       std::to_string(static_cast<int>(mode)) + (explicit_kernels ? " kernels" : ""));
          const EngineMetadata md = metadata_from_geometry(p.model, e, g, {"e", 0, 4, 3, 1ull << 40});
          for (const MetadataRegion& r : md.regions) {
            EXPECT_EQ(r.region.block_len,
                      uint64_t{md.kernel_block_size} * md.attention_bytes_per_token);
          }
          EXPECT_NO_THROW(check_metadata(md, Status::Parse));
          EXPECT_EQ(decode(encode(md)), md);
          ++built;
          if (md.is_hybrid()) ++hybrids;
          if (md.use_mla) ++mla;
          if (!md.is_hybrid() && !md.use_mla) ++attention;
        }
      }
    }
  }
  EXPECT_GT(built, 50u);
  EXPECT_GT(hybrids, 20u);
  EXPECT_GT(mla, 2u);
  EXPECT_GT(attention, 2u);
}
