// Mamba2 (Nemotron-H, Falcon-H1, Granite-4.0-H, Zamba2): conv projections x | B | C, temporal
// state (heads, head_dim, d_state). x and the heads shard by TP. B and C hold n_groups groups of
// d_state channels: sharded when TP divides n_groups, otherwise (a one-group model, the only
// other case vLLM's MambaMixer2 accepts) every rank keeps a copy of the group, so a group is the
// unit the split never cuts and B/C bytes need not scale with TP.
#include "kind_support.hpp"

#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

const MambaConfigKeys kMamba2NemotronHKeys{
    .num_heads = "mamba_num_heads",
    .head_dim = "mamba_head_dim",
    .d_state = "ssm_state_size",
    .n_groups = "n_groups",
    .conv_kernel = "conv_kernel",
    .chunk_size = "chunk_size",
    .conv_rows_include_spec = true,
};

// Falcon-H1 and Granite-4.0-H name their keys alike; neither adds speculative tokens to the conv.
const MambaConfigKeys kMamba2MambaPrefixedKeys{
    .num_heads = "mamba_n_heads",
    .head_dim = "mamba_d_head",
    .d_state = "mamba_d_state",
    .n_groups = "mamba_n_groups",
    .conv_kernel = "mamba_d_conv",
    .chunk_size = "mamba_chunk_size",
    .conv_rows_include_spec = false,
};

namespace mamba_kinds {
namespace {

constexpr size_t kB = 1;
constexpr size_t kC = 2;

class Mamba2 final : public MambaKind {
 public:
  MambaType type() const noexcept override { return MambaType::Mamba2; }
  const char* name() const noexcept override { return "mamba2"; }
  bool transferable() const noexcept override { return true; }
  size_t conv_projection_count() const noexcept override { return 3; }
  bool projection_may_replicate(size_t index) const noexcept override {
    return index == kB || index == kC;
  }

  void validate(const ModelDesc& m) const override {
    require_model_field(m, "mamba.num_heads", m.mamba.num_heads);
    require_model_field(m, "mamba.head_dim", m.mamba.head_dim);
    require_model_field(m, "mamba.d_state", m.mamba.d_state);
    require_model_field(m, "mamba.n_groups", m.mamba.n_groups);
  }

  void derive_state(const MambaDesc& mb, MambaState& s) const override {
    require_positive(mb.num_heads, "mamba.num_heads");
    require_positive(mb.head_dim, "mamba.head_dim");
    require_positive(mb.d_state, "mamba.d_state");
    require_positive(mb.n_groups, "mamba.n_groups");
    const uint32_t tp = s.tp_size;
    require_divisible(mb.num_heads, tp, "mamba num_heads");
    uint64_t groups_local = 0;
    bool replicated = false;
    if (mb.n_groups % tp == 0) {
      groups_local = mb.n_groups / tp;
    } else if (mb.n_groups == 1) {
      groups_local = 1;
      replicated = true;
    } else {
      // vLLM replicates groups only for a one-group model: MambaMixer2 asserts that tp divides
      // n_groups or n_groups is 1 (its weight loader copies group 0 to every rank, nothing
      // else), so an engine with, e.g., n_groups 8 at TP16 never starts and has no layout.
      fail(Status::HeadsNotDivisible,
           "mamba n_groups " + std::to_string(mb.n_groups) + " is not divisible by " + tp_str(tp) +
               " (groups are sharded when tp divides n_groups and replicated only for one group: "
               "vLLM's MambaMixer2 asserts that n_groups must be 1 otherwise; pick a tp_size that divides " +
               std::to_string(mb.n_groups) + ")");
    }
    const uint64_t x_total = mul_checked(mb.num_heads, mb.head_dim, "mamba d_inner");
    const uint64_t bc_total = mul_checked(mb.n_groups, mb.d_state, "mamba B/C channels");
    const uint64_t bc_local = mul_checked(groups_local, mb.d_state, "mamba B/C channels");
    add_projection(s, "x", x_total / tp, x_total, false);
    add_projection(s, "B", bc_local, bc_total, replicated);
    add_projection(s, "C", bc_local, bc_total, replicated);
    s.temporal_shape = {mb.num_heads / tp, mb.head_dim, mb.d_state};
  }

  // A B/C group is d_state channels (temporal_shape[2]); x shards by channel.
  uint64_t split_unit_channels(const MambaState& s, size_t index) const override {
    return projection_may_replicate(index) ? s.temporal_shape.at(2) : 1;
  }
};

}  // namespace

const MambaKind& mamba2_kind() {
  static const Mamba2 kind;
  return kind;
}

}  // namespace mamba_kinds
}  // namespace pdkv::core
