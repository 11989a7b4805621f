// The Mamba kind modules (core/src/mamba_kinds/) behind one interface: the registry matches the
// enum, every kind answers for itself, and what a kind declares (projection count, which
// projections may be copies, its sharding unit) agrees with the state it derives.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_kind.hpp"
#include "pdkv/core/presets.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using namespace pdkv::core::test;

namespace {

std::vector<MambaType> all_types() {
  std::vector<MambaType> out;
  for (int32_t v = 0; v <= static_cast<int32_t>(last_mamba_type()); ++v) {
    out.push_back(static_cast<MambaType>(v));
  }
  return out;
}

// A metadata record that passes every check but the one under test (Nemotron-3-Nano-like, TP2).
EngineMetadata valid_hybrid_metadata() {
  EngineMetadata m;
  m.engine_id = "prefill-0";
  m.tp_size = 2;
  m.kernel_block_size = 16;
  m.physical_blocks_per_logical = 261;
  m.logical_block_size = 16 * 261;
  m.num_kernel_blocks = 261 * 100;
  m.mamba_type = MambaType::Mamba2;
  m.conv_projection_bytes = {12288, 3072, 3072};
  m.conv_bytes = 18432;
  m.ssm_bytes = 1048576;
  m.attention_bytes_per_token = 256;
  m.total_kv_heads = 2;
  MetadataRegion r;
  r.region = {uint64_t{1} << 32, 4096, m.num_kernel_blocks};
  r.kind = RegionKind::Attention;
  m.regions.push_back(r);
  return m;
}

}  // namespace

TEST(MambaKind, RegistryCoversEveryEnumValueInOrderWithUniqueNames) {
  EXPECT_EQ(last_mamba_type(), MambaType::Kda);  // a new kind must be registered
  std::set<std::string> names;
  for (MambaType t : all_types()) {
    const MambaKind& k = mamba_kind(t);
    EXPECT_EQ(k.type(), t) << static_cast<int>(t);
    EXPECT_STREQ(mamba_type_name(t), k.name());
    EXPECT_TRUE(names.insert(k.name()).second) << k.name();
  }
  EXPECT_STREQ(mamba_type_name(static_cast<MambaType>(99)), "unknown");
}

