// Overflow-checked arithmetic for byte counts. Sizes come from users and from the network;
// a wrapped multiplication would silently produce a small, valid-looking descriptor.
#pragma once

#include <cstdint>
#include <string>

#include "pdkv/core/error.hpp"

namespace pdkv::core {

// The failure path of the checks below, out of line and cold so that the checks themselves stay
// small enough to inline into hot loops (plan compilation runs them per read).
[[noreturn, gnu::cold, gnu::noinline]] void fail_overflow(const char* what, uint64_t a, uint64_t b,
                                                          char op);

// a * b, or Status::Overflow naming `what` and both operands.
inline uint64_t mul_checked(uint64_t a, uint64_t b, const char* what) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]] fail_overflow(what, a, b, '*');
  return r;
}

inline uint64_t add_checked(uint64_t a, uint64_t b, const char* what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) [[unlikely]] fail_overflow(what, a, b, '+');
  return r;
}

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace pdkv::core
