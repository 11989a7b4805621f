// Errors raised by the core. Every failure carries a Status (mirrored 1:1 by pdkv_status_t in
// capi/include/pdkv.h) and a human message that names the offending value(s) and, where there
// is one, the fix. The C API catches these at the boundary and turns them into pdkv_error_t.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pdkv::core {

// Keep the numeric values in sync with pdkv_status_t (capi checks this with static_asserts).
enum class Status : int32_t {
  Ok = 0,
  InvalidArgument = 1,       // a value is out of its domain (zero sizes, rank >= tp, ...)
  NullPointer = 2,           // C API only: a required pointer was NULL
  StructSize = 3,            // C API only: an options struct's struct_size is wrong
  TpNotDivisible = 4,        // P and D tensor-parallel sizes do not divide each other
  HeadsNotDivisible = 5,     // KV heads / Mamba heads / groups not divisible by TP
  UnsupportedMambaType = 6,  // SHORT_CONV, LINEAR, KDA, ... have no split rule
  UnsupportedLayout = 7,     // conv state layout other than DS, KV layout other than HND
  Overflow = 8,              // a byte count does not fit in 64 bits
  BufferTooSmall = 9,        // C API only: a caller buffer is too small
  Parse = 10,                // malformed config.json / metadata bytes
  Io = 11,                   // a file could not be read (C API / CLI only)
  NotFound = 12,             // unknown preset name, unknown key
  Incompatible = 13,         // a (local, remote) engine pair cannot be served
  Coverage = 14,             // a transfer plan would not move every byte exactly once
  OutOfBounds = 15,          // a read would leave a registered region
  Checksum = 16,             // metadata checksum mismatch
  Internal = 17,             // a bug in pdkv (or an unexpected exception)
};

const char* status_name(Status s) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Status status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

[[noreturn]] void fail(Status status, std::string message);

// Throws InvalidArgument("<what> must be ...") when cond is false. For cheap checks.
inline void require(bool cond, Status status, std::string_view message) {
  if (!cond) fail(status, std::string(message));
}

}  // namespace pdkv::core
