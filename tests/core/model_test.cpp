#include <gtest/gtest.h>

#include "pdkv/core/error.hpp"
#include "pdkv/core/model.hpp"

using namespace pdkv::core;

TEST(Model, DtypeNames) {
  EXPECT_EQ(dtype_bytes_from_name("bfloat16"), 2u);
  EXPECT_EQ(dtype_bytes_from_name("FP8"), 1u);
  EXPECT_EQ(dtype_bytes_from_name("float32"), 4u);
  EXPECT_EQ(dtype_bytes_from_name("auto"), 0u);
  try {
    dtype_bytes_from_name("bf17");
    FAIL() << "expected NotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::NotFound);
    EXPECT_NE(std::string(e.what()).find("bf17"), std::string::npos);
  }
}

TEST(Model, ValidateNamesField) {
  ModelDesc m;
  m.name = "x";
  m.attention.num_kv_heads = 0;
  m.attention.head_size = 128;
  try {
    validate_model(m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("num_kv_heads = 0"), std::string::npos);
  }
}

TEST(Model, LayerCounts) {
  ModelDesc m;
  m.layer_pattern = "M-M*-P";
  EXPECT_EQ(m.num_attention_layers(), 2u);
  EXPECT_EQ(m.num_mamba_layers(), 3u);
}

// The model dtype and the default SSM dtype take the sizes the engine config accepts: a 3-byte
// dtype used to pass validate_model (the old rule was 1..8) while EngineConfig refused it.
TEST(Model, DtypeBytesMustBeARealDtypeSize) {
  ModelDesc m;
  m.name = "x";
  m.attention.num_kv_heads = 2;
  m.attention.head_size = 64;
  for (uint32_t ok : {1u, 2u, 4u, 8u}) {
    m.dtype_bytes = ok;
    EXPECT_NO_THROW(validate_model(m)) << ok;
  }
  for (uint32_t bad : {0u, 3u, 5u, 6u, 7u, 16u}) {
    m.dtype_bytes = bad;
    try {
      validate_model(m);
      FAIL() << "dtype_bytes " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("dtype_bytes = " + std::to_string(bad)),
                std::string::npos)
          << e.what();
    }
  }
  m.dtype_bytes = 2;
  for (uint32_t ok : {0u, 1u, 2u, 4u, 8u}) {
    m.default_ssm_dtype_bytes = ok;
    EXPECT_NO_THROW(validate_model(m)) << ok;
  }
  for (uint32_t bad : {3u, 5u, 12u}) {
    m.default_ssm_dtype_bytes = bad;
    try {
      validate_model(m);
      FAIL() << "default_ssm_dtype_bytes " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("default_ssm_dtype_bytes = " + std::to_string(bad)),
                std::string::npos)
          << e.what();
    }
  }
}
