// FNV-1a 64 over a canonical little-endian encoding; see fingerprint.hpp for the contract.
#include "pdkv/core/fingerprint.hpp"

#include <string>

namespace pdkv::core {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// Feeds bytes explicitly in little-endian order so the hash does not depend on host endianness.
class Fnv1a {
 public:
  void byte(uint8_t b) {
    h_ ^= b;
    h_ *= kFnvPrime;
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void flag(bool v) { byte(v ? 1 : 0); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));  // length prefix: "ab"+"c" != "a"+"bc"
    for (char c : s) byte(static_cast<uint8_t>(c));
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kFnvOffset;
};

}  // namespace

uint64_t model_fingerprint(const ModelDesc& m) {
  Fnv1a h;
  h.u32(kFingerprintVersion);
  h.u32(m.attention.num_kv_heads);
  h.u32(m.attention.head_size);
  h.u32(m.attention.head_size_v);
  h.flag(m.attention.use_mla);
  h.u32(m.attention.sliding_window);
  h.u32(static_cast<uint32_t>(m.mamba.type));
  h.u32(m.mamba.num_heads);
  h.u32(m.mamba.head_dim);
  h.u32(m.mamba.d_state);
  h.u32(m.mamba.n_groups);
  h.u64(m.mamba.d_inner);
  h.u32(m.mamba.conv_kernel);
  h.u32(m.mamba.chunk_size);
  h.flag(m.mamba.conv_rows_include_spec);
  h.u32(m.dtype_bytes);
  h.u32(m.default_ssm_dtype_bytes);
  h.str(m.layer_pattern);
  // Appended only when set, so models without MLA-typed layers keep their fingerprints.
  if (m.mla_head_size != 0) h.u32(m.mla_head_size);
  return h.value();
}

}  // namespace pdkv::core
