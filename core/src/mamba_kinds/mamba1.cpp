// Mamba1 (Jamba): one conv projection x of d_inner channels, temporal state (d_inner, d_state).
// Both shard by channel; nothing is replicated.
#include "kind_support.hpp"

namespace pdkv::core {

const MambaConfigKeys kMamba1JambaKeys{
    .d_state = "mamba_d_state",
    .conv_kernel = "mamba_d_conv",
    .conv_rows_include_spec = false,  // d_inner comes from mamba_expand * hidden_size
};

namespace mamba_kinds {
namespace {

class Mamba1 final : public MambaKind {
 public:
  MambaType type() const noexcept override { return MambaType::Mamba1; }
  const char* name() const noexcept override { return "mamba1"; }
  bool transferable() const noexcept override { return true; }
  size_t conv_projection_count() const noexcept override { return 1; }
  bool projection_may_replicate(size_t) const noexcept override { return false; }

  void validate(const ModelDesc& m) const override {
    require_model_field(m, "mamba.d_inner", m.mamba.d_inner);
    require_model_field(m, "mamba.d_state", m.mamba.d_state);
  }

  void derive_state(const MambaDesc& mb, MambaState& s) const override {
    require_positive(mb.d_inner, "mamba.d_inner");
    require_positive(mb.d_state, "mamba.d_state");
    require_divisible(mb.d_inner, s.tp_size, "mamba d_inner");
    const uint64_t inner_local = mb.d_inner / s.tp_size;
    add_projection(s, "x", inner_local, mb.d_inner, false);
    s.temporal_shape = {inner_local, mb.d_state};
  }

  uint64_t split_unit_channels(const MambaState&, size_t) const override { return 1; }
};

}  // namespace

const MambaKind& mamba1_kind() {
  static const Mamba1 kind;
  return kind;
}

}  // namespace mamba_kinds
}  // namespace pdkv::core
