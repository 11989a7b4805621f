// The fuzz input read as bounded values (plan_fuzz, engine_request_fuzz).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pdkv::fuzzing {

// Reads bounded values from the input; past the end everything is 0.
struct Bytes {
  const uint8_t* p;
  size_t n;
  // One byte, reduced modulo mod (0 when mod is 0).
  uint64_t next(uint64_t mod) {
    uint64_t v = 0;
    if (n > 0) {
      v = *p++;
      --n;
    }
    return mod == 0 ? 0 : v % mod;
  }
  // Two bytes, for ranges past 256.
  uint64_t wide(uint64_t mod) { return mod == 0 ? 0 : (next(256) << 8 | next(256)) % mod; }
};

}  // namespace pdkv::fuzzing
