// Gated delta net (Qwen3-Next, Qwen3.5): conv projections Q | K | V, temporal state (value heads,
// value head dim, key head dim). MambaDesc fields: num_heads = value heads Hv, head_dim = value
// head dim dv, n_groups = key heads Hk, d_state = key head dim dk. Key and value heads both shard
// by TP; nothing is replicated.
#include "kind_support.hpp"

#include "pdkv/core/checked_math.hpp"

namespace pdkv::core {

const MambaConfigKeys kGdnQwenKeys{
    .num_heads = "linear_num_value_heads",
    .head_dim = "linear_value_head_dim",
    .d_state = "linear_key_head_dim",
    .n_groups = "linear_num_key_heads",
    .conv_kernel = "linear_conv_kernel_dim",
    .conv_rows_include_spec = true,
};

namespace mamba_kinds {
namespace {

class Gdn final : public MambaKind {
 public:
  MambaType type() const noexcept override { return MambaType::Gdn; }
  const char* name() const noexcept override { return "gdn"; }
  bool transferable() const noexcept override { return true; }
  size_t conv_projection_count() const noexcept override { return 3; }
  bool projection_may_replicate(size_t) const noexcept override { return false; }

  void validate(const ModelDesc& m) const override {
    require_model_field(m, "mamba.num_heads", m.mamba.num_heads);
    require_model_field(m, "mamba.head_dim", m.mamba.head_dim);
    require_model_field(m, "mamba.d_state", m.mamba.d_state);
    require_model_field(m, "mamba.n_groups", m.mamba.n_groups);
  }

  void derive_state(const MambaDesc& mb, MambaState& s) const override {
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

  uint64_t split_unit_channels(const MambaState&, size_t) const override { return 1; }
};

}  // namespace

const MambaKind& gdn_kind() {
  static const Gdn kind;
  return kind;
}

}  // namespace mamba_kinds
}  // namespace pdkv::core
