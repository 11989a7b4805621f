// Shared helpers for the C API tests: capture a call's (status, message) and check the error
// object contract on every call, plus RAII owners for the C handles.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "pdkv.h"

struct CallResult {
  pdkv_status_t status;
  std::string message;
};

// Runs f(&err) and checks the convention: OK <=> err == NULL, and the error's status equals the
// returned status. Frees the error.
template <typename F>
CallResult capture(F&& f) {
  pdkv_error_t* err = reinterpret_cast<pdkv_error_t*>(0x1);  // must be reset by the library
  const pdkv_status_t st = f(&err);
  if (st == PDKV_OK) {
    REQUIRE(err == nullptr);
    return {st, ""};
  }
  REQUIRE(err != nullptr);
  REQUIRE(pdkv_error_status(err) == st);
  CallResult r{st, pdkv_error_message(err)};
  pdkv_error_free(err);
  return r;
}

#define REQUIRE_OK(expr)                                                \
  do {                                                                  \
    const CallResult ok_result_ = capture([&](pdkv_error_t** err) { return (expr); }); \
    INFO(ok_result_.message);                                           \
    REQUIRE(ok_result_.status == PDKV_OK);                              \
  } while (0)

struct ModelDeleter { void operator()(pdkv_model_t* p) const { pdkv_model_free(p); } };
struct GeometryDeleter { void operator()(pdkv_geometry_t* p) const { pdkv_geometry_free(p); } };
struct TpMappingDeleter { void operator()(pdkv_tp_mapping_t* p) const { pdkv_tp_mapping_free(p); } };
struct ReadListDeleter { void operator()(pdkv_mamba_read_list_t* p) const { pdkv_mamba_read_list_free(p); } };
using ModelPtr = std::unique_ptr<pdkv_model_t, ModelDeleter>;
using GeometryPtr = std::unique_ptr<pdkv_geometry_t, GeometryDeleter>;
using TpMappingPtr = std::unique_ptr<pdkv_tp_mapping_t, TpMappingDeleter>;
using ReadListPtr = std::unique_ptr<pdkv_mamba_read_list_t, ReadListDeleter>;

// Copies an owned list's items (pdkv_X_list_items) into a vector and frees the list.
template <typename List, typename T>
std::vector<T> take_items(List* list, pdkv_status_t (*items_fn)(const List*, const T**, size_t*, pdkv_error_t**),
                          void (*free_fn)(List*)) {
  const T* items = nullptr;
  size_t n = 0;
  const pdkv_status_t st = items_fn(list, &items, &n, nullptr);
  std::vector<T> out = (st == PDKV_OK && n > 0) ? std::vector<T>(items, items + n) : std::vector<T>{};
  free_fn(list);
  REQUIRE(st == PDKV_OK);
  REQUIRE((n == 0) == (items == nullptr));
  return out;
}
inline std::vector<uint32_t> take_u32s(pdkv_u32_list_t* l) { return take_items(l, pdkv_u32_list_items, pdkv_u32_list_free); }
inline std::vector<pdkv_byte_range_t> take_byte_ranges(pdkv_byte_range_list_t* l) {
  return take_items(l, pdkv_byte_range_list_items, pdkv_byte_range_list_free);
}
inline std::vector<pdkv_stage_pair_t> take_stage_pairs(pdkv_stage_pair_list_t* l) {
  return take_items(l, pdkv_stage_pair_list_items, pdkv_stage_pair_list_free);
}

// nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 from its published config.json (the preset's
// source in core/src/presets.cpp): K=2 KV heads of 128, Mamba2 64 heads x 64, d_state 128,
// 8 groups, conv kernel 4, chunk 128, SSM state float32 by default, 6 attention + 23 Mamba layers.
inline pdkv_model_desc_t nemotron3_nano_desc() {
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  d.name = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16";
  d.source = "huggingface config.json";
  d.num_kv_heads = 2;
  d.head_size = 128;
  d.head_size_v = 128;
  d.mamba_type = PDKV_MAMBA_MAMBA2;
  d.mamba_num_heads = 64;
  d.mamba_head_dim = 64;
  d.mamba_d_state = 128;
  d.mamba_n_groups = 8;
  d.mamba_conv_kernel = 4;
  d.mamba_chunk_size = 128;
  d.field_mask |= PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE;
  d.mamba_conv_rows_include_spec = 1;
  d.dtype_bytes = 2;
  d.default_ssm_dtype_bytes = 4;
  d.field_mask |= PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE;
  d.layer_pattern = "M-M-M*-M-M-M*-M-M-M*-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M-";
  return d;
}

inline ModelPtr make_model(const pdkv_model_desc_t& d) {
  pdkv_model_t* m = nullptr;
  REQUIRE_OK(pdkv_model_new(&d, &m, err));
  return ModelPtr(m);
}

inline pdkv_engine_config_t engine(uint32_t tp, int32_t backend = PDKV_BACKEND_FLASH_ATTN) {
  pdkv_engine_config_t c;
  REQUIRE(pdkv_engine_config_init(&c, nullptr) == PDKV_OK);
  c.tp_size = tp;
  c.attention_backend = backend;
  return c;
}

inline GeometryPtr make_geometry(const pdkv_model_t* m, const pdkv_engine_config_t& c) {
  pdkv_geometry_t* g = nullptr;
  REQUIRE_OK(pdkv_geometry_new(m, &c, &g, err));
  return GeometryPtr(g);
}

inline pdkv_geometry_info_t info_of(const pdkv_geometry_t* g) {
  pdkv_geometry_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_geometry_get_info(g, &i, err));
  return i;
}
