// Everything pdkv knows about one kind of Mamba-like layer, behind one interface.
//
// Each MambaType has exactly one module under core/src/mamba_kinds/ (mamba1.cpp, mamba2.cpp,
// gdn.cpp, and unsupported.cpp for the kinds that are described but not transferred). The rest
// of the core asks this interface instead of switching on the type: model validation, the
// per-rank state derivation, the conv split's sharding units, the metadata decoder's range and
// projection-count checks, the handshake's TP-scaling rule and the config.json readers. Adding a
// kind means: its enum value in model.hpp (and the C header), its module, a preset and a test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "pdkv/core/mamba_state.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::core {

// The config.json keys one model family uses for this kind's MambaDesc fields. nullptr: the
// family does not state that field (it is derived elsewhere or unused by the kind). Keys are read
// as unsigned integers; `chunk_size` is optional (absent means the default).
struct MambaConfigKeys {
  const char* num_heads = nullptr;
  const char* head_dim = nullptr;
  const char* d_state = nullptr;
  const char* n_groups = nullptr;
  const char* conv_kernel = nullptr;
  const char* chunk_size = nullptr;
  bool conv_rows_include_spec = false;  // the family adds speculative tokens to the conv rows
};

class MambaKind {
 public:
  virtual ~MambaKind() = default;

  virtual MambaType type() const noexcept = 0;
  // Lower-case name used in messages, JSON and the CLI ("mamba2").
  virtual const char* name() const noexcept = 0;
  // Whether pdkv derives a conv/temporal split for this kind, i.e. whether its state can move
  // between engines of different TP. The others are described and then refused with a clear
  // UnsupportedMambaType error instead of being misread.
  virtual bool transferable() const noexcept = 0;
  // Conv projections in page order (x | B | C, Q | K | V, x); 0 for a kind that is not
  // transferable (the metadata decoder then accepts 1..kMaxConvProjections).
  virtual size_t conv_projection_count() const noexcept = 0;
  // Whether projection `index` may be a per-rank copy rather than a shard (Mamba2's B and C when
  // n_groups < TP): its bytes then need not scale with TP, which the handshake must allow.
  virtual bool projection_may_replicate(size_t index) const noexcept = 0;

  // Refuses a ModelDesc whose fields this kind needs but that are unset (InvalidArgument naming
  // the model and the field). Called by validate_model.
  virtual void validate(const ModelDesc& m) const = 0;
  // Appends this kind's conv projections to `s` (whose tp_size, conv_rows and dtype sizes are
  // set) and sets its temporal shape. Errors: HeadsNotDivisible naming both values, Overflow.
  // Only called for transferable kinds.
  virtual void derive_state(const MambaDesc& mb, MambaState& s) const = 0;
  // Channels per sharding unit of projection `index`: the smallest run of channels sharding
  // never splits (a Mamba2 group for B and C, one channel otherwise).
  virtual uint64_t split_unit_channels(const MambaState& s, size_t index) const = 0;
};

// The module of `t`. Every MambaType value has one (None included, as a non-transferable kind);
// a value outside the enum fails with InvalidArgument naming it.
const MambaKind& mamba_kind(MambaType t);
// The largest MambaType value: the metadata decoder refuses anything above it.
MambaType last_mamba_type() noexcept;
// Whether `t` names a kind whose state pdkv transfers; false for values outside the enum.
bool is_transferable_mamba_type(MambaType t) noexcept;
// "mamba1, mamba2, gdn": the transferable kinds, for error messages.
std::string transferable_mamba_kind_names();

// Reads `keys` from a family's config into `mb` through `read_u32(key)` / `read_u32_or(key,
// fallback)`; the caller supplies the readers so that the config.json parser stays the only
// code that knows JSON. Sets mb.type to `type`.
template <typename ReadU32, typename ReadU32Or>
void read_mamba_config_keys(MambaType type, const MambaConfigKeys& keys, ReadU32 read_u32,
                            ReadU32Or read_u32_or, MambaDesc& mb) {
  mb.type = type;
  if (keys.num_heads != nullptr) mb.num_heads = read_u32(keys.num_heads);
  if (keys.head_dim != nullptr) mb.head_dim = read_u32(keys.head_dim);
  if (keys.d_state != nullptr) mb.d_state = read_u32(keys.d_state);
  if (keys.n_groups != nullptr) mb.n_groups = read_u32(keys.n_groups);
  if (keys.conv_kernel != nullptr) mb.conv_kernel = read_u32(keys.conv_kernel);
  if (keys.chunk_size != nullptr) mb.chunk_size = read_u32_or(keys.chunk_size, 0u);
  mb.conv_rows_include_spec = keys.conv_rows_include_spec;
}

// config.json key sets of the families pdkv parses, one per (kind, naming scheme); defined in
// the kind's module.
extern const MambaConfigKeys kMamba2NemotronHKeys;     // Nemotron-H: mamba_num_heads, n_groups, ...
extern const MambaConfigKeys kMamba2MambaPrefixedKeys; // Falcon-H1, Granite-4.0-H: mamba_n_heads, ...
extern const MambaConfigKeys kGdnQwenKeys;             // Qwen3-Next, Qwen3.5: linear_num_value_heads, ...
extern const MambaConfigKeys kMamba1JambaKeys;         // Jamba: mamba_d_state, mamba_d_conv

}  // namespace pdkv::core
