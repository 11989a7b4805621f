// validate_engine_config: every EngineConfig field with a bounded domain is checked before any
// geometry is derived, and the error names the field and the value that was passed.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "pdkv/core/error.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/mamba_state.hpp"
#include "pdkv/core/model.hpp"
#include "test_models.hpp"

using namespace pdkv::core;
using pdkv::core::test::nemotron3_nano;

namespace {

// Status and message of a call that may throw pdkv::core::Error (Ok/"" when it does not).
std::pair<Status, std::string> outcome(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
  return {Status::Ok, ""};
}

EngineConfig tp(uint32_t n) {
  EngineConfig e;
  e.tp_size = n;
  return e;
}

// The same bad config fails the same way through validate_engine_config, derive_geometry and
// derive_mamba_state (each entry point validates; none silently accepts it).
void expect_rejected(const EngineConfig& e, const std::string& needle) {
  const ModelDesc m = nemotron3_nano();
  for (const auto& [what, call] : std::initializer_list<std::pair<const char*, std::function<void()>>>{
           {"validate_engine_config", [&] { validate_engine_config(e); }},
           {"derive_geometry", [&] { derive_geometry(m, e); }},
           {"derive_mamba_state", [&] { derive_mamba_state(m, e); }}}) {
    const auto [status, msg] = outcome(call);
    EXPECT_EQ(status, Status::InvalidArgument) << what << ": " << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << what << ": " << msg;
  }
}

}  // namespace

TEST(EngineConfigValidation, DefaultsAndBoundsAreAccepted) {
  EXPECT_NO_THROW(validate_engine_config(tp(1)));
  EngineConfig e = tp(kEngineMaxTpSize);
  e.kv_cache_dtype_bytes = 1;
  e.conv_state_dtype_bytes = 2;
  e.ssm_state_dtype_bytes = 8;
  e.num_speculative_tokens = kEngineMaxSpeculativeTokens;
  e.user_block_size = kEngineMaxUserBlockSize;
  EXPECT_NO_THROW(validate_engine_config(e));
  for (uint32_t b : {0u, 1u, 2u, 4u, 8u}) EXPECT_TRUE(is_valid_dtype_bytes(b)) << b;
  for (uint32_t b : {3u, 5u, 6u, 7u, 9u, 16u, 0xffffffffu}) EXPECT_FALSE(is_valid_dtype_bytes(b)) << b;
  // The bounds are the ones the lead asked for.
  EXPECT_EQ(kEngineMaxSpeculativeTokens, 64u);
  EXPECT_EQ(kEngineMaxUserBlockSize, 1u << 20);
  EXPECT_EQ(kEngineMaxTpSize, 1u << 16);
  // A real geometry at the speculative bound still derives (NemotronH adds the rows to conv).
  EngineConfig spec = tp(2);
  spec.num_speculative_tokens = kEngineMaxSpeculativeTokens;
  EXPECT_EQ(derive_geometry(nemotron3_nano(), spec).mamba.conv_rows, 3u + kEngineMaxSpeculativeTokens);
}

TEST(EngineConfigValidation, DtypeBytesMustBeARealDtypeSize) {
  for (uint32_t bad : {3u, 5u, 16u}) {
    EngineConfig e = tp(2);
    e.kv_cache_dtype_bytes = bad;
    expect_rejected(e, "kv_cache_dtype_bytes = " + std::to_string(bad));
    e = tp(2);
    e.conv_state_dtype_bytes = bad;
    expect_rejected(e, "conv_state_dtype_bytes = " + std::to_string(bad));
    e = tp(2);
    e.ssm_state_dtype_bytes = bad;
    expect_rejected(e, "ssm_state_dtype_bytes = " + std::to_string(bad));
  }
}

TEST(EngineConfigValidation, SpeculativeTokensBlockSizesAndTpAreBounded) {
  EngineConfig e = tp(2);
  e.num_speculative_tokens = kEngineMaxSpeculativeTokens + 1;
  expect_rejected(e, "num_speculative_tokens = 65");
  expect_rejected(e, "vLLM's practical bound");
  e.num_speculative_tokens = 0xffffffffu;
  expect_rejected(e, "num_speculative_tokens = 4294967295");

  e = tp(2);
  e.user_block_size = kEngineMaxUserBlockSize + 1;
  expect_rejected(e, "user_block_size = 1048577");

  e = tp(kEngineMaxTpSize + 1);
  expect_rejected(e, "tp_size = 65537");
  e = tp(0);
  expect_rejected(e, "tp_size 0");

  // user_mamba_block_size lives in GeometryOptions; derive_geometry bounds it too.
  GeometryOptions opt;
  opt.user_mamba_block_size = kEngineMaxUserBlockSize + 1;
  EngineConfig all = tp(2);
  all.cache_mode = MambaCacheMode::All;
  const auto [status, msg] = outcome([&] { derive_geometry(nemotron3_nano(), all, opt); });
  EXPECT_EQ(status, Status::InvalidArgument) << msg;
  EXPECT_NE(msg.find("user_mamba_block_size = 1048577"), std::string::npos) << msg;
  opt.user_mamba_block_size = kEngineMaxUserBlockSize;
  EXPECT_EQ(outcome([&] { derive_geometry(nemotron3_nano(), all, opt); }).first, Status::Ok);
}
