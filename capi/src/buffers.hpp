// Copying variable-length results into caller-provided buffers (the "capacity + out count"
// convention): the needed count is always reported, so a caller can size the buffer and retry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pdkv/core/error.hpp"

namespace pdkv::capi {

// Writes values.size() to *out_count, then copies values into buf[0..capacity). buf may be NULL
// only when capacity is 0. BufferTooSmall names the needed and the given count.
template <typename T>
void copy_to_buffer(const std::vector<T>& values, T* buf, size_t capacity, size_t* out_count,
                    const char* buf_name) {
  *out_count = values.size();
  if (values.size() > capacity) {
    pdkv::core::fail(pdkv::core::Status::BufferTooSmall,
                     std::string(buf_name) + " holds " + std::to_string(capacity) + " entries but " +
                         std::to_string(values.size()) + " are needed: pass a capacity of at least " +
                         std::to_string(values.size()));
  }
  if (capacity > 0 && buf == nullptr) {
    pdkv::core::fail(pdkv::core::Status::NullPointer,
                     std::string(buf_name) + " is NULL but its capacity is " + std::to_string(capacity));
  }
  for (size_t i = 0; i < values.size(); ++i) buf[i] = values[i];
}

}  // namespace pdkv::capi
