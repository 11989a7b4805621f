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
