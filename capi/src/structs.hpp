// Output structs that grow: the library builds a complete, current-size value and copies only the
// prefix the caller declared in struct_size, so an older caller's smaller struct is never
// overrun and a newer field is simply absent for it.
#pragma once

#include <cstring>
#include <type_traits>
#include <vector>

#include "boundary.hpp"

namespace pdkv::capi {

template <typename T>
void write_struct_prefix(T* out, T full, size_t min_size, const char* type_name) {
  require_struct_size(out->struct_size, min_size, sizeof(T), type_name);
  full.struct_size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &full, out->struct_size);
}

// Appends an element with every byte zero, padding included, to a list the library hands out in
// place, for the caller to fill field by field: neither `T{}` nor copying a value is sure to
// write the padding (with GCC 12 a value-initialised element kept the allocator's bytes there).
template <typename T>
T& append_zeroed(std::vector<T>& list) {
  static_assert(std::is_trivially_copyable_v<T>);
  T& item = list.emplace_back();
  std::memset(static_cast<void*>(&item), 0, sizeof item);
  return item;
}

// OutOfBounds naming the index and the count.
inline void require_index(size_t index, size_t count, const char* what) {
  if (index >= count) {
    pdkv::core::fail(pdkv::core::Status::OutOfBounds, std::string(what) + " index " + std::to_string(index) +
                                                          " is out of range (count " + std::to_string(count) + ")");
  }
}

}  // namespace pdkv::capi
