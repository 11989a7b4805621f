// Per-rank Mamba state derivation (docs/hybrid-geometry.md §1): the steps every kind shares
// (conv rows, dtypes, the page totals). The kind-specific sharding rules live in the kind's
// module (core/src/mamba_kinds/). Everything downstream (page sizes, block sizes, the transfer
// reads) is computed from the MambaState built here.
#include "pdkv/core/mamba_state.hpp"

#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_kind.hpp"

namespace pdkv::core {

namespace {

void require_positive(uint64_t value, const char* what) {
  if (value == 0) fail(Status::InvalidArgument, std::string(what) + " = 0 must be > 0");
}

}  // namespace

MambaState derive_mamba_state(const ModelDesc& m, const EngineConfig& e) {
  const MambaDesc& mb = m.mamba;
  const MambaKind& kind = mamba_kind(mb.type);
  if (!kind.transferable()) {
    fail(Status::UnsupportedMambaType,
         std::string("model '") + m.name + "': mamba type '" + kind.name() +
             "' has no conv-state split rule (supported: " + transferable_mamba_kind_names() + ")");
  }
  if (e.conv_layout != ConvLayout::DS) {
    fail(Status::UnsupportedLayout,
         "conv state layout SD is not supported: the 3-read Mamba transfer needs each projection "
         "contiguous; set the conv state layout to DS (vLLM: VLLM_SSM_CONV_STATE_LAYOUT=DS)");
  }
  validate_engine_config(e);
  require_positive(mb.conv_kernel, "mamba.conv_kernel");
  if (mb.conv_kernel < 2) {
    fail(Status::InvalidArgument,
         "mamba.conv_kernel " + std::to_string(mb.conv_kernel) + " must be >= 2");
  }

  MambaState s;
  s.type = mb.type;
  s.tp_size = e.tp_size;
  s.conv_rows = mb.conv_kernel - 1u;
  if (mb.conv_rows_include_spec) {
    s.conv_rows = add_checked(s.conv_rows, e.num_speculative_tokens, "conv rows");
  }
  s.conv_dtype_bytes = resolved_conv_dtype_bytes(m, e);
  s.ssm_dtype_bytes = resolved_ssm_dtype_bytes(m, e);
  require_positive(s.conv_dtype_bytes, "conv state dtype bytes");
  require_positive(s.ssm_dtype_bytes, "ssm state dtype bytes");

  kind.derive_state(mb, s);  // the kind's projections and temporal shape

  uint64_t elems = 1;
  for (uint64_t d : s.temporal_shape) elems = mul_checked(elems, d, "ssm state elements");
  s.ssm_bytes = mul_checked(elems, s.ssm_dtype_bytes, "ssm state bytes");
  add_checked(s.conv_bytes, s.ssm_bytes, "mamba page bytes");  // page_bytes() must not wrap
  return s;
}

}  // namespace pdkv::core
