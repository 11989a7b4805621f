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

  // Transport range (200-299): the executor (executor/). Values are stable.
  TimedOut = 200,            // a deadline expired (transfer, handshake, connect)
  Cancelled = 201,           // the caller cancelled the operation
  PeerLost = 202,            // the peer died, closed or stopped answering heartbeats
  Auth = 203,                // the pre-shared key proof failed (names the peer)
  Protocol = 204,            // a peer sent a malformed, unexpected or lying frame
  Transport = 205,           // the transport library failed (cause: its status code)
  Busy = 206,                // a resource is in use (e.g. deregistering a region a transfer reads)
  Shutdown = 207,            // the agent is shutting down or was closed
};

// Where an error's underlying cause comes from (pdkv_error_cause in the C API).
enum class CauseDomain : int32_t { None = 0, Ucx = 1, Errno = 2, Cuda = 3, OpenSsl = 4 };

const char* status_name(Status s) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Status status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  // An error caused by a lower layer keeps that layer's code (a ucs_status_t, an errno, ...).
  Error(Status status, std::string message, CauseDomain domain, int64_t code)
      : std::runtime_error(std::move(message)), status_(status), cause_domain_(domain),
        cause_code_(code) {}
  Status status() const noexcept { return status_; }
  CauseDomain cause_domain() const noexcept { return cause_domain_; }
  int64_t cause_code() const noexcept { return cause_code_; }

 private:
  Status status_;
  CauseDomain cause_domain_ = CauseDomain::None;
  int64_t cause_code_ = 0;
};

[[noreturn]] void fail(Status status, std::string message);

// Throws InvalidArgument("<what> must be ...") when cond is false. For cheap checks.
inline void require(bool cond, Status status, std::string_view message) {
  if (!cond) fail(status, std::string(message));
}

}  // namespace pdkv::core
