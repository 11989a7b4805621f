// Model fingerprint: a stable 64-bit hash of the parts of a ModelDesc that change transfer
// geometry, exchanged in the handshake so a P/D pair serving different models (or the same
// model with a different head layout) is rejected before any byte moves.
//
// Stability contract (the value travels between processes and pdkv versions):
//  * Hash = FNV-1a 64 over a canonical byte string: kFingerprintVersion, then each field below
//    in this order, integers as fixed-width little-endian, the layer pattern as u32 length + bytes.
//  * Included: attention {num_kv_heads, head_size, head_size_v, use_mla, sliding_window},
//    mamba {type, num_heads, head_dim, d_state, n_groups, d_inner, conv_kernel, chunk_size,
//    conv_rows_include_spec}, dtype_bytes, default_ssm_dtype_bytes, layer_pattern.
//  * Excluded on purpose: name and source. Two checkpoints with the same geometry (a BF16 and a
//    re-uploaded copy, a fine-tune) can exchange state; a renamed repo must not break serving.
//  * Engine settings (TP, dtype overrides, block sizes) are not part of the model: they are
//    advertised separately in EngineMetadata and checked by the handshake.
//  * Changing the included fields or their encoding requires bumping kFingerprintVersion.
#pragma once

#include <cstdint>

#include "pdkv/core/model.hpp"

namespace pdkv::core {

inline constexpr uint32_t kFingerprintVersion = 1;

uint64_t model_fingerprint(const ModelDesc& m);

}  // namespace pdkv::core
