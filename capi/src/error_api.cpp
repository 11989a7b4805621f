#include <cstdio>

#include "boundary.hpp"

using pdkv::core::Status;

static_assert(static_cast<int>(Status::Internal) == PDKV_ERR_INTERNAL, "status enums drifted");
static_assert(static_cast<int>(Status::Checksum) == PDKV_ERR_CHECKSUM, "status enums drifted");
static_assert(static_cast<int>(Status::TpNotDivisible) == PDKV_ERR_TP_NOT_DIVISIBLE, "status enums drifted");
static_assert(static_cast<int>(Status::TimedOut) == PDKV_ERR_TIMED_OUT, "status enums drifted");
static_assert(static_cast<int>(Status::Cancelled) == PDKV_ERR_CANCELLED, "status enums drifted");
static_assert(static_cast<int>(Status::PeerLost) == PDKV_ERR_PEER_LOST, "status enums drifted");
static_assert(static_cast<int>(Status::Auth) == PDKV_ERR_AUTH, "status enums drifted");
static_assert(static_cast<int>(Status::Protocol) == PDKV_ERR_PROTOCOL, "status enums drifted");
static_assert(static_cast<int>(Status::Transport) == PDKV_ERR_TRANSPORT, "status enums drifted");
static_assert(static_cast<int>(Status::Busy) == PDKV_ERR_BUSY, "status enums drifted");
static_assert(static_cast<int>(Status::Shutdown) == PDKV_ERR_SHUTDOWN, "status enums drifted");
static_assert(static_cast<int>(pdkv::core::CauseDomain::OpenSsl) == PDKV_CAUSE_OPENSSL, "cause enums drifted");

namespace pdkv::capi {

pdkv_status_t set_error(pdkv_error_t** err, pdkv_status_t status, std::string message,
                        int32_t cause_domain, int64_t cause_code) noexcept {
  if (err != nullptr) {
    try {
      *err = new pdkv_error{status, std::move(message), cause_domain, cause_code};
    } catch (...) {
      *err = nullptr;  // out of memory while reporting: the status still says what happened
    }
  }
  return status;
}

void require_struct_size(size_t got, size_t min_size, size_t current_size, const char* type_name) {
  // Every size a struct was ever published at is a multiple of alignof(size_t) (each begins with
  // a size_t), so any other value ends inside a field: half of it would be read from the caller
  // and half taken as zero. Refuse it rather than read a torn value.
  if (got % alignof(size_t) != 0) {
    pdkv::core::fail(Status::StructSize, std::string(type_name) + ".struct_size = " + std::to_string(got) +
                                             " is not a multiple of " + std::to_string(alignof(size_t)) +
                                             ", so it is no published size of the struct: set it to sizeof(" +
                                             type_name + ")");
  }
  if (got < min_size || got > current_size) {
    pdkv::core::fail(Status::StructSize, std::string(type_name) + ".struct_size = " + std::to_string(got) +
                                             " is not in [" + std::to_string(min_size) + ", " +
                                             std::to_string(current_size) +
                                             "]: set it to sizeof(" + type_name + ")");
  }
}

}  // namespace pdkv::capi

extern "C" {

PDKV_API pdkv_status_t pdkv_error_status(const pdkv_error_t* err) { return err ? err->status : PDKV_OK; }

PDKV_API const char* pdkv_error_message(const pdkv_error_t* err) { return err ? err->message.c_str() : ""; }

PDKV_API void pdkv_error_free(pdkv_error_t* err) { delete err; }

PDKV_API void pdkv_error_cause(const pdkv_error_t* err, int32_t* domain, int64_t* code) {
  if (domain != nullptr) *domain = err ? err->cause_domain : PDKV_CAUSE_NONE;
  if (code != nullptr) *code = err ? err->cause_code : 0;
}

PDKV_API const char* pdkv_status_name(pdkv_status_t status) {
  // core::status_name answers "PDKV_ERR_UNKNOWN" for any value outside the enum.
  return pdkv::core::status_name(static_cast<Status>(status));
}

PDKV_API uint32_t pdkv_version(void) {
  return (PDKV_VERSION_MAJOR << 16) | (PDKV_VERSION_MINOR << 8) | PDKV_VERSION_PATCH;
}

#define PDKV_STR2(x) #x
#define PDKV_STR(x) PDKV_STR2(x)
PDKV_API const char* pdkv_version_string(void) {
  return PDKV_STR(PDKV_VERSION_MAJOR) "." PDKV_STR(PDKV_VERSION_MINOR) "." PDKV_STR(PDKV_VERSION_PATCH);
}

}  // extern "C"
