// The C boundary: turns core exceptions into (pdkv_status_t, pdkv_error_t*). Every extern "C"
// function body runs inside guard(), so no exception ever crosses into C, Rust, Go or Python.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "pdkv.h"
#include "pdkv/core/error.hpp"

struct pdkv_error {
  pdkv_status_t status;
  std::string message;
  int32_t cause_domain = PDKV_CAUSE_NONE;
  int64_t cause_code = 0;
};

namespace pdkv::capi {

// Stores a new error in *err (when err is non-NULL) and returns its status.
pdkv_status_t set_error(pdkv_error_t** err, pdkv_status_t status, std::string message,
                        int32_t cause_domain = PDKV_CAUSE_NONE, int64_t cause_code = 0) noexcept;

// Runs body() and maps every exception to a status. body returns void.
template <typename F>
pdkv_status_t guard(pdkv_error_t** err, F&& body) noexcept {
  if (err != nullptr) *err = nullptr;
  try {
    body();
    return PDKV_OK;
  } catch (const pdkv::core::Error& e) {
    return set_error(err, static_cast<pdkv_status_t>(e.status()), e.what(),
                     static_cast<int32_t>(e.cause_domain()), e.cause_code());
  } catch (const std::bad_alloc&) {
    return set_error(err, PDKV_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return set_error(err, PDKV_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return set_error(err, PDKV_ERR_INTERNAL, "internal error: unknown exception");
  }
}

// Throws NullPointer naming the argument when p is NULL.
inline void require_non_null(const void* p, const char* arg_name) {
  if (p == nullptr) pdkv::core::fail(pdkv::core::Status::NullPointer, std::string(arg_name) + " is NULL");
}

// Checks an options struct's struct_size against [min_size, sizeof(T)].
void require_struct_size(size_t got, size_t min_size, size_t current_size, const char* type_name);

}  // namespace pdkv::capi
