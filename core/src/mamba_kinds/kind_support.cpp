#include "kind_support.hpp"

#include <utility>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core::mamba_kinds {

void require_model_field(const ModelDesc& m, const char* field, uint64_t value) {
  if (value == 0) {
    fail(Status::InvalidArgument,
         "model '" + m.name + "': " + field + " = 0 must be > 0");
  }
}

void require_positive(uint64_t value, const char* what) {
  if (value == 0) fail(Status::InvalidArgument, std::string(what) + " = 0 must be > 0");
}

std::string tp_str(uint32_t tp) { return "tp_size " + std::to_string(tp); }

void require_divisible(uint64_t value, uint32_t tp, const char* what) {
  if (value % tp != 0) {
    fail(Status::HeadsNotDivisible,
         std::string(what) + " " + std::to_string(value) + " is not divisible by " + tp_str(tp) +
             " (pick a tp_size that divides " + std::to_string(value) + ")");
  }
}

void add_projection(MambaState& s, const char* name, uint64_t dim_local, uint64_t dim_total,
                    bool replicated) {
  ConvProjection p;
  p.name = name;
  p.dim_local = dim_local;
  p.dim_total = dim_total;
  p.replicated = replicated;
  p.bytes = mul_checked(mul_checked(dim_local, s.conv_rows, "conv projection bytes"),
                        s.conv_dtype_bytes, "conv projection bytes");
  p.offset = s.conv_bytes;
  s.conv_bytes = add_checked(s.conv_bytes, p.bytes, "conv state bytes");
  s.conv_dim_local = add_checked(s.conv_dim_local, dim_local, "conv_dim_local");
  s.projections.push_back(std::move(p));
}

}  // namespace pdkv::core::mamba_kinds
