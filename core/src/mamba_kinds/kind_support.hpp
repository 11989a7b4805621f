// Shared by the Mamba kind modules in this folder: the checks and the page-layout step every
// kind's rules are written with. Internal to the core.
#pragma once

#include <cstdint>
#include <string>

#include "pdkv/core/mamba_kind.hpp"

namespace pdkv::core::mamba_kinds {

// validate(): fails with InvalidArgument "model '<name>': <field> = 0 must be > 0".
void require_model_field(const ModelDesc& m, const char* field, uint64_t value);

// derive_state(): fails with InvalidArgument "<what> = 0 must be > 0".
void require_positive(uint64_t value, const char* what);

// derive_state(): fails with HeadsNotDivisible unless `value` is a multiple of `tp`, naming both
// values and the fix.
void require_divisible(uint64_t value, uint32_t tp, const char* what);

std::string tp_str(uint32_t tp);

// Appends one conv projection at the end of the page, keeping the DS layout contiguous (each
// projection's bytes follow the previous one's), and updates the state's conv totals.
void add_projection(MambaState& s, const char* name, uint64_t dim_local, uint64_t dim_total,
                    bool replicated);

// The kinds, one object per module, for the registry in registry.cpp.
const MambaKind& none_kind();
const MambaKind& mamba1_kind();
const MambaKind& mamba2_kind();
const MambaKind& gdn_kind();
const MambaKind& short_conv_kind();
const MambaKind& linear_kind();
const MambaKind& kda_kind();

}  // namespace pdkv::core::mamba_kinds
