// Model handles: construction from the C description struct, and describing one back.
#include <cstring>
#include <limits>

#include "boundary.hpp"
#include "model_geometry_handles.hpp"
#include "plan_handles.hpp"
#include "struct_sizes.hpp"
#include "pdkv/core/model.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
using pdkv::capi::require_struct_size;
namespace core = pdkv::core;

namespace {

// The C enum and the core's kind registry must end at the same kind: a kind added to one and not
// the other would be refused here or misread there.
static_assert(PDKV_MAMBA_KDA == static_cast<int32_t>(core::MambaType::Kda), "mamba type enums drifted");

core::MambaType mamba_type_from_c(int32_t v) {
  if (v < PDKV_MAMBA_NONE || v > PDKV_MAMBA_KDA) {
    core::fail(core::Status::InvalidArgument,
               "pdkv_model_desc_t.mamba_type = " + std::to_string(v) +
                   " is not a pdkv_mamba_type_t value (expected " +
                   std::to_string(PDKV_MAMBA_NONE) + ".." + std::to_string(PDKV_MAMBA_KDA) + ")");
  }
  return static_cast<core::MambaType>(v);
}

std::string str_or_empty(const char* s) { return s != nullptr ? std::string(s) : std::string(); }

core::ModelDesc model_from_c(const pdkv_model_desc_t& d) {
  core::ModelDesc m;
  m.name = str_or_empty(d.name);
  m.source = str_or_empty(d.source);
  m.attention.num_kv_heads = d.num_kv_heads;
  m.attention.head_size = d.head_size;
  m.attention.head_size_v = d.head_size_v;
  m.attention.use_mla = pdkv::capi::flag_from_c(d.use_mla, "pdkv_model_desc_t.use_mla");
  m.attention.sliding_window = d.sliding_window;
  m.mamba.type = mamba_type_from_c(d.mamba_type);
  m.mamba.num_heads = d.mamba_num_heads;
  m.mamba.head_dim = d.mamba_head_dim;
  m.mamba.d_state = d.mamba_d_state;
  m.mamba.n_groups = d.mamba_n_groups;
  m.mamba.d_inner = d.mamba_d_inner;
  m.mamba.conv_kernel = d.mamba_conv_kernel;
  // Unset optional fields are the core's 0 ("2048", "the conv dtype"); a set one must be non-zero.
  const auto optional = [&](uint64_t bit, uint32_t v, const char* field, const char* bit_name) -> uint32_t {
    if ((d.field_mask & bit) == 0) return 0;
    if (v == 0) {
      core::fail(core::Status::InvalidArgument, std::string("pdkv_model_desc_t.") + field + " = 0 with " + bit_name +
                                                    " set: set a value, or leave the bit unset for the default");
    }
    return v;
  };
  m.mamba.chunk_size = optional(PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE, d.mamba_chunk_size, "mamba_chunk_size",
                                "PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE");
  m.mamba.conv_rows_include_spec =
      pdkv::capi::flag_from_c(d.mamba_conv_rows_include_spec, "pdkv_model_desc_t.mamba_conv_rows_include_spec");
  m.dtype_bytes = d.dtype_bytes;
  m.default_ssm_dtype_bytes = optional(PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE, d.default_ssm_dtype_bytes,
                                       "default_ssm_dtype_bytes", "PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE");
  m.layer_pattern = str_or_empty(d.layer_pattern);
  m.mla_head_size = d.mla_head_size;
  return m;
}

// Writes the description into a full-size local struct, then copies only the caller's prefix,
// so an older (smaller) caller struct is never written past its end. field_mask receives the bits
// of the optional fields the model has (an unset one is written as 0).
void model_to_c(const core::ModelDesc& m, pdkv_model_desc_t* out) {
  pdkv_model_desc_t full{};
  full.struct_size = out->struct_size;
  full.name = m.name.c_str();
  full.source = m.source.c_str();
  full.num_kv_heads = m.attention.num_kv_heads;
  full.head_size = m.attention.head_size;
  full.head_size_v = m.attention.head_size_v;
  full.use_mla = m.attention.use_mla ? 1 : 0;
  full.sliding_window = m.attention.sliding_window;
  full.mamba_type = static_cast<int32_t>(m.mamba.type);
  full.mamba_num_heads = m.mamba.num_heads;
  full.mamba_head_dim = m.mamba.head_dim;
  full.mamba_d_state = m.mamba.d_state;
  full.mamba_n_groups = m.mamba.n_groups;
  full.mamba_d_inner = m.mamba.d_inner;
  full.mamba_conv_kernel = m.mamba.conv_kernel;
  full.mamba_chunk_size = m.mamba.chunk_size;
  if (m.mamba.chunk_size != 0) full.field_mask |= PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE;
  if (m.default_ssm_dtype_bytes != 0) full.field_mask |= PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE;
  full.mamba_conv_rows_include_spec = m.mamba.conv_rows_include_spec ? 1 : 0;
  full.dtype_bytes = m.dtype_bytes;
  full.default_ssm_dtype_bytes = m.default_ssm_dtype_bytes;
  full.layer_pattern = m.layer_pattern.c_str();
  full.mla_head_size = m.mla_head_size;
  std::memcpy(out, &full, out->struct_size);
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_model_new(const pdkv_model_desc_t* desc, pdkv_model_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(desc, "desc");
    require_non_null(out, "out");
    *out = nullptr;
    core::ModelDesc m =
        model_from_c(pdkv::capi::read_options(*desc, pdkv::capi::kModelDescMinSize, "pdkv_model_desc_t",
                                              PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE | PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE));
    core::validate_model(m);
    *out = new pdkv_model{std::move(m)};
  });
}

PDKV_API pdkv_status_t pdkv_model_describe(const pdkv_model_t* model, pdkv_model_desc_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(model, "model");
    require_non_null(out, "out");
    require_struct_size(out->struct_size, pdkv::capi::kModelDescMinSize, sizeof(pdkv_model_desc_t),
                        "pdkv_model_desc_t");
    model_to_c(model->desc, out);
  });
}

PDKV_API pdkv_status_t pdkv_model_layer_counts(const pdkv_model_t* model, uint32_t* num_attention_layers,
                                               uint32_t* num_mamba_layers, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(model, "model");
    if (num_attention_layers == nullptr && num_mamba_layers == nullptr) {
      core::fail(core::Status::NullPointer, "num_attention_layers and num_mamba_layers are both NULL");
    }
    if (num_attention_layers != nullptr) *num_attention_layers = model->desc.num_attention_layers();
    if (num_mamba_layers != nullptr) *num_mamba_layers = model->desc.num_mamba_layers();
  });
}

PDKV_API void pdkv_model_free(pdkv_model_t* model) { delete model; }

PDKV_API const char* pdkv_mamba_type_name(int32_t mamba_type) {
  if (mamba_type < PDKV_MAMBA_NONE || mamba_type > PDKV_MAMBA_KDA) return "unknown";
  return core::mamba_type_name(static_cast<core::MambaType>(mamba_type));
}

}  // extern "C"
