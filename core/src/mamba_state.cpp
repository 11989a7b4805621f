// Per-rank Mamba state derivation (hybrid-geometry.md §2.1). Everything downstream (page sizes,
// block sizes, the transfer reads) is computed from the MambaState built here, so the sharding
// rules live in exactly one place.
#include "pdkv/core/mamba_state.hpp"

#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

namespace {

std::string tp_str(uint32_t tp) { return "tp_size " + std::to_string(tp); }

// Fails with HeadsNotDivisible unless `value` is a multiple of `tp`; names both values.
void require_divisible(uint64_t value, uint32_t tp, const char* what) {
  if (value % tp != 0) {
    fail(Status::HeadsNotDivisible,
         std::string(what) + " " + std::to_string(value) + " is not divisible by " + tp_str(tp) +
             " (pick a tp_size that divides " + std::to_string(value) + ")");
  }
}

void require_positive(uint64_t value, const char* what) {
  if (value == 0) fail(Status::InvalidArgument, std::string(what) + " = 0 must be > 0");
}

// Adds one projection at the end of the page, keeping the DS layout contiguous.
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

void derive_mamba1(const MambaDesc& mb, MambaState& s) {
  require_positive(mb.d_inner, "mamba.d_inner");
  require_positive(mb.d_state, "mamba.d_state");
  require_divisible(mb.d_inner, s.tp_size, "mamba d_inner");
  const uint64_t inner_local = mb.d_inner / s.tp_size;
  add_projection(s, "x", inner_local, mb.d_inner, false);
  s.temporal_shape = {inner_local, mb.d_state};
}

void derive_mamba2(const MambaDesc& mb, MambaState& s) {
  require_positive(mb.num_heads, "mamba.num_heads");
  require_positive(mb.head_dim, "mamba.head_dim");
  require_positive(mb.d_state, "mamba.d_state");
  require_positive(mb.n_groups, "mamba.n_groups");
  const uint32_t tp = s.tp_size;
  require_divisible(mb.num_heads, tp, "mamba num_heads");
  // B and C: sharded when the groups split evenly; otherwise each rank keeps a copy of the one
  // group its heads belong to (vLLM's extra_groups_for_head_shards: G' = TP). Any other ratio
  // would put heads of two groups on one rank, which vLLM cannot lay out either.
  uint64_t groups_local = 0;
  bool replicated = false;
  if (mb.n_groups % tp == 0) {
    groups_local = mb.n_groups / tp;
  } else if (mb.n_groups < tp && tp % mb.n_groups == 0) {
    groups_local = 1;
    replicated = true;
  } else {
    fail(Status::HeadsNotDivisible,
         "mamba n_groups " + std::to_string(mb.n_groups) + " and " + tp_str(tp) +
             " do not divide each other (groups are sharded when tp divides n_groups, replicated "
             "when n_groups divides tp; pick such a tp_size)");
  }
  const uint64_t x_total = mul_checked(mb.num_heads, mb.head_dim, "mamba d_inner");
  const uint64_t bc_total = mul_checked(mb.n_groups, mb.d_state, "mamba B/C channels");
  const uint64_t bc_local = mul_checked(groups_local, mb.d_state, "mamba B/C channels");
  add_projection(s, "x", x_total / tp, x_total, false);
  add_projection(s, "B", bc_local, bc_total, replicated);
  add_projection(s, "C", bc_local, bc_total, replicated);
  s.temporal_shape = {mb.num_heads / tp, mb.head_dim, mb.d_state};
}

// GDN fields: num_heads = Hv, head_dim = dv, n_groups = Hk, d_state = dk.
void derive_gdn(const MambaDesc& mb, MambaState& s) {
  require_positive(mb.num_heads, "gdn value heads (mamba.num_heads)");
  require_positive(mb.head_dim, "gdn value head dim (mamba.head_dim)");
  require_positive(mb.d_state, "gdn key head dim (mamba.d_state)");
  require_positive(mb.n_groups, "gdn key heads (mamba.n_groups)");
  const uint32_t tp = s.tp_size;
  require_divisible(mb.n_groups, tp, "gdn key heads");
  require_divisible(mb.num_heads, tp, "gdn value heads");
  const uint64_t qk_total = mul_checked(mb.n_groups, mb.d_state, "gdn key dim");
  const uint64_t v_total = mul_checked(mb.num_heads, mb.head_dim, "gdn value dim");
  add_projection(s, "Q", qk_total / tp, qk_total, false);
  add_projection(s, "K", qk_total / tp, qk_total, false);
  add_projection(s, "V", v_total / tp, v_total, false);
  s.temporal_shape = {mb.num_heads / tp, mb.head_dim, mb.d_state};
}

}  // namespace

MambaState derive_mamba_state(const ModelDesc& m, const EngineConfig& e) {
  const MambaDesc& mb = m.mamba;
  switch (mb.type) {
    case MambaType::Mamba1:
    case MambaType::Mamba2:
    case MambaType::Gdn:
      break;
    default:
      fail(Status::UnsupportedMambaType,
           std::string("model '") + m.name + "': mamba type '" + mamba_type_name(mb.type) +
               "' has no conv-state split rule (supported: mamba1, mamba2, gdn)");
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

  switch (mb.type) {
    case MambaType::Mamba1: derive_mamba1(mb, s); break;
    case MambaType::Mamba2: derive_mamba2(mb, s); break;
    default: derive_gdn(mb, s); break;
  }

  uint64_t elems = 1;
  for (uint64_t d : s.temporal_shape) elems = mul_checked(elems, d, "ssm state elements");
  s.ssm_bytes = mul_checked(elems, s.ssm_dtype_bytes, "ssm state bytes");
  add_checked(s.conv_bytes, s.ssm_bytes, "mamba page bytes");  // page_bytes() must not wrap
  return s;
}

}  // namespace pdkv::core
