// Shared helpers for the core tests (header-only: every tests/core/*_test.cpp is its own
// executable). Real models come from the built-in presets; the builders below are for synthetic
// models (shapes no preset has) that the tests need to reach a rule or an error path.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_state.hpp"
#include "pdkv/core/model.hpp"
#include "pdkv/core/presets.hpp"

namespace pdkv::core::test {

// --- real models (presets.cpp, from the published config.json values) ----------------------

/// NVIDIA-Nemotron-3-Nano-30B-A3B: Mamba2 64 heads x 64, d_state 128, 8 groups, fp32 SSM default.
inline ModelDesc nemotron3_nano() { return preset_model("nemotron-3-nano-30b"); }
/// Nemotron-H-8B: Mamba2 128 heads x 64, d_state 128, 8 groups, fp32 SSM default.
inline ModelDesc nemotron_h_8b() { return preset_model("nemotron-h-8b"); }
/// Falcon-H1-0.5B: Mamba2 24 heads x 64, d_state 128, one group, no spec rows in the conv state.
inline ModelDesc falcon_h1_05b() { return preset_model("falcon-h1-0.5b"); }
/// Qwen3-Next-80B: GDN 32 value heads, 16 key heads, SSM state in the model dtype.
inline ModelDesc qwen3_next() { return preset_model("qwen3-next-80b"); }
/// Qwen3.5-27B: GDN 48 value heads, 16 key heads, fp32 SSM default.
inline ModelDesc qwen35_27b() { return preset_model("qwen3.5-27b"); }
/// Jamba-v0.1: Mamba1 d_inner 8192, d_state 16.
inline ModelDesc jamba() { return preset_model("jamba-v0.1"); }

// --- synthetic models -----------------------------------------------------------------------

/// A Mamba-only Mamba2 model: conv kernel 4, 2-byte dtype, the given SSM default dtype bytes and
/// whether speculative tokens extend the conv rows.
inline ModelDesc mamba2_model(const char* name, uint32_t heads, uint32_t head_dim, uint32_t d_state,
                              uint32_t n_groups, uint32_t ssm_default_bytes = 0,
                              bool conv_rows_include_spec = false) {
  ModelDesc m;
  m.name = name;
  m.mamba.type = MambaType::Mamba2;
  m.mamba.num_heads = heads;
  m.mamba.head_dim = head_dim;
  m.mamba.d_state = d_state;
  m.mamba.n_groups = n_groups;
  m.mamba.conv_kernel = 4;
  m.mamba.conv_rows_include_spec = conv_rows_include_spec;
  m.dtype_bytes = 2;
  m.default_ssm_dtype_bytes = ssm_default_bytes;
  return m;
}

/// A Mamba-only GDN model: hv value heads and hk key heads of 128, conv kernel 4, 2-byte dtype.
inline ModelDesc gdn_model(const char* name, uint32_t hv, uint32_t hk, uint32_t ssm_default_bytes = 0,
                           bool conv_rows_include_spec = false) {
  ModelDesc m;
  m.name = name;
  m.mamba.type = MambaType::Gdn;
  m.mamba.num_heads = hv;
  m.mamba.head_dim = 128;
  m.mamba.n_groups = hk;
  m.mamba.d_state = 128;
  m.mamba.conv_kernel = 4;
  m.mamba.conv_rows_include_spec = conv_rows_include_spec;
  m.dtype_bytes = 2;
  m.default_ssm_dtype_bytes = ssm_default_bytes;
  return m;
}

// --- engines and states ---------------------------------------------------------------------

/// An engine config with every setting at its default but the TP size.
inline EngineConfig tp_config(uint32_t tp) {
  EngineConfig e;
  e.tp_size = tp;
  return e;
}

/// The per-rank Mamba state of `m` on a default engine of TP size `tp`.
inline MambaState mamba_state_at(const ModelDesc& m, uint32_t tp) {
  return derive_mamba_state(m, tp_config(tp));
}

// --- errors ---------------------------------------------------------------------------------

/// Runs f and returns the status of the pdkv Error it throws (Ok when it throws none); the
/// message goes to *msg when msg is given.
template <class F>
Status status_of(F&& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return Status::Ok;
}

/// Runs fn, expects an Error with `status` whose message contains every needle.
template <class Fn>
void expect_error(Fn&& fn, Status status, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected " << status_name(status);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' lacks '" << n << "'";
    }
  }
}

}  // namespace pdkv::core::test
