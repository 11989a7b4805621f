#include "demo_pattern.hpp"

#include <bit>
#include <cstring>

namespace pdkv::cli::demo {

static_assert(std::endian::native == std::endian::little, "the word fast paths assume little-endian bytes");

namespace {

// splitmix64's finaliser over (seed + word index): every 8-byte word of a stream is
// independent of its neighbours, and computing one costs two multiplies.
inline uint64_t word(uint64_t seed, uint64_t index) {
  uint64_t z = seed + index * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint8_t byte_at(uint64_t seed, uint64_t offset) {
  return static_cast<uint8_t>(word(seed, offset >> 3) >> (8 * (offset & 7)));
}

}  // namespace

Stream Stream::of(uint32_t side, uint32_t rank, uint32_t region) {
  Stream s;
  s.seed = word(0x5044'4B56ull, (uint64_t{side} << 48) ^ (uint64_t{rank} << 24) ^ region);
  return s;
}

void fill(uint8_t* dst, Stream s, uint64_t offset, uint64_t len) {
  uint64_t i = 0;
  for (; i < len && ((offset + i) & 7) != 0; ++i) dst[i] = byte_at(s.seed, offset + i);
  for (; i + 8 <= len; i += 8) {
    const uint64_t w = word(s.seed, (offset + i) >> 3);  // little-endian: byte k is bits 8k..8k+7
    std::memcpy(dst + i, &w, 8);
  }
  for (; i < len; ++i) dst[i] = byte_at(s.seed, offset + i);
}

std::optional<uint64_t> first_mismatch(const uint8_t* src, Stream s, uint64_t offset, uint64_t len) {
  uint64_t i = 0;
  for (; i < len && ((offset + i) & 7) != 0; ++i) {
    if (src[i] != byte_at(s.seed, offset + i)) return i;
  }
  for (; i + 8 <= len; i += 8) {
    uint64_t got;
    std::memcpy(&got, src + i, 8);
    if (got != word(s.seed, (offset + i) >> 3)) {
      for (uint64_t k = 0; k < 8; ++k) {
        if (src[i + k] != byte_at(s.seed, offset + i + k)) return i + k;
      }
    }
  }
  for (; i < len; ++i) {
    if (src[i] != byte_at(s.seed, offset + i)) return i;
  }
  return std::nullopt;
}

}  // namespace pdkv::cli::demo