TEST(MambaKind, AValueOutsideTheEnumIsRefusedNamingIt) {
  std::string msg;
  EXPECT_EQ(status_of([] { mamba_kind(static_cast<MambaType>(7)); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("7"), std::string::npos) << msg;
  EXPECT_EQ(status_of([] { mamba_kind(static_cast<MambaType>(-1)); }, &msg), Status::InvalidArgument);
  EXPECT_FALSE(is_transferable_mamba_type(static_cast<MambaType>(7)));
  EXPECT_FALSE(is_transferable_mamba_type(static_cast<MambaType>(-1)));
}

TEST(MambaKind, TransferableKindsAreExactlyThoseWithASplitRule) {
  EXPECT_EQ(transferable_mamba_kind_names(), "mamba1, mamba2, gdn");
  for (MambaType t : all_types()) {
    const MambaKind& k = mamba_kind(t);
    EXPECT_EQ(is_transferable_mamba_type(t), k.transferable()) << k.name();
    EXPECT_EQ(k.conv_projection_count() > 0, k.transferable()) << k.name();
    if (!k.transferable()) {
      MambaState s;
      std::string msg;
      EXPECT_EQ(status_of([&] { k.derive_state(MambaDesc{}, s); }, &msg), Status::UnsupportedMambaType);
      EXPECT_NE(msg.find(k.name()), std::string::npos) << msg;
    }
  }
}

// For every preset hybrid and every TP it can run at: the kind's declared projection count,
// replication and sharding unit describe the state it derived.
TEST(MambaKind, DeclarationsAgreeWithTheDerivedStateOfEveryPreset) {
  int checked = 0;
  for (const Preset& p : presets()) {
    const MambaKind& k = mamba_kind(p.model.mamba.type);
    if (!k.transferable()) continue;
    for (uint32_t tp : {1u, 2u, 4u, 8u, 16u}) {
      MambaState s;
      if (status_of([&] { s = derive_mamba_state(p.model, tp_config(tp)); }) != Status::Ok) continue;
      ASSERT_EQ(s.projections.size(), k.conv_projection_count()) << p.name;
      for (size_t i = 0; i < s.projections.size(); ++i) {
        const ConvProjection& proj = s.projections[i];
        if (proj.replicated) EXPECT_TRUE(k.projection_may_replicate(i)) << p.name << " " << proj.name;
        const uint64_t unit = k.split_unit_channels(s, i);
        ASSERT_GT(unit, 0u);
        EXPECT_EQ(proj.dim_local % unit, 0u) << p.name << " tp " << tp << " " << proj.name;
        EXPECT_EQ(proj.dim_total % unit, 0u) << p.name << " tp " << tp << " " << proj.name;
        // A shard holds total/tp channels; a copy holds whole units of the total.
        if (!proj.replicated) EXPECT_EQ(proj.dim_local * tp, proj.dim_total) << p.name << " " << proj.name;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
}

// Mamba2 with fewer groups than ranks: B and C become copies of one group, which is the case the
// kind declares and the handshake relies on.
TEST(MambaKind, Mamba2GroupsFewerThanRanksAreCopiesOfOneGroup) {
  // Only a one-group model runs with fewer groups than ranks (vLLM's MambaMixer2 asserts it).
  const ModelDesc m = mamba2_model("g1", 64, 64, 128, 1);
  const MambaState s = mamba_state_at(m, 8);
  const MambaKind& k = mamba_kind(MambaType::Mamba2);
  EXPECT_FALSE(s.projections[0].replicated);
  EXPECT_TRUE(s.projections[1].replicated);
  EXPECT_TRUE(s.projections[2].replicated);
  EXPECT_FALSE(k.projection_may_replicate(0));
  EXPECT_EQ(k.split_unit_channels(s, 1), 128u);  // one group of d_state channels
  EXPECT_EQ(s.projections[1].dim_local, 128u);
}

TEST(MambaKind, ValidateNamesTheMissingFieldOfTheKind) {
  ModelDesc m = mamba2_model("no-groups", 64, 64, 128, 0);
  std::string msg;
  EXPECT_EQ(status_of([&] { mamba_kind(MambaType::Mamba2).validate(m); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("mamba.n_groups = 0"), std::string::npos) << msg;
  ModelDesc j = jamba();
  j.mamba.d_inner = 0;
  EXPECT_EQ(status_of([&] { mamba_kind(MambaType::Mamba1).validate(j); }, &msg), Status::InvalidArgument);
  EXPECT_NE(msg.find("mamba.d_inner = 0"), std::string::npos) << msg;
}

TEST(MambaKind, ConfigKeySetsNameDistinctKeys) {
  for (const MambaConfigKeys* keys :
       {&kMamba2NemotronHKeys, &kMamba2MambaPrefixedKeys, &kGdnQwenKeys, &kMamba1JambaKeys}) {
    std::set<std::string> seen;
    for (const char* key : {keys->num_heads, keys->head_dim, keys->d_state, keys->n_groups,
                            keys->conv_kernel, keys->chunk_size}) {
      if (key != nullptr) EXPECT_TRUE(seen.insert(key).second) << key;
    }
    EXPECT_NE(keys->conv_kernel, nullptr);
    EXPECT_NE(keys->d_state, nullptr);
  }
}

// The metadata decoder asks the kind how many projections a page holds.
TEST(MambaKind, MetadataValidationUsesTheKindsProjectionCount) {
  std::string base_msg;
  EXPECT_EQ(status_of([] { check_metadata(valid_hybrid_metadata(), Status::InvalidArgument); }, &base_msg), Status::Ok) << base_msg;
  for (MambaType t : {MambaType::Mamba1, MambaType::Mamba2, MambaType::Gdn}) {
    EngineMetadata md = valid_hybrid_metadata();
    md.mamba_type = t;
    md.conv_projection_bytes.assign(mamba_kind(t).conv_projection_count() + 1, 64);
    std::string msg;
    status_of([&] { check_metadata(md, Status::InvalidArgument); }, &msg);
    EXPECT_NE(msg.find(std::string(mamba_kind(t).name()) + " needs " +
                       std::to_string(mamba_kind(t).conv_projection_count())),
              std::string::npos)
        << msg;
  }
}
