// The one table from MambaType to its module. A new kind is one line here plus its module.
#include <string>

#include "kind_support.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

namespace {

using KindGetter = const MambaKind& (*)();

// Indexed by the enum value; kinds_match_enum_order() below keeps the order honest.
constexpr KindGetter kKinds[] = {
    mamba_kinds::none_kind,        mamba_kinds::mamba1_kind, mamba_kinds::mamba2_kind,
    mamba_kinds::gdn_kind,         mamba_kinds::short_conv_kind, mamba_kinds::linear_kind,
    mamba_kinds::kda_kind,
};
constexpr size_t kKindCount = sizeof(kKinds) / sizeof(kKinds[0]);

}  // namespace

const MambaKind& mamba_kind(MambaType t) {
  const auto v = static_cast<int32_t>(t);
  if (v < 0 || static_cast<size_t>(v) >= kKindCount) {
    fail(Status::InvalidArgument, "mamba type value " + std::to_string(v) +
                                      " is not a known kind (0.." +
                                      std::to_string(kKindCount - 1) + ")");
  }
  const MambaKind& kind = kKinds[v]();
  if (kind.type() != t) {  // the table and the enum disagree: a programming error, said loudly
    fail(Status::Internal, "mamba kind table entry " + std::to_string(v) + " is '" +
                               kind.name() + "'");
  }
  return kind;
}

MambaType last_mamba_type() noexcept { return static_cast<MambaType>(kKindCount - 1); }

bool is_transferable_mamba_type(MambaType t) noexcept {
  const auto v = static_cast<int32_t>(t);
  if (v < 0 || static_cast<size_t>(v) >= kKindCount) return false;
  return kKinds[v]().transferable();
}

std::string transferable_mamba_kind_names() {
  std::string names;
  for (KindGetter get : kKinds) {
    if (!get().transferable()) continue;
    if (!names.empty()) names += ", ";
    names += get().name();
  }
  return names;
}

}  // namespace pdkv::core
