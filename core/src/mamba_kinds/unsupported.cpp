// Kinds pdkv can describe but not transfer: no Mamba state at all (None), and layers whose conv /
// recurrent state split across TP ranks is not derived (LFM2's short conv, lightning / linear
// attention, Kimi delta attention). A model of these kinds is parsed and validated, then refused
// by the state derivation with UnsupportedMambaType, never misread as one of the others.
#include "kind_support.hpp"

#include "pdkv/core/error.hpp"

namespace pdkv::core::mamba_kinds {
namespace {

class Untransferable final : public MambaKind {
 public:
  Untransferable(MambaType type, const char* name) : type_(type), name_(name) {}
  MambaType type() const noexcept override { return type_; }
  const char* name() const noexcept override { return name_; }
  bool transferable() const noexcept override { return false; }
  size_t conv_projection_count() const noexcept override { return 0; }
  bool projection_may_replicate(size_t) const noexcept override { return false; }
  // Nothing to require: the derivation refuses the kind with its own clear error.
  void validate(const ModelDesc&) const override {}
  void derive_state(const MambaDesc&, MambaState&) const override {
    fail(Status::UnsupportedMambaType,
         std::string("mamba type '") + name_ + "' has no conv-state split rule");
  }
  uint64_t split_unit_channels(const MambaState&, size_t) const override {
    fail(Status::UnsupportedMambaType,
         std::string("mamba type '") + name_ + "' has no conv-state split rule");
  }

 private:
  MambaType type_;
  const char* name_;
};

}  // namespace

const MambaKind& none_kind() {
  static const Untransferable kind(MambaType::None, "none");
  return kind;
}
const MambaKind& short_conv_kind() {
  static const Untransferable kind(MambaType::ShortConv, "short_conv");
  return kind;
}
const MambaKind& linear_kind() {
  static const Untransferable kind(MambaType::Linear, "linear");
  return kind;
}
const MambaKind& kda_kind() {
  static const Untransferable kind(MambaType::Kda, "kda");
  return kind;
}

}  // namespace pdkv::core::mamba_kinds
